//! What ctxhost adds to a hook call, against spawning the same process bare.
//!
//! Run: `cargo bench --bench hook_overhead`. Two groups:
//! - `per_call/<runtime>`: one hook call through `ProcessRunner` (cleared env,
//!   process group, per-call TMPDIR, concurrent reads, limits) against the
//!   same program spawned bare from Rust with the same request on stdin.
//!   Goal: ctxhost adds under 0.4 ms per call, as root and as uid 65534 (run
//!   as root, the paired figures are printed again as 65534: the bench
//!   re-runs itself under `setpriv`). The plugins run unsandboxed
//!   (`allow_network`/`allow_filesystem`): `benches/sandbox.rs` measures the
//!   sandbox's cost.
//! - `whole_run/python`: a full `ctxhost hook` run (ctxhost's own start
//!   included) against running the script with the real interpreter directly:
//!   the plugin unsandboxed (goal: within 1.15x), and with the default
//!   sandbox (goal: within 1.10x) — with the sandbox probe's cache as every
//!   run after the first has it, and without (removed before each run: the
//!   probe forks again), to show what the cache saves.
//!
//! A 0.5 ms difference on a 40 ms python start is below this machine's
//! run-to-run drift between two criterion groups, so the goals are judged on
//! a *paired* measurement printed after the groups: the two sides alternate
//! call by call, and the median of the per-pair differences (and of the
//! ratios) is reported.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use support::{median, paired, paired_samples, quantile};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use ctxhost::config::HostConfig;
use ctxhost::home::Home;
use ctxhost::plugin::{LoadContext, load_script_plugin};
use ctxhost::protocol::{HookName, HookRequest, parse_stdout};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, Runner};

const REQUEST: &str = r#"{"type":"ingest","agent_id":"bench","message":"what about my garden?","peer_id":null}"#;

struct Fixture {
    _root: tempfile::TempDir,
    home: Home,
    native_dir: PathBuf,
    python_dir: PathBuf,
    /// The python example with the default sandbox.
    sandboxed_dir: PathBuf,
    python: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let native_dir = root.path().join("plugins/native-memory");
    let python_dir = root.path().join("plugins/python-memory");
    let sandboxed_dir = root.path().join("plugins/python-sandboxed");
    examples::copy_example("native-memory", &native_dir);
    examples::copy_example("python-memory", &python_dir);
    examples::copy_example("python-memory", &sandboxed_dir);
    // As root a sandboxed hook runs as its plugin's uid: the way to its dir must be open.
    std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The overhead of the runner itself: the sandbox's cost is benches/sandbox.rs's.
    for dir in [&native_dir, &python_dir] {
        let manifest = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let text = text.replacen("[hooks]\n", "[hooks]\nallow_network = true\nallow_filesystem = true\n", 1);
        std::fs::write(&manifest, text).unwrap();
    }
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    let python = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    Fixture { home: Home::at(root.path().join("home")), _root: root, native_dir, python_dir, sandboxed_dir, python }
}

fn runner(f: &Fixture, dir: &Path) -> ProcessRunner {
    // The spawn path a one-shot hook takes without the fork server
    // (`benches/forkserver.rs` measures that one).
    let mut config = HostConfig::default();
    config.runner.python_forkserver = false;
    let cx = LoadContext { home: &f.home, config: &config, host_env: &LoadContext::process_env };
    load_script_plugin(dir, &cx).unwrap().0
}

/// The yardstick: the same program spawned bare, reply parsed.
fn bare(program: &Path, args: &[&Path], cwd: &Path) {
    parse_stdout(&examples::run_bare(program, args, cwd, REQUEST)).unwrap();
}

fn per_call(c: &mut Criterion) {
    let f = fixture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    let native_bin = f.native_dir.join("bin/native-memory");
    let python_script = f.python_dir.join("hooks/memory.py");

    let mut g = c.benchmark_group("per_call/native");
    g.bench_function("bare_spawn", |b| b.iter(|| bare(&native_bin, &[], &f.native_dir)));
    let r = runner(&f, &f.native_dir);
    g.bench_function("ctxhost", |b| b.iter(|| rt.block_on(r.call(&request, &options)).unwrap()));
    g.finish();

    let mut g = c.benchmark_group("per_call/python");
    g.sample_size(40).measurement_time(Duration::from_secs(8));
    g.bench_function("bare_spawn", |b| b.iter(|| bare(&f.python, &[&python_script], &f.python_dir)));
    let r = runner(&f, &f.python_dir);
    g.bench_function("ctxhost", |b| b.iter(|| rt.block_on(r.call(&request, &options)).unwrap()));
    g.finish();

    let mut g = c.benchmark_group("whole_run/python");
    g.sample_size(40).measurement_time(Duration::from_secs(8));
    g.bench_function("interpreter_direct", |b| b.iter(|| bare(&f.python, &[&python_script], &f.python_dir)));
    let ctxhost = Path::new(env!("CARGO_BIN_EXE_ctxhost"));
    let home = f.home.root().to_owned();
    g.bench_function("ctxhost_hook", |b| {
        b.iter(|| {
            let args: [&Path; 5] = [Path::new("--home"), &home, Path::new("hook"), &f.python_dir, Path::new("ingest")];
            bare(ctxhost, &args, &f.python_dir)
        })
    });
    g.finish();
}

