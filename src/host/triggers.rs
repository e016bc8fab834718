//! The trigger store of agent-loop plugins (`../shared/spec/agent-hooks.md`,
//! "Host services": triggers): create (upsert by `id`), get, list, update
//! (a **merge** — FaustBot replaces), delete, and which triggers are due.
//!
//! A trigger is a JSON object kept whole (unknown fields survive). Kinds, by
//! `type`: `{"type":"datetime","target":…}` (unix seconds or RFC 3339 UTC;
//! fires once), `{"type":"interval","interval_seconds":N}` (every N seconds
//! from its creation), `{"type":"event","event_name":…}` (fired by
//! [`Triggers::event`]). `lifespan` (seconds from creation) removes a trigger
//! without firing it. Kept in the state store (`host::store`), which checks
//! owners and the per-plugin quota in the change's transaction; each trigger
//! carries its next wake time, so the clock reads only the due ones.
//!
//! This module decides what is due; it never calls a plugin (the watcher
//! passes each firing through `trigger_fire`, then to the embedder).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::host::store::{Actor, DueStep, Store, StoreError, StoreErrorKind, TriggerRecord, quota};

/// Why a trigger change was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TriggerError {
    #[error("a trigger needs a string `id`")]
    NoId,
    #[error("no trigger `{0}`")]
    Unknown(String),
    #[error("trigger `{id}`: {reason}")]
    Invalid { id: String, reason: String },
    /// A plugin changing a trigger that is not its own.
    #[error("{0}")]
    NotYours(String),
    /// Over the plugin's trigger quota.
    #[error("{0}")]
    Quota(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for TriggerError {
    fn from(e: StoreError) -> Self {
        match e.kind {
            StoreErrorKind::Quota(reason) => TriggerError::Quota(reason),
            kind @ StoreErrorKind::NotYours { .. } => TriggerError::NotYours(kind.to_string()),
            _ => TriggerError::Store(e),
        }
    }
}

/// Who changes a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By<'a> {
    /// The embedder or the operator: any trigger.
    Host,
    /// A plugin: only its own (its `plugin` field), within its quota.
    Plugin(&'a str),
}

impl<'a> By<'a> {
    fn actor_for(self) -> Actor<'a> {
        match self {
            By::Host => Actor::Host,
            By::Plugin(name) => Actor::Plugin { name, max_triggers: quota::TRIGGERS },
        }
    }
}

/// Whether plugin `name` may change `trigger` (stored as `id`): only its
/// own, as the store checks it.
///
/// # Errors
/// Another plugin's trigger, or the embedder's.
pub fn may_change(id: &str, trigger: &Map<String, Value>, name: &str) -> Result<(), TriggerError> {
    let owner = trigger.get("plugin").and_then(Value::as_str);
    if owner == Some(name) {
        return Ok(());
    }
    let kind = StoreErrorKind::NotYours { id: id.to_owned(), owner: owner.map(str::to_owned) };
    Err(TriggerError::NotYours(kind.to_string()))
}

/// What [`Triggers::due`] found.
#[derive(Debug, Default, PartialEq)]
pub struct Due {
    /// To fire, highest `priority` first.
    pub fire: Vec<Map<String, Value>>,
    /// Removed because their `lifespan` ran out (never fired for that).
    pub expired: Vec<String>,
}

/// A trigger claimed for one firing ([`Triggers::claim_due`]): the claimer
/// fires it, then [`Triggers::settle`]s the claim; a claimer that dies
/// leaves the trigger due again when the claim runs out.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub id: String,
    /// The trigger, as stored when claimed.
    pub trigger: Map<String, Value>,
    /// What the firing does to the trigger once done (`FireOnce`, `Fire`).
    pub step: DueStep,
    /// The claim's token: the wake time the claim set (its end).
    pub until: u64,
    /// When this firing was due (unix seconds): the datetime trigger's
    /// target, or the interval trigger's last firing (or creation) plus its
    /// interval. A function of the stored trigger, which changes only when
    /// a firing is settled: a firing claimed again after its claimer died
    /// has the same due time.
    pub due: u64,
}

