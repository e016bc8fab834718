//! Persistent workers (spec section 7): the python and node worker examples
//! in both modes, one process for many calls, every fault (crash, garbage,
//! slow reply, oversized reply) answered by one respawn and one retry, a
//! crash loop tripping the breaker, no fd or process growth over 1,000
//! calls, `max_workers`, idle stop, and reload with calls in flight.
//!
//! Calls run in-process through the library (`ProcessRunner`, `Layer`);
//! what needs a process of its own to count (fds, children) runs against a
//! `ctxhost serve` child. Plugin names are unique per test: worker events
//! are counted per plugin name, process-wide.
//!
//! A worker is pid 1 of its own pid namespace, so it names itself by a
//! token (in its replies and in its argv); the host side of it is what
//! `worker_pids` lists (the process the runner spawned, whose child the
//! hook is) and what the host's `/proc` shows.
//!
//! `rpc` (tests/workers/rpc.rs): `worker_protocol = "jsonrpc"`, its clients
//! and the guard examples.

mod rpc;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ctxhost::config::HostConfig;
use ctxhost::engine::layer::Layer;
use ctxhost::metrics::Metrics;
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, HookError, Runner};
use serde_json::{Value, json};

use crate::util::http::Daemon;
use crate::util::procs::{Marker, parent_of, pid_with_token};
use crate::util::{TestPlugin, example, is_dead, reply, require_program, stderr, write};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn load(p: &TestPlugin) -> ProcessRunner {
    crate::util::load_script(&p.dir, &p.home, &HostConfig::default())
}

fn request(hook: HookName, body: Value) -> HookRequest {
    HookRequest::from_json(hook, body).unwrap()
}

fn call(rt: &tokio::runtime::Runtime, runner: &dyn Runner, hook: HookName, body: Value) -> Result<Value, HookError> {
    rt.block_on(runner.call(&request(hook, body), &CallOptions::default()))
}

fn ingest(message: &str) -> Value {
    json!({"agent_id": "a", "message": message, "peer_id": null})
}

/// Waits (bounded) until `done` holds; false when it never did.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// A bash worker plugin named `name` whose `ingest` script is `body`.
fn bash_worker(name: &str, body: &str, settings: &str) -> TestPlugin {
    let manifest = format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\npersistent_subprocess = true\n\
         ingest = \"hooks/worker.sh\"\n{settings}\n"
    );
    TestPlugin::new(name, &[("plugin.toml", &manifest), ("hooks/worker.sh", body)])
}

/// The first lines of a bash worker: it re-executes itself once with a
/// fresh token as its argument (`$tok`). The token names the process in its
/// replies and in the host's `/proc` (its pid is 1 of its own pid
/// namespace, the same for every worker): [`host_pid`] finds it there.
macro_rules! token_header {
    () => {
        r#"
[ -n "$1" ] || exec "$BASH" "$0" "worker-$(cat /proc/sys/kernel/random/uuid)"
tok=$1
"#
    };
}
const TOKEN: &str = token_header!();

/// Answers `{"worker": <its token>}` to every line; `crash-once`,
/// `garbage-once`, `slow-once` and `big-once` in a line misbehave the first
/// time only (a marker file in the plugin dir remembers). `slow-once` sleeps
/// in a background child and in the foreground, both `sleep $SLOW_ARG`
/// (a [`Marker`]'s argument) when set.
const MISBEHAVING: &str = concat!(
    token_header!(),
    r#"
echo start >> starts
while IFS= read -r line; do
  case "$line" in
    *crash-once*) if [ ! -e crashed ]; then touch crashed; echo "crashing" >&2; exit 3; fi ;;
    *garbage-once*) if [ ! -e garbled ]; then touch garbled; echo "this is not json"; continue; fi ;;
    *slow-once*) if [ ! -e slowed ]; then touch slowed; sleep "${SLOW_ARG:-300}" & sleep "${SLOW_ARG:-300}"; fi ;;
    *big-once*) if [ ! -e big ]; then touch big; head -c 5000000 /dev/zero | tr '\0' 'a'; echo; continue; fi ;;
  esac
  echo "{\"worker\": \"$tok\"}"
