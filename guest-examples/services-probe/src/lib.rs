//! Test-only agent-loop component: its `communicate` hook calls the host
//! services it is told to, in order, so the host's tests can drive every
//! `services` import. Never deploy it.
//!
//! - `communicate` `{"payload": {"calls": [{"method": "config.get", "params": {…}}, …]}}`
//!   → `{"results": [{"ok": …} | {"err": "…"}, …]}`; methods and params as the
//!   services dispatcher names them (`config.get {key, default?}`,
//!   `vfs.write {path, content}`, `storage.set {scope, key, value}`, …).
//!   `{"payload": {"spin": true}}` calls `config.get` forever (a guest looping
//!   on service calls, for the deadline test).
//! - `message_received` answers the request's `text` verbatim as its reply
//!   text (so a test can make it answer something that is not JSON);
//!   `health_check` answers "not implemented".
//! - `describe-agent` answers the environment variable `PROBE_DESCRIBE`
//!   verbatim when the manifest's `[sandbox] env` sets it.
//!
//! It implements the exports by hand (not through `export_agent_plugin!`) for
//! the raw `message_received` reply; the services go through the SDK.

use ctxhost_sdk::services::{self, Level, Scope};
use ctxhost_sdk::{AgentPlugin, Hook, HookError, Plugin, Value, json};

struct Probe;

impl Plugin for Probe {
    const NAME: &'static str = "services-probe";
    const HOOKS: &'static [Hook] = &[];
}

impl AgentPlugin for Probe {
    const AGENT_HOOKS: &'static [&'static str] = &["communicate", "message_received", "health_check"];

    fn describe_agent() -> Value {
        json!({
            "config": [
                {"key": "LIMIT", "type": "int", "label": "Limit", "default": 3},
                {"key": "GREETING", "type": "str", "label": "Greeting", "default": "hello"},
            ],
            "tools": [{"name": "probe_echo", "description": "Echoes its args", "parameters": {"type": "object"}}],
        })
    }

    fn handle(hook: &str, request: Value) -> Result<Value, HookError> {
        match hook {
            "communicate" => Ok(communicate(&request["payload"])),
            _ => Err(HookError::NotImplemented),
        }
    }
}

fn communicate(payload: &Value) -> Value {
    if payload["spin"] == json!(true) {
        let mut n: u64 = 0;
        loop {
            let _ = services::config_get("LIMIT");
            n = n.wrapping_add(1);
            if n == u64::MAX {
                return json!({"spun": n});
            }
        }
    }
    let results: Vec<Value> = payload["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|call| match one(call["method"].as_str().unwrap_or_default(), &call["params"]) {
            Ok(v) => json!({"ok": v}),
            Err(e) => json!({"err": e}),
        })
        .collect();
    json!({"results": results})
}

fn text<'a>(params: &'a Value, key: &str) -> &'a str {
    params[key].as_str().unwrap_or_default()
}

fn scope(params: &Value) -> Scope {
    if params["scope"] == json!("session") { Scope::Session } else { Scope::Global }
}

fn one(method: &str, p: &Value) -> Result<Value, String> {
    Ok(match method {
        "config.get" => match p.get("default") {
            Some(default) => services::config_get_or(text(p, "key"), default)?,
            None => services::config_get(text(p, "key"))?,
        },
        "config.set" => services::config_set(text(p, "key"), &p["value"])?,
        "config.list" => services::config_list()?,
        "config.register" => services::config_register(&p["schema"])?,
        "vfs.read" => json!(services::vfs_read(text(p, "path"))?),
        "vfs.write" => json!(services::vfs_write(text(p, "path"), text(p, "content"))?),
        "vfs.write_symbolic" => {
            json!(services::vfs_write_symbolic(text(p, "path"), p["searchable"].as_bool().unwrap_or(false))?)
        }
        "vfs.delete" => json!(services::vfs_delete(text(p, "path"))?),
        "vfs.list" => json!(services::vfs_list(text(p, "path"))?),
        "trigger.create" => json!(services::trigger_create(&p["trigger"])?),
        "trigger.get" => json!(services::trigger_get(text(p, "id"))?),
        "trigger.list" => json!(services::trigger_list()?),
        "trigger.update" => services::trigger_update(text(p, "id"), &p["patch"])?,
        "trigger.delete" => json!(services::trigger_delete(text(p, "id"))?),
        "storage.get" => json!(services::storage_get(scope(p), text(p, "key"))?),
        "storage.set" => {
            services::storage_set(scope(p), text(p, "key"), &p["value"])?;
            Value::Null
        }
        "storage.delete" => json!(services::storage_delete(scope(p), text(p, "key"))?),
        "log" => {
            services::log(Level::Info, text(p, "message"));
            Value::Null
        }
        // The raw import with JSON text that is not JSON: the host's refusal.
        "raw.config.set" => json!(services::raw::config_set(text(p, "key"), text(p, "value_json"))?),
        other => return Err(format!("probe: unknown method `{other}`")),
    })
}

ctxhost_sdk::__impl_context_guest!(Probe, ctxhost_sdk::agent_bindings::Guest);

impl ctxhost_sdk::agent_bindings::exports::ctxhost::plugin::agent::Guest for Probe {
    fn describe_agent() -> String {
        std::env::var("PROBE_DESCRIBE").unwrap_or_else(|_| ctxhost_sdk::__describe_agent::<Probe>())
    }

    fn handle(hook: String, request_json: String) -> Result<String, HookError> {
        if hook == "message_received" {
            let request: Value = serde_json_text(&request_json);
            return Ok(request["text"].as_str().unwrap_or_default().to_owned());
        }
        ctxhost_sdk::__handle::<Probe>(&hook, &request_json)
    }
}

/// The request as JSON (`null` if the host sent something else).
fn serde_json_text(text: &str) -> Value {
    ctxhost_sdk::__parse_json(text).unwrap_or(Value::Null)
}

ctxhost_sdk::agent_bindings::__export_agent_plugin!(Probe with_types_in ctxhost_sdk::agent_bindings);
