//! Per plugin, per hook counters, a latency histogram (for exporters that
//! aggregate, Prometheus) and the latencies of the last [`WINDOW`] calls (for
//! exact percentiles), shared by every plugin kind. Recording is a short
//! lock; views are computed on demand.
//!
//! Persistent workers (spec section 7) add two counters per plugin and hook:
//! workers replaced after a fault (`worker_respawns`) and calls retried on a
//! fresh worker (`worker_retries`). The worker pool records them into the
//! engine's `Metrics` the layer attached to its runner
//! (`Runner::attach_metrics`).
//!
//! Host-wide: after_turn writes to the built-in memory that failed
//! (`memory_write_failures`; the caller got an error for each), and the
//! after_turn journal's events ([`JournalEvent`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::protocol::HookName;

/// Upper bounds of the latency buckets, in milliseconds (the last is open).
const BUCKETS_MS: [f64; 16] =
    [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 30000.0];

/// Percentiles are exact over this many most recent calls of one plugin's hook.
pub const WINDOW: usize = 1024;

/// How one call of one plugin's hook ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Success,
    /// Failed, and the engine used the built-in behaviour (or the next layer).
    Fallback,
    /// Failed, and the failure was passed on (`abort`).
    Failure,
}

/// A persistent-worker event, counted per plugin and hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerEvent {
    /// A worker was killed after a fault (timeout, crash, oversized or
    /// non-JSON reply) and is replaced.
    Respawn,
    /// A call was retried on a fresh worker after such a fault.
    Retry,
    /// A one-shot Python call was spawned because the plugin's fork server
    /// could not take it (not startable, dead, declined).
    ForkserverFallback,
}

/// An event of the after_turn journal, counted host-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalEvent {
    /// An entry another (or an earlier) ctxhost process journaled was run here.
    Replay,
    /// An entry was run again after a failed attempt.
    Retry,
    /// An entry used up its attempts and was kept as a dead letter.
    DeadLetter,
    /// A turn's plugin calls could not be journaled (the caller got an error).
    AppendFailure,
}

/// The journal's counters so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JournalCounts {
    pub replays: u64,
    pub retries: u64,
    pub dead_letters: u64,
    pub append_failures: u64,
}

/// The persistent-worker counters of one plugin's hook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct WorkerCounts {
    respawns: u64,
    retries: u64,
    forkserver_fallbacks: u64,
}

#[derive(Debug, Clone, Default)]
struct Stats {
    calls: u64,
    successes: u64,
    failures: u64,
    fallbacks: u64,
    total_ms: f64,
    buckets: [u64; BUCKETS_MS.len() + 1],
    /// The latencies (ms) of the last [`WINDOW`] calls, a ring: `next` is
    /// where the next one goes once it is full.
    recent: Vec<f64>,
    next: usize,
    worker: WorkerCounts,
}

impl Stats {
    fn remember(&mut self, ms: f64) {
        if self.recent.len() < WINDOW {
            self.recent.push(ms);
        } else {
            self.recent[self.next] = ms;
            self.next = (self.next + 1) % WINDOW;
        }
    }
}

/// The metrics of one plugin's hook.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookMetrics {
    pub calls: u64,
    pub successes: u64,
    /// Every failed call (fallbacks included).
    pub failures: u64,
    pub fallbacks: u64,
    pub total_ms: f64,
    /// Percentiles of the latency (nearest rank), exact over the last
    /// [`WINDOW`] calls; 0 before the first call.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// Persistent workers replaced after a fault.
    pub worker_respawns: u64,
    /// Calls retried on a fresh persistent worker.
    pub worker_retries: u64,
    /// One-shot Python calls spawned because the fork server could not take them.
    pub forkserver_fallbacks: u64,
}

/// LibreFang's flat per-hook view (spec section 9), summed over plugins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlatHookMetrics {
    pub calls: u64,
    pub successes: u64,
    pub failures: u64,
    pub total_ms: f64,
}

/// One plugin's hook, raw: counters and a cumulative latency histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct HookHistogram {
    pub plugin: String,
    pub hook: HookName,
    pub calls: u64,
    pub successes: u64,
    pub failures: u64,
    pub fallbacks: u64,
    pub sum_seconds: f64,
    /// Persistent workers replaced after a fault.
    pub worker_respawns: u64,
    /// Calls retried on a fresh persistent worker.
    pub worker_retries: u64,
    /// One-shot Python calls spawned because the fork server could not take them.
    pub forkserver_fallbacks: u64,
    /// `(upper bound in seconds, calls at or under it)`, ascending; the
    /// open last bucket is `calls`.
    pub buckets: Vec<(f64, u64)>,
}

