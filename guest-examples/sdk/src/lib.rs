//! The guest SDK for ctxhost component plugins.
//!
//! Implement [`Plugin`] — only the hooks you need; every other hook answers
//! [`HookError::NotImplemented`], which the host treats as "no opinion",
//! never as a failure — and export it with [`export_plugin!`]:
//!
//! ```ignore
//! struct Shout;
//!
//! impl ctxhost_sdk::Plugin for Shout {
//!     const NAME: &'static str = "shout";
//!     const HOOKS: &'static [ctxhost_sdk::Hook] = &[ctxhost_sdk::Hook::TransformToolResult];
//!
//!     fn transform_tool_result(r: ctxhost_sdk::TransformRequest) -> Result<Option<String>, ctxhost_sdk::HookError> {
//!         Ok(Some(r.result.to_uppercase()))
//!     }
//! }
//!
//! ctxhost_sdk::export_plugin!(Shout);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component.
//!
//! # Agent-loop plugins
//!
//! A plugin that also takes part in the agent loop (`tool_call_pre`,
//! `message_received`, `memory_write_pre`, `communicate`, …) implements
//! [`AgentPlugin`] too — the hooks it handles, its declarations (config
//! schema, tools, schedules, priority) and one `handle` taking and returning
//! the hook's JSON — and is exported with [`export_agent_plugin!`] instead.
//! It reaches the host services (config, vfs, triggers, storage) through
//! [`services`]:
//!
//! ```ignore
//! use ctxhost_sdk::{AgentPlugin, HookError, Plugin, Value, decision, json, services};
//!
//! struct NoDrop;
//!
//! impl Plugin for NoDrop {
//!     const NAME: &'static str = "no-drop";
//!     const HOOKS: &'static [ctxhost_sdk::Hook] = &[];
//! }
//!
//! impl AgentPlugin for NoDrop {
//!     const AGENT_HOOKS: &'static [&'static str] = &["tool_call_pre"];
//!
//!     fn describe_agent() -> Value {
//!         json!({"config": [{"key": "WORD", "type": "str", "label": "Refused word", "default": "drop"}]})
//!     }
//!
//!     fn handle(hook: &str, request: Value) -> Result<Value, HookError> {
//!         let word = services::config_get("WORD").map_err(HookError::Failed)?;
//!         let word = word.as_str().unwrap_or("drop");
//!         match request["args"]["sql"].as_str() {
//!             Some(sql) if hook == "tool_call_pre" && sql.contains(word) => Ok(decision::block("no drops")),
//!             _ => Ok(decision::pass()),
//!         }
//!     }
//! }
//!
//! ctxhost_sdk::export_agent_plugin!(NoDrop);
//! ```

#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // generated code
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "context-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_context_plugin",
    });
}

/// Bindings of the world `agent-plugin` (linked into a component only when
/// [`export_agent_plugin!`] is used, so context-only plugins stay in the
/// world `context-plugin`), sharing [`bindings`]' types.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // generated code
pub mod agent_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "agent-plugin",
        with: {
            "ctxhost:plugin/types@0.1.0": crate::bindings::ctxhost::plugin::types,
            "ctxhost:plugin/host@0.1.0": crate::bindings::ctxhost::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_agent_plugin",
    });
}

pub use bindings::ctxhost::plugin::host;
pub use bindings::ctxhost::plugin::types::{
    AfterTurnRequest, AssembleRequest, Block, BootstrapRequest, CompactReply, CompactRequest, Compacted, Content,
    Description, Hook, HookError, Image, ImageFile, IngestRequest, Memory, Message, Recommendation, Role,
    SubagentRequest, SummaryRequest, TokenPressure, ToolResult, ToolUse, TransformRequest,
};
pub use serde_json::{Value, json};

/// A component plugin. Override the hooks you implement and list them in
/// [`Plugin::HOOKS`]; the host calls no others.
pub trait Plugin {
    /// The plugin's name, reported by `describe`.
    const NAME: &'static str;
    /// The hooks this plugin implements.
    const HOOKS: &'static [Hook];