done
"#
);

/// The token of the worker that answered.
fn token_of(reply: &Value) -> String {
    reply["worker"].as_str().unwrap_or_else(|| panic!("no worker token in {reply}")).to_owned()
}

/// The host pid of the live worker whose token is `token`.
fn host_pid(token: &str) -> i32 {
    pid_with_token(token)
}

/// The runner's worker (a host pid, as `worker_pids` has it) that runs the
/// process whose token is `token`: the hook is a child of the process the
/// runner spawned.
fn keeper_of(token: &str) -> u32 {
    // hook -> its namespace's init -> the keeper (the process ctxhost started).
    let pid = host_pid(token);
    let init = parent_of(pid).unwrap_or_else(|| panic!("no parent of {pid}"));
    parent_of(init).unwrap_or_else(|| panic!("no parent of {init}")) as u32
}

/// A layer (the engine's policies, breaker included) over `runner`.
fn layer(name: &str, runner: Arc<ProcessRunner>, tweak: impl FnOnce(&mut ctxhost::manifest::ExecSettings)) -> Layer {
    let mut settings = runner.plugin().manifest.settings.clone();
    tweak(&mut settings);
    let hooks = runner.plugin().manifest.hooks.keys().copied().collect();
    let limiter = Arc::new(tokio::sync::Semaphore::new(8));
    Layer::new(name, runner, settings, hooks, limiter, Arc::new(Metrics::default()))
}

fn worker_counts(metrics: &Metrics, plugin: &str) -> (u64, u64) {
    let m = &metrics.by_plugin()[plugin]["ingest"];
    (m.worker_respawns, m.worker_retries)
}

fn starts(p: &TestPlugin) -> usize {
    std::fs::read_to_string(p.dir.join("starts")).map(|s| s.lines().count()).unwrap_or(0)
}

// --- the examples -------------------------------------------------------

/// The runtimes suite's memory checks, through a runner; returns the pids
/// that answered.
fn memory_checks(rt: &tokio::runtime::Runtime, runner: &ProcessRunner) -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    let note = |pids: &mut BTreeSet<u32>| pids.extend(runner.worker_pids());
    let turn = |agent: &str, messages: Value| {
        let r = call(rt, runner, HookName::AfterTurn, json!({"agent_id": agent, "messages": messages})).unwrap();
        assert_eq!(r, json!({"type": "ok"}));
    };
    let recall = |agent: &str, message: &str| -> Vec<String> {
        let r = call(rt, runner, HookName::Ingest, json!({"agent_id": agent, "message": message, "peer_id": null}))
            .unwrap();
        assert_eq!(r["type"], "ingest_result", "{r}");
        r["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
    };
    let tricky = "My garden has \"heirloom\" tomatoes,\ncafé ☕ basil and a C:\\shed";
    turn(
        "a1",
        json!([
            {"role": "user", "content": tricky},
            {"role": "assistant", "content": "What a garden!"},
            {"role": "user", "content": [{"type": "text", "text": "I also keep bees"}, {"type": "text", "text": "and chickens"}]}
        ]),
    );
    note(&mut pids);
    turn("a2", json!([{"role": "user", "content": "my garden is secret"}]));
    assert_eq!(recall("a1", "Tell me about my GARDEN"), [tricky]);
    note(&mut pids);
    assert_eq!(recall("a1", "bees, chickens?"), ["I also keep bees\nand chickens"]);
    assert_eq!(recall("a1", "zebras are odd"), Vec::<String>::new());
    assert_eq!(recall("a2", "garden"), ["my garden is secret"]);
    note(&mut pids);
    for i in 0..20 {
        assert_eq!(recall("a3", &format!("nothing here {i}")), Vec::<String>::new());
    }
    note(&mut pids);
    pids
}