impl Claimed {
    /// The firing's stable id, `<trigger id>@<due unix secs>`: the same for
    /// every delivery of one firing (one re-fired after its claimer died
    /// too), so a receiver can deduplicate.
    pub fn firing_id(&self) -> String {
        firing_id(&self.id, self.due)
    }
}

/// `<trigger id>@<due unix secs>`.
pub fn firing_id(id: &str, due: u64) -> String {
    format!("{id}@{due}")
}

/// What [`Triggers::claim_due`] found.
#[derive(Debug, Default, PartialEq)]
pub struct ClaimedDue {
    /// To fire, highest `priority` first.
    pub fire: Vec<Claimed>,
    /// Removed because their `lifespan` ran out (never fired for that).
    pub expired: Vec<String>,
}

/// The triggers, kept in the state store. Every method blocks (a store
/// call): on the async runtime, call it through `host::store::off_runtime`.
#[derive(Clone)]
pub struct Triggers {
    store: Arc<dyn Store>,
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

/// Unix seconds `x` rounded up (what an integer clock compares against).
fn ceil_secs(x: f64) -> u64 {
    // `as` saturates: a huge interval never wakes, a past one at once.
    x.max(0.0).ceil() as u64
}

/// Whether `t`'s lifespan has run out at `now`.
fn expired(t: &Map<String, Value>, created: u64, now: u64) -> bool {
    num(t, "lifespan").is_some_and(|l| created as f64 + l <= now as f64)
}

/// When the clock must look at a trigger next: its next firing or its
/// expiry, whichever comes first; `None` for one that only an event fires.
fn wake_at(t: &Map<String, Value>, created: u64, fired: Option<u64>) -> Option<u64> {
    let expiry = num(t, "lifespan").map(|l| ceil_secs(created as f64 + l));
    let firing = match t.get("type").and_then(Value::as_str) {
        Some("datetime") => t.get("target").and_then(target_secs),
        Some("interval") => num(t, "interval_seconds").map(|every| ceil_secs(fired.unwrap_or(created) as f64 + every)),
        _ => None,
    };
    expiry.into_iter().chain(firing).min()
}

/// When the trigger's next firing is (was) due: the firing part of
/// [`wake_at`], without the expiry; `now` for a trigger with none.
fn due_at(t: &Map<String, Value>, created: u64, fired: Option<u64>, now: u64) -> u64 {
    match t.get("type").and_then(Value::as_str) {
        Some("datetime") => t.get("target").and_then(target_secs),
        Some("interval") => num(t, "interval_seconds").map(|every| ceil_secs(fired.unwrap_or(created) as f64 + every)),
        _ => None,
    }
    .unwrap_or(now)
}

/// What the clock does at `now` with a trigger that woke.
fn step(r: &TriggerRecord, now: u64) -> DueStep {
    let t = &r.trigger;
    if expired(t, r.created, now) {
        return DueStep::Expire;
    }
    match t.get("type").and_then(Value::as_str) {
        Some("datetime") if t.get("target").and_then(target_secs).is_some_and(|at| at <= now) => DueStep::FireOnce,
        Some("interval")
            if (r.fired.unwrap_or(r.created) as f64 + num(t, "interval_seconds").unwrap_or(f64::INFINITY))
                <= now as f64 =>
        {
            DueStep::Fire { fired: now, wake: wake_at(t, r.created, Some(now)) }
        }
        _ => DueStep::Wait { wake: wake_at(t, r.created, r.fired) },
    }
}

fn by_priority(all: &mut [Map<String, Value>]) {
    all.sort_by(|a, b| num(b, "priority").unwrap_or(0.0).total_cmp(&num(a, "priority").unwrap_or(0.0)));
}

impl Triggers {
    /// The triggers in `store`.
    pub fn new(store: Arc<dyn Store>) -> Triggers {
        Triggers { store }
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

    /// Creates or replaces (by `id`) a trigger at time `now`, as `by` may.
    ///
    /// # Errors
    /// No `id`, a bad `type`, another's trigger, over the plugin's quota, or
    /// the store failed (then nothing changed).
    pub fn create(&self, trigger: Map<String, Value>, now: u64, by: By<'_>) -> Result<String, TriggerError> {
        let id = Self::check(&trigger)?;
        let wake = wake_at(&trigger, now, None);
        let record = TriggerRecord { id: id.clone(), trigger, created: now, fired: None, wake };
        self.store.trigger_put(&record, by.actor_for())?;
        Ok(id)
    }

    /// Trigger `id`, if any.
    ///
    /// # Errors
    /// The store failed.
    pub fn get(&self, id: &str) -> Result<Option<Map<String, Value>>, TriggerError> {
        Ok(self.store.trigger_get(id)?.map(|r| r.trigger))
    }

    /// Every trigger, highest `priority` first, then by id.
    ///
    /// # Errors
    /// The store failed.
    pub fn list(&self) -> Result<Vec<Map<String, Value>>, TriggerError> {
        let mut all: Vec<Map<String, Value>> = self.store.trigger_list()?.into_iter().map(|r| r.trigger).collect();
        by_priority(&mut all);
        Ok(all)
    }

    /// Merges `patch` into trigger `id` (RFC 7396; its `id` cannot change),
    /// as `by` may; the trigger as it is now.
    ///
    /// # Errors
    /// No such trigger, a result that is not a valid trigger, another's
    /// trigger, or the store failed. A refused patch changes nothing.
    pub fn update(&self, id: &str, patch: &Map<String, Value>, by: By<'_>) -> Result<Map<String, Value>, TriggerError> {
        let mut refused = None;
        let updated = self.store.trigger_update(id, by.actor_for(), &mut |old| {
            let mut merged = old.trigger.clone();
            merge(&mut merged, patch);
            merged.insert("id".into(), Value::String(id.to_owned()));
            match Self::check(&merged) {
                Ok(_) => {
                    Ok(TriggerRecord { wake: wake_at(&merged, old.created, old.fired), trigger: merged, ..old.clone() })
                }
                Err(e) => {
                    let text = e.to_string();
                    refused = Some(e);
                    Err(text)
                }
            }
        });
        match updated {
            Ok(Some(record)) => Ok(record.trigger),
            Ok(None) => Err(TriggerError::Unknown(id.to_owned())),
            Err(e) => Err(refused.unwrap_or_else(|| e.into())),
        }
    }

    /// Deletes trigger `id`, as `by` may; `true` when there was one.
    ///
    /// # Errors
    /// Another's trigger, or the store failed.
    pub fn delete(&self, id: &str, by: By<'_>) -> Result<bool, TriggerError> {
        Ok(self.store.trigger_delete(id, by.actor_for())?)
    }

    /// At `now`: removes expired triggers (without firing them) and returns
    /// the time triggers due, recording their firing (a datetime trigger
    /// fires once and is removed). Only the triggers whose wake time came
    /// are read and written.
    ///
    /// # Errors
    /// The store failed (then nothing was claimed).
    pub fn due(&self, now: u64) -> Result<Due, TriggerError> {
        let taken = self.store.triggers_take_due(now, &mut |r| step(r, now))?;
        let mut due = Due::default();
        for (record, step) in taken {
            match step {
                DueStep::Expire => due.expired.push(record.id),
                DueStep::FireOnce | DueStep::Fire { .. } => due.fire.push(record.trigger),
                DueStep::Wait { .. } | DueStep::Claim { .. } => {}
            }
        }
        by_priority(&mut due.fire);
        Ok(due)
    }

    /// At `now`: removes expired triggers and claims at most `limit` of the
    /// due ones until `until` (unix seconds, later than `now`), highest
    /// priority first among those claimed. A claimed trigger is not due
    /// again (for any instance on the store) before `until`; its firing is
    /// recorded only by [`Triggers::settle`], so one whose claimer dies
    /// fires again after `until` — at least once, never lost.
    ///
    /// # Errors
    /// The store failed (then nothing was claimed).
    pub fn claim_due(&self, now: u64, until: u64, limit: usize) -> Result<ClaimedDue, TriggerError> {
        let mut claimed = 0;
        let taken = self.store.triggers_take_due(now, &mut |r| match step(r, now) {
            DueStep::FireOnce | DueStep::Fire { .. } if claimed < limit => {
                claimed += 1;
                DueStep::Claim { until }
            }
            // Left due for the next tick (or another instance).
            DueStep::FireOnce | DueStep::Fire { .. } => DueStep::Wait { wake: r.wake },
            other => other,
        })?;
        let mut due = ClaimedDue::default();
        for (record, s) in taken {
            match s {
                DueStep::Expire => due.expired.push(record.id),
                DueStep::Claim { until } => {
                    let step = step(&record, now);
                    let at = due_at(&record.trigger, record.created, record.fired, now);
                    due.fire.push(Claimed { id: record.id, trigger: record.trigger, step, until, due: at });
                }
                _ => {}
            }
        }
        due.fire.sort_by(|a, b| {
            num(&b.trigger, "priority").unwrap_or(0.0).total_cmp(&num(&a.trigger, "priority").unwrap_or(0.0))
        });
        Ok(due)
    }

    /// Settles claim `claimed` of trigger `id` with `step` (the firing's
    /// [`Claimed::step`], or a `Claim` to renew it); `false` when the claim
    /// was lost meanwhile (nothing changed).
    ///
    /// # Errors
    /// The store failed.
    pub fn settle(&self, id: &str, claimed: u64, step: DueStep) -> Result<bool, TriggerError> {
        Ok(self.store.trigger_settle(id, claimed, step)?)
    }

    /// The event triggers listening for `name`, highest priority first.
    ///
    /// # Errors
    /// The store failed.
    pub fn event(&self, name: &str) -> Result<Vec<Map<String, Value>>, TriggerError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|t| {
                t.get("type").and_then(Value::as_str) == Some("event")
                    && t.get("event_name").and_then(Value::as_str) == Some(name)
            })
            .collect())
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

    fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(crate::host::store::sqlite::SqliteStore::open(&dir.path().join("state.db")).unwrap())
    }

    fn ids(list: &[Map<String, Value>]) -> Vec<&str> {
        list.iter().map(|x| x["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn crud_with_upsert_and_merge() {
        let dir = tempfile::tempdir().unwrap();
        let t = Triggers::new(store(&dir));
        let remind = json!({"id": "r1", "type": "interval", "interval_seconds": 60, "payload": {"text": "stretch", "n": 1}, "x-extra": true});
        t.create(obj(remind), 1000, By::Host).unwrap();
        t.create(obj(json!({"id": "e1", "type": "event", "event_name": "deploy", "priority": 5})), 1000, By::Host)
            .unwrap();
        assert_eq!(ids(&t.list().unwrap()), ["e1", "r1"]);

        let patch = obj(json!({"payload": {"n": 2}, "recall_description": "hourly"}));
        let merged = t.update("r1", &patch, By::Host).unwrap();
        assert_eq!(merged["payload"], json!({"text": "stretch", "n": 2}), "a merge, not a replace");
        assert_eq!(merged["x-extra"], true, "unknown fields survive");
        assert_eq!(merged["recall_description"], "hourly");
        let err = t.update("r1", &obj(json!({"type": "bogus"})), By::Host).unwrap_err();
        assert!(matches!(err, TriggerError::Invalid { .. }), "{err}");
        assert_eq!(t.get("r1").unwrap().unwrap()["type"], "interval", "a refused patch changes nothing");
        assert!(matches!(t.update("nope", &Map::new(), By::Host), Err(TriggerError::Unknown(_))));

        // Upsert by id.
        t.create(obj(json!({"id": "e1", "type": "event", "event_name": "release"})), 1000, By::Host).unwrap();
        assert_eq!(t.event("release").unwrap().len(), 1);
        assert!(t.event("deploy").unwrap().is_empty());

        assert!(matches!(t.create(obj(json!({"type": "event"})), 0, By::Host), Err(TriggerError::NoId)));
        let err = t.create(obj(json!({"id": "d", "type": "datetime", "target": "tomorrow"})), 0, By::Host).unwrap_err();
        assert!(err.to_string().contains("RFC 3339"), "{err}");

        assert!(t.delete("e1", By::Host).unwrap());
        assert!(!t.delete("e1", By::Host).unwrap());
        drop(t);
        let again = Triggers::new(store(&dir));
        assert_eq!(again.get("r1").unwrap().unwrap()["payload"]["n"], 2, "survives a restart");
    }

    #[test]
    fn a_plugin_changes_only_its_own_triggers_within_its_quota() {
        let dir = tempfile::tempdir().unwrap();
        let t = Triggers::new(store(&dir));
        let mine = obj(json!({"id": "a1", "type": "event", "event_name": "x", "plugin": "a"}));
        t.create(mine.clone(), 0, By::Plugin("a")).unwrap();
        let err = t.delete("a1", By::Plugin("b")).unwrap_err().to_string();
        assert_eq!(err, "trigger `a1` belongs to plugin 'a'; a plugin changes only its own triggers");
        let err = t.update("a1", &obj(json!({"priority": 1})), By::Plugin("b")).unwrap_err().to_string();
        assert!(err.contains("belongs to plugin 'a'"), "{err}");
        t.create(obj(json!({"id": "h", "type": "event", "event_name": "x"})), 0, By::Host).unwrap();
        let err =
            t.create(obj(json!({"id": "h", "type": "event", "event_name": "y", "plugin": "a"})), 0, By::Plugin("a"));
        assert!(err.unwrap_err().to_string().contains("belongs to the embedder"));
        assert_eq!(t.get("h").unwrap().unwrap()["event_name"], "x", "a refused upsert changes nothing");

        for i in 1..quota::TRIGGERS {
            let one = obj(json!({"id": format!("a-{i}"), "type": "event", "event_name": "x", "plugin": "a"}));
            t.create(one, 0, By::Plugin("a")).unwrap();
        }
        let over = obj(json!({"id": "a-over", "type": "event", "event_name": "x", "plugin": "a"}));
        let err = t.create(over, 0, By::Plugin("a")).unwrap_err();
        assert!(matches!(&err, TriggerError::Quota(m) if m.contains("1000 triggers already")), "{err}");
        t.create(mine, 5, By::Plugin("a")).unwrap();
        assert!(t.get("a-over").unwrap().is_none());
    }

    #[test]
    fn due_triggers_fire_and_expired_ones_go_without_firing() {
        let dir = tempfile::tempdir().unwrap();
        let t = Triggers::new(store(&dir));
        t.create(obj(json!({"id": "every", "type": "interval", "interval_seconds": 10})), 100, By::Host).unwrap();
        t.create(obj(json!({"id": "once", "type": "datetime", "target": 150, "priority": 9})), 100, By::Host).unwrap();
        let short = obj(json!({"id": "short", "type": "interval", "interval_seconds": 5, "lifespan": 3}));
        t.create(short, 100, By::Host).unwrap();
        t.create(obj(json!({"id": "ev", "type": "event", "event_name": "x"})), 100, By::Host).unwrap();

        assert_eq!(t.due(102).unwrap(), Due::default(), "nothing woke yet");
        let d = t.due(104).unwrap();
        assert_eq!((d.fire.len(), d.expired.clone()), (0, vec!["short".to_owned()]), "expired before its first firing");
        assert!(t.get("short").unwrap().is_none());

        let d = t.due(110).unwrap();
        assert_eq!(ids(&d.fire), ["every"]);
        assert!(t.due(115).unwrap().fire.is_empty(), "not again before its interval");
        let d = t.due(150).unwrap();
        assert_eq!(ids(&d.fire), ["once", "every"], "by priority");
        assert!(t.get("once").unwrap().is_none(), "a datetime trigger fires once");
        assert!(t.due(151).unwrap().fire.is_empty());
        assert!(t.get("ev").unwrap().is_some(), "an event trigger is not the clock's");
        // A patch moves the next firing.
        t.update("every", &obj(json!({"interval_seconds": 1})), By::Host).unwrap();
        assert_eq!(ids(&t.due(151).unwrap().fire), ["every"]);
    }

    #[test]
    fn a_claimed_trigger_waits_for_its_settlement_and_comes_back_when_the_claim_runs_out() {
        let dir = tempfile::tempdir().unwrap();
        let t = Triggers::new(store(&dir));
        t.create(obj(json!({"id": "once", "type": "datetime", "target": 110})), 100, By::Host).unwrap();
        t.create(obj(json!({"id": "every", "type": "interval", "interval_seconds": 10})), 100, By::Host).unwrap();
        t.create(obj(json!({"id": "third", "type": "datetime", "target": 110, "priority": 3})), 100, By::Host).unwrap();

        let d = t.claim_due(110, 140, 2).unwrap();
        assert_eq!(d.fire.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["every", "once"], "two at most");
        assert_eq!(d.fire[1].step, DueStep::FireOnce);
        assert_eq!(d.fire[0].step, DueStep::Fire { fired: 110, wake: Some(120) });
        assert_eq!(
            d.fire.iter().map(Claimed::firing_id).collect::<Vec<_>>(),
            ["every@110", "once@110"],
            "each firing named by its due time"
        );
        let third = t.claim_due(111, 141, 10).unwrap();
        assert_eq!(third.fire.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), ["third"]);
        assert!(t.claim_due(139, 169, 10).unwrap().fire.is_empty(), "claimed: not due again before the claim's end");
        assert!(t.get("once").unwrap().is_some(), "not gone before it fired");

        // Settled: `once` is gone, `every` fires again at 120 (not while claimed).
        assert!(t.settle("once", 140, DueStep::FireOnce).unwrap());
        assert!(t.get("once").unwrap().is_none());
        assert!(t.settle("every", 140, DueStep::Claim { until: 150 }).unwrap(), "renewed");
        assert!(!t.settle("every", 140, d.fire[0].step).unwrap(), "the old token lost its claim");
        assert!(t.settle("every", 150, d.fire[0].step).unwrap());
        let next = t.claim_due(120, 150, 10).unwrap();
        assert_eq!(ids(&next.fire.iter().map(|c| c.trigger.clone()).collect::<Vec<_>>()), ["every"]);
        assert_eq!(next.fire[0].firing_id(), "every@120", "the next firing, the next id");

        // `third`'s claimer died: due again at 141, claimed anew, and the
        // dead claim's settlement changes nothing.
        let again = t.claim_due(141, 171, 10).unwrap();
        assert_eq!(again.fire.iter().map(|c| (c.id.as_str(), c.until)).collect::<Vec<_>>(), [("third", 171)]);
        assert_eq!(again.fire[0].firing_id(), third.fire[0].firing_id(), "the re-firing has its first try's id");
        assert_eq!(again.fire[0].firing_id(), "third@110");
        assert!(!t.settle("third", 141, DueStep::FireOnce).unwrap());
        assert!(t.get("third").unwrap().is_some());
        assert!(t.settle("third", 171, DueStep::FireOnce).unwrap());
        assert!(t.get("third").unwrap().is_none());
    }
}