    fn bootstrap(_request: BootstrapRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
    fn ingest(_request: IngestRequest) -> Result<Vec<Memory>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn assemble(_request: AssembleRequest) -> Result<Vec<Message>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn compact(_request: CompactRequest) -> Result<CompactReply, HookError> {
        Err(HookError::NotImplemented)
    }
    fn after_turn(_request: AfterTurnRequest) -> Result<Vec<Memory>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn transform_tool_result(_request: TransformRequest) -> Result<Option<String>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn prepare_subagent(_request: SubagentRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
    fn merge_subagent(_request: SubagentRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
}

/// The text of a message: its string content, or its text blocks joined by `\n`.
pub fn text_of(message: &Message) -> String {
    match &message.content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// An agent-loop plugin (world `agent-plugin`): it also implements
/// [`Plugin`] (its context hooks, often none) and is exported with
/// [`export_agent_plugin!`].
pub trait AgentPlugin {
    /// The agent-loop hooks this plugin handles (`"tool_call_pre"`, …); the
    /// host calls `handle` for no others.
    const AGENT_HOOKS: &'static [&'static str];

    /// The declarations of `describe-agent` besides `hooks` (filled from
    /// [`AgentPlugin::AGENT_HOOKS`]): `config` (schema fields), `tools`,
    /// `schedules`, `priority`, `prompt_suffix`, `frontend`, `heartbeat_secs`.
    fn describe_agent() -> Value {
        json!({})
    }

    /// Runs agent-loop hook `hook` on its request (`{"type": hook, …}`) and
    /// answers its reply (for interceptors a [`decision`]).
    /// [`HookError::NotImplemented`] is "pass".
    fn handle(_hook: &str, _request: Value) -> Result<Value, HookError> {
        Err(HookError::NotImplemented)
    }
}

/// The replies of interceptor hooks (`docs/reference/hooks.md`, "Decisions").
pub mod decision {
    use serde_json::{Value, json};

    /// No change: `{"action": "pass"}`.
    pub fn pass() -> Value {
        json!({"action": "pass"})
    }

    /// Go on with `value` instead: `{"action": "replace", "value": …}`.
    pub fn replace(value: impl Into<Value>) -> Value {
        json!({"action": "replace", "value": value.into()})
    }

    /// Stop here (deny the tool call, drop the message, refuse the write):
    /// `{"action": "block", "reason": …}`.
    pub fn block(reason: impl Into<String>) -> Value {
        json!({"action": "block", "reason": reason.into()})
    }
}

/// The host services of an agent-loop plugin, typed: config, vfs, triggers,
/// storage and log. JSON values are [`Value`]s here (JSON text on the wire);
/// an `Err` is the host's refusal, naming what was wrong. Usable only from a
/// plugin exported with [`export_agent_plugin!`], during a hook call.
pub mod services {
    use serde_json::Value;

    pub use crate::agent_bindings::ctxhost::plugin::services::Scope;
    pub use crate::host::Level;

    /// The imports as the world declares them (JSON as text).
    pub use crate::agent_bindings::ctxhost::plugin::services as raw;

    fn parse(text: String) -> Result<Value, String> {
        serde_json::from_str(&text).map_err(|e| format!("the host answered text that is not JSON: {e}"))
    }

    /// The config value of `key`: stored, else the schema default, else `null`.
    pub fn config_get(key: &str) -> Result<Value, String> {
        raw::config_get(key, None).and_then(parse)
    }

    /// The config value of `key`: stored, else the schema default, else `default`.
    pub fn config_get_or(key: &str, default: &Value) -> Result<Value, String> {
        raw::config_get(key, Some(&default.to_string())).and_then(parse)
    }

    /// Sets `key` (coerced by its schema type); the value stored.
    pub fn config_set(key: &str, value: &Value) -> Result<Value, String> {
        raw::config_set(key, &value.to_string()).and_then(parse)
    }

    /// `{"schema": […], "values": {…}}`.
    pub fn config_list() -> Result<Value, String> {
        raw::config_list().and_then(parse)
    }

    /// Replaces the schema (a list of fields or of `KEY:type:label=default`
    /// lines); the values.
    pub fn config_register(schema: &Value) -> Result<Value, String> {
        raw::config_register(&schema.to_string()).and_then(parse)
    }

    /// The text of the file at `path`, if there is one.
    pub fn vfs_read(path: &str) -> Result<Option<String>, String> {
        raw::vfs_read(path)
    }

    /// Writes a file below `/plugins/<this plugin>/`; its normalised path.
    pub fn vfs_write(path: &str, content: &str) -> Result<String, String> {
        raw::vfs_write(path, content)
    }

    /// Makes `path` a symbolic node computed by this plugin's `read_symbolic`.
    pub fn vfs_write_symbolic(path: &str, searchable: bool) -> Result<String, String> {
        raw::vfs_write_symbolic(path, searchable)
    }

    /// Deletes the file or subtree at `path`; whether anything was there.
    pub fn vfs_delete(path: &str) -> Result<bool, String> {
        raw::vfs_delete(path)
    }

    /// The sorted child names of the directory at `path`.
    pub fn vfs_list(path: &str) -> Result<Vec<String>, String> {
        raw::vfs_list(path)
    }

    /// Creates (upserts by `id`) a trigger; its id.
    pub fn trigger_create(trigger: &Value) -> Result<String, String> {
        raw::trigger_create(&trigger.to_string())
    }

    /// The trigger `id`, if it exists.
    pub fn trigger_get(id: &str) -> Result<Option<Value>, String> {
        raw::trigger_get(id)?.map(parse).transpose()
    }

    /// Every trigger.
    pub fn trigger_list() -> Result<Vec<Value>, String> {
        raw::trigger_list()?.into_iter().map(parse).collect()
    }

    /// Merges `patch` into trigger `id`; the updated trigger.
    pub fn trigger_update(id: &str, patch: &Value) -> Result<Value, String> {
        raw::trigger_update(id, &patch.to_string()).and_then(parse)
    }

    /// Deletes trigger `id`; whether it existed.
    pub fn trigger_delete(id: &str) -> Result<bool, String> {
        raw::trigger_delete(id)
    }

    /// The value stored under `key` in `scope`, if any.
    pub fn storage_get(scope: Scope, key: &str) -> Result<Option<Value>, String> {
        raw::storage_get(scope, key)?.map(parse).transpose()
    }

    pub fn storage_set(scope: Scope, key: &str, value: &Value) -> Result<(), String> {
        raw::storage_set(scope, key, &value.to_string())
    }

    /// Whether there was a value.
    pub fn storage_delete(scope: Scope, key: &str) -> Result<bool, String> {
        raw::storage_delete(scope, key)
    }

    /// Logs a line under the plugin's name.
    pub fn log(level: Level, message: &str) {
        raw::log(level, message)
    }
}

#[doc(hidden)]
pub fn __describe_agent<P: AgentPlugin>() -> String {
    let mut description = P::describe_agent();
    if let Value::Object(map) = &mut description {
        map.entry("hooks").or_insert_with(|| json!(P::AGENT_HOOKS));
    }
    description.to_string()
}

#[doc(hidden)]
pub fn __parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[doc(hidden)]
pub fn __handle<P: AgentPlugin>(hook: &str, request_json: &str) -> Result<String, HookError> {
    let request: Value = serde_json::from_str(request_json)
        .map_err(|e| HookError::Failed(format!("the `{hook}` request is not JSON: {e}")))?;
    P::handle(hook, request).map(|reply| reply.to_string())
}

/// Implements a world's `Guest` trait (the context exports) for a [`Plugin`].
#[doc(hidden)]
#[macro_export]
macro_rules! __impl_context_guest {
    ($plugin:ident, $($guest:tt)*) => {
        impl $($guest)* for $plugin {
            fn describe() -> $crate::Description {
                $crate::Description {
                    name: <$plugin as $crate::Plugin>::NAME.into(),
                    hooks: <$plugin as $crate::Plugin>::HOOKS.to_vec(),
                }
            }
            fn bootstrap(r: $crate::BootstrapRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::bootstrap(r)
            }
            fn ingest(r: $crate::IngestRequest) -> Result<Vec<$crate::Memory>, $crate::HookError> {
                <$plugin as $crate::Plugin>::ingest(r)
            }
            fn assemble(r: $crate::AssembleRequest) -> Result<Vec<$crate::Message>, $crate::HookError> {
                <$plugin as $crate::Plugin>::assemble(r)
            }
            fn compact(r: $crate::CompactRequest) -> Result<$crate::CompactReply, $crate::HookError> {
                <$plugin as $crate::Plugin>::compact(r)
            }
            fn after_turn(r: $crate::AfterTurnRequest) -> Result<Vec<$crate::Memory>, $crate::HookError> {
                <$plugin as $crate::Plugin>::after_turn(r)
            }
            fn transform_tool_result(r: $crate::TransformRequest) -> Result<Option<String>, $crate::HookError> {
                <$plugin as $crate::Plugin>::transform_tool_result(r)
            }
            fn prepare_subagent(r: $crate::SubagentRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::prepare_subagent(r)
            }
            fn merge_subagent(r: $crate::SubagentRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::merge_subagent(r)
            }
        }
    };
}

/// Exports a [`Plugin`] as the component's implementation of the world
/// `context-plugin`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ident) => {
        $crate::__impl_context_guest!($plugin, $crate::bindings::Guest);
        $crate::bindings::__export_context_plugin!($plugin with_types_in $crate::bindings);
    };
}

/// Exports a type implementing [`Plugin`] and [`AgentPlugin`] as the
/// component's implementation of the world `agent-plugin`.
#[macro_export]
macro_rules! export_agent_plugin {
    ($plugin:ident) => {
        $crate::__impl_context_guest!($plugin, $crate::agent_bindings::Guest);
        impl $crate::agent_bindings::exports::ctxhost::plugin::agent::Guest for $plugin {
            fn describe_agent() -> String {
                $crate::__describe_agent::<$plugin>()
            }
            fn handle(hook: String, request_json: String) -> Result<String, $crate::HookError> {
                $crate::__handle::<$plugin>(&hook, &request_json)
            }
        }
        $crate::agent_bindings::__export_agent_plugin!($plugin with_types_in $crate::agent_bindings);
    };
}
