//! The agent engine's clock: one task that, every tick, fires due triggers
//! (through `trigger_fire`, then to the embedder; each firing on its own
//! task, a few at once), drops expired ones, runs plugins' `[[schedules]]`
//! and sends `heartbeat`s.
//!
//! A schedule never overlaps itself: while one run of `(plugin, id)` is in
//! flight, its next due time is skipped, not queued. Schedules and
//! heartbeats are read from the current plugin list at every tick, so a
//! reload or a disable takes effect without restarting anything. The task
//! holds only a weak reference: it ends when the engine is dropped, or when
//! [`Timers`] is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::engine::AgentEngine;
use crate::host::services::now_secs;
use crate::protocol::HookName;

/// How often the clock looks at triggers and schedules.
pub const TICK: Duration = Duration::from_millis(200);

/// The default time between heartbeats (`heartbeat_secs`).
pub const HEARTBEAT_SECS: f64 = 10.0;

/// The running clock; dropping it stops it.
pub struct Timers {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Timers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Timers {
    /// Starts the clock of `engine`, ticking every `tick`, on the current
    /// tokio runtime.
    pub fn start(engine: &Arc<AgentEngine>, tick: Duration) -> Timers {
        let weak = Arc::downgrade(engine);
        Timers { task: tokio::spawn(run(weak, tick)) }
    }
}

#[derive(Default)]
struct Clock {
    /// Next due instant per `(plugin, schedule id)`; `""` is the heartbeat.
    next: BTreeMap<(String, String), Instant>,
    running: Arc<Mutex<BTreeSet<(String, String)>>>,
}

async fn run(engine: Weak<AgentEngine>, tick: Duration) {
    let mut clock = Clock::default();
    let firing = Arc::new(tokio::sync::Semaphore::new(FIRING_AT_ONCE));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        fire_due_triggers(&engine, &firing).await;
        run_due_schedules(&engine, &mut clock);
    }
}

/// How many trigger firings (each a `trigger_fire` chain) run at once.
const FIRING_AT_ONCE: usize = 8;

async fn fire_due_triggers(engine: &Arc<AgentEngine>, firing: &Arc<tokio::sync::Semaphore>) {
    let now = now_secs();
    let due = match engine.shared().triggers_off(move |t| t.due(now)).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!("trigger watcher: {e}");
            return;
        }
    };
    for id in &due.expired {
        tracing::info!("trigger `{id}` expired (its lifespan ran out) and was removed without firing");
    }
    // Each firing on its own task, so one slow trigger_fire plugin does not
    // hold up the clock (schedules, heartbeats, other triggers); at most
    // FIRING_AT_ONCE run together, the rest wait their turn.
    for trigger in due.fire {
        let (engine, firing) = (engine.clone(), firing.clone());
        tokio::spawn(async move {
            let Ok(_permit) = firing.acquire_owned().await else { return };
            engine.fire(trigger).await;
        });
    }
}

fn run_due_schedules(engine: &Arc<AgentEngine>, clock: &mut Clock) {
    let now = Instant::now();
    let mut live = BTreeSet::new();
    for plugin in engine.plugins().iter() {
        let mut jobs: Vec<(String, f64, HookName)> = Vec::new();
        if plugin.hooks.contains(&HookName::RunSchedule) {
            jobs.extend(plugin.decl.schedules.iter().map(|s| (s.id.clone(), s.interval_secs, HookName::RunSchedule)));
        }
        if plugin.hooks.contains(&HookName::Heartbeat) {
            jobs.push((String::new(), plugin.decl.heartbeat_secs.unwrap_or(HEARTBEAT_SECS), HookName::Heartbeat));
        }
        for (id, every, hook) in jobs {
            let key = (plugin.name.clone(), id.clone());
            live.insert(key.clone());
            // Declarations are checked at load (at most a year); a value
            // that still does not fit a deadline skips the job, never panics.
            let Some(due) = Duration::try_from_secs_f64(every.max(0.001)).ok().and_then(|d| now.checked_add(d)) else {
                tracing::warn!(plugin = %plugin.name, "interval {every}s of `{id}` is out of range; skipped");
                continue;
            };
            let next = *clock.next.entry(key.clone()).or_insert(due);
            if next > now {
                continue;
            }
            clock.next.insert(key.clone(), due);
            if !clock.running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone()) {
                tracing::debug!(plugin = %plugin.name, "schedule `{id}` still running; this run is skipped");
                continue;
            }
            let (engine, plugin, running) = (engine.clone(), plugin.clone(), clock.running.clone());
            tokio::spawn(async move {
                let mut fields = Map::new();
                if hook == HookName::RunSchedule {
                    fields.insert("id".into(), Value::String(id.clone()));
                }
                let _ = engine.call_one(&plugin, hook, fields).await;
                running.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            });
        }
    }
    clock.next.retain(|k, _| live.contains(k));
}
