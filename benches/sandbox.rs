//! What the script sandbox costs per one-shot call: the native example hook
//! through `ProcessRunner` with the full default confinement (Landlock,
//! seccomp, a network namespace, a pid namespace with its own `/proc` —
//! whose end kills whatever the call left —, as root the plugin's own
//! unprivileged uid with its covers, no capability) against the same hook
//! with `allow_filesystem = true` and `allow_network = true`: none of those
//! layers, started through `posix_spawn` — a bare spawn.
//!
//! Run: `cargo bench --bench sandbox`. Goal: the sandbox adds under 1.0 ms
//! per call as root and under 1.5 ms as an unprivileged user. As in
//! `hook_overhead`, the verdict comes from a paired run printed after the
//! group (the two sides alternate call by call). Run as root, the paired run
//! is repeated as uid 65534 (the bench re-runs itself under `setpriv`).
//! The load average is printed with the figures (other builds share the
//! 2 cores). The whole `ctxhost hook` run with the default sandbox, and
//! what the sandbox probe's cache saves it, is `hook_overhead`'s.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::path::Path;

use criterion::{Criterion, criterion_group};
use ctxhost::config::HostConfig;
use ctxhost::home::Home;
use ctxhost::plugin::{LoadContext, load_script_plugin};
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, Runner};

const REQUEST: &str = r#"{"type":"ingest","agent_id":"bench","message":"what about my garden?","peer_id":null}"#;

struct Fixture {
    _root: tempfile::TempDir,
    confined: ProcessRunner,
    open: ProcessRunner,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let home = Home::at(root.path().join("home"));
    let confined_dir = root.path().join("plugins/confined");
    let open_dir = root.path().join("plugins/open");
    examples::copy_example("native-memory", &confined_dir);
    examples::copy_example("native-memory", &open_dir);
    let manifest = std::fs::read_to_string(open_dir.join("plugin.toml")).unwrap();
    // A part of the confinement left out, to see what each costs:
    // CTXHOST_BENCH_CONFINED_EXTRA="allow_network = true" (no network namespace), …
    if let Ok(extra) = std::env::var("CTXHOST_BENCH_CONFINED_EXTRA") {
        std::fs::write(confined_dir.join("plugin.toml"), format!("{extra}\n{manifest}")).unwrap();
    }
    std::fs::write(open_dir.join("plugin.toml"), format!("allow_filesystem = true\nallow_network = true\n{manifest}"))
        .unwrap();
    let load = |dir: &Path| {
        let config = HostConfig::default();
        let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
        load_script_plugin(dir, &cx).unwrap().0
    };
    let (confined, open) = (load(&confined_dir), load(&open_dir));
    assert!(!open.plugin().confinement.isolates_network());
    Fixture { _root: root, confined, open }
}

fn sandbox(c: &mut Criterion) {
    let f = fixture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    let mut g = c.benchmark_group("sandbox/native");
    g.bench_function("unconfined", |b| b.iter(|| rt.block_on(f.open.call(&request, &options)).unwrap()));
    g.bench_function("sandboxed", |b| b.iter(|| rt.block_on(f.confined.call(&request, &options)).unwrap()));
    g.finish();
}

fn summary() {
    let f = fixture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    println!(
        "\nSandbox features: {} (load average {})",
        ctxhost::runner::process::sandbox::features().summary(),
        support::load_average()
    );
    let (open, confined, added, _) = support::paired(
        600,
        || {
            rt.block_on(f.open.call(&request, &options)).unwrap();
        },
        || {
            rt.block_on(f.confined.call(&request, &options)).unwrap();
        },
    );
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let goal = if uid == 0 { 1.0 } else { 1.5 };
    let verdict = if added < goal { "meets" } else { "MISSES" };
    println!(
        "  native per call as uid {uid} (medians, paired): bare spawn {open:.3} ms, sandboxed {confined:.3} ms, \
         sandbox adds {added:.3} ms ({verdict} < {goal} ms)"
    );
}

criterion_group!(benches, sandbox);

fn main() {
    if let Some(times) = std::env::var_os("CTXHOST_BENCH_SUMMARY_ONLY") {
        for _ in 0..times.to_str().and_then(|t| t.parse().ok()).unwrap_or(1).max(1) {
            summary();
        }
        return;
    }
    // The paired verdict first, in a fresh process; again after criterion
    // grew it: forking the host (which any `pre_exec` needs) costs in
    // proportion to the memory it maps, a daemon's as much as this bench's.
    summary();
    benches();
    Criterion::default().configure_from_args().final_summary();
    println!("\nAgain, after criterion grew this process to {} MiB resident:", resident_mib());
    summary();
    support::rerun_summary_as_nobody();
}

/// This process's resident memory, from /proc/self/statm.
fn resident_mib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096 / (1024 * 1024)
}
