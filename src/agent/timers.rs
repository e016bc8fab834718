//! The agent engine's clock: one task that, every tick, fires due triggers
//! (through `trigger_fire`, then to the embedder; each firing on its own
//! task, a few at once), drops expired ones, runs plugins' `[[schedules]]`
//! and sends `heartbeat`s.
//!
//! Several instances on one store: a due trigger is claimed in the store
//! (`Triggers::claim_due`, only as many as can fire now) until the claim's
//! end, fired from the claimed row, and settled (its firing recorded) after
//! the `trigger_fire` chain; the claim is renewed while the chain runs. A
//! claim of an instance that died runs out and another instance fires the
//! trigger: at least once, and exactly once unless an instance dies
//! between its claim and the settlement. A schedule runs where its lease
//! (`schedule:<plugin>/<id>` in the store) is held: the holder renews it at
//! each due time, the others try at theirs and take it over once it ran
//! out, or at once when the holder shut down cleanly: [`Timers::release`]
//! (the daemon's stop, on SIGTERM) drops the leases this clock holds, so
//! another instance takes each schedule over at its next due time, within
//! one period. Heartbeats stay per instance (they are for this instance's
//! workers).
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
use crate::host::store::DueStep;
use crate::host::store::journal::Owner;
use crate::host::triggers::Claimed;
use crate::protocol::HookName;

/// How often the clock looks at triggers and schedules.
pub const TICK: Duration = Duration::from_millis(200);

/// How long a trigger claim lasts unless renewed (renewed every third of it
/// while its firing runs): how soon another instance fires a trigger whose
/// claimer died.
pub const TRIGGER_CLAIM_SECS: u64 = 6;

/// How long a schedule's lease lasts past its period: the holder renews it
/// at each due time, so it outlives one period by this much.
pub const SCHEDULE_LEASE_SLACK: Duration = Duration::from_secs(2);

/// The default time between heartbeats (`heartbeat_secs`).
pub const HEARTBEAT_SECS: f64 = 10.0;

/// The running clock; dropping it stops it (its leases run out in the
/// store); [`Timers::release`] stops it and gives them back.
pub struct Timers {
    task: tokio::task::JoinHandle<()>,
    leases: Arc<Leases>,
    store: Arc<dyn crate::host::store::Store>,
}

/// The schedule leases this clock holds, and whether it is stopping (then
/// it takes none).
#[derive(Default)]
struct Leases {
    held: Mutex<BTreeSet<String>>,
    stopping: std::sync::atomic::AtomicBool,
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
        let leases = Arc::new(Leases::default());
        Timers { task: tokio::spawn(run(weak, tick, leases.clone())), leases, store: engine.shared().store().clone() }
    }

    /// Stops the clock and drops the schedule leases it holds, so other
    /// instances take those schedules over at their next due time rather
    /// than when the leases run out. A run under way finishes. Failures are
    /// logged (the leases then run out as after a crash). Returns the names
    /// of the leases given back.
    pub async fn release(&self) -> Vec<String> {
        self.leases.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.abort();
        let names: Vec<String> =
            std::mem::take(&mut *self.leases.held.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
        if names.is_empty() {
            return names;
        }
        let store = self.store.clone();
        let holder = Owner::this_process();
        let dropped = crate::host::store::off_runtime("lease_drop", move || {
            let mut dropped = Vec::new();
            for name in names {
                if store.lease_drop(&name, holder.as_str())? {
                    dropped.push(name);
                }
            }
            Ok(dropped)
        })
        .await;
        match dropped {
            Ok(Ok(names)) => names,
            Ok(Err(e)) | Err(e) => {
                tracing::warn!("schedule leases not given back (they run out instead): {e}");
                Vec::new()
            }
        }
    }
}

#[derive(Default)]
struct Clock {
    /// Next due instant per `(plugin, schedule id)`; `""` is the heartbeat.
    next: BTreeMap<(String, String), Instant>,
    running: Arc<Mutex<BTreeSet<(String, String)>>>,
}

async fn run(engine: Weak<AgentEngine>, tick: Duration, leases: Arc<Leases>) {
    let mut clock = Clock::default();
    let firing = Arc::new(tokio::sync::Semaphore::new(FIRING_AT_ONCE));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        fire_due_triggers(&engine, &firing).await;
        run_due_schedules(&engine, &mut clock, &leases);
    }
}

