//! What ctxhost adds to a hook call, against spawning the same process bare.
//!
//! Run: `cargo bench --bench hook_overhead`. Two groups:
//! - `per_call/<runtime>`: one hook call through `ProcessRunner` (cleared env,
//!   process group, per-call TMPDIR, concurrent reads, limits) against the
//!   same program spawned bare from Rust with the same request on stdin.
//!   Goal: ctxhost adds under 0.5 ms per call.
//! - `whole_run/python`: a full `ctxhost hook` run (ctxhost's own start
//!   included) against running the script with the real interpreter directly.
//!   Goal: within 1.15x.
//!
//! After the groups, the figures and ratios are printed from criterion's
//! estimates, so one run shows both goals.

#[path = "../tests/util/examples.rs"]
mod examples;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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
    python: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let native_dir = root.path().join("plugins/native-memory");
    let python_dir = root.path().join("plugins/python-memory");
    examples::copy_example("native-memory", &native_dir);
    examples::copy_example("python-memory", &python_dir);
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    let python = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    Fixture { home: Home::at(root.path().join("home")), _root: root, native_dir, python_dir, python }
}

fn runner(f: &Fixture, dir: &Path) -> ProcessRunner {
    let config = HostConfig::default();
    let cx = LoadContext { home: &f.home, config: &config, host_env: &LoadContext::process_env };
    load_script_plugin(dir, &cx).unwrap().0
}

/// The yardstick: spawn, write the request, read everything, parse the reply.
fn bare(program: &Path, args: &[&Path], cwd: &Path) {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(REQUEST.as_bytes()).unwrap();
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    parse_stdout(&out.stdout).unwrap();
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

/// Mean time of one benchmark in ms, from criterion's estimates file.
fn mean_ms(group: &str, id: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| "target".into());
    let base = std::env::var_os("CRITERION_HOME").map(PathBuf::from).unwrap_or_else(|| target.join("criterion"));
    let file = base.join(group.replace('/', "_")).join(id).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64().map(|ns| ns / 1e6)
}

fn summary() {
    println!("\nSummary (means):");
    for runtime in ["native", "python"] {
        let group = format!("per_call/{runtime}");
        if let (Some(bare), Some(ours)) = (mean_ms(&group, "bare_spawn"), mean_ms(&group, "ctxhost")) {
            let added = ours - bare;
            let verdict = if added < 0.5 { "meets" } else { "MISSES" };
            println!(
                "  {runtime:<6} per call: bare {bare:.3} ms, ctxhost {ours:.3} ms, added {added:.3} ms ({verdict} < 0.5 ms)"
            );
        }
    }
    if let (Some(direct), Some(ours)) =
        (mean_ms("whole_run/python", "interpreter_direct"), mean_ms("whole_run/python", "ctxhost_hook"))
    {
        let ratio = ours / direct;
        let verdict = if ratio <= 1.15 { "meets" } else { "MISSES" };
        println!(
            "  python whole run: direct {direct:.2} ms, ctxhost hook {ours:.2} ms, ratio {ratio:.3}x ({verdict} <= 1.15x)"
        );
    }
}

criterion_group!(benches, per_call);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