fn example_in_both_modes(name: &str) {
    let rt = rt();
    // Worker mode (the example's manifest).
    let p = example(name);
    let runner = load(&p);
    let pids = memory_checks(&rt, &runner);
    assert_eq!(pids.len(), 1, "one process answered every call: {pids:?}");
    let pid = *pids.iter().next().unwrap();
    drop(runner);
    assert!(eventually(Duration::from_secs(5), || is_dead(pid as i32)), "the worker stops with its runner");

    // One-shot: the same script, unmodified, with persistent_subprocess off.
    let p = example(name);
    let manifest = p.dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("persistent_subprocess = true", "persistent_subprocess = false")).unwrap();
    let runner = load(&p);
    assert!(memory_checks(&rt, &runner).is_empty(), "no worker in one-shot mode");

    // And through `ctxhost hook` in worker mode: stderr reaches plugin_stderr.
    let p = example(name);
    let a = p.hook("ingest", &ingest("garden").to_string()).success();
    assert_eq!(reply(&a), json!({"type": "ingest_result", "memories": []}));
    assert!(stderr(&a).contains("plugin_stderr"), "{}", stderr(&a));
}

#[test]
fn python_example_runs_as_worker_and_one_shot() {
    require_program("python3", "python3");
    example_in_both_modes("python-worker");
}

#[test]
fn node_example_runs_as_worker_and_one_shot() {
    require_program("node", "nodejs");
    example_in_both_modes("node-worker");
}

// --- one process, its environment and its TMPDIR ---------------------------

#[test]
fn one_process_answers_many_calls_with_the_one_shot_environment() {
    let body = format!("env > worker-env.txt\n{MISBEHAVING}");
    let p = bash_worker("w-env", &body, "[env]\nFROM_PLUGIN = \"yes\"");
    let rt = rt();
    let runner = load(&p);
    let first = token_of(&call(&rt, &runner, HookName::Ingest, ingest("hello")).unwrap());
    let (worker, keeper) = (host_pid(&first), keeper_of(&first));
    for i in 0..50 {
        let r = call(&rt, &runner, HookName::Ingest, ingest(&format!("call {i}"))).unwrap();
        assert_eq!(token_of(&r), first, "call {i} went to the same process");
    }
    assert_eq!(runner.worker_pids(), [keeper], "the runner's one worker answered");
    assert_eq!(host_pid(&first), worker);
    assert_eq!(starts(&p), 1);
    let env = std::fs::read_to_string(p.dir.join("worker-env.txt")).unwrap();
    let var = |k: &str| env.lines().find_map(|l| l.strip_prefix(&format!("{k}=")).map(str::to_owned));
    assert_eq!(var("LIBREFANG_RUNTIME").as_deref(), Some("bash"), "{env}");
    assert_eq!(var("LIBREFANG_AGENT_ID").as_deref(), Some(""), "per-call values are in the request line");
    assert_eq!(var("LIBREFANG_MESSAGE").as_deref(), Some(""));
    assert_eq!(var("FROM_PLUGIN").as_deref(), Some("yes"));
    assert_eq!(var("LIBREFANG_SANDBOX").as_deref(), Some("1"));
    assert_eq!(var("PWD").map(PathBuf::from), Some(p.dir.canonicalize().unwrap()));
    let tmpdir = PathBuf::from(var("TMPDIR").expect("a TMPDIR"));
    assert!(tmpdir.is_dir(), "the worker's TMPDIR lives as long as it does");
    drop(runner);
    assert!(eventually(Duration::from_secs(5), || is_dead(keeper as i32) && is_dead(worker)));
    assert!(eventually(Duration::from_secs(5), || !tmpdir.exists()), "and goes with it");
}

// --- faults ----------------------------------------------------------------

#[test]
fn a_crash_mid_call_is_respawned_retried_and_counted() {
    let p = bash_worker("w-crash", MISBEHAVING, "");
    let rt = rt();
    let runner = Arc::new(load(&p));
    let layer = layer("w-crash", runner.clone(), |_| {});
    let m = metered(&*runner);
    let before = token_of(&rt.block_on(layer.call(&request(HookName::Ingest, ingest("hi")))).unwrap().unwrap());
    let (before_pid, before_keeper) = (host_pid(&before), keeper_of(&before));
    let after = token_of(&rt.block_on(layer.call(&request(HookName::Ingest, ingest("crash-once")))).unwrap().unwrap());
    assert_ne!(after, before, "answered by a fresh worker");
    assert!(eventually(Duration::from_secs(2), || is_dead(before_pid) && is_dead(before_keeper as i32)));
    assert_eq!(runner.worker_pids(), [keeper_of(&after)]);
    assert_ne!(keeper_of(&after), before_keeper);
    assert_eq!(worker_counts(&m, "w-crash"), (1, 1), "one respawn, one retry");
}

