//! The Python fork server (issue 18) against a plain spawn and a worker.
//!
//! Run: `cargo bench --bench forkserver`. Not a criterion bench: paired,
//! alternating samples (`support::paired_samples`), side by side in one run,
//! because the goals are ratios of two paths measured at the same moment on
//! a shared 2-core machine:
//! - one call of a trivial one-shot python hook (reads its request, prints
//!   an empty recall) through the fork server, through a plain spawn
//!   (`[hooks] forkserver = false`), and the persistent-worker round trip of
//!   the same logic (a line loop). Goals: fork server p50 <= 3 ms and <= 3x
//!   the worker's. Judged on calls that find the server idle (a pause before
//!   each, as a turn calls each plugin once per hook); back-to-back calls,
//!   which wait for the server to fork the process for the next call, are
//!   printed too;
//! - a turn (ingest, after_turn, settle) through a stack of ten one-shot
//!   python plugins (copies of the python-memory example) with and without
//!   the fork server (`[runner] python_forkserver`). Goal: <= 1/5 of the
//!   time without; every turn's recalled memories identical on both sides.
//!
//! The load average is printed with the figures: other builds share the
//! machine. `FORKSERVER_BENCH=calls` runs the single calls only;
//! `FORKSERVER_BENCH_UNCONFINED=1` runs them without the sandbox.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::path::Path;

use ctxhost::config::HostConfig;
use ctxhost::engine::ContextEngine;
use ctxhost::engine::stack::StackEngine;
use ctxhost::home::Home;
use ctxhost::plugin::{LoadContext, load_script_plugin};
use ctxhost::protocol::{AfterTurnRequest, HookName, HookRequest, IngestRequest, Message, Role};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, Runner};

const REQUEST: &str = r#"{"type":"ingest","agent_id":"bench","message":"what grows in my garden?","peer_id":null}"#;

/// The trivial one-shot hook: one request line in, an empty recall out.
const ONE_SHOT: &str = "import json, sys\nreq = json.loads(sys.stdin.readline())\n\
sys.stdout.write(json.dumps({'type': 'ingest_result', 'memories': []}) + '\\n')\n";

/// The same logic as a line worker.
const WORKER: &str = "import json, sys\nfor line in sys.stdin:\n    req = json.loads(line)\n    \
sys.stdout.write(json.dumps({'type': 'ingest_result', 'memories': []}) + '\\n')\n    sys.stdout.flush()\n";

fn main() {
    if ctxhost::runner::process::find_on_path("python3", std::env::var_os("PATH").as_deref()).is_none() {
        println!("python3 is not installed; nothing to measure");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    println!("load average before: {}", support::load_average());
    single_calls(root.path());
    // `FORKSERVER_BENCH=calls` measures the single calls only.
    if std::env::var("FORKSERVER_BENCH").as_deref() != Ok("calls") {
        stack_turns(root.path());
    }
    println!("load average after: {}", support::load_average());
}

fn plugin(root: &Path, name: &str, script: &str, extra: &str) -> ProcessRunner {
    let dir = root.join("plugins").join(name);
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(dir.join("hooks/ingest.py"), script).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        format!("name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\n{extra}\ningest = \"hooks/ingest.py\"\n"),
    )
    .unwrap();
    let home = Home::at(root.join("home"));
    let config = HostConfig::default();
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    load_script_plugin(&dir, &cx).unwrap_or_else(|e| panic!("load {}: {e}", dir.display())).0
}

fn quantiles(v: &[f64]) -> (f64, f64) {
    (support::quantile(v.to_vec(), 0.5), support::quantile(v.to_vec(), 0.9))
}

