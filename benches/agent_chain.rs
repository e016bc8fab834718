//! A `tool_call_pre` chain of five guard plugins through the agent engine,
//! as Rust components and as persistent python JSON-RPC workers (each asks
//! the host for its `BLOCK_PATTERN` on every call), with a one-plugin chain
//! of the same kind as the yardstick.
//!
//! Run: `cargo bench --bench agent_chain`. Criterion groups first; then a
//! summary from paired, alternating samples (`support::paired`): per kind,
//! the 1-plugin and 5-plugin chain medians, their ratio, and the cost each
//! further plugin adds. Every call is a full chain: the command is allowed,
//! so all five plugins are asked.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group};
use ctxhost::agent::engine::AgentEngine;
use ctxhost::config::HostConfig;
use ctxhost::home::Home;
use ctxhost::plugin::LoadContext;
use serde_json::json;

/// An agent engine over `n` copies of guard example `example`.
fn engine(example: &str, n: usize) -> (tempfile::TempDir, Arc<AgentEngine>) {
    let dir = tempfile::tempdir().unwrap();
    for i in 1..=n {
        examples::copy_example(example, &dir.path().join("plugins").join(format!("{example}-{i}")));
    }
    let home = Home::at(dir.path());
    let config = HostConfig::default();
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    let (engine, warnings) = ctxhost::app::load_agent(&cx, Arc::default()).unwrap();
    assert_eq!(engine.plugins().len(), n, "{warnings:?}");
    (dir, engine)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let call = |engine: &AgentEngine| {
        let args = rt.block_on(engine.tool_call_pre("bench", "shell_exec", json!({"command": "ls -la"})));
        assert_eq!(args, Ok(json!({"command": "ls -la"})));
    };
    let kinds = [("component", "guard"), ("python_worker", "guard-python")];
    let engines: Vec<_> = kinds
        .iter()
        .map(|(label, example)| (*label, rt.block_on(async { (engine(example, 1), engine(example, 5)) })))
        .collect();
    // The blocked path works too (and warms every worker).
    for (_, ((_, one), (_, five))) in &engines {
        for e in [one, five] {
            let denied = rt.block_on(e.tool_call_pre("bench", "shell_exec", json!({"command": "rm -rf /"})));
            assert!(denied.unwrap_err().reason.contains("rm -rf"));
        }
    }

    let mut g = c.benchmark_group("agent_chain");
    g.sample_size(50);
    for (label, ((_, one), (_, five))) in &engines {
        g.bench_function(format!("{label}_x1"), |b| b.iter(|| call(black_box(one))));
        g.bench_function(format!("{label}_x5"), |b| b.iter(|| call(black_box(five))));
    }
    g.finish();

    println!("\nagent_chain summary (paired, alternating; medians):");
    for (label, ((_, one), (_, five))) in &engines {
        let (t1, t5, diff, ratio) = support::paired(300, || call(one), || call(five));
        println!(
            "  {label:<14} 1 plugin {t1:.3} ms, 5 plugins {t5:.3} ms: ratio {ratio:.2}x, {:.3} ms per further plugin",
            diff / 4.0
        );
    }
    for (_, ((_, one), (_, five))) in &engines {
        rt.block_on(one.shutdown());
        rt.block_on(five.shutdown());
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default().configure_from_args().final_summary();
}
