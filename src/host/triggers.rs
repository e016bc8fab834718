//! The trigger store of agent-loop plugins (`../shared/spec/agent-hooks.md`,
//! "Host services": triggers): create (upsert by `id`), get, list, update
//! (a **merge** — FaustBot replaces), delete, and which triggers are due.
//!
//! A trigger is a JSON object kept whole (unknown fields survive). Kinds, by
//! `type`: `{"type":"datetime","target":…}` (unix seconds or RFC 3339 UTC;
//! fires once), `{"type":"interval","interval_seconds":N}` (every N seconds
//! from its creation), `{"type":"event","event_name":…}` (fired by
//! [`Triggers::event`]). `lifespan` (seconds from creation) removes a trigger
//! without firing it. Persisted as one JSON file.
//!
//! This module decides what is due; it never calls a plugin (the watcher
//! passes each firing through `trigger_fire`, then to the embedder).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Why a trigger change was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TriggerError {
    #[error("a trigger needs a string `id`")]
    NoId,
    #[error("no trigger `{0}`")]
    Unknown(String),
    #[error("trigger `{id}`: {reason}")]
    Invalid { id: String, reason: String },
    #[error("trigger file `{}`: {reason}", file.display())]
    File { file: PathBuf, reason: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    trigger: Map<String, Value>,
    /// Unix seconds.
    created: u64,
    /// Unix seconds of the last firing, if any.
    fired: Option<u64>,
}

/// What [`Triggers::due`] found.
#[derive(Debug, Default, PartialEq)]
pub struct Due {
    /// To fire, highest `priority` first.
    pub fire: Vec<Map<String, Value>>,
    /// Removed because their `lifespan` ran out (never fired for that).
    pub expired: Vec<String>,
}

/// All triggers, and the file they live in.
#[derive(Debug)]
pub struct Triggers {
    stored: BTreeMap<String, Stored>,
    file: PathBuf,
}

fn num(t: &Map<String, Value>, key: &str) -> Option<f64> {
    t.get(key).and_then(Value::as_f64)
}