fn single_calls(root: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // `FORKSERVER_BENCH_UNCONFINED=1`: all three without the sandbox (what
    // the confinement costs a call).
    let open = if std::env::var_os("FORKSERVER_BENCH_UNCONFINED").is_some() {
        println!("(unconfined: allow_network and allow_filesystem)");
        "allow_network = true\nallow_filesystem = true\n"
    } else {
        ""
    };
    let forked = plugin(root, "forked", ONE_SHOT, open);
    let spawned = plugin(root, "spawned", ONE_SHOT, &format!("{open}forkserver = false"));
    let worker = plugin(root, "worker", WORKER, &format!("{open}persistent_subprocess = true"));
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    let call = |runner: &ProcessRunner| {
        let reply = rt.block_on(runner.call(&request, &options)).unwrap();
        assert_eq!(reply["type"], "ingest_result", "{reply}");
    };
    // Against the worker first: a spawned hook leaves work behind in the
    // kernel (its network namespace is torn down after it exited) that
    // slows whatever runs next, for seconds after a burst of spawns.
    // A call that finds the server idle, as a turn's calls do (each plugin
    // is called once per hook per turn): both sides after the same pause.
    let pause = std::time::Duration::from_millis(PAUSE_MS);
    let (worker_ms, fork_ms2, _, worker_ratio) =
        support::paired_samples_after(300, pause, || call(&worker), || call(&forked));
    assert!(forked.forkserver_pid().is_some(), "the fork server answered");
    // Back to back: the next call comes while the server still forks the
    // process for it.
    let (worker_bb, fork_bb, _, bb_ratio) = support::paired_samples(300, || call(&worker), || call(&forked));
    let (spawn_ms, fork_ms, _, spawn_ratio) = support::paired_samples(100, || call(&spawned), || call(&forked));
    assert!(spawned.forkserver_pid().is_none());
    let (spawn50, spawn90) = quantiles(&spawn_ms);
    let (fork50, fork90) = quantiles(&fork_ms);
    let (fork50b, fork90b) = quantiles(&fork_ms2);
    let (worker50, worker90) = quantiles(&worker_ms);
    let spawn_over = support::median(spawn_ratio);
    let worker_over = support::median(worker_ratio);
    println!("one call of a trivial one-shot python hook, ms (p50 / p90):");
    println!("  plain spawn            {spawn50:8.3} / {spawn90:8.3}");
    let (wbb50, wbb90) = quantiles(&worker_bb);
    let (fbb50, fbb90) = quantiles(&fork_bb);
    let bb_over = support::median(bb_ratio);
    println!("  after a {PAUSE_MS} ms pause (the server idle, as in a turn):");
    println!("    persistent worker    {worker50:8.3} / {worker90:8.3}");
    println!("    fork server          {fork50b:8.3} / {fork90b:8.3}   ({worker_over:.2}x the worker)");
    println!("  back to back:");
    println!("    persistent worker    {wbb50:8.3} / {wbb90:8.3}");
    println!("    fork server          {fbb50:8.3} / {fbb90:8.3}   ({bb_over:.2}x the worker)");
    println!("    fork server          {fork50:8.3} / {fork90:8.3}   (paired with the spawn: {spawn_over:.3}x of it)");
    let p50 = fork50b;
    println!(
        "  goal fork server p50 <= 3 ms: {p50:.3} ms {}; goal <= 3x the worker: {worker_over:.2}x {}; spawn/fork {:.1}x",
        verdict(p50 <= 3.0),
        verdict(worker_over <= 3.0),
        spawn50 / fork50
    );
    rt.block_on(worker.shutdown());
}

/// The pause before each timed call that should find the server idle.
const PAUSE_MS: u64 = 10;

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// Ten copies of python-memory, `pm0`..`pm9`, stacked, in a home of its own.
fn stack(root: &Path, forkserver: bool) -> StackEngine {
    let home = Home::at(root);
    let names: Vec<String> = (0..10).map(|i| format!("pm{i}")).collect();
    for name in &names {
        let dir = home.plugins_dir().join(name);
        examples::copy_example("python-memory", &dir);
        let manifest = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(&manifest, text.replace("name = \"python-memory\"", &format!("name = \"{name}\""))).unwrap();
    }
    support::load_stack_engine(&home, &format!("[runner]\npython_forkserver = {forkserver}\n"), &names)
}

const TOPICS: [&str; 4] = ["garden", "kitchen", "bees", "roof"];

/// One turn: ingest (recall), after_turn (store), settle. Returns what was recalled.
async fn turn(engine: &StackEngine, i: usize) -> Vec<String> {
    let topic = TOPICS[i % TOPICS.len()];
    let ingest =
        IngestRequest { agent_id: "bench".into(), message: format!("what about my {topic}?"), ..Default::default() };
    let recalled = engine.ingest(&ingest).await.unwrap();
    let after = AfterTurnRequest {
        agent_id: "bench".into(),
        messages: vec![
            Message::text(Role::User, format!("turn {i}: my {topic} needs attention")),
            Message::text(Role::Assistant, "Noted."),
        ],
        ..Default::default()
    };
    engine.after_turn(&after).await.unwrap();
    engine.settle().await;
    let mut contents: Vec<String> =
        recalled.into_iter().map(|r| format!("{} <- {}", r.content, r.sources.join(","))).collect();
    contents.sort();
    contents
}

fn stack_turns(root: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let with = stack(&root.join("stack-forkserver"), true);
    let without = stack(&root.join("stack-spawn"), false);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    let turns = 20;
    let (spawn_ms, fork_ms, _, ratio) = support::paired_samples(
        turns,
        || {
            a.push(rt.block_on(turn(&without, i)));
            i += 1;
        },
        || {
            b.push(rt.block_on(turn(&with, j)));
            j += 1;
        },
    );
    assert_eq!(a, b, "the two stacks recalled different memories");
    assert!(a.iter().any(|m| m.iter().any(|c| !c.is_empty())), "the plugins recalled nothing: {a:?}");
    let (spawn50, _) = quantiles(&spawn_ms);
    let (fork50, _) = quantiles(&fork_ms);
    let over = support::median(ratio);
    println!("a turn (ingest + after_turn + settle) through 10 one-shot python plugins, ms (p50):");
    println!("  without the fork server {spawn50:8.2}");
    println!(
        "  with the fork server    {fork50:8.2}   ({over:.3} of the time without; {} turns, memories identical)",
        a.len()
    );
    println!("  goal <= 1/5: {}", verdict(over <= 0.2));
    rt.block_on(async {
        with.shutdown().await;
        without.shutdown().await;
    });
}