/// How many trigger firings (each a `trigger_fire` chain) run at once.
const FIRING_AT_ONCE: usize = 8;

async fn fire_due_triggers(engine: &Arc<AgentEngine>, firing: &Arc<tokio::sync::Semaphore>) {
    // Claim only what can fire now: a claim waiting here for a slot would
    // keep the trigger from instances that have one.
    let free = firing.available_permits();
    if free == 0 {
        return;
    }
    let now = now_secs();
    let until = now + TRIGGER_CLAIM_SECS;
    let due = match engine.shared().triggers_off(move |t| t.claim_due(now, until, free)).await {
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
    for claimed in due.fire {
        let (engine, firing) = (engine.clone(), firing.clone());
        tokio::spawn(async move {
            let Ok(_permit) = firing.acquire_owned().await else { return };
            fire_claimed(&engine, claimed).await;
        });
    }
}

/// Fires one claimed trigger, renewing the claim while `trigger_fire` runs,
/// then records the firing (unless the claim was lost: then another
/// instance fires it too, which is logged).
async fn fire_claimed(engine: &Arc<AgentEngine>, claimed: Claimed) {
    let firing_id = claimed.firing_id();
    let Claimed { id, trigger, step, until, .. } = claimed;
    let mut token = until;
    let renew_every = Duration::from_secs(TRIGGER_CLAIM_SECS / 3).max(Duration::from_secs(1));
    let fire = engine.fire(trigger, firing_id);
    tokio::pin!(fire);
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    let mut held = true;
    loop {
        tokio::select! {
            _ = &mut fire => break,
            _ = renew.tick(), if held => {
                let (at, next) = (id.clone(), now_secs() + TRIGGER_CLAIM_SECS);
                match engine.shared().triggers_off(move |t| t.settle(&at, token, DueStep::Claim { until: next })).await {
                    Ok(true) => token = next,
                    Ok(false) => held = false,
                    Err(e) => tracing::warn!("trigger `{id}`: its claim cannot be renewed: {e}"),
                }
            }
        }
    }
    let at = id.clone();
    match engine.shared().triggers_off(move |t| t.settle(&at, token, step)).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            "trigger `{id}` fired, but its claim was lost meanwhile (it ran out, or the trigger changed): \
             it may fire again"
        ),
        Err(e) => tracing::warn!("trigger `{id}` fired, but its firing cannot be recorded (it fires again): {e}"),
    }
}

fn run_due_schedules(engine: &Arc<AgentEngine>, clock: &mut Clock, leases: &Arc<Leases>) {
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
            let (engine, plugin, running, leases) =
                (engine.clone(), plugin.clone(), clock.running.clone(), leases.clone());
            let lease = (hook == HookName::RunSchedule)
                .then(|| (format!("schedule:{}/{id}", plugin.name), (due - now).saturating_add(SCHEDULE_LEASE_SLACK)));
            tokio::spawn(async move {
                // Taken (or renewed) before the overlap check: a holder whose
                // run is still going keeps its schedule.
                if let Some((name, duration)) = lease {
                    let store = engine.shared().store().clone();
                    let holder = Owner::this_process();
                    let at = name.clone();
                    let took = crate::host::store::off_runtime("lease_take", move || {
                        store.lease_take(&at, holder.as_str(), duration)
                    })
                    .await;
                    match took {
                        Ok(Ok(true)) => {
                            // Under the lock: `release` either finds it in the
                            // set or this task sees it stopping.
                            let stopping = {
                                let mut held = leases.held.lock().unwrap_or_else(|p| p.into_inner());
                                let stopping = leases.stopping.load(std::sync::atomic::Ordering::SeqCst);
                                if !stopping {
                                    held.insert(name.clone());
                                }
                                stopping
                            };
                            if stopping {
                                let (store, holder) = (engine.shared().store().clone(), Owner::this_process());
                                let _ = crate::host::store::off_runtime("lease_drop", move || {
                                    store.lease_drop(&name, holder.as_str())
                                })
                                .await;
                                return;
                            }
                        }
                        Ok(Ok(false)) => {
                            leases.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
                            return;
                        }
                        Ok(Err(e)) | Err(e) => {
                            tracing::warn!(plugin = %plugin.name, "schedule `{id}` skipped: its lease `{name}`: {e}");
                            return;
                        }
                    }
                }
                if !running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone()) {
                    tracing::debug!(plugin = %plugin.name, "schedule `{id}` still running; this run is skipped");
                    return;
                }
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