#[test]
fn a_garbage_line_replaces_the_worker() {
    let p = bash_worker("w-garbage", MISBEHAVING, "");
    let rt = rt();
    let runner = load(&p);
    let before = token_of(&call(&rt, &runner, HookName::Ingest, ingest("hi")).unwrap());
    let (before_pid, before_keeper) = (host_pid(&before), keeper_of(&before));
    let after = token_of(&call(&rt, &runner, HookName::Ingest, ingest("garbage-once")).unwrap());
    assert_ne!(after, before);
    assert!(eventually(Duration::from_secs(2), || is_dead(before_pid) && is_dead(before_keeper as i32)));
    assert_eq!(runner.worker_pids(), [keeper_of(&after)]);

    // A worker that only ever writes garbage: the call fails, saying why.
    let p = bash_worker("w-garbage-always", "while read -r l; do echo 'hello there'; done\n", "");
    let runner = load(&p);
    let m = metered(&runner);
    let err = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap_err().to_string();
    assert!(err.contains("not a JSON line") && err.contains("hello there"), "{err}");
    assert_eq!(worker_counts(&m, "w-garbage-always"), (2, 1), "two workers killed, one retry");
}

/// A fresh `Metrics` attached to `runner`: its worker events land there.
fn metered(runner: &dyn Runner) -> Arc<Metrics> {
    let m = Arc::new(Metrics::default());
    runner.attach_metrics(m.clone());
    m
}

#[test]
fn a_slow_reply_past_the_deadline_kills_the_whole_group() {
    let slow = Marker::new();
    let settings = format!("hook_timeout_secs = 1\n[env]\nSLOW_ARG = \"{}\"", slow.arg(300));
    let p = bash_worker("w-slow", MISBEHAVING, &settings);
    let rt = rt();
    let runner = load(&p);
    let m = metered(&runner);
    let before = token_of(&call(&rt, &runner, HookName::Ingest, ingest("hi")).unwrap());
    let (before_pid, before_keeper) = (host_pid(&before), keeper_of(&before));
    let (after, slept) = std::thread::scope(|s| {
        let slow_call = s.spawn(|| call(&rt, &runner, HookName::Ingest, ingest("slow-once")));
        let slept = slow.running(2, Duration::from_secs(5));
        (token_of(&slow_call.join().unwrap().unwrap()), slept)
    });
    assert!(slept, "the slow worker's two sleeps ran");
    assert_ne!(after, before, "retried on a fresh worker after the deadline");
    assert!(
        eventually(Duration::from_secs(2), || is_dead(before_pid) && is_dead(before_keeper as i32)),
        "the slow worker was killed"
    );
    assert!(slow.gone_soon(), "and its background child with it (the whole group): {:?}", slow.pids());
    assert_eq!(runner.worker_pids(), [keeper_of(&after)]);
    assert_eq!(worker_counts(&m, "w-slow"), (1, 1));

    // Always slow: both attempts time out and the call fails with the timeout.
    let p = bash_worker("w-slow-always", "while read -r l; do sleep 300; done\n", "hook_timeout_secs = 1");
    let runner = load(&p);
    let err = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap_err();
    assert!(matches!(err, HookError::Timeout { secs: 1 }), "{err}");
}

