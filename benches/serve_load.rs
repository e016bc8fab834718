//! Load check of `ctxhost serve`: 1,000 concurrent agent-API ingest calls
//! against a stack of two native hooks.
//!
//! Run: `cargo bench --bench serve_load`. Not a criterion bench: it fires
//! the calls all at once (each on its own connection), then checks that every
//! call answered 200 with both layers' memories, that the engine counted no
//! failure, and that no hook process and no file descriptor outlived the
//! burst. Reports throughput and latency percentiles. The yardstick in the
//! same run: the same 1,000 concurrent ingests on the same engine setup
//! called in-process (no HTTP), so the ratio is what the daemon adds.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxhost::app::load_stack;
use ctxhost::config::HostConfig;
use ctxhost::engine::ContextEngine;
use ctxhost::home::Home;
use ctxhost::plugin::LoadContext;
use ctxhost::protocol::IngestRequest;
use ctxhost::server::{ServeOptions, Server};

const CALLS: usize = 1000;
const ROUNDS: usize = 3;

fn main() {
    let root = tempfile::tempdir().unwrap();
    let home = Home::at(root.path().join("home"));
    for name in ["n1", "n2"] {
        examples::copy_example("native-memory", &home.plugins_dir().join(name));
    }
    std::fs::write(
        home.config_file(),
        "max_concurrent_hooks = 32\n[context_engine]\nplugin_stack = [\"n1\", \"n2\"]\n",
    )
    .unwrap();
    let (config, _) = HostConfig::load(home.config_file()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    // Teach both layers something to recall.
    let teach = r#"{"messages":[{"role":"user","content":"my garden grows basil"}]}"#;
    let fds_before = open_fds();
    let (addr, stop, served) = rt.block_on(async {
        let server = Server::bind(
            home.clone(),
            config.clone(),
            ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, watch: false },
        )
        .await
        .unwrap();
        let addr = server.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        let (status, _) = support::http_post(addr, "/api/agents/bench/after_turn", teach).await;
        assert_eq!(status, 200);
        (addr, tx, served)
    });
    // after_turn is fire-and-forget: give it time to land in both plugins.
    std::thread::sleep(Duration::from_millis(500));

    let body = r#"{"message":"what grows in my garden?"}"#;
    let mut http_rates = Vec::new();
    let mut http_p99 = Vec::new();
    let mut http_p50 = Vec::new();
    for round in 0..ROUNDS {
        let (wall, mut latencies) = rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..CALLS)
                .map(|_| {
                    tokio::spawn(async move {
                        let t = Instant::now();
                        let (status, reply) = support::http_post(addr, "/api/agents/bench/ingest", body).await;
                        (status, reply, t.elapsed())
                    })
                })
                .collect();
            let mut latencies = Vec::with_capacity(CALLS);
            for t in tasks {
                let (status, reply, elapsed) = t.await.unwrap();
                assert_eq!(status, 200, "a call failed: {reply}");
                let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
                let sources: Vec<&str> =
                    v["memories"].as_array().unwrap().iter().filter_map(|m| m["source"].as_str()).collect();
                assert!(sources.contains(&"n1") && sources.contains(&"n2"), "both layers answer: {reply}");
                latencies.push(elapsed.as_secs_f64() * 1e3);
            }
            (start.elapsed(), latencies)
        });
        latencies.sort_by(f64::total_cmp);
        let rate = CALLS as f64 / wall.as_secs_f64();
        println!(
            "round {round}: {CALLS} concurrent HTTP ingests in {:.0} ms: {rate:.0} calls/s, p50 {:.1} ms, p99 {:.1} ms",
            wall.as_secs_f64() * 1e3,
            support::quantile(latencies.clone(), 0.5),
            support::quantile(latencies.clone(), 0.99)
        );
        http_rates.push(rate);
        http_p50.push(support::quantile(latencies.clone(), 0.5));
        http_p99.push(support::quantile(latencies, 0.99));
    }
    let metrics = rt.block_on(async { support::http_get(addr, "/api/context-engine/metrics").await.1 });
    let flat: serde_json::Value = serde_json::from_str(&metrics).unwrap();
    assert_eq!(flat["ingest"]["failures"], 0, "{flat}");
    assert_eq!(flat["ingest"]["calls"], 2 * CALLS * ROUNDS, "{flat}");
    let _ = stop.send(());
    rt.block_on(served).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let children = child_processes();
    let fds_after = open_fds();
    println!("after the bursts: {children} hook processes left, open fds {fds_before} before → {fds_after} after");
    assert_eq!(children, 0, "hook processes outlived their calls");
    assert!(fds_after <= fds_before + 4, "file descriptors leaked: {fds_before} → {fds_after}");

    // Yardstick: the same burst on an in-process engine over the same plugins.
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    let (engine, _) = load_stack(&cx).unwrap();
    let engine = Arc::new(engine);
    let mut direct_rates = Vec::new();
    for _ in 0..ROUNDS {
        let wall = rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..CALLS)
                .map(|_| {
                    let engine = engine.clone();
                    tokio::spawn(async move {
                        let req = IngestRequest {
                            agent_id: "bench".into(),
                            message: "what grows in my garden?".into(),
                            ..Default::default()
                        };
                        engine.ingest(&req).await.unwrap().len()
                    })
                })
                .collect();
            for t in tasks {
                assert!(t.await.unwrap() >= 2);
            }
            start.elapsed()
        });
        direct_rates.push(CALLS as f64 / wall.as_secs_f64());
    }
    let http = support::median(http_rates);
    let direct = support::median(direct_rates);
    println!(
        "median of {ROUNDS} rounds: HTTP {http:.0} calls/s (p50 {:.1} ms, p99 {:.1} ms); in-process engine {direct:.0} calls/s; \
         HTTP/in-process throughput ratio {:.3}",
        support::median(http_p50),
        support::median(http_p99),
        http / direct
    );
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Processes whose parent is this one (hook processes still alive or unreaped).
fn child_processes() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)) == Some(me.as_str()))
        .count()
}
