//! The Python fork server (issue 18): every python example and LibreFang-style
//! fixture and a set of targeted scripts run through both paths — the fork
//! server and a plain spawn (`[hooks] forkserver = false`) — with the same
//! replies, errors and files; leftovers die with the call; the sandbox still
//! denies; a call the server cannot take is spawned and counted.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ctxhost::config::HostConfig;
use ctxhost::metrics::Metrics;
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, HookError, Runner};
use serde_json::{Value, json};

use crate::util::{TestPlugin, example, is_dead, librefang_fixture, within};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn load_with(dir: &Path, home: &Path, config: &HostConfig) -> (ProcessRunner, Arc<Metrics>) {
    let runner = crate::util::load_script(dir, home, config);
    let metrics = Arc::new(Metrics::default());
    runner.attach_metrics(Arc::clone(&metrics));
    (runner, metrics)
}

fn call(rt: &tokio::runtime::Runtime, runner: &dyn Runner, hook: HookName, body: Value) -> Result<Value, HookError> {
    let request = HookRequest::from_json(hook, body).unwrap();
    rt.block_on(runner.call(&request, &CallOptions::default()))
}

fn fallbacks(metrics: &Metrics, plugin: &str) -> u64 {
    metrics.by_plugin().get(plugin).map(|h| h.values().map(|m| m.forkserver_fallbacks).sum()).unwrap_or(0)
}

/// A python plugin `name` with one `ingest` script; `extra` goes in `[hooks]`.
fn python_plugin(name: &str, script: &str, extra: &str) -> TestPlugin {
    let manifest = format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\nhook_timeout_secs = 5\n{extra}\ningest = \"hooks/ingest.py\"\n"
    );
    TestPlugin::new(name, &[("plugin.toml", &manifest), ("hooks/ingest.py", script)])
}

fn ingest(message: &str) -> Value {
    json!({"agent_id": "a", "message": message, "peer_id": null})
}

/// A result as comparable text: the reply, or the error's kind and message
/// (which holds the stderr tail).
fn shown(r: &Result<Value, HookError>) -> String {
    match r {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {:?}: {e}", e.kind()),
    }
}

