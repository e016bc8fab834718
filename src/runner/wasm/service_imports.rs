//! The `services` import of the `agent-plugin` world: one typed function per
//! host-service method (config, vfs, triggers, storage, log), JSON values as
//! text. Each call goes to the [`PluginServices`] attached when the hook call
//! started, through its dispatcher, with the agent of the current request.
//!
//! A service call finishes on the calling thread when it can (every
//! in-memory service does); one that must wait (a symbolic read, a
//! `trigger_append` chain) runs as a task on the runtime captured when the
//! hook call started, awaited up to the hook's deadline. Owns that bridge and
//! the argument checks. Never outlives the hook's deadline, never blocks a
//! runtime worker or panics, and never implements a service itself (that is
//! `host::services`).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::bindings::agent::ctxhost::plugin::services;
use super::bindings::ctxhost::plugin::host;
use super::engine::TICK;
use super::store::State;
use crate::host::services::{CallContext, PluginServices};

/// What a `services` import needs during one call: the plugin's services
/// (the ones attached when the call started), the call's agent, the tokio
/// runtime to finish a dispatch that has to wait, and the call's deadline.
pub(super) struct ServiceCall {
    pub(super) services: Option<Arc<PluginServices>>,
    pub(super) context: CallContext,
    pub(super) runtime: Option<tokio::runtime::Handle>,
    pub(super) deadline: Instant,
}

/// Why a service import failed without reaching a service.
const NO_SERVICES: &str = "no host services are attached to this plugin";

impl ServiceCall {
    /// One dispatcher call, its JSON result or the refusal's text.
    ///
    /// Most service calls finish without waiting (their stores are in
    /// memory behind short locks), so the future is polled once, here. One
    /// that waits (a symbolic read or a `trigger_append` chain running other
    /// plugins) is finished as a task on the captured runtime while this
    /// thread waits for it, bounded by the call's deadline: that never blocks
    /// a runtime worker nor panics, whichever thread the call runs on. Without
    /// a runtime (a `call_sync` outside one) a small one is made for it.
    fn dispatch(&self, method: &str, params: Value) -> Result<Value, String> {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let Some(services) = self.services.clone() else { return Err(NO_SERVICES.to_owned()) };
        let (context, name) = (self.context.clone(), method.to_owned());
        let mut call = Box::pin(async move { services.dispatch(&name, params, &context).await });
        let first = {
            let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
            call.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        let late = || format!("the service call `{method}` outlived the hook's deadline");
        let left = self.deadline.saturating_duration_since(Instant::now());
        let result = match (first, &self.runtime) {
            (Poll::Ready(r), _) => r,
            (Poll::Pending, Some(rt)) => {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                rt.spawn(async move {
                    let _ = tx.send(tokio::time::timeout(left, call).await);
                });
                match rx.recv_timeout(left + TICK * 50) {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) | Err(_) => return Err(late()),
                }
            }
            (Poll::Pending, None) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot run the service call `{method}`: {e}"))?
                .block_on(async move { tokio::time::timeout(left, call).await })
                .map_err(|_| late())?,
        };
        result.map_err(|e| e.message)
    }

    /// [`ServiceCall::dispatch`] with a JSON text result.
    fn text(&self, method: &str, params: Value) -> Result<String, String> {
        self.dispatch(method, params).map(|v| v.to_string())
    }

    /// [`ServiceCall::dispatch`] where `null` means "nothing there".
    fn optional_text(&self, method: &str, params: Value) -> Result<Option<String>, String> {
        self.dispatch(method, params).map(|v| if v.is_null() { None } else { Some(v.to_string()) })
    }
}

/// JSON text from a guest, or the refusal naming the parameter.
fn json_param(name: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("`{name}` is not JSON text: {e}"))
}

fn scope_name(scope: services::Scope) -> &'static str {
    match scope {
        services::Scope::Global => "global",
        services::Scope::Session => "session",
    }
}

impl services::Host for State {
    fn config_get(&mut self, key: String, default_json: Option<String>) -> Result<String, String> {
        let default = default_json.as_deref().map(|d| json_param("default-json", d)).transpose()?;
        let mut params = serde_json::json!({"key": key});
        if let Some(d) = default {
            params["default"] = d;
        }
        self.services.text("config.get", params)
    }