#[test]
fn a_reply_over_4_mib_replaces_the_worker() {
    let p = bash_worker("w-big", MISBEHAVING, "");
    let rt = rt();
    let runner = load(&p);
    let before = token_of(&call(&rt, &runner, HookName::Ingest, ingest("hi")).unwrap());
    let (before_pid, before_keeper) = (host_pid(&before), keeper_of(&before));
    let after = token_of(&call(&rt, &runner, HookName::Ingest, ingest("big-once")).unwrap());
    assert_ne!(after, before);
    assert!(eventually(Duration::from_secs(2), || is_dead(before_pid) && is_dead(before_keeper as i32)));
    assert_eq!(runner.worker_pids(), [keeper_of(&after)]);

    let p =
        bash_worker("w-big-always", "while read -r l; do head -c 5000000 /dev/zero | tr '\\0' 'a'; echo; done\n", "");
    let runner = load(&p);
    let err = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap_err();
    assert!(matches!(err, HookError::OutputCap { stream: "stdout", cap: 4194304 }), "{err}");
    // A reply just under the cap is fine.
    let p = bash_worker(
        "w-big-ok",
        "while read -r l; do printf '\"'; head -c 4000000 /dev/zero | tr '\\0' 'a'; printf '\"\\n'; done\n",
        "",
    );
    let runner = load(&p);
    let ok = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(ok.as_str().map(str::len), Some(4_000_000));
}

#[test]
fn a_crash_loop_trips_the_breaker_instead_of_respawning_forever() {
    let p = bash_worker("w-loop", "echo start >> starts\necho 'cannot start' >&2\nexit 1\n", "");
    let rt = rt();
    let runner = Arc::new(load(&p));
    let layer = layer("w-loop", runner.clone(), |s| {
        s.circuit_breaker = ctxhost::manifest::CircuitBreaker { max_failures: 3, reset_secs: 60 };
    });
    let req = request(HookName::Ingest, ingest("x"));
    let started = Instant::now();
    let first = rt.block_on(layer.call(&req)).unwrap_err();
    assert!(first.message.contains("exit code 1") && first.message.contains("cannot start"), "{}", first.message);
    assert!(rt.block_on(layer.call(&req)).is_err());
    let spawned = starts(&p);
    assert_eq!(spawned, ctxhost::runner::process::WORKER_LOOP_LIMIT as usize, "a start and a retry per call");
    let fast = rt.block_on(layer.call(&req)).unwrap_err();
    assert!(fast.message.contains("keeps failing"), "{}", fast.message);
    assert_eq!(
        (first.kind, fast.kind),
        (ctxhost::runner::ErrorKind::Failed, ctxhost::runner::ErrorKind::Unavailable),
        "an exit code, then a crash loop the pool refuses to restart"
    );
    assert_eq!(starts(&p), spawned, "no new process while the loop lasts");
    let open = rt.block_on(layer.call(&req)).unwrap_err();
    assert!(open.message.starts_with("circuit-open"), "the engine's breaker opened: {}", open.message);
    assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
    assert!(runner.worker_pids().is_empty());
}

// --- the pool ---------------------------------------------------------------

#[test]
fn max_workers_serves_concurrent_calls() {
    // Each request waits until three workers are busy at once: only three
    // concurrent workers can answer at all.
    let body = format!(
        "{TOKEN}{}",
        r#"
mkdir -p busy
while IFS= read -r line; do
  case "$line" in
    *together*)
      touch "busy/$tok"
      for i in $(seq 1 500); do [ "$(ls busy | wc -l)" -ge 3 ] && break; sleep 0.02; done
      ;;
  esac
  echo "{\"worker\": \"$tok\", \"together\": $(ls busy | wc -l)}"
done
"#
    );
    let p = bash_worker("w-many", &body, "max_workers = 3\nhook_timeout_secs = 20");
    let rt = rt();
    let runner = Arc::new(load(&p));
    let calls = |n: usize, message: &'static str| -> Vec<Value> {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let r = runner.clone();
                rt.spawn(
                    async move { r.call(&request(HookName::Ingest, ingest(message)), &CallOptions::default()).await },
                )
            })
            .collect();
        handles.into_iter().map(|h| rt.block_on(h).unwrap().unwrap()).collect()
    };
    let replies = calls(3, "together");
    let tokens: BTreeSet<String> = replies.iter().map(token_of).collect();
    assert_eq!(tokens.len(), 3, "three workers answered at once: {replies:?}");
    assert!(replies.iter().all(|r| r["together"] == 3));
    let keepers: BTreeSet<u32> = tokens.iter().map(|t| keeper_of(t)).collect();
    assert_eq!(runner.worker_pids().into_iter().collect::<BTreeSet<_>>(), keepers, "the runner's three workers");
    // More callers than workers queue: all answer, never more than three processes.
    let replies = calls(12, "queue");
    assert_eq!(replies.len(), 12);
    assert!(replies.iter().map(token_of).all(|t| tokens.contains(&t)), "the same three workers");
    assert_eq!(runner.worker_pids().into_iter().collect::<BTreeSet<_>>(), keepers);
}

