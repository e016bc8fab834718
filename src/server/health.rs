//! Health over time: every [`INTERVAL`] a sampler reads what changed in
//! the engine's metrics and keeps, per plugin and hook, one sample —
//! calls, failures and fallbacks within the interval, p50 and p99 then —
//! for the last [`MAX_MINUTES`] minutes; `GET /api/health/series` serves
//! them with each hook's breaker state and worker respawns now.
//!
//! Bounded: [`KEEP`] samples per plugin's hook. Never slows a hook: the
//! metrics are copied (only what changed) under their lock and the
//! percentiles computed after, off the async threads; the samples' own
//! lock is never held across an await.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::AppState;
use super::body::JsonReply;
use crate::engine::layer::BreakerGate;
use crate::metrics::{HookMetrics, Metrics};
use crate::protocol::HookName;

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How far back the series go.
pub const MAX_MINUTES: u64 = 15;
/// Samples kept per plugin's hook.
const KEEP: usize = (MAX_MINUTES * 60 / INTERVAL.as_secs()) as usize;

/// One interval of one plugin's hook.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    t_ms: u64,
    calls: u64,
    failures: u64,
    fallbacks: u64,
    p50_ms: f64,
    p99_ms: f64,
}

struct Series {
    samples: VecDeque<Sample>,
    /// The metrics at the last sample.
    last: HookMetrics,
}

/// The series of every plugin's hook that was ever called.
#[derive(Default)]
pub(crate) struct Health {
    series: Mutex<BTreeMap<(String, HookName), Series>>,
}

impl Health {
    /// Adds one sample to every series: `changed` are the hooks whose
    /// metrics moved (their deltas against the last sample), the others get
    /// an empty interval.
    fn sample(&self, t_ms: u64, changed: Vec<(String, HookName, HookMetrics)>) {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let mut moved = std::collections::BTreeSet::new();
        for (plugin, hook, now) in changed {
            let key = (plugin, hook);
            let s = series.entry(key.clone()).or_insert_with(|| Series {
                samples: VecDeque::new(),
                last: HookMetrics { calls: 0, successes: 0, failures: 0, fallbacks: 0, ..now.clone() },
            });
            let sample = Sample {
                t_ms,
                calls: now.calls.saturating_sub(s.last.calls),
                failures: now.failures.saturating_sub(s.last.failures),
                fallbacks: now.fallbacks.saturating_sub(s.last.fallbacks),
                p50_ms: now.p50_ms,
                p99_ms: now.p99_ms,
            };
            push(&mut s.samples, sample);
            s.last = now;
            moved.insert(key);
        }
        for (_, s) in series.iter_mut().filter(|(k, _)| !moved.contains(*k)) {
            let sample =
                Sample { t_ms, calls: 0, failures: 0, fallbacks: 0, p50_ms: s.last.p50_ms, p99_ms: s.last.p99_ms };
            push(&mut s.samples, sample);
        }
    }
}

fn push(samples: &mut VecDeque<Sample>, sample: Sample) {
    if samples.len() == KEEP {
        samples.pop_front();
    }
    samples.push_back(sample);
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Samples `metrics` into `health` every [`INTERVAL`] until aborted.
pub(crate) fn start(metrics: Arc<Metrics>, health: Arc<Health>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut seen = BTreeMap::new();
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let (m, mut s) = (metrics.clone(), std::mem::take(&mut seen));
            let Ok((changed, s)) = tokio::task::spawn_blocking(move || (m.changed_since(&mut s), s)).await else {
                continue;
            };
            seen = s;
            health.sample(now_ms(), changed);
        }
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct SeriesQuery {
    minutes: Option<u64>,
}

/// `GET /api/health/series?minutes=N` (1..=15, default 5).
pub(crate) async fn series(State(state): State<Arc<AppState>>, Query(q): Query<SeriesQuery>) -> JsonReply {
    let minutes = q.minutes.unwrap_or(5).clamp(1, MAX_MINUTES);
    let now = now_ms();
    let since = now.saturating_sub(minutes * 60_000);
    let listed: Vec<(String, HookName, Vec<Sample>, HookMetrics)> = {
        let series = state.health.series.lock().unwrap_or_else(|p| p.into_inner());
        series
            .iter()
            .map(|((plugin, hook), s)| {
                let samples = s.samples.iter().filter(|x| x.t_ms >= since).cloned().collect();
                (plugin.clone(), *hook, samples, s.last.clone())
            })
            .collect()
    };
    let out: Vec<_> = listed
        .into_iter()
        .map(|(plugin, hook, samples, last)| {
            let breaker = match state.engine.layer(&plugin).map(|l| l.breaker_gate(hook)) {
                None | Some(BreakerGate::Closed) => "closed",
                Some(BreakerGate::HalfOpen) => "half_open",
                Some(BreakerGate::Open { .. }) => "open",
            };
            json!({
                "plugin": plugin,
                "hook": hook.as_str(),
                "samples": samples,
                "totals": {"calls": last.calls, "failures": last.failures, "fallbacks": last.fallbacks,
                           "p50_ms": last.p50_ms, "p99_ms": last.p99_ms},
                "breaker": breaker,
                "worker_respawns": last.worker_respawns,
            })
        })
        .collect();
    JsonReply::ok(json!({"interval_secs": INTERVAL.as_secs(), "minutes": minutes, "now_ms": now, "series": out}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(calls: u64, failures: u64, p50: f64) -> HookMetrics {
        HookMetrics {
            calls,
            successes: calls - failures,
            failures,
            fallbacks: failures,
            total_ms: 0.0,
            p50_ms: p50,
            p90_ms: p50,
            p99_ms: p50,
            worker_respawns: 0,
            worker_retries: 0,
            forkserver_fallbacks: 0,
        }
    }

    #[test]
    fn samples_hold_the_calls_of_their_interval_and_are_bounded() {
        let h = Health::default();
        h.sample(1, vec![("p".into(), HookName::Ingest, metrics(3, 1, 2.0))]);
        h.sample(2, vec![]);
        h.sample(3, vec![("p".into(), HookName::Ingest, metrics(10, 1, 4.0))]);
        {
            let series = h.series.lock().unwrap();
            let s = &series[&("p".to_owned(), HookName::Ingest)];
            let calls: Vec<(u64, u64, f64)> = s.samples.iter().map(|x| (x.calls, x.failures, x.p50_ms)).collect();
            assert_eq!(calls, [(3, 1, 2.0), (0, 0, 2.0), (7, 0, 4.0)]);
        }
        for t in 0..(KEEP as u64 * 2) {
            h.sample(10 + t, vec![]);
        }
        let series = h.series.lock().unwrap();
        let s = &series[&("p".to_owned(), HookName::Ingest)];
        assert_eq!(s.samples.len(), KEEP);
        assert_eq!(s.samples.back().map(|x| x.t_ms), Some(10 + KEEP as u64 * 2 - 1));
    }
}
