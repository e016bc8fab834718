//! What the script sandbox costs per one-shot call: the native example hook
//! through `ProcessRunner` confined (Landlock, a network namespace, a
//! per-call cgroup) against the same hook with `allow_filesystem = true` and
//! `allow_network = true` (no Landlock, no namespace; the cgroup stays).
//!
//! Run: `cargo bench --bench sandbox`. Goal: the sandbox adds under 1.5 ms
//! per call. As in `hook_overhead`, the verdict comes from a paired run
//! printed after the group (the two sides alternate call by call).

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
    std::fs::write(open_dir.join("plugin.toml"), format!("allow_filesystem = true\nallow_network = true\n{manifest}"))
        .unwrap();
    let load = |dir: &Path| {
        let config = HostConfig::default();
        let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
        load_script_plugin(dir, &cx).unwrap().0
    };
    let (confined, open) = (load(&confined_dir), load(&open_dir));
    assert!(confined.plugin().confinement.isolates_network() && !open.plugin().confinement.isolates_network());
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
    println!("\nSandbox features: {}", ctxhost::runner::process::sandbox::features().summary());
    let (open, confined, added, _) = support::paired(
        600,
        || {
            rt.block_on(f.open.call(&request, &options)).unwrap();
        },
        || {
            rt.block_on(f.confined.call(&request, &options)).unwrap();
        },
    );
    let verdict = if added < 1.5 { "meets" } else { "MISSES" };
    println!(
        "  native per call (medians, paired): unconfined {open:.3} ms, sandboxed {confined:.3} ms, \
         sandbox adds {added:.3} ms ({verdict} < 1.5 ms)"
    );
}

criterion_group!(benches, sandbox);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
