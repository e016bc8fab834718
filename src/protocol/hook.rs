//! Hook names: the lifecycle points an embedder calls and a manifest names.

use std::fmt;
use std::str::FromStr;

/// One lifecycle point. The wire spelling (`as_str`) is also the manifest key
/// under `[hooks]` and the `type` of the request.
///
/// The first nine are the context-engine hooks (`script-protocol.md`); the
/// rest are the agent-loop hooks of `agent-hooks.md`, whose requests travel
/// as [`crate::protocol::AgentRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookName {
    Bootstrap,
    Ingest,
    Assemble,
    Compact,
    AfterTurn,
    TransformToolResult,
    PrepareSubagent,
    MergeSubagent,
    /// LibreFang's generic event hook; its request is passed through as given.
    OnEvent,
    MessageReceived,
    LlmRequestPre,
    ToolCallPre,
    ToolCallPost,
    AgentEventSent,
    MemoryReadPre,
    MemoryReadPost,
    MemoryWritePre,
    MemoryWritePost,
    TriggerAppend,
    TriggerFire,
    Heartbeat,
    HealthCheck,
    ConfigChanged,
    Communicate,
    RunSchedule,
    /// A registered tool called through the host (`call_tool(name, args)`).
    CallTool,
    /// The content of a symbolic vfs node this plugin owns, computed now.
    ReadSymbolic,
    /// Asked once when the agent loop starts the plugin: it loads, starts
    /// and answers what it registers (tools, schedules, frontend, …). Used
    /// by plugins whose registrations are only known by running them
    /// (FaustBot's `register_*` methods, through the shim).
    Register,
    /// The plugin is being taken out (reload, disable, shutdown).
    Unload,
}

impl HookName {
    /// The context-engine hooks, in lifecycle order.
    pub const CONTEXT: [HookName; 9] = [
        HookName::Bootstrap,
        HookName::Ingest,
        HookName::Assemble,
        HookName::Compact,
        HookName::AfterTurn,
        HookName::TransformToolResult,
        HookName::PrepareSubagent,
        HookName::MergeSubagent,
        HookName::OnEvent,
    ];

    /// The agent-loop hooks, in the order of the spec's table.
    pub const AGENT: [HookName; 20] = [
        HookName::MessageReceived,
        HookName::LlmRequestPre,
        HookName::ToolCallPre,
        HookName::ToolCallPost,
        HookName::AgentEventSent,
        HookName::MemoryReadPre,
        HookName::MemoryReadPost,
        HookName::MemoryWritePre,
        HookName::MemoryWritePost,
        HookName::TriggerAppend,
        HookName::TriggerFire,
        HookName::Heartbeat,
        HookName::HealthCheck,
        HookName::ConfigChanged,
        HookName::Communicate,
        HookName::RunSchedule,
        HookName::CallTool,
        HookName::ReadSymbolic,
        HookName::Register,
        HookName::Unload,
    ];

    /// Every hook: the context hooks, then the agent-loop hooks.
    pub const ALL: [HookName; 29] = {
        let mut all = [HookName::Bootstrap; 29];
        let mut i = 0;
        while i < 9 {
            all[i] = HookName::CONTEXT[i];
            i += 1;
        }
        while i < 29 {
            all[i] = HookName::AGENT[i - 9];
            i += 1;
        }
        all
    };

