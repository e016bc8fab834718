//! The host-service state under load: one vfs write and one trigger save
//! through the services dispatcher (what a plugin's `vfs.write` and
//! `trigger.create` do), with 8 writers — 8 plugins, each its own task on a
//! 2-worker runtime — at once.
//!
//! Run: `cargo bench --bench store`. Criterion times one round (the 8
//! writers' ops at once); then a summary gives the per-op latency
//! quantiles (p50, p90, p99) under 8 concurrent writers, for a small state
//! (each plugin 10 files, 10 triggers) and a loaded one (each plugin 500
//! files of 1 KiB, 100 triggers: the whole state is ~4 MiB).
//! `CTXHOST_BENCH_STORE_OPS=N` sets the ops per writer of the summary
//! (default 400).
//!
//! Measured on the 2-core dev machine (issue 14), p50 per op / ops per second:
//! | | JSON files (before) | state.db (after) |
//! |---|---|---|
//! | vfs write, small | 0.611 ms / 2,955 | 0.282 ms / 15,446 |
//! | trigger save, small | 0.331 ms / 3,904 | 0.369 ms / 16,166 |
//! | vfs write, loaded | 10.364 ms / 143 | 0.426 ms / 12,336 |
//! | trigger save, loaded | 0.945 ms / 1,258 | 0.367 ms / 15,821 |
//!
//! Before, a write held a runtime worker while it rewrote the whole file, so
//! the other writers' wait was partly queueing on the runtime, which a
//! per-op timer started inside the task does not see: compare the rates too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use ctxhost::home::Home;
use ctxhost::host::services::{CallContext, ConfigView, PluginServices, SharedServices};
use serde_json::{Value, json};

const WRITERS: usize = 8;

/// A home whose services hold `files` vfs files of 1 KiB and `triggers`
/// triggers per plugin, and the 8 plugins' services.
struct Setup {
    _dir: tempfile::TempDir,
    plugins: Vec<Arc<PluginServices>>,
}

fn setup(rt: &tokio::runtime::Runtime, files: usize, triggers: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    let shared = SharedServices::open(&home).unwrap();
    let plugins: Vec<Arc<PluginServices>> = (0..WRITERS)
        .map(|i| {
            Arc::new(PluginServices::open(shared.clone(), &format!("p{i}"), Vec::new(), ConfigView::default()).unwrap())
        })
        .collect();
    let kib = "x".repeat(1024);
    rt.block_on(async {
        for p in &plugins {
            for f in 0..files {
                call(p, "vfs.write", json!({"path": format!("/plugins/{}/seed/{f}", p.name()), "content": kib})).await;
            }
            for t in 0..triggers {
                call(p, "trigger.create", trigger(&format!("{}-seed-{t}", p.name()))).await;
            }
        }
    });
    Setup { _dir: dir, plugins }
}

fn trigger(id: &str) -> Value {
    json!({"trigger": {"id": id, "type": "interval", "interval_seconds": 3600, "payload": {"n": 1}}})
}

async fn call(p: &PluginServices, method: &str, params: Value) -> Value {
    let cx = CallContext { agent_id: Some("bench".into()) };
    p.dispatch(method, params, &cx).await.unwrap_or_else(|e| panic!("{method}: {e}"))
}

#[derive(Clone, Copy)]
enum Op {
    VfsWrite,
    TriggerSave,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::VfsWrite => "vfs_write",
            Op::TriggerSave => "trigger_save",
        }
    }

    /// Op number `k` of plugin `p`: rewrites one of 16 files, or upserts one
    /// of 16 triggers (the state does not grow).
    async fn run(self, p: &PluginServices, k: usize) {
        match self {
            Op::VfsWrite => {
                let path = format!("/plugins/{}/hot/{}", p.name(), k % 16);
                call(p, "vfs.write", json!({"path": path, "content": format!("{k} {}", "y".repeat(1000))})).await;
            }
            Op::TriggerSave => {
                call(p, "trigger.create", trigger(&format!("{}-hot-{}", p.name(), k % 16))).await;
            }
        }
    }
}

/// 8 writers doing `ops` ops each, at once; every op's latency.
fn concurrent(rt: &tokio::runtime::Runtime, s: &Setup, op: Op, ops: usize) -> (Duration, Vec<Duration>) {
    rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = s
            .plugins
            .iter()
            .map(|p| {
                let p = p.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(ops);
                    for k in 0..ops {
                        let t = Instant::now();
                        op.run(&p, k).await;
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        (start.elapsed(), all)
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let states = [("small", setup(&rt, 10, 10)), ("loaded", setup(&rt, 500, 100))];

    let mut g = c.benchmark_group("store");
    g.sample_size(20);
    for (state, s) in &states {
        for op in [Op::VfsWrite, Op::TriggerSave] {
            // One iteration: each of the 8 writers does one op, all at once.
            g.bench_function(format!("{}_{state}_x8", op.label()), |b| {
                b.iter_custom(|iters| concurrent(&rt, s, op, iters as usize).0)
            });
        }
    }
    g.finish();

    let ops = std::env::var("CTXHOST_BENCH_STORE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    println!("\nstore summary: per-op latency with {WRITERS} concurrent writers, {ops} ops each (ms):");
    for (state, s) in &states {
        for op in [Op::VfsWrite, Op::TriggerSave] {
            let (wall, lat) = concurrent(&rt, s, op, ops);
            let ms: Vec<f64> = lat.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            println!(
                "  {:<13} {state:<7} p50 {:.3}  p90 {:.3}  p99 {:.3}  ({:.0} ops/s)",
                op.label(),
                support::quantile(ms.clone(), 0.5),
                support::quantile(ms.clone(), 0.9),
                support::quantile(ms, 0.99),
                lat.len() as f64 / wall.as_secs_f64()
            );
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default().configure_from_args().final_summary();
}