#[test]
fn idle_workers_stop_and_the_next_call_starts_one() {
    let p = bash_worker("w-idle", MISBEHAVING, "worker_idle_secs = 1");
    let rt = rt();
    let runner = load(&p);
    let m = metered(&runner);
    // The calls themselves, so the hook shows in the views.
    m.record("w-idle", HookName::Ingest, Duration::ZERO, ctxhost::metrics::CallOutcome::Success);
    let first = token_of(&call(&rt, &runner, HookName::Ingest, ingest("hi")).unwrap());
    let (first_pid, first_keeper) = (host_pid(&first), keeper_of(&first));
    assert!(
        eventually(Duration::from_secs(10), || is_dead(first_pid)
            && is_dead(first_keeper as i32)
            && runner.worker_pids().is_empty()),
        "the idle worker stopped"
    );
    let second = token_of(&call(&rt, &runner, HookName::Ingest, ingest("again")).unwrap());
    assert_ne!(second, first);
    assert_eq!(runner.worker_pids(), [keeper_of(&second)]);
    assert_eq!(worker_counts(&m, "w-idle"), (0, 0), "an idle stop is no fault");
}

#[test]
fn prewarm_starts_every_script_at_the_first_call() {
    let manifest = "name = \"w-prewarm\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\n\
                    persistent_subprocess = true\nprewarm_subprocesses = true\nmax_workers = 2\n\
                    ingest = \"hooks/ingest.sh\"\nassemble = \"hooks/assemble.sh\"\n";
    let p = TestPlugin::new(
        "w-prewarm",
        &[("plugin.toml", manifest), ("hooks/ingest.sh", MISBEHAVING), ("hooks/assemble.sh", MISBEHAVING)],
    );
    let rt = rt();
    let runner = load(&p);
    assert!(runner.worker_pids().is_empty(), "loading runs nothing (doctor and plugin list load too)");
    call(&rt, &runner, HookName::Ingest, ingest("hi")).unwrap();
    assert_eq!(runner.worker_pids().len(), 4, "two workers for each of the two scripts");
}

// --- a daemon: 1,000 calls, reload under load -------------------------------

/// The processes below `pid`. A worker is two of them: the process the
/// daemon spawned, and below it the hook (pid 1 of its own namespace).
fn descendants(pid: i32) -> Vec<i32> {
    let parent_of = process_table();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// The processes `pid` spawned itself: one per worker.
fn children(pid: i32) -> Vec<i32> {
    process_table().into_iter().filter(|&(_, pp)| pp == pid).map(|(c, _)| c).collect()
}

/// (pid, parent pid) of every live process.
fn process_table() -> Vec<(i32, i32)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(rest) = stat.rsplit(')').next() else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(ppid) = fields.get(1).and_then(|p| p.parse::<i32>().ok()) {
            parent_of.push((child, ppid));
        }
    }
    parent_of
}

fn open_fds(pid: i32) -> usize {
    let dir = format!("/proc/{pid}/fd");
    let n = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot count the daemon's fds in {dir}: {e}")).count();
    assert!(n > 0, "{dir} lists no fds");
    n
}

fn python_worker_site() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    crate::util::examples::copy_example("python-worker", &home.join("plugins/python-worker"));
    write(&home.join("config.toml"), "[context_engine]\nplugin_stack = [\"python-worker\"]\n");
    (root, home)
}