/// One call recorded while a trace was on ([`traced`]): a plugin's (or the
/// built-in engine's, `default`) part in one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub plugin: String,
    pub hook: &'static str,
    pub elapsed_ms: f64,
    /// `success`, `fallback` or `failure`.
    pub outcome: &'static str,
}

/// Calls one trace keeps at most.
const MAX_TRACE: usize = 256;

tokio::task_local! {
    static TRACE: std::cell::RefCell<Vec<CallRecord>>;
}

/// Runs `f`, collecting every call [`Metrics::record`] (or [`note`]) sees
/// on this task meanwhile (calls on other tasks — background after_turn —
/// are not in it).
pub async fn traced<F: std::future::Future>(f: F) -> (F::Output, Vec<CallRecord>) {
    TRACE
        .scope(std::cell::RefCell::new(Vec::new()), async move {
            let out = f.await;
            let calls = TRACE.try_with(std::cell::RefCell::take).unwrap_or_default();
            (out, calls)
        })
        .await
}

/// Adds a call to the trace of this task, if one is on (else nothing).
pub fn note(plugin: &str, hook: HookName, elapsed: Duration, outcome: CallOutcome) {
    let _ = TRACE.try_with(|t| {
        let mut t = t.borrow_mut();
        if t.len() < MAX_TRACE {
            t.push(CallRecord {
                plugin: plugin.to_owned(),
                hook: hook.as_str(),
                elapsed_ms: elapsed.as_secs_f64() * 1e3,
                outcome: match outcome {
                    CallOutcome::Success => "success",
                    CallOutcome::Fallback => "fallback",
                    CallOutcome::Failure => "failure",
                },
            });
        }
    });
}

/// All metrics of an engine.
#[derive(Debug, Default)]
pub struct Metrics {
    stats: Mutex<BTreeMap<(String, HookName), Stats>>,
    /// after_turn writes to the built-in memory that failed.
    memory_write_failures: std::sync::atomic::AtomicU64,
    /// The after_turn journal's events.
    journal: Mutex<JournalCounts>,
}