fn summary() {
    let f = fixture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    println!(
        "\nPaired measurement as uid {uid} (medians; the two sides alternate call by call; load average {}):",
        support::load_average()
    );
    let native_bin = f.native_dir.join("bin/native-memory");
    let r = runner(&f, &f.native_dir);
    let (bare_ms, ours, added, _) = paired(
        600,
        || bare(&native_bin, &[], &f.native_dir),
        || {
            rt.block_on(r.call(&request, &options)).unwrap();
        },
    );
    let verdict = if added < 0.4 { "meets" } else { "MISSES" };
    println!("  native per call: bare {bare_ms:.3} ms, ctxhost {ours:.3} ms, added {added:.3} ms ({verdict} < 0.4 ms)");

    let script = f.python_dir.join("hooks/memory.py");
    // An A/A run (bare against bare) shows how much of a python difference is
    // the interpreter's own run-to-run noise on this machine.
    let (_, _, noise, _) =
        paired(400, || bare(&f.python, &[&script], &f.python_dir), || bare(&f.python, &[&script], &f.python_dir));
    let r = runner(&f, &f.python_dir);
    let (ta, tb, diff, _) = paired_samples(
        600,
        || bare(&f.python, &[&script], &f.python_dir),
        || {
            rt.block_on(r.call(&request, &options)).unwrap();
        },
    );
    // Interference only ever adds time, so the low quantiles of each side
    // are the steadiest view of what ctxhost itself adds.
    let p10_added = quantile(tb.clone(), 0.1) - quantile(ta.clone(), 0.1);
    let (bare_ms, ours, added) = (median(ta), median(tb), median(diff));
    let verdict = if added < 0.4 { "meets" } else { "MISSES" };
    println!(
        "  python per call: bare {bare_ms:.3} ms, ctxhost {ours:.3} ms, added {added:.3} ms ({verdict} < 0.4 ms; \
         A/A noise in this run: {noise:+.3} ms; p10 to p10: {p10_added:+.3} ms)"
    );

    let ctxhost = Path::new(env!("CARGO_BIN_EXE_ctxhost"));
    let home = f.home.root().to_owned();
    let args: [&Path; 5] = [Path::new("--home"), &home, Path::new("hook"), &f.python_dir, Path::new("ingest")];
    let (direct, ours, _, ratio) =
        paired(200, || bare(&f.python, &[&script], &f.python_dir), || bare(ctxhost, &args, &f.python_dir));
    let verdict = if ratio <= 1.15 { "meets" } else { "MISSES" };
    println!(
        "  python whole run, no sandbox: interpreter direct {direct:.2} ms, ctxhost hook {ours:.2} ms, ratio {ratio:.3}x ({verdict} <= 1.15x)"
    );

    // The default sandbox. The probe cache (written by the first run) as
    // every later run finds it, then removed before each run.
    let cache = f.home.cache_dir().join("sandbox-features.json");
    let sandboxed: [&Path; 5] = [Path::new("--home"), &home, Path::new("hook"), &f.sandboxed_dir, Path::new("ingest")];
    let sandboxed_script = f.sandboxed_dir.join("hooks/memory.py");
    bare(ctxhost, &sandboxed, &f.sandboxed_dir);
    assert!(cache.is_file(), "the first sandboxed run writes the probe cache");
    let (direct, cached, _, ratio) = paired(
        200,
        || bare(&f.python, &[&sandboxed_script], &f.sandboxed_dir),
        || bare(ctxhost, &sandboxed, &f.sandboxed_dir),
    );
    let (_, probed, _, probed_ratio) = paired(
        200,
        || bare(&f.python, &[&sandboxed_script], &f.sandboxed_dir),
        || {
            let _ = std::fs::remove_file(&cache);
            bare(ctxhost, &sandboxed, &f.sandboxed_dir)
        },
    );
    let verdict = if ratio <= 1.10 { "meets" } else { "MISSES" };
    println!(
        "  python whole run, default sandbox: interpreter direct {direct:.2} ms, ctxhost hook {cached:.2} ms, ratio \
         {ratio:.3}x ({verdict} <= 1.10x); without the probe cache {probed:.2} ms, ratio {probed_ratio:.3}x \
         (load average {})",
        support::load_average()
    );
}

criterion_group!(benches, per_call);

fn main() {
    if std::env::var_os("CTXHOST_BENCH_SUMMARY_ONLY").is_some() {
        summary();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
    support::rerun_summary_as_nobody();
}
