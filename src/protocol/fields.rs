//! The request fields of every hook, by name: what a host sends in each
//! hook's request (besides `type`). One list, read by `ctxhost hook` to warn
//! about a field no hook of that name receives (with the nearest known
//! one), and kept equal to the request types of [`super::request`] by a test.
//!
//! Never decides what a field means: the request types do.

use super::hook::HookName;

/// The fields of `hook`'s request, as the host sends them (`type` aside).
/// The agent-loop hooks' are those the agent engine fills in.
pub fn request_fields(hook: HookName) -> &'static [&'static str] {
    match hook {
        HookName::Bootstrap => &["context_window_tokens", "stable_prefix_mode", "max_recall_results"],
        HookName::Ingest => &["agent_id", "message", "peer_id"],
        HookName::Assemble => &["agent_id", "system_prompt", "messages", "context_window_tokens"],
        HookName::Compact => &["agent_id", "messages", "model", "context_window_tokens", "token_pressure"],
        // `peer_id`: added by `ctxhost run` when a transcript line names a peer.
        HookName::AfterTurn => &["agent_id", "messages", "peer_id"],
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
        HookName::TriggerAppend | HookName::TriggerFire => &["trigger"],
        HookName::ConfigChanged => &["key", "old", "new"],
        HookName::Communicate => &["payload"],
        HookName::RunSchedule => &["id"],
        HookName::ReadSymbolic => &["path"],
        HookName::Heartbeat | HookName::HealthCheck | HookName::Register | HookName::Unload => &[],
    }
}

/// The top-level keys of `request` that `hook`'s request does not have
/// (`type` is always known), in the request's order.
pub fn unknown_fields(hook: HookName, request: &serde_json::Value) -> Vec<&str> {
    let known = request_fields(hook);
    match request.as_object() {
        Some(map) => map.keys().map(String::as_str).filter(|k| *k != "type" && !known.contains(k)).collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HookRequest;
    use serde_json::json;

    /// The context hooks' lists are the keys their request types write.
    #[test]
    fn the_context_hooks_lists_match_their_request_types() {
        for hook in HookName::CONTEXT {
            let request = HookRequest::from_json(hook, json!({})).unwrap();
            let wire = serde_json::to_value(&request).unwrap();
            let mut written: Vec<&str> = wire.as_object().unwrap().keys().map(String::as_str).collect();
            written.retain(|k| *k != "type");
            let mut listed: Vec<&str> = request_fields(hook).to_vec();
            if hook == HookName::AfterTurn {
                listed.retain(|k| *k != "peer_id");
            }
            assert_eq!(written, listed, "{hook:?}");
        }
    }

    #[test]
    fn unknown_fields_are_named_in_order() {
        let request = json!({"type": "tool_call_pre", "tool_name": "x", "args": {}, "zeta": 1});
        assert_eq!(unknown_fields(HookName::ToolCallPre, &request), ["tool_name", "zeta"]);
        assert!(unknown_fields(HookName::Ingest, &json!({"message": "m", "agent_id": "a"})).is_empty());
        assert_eq!(unknown_fields(HookName::Heartbeat, &json!({"x": 1})), ["x"]);
    }
}
