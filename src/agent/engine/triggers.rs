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

    /// Runs `trigger_fire` over a due trigger (the request carries
    /// `firing_id`); a delivered one, with `firing_id` set on it, is kept
    /// for [`AgentEngine::fired`] and sent to subscribers.
    pub async fn fire(&self, trigger: Map<String, Value>, firing_id: String) -> Option<Value> {
        let request = obj(json!({"trigger": trigger, "firing_id": firing_id}));
        let out = match self.chain(HookName::TriggerFire, request).await {
            Ok(out) => out,
            Err(b) => {
                tracing::info!(plugin = %b.plugin, "trigger firing `{firing_id}` cancelled: {}", b.reason);
                return None;
            }
        };
        let mut trigger = out.get("trigger").cloned().unwrap_or(Value::Null);
        if let Value::Object(t) = &mut trigger {
            t.insert("firing_id".into(), Value::String(firing_id));
        }
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
    /// as `event_payload`; returns the delivered ones. Each firing's id is
    /// `<trigger id>@event-<unix ms>-<pid>-<n>`: unique per delivery (the
    /// host never delivers an event firing twice).
    pub async fn fire_event(&self, name: &str, payload: Value) -> Vec<Value> {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let owned = name.to_owned();
        let listening = match self.shared.triggers_off(move |t| t.event(&owned)).await {
            Ok(listening) => listening,
            Err(e) => {
                tracing::warn!("event `{name}`: its triggers cannot be read: {e}");
                return Vec::new();
            }
        };
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let mut delivered = Vec::new();
        for mut t in listening {
            t.insert("event_payload".into(), payload.clone());
            let id = t.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
            let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let firing_id = format!("{id}@event-{ms}-{}-{n}", std::process::id());
            if let Some(v) = self.fire(t, firing_id).await {
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