    pub fn as_str(self) -> &'static str {
        match self {
            HookName::Bootstrap => "bootstrap",
            HookName::Ingest => "ingest",
            HookName::Assemble => "assemble",
            HookName::Compact => "compact",
            HookName::AfterTurn => "after_turn",
            HookName::TransformToolResult => "transform_tool_result",
            HookName::PrepareSubagent => "prepare_subagent",
            HookName::MergeSubagent => "merge_subagent",
            HookName::OnEvent => "on_event",
            HookName::MessageReceived => "message_received",
            HookName::LlmRequestPre => "llm_request_pre",
            HookName::ToolCallPre => "tool_call_pre",
            HookName::ToolCallPost => "tool_call_post",
            HookName::AgentEventSent => "agent_event_sent",
            HookName::MemoryReadPre => "memory_read_pre",
            HookName::MemoryReadPost => "memory_read_post",
            HookName::MemoryWritePre => "memory_write_pre",
            HookName::MemoryWritePost => "memory_write_post",
            HookName::TriggerAppend => "trigger_append",
            HookName::TriggerFire => "trigger_fire",
            HookName::Heartbeat => "heartbeat",
            HookName::HealthCheck => "health_check",
            HookName::ConfigChanged => "config_changed",
            HookName::Communicate => "communicate",
            HookName::RunSchedule => "run_schedule",
            HookName::CallTool => "call_tool",
            HookName::ReadSymbolic => "read_symbolic",
            HookName::Register => "register",
            HookName::Unload => "unload",
        }
    }

    /// The fields of the request the host sends for this hook, besides
    /// `type` (key order on the wire is not part of the contract). A plugin
    /// that reads another name (`tool_name` for `tool_call_pre`) reads
    /// nothing. Context hooks send
    /// their [`crate::protocol::HookRequest`] structs; agent-loop hooks the
    /// fields the agent engine builds (`agent::engine`). Requests given by
    /// hand (`ctxhost hook`, test-hook, `/api/agent-hooks/{hook}`) may carry
    /// more, passed through unchanged. `docs/reference/hooks.md` documents
    /// exactly these (checked by `tests/docs_reference.rs`).
    pub const fn request_fields(self) -> &'static [&'static str] {
        match self {
            HookName::Bootstrap => &["context_window_tokens", "stable_prefix_mode", "max_recall_results"],
            HookName::Ingest => &["agent_id", "message", "peer_id"],
            HookName::Assemble => &["agent_id", "system_prompt", "messages", "context_window_tokens"],
            HookName::Compact => &["agent_id", "messages", "model", "context_window_tokens", "token_pressure"],
            HookName::AfterTurn => &["agent_id", "messages"],
            HookName::TransformToolResult => {
                &["agent_id", "tool_name", "tool_use_id", "args", "input", "result", "content", "is_error", "status"]
            }
            HookName::PrepareSubagent | HookName::MergeSubagent => &["parent_id", "child_id"],
            HookName::OnEvent => &["event"],
            HookName::MessageReceived => &["agent_id", "text", "origin", "history"],
            HookName::LlmRequestPre => &["agent_id", "messages"],
            HookName::ToolCallPre | HookName::CallTool => &["agent_id", "name", "args"],
            HookName::ToolCallPost => &["agent_id", "name", "args", "result", "is_error"],
            HookName::AgentEventSent => &["event"],
            HookName::MemoryReadPre => &["query", "filters"],
            HookName::MemoryReadPost => &["query", "results"],
            HookName::MemoryWritePre => &["content", "metadata"],
            HookName::MemoryWritePost => &["content", "metadata", "id"],
            HookName::TriggerAppend => &["trigger"],
            HookName::TriggerFire => &["trigger", "firing_id"],
            HookName::ConfigChanged => &["key", "old", "new"],
            HookName::Communicate => &["payload"],
            HookName::RunSchedule => &["id"],
            HookName::ReadSymbolic => &["path"],
            HookName::Heartbeat | HookName::HealthCheck | HookName::Register | HookName::Unload => &[],
        }
    }

    /// Whether this is an agent-loop hook (not a context-engine one).
    pub fn is_agent(self) -> bool {
        !HookName::CONTEXT.contains(&self)
    }

    /// The JSON-RPC method a `worker_protocol = "jsonrpc"` worker is called
    /// with: `hook/<name>`, except the symbolic read, `vfs/read_symbolic`.
    pub fn rpc_method(self) -> String {
        match self {
            HookName::ReadSymbolic => "vfs/read_symbolic".to_owned(),
            other => format!("hook/{}", other.as_str()),
        }
    }

    /// Whether a call that failed mid-way may be repeated on a fresh worker:
    /// not when the plugin may already have acted on it (a tool ran, a
    /// plugin started or stopped, a schedule ran, a message was delivered).
    pub fn retry_safe(self) -> bool {
        !matches!(
            self,
            HookName::CallTool | HookName::Register | HookName::Unload | HookName::Communicate | HookName::RunSchedule
        )
    }

    /// The timeout multiplier of spec section 5.5: bootstrap gets twice the time.
    pub fn timeout_factor(self) -> u32 {
        if self == HookName::Bootstrap { 2 } else { 1 }
    }
}

impl fmt::Display for HookName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hook name that is not one of [`HookName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown hook `{name}` (valid hooks: {})", valid_list())]
pub struct UnknownHook {
    pub name: String,
}

fn valid_list() -> String {
    HookName::ALL.iter().map(|h| h.as_str()).collect::<Vec<_>>().join(", ")
}

impl FromStr for HookName {
    type Err = UnknownHook;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HookName::ALL.into_iter().find(|h| h.as_str() == s).ok_or_else(|| UnknownHook { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for hook in HookName::ALL {
            assert_eq!(hook.as_str().parse::<HookName>(), Ok(hook));
        }
    }

    #[test]
    fn unknown_hook_lists_valid_ones() {
        let err = "ingestt".parse::<HookName>().unwrap_err();
        assert!(err.to_string().starts_with("unknown hook `ingestt` (valid hooks: bootstrap, ingest,"));
    }

    #[test]
    fn all_is_context_then_agent_without_repeats() {
        let mut seen = std::collections::BTreeSet::new();
        for hook in HookName::ALL {
            assert!(seen.insert(hook), "{hook} twice");
        }
        assert_eq!(HookName::ALL[..9], HookName::CONTEXT);
        assert_eq!(HookName::ALL[9..], HookName::AGENT);
        assert!(!HookName::Ingest.is_agent() && HookName::ToolCallPre.is_agent());
        assert_eq!(HookName::ToolCallPre.rpc_method(), "hook/tool_call_pre");
        assert_eq!(HookName::ReadSymbolic.rpc_method(), "vfs/read_symbolic");
    }
}