/// The scripts whose behaviour must not tell the two paths apart.
const SCRIPTS: &[(&str, &str)] = &[
    (
        "dump",
        r#"import json, os, sys
line = sys.stdin.readline()
m = sys.modules['__main__']
print(json.dumps({"type": "ingest_result", "memories": [], "name": __name__, "argv": sys.argv,
  "file": __file__, "spec": repr(__spec__), "loader": type(__loader__).__name__, "path0": sys.path[0],
  "env": sorted(k for k in os.environ if k != "TMPDIR"), "agent": os.environ["LIBREFANG_AGENT_ID"],
  "msg": os.environ["LIBREFANG_MESSAGE"], "req": json.loads(line)["message"],
  "tmp": os.path.isdir(os.environ["TMPDIR"]) and os.access(os.environ["TMPDIR"], os.W_OK),
  "flags": [sys.flags.dont_write_bytecode, sys.flags.isolated], "globals": sorted(globals())}))
"#,
    ),
    ("exit3", "print('{\"type\": \"ingest_result\", \"memories\": []}')\nimport sys\nsys.exit(3)\n"),
    ("exit_message", "import sys\nsys.exit('bad thing happened')\n"),
    (
        "traceback",
        "def f():\n    raise ValueError('boom')\ntry:\n    f()\nexcept ValueError as e:\n    raise RuntimeError('wrapped') from e\n",
    ),
    ("syntax", "print('a'\n"),
    (
        "atexit",
        "import atexit, sys\natexit.register(lambda: print('{\"type\": \"ingest_result\", \"memories\": [{\"content\": \"atexit\"}]}'))\nsys.stdout.write('partial')\n",
    ),
    (
        "thread_exit",
        "import threading, sys, time, json\ndef t():\n    time.sleep(0.05)\n    print(json.dumps({'type': 'ingest_result', 'memories': [{'content': 'thread'}]}))\n    sys.exit(5)\nthreading.Thread(target=t).start()\nprint('main done')\n",
    ),
    (
        "finaliser",
        "import json\nclass D:\n    def __del__(self):\n        print(json.dumps({'type': 'ingest_result', 'memories': [{'content': 'del ran'}]}))\nd = D()\n",
    ),
    (
        "stdin_twice",
        "import sys, json\na = sys.stdin.read()\nb = sys.stdin.read()\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'second': b, 'first_len': len(a) > 0}))\n",
    ),
    ("close_stdout", "import os\nprint('{\"type\": \"ingest_result\", \"memories\": []}')\nos.close(1)\n"),
    ("os_exit", "import os\nprint('{\"type\": \"ingest_result\", \"memories\": []}', flush=True)\nos._exit(4)\n"),
    ("signal", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"),
    ("interrupt", "raise KeyboardInterrupt\n"),
    // Compiling warns: the warning is on stderr at every call (a script
    // whose compiling warns is never run from the server's compiled code).
    ("warns", "import sys\nx = 1 is 1\nsys.exit(2)\n"),
    (
        "state",
        // Module state of a preloaded module: a call that finds the mark of
        // an earlier call saw shared state.
        "import json, random\nseen = hasattr(json, 'MARK')\njson.MARK = 1\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'seen': seen}))\n",
    ),
];

/// Every targeted script through both paths, three times (later calls of
/// the fork server run after earlier ones changed what they could, and once
/// the server has compiled the script): the same reply or error, and the
/// fork server took every call.
#[test]
fn targeted_scripts_behave_the_same_through_both_paths() {
    let rt = rt();
    let config = HostConfig::default();
    for (name, script) in SCRIPTS {
        let forked = python_plugin(name, script, "");
        let spawned = python_plugin(name, script, "forkserver = false");
        let (fork_runner, fork_metrics) = load_with(&forked.dir, &forked.home, &config);
        let (spawn_runner, _) = load_with(&spawned.dir, &spawned.home, &config);
        for round in 0..3 {
            let a = call(&rt, &spawn_runner, HookName::Ingest, ingest("hello there"));
            let b = call(&rt, &fork_runner, HookName::Ingest, ingest("hello there"));
            // Paths differ between the two plugin dirs: compare with them masked.
            let mask = |s: String, p: &TestPlugin| s.replace(p.dir.to_str().unwrap(), "<dir>");
            let (a, b) = (mask(shown(&a), &spawned), mask(shown(&b), &forked));
            let a = a.replace("forkserver = false", "");
            assert_eq!(a, b, "`{name}` (call {round}) differs: spawned vs forked");
        }
        assert!(fork_runner.forkserver_pid().is_some(), "`{name}`: no fork server ran");
        assert!(spawn_runner.forkserver_pid().is_none(), "`{name}`: `forkserver = false` started one");
        assert_eq!(fallbacks(&fork_metrics, name), 0, "`{name}`: a call was spawned instead");
    }
}

/// The fork server is what answered: a preloaded module is there before the
/// script imports it (and is not in a spawned interpreter), and `random`
/// is reseeded in every child.
#[test]
fn calls_really_go_through_the_fork_server() {
    let rt = rt();
    let script = "import sys, json\npre = 'hashlib' in sys.modules\nimport random\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'pre': pre, 'r': random.random()}))\n";
    let forked = python_plugin("really", script, "");
    let spawned = python_plugin("really", script, "forkserver = false");
    let config = HostConfig::default();
    let (fork_runner, _) = load_with(&forked.dir, &forked.home, &config);
    let (spawn_runner, _) = load_with(&spawned.dir, &spawned.home, &config);
    let a = call(&rt, &fork_runner, HookName::Ingest, ingest("x")).unwrap();
    let b = call(&rt, &fork_runner, HookName::Ingest, ingest("x")).unwrap();
    let c = call(&rt, &spawn_runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!((a["pre"].as_bool(), c["pre"].as_bool()), (Some(true), Some(false)));
    assert_ne!(a["r"], b["r"], "random must be reseeded per child");
    // Off host-wide too.
    let mut off = HostConfig::default();
    off.runner.python_forkserver = false;
    let (off_runner, _) = load_with(&forked.dir, &forked.home, &off);
    let d = call(&rt, &off_runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(d["pre"].as_bool(), Some(false));
    assert!(off_runner.forkserver_pid().is_none());
}

/// A process limit this machine keeps with RLIMIT_NPROC (no cgroup for it:
/// as an unprivileged user here) counts per user: a server's calls would
/// share one count, so such a plugin's calls are spawned, each in a user
/// namespace of its own. With a cgroup for the limit (as root here) each
/// call gets its own cgroup, and the calls go through the server. The
/// module's re-run as uid 65534 takes the other branch.
#[test]
fn a_process_limit_kept_by_rlimit_keeps_the_calls_spawned() {
    let rt = rt();
    let script = "import sys, json\npre = 'hashlib' in sys.modules\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'pre': pre}))\n";
    let p = python_plugin("limited", script, "");
    let mut config = HostConfig::default();
    config.sandbox.max_processes = 16;
    let (runner, _) = load_with(&p.dir, &p.home, &config);
    let kept_by = ctxhost::runner::process::sandbox::features().limits().process_limit;
    let rlimit = kept_by == "rlimit";
    let reply = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(reply["pre"].as_bool(), Some(!rlimit), "the process limit is kept by {kept_by}: {reply}");
    assert_eq!(runner.forkserver_pid().is_some(), !rlimit, "the process limit is kept by {kept_by}");
    let manifest = ctxhost::manifest::Manifest::load(&p.dir).unwrap().manifest;
    let decision = ctxhost::runner::process::forkserver_decision(&manifest.settings, &config).unwrap();
    match decision {
        Err(why) => assert!(rlimit && why.contains("RLIMIT_NPROC"), "{why}"),
        Ok(()) => assert!(!rlimit),
    }
    rt.block_on(runner.shutdown());
}

/// Calls that overlap each run in a process of their own (one spare waits;
/// the others are forked when they come), and the spare waiting for the
/// next call holds nothing of any call: no fd but its socket to the server
/// and fds 0-2, which it replaces when its call comes.
#[test]
fn overlapping_calls_run_apart_and_the_waiting_spare_holds_nothing_of_a_call() {
    let rt = rt();
    let script = "import json, os, sys, time\nsys.stdin.readline()\ntime.sleep(0.3)\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'pid': os.getpid(), 'fds': sorted(os.listdir('/proc/self/fd'))}))\n";
    let p = python_plugin("overlap", script, "");
    let (runner, metrics) = load_with(&p.dir, &p.home, &HostConfig::default());
    call(&rt, &runner, HookName::Ingest, ingest("warm")).unwrap();
    let request = HookRequest::from_json(HookName::Ingest, ingest("x")).unwrap();
    let options = CallOptions::default();
    let (a, b, c, d) = rt.block_on(async {
        let one = || runner.call(&request, &options);
        tokio::join!(one(), one(), one(), one())
    });
    let replies: Vec<Value> = [a, b, c, d].into_iter().map(|r| r.unwrap()).collect();
    let mut pids: Vec<i64> = replies.iter().map(|r| r["pid"].as_i64().unwrap()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 4, "four calls, four processes: {replies:?}");
    for r in &replies {
        // 0-2 and the fd `listdir` itself opened: nothing of the server's or another call's.
        assert_eq!(r["fds"].as_array().unwrap().len(), 4, "a call's process sees only its own fds: {r}");
    }
    assert_eq!(fallbacks(&metrics, "overlap"), 0);
    let server = runner.forkserver_pid().unwrap() as i32;
    within(5, "one spare waiting", || python_children(server).len() == 1);
    let spare = python_children(server)[0];
    let fds = || -> Vec<String> {
        std::fs::read_dir(format!("/proc/{spare}/fd"))
            .map(|dir| {
                dir.flatten()
                    .map(|e| {
                        let target = std::fs::read_link(e.path()).unwrap_or_default();
                        format!("{} -> {}", e.file_name().to_string_lossy(), target.display())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // Just forked, it still has the server's fds: it closes them before it
    // waits for its call (the calls above checked what a call's process has).
    let start = std::time::Instant::now();
    while fds().len() != 4 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = fds();
    assert_eq!(held.len(), 4, "the waiting spare holds fds 0-2 and its socket only: {held:?}");
    assert!(held[3].contains("socket:"), "its fd 3 is its socket to the server: {held:?}");
}

/// The request is written into the pipe before the call starts as far as
/// the pipe takes it: one bigger than a pipe (64 KiB) arrives whole, and a
/// hook reading to the end sees the end.
#[test]
fn a_request_bigger_than_a_pipe_arrives_whole() {
    let rt = rt();
    let script = "import sys, json, hashlib\ndata = sys.stdin.buffer.read()\nprint(json.dumps({'type': 'ingest_result', 'memories': [], 'len': len(data), 'sha': hashlib.sha256(data).hexdigest()}))\n";
    let forked = python_plugin("big", script, "");
    let spawned = python_plugin("big", script, "forkserver = false");
    let config = HostConfig::default();
    let (fork_runner, metrics) = load_with(&forked.dir, &forked.home, &config);
    let (spawn_runner, _) = load_with(&spawned.dir, &spawned.home, &config);
    for size in [10, 200 * 1024] {
        let message: String = (0..size).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let a = call(&rt, &spawn_runner, HookName::Ingest, ingest(&message)).unwrap();
        let b = call(&rt, &fork_runner, HookName::Ingest, ingest(&message)).unwrap();
        assert!(a["len"].as_u64().unwrap() > size as u64, "{a}");
        assert_eq!((&a["len"], &a["sha"]), (&b["len"], &b["sha"]), "size {size}");
    }
    assert_eq!(fallbacks(&metrics, "big"), 0);
    assert!(fork_runner.forkserver_pid().is_some());
}

/// The children of the python fork server below `root` (the spawned process
/// is a keeper or a namespace's init when the sandbox has one, and an init
/// shows the command line of what it started): the python processes running
/// the server's code whose parent does too.
fn python_children(root: i32) -> Vec<i32> {
    let runs_server = |pid: i32| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        comm.starts_with("python")
            && String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
                .contains("fork server")
    };
    let mut all = descendants(root);
    all.push(root);
    all.into_iter()
        .filter(|&pid| runs_server(pid) && crate::util::procs::parent_of(pid).is_some_and(runs_server))
        .collect()
}

/// The server runs compiled code only for the source a call's process
/// read: a script rewritten with the same size and its times set back runs
/// its new text at the next call.
#[test]
fn an_edited_script_runs_its_new_text_even_with_the_same_size_and_times() {
    let rt = rt();
    let script = |word: &str| {
        format!("import json\nprint(json.dumps({{'type': 'ingest_result', 'memories': [{{'content': '{word}'}}]}}))\n")
    };
    let p = python_plugin("edited", &script("one"), "");
    let (runner, _) = load_with(&p.dir, &p.home, &HostConfig::default());
    let path = p.dir.join("hooks/ingest.py");
    for _ in 0..3 {
        let r = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
        assert_eq!(r["memories"][0]["content"], "one");
    }
    let before = std::fs::metadata(&path).unwrap();
    std::fs::write(&path, script("two")).unwrap();
    let times =
        std::fs::FileTimes::new().set_modified(before.modified().unwrap()).set_accessed(before.accessed().unwrap());
    std::fs::File::options().write(true).open(&path).unwrap().set_times(times).unwrap();
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!((after.len(), after.modified().unwrap()), (before.len(), before.modified().unwrap()));
    let r = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(r["memories"][0]["content"], "two");
}

/// The python examples and the LibreFang-style fixture: the same replies
/// through both paths, and the same files written.
#[test]
fn examples_and_fixtures_agree_through_both_paths() {
    let rt = rt();
    let config = HostConfig::default();
    let turns = [
        json!({"agent_id": "a1", "messages": [{"role": "user", "content": "My garden has heirloom tomatoes"}]}),
        json!({"agent_id": "a1", "messages": [{"role": "user", "content": "I also keep bees"}]}),
    ];
    let asks = ["Tell me about my garden", "bees?", "zebras"];
    let run = |dir: &Path, home: &Path, off: bool| -> (Vec<String>, String) {
        if off {
            let manifest = dir.join("plugin.toml");
            let text = std::fs::read_to_string(&manifest).unwrap();
            std::fs::write(&manifest, text.replacen("[hooks]\n", "[hooks]\nforkserver = false\n", 1)).unwrap();
        }
        let (runner, metrics) = load_with(dir, home, &config);
        let mut replies = Vec::new();
        for t in &turns {
            replies.push(shown(&call(&rt, &runner, HookName::AfterTurn, t.clone())));
        }
        for q in asks {
            let body = json!({"agent_id": "a1", "message": q, "peer_id": null});
            replies.push(shown(&call(&rt, &runner, HookName::Ingest, body)));
        }
        assert_eq!(runner.forkserver_pid().is_some(), !off);
        assert_eq!(fallbacks(&metrics, runner.plugin().manifest.name.as_str()), 0);
        (replies, files(home).join("\n"))
    };
    {
        let name = "python-memory";
        let (a, b) = (example(name), example(name));
        let (ra, fa) = run(&a.dir, &a.home, true);
        let (rb, fb) = run(&b.dir, &b.home, false);
        assert_eq!(ra, rb, "{name}: replies differ");
        assert!(ra.iter().any(|r| r.contains("tomatoes")), "{name} recalled nothing: {ra:?}");
        let (da, db) = (dir_files(&a.dir), dir_files(&b.dir));
        assert_eq!(da, db, "{name}: plugin dir files differ");
        assert_eq!(fa, fb, "{name}: home files differ");
    }
    {
        let name = "notes";
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        librefang_fixture(name, &a.path().join("plugins"));
        librefang_fixture(name, &b.path().join("plugins"));
        let (ha, hb) = (a.path().join("home"), b.path().join("home"));
        let (ra, fa) = run(&a.path().join("plugins").join(name), &ha, true);
        let (rb, fb) = run(&b.path().join("plugins").join(name), &hb, false);
        assert_eq!(ra, rb, "{name}: replies differ");
        assert_eq!(fa, fb, "{name}: files differ");
        assert!(fa.contains("store.json"), "{name} wrote no store: {fa}");
    }
}

/// Relative path and content of every file under `root` (sorted).
fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            // The host's own databases and caches are not the hook's.
            if rel.starts_with("cache") || rel.ends_with(".db") || rel.contains(".db-") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(format!("{rel}: {}", std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

fn dir_files(dir: &Path) -> Vec<String> {
    files(dir).into_iter().filter(|f| !f.starts_with("plugin.toml")).collect()
}

/// A hook that daemonises (double fork, new session) and one that leaves a
/// child in its group: both are dead when the call returns.
#[test]
fn leftovers_die_with_the_call() {
    let rt = rt();
    let script = r#"import os, sys, time, json
if os.environ["LIBREFANG_MESSAGE"] == "quiet":
    print(json.dumps({"type": "ingest_result", "memories": []}))
    sys.exit(0)
pids = os.path.join(os.environ["TMPDIR"], "..")
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"%d\n" % os.getpid()); os.close(1); os.close(2)
        time.sleep(30); os._exit(0)
    os._exit(0)
if os.fork() == 0:
    os.write(w, b"%d\n" % os.getpid()); os.close(1); os.close(2)
    time.sleep(30); os._exit(0)
os.close(w)
got = b""
while got.count(b"\n") < 2:
    got += os.read(r, 100)
print(json.dumps({"type": "ingest_result", "memories": [], "pids": [int(p) for p in got.split()]}))
"#;
    let p = python_plugin("daemon", script, "");
    let (runner, _) = load_with(&p.dir, &p.home, &HostConfig::default());
    // A first call that leaves nothing: the server's own process tree.
    call(&rt, &runner, HookName::Ingest, ingest("quiet")).unwrap();
    let server = runner.forkserver_pid().unwrap() as i32;
    let baseline = settled(server);
    let reply = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(runner.forkserver_pid(), Some(server as u32));
    // The pids are of the hook's pid namespace when it has one; the host
    // sees the server's tree: back to what it was once the call returned.
    let pids: Vec<i64> = reply["pids"].as_array().unwrap().iter().filter_map(Value::as_i64).collect();
    assert_eq!(pids.len(), 2, "{reply}");
    within(5, "the call's leftovers are killed", || settled_again(server, baseline));
}

/// How many processes the server's tree has between calls: the server, its
/// keeper or init, and the spare waiting for the next call (waited for).
fn settled(server: i32) -> usize {
    within(5, "the spare for the next call", || python_children(server).len() == 1);
    descendants(server).len()
}

/// The tree is back to `baseline` with only the spare below the server:
/// nothing a call left (a double-forked daemon is reparented to the server).
fn settled_again(server: i32, baseline: usize) -> bool {
    descendants(server).len() == baseline && python_children(server).len() == 1
}

/// Pids below `pid` in the host's view (children, recursively), `pid`'s
/// own keeper/init chain included.
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.flatten() {
            let path = t.path().join("children");
            for c in std::fs::read_to_string(path).unwrap_or_default().split_whitespace() {
                if let Ok(c) = c.parse::<i32>()
                    && !is_dead(c)
                {
                    out.push(c);
                    stack.push(c);
                }
            }
        }
    }
    out
}

/// A hook past its deadline is killed through the fork server, with its
/// group; the server keeps serving.
#[test]
fn a_timeout_kills_the_hook_and_the_server_serves_on() {
    let rt = rt();
    let script = "import sys, time, json, os\nif 'slow' in sys.stdin.readline():\n    time.sleep(60)\nprint(json.dumps({'type': 'ingest_result', 'memories': []}))\n";
    let p = python_plugin("slow", script, "");
    let text = std::fs::read_to_string(p.dir.join("plugin.toml"))
        .unwrap()
        .replace("hook_timeout_secs = 5", "hook_timeout_secs = 1");
    std::fs::write(p.dir.join("plugin.toml"), text).unwrap();
    let (runner, _) = load_with(&p.dir, &p.home, &HostConfig::default());
    assert!(call(&rt, &runner, HookName::Ingest, ingest("fast")).is_ok());
    let server = runner.forkserver_pid().unwrap() as i32;
    let baseline = settled(server);
    let start = std::time::Instant::now();
    let e = call(&rt, &runner, HookName::Ingest, ingest("slow")).unwrap_err();
    assert!(matches!(e, HookError::Timeout { .. }), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    within(5, "the timed-out hook is gone", || settled_again(server, baseline));
    assert!(call(&rt, &runner, HookName::Ingest, ingest("fast")).is_ok());
    assert_eq!(runner.forkserver_pid(), Some(server as u32), "the same server serves on");
}

/// Over the output cap: killed, reported as for a spawned hook.
#[test]
fn the_output_cap_holds() {
    let rt = rt();
    let script = "import sys\nsys.stdout.write('x' * (3 * 1024 * 1024))\n";
    let p = python_plugin("loud", script, "");
    let (runner, _) = load_with(&p.dir, &p.home, &HostConfig::default());
    let e = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap_err();
    assert!(matches!(e, HookError::OutputCap { stream: "stdout", .. }), "{e}");
}

/// A server that died is replaced at the next call; a script dir shadowing
/// a preloaded module is spawned instead, counted as a fallback.
#[test]
fn a_dead_server_is_replaced_and_a_declined_call_is_spawned() {
    let rt = rt();
    // `die` kills the hook's parent: the fork server itself.
    let script = "import json, os, sys, time\nif 'die' in sys.stdin.readline():\n    os.kill(os.getppid(), 9)\n    time.sleep(5)\nprint(json.dumps({'type': 'ingest_result', 'memories': []}))\n";
    let p = python_plugin("phoenix", script, "");
    let (runner, metrics) = load_with(&p.dir, &p.home, &HostConfig::default());
    call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    let first = runner.forkserver_pid().unwrap();
    let e = call(&rt, &runner, HookName::Ingest, ingest("die")).unwrap_err();
    assert_eq!(e.kind(), ctxhost::runner::ErrorKind::Crashed, "{e}");
    call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    let second = runner.forkserver_pid().unwrap();
    assert_ne!(first, second, "a new server serves");

    let shadow = TestPlugin::new(
        "shadow",
        &[
            (
                "plugin.toml",
                "name = \"shadow\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/ingest.py\"\n",
            ),
            ("hooks/ingest.py", "import uuid\nprint(uuid.MINE)\n"),
            ("hooks/uuid.py", "MINE = '{\"type\": \"ingest_result\", \"memories\": [{\"content\": \"own uuid\"}]}'\n"),
        ],
    );
    let (runner, metrics2) = load_with(&shadow.dir, &shadow.home, &HostConfig::default());
    let r = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert_eq!(r["memories"][0]["content"], "own uuid");
    assert_eq!(fallbacks(&metrics2, "shadow"), 1);
    assert_eq!(fallbacks(&metrics, "phoenix"), 0);
}

/// The sandbox holds through the fork server: a child cannot write outside
/// its dirs, nor see the host's environment.
#[test]
fn the_sandbox_still_denies() {
    let rt = rt();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped");
    let script = format!(
        "import json, os\ntry:\n    open({target:?}, 'w').write('x')\n    wrote = True\nexcept OSError:\n    wrote = False\nprint(json.dumps({{'type': 'ingest_result', 'memories': [], 'wrote': wrote, 'secret': os.environ.get('CTXHOST_TEST_SECRET')}}))\n",
        target = target.to_str().unwrap()
    );
    // SAFETY: set before any thread of this test reads the environment.
    unsafe { std::env::set_var("CTXHOST_TEST_SECRET", "hunter2") };
    let p = python_plugin("jail", &script, "");
    let (runner, _) = load_with(&p.dir, &p.home, &HostConfig::default());
    let r = call(&rt, &runner, HookName::Ingest, ingest("x")).unwrap();
    assert!(runner.forkserver_pid().is_some());
    assert_eq!(r["secret"], Value::Null, "{r}");
    if ctxhost::runner::process::sandbox::features().landlock_abi >= 1 {
        assert_eq!(r["wrote"], false, "{r}");
        assert!(!target.exists());
    }
}

/// The rest of the python examples: python-worker run one-shot (its script
/// answers one line and exits when stdin ends) and the demo's
/// shorten-results (`transform_tool_result`), through both paths: the same
/// replies and files. guard-python is a `jsonrpc` worker: never a fork
/// server (workers are not one-shot calls), and it answers as before.
#[test]
fn the_other_python_examples_and_the_demo_plugin_agree_through_both_paths() {
    let rt = rt();
    let config = HostConfig::default();
    let long: String = (0..60).map(|i| format!("line {i} of a verbose tool result\n")).collect();
    type Case = (&'static str, Vec<(HookName, Value)>);
    let cases: Vec<Case> = vec![
        (
            "python-worker",
            vec![
                (
                    HookName::AfterTurn,
                    json!({"agent_id": "a1", "messages": [{"role": "user", "content": "My garden has heirloom tomatoes"}]}),
                ),
                (HookName::Ingest, json!({"agent_id": "a1", "message": "Tell me about my garden", "peer_id": null})),
                (HookName::Ingest, json!({"agent_id": "a1", "message": "zebras", "peer_id": null})),
            ],
        ),
        (
            "demo/shorten-results",
            vec![
                (HookName::TransformToolResult, json!({"agent_id": "a1", "tool_name": "t", "result": long})),
                (HookName::TransformToolResult, json!({"agent_id": "a1", "tool_name": "t", "result": "short"})),
            ],
        ),
    ];
    for (name, calls) in &cases {
        let mut seen = Vec::new();
        for off in [true, false] {
            let p = example(name);
            let manifest = p.dir.join("plugin.toml");
            let mut text = std::fs::read_to_string(&manifest).unwrap();
            text = text.replace("persistent_subprocess = true", "persistent_subprocess = false");
            if off {
                text = text.replacen("[hooks]\n", "[hooks]\nforkserver = false\n", 1);
            }
            std::fs::write(&manifest, text).unwrap();
            let (runner, metrics) = load_with(&p.dir, &p.home, &config);
            let replies: Vec<String> =
                calls.iter().map(|(hook, body)| shown(&call(&rt, &runner, *hook, body.clone()))).collect();
            assert_eq!(runner.forkserver_pid().is_some(), !off, "{name}");
            assert_eq!(fallbacks(&metrics, &runner.plugin().manifest.name), 0, "{name}");
            seen.push((replies, files(&p.home).join("\n"), dir_files(&p.dir)));
        }
        assert_eq!(seen[0].0, seen[1].0, "{name}: replies differ");
        assert_eq!(seen[0].1, seen[1].1, "{name}: home files differ");
        assert_eq!(seen[0].2, seen[1].2, "{name}: plugin dir files differ");
        assert!(seen[0].0.iter().all(|r| r.starts_with("ok ")), "{name}: {:?}", seen[0].0);
    }
    // The effect is there: the worker recalled, the long result was cut.
    let p = example("demo/shorten-results");
    let (runner, _) = load_with(&p.dir, &p.home, &config);
    let r =
        call(&rt, &runner, HookName::TransformToolResult, json!({"agent_id": "a1", "tool_name": "t", "result": long}))
            .unwrap();
    assert!(r.to_string().contains("line 0 of") && !r.to_string().contains("line 59 of"), "{r}");

    let guard = example("guard-python");
    let (runner, _) = load_with(&guard.dir, &guard.home, &config);
    let r = call(&rt, &runner, HookName::MemoryWritePre, json!({"content": "mail me at a@b.example", "metadata": {}}))
        .unwrap();
    assert_eq!(r["action"], "replace", "{r}");
    assert!(runner.forkserver_pid().is_none(), "a worker plugin has no fork server");
    rt.block_on(runner.shutdown());
}

/// `ctxhost hook` runs one call per process: it spawns the hook, as it
/// always did, and starts no fork server — none among its processes while
/// the hook runs, and the hook's interpreter has none of the preloaded
/// modules a fork-server child starts with — and no thread either.
#[test]
fn ctxhost_hook_spawns_its_one_call_without_a_fork_server() {
    let script = "import sys, json, time\npre = sorted(m for m in ('inspect', 'dataclasses', 'logging') if m in sys.modules)\ntime.sleep(1.5)\nprint(json.dumps({'type': 'ingest_result', 'memories': [{'content': 'pre=%s' % ','.join(pre)}]}))\n";
    let p = python_plugin("single", script, "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env_remove("RUST_LOG")
        .env_remove("CTXHOST_HOME")
        .env_remove("CTXHOST_PLUGINS_DIR")
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(ingest("x").to_string().as_bytes()).unwrap();
    }
    let host = child.id() as i32;
    let script_path = p.dir.join("hooks/ingest.py");
    let script_path = script_path.to_str().unwrap();
    // The hook's interpreter among ctxhost's processes (so the look is not
    // blind), and no fork server there.
    let mut saw_hook = false;
    let mut threads = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !saw_hook && std::time::Instant::now() < deadline {
        for pid in descendants(host) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&cmdline);
            assert!(!text.contains("fork server"), "a fork server runs under `ctxhost hook`: {text}");
            saw_hook |= text.contains(script_path);
        }
        threads = std::fs::read_dir(format!("/proc/{host}/task")).map(|d| d.count()).into_iter().collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(saw_hook, "the hook's interpreter was never seen among ctxhost's processes");
    // One call per process: no thread beside the main one while the hook
    // runs (the blocking pool's would cost its start ~1 ms and outlive it).
    assert_eq!(threads, [1], "ctxhost's threads while its one hook ran");
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["memories"][0]["content"], "pre=", "{reply}");
}

/// ctxhost SIGKILLed while a hook runs through its fork server: the server
/// and the hook's process are gone (by pid), nothing of the plugin is left.
#[test]
fn a_sigkilled_host_leaves_neither_the_fork_server_nor_the_hook() {
    let site = crate::util::site::Site::new();
    let dir = site.plugin_dir("stuck");
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        "name = \"stuck\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\nhook_timeout_secs = 120\ningest = \"hooks/ingest.py\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("hooks/ingest.py"),
        "import sys, json, time\nif 'hang' in sys.stdin.readline():\n    time.sleep(120)\nprint(json.dumps({'type': 'ingest_result', 'memories': []}))\n",
    )
    .unwrap();
    std::fs::write(site.home().join("config.toml"), "[context_engine]\nplugin_stack = [\"stuck\"]\n").unwrap();
    let d = site.start(&[]);
    let r = d.post("/api/agents/a1/ingest", &json!({"message": "warm"}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let addr = d.addr.clone();
    // The hanging call, never answered.
    let hanging = std::thread::spawn(move || {
        crate::util::http::request(&addr, "POST", "/api/agents/a1/ingest", Some(r#"{"message":"hang"}"#), &[])
    });
    // The server and its call's child: python processes with the server's
    // code in their argv (a forked child keeps it), below the daemon.
    let host = d.pid();
    let forked = || -> Vec<i32> {
        descendants(host)
            .into_iter()
            .filter(|pid| {
                String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
                    .contains("fork server")
            })
            .collect()
    };
    within(20, "the fork server and the hanging call's child", || forked().len() >= 2);
    let pids = forked();
    // SAFETY: kill(2) with the pid of our own child, not reaped yet.
    unsafe { libc::kill(host, libc::SIGKILL) };
    drop(d);
    let _ = hanging.join();
    within(5, "the fork server and the hook to be gone", || pids.iter().all(|p| is_dead(*p)));
}

/// This module again as uid 65534 (when the tests run as root): the fork
/// server started as an unprivileged daemon's would be, the same answers.
#[test]
fn the_fork_server_suite_passes_as_an_unprivileged_user() {
    crate::util::nobody::rerun_as_nobody(
        "forkserver::",
        &["forkserver::the_fork_server_suite_passes_as_an_unprivileged_user"],
        &[
            "guest-examples/python-memory",
            "guest-examples/python-worker",
            "guest-examples/demo",
            "guest-examples/guard-python",
            "tests/fixtures",
        ],
        10,
    );
}

/// `ctxhost doctor` (JSON and text) and `GET /api/plugins` say whether a
/// python plugin's hooks run through a fork server, and why not; a plugin
/// of another runtime has no such field.
#[test]
fn doctor_and_the_catalog_say_whether_hooks_run_through_a_fork_server() {
    use crate::util::http::Client;
    let site = crate::util::site::Site::new();
    let hook = "import json\nprint(json.dumps({'type': 'ingest_result', 'memories': []}))\n";
    for (name, extra) in
        [("fs-on", ""), ("fs-off", "forkserver = false\n"), ("fs-worker", "persistent_subprocess = true\n")]
    {
        let dir = site.plugin_dir(name);
        std::fs::create_dir_all(dir.join("hooks")).unwrap();
        std::fs::write(dir.join("hooks/ingest.py"), hook).unwrap();
        std::fs::write(
            dir.join("plugin.toml"),
            format!("name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\n{extra}ingest = \"hooks/ingest.py\"\n"),
        )
        .unwrap();
    }
    let dir = site.plugin_dir("sh");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.sh"), "echo '{}'\n").unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        "name = \"sh\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"a.sh\"\n",
    )
    .unwrap();
    let doctor = |json: bool| {
        let mut cmd = crate::util::ctxhost();
        cmd.arg("--home").arg(site.home()).arg("doctor");
        if json {
            cmd.arg("--json");
        }
        String::from_utf8(cmd.assert().success().get_output().stdout.clone()).unwrap()
    };
    let by_name = |plugins: &Value| -> std::collections::BTreeMap<String, Value> {
        plugins
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p.get("forkserver").cloned().unwrap_or(Value::Null)))
            .collect()
    };
    let report: Value = serde_json::from_str(&doctor(true)).unwrap();
    let f = by_name(&report["plugins"]);
    assert_eq!(f["fs-on"], json!({"used": true}), "{report}");
    assert_eq!(f["fs-off"], json!({"used": false, "why_not": "`forkserver = false` in the plugin's [hooks]"}));
    assert_eq!(f["fs-worker"]["used"], false);
    assert!(f["fs-worker"]["why_not"].as_str().unwrap().contains("persistent worker"), "{}", f["fs-worker"]);
    assert_eq!(f["sh"], Value::Null, "a bash plugin has no fork server field");
    let text = doctor(false);
    let after = |name: &str| text.lines().skip_while(|l| !l.trim_start().starts_with(name)).nth(1).unwrap_or("").trim();
    assert_eq!(after("fs-on "), "its hooks run through a fork server", "{text}");
    assert!(text.contains("no fork server: `forkserver = false` in the plugin's [hooks]"), "{text}");

    // Off host-wide: every python one-shot says so, in the catalog too.
    std::fs::write(site.home().join("config.toml"), "[runner]\npython_forkserver = false\n").unwrap();
    let routes = site.routes();
    let listed = routes.get("/api/plugins").json();
    let f = by_name(if listed.is_array() { &listed } else { &listed["plugins"] });
    assert_eq!(
        f["fs-on"],
        json!({"used": false, "why_not": "`[runner] python_forkserver = false` in config.toml"}),
        "{listed}"
    );
    assert_eq!(f["sh"], Value::Null);
}

/// `max_memory_mb` through the fork server is per call, as for a spawned
/// hook: each call's child is moved into a cgroup of its own (not the
/// server's) before it runs the script; a call over the limit is stopped,
/// the next one runs on the same server.
#[test]
fn a_per_call_memory_limit_binds_through_the_fork_server() {
    if !ctxhost::runner::process::sandbox::features().limits().memory_limit.starts_with("cgroup") {
        eprintln!("no memory cgroup here: the limit is an rlimit, per process already");
        return;
    }
    let rt = rt();
    let script = "import json, os, sys\nsys.stdin.readline()\nmb = int(os.environ['LIBREFANG_MESSAGE'])\n\
cg = sorted(l for l in open('/proc/self/cgroup').read().splitlines() if ':memory:' in l or l.startswith('0::'))\n\
b = bytearray(mb * 1024 * 1024)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n\
print(json.dumps({'type': 'ingest_result', 'memories': [], 'cg': cg, 'built': len(b)}))\n";
    let p = python_plugin("capped", script, "");
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap();
    std::fs::write(p.dir.join("plugin.toml"), manifest.replacen("[hooks]", "max_memory_mb = 64\n[hooks]", 1)).unwrap();
    let (runner, metrics) = load_with(&p.dir, &p.home, &HostConfig::default());
    let small = call(&rt, &runner, HookName::Ingest, ingest("8")).unwrap();
    let server = runner.forkserver_pid().unwrap();
    let server_cg: Vec<String> = std::fs::read_to_string(format!("/proc/{server}/cgroup"))
        .unwrap()
        .lines()
        .filter(|l| l.contains(":memory:") || l.starts_with("0::"))
        .map(str::to_owned)
        .collect();
    let cg: Vec<String> = small["cg"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_owned()).collect();
    assert!(cg.iter().any(|l| l.contains("ctxhost-")), "the call runs in a cgroup of its own: {cg:?}");
    let own: Vec<&String> = cg.iter().filter(|l| l.contains("ctxhost-")).collect();
    assert!(own.iter().all(|l| !server_cg.contains(l)), "not the server's: {cg:?} vs {server_cg:?}");
    let second = call(&rt, &runner, HookName::Ingest, ingest("8")).unwrap();
    assert_ne!(second["cg"], small["cg"], "a fresh cgroup per call");
    let big = call(&rt, &runner, HookName::Ingest, ingest("300"));
    assert!(big.is_err(), "300 MB under a 64 MB limit: {big:?}");
    assert_eq!(call(&rt, &runner, HookName::Ingest, ingest("8")).unwrap()["built"], 8 * 1024 * 1024);
    assert_eq!(runner.forkserver_pid(), Some(server), "the server lives on");
    assert_eq!(fallbacks(&metrics, "capped"), 0, "every call went through the fork server");
}