/// Unix seconds of a `target`: a number, or RFC 3339 UTC (`…Z`).
fn target_secs(target: &Value) -> Option<u64> {
    match target {
        Value::Number(n) => n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64),
        Value::String(s) => parse_rfc3339_utc(s),
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` to unix seconds.
fn parse_rfc3339_utc(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once(['T', ' '])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// RFC 7396 merge: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, v) in patch {
        match (target.get_mut(k), v) {
            (_, Value::Null) => {
                target.remove(k);
            }
            (Some(Value::Object(t)), Value::Object(p)) => merge(t, p),
            _ => {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Triggers {
    /// The triggers stored in `file` (none yet: empty).
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed.
    pub fn open(file: &Path) -> Result<Triggers, TriggerError> {
        let fail = |reason: String| TriggerError::File { file: file.to_owned(), reason };
        let stored = super::load_json(file).map_err(|e| fail(e.to_string()))?;
        Ok(Triggers { stored, file: file.to_owned() })
    }

    fn check(t: &Map<String, Value>) -> Result<String, TriggerError> {
        let id = t.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or(TriggerError::NoId)?;
        let invalid = |reason: &str| TriggerError::Invalid { id: id.to_owned(), reason: reason.to_owned() };
        match t.get("type").and_then(Value::as_str) {
            Some("datetime") if t.get("target").and_then(target_secs).is_none() => {
                Err(invalid("`target` must be unix seconds or RFC 3339 UTC (…Z)"))
            }
            Some("interval") if num(t, "interval_seconds").is_none_or(|n| n <= 0.0) => {
                Err(invalid("`interval_seconds` must be a positive number"))
            }
            Some("event") if t.get("event_name").and_then(Value::as_str).is_none() => {
                Err(invalid("`event_name` must be a string"))
            }
            Some("datetime" | "interval" | "event") => Ok(id.to_owned()),
            _ => Err(invalid("`type` must be datetime, interval or event")),
        }
    }

    /// Creates or replaces (by `id`) a trigger at time `now`.
    ///
    /// # Errors
    /// No `id`, a bad `type`, or the file cannot be saved.
    pub fn create(&mut self, trigger: Map<String, Value>, now: u64) -> Result<String, TriggerError> {
        let id = Self::check(&trigger)?;
        self.stored.insert(id.clone(), Stored { trigger, created: now, fired: None });
        self.save()?;
        Ok(id)
    }

    pub fn get(&self, id: &str) -> Option<&Map<String, Value>> {
        self.stored.get(id).map(|s| &s.trigger)
    }

    /// Every trigger, highest `priority` first, then by id.
    pub fn list(&self) -> Vec<&Map<String, Value>> {
        let mut all: Vec<&Map<String, Value>> = self.stored.values().map(|s| &s.trigger).collect();
        all.sort_by(|a, b| num(b, "priority").unwrap_or(0.0).total_cmp(&num(a, "priority").unwrap_or(0.0)));
        all
    }

    /// Merges `patch` into trigger `id` (RFC 7396; its `id` cannot change).
    ///
    /// # Errors
    /// No such trigger, a result that is not a valid trigger, or the file
    /// cannot be saved. A refused patch changes nothing.
    pub fn update(&mut self, id: &str, patch: &Map<String, Value>) -> Result<&Map<String, Value>, TriggerError> {
        let stored = self.stored.get(id).ok_or_else(|| TriggerError::Unknown(id.to_owned()))?;
        let mut merged = stored.trigger.clone();
        merge(&mut merged, patch);
        merged.insert("id".into(), Value::String(id.to_owned()));
        Self::check(&merged)?;
        if let Some(s) = self.stored.get_mut(id) {
            s.trigger = merged;
        }
        self.save()?;
        self.get(id).ok_or_else(|| TriggerError::Unknown(id.to_owned()))
    }

    /// Deletes trigger `id`; `true` when there was one.
    ///
    /// # Errors
    /// The file cannot be saved.
    pub fn delete(&mut self, id: &str) -> Result<bool, TriggerError> {
        let had = self.stored.remove(id).is_some();
        if had {
            self.save()?;
        }
        Ok(had)
    }

    /// At `now`: removes expired triggers (without firing them) and returns
    /// the time triggers due, recording their firing (a datetime trigger
    /// fires once and is removed).
    ///
    /// # Errors
    /// The file cannot be saved.
    pub fn due(&mut self, now: u64) -> Result<Due, TriggerError> {
        let mut due = Due::default();
        let expired: Vec<String> = self
            .stored
            .iter()
            .filter(|(_, s)| num(&s.trigger, "lifespan").is_some_and(|l| s.created as f64 + l <= now as f64))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.stored.remove(id);
        }
        due.expired = expired;
        let mut done = Vec::new();
        for (id, s) in self.stored.iter_mut() {
            let t = &s.trigger;
            let fire = match t.get("type").and_then(Value::as_str) {
                Some("datetime") => t.get("target").and_then(target_secs).is_some_and(|at| at <= now),
                Some("interval") => {
                    let every = num(t, "interval_seconds").unwrap_or(f64::INFINITY);
                    (s.fired.unwrap_or(s.created) as f64 + every) <= now as f64
                }
                _ => false,
            };
            if fire {
                s.fired = Some(now);
                due.fire.push(t.clone());
                if t.get("type").and_then(Value::as_str) == Some("datetime") {
                    done.push(id.clone());
                }
            }
        }
        for id in done {
            self.stored.remove(&id);
        }
        due.fire.sort_by(|a, b| num(b, "priority").unwrap_or(0.0).total_cmp(&num(a, "priority").unwrap_or(0.0)));
        if !due.fire.is_empty() || !due.expired.is_empty() {
            self.save()?;
        }
        Ok(due)
    }

    /// The event triggers listening for `name`, highest priority first.
    pub fn event(&self, name: &str) -> Vec<&Map<String, Value>> {
        self.list()
            .into_iter()
            .filter(|t| {
                t.get("type").and_then(Value::as_str) == Some("event")
                    && t.get("event_name").and_then(Value::as_str) == Some(name)
            })
            .collect()
    }

    fn save(&self) -> Result<(), TriggerError> {
        super::save_json(&self.file, &self.stored)
            .map_err(|reason| TriggerError::File { file: self.file.clone(), reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn rfc3339_targets() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_utc("2026-11-29T22:39:18Z"), Some(1_795_991_958));
        assert_eq!(parse_rfc3339_utc("2000-02-29T12:00:00.5+00:00"), Some(951_825_600));
        assert_eq!(parse_rfc3339_utc("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_utc("2026-11-29T22:39:18+02:00"), None, "UTC only");
    }

    #[test]
    fn crud_with_upsert_and_merge() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("triggers.json");
        let mut t = Triggers::open(&file).unwrap();
        let remind = json!({"id": "r1", "type": "interval", "interval_seconds": 60, "payload": {"text": "stretch", "n": 1}, "x-extra": true});
        t.create(obj(remind), 1000).unwrap();
        t.create(obj(json!({"id": "e1", "type": "event", "event_name": "deploy", "priority": 5})), 1000).unwrap();
        assert_eq!(t.list().iter().map(|x| x["id"].as_str().unwrap()).collect::<Vec<_>>(), ["e1", "r1"]);

        let merged = t.update("r1", &obj(json!({"payload": {"n": 2}, "recall_description": "hourly"}))).unwrap();
        assert_eq!(merged["payload"], json!({"text": "stretch", "n": 2}), "a merge, not a replace");
        assert_eq!(merged["x-extra"], true, "unknown fields survive");
        assert_eq!(merged["recall_description"], "hourly");
        assert!(t.update("r1", &obj(json!({"type": "bogus"}))).is_err());
        assert_eq!(t.get("r1").unwrap()["type"], "interval", "a refused patch changes nothing");
        assert!(matches!(t.update("nope", &Map::new()), Err(TriggerError::Unknown(_))));

        // Upsert by id.
        t.create(obj(json!({"id": "e1", "type": "event", "event_name": "release"})), 1000).unwrap();
        assert_eq!(t.event("release").len(), 1);
        assert!(t.event("deploy").is_empty());

        assert!(matches!(t.create(obj(json!({"type": "event"})), 0), Err(TriggerError::NoId)));
        let err = t.create(obj(json!({"id": "d", "type": "datetime", "target": "tomorrow"})), 0).unwrap_err();
        assert!(err.to_string().contains("RFC 3339"), "{err}");

        assert!(t.delete("e1").unwrap());
        assert!(!t.delete("e1").unwrap());
        let again = Triggers::open(&file).unwrap();
        assert_eq!(again.get("r1").unwrap()["payload"]["n"], 2, "survives a restart");
    }

    #[test]
    fn due_triggers_fire_and_expired_ones_go_without_firing() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Triggers::open(&dir.path().join("t.json")).unwrap();
        t.create(obj(json!({"id": "every", "type": "interval", "interval_seconds": 10})), 100).unwrap();
        t.create(obj(json!({"id": "once", "type": "datetime", "target": 150, "priority": 9})), 100).unwrap();
        t.create(obj(json!({"id": "short", "type": "interval", "interval_seconds": 5, "lifespan": 3})), 100).unwrap();

        let d = t.due(104).unwrap();
        assert_eq!((d.fire.len(), d.expired.clone()), (0, vec!["short".to_owned()]), "expired before its first firing");
        assert!(t.get("short").is_none());

        let d = t.due(110).unwrap();
        assert_eq!(d.fire.iter().map(|x| x["id"].as_str().unwrap()).collect::<Vec<_>>(), ["every"]);
        assert!(t.due(115).unwrap().fire.is_empty(), "not again before its interval");
        let d = t.due(150).unwrap();
        assert_eq!(
            d.fire.iter().map(|x| x["id"].as_str().unwrap()).collect::<Vec<_>>(),
            ["once", "every"],
            "by priority"
        );
        assert!(t.get("once").is_none(), "a datetime trigger fires once");
        assert!(t.due(151).unwrap().fire.is_empty());
    }
}