    fn config_set(&mut self, key: String, value_json: String) -> Result<String, String> {
        let value = json_param("value-json", &value_json)?;
        self.services.text("config.set", serde_json::json!({"key": key, "value": value}))
    }

    fn config_list(&mut self) -> Result<String, String> {
        self.services.text("config.list", Value::Null)
    }

    fn config_register(&mut self, schema_json: String) -> Result<String, String> {
        let schema = json_param("schema-json", &schema_json)?;
        self.services.text("config.register", serde_json::json!({"schema": schema}))
    }

    fn vfs_read(&mut self, path: String) -> Result<Option<String>, String> {
        match self.services.dispatch("vfs.read", serde_json::json!({"path": path}))? {
            Value::String(text) => Ok(Some(text)),
            _ => Ok(None),
        }
    }

    fn vfs_write(&mut self, path: String, content: String) -> Result<String, String> {
        let written = self.services.dispatch("vfs.write", serde_json::json!({"path": path, "content": content}))?;
        Ok(written.as_str().map_or_else(|| written.to_string(), str::to_owned))
    }

    fn vfs_write_symbolic(&mut self, path: String, searchable: bool) -> Result<String, String> {
        let params = serde_json::json!({"path": path, "searchable": searchable});
        let written = self.services.dispatch("vfs.write_symbolic", params)?;
        Ok(written.as_str().map_or_else(|| written.to_string(), str::to_owned))
    }

    fn vfs_delete(&mut self, path: String) -> Result<bool, String> {
        Ok(self.services.dispatch("vfs.delete", serde_json::json!({"path": path}))?.as_bool().unwrap_or(false))
    }

    fn vfs_list(&mut self, path: String) -> Result<Vec<String>, String> {
        let children = self.services.dispatch("vfs.list", serde_json::json!({"path": path}))?;
        Ok(children.as_array().into_iter().flatten().filter_map(|c| c.as_str().map(str::to_owned)).collect())
    }

    fn trigger_create(&mut self, trigger_json: String) -> Result<String, String> {
        let trigger = json_param("trigger-json", &trigger_json)?;
        if !trigger.is_object() {
            return Err("`trigger-json` must be a JSON object".to_owned());
        }
        let id = self.services.dispatch("trigger.create", serde_json::json!({"trigger": trigger}))?;
        Ok(id.as_str().map_or_else(|| id.to_string(), str::to_owned))
    }

    fn trigger_get(&mut self, id: String) -> Result<Option<String>, String> {
        self.services.optional_text("trigger.get", serde_json::json!({"id": id}))
    }

    fn trigger_list(&mut self) -> Result<Vec<String>, String> {
        let all = self.services.dispatch("trigger.list", Value::Null)?;
        Ok(all.as_array().into_iter().flatten().map(Value::to_string).collect())
    }

    fn trigger_update(&mut self, id: String, patch_json: String) -> Result<String, String> {
        let patch = json_param("patch-json", &patch_json)?;
        self.services.text("trigger.update", serde_json::json!({"id": id, "patch": patch}))
    }

    fn trigger_delete(&mut self, id: String) -> Result<bool, String> {
        Ok(self.services.dispatch("trigger.delete", serde_json::json!({"id": id}))?.as_bool().unwrap_or(false))
    }

    fn storage_get(&mut self, scope: services::Scope, key: String) -> Result<Option<String>, String> {
        self.services.optional_text("storage.get", serde_json::json!({"scope": scope_name(scope), "key": key}))
    }

    fn storage_set(&mut self, scope: services::Scope, key: String, value_json: String) -> Result<(), String> {
        let value = json_param("value-json", &value_json)?;
        let params = serde_json::json!({"scope": scope_name(scope), "key": key, "value": value});
        self.services.dispatch("storage.set", params).map(drop)
    }

    fn storage_delete(&mut self, scope: services::Scope, key: String) -> Result<bool, String> {
        let params = serde_json::json!({"scope": scope_name(scope), "key": key});
        Ok(self.services.dispatch("storage.delete", params)?.as_bool().unwrap_or(false))
    }

    fn log(&mut self, level: host::Level, message: String) {
        // The same line as `host.log`: it needs no attached services.
        host::Host::log(self, level, message);
    }
}
