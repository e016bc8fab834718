//! What the host services ask of the engine ([`HostCalls`]):
//! `config_changed` through one queue per plugin (in order, in the
//! background), the `trigger_append` chain without the creating plugin, and
//! symbolic vfs reads answered by their owner.

use serde_json::{Map, Value, json};

use super::*;
use crate::host::config::Change;
use crate::host::services::HostCalls;
use crate::runner::BoxFuture;

impl HostCalls for AgentEngine {
    fn config_changed(&self, plugin: &str, change: Change) {
        let Some(p) = self.plugin(plugin) else { return };
        if !p.hooks.contains(&HookName::ConfigChanged) {
            return;
        }
        let fields = obj(json!({"key": change.key, "old": change.old, "new": change.new}));
        // In the background (the plugin that set the value may be busy in the
        // very call that set it), through one queue per plugin so the calls
        // arrive one at a time, in the order of the sets.
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let mut queues = self.config_queues.lock().unwrap_or_else(|p| p.into_inner());
        let queue = queues.entry(plugin.to_owned()).or_insert_with(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Map<String, Value>>();
            let (name, me) = (plugin.to_owned(), self.me.clone());
            handle.spawn(async move {
                while let Some(fields) = rx.recv().await {
                    // The plugin as it is now (a reload may have replaced it);
                    // the call is timed, counted and its failure logged as
                    // every plugin call is.
                    let Some(engine) = me.upgrade() else { return };
                    let Some(p) = engine.plugin(&name) else { continue };
                    let _ = engine.call(&p, HookName::ConfigChanged, fields).await;
                }
            });
            tx
        });
        let _ = queue.send(fields);
    }

    fn trigger_append(&self, from: Option<&str>, trigger: Map<String, Value>) -> BoxFuture<'_, Result<Value, String>> {
        let from = from.map(str::to_owned);
        Box::pin(async move {
            match self.chain_except(HookName::TriggerAppend, obj(json!({"trigger": trigger})), from.as_deref()).await {
                Ok(mut out) => Ok(out.remove("trigger").unwrap_or(Value::Null)),
                Err(b) => Err(format!("plugin '{}' blocked it: {}", b.plugin, b.reason)),
            }
        })
    }

    fn read_symbolic(&self, owner: &str, path: &str) -> BoxFuture<'_, Result<String, String>> {
        let (owner, path) = (owner.to_owned(), path.to_owned());
        Box::pin(async move {
            let plugin = self.plugin(&owner).ok_or_else(|| format!("the owner '{owner}' of {path} is not loaded"))?;
            if in_call().contains(&owner) {
                return Err(format!(
                    "plugin '{owner}' owns {path} but is busy in the call this read is part of (a cycle)"
                ));
            }
            if !plugin.hooks.contains(&HookName::ReadSymbolic) {
                return Err(format!("plugin '{owner}' owns {path} but has no read_symbolic hook"));
            }
            match self
                .call(&plugin, HookName::ReadSymbolic, obj(json!({"path": path})))
                .await
                .map_err(|e| e.to_string())?
            {
                Value::String(s) => Ok(s),
                Value::Object(m) => match m.get("content") {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(format!("plugin '{owner}' answered read_symbolic without a `content` string")),
                },
                other => Ok(other.to_string()),
            }
        })
    }
}
