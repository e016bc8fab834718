//! Triggers through their chains: `trigger_append` before one is stored,
//! `trigger_fire` before a due one is delivered, event triggers, and the
//! delivered ones kept for the embedder (`fired`, `subscribe`). Storage is
//! `host::triggers`'; the clock is `agent::timers`.

use serde_json::{Map, Value, json};

use super::*;

impl AgentEngine {
    /// Creates (upserts) a trigger for the embedder: `trigger_append` first.
    ///
    /// # Errors
    /// A plugin blocked it (`Ok(Err)`), or the store refused it.
    pub async fn create_trigger(&self, trigger: Map<String, Value>) -> Result<Result<String, Blocked>, ServiceError> {
        let out = match self.chain(HookName::TriggerAppend, obj(json!({"trigger": trigger}))).await {
            Ok(out) => out,
            Err(b) => return Ok(Err(b)),
        };
        let trigger = match out.get("trigger") {
            Some(Value::Object(t)) => t.clone(),
            _ => {
                return Err(ServiceError {
                    code: crate::host::services::code::SERVICE,
                    message: "trigger_append replaced the trigger with a non-object".into(),
                });
            }
        };
        let now = crate::host::services::now_secs();
        let created = self.shared.triggers_off(move |t| t.create(trigger, now, crate::host::triggers::By::Host)).await;
        created.map(Ok).map_err(|e| ServiceError { code: crate::host::services::code::SERVICE, message: e.to_string() })
    }

    /// Runs `trigger_fire` over a due trigger; delivered ones are kept for
    /// [`AgentEngine::fired`] and sent to subscribers.
    pub async fn fire(&self, trigger: Map<String, Value>) -> Option<Value> {
        let out = match self.chain(HookName::TriggerFire, obj(json!({"trigger": trigger}))).await {
            Ok(out) => out,
            Err(b) => {
                tracing::info!(plugin = %b.plugin, "trigger firing cancelled: {}", b.reason);
                return None;
            }
        };
        let trigger = out.get("trigger").cloned().unwrap_or(Value::Null);
        {
            let mut fired = self.fired.lock().unwrap_or_else(|p| p.into_inner());
            if fired.len() == FIRED_KEPT {
                fired.pop_front();
            }
            fired.push_back(trigger.clone());
        }
        let _ = self.fired_tx.send(trigger.clone());
        Some(trigger)
    }

    /// Fires the event triggers listening for `name`, with `payload` added
    /// as `event_payload`; returns the delivered ones.
    pub async fn fire_event(&self, name: &str, payload: Value) -> Vec<Value> {
        let owned = name.to_owned();
        let listening = match self.shared.triggers_off(move |t| t.event(&owned)).await {
            Ok(listening) => listening,
            Err(e) => {
                tracing::warn!("event `{name}`: its triggers cannot be read: {e}");
                return Vec::new();
            }
        };
        let mut delivered = Vec::new();
        for mut t in listening {
            t.insert("event_payload".into(), payload.clone());
            if let Some(v) = self.fire(t).await {
                delivered.push(v);
            }
        }
        delivered
    }

    /// The triggers delivered so far (the last 256), oldest first.
    pub fn fired(&self) -> Vec<Value> {
        self.fired.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Delivered triggers from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Value> {
        self.fired_tx.subscribe()
    }
}