fn agent_ingest(d: &Daemon, agent: &str, message: &str) {
    let r = d.post(&format!("/api/agents/{agent}/ingest"), &json!({ "message": message }).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_thousand_sequential_calls_leak_no_fds_and_no_processes() {
    require_program("python3", "python3");
    let (_root, home) = python_worker_site();
    let d = Daemon::start(&home, &[], &[]);
    for i in 0..20 {
        agent_ingest(&d, "a", &format!("warm up {i}"));
    }
    let (fds, tree) = (open_fds(d.pid()), descendants(d.pid()));
    assert_eq!(children(d.pid()).len(), 1, "one python worker: {tree:?}");
    assert_eq!(
        tree.len(),
        3,
        "the worker's keeper, its namespace's init and its python process, nothing else: {tree:?}"
    );
    for i in 0..1000 {
        agent_ingest(&d, "a", &format!("call {i} about gardens"));
    }
    // A closed connection may take a moment to leave the daemon's table.
    let settled = eventually(Duration::from_secs(3), || open_fds(d.pid()) <= fds);
    assert!(settled, "open fds grew: {fds} before, {} after 1,000 calls", open_fds(d.pid()));
    assert_eq!(descendants(d.pid()), tree, "the same single worker process");
    let metrics = d.get("/api/context-engine/metrics").json();
    assert_eq!(metrics["ingest"]["failures"], 0, "{metrics}");
}

#[test]
fn a_reload_with_calls_in_flight_loses_none_and_stops_the_old_workers() {
    require_program("python3", "python3");
    let (_root, home) = python_worker_site();
    let d = Arc::new(Daemon::start(&home, &[], &[]));
    agent_ingest(&d, "a", "warm up");
    let old = descendants(d.pid());
    assert_eq!((children(d.pid()).len(), old.len()), (1, 3), "one worker (keeper, init, python): {old:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..4)
        .map(|w| {
            let (d, stop, calls) = (d.clone(), stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    agent_ingest(&d, &format!("w{w}"), &format!("message {n}"));
                    n += 1;
                    calls.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let wait_for_calls = |more: usize| {
        let target = calls.load(Ordering::SeqCst) + more;
        assert!(eventually(Duration::from_secs(30), || calls.load(Ordering::SeqCst) >= target), "calls stalled");
    };
    let mut seen: BTreeSet<i32> = children(d.pid()).into_iter().collect();
    wait_for_calls(10);
    for _ in 0..3 {
        let r = d.post("/api/plugins/python-worker/reload", "");
        assert_eq!(r.status, 200, "{}", r.body);
        wait_for_calls(10);
        seen.extend(children(d.pid()));
    }
    stop.store(true, Ordering::SeqCst);
    for c in callers {
        c.join().expect("a call failed during a reload");
    }
    assert!(seen.len() >= 2, "reloads started new workers: {seen:?}");
    assert!(
        eventually(Duration::from_secs(5), || children(d.pid()).len() == 1 && descendants(d.pid()).len() == 3),
        "only the newest worker is left: {:?}",
        descendants(d.pid())
    );
    assert!(old.iter().all(|&p| is_dead(p)), "the first worker stopped, its python process too");
    let metrics = d.get("/api/context-engine/metrics").json();
    assert_eq!(metrics["ingest"]["failures"], 0, "{metrics}");
}

/// `prewarm_subprocesses`: a daemon starts the workers of a stack plugin at
/// start (after bootstrap), before any call.
#[test]
fn a_daemon_prewarms_workers_at_start() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let dir = home.join("plugins/warm");
    write(
        &dir.join("plugin.toml"),
        "name = \"warm\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\npersistent_subprocess = true\n\
         prewarm_subprocesses = true\nmax_workers = 2\ningest = \"hooks/ingest.sh\"\n",
    );
    write(&dir.join("hooks/ingest.sh"), MISBEHAVING);
    write(&home.join("config.toml"), "[context_engine]\nplugin = \"warm\"\n");
    let d = Daemon::start(&home, &[], &[]);
    assert!(
        eventually(Duration::from_secs(5), || children(d.pid()).len() == 2 && descendants(d.pid()).len() == 6),
        "two workers (each with its hook) before any call: {:?}",
        descendants(d.pid())
    );
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
}
