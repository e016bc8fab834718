//! Component plugins: a warm hook call, a cold load from the `.cwasm`
//! cache, and what fuel metering costs on CPU-bound guest code.
//!
//! Run: `cargo bench --bench component`. Goals: warm call p50 under 25 µs
//! (fresh instance + call, ~1 KB in and out), cached load under 5 ms, fuel
//! overhead under 15 %. After the criterion groups a summary prints the p50
//! of the warm call and the fuel ratio from paired, alternating samples.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group};
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::wasm::component::{ComponentRunner, Limits, bench_engine};
use serde_json::json;

fn load(wasm: &Path, dir: &Path, cache: Option<&Path>) -> ComponentRunner {
    ComponentRunner::load("bench", wasm, Limits::default(), Default::default(), dir.join("kv"), cache).unwrap()
}

/// About 1 KB of tool output with one secret in it (the reply is as long).
fn transform_request() -> HookRequest {
    let mut result = "log line: request served in 12 ms; ".repeat(28);
    result.push_str("token sk-abcdefghijklmnopqrstuvwxyz0123");
    HookRequest::from_json(HookName::TransformToolResult, json!({"tool_name": "logs", "result": result})).unwrap()
}

fn work_request(rounds: u64) -> HookRequest {
    HookRequest::from_json(HookName::Ingest, json!({"agent_id": "b", "message": format!("work:{rounds}")})).unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let redact = examples::component("redact");
    let hostile = examples::component("hostile");
    let warm = load(&redact, dir.path(), Some(&cache));
    let request = transform_request();
    assert!(warm.call_sync(&request).unwrap()["content"].as_str().unwrap().contains("[REDACTED]"));

    let mut g = c.benchmark_group("component");
    g.bench_function("warm_call_1kb", |b| b.iter(|| black_box(warm.call_sync(&request).unwrap())));
    g.bench_function("cold_load_from_cwasm", |b| {
        b.iter(|| {
            let r = load(&redact, dir.path(), Some(&cache));
            assert!(r.from_cache());
            black_box(r)
        })
    });
    let work = work_request(2_000_000);
    let on = ComponentRunner::load_with_engine(
        &bench_engine(true),
        "bench",
        &hostile,
        Limits { fuel: u64::MAX / 4, timeout_ms: u64::MAX / 4, ..Limits::default() },
        Default::default(),
        dir.path().join("kv"),
        None,
    )
    .unwrap();
    let off = ComponentRunner::load_with_engine(
        &bench_engine(false),
        "bench",
        &hostile,
        Limits { timeout_ms: u64::MAX / 4, ..Limits::default() },
        Default::default(),
        dir.path().join("kv"),
        None,
    )
    .unwrap();
    assert_eq!(on.call_sync(&work).unwrap(), off.call_sync(&work).unwrap());
    g.sample_size(30);
    g.bench_function("cpu_bound_fuel_on", |b| b.iter(|| black_box(on.call_sync(&work).unwrap())));
    g.bench_function("cpu_bound_fuel_off", |b| b.iter(|| black_box(off.call_sync(&work).unwrap())));
    g.finish();

    println!("\nSummary:");
    let (warm_samples, _, _, _) = support::paired_samples(5000, || drop(warm.call_sync(&request)), || ());
    let p50_us = support::quantile(warm_samples, 0.5) * 1e3;
    let verdict = if p50_us < 25.0 { "meets" } else { "MISSES" };
    println!("  warm call (fresh instance + call, ~1 KB in/out): p50 {p50_us:.1} µs ({verdict} < 25 µs)");
    let (off_ms, on_ms, _, ratio) = support::paired(60, || drop(off.call_sync(&work)), || drop(on.call_sync(&work)));
    let verdict = if ratio < 1.15 { "meets" } else { "MISSES" };
    println!(
        "  CPU-bound guest: fuel off {off_ms:.2} ms, fuel on {on_ms:.2} ms, overhead {:+.1} % ({verdict} < 15 %)",
        (ratio - 1.0) * 100.0
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