impl Metrics {
    /// Counts one after_turn whose built-in memory write failed.
    pub fn record_memory_write_failure(&self) {
        self.memory_write_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// after_turn writes to the built-in memory that failed so far.
    pub fn memory_write_failures(&self) -> u64 {
        self.memory_write_failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts one event of the after_turn journal.
    pub fn record_journal(&self, event: JournalEvent) {
        let mut j = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            JournalEvent::Replay => j.replays += 1,
            JournalEvent::Retry => j.retries += 1,
            JournalEvent::DeadLetter => j.dead_letters += 1,
            JournalEvent::AppendFailure => j.append_failures += 1,
        }
    }

    /// The after_turn journal's counters so far.
    pub fn journal(&self) -> JournalCounts {
        *self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn record(&self, plugin: &str, hook: HookName, elapsed: Duration, outcome: CallOutcome) {
        note(plugin, hook, elapsed, outcome);
        let ms = elapsed.as_secs_f64() * 1e3;
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let s = stats.entry((plugin.to_owned(), hook)).or_default();
        s.calls += 1;
        match outcome {
            CallOutcome::Success => s.successes += 1,
            CallOutcome::Fallback => {
                s.failures += 1;
                s.fallbacks += 1;
            }
            CallOutcome::Failure => s.failures += 1,
        }
        s.total_ms += ms;
        let bucket = BUCKETS_MS.iter().position(|&b| ms <= b).unwrap_or(BUCKETS_MS.len());
        s.buckets[bucket] += 1;
        s.remember(ms);
    }

    /// Counts one persistent-worker event of `plugin`'s `hook`.
    pub fn record_worker(&self, plugin: &str, hook: HookName, event: WorkerEvent) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let w = &mut stats.entry((plugin.to_owned(), hook)).or_default().worker;
        match event {
            WorkerEvent::Respawn => w.respawns += 1,
            WorkerEvent::Retry => w.retries += 1,
            WorkerEvent::ForkserverFallback => w.forkserver_fallbacks += 1,
        }
    }

    /// `plugin -> hook -> metrics`.
    pub fn by_plugin(&self) -> BTreeMap<String, BTreeMap<String, HookMetrics>> {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: BTreeMap<String, BTreeMap<String, HookMetrics>> = BTreeMap::new();
        for ((plugin, hook), s) in stats.iter() {
            out.entry(plugin.clone()).or_default().insert(hook.as_str().to_owned(), view(s));
        }
        out
    }

    /// The metrics of each plugin's hook whose calls or worker respawns
    /// changed since `seen` (which this updates): what a sampler needs, at
    /// the cost of copying only what changed. The percentiles are computed
    /// after the lock is let go, so recording calls never waits on them.
    pub fn changed_since(
        &self,
        seen: &mut BTreeMap<(String, HookName), (u64, u64)>,
    ) -> Vec<(String, HookName, HookMetrics)> {
        let changed: Vec<((String, HookName), Stats)> = {
            let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            stats
                .iter()
                .filter(|(key, s)| seen.get(*key) != Some(&(s.calls, s.worker.respawns)))
                .map(|(key, s)| (key.clone(), s.clone()))
                .collect()
        };
        changed
            .into_iter()
            .map(|((plugin, hook), s)| {
                seen.insert((plugin.clone(), hook), (s.calls, s.worker.respawns));
                (plugin, hook, view(&s))
            })
            .collect()
    }

    /// Every plugin's hook with its raw counters and latency histogram, for
    /// exporters (Prometheus) that aggregate on their side.
    pub fn histograms(&self) -> Vec<HookHistogram> {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats
            .iter()
            .map(|((plugin, hook), s)| {
                let w = s.worker;
                let mut cumulative = 0;
                let buckets = BUCKETS_MS
                    .iter()
                    .zip(s.buckets.iter())
                    .map(|(&le, &n)| {
                        cumulative += n;
                        (le / 1e3, cumulative)
                    })
                    .collect();
                HookHistogram {
                    plugin: plugin.clone(),
                    hook: *hook,
                    calls: s.calls,
                    successes: s.successes,
                    failures: s.failures,
                    fallbacks: s.fallbacks,
                    sum_seconds: s.total_ms / 1e3,
                    worker_respawns: w.respawns,
                    worker_retries: w.retries,
                    forkserver_fallbacks: w.forkserver_fallbacks,
                    buckets,
                }
            })
            .collect()
    }

    /// `hook -> {calls, successes, failures, total_ms}` summed over plugins;
    /// empty when nothing was called.
    pub fn flat(&self) -> BTreeMap<String, FlatHookMetrics> {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: BTreeMap<String, FlatHookMetrics> = BTreeMap::new();
        for ((_, hook), s) in stats.iter() {
            let e = out.entry(hook.as_str().to_owned()).or_insert(FlatHookMetrics {
                calls: 0,
                successes: 0,
                failures: 0,
                total_ms: 0.0,
            });
            e.calls += s.calls;
            e.successes += s.successes;
            e.failures += s.failures;
            e.total_ms += s.total_ms;
        }
        out
    }
}

fn view(s: &Stats) -> HookMetrics {
    let mut sorted = s.recent.clone();
    sorted.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        // Nearest rank: the smallest value with at least q of them at or under it.
        let rank = (q * sorted.len() as f64).ceil() as usize;
        sorted.get(rank.saturating_sub(1)).copied().unwrap_or(0.0)
    };
    HookMetrics {
        calls: s.calls,
        successes: s.successes,
        failures: s.failures,
        fallbacks: s.fallbacks,
        total_ms: s.total_ms,
        p50_ms: quantile(0.5),
        p90_ms: quantile(0.9),
        p99_ms: quantile(0.99),
        worker_respawns: s.worker.respawns,
        worker_retries: s.worker.retries,
        forkserver_fallbacks: s.worker.forkserver_fallbacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentiles() {
        let m = Metrics::default();
        for i in 0..100 {
            let outcome = if i < 90 { CallOutcome::Success } else { CallOutcome::Fallback };
            m.record("p", HookName::Ingest, Duration::from_micros(if i < 90 { 800 } else { 40_000 }), outcome);
        }
        m.record("q", HookName::Ingest, Duration::from_millis(3), CallOutcome::Failure);
        let v = &m.by_plugin()["p"]["ingest"];
        assert_eq!((v.calls, v.successes, v.failures, v.fallbacks), (100, 90, 10, 10));
        assert_eq!((v.p50_ms, v.p90_ms, v.p99_ms), (0.8, 0.8, 40.0), "real latencies, not bucket bounds");
        let flat = &m.flat()["ingest"];
        assert_eq!((flat.calls, flat.successes, flat.failures), (101, 90, 11));
        assert!(!m.flat().contains_key("assemble"));
        let h = m.histograms();
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].plugin.as_str(), h[0].calls, h[0].fallbacks), ("p", 100, 10));
        assert_eq!(h[0].buckets[2], (0.001, 90), "0.8 ms calls fall under the 1 ms bound");
        assert_eq!(h[0].buckets.last().map(|b| b.1), Some(100));
        assert!((h[0].sum_seconds - (90.0 * 0.0008 + 10.0 * 0.04)).abs() < 1e-9);
        assert_eq!((v.worker_respawns, v.worker_retries), (0, 0));
    }

    #[test]
    fn percentiles_are_exact_over_the_last_calls() {
        let m = Metrics::default();
        // 1..=100 ms, shuffled: p50 is 50, p90 90, p99 99 (nearest rank).
        for i in 0..100u64 {
            let ms = (i * 37) % 100 + 1;
            m.record("p", HookName::Assemble, Duration::from_millis(ms), CallOutcome::Success);
        }
        let v = &m.by_plugin()["p"]["assemble"];
        assert_eq!((v.p50_ms, v.p90_ms, v.p99_ms), (50.0, 90.0, 99.0));
        // Three calls: 7, 12, 300 ms — the median is 12, not a bucket's bound.
        for ms in [300, 7, 12] {
            m.record("q", HookName::Ingest, Duration::from_millis(ms), CallOutcome::Success);
        }
        let v = &m.by_plugin()["q"]["ingest"];
        assert_eq!((v.p50_ms, v.p99_ms), (12.0, 300.0));
        // Only the last WINDOW calls count: slow calls long ago drop out.
        for _ in 0..WINDOW {
            m.record("q", HookName::Ingest, Duration::from_micros(2500), CallOutcome::Success);
        }
        let v = &m.by_plugin()["q"]["ingest"];
        assert_eq!((v.calls, v.p50_ms, v.p99_ms), (WINDOW as u64 + 3, 2.5, 2.5));
        let h = m.histograms();
        assert_eq!(h[1].buckets.last().map(|b| b.1), Some(WINDOW as u64 + 3), "the histogram keeps every call");
        assert_eq!(Metrics::default().by_plugin().get("p"), None);
    }

    #[tokio::test]
    async fn a_trace_collects_the_calls_of_its_task_only() {
        let m = std::sync::Arc::new(Metrics::default());
        let inner = m.clone();
        let ((), calls) = traced(async move {
            inner.record("p", HookName::Ingest, Duration::from_millis(2), CallOutcome::Success);
            note("default", HookName::Ingest, Duration::from_millis(1), CallOutcome::Success);
            let other = inner.clone();
            tokio::spawn(async move { other.record("bg", HookName::AfterTurn, Duration::ZERO, CallOutcome::Failure) })
                .await
                .unwrap();
            inner.record("q", HookName::Ingest, Duration::from_millis(3), CallOutcome::Fallback);
        })
        .await;
        let seen: Vec<(&str, &str)> = calls.iter().map(|c| (c.plugin.as_str(), c.outcome)).collect();
        assert_eq!(seen, [("p", "success"), ("default", "success"), ("q", "fallback")]);
        m.record("p", HookName::Ingest, Duration::ZERO, CallOutcome::Success);
        assert_eq!(m.by_plugin()["p"]["ingest"].calls, 2, "recording without a trace still counts");
    }

    #[test]
    fn changed_since_reports_only_what_changed() {
        let m = Metrics::default();
        let mut seen = BTreeMap::new();
        m.record("p", HookName::Ingest, Duration::from_millis(2), CallOutcome::Success);
        m.record("q", HookName::Assemble, Duration::from_millis(4), CallOutcome::Fallback);
        let first = m.changed_since(&mut seen);
        assert_eq!(first.len(), 2);
        assert!(m.changed_since(&mut seen).is_empty(), "nothing new");
        m.record("q", HookName::Assemble, Duration::from_millis(6), CallOutcome::Success);
        m.record_worker("p", HookName::Ingest, WorkerEvent::Respawn);
        let again = m.changed_since(&mut seen);
        let q = again.iter().find(|(p, _, _)| p == "q").unwrap();
        assert_eq!((q.2.calls, q.2.fallbacks, q.2.p99_ms), (2, 1, 6.0));
        let p = again.iter().find(|(p, _, _)| p == "p").unwrap();
        assert_eq!((p.2.calls, p.2.worker_respawns), (1, 1), "a respawn alone is a change");
    }

    #[test]
    fn worker_events_show_for_the_hooks_an_engine_called() {
        let m = Metrics::default();
        m.record("metrics-test-worker", HookName::Ingest, Duration::from_micros(100), CallOutcome::Success);
        m.record_worker("metrics-test-worker", HookName::Ingest, WorkerEvent::Respawn);
        m.record_worker("metrics-test-worker", HookName::Ingest, WorkerEvent::Retry);
        m.record_worker("metrics-test-worker", HookName::Ingest, WorkerEvent::Respawn);
        let v = &m.by_plugin()["metrics-test-worker"];
        assert_eq!((v["ingest"].worker_respawns, v["ingest"].worker_retries), (2, 1));
        assert_eq!(v["ingest"].calls, 1, "events are not calls");
        let h = m.histograms();
        assert_eq!((h[0].worker_respawns, h[0].worker_retries), (2, 1));
        assert!(Metrics::default().by_plugin().is_empty(), "another engine's metrics see none of it");
    }
}
