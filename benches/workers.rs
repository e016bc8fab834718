//! Persistent workers against one-shot calls and against a bare loop.
//!
//! Run: `cargo bench --bench workers`. Not a criterion bench: paired,
//! alternating samples (`support::paired`), side by side in one run:
//! - per runtime (python, node, native): a one-shot call, a persistent-worker
//!   call through `ProcessRunner`, and the yardstick — a bare Rust loop that
//!   starts the same worker script itself and writes request lines to it and
//!   reads reply lines, its stderr drained by a thread as any host must (goal: persistent within 1.3x of the bare loop);
//! - over the daemon's agent API (an in-process `Server`): 100 sequential
//!   ingest calls to the python worker example with `persistent_subprocess`
//!   on and off (goal: at least 20x faster on);
//! - `worker_protocol = "jsonrpc"` (python): a `tool_call_pre` call to the
//!   guard-python example — with and without its `config.get` round trip —
//!   against the same check in a `line` worker (no goal: what the protocol
//!   and a service round trip cost).
//!
//! The whole bench runs pinned to CPU 0 (see `pin_to_one_cpu`).
//!
//! The native worker is a tiny Rust program compiled here with `rustc`
//! (guest-examples/native-memory answers one line and exits).

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use ctxhost::config::HostConfig;
use ctxhost::home::Home;
use ctxhost::plugin::{LoadContext, load_script_plugin};
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::process::ProcessRunner;
use ctxhost::runner::{CallOptions, Runner};
use ctxhost::server::{ServeOptions, Server};

const REQUEST: &str = r#"{"type":"ingest","agent_id":"bench","message":"what grows in my garden?","peer_id":null}"#;

/// A worker that answers every line with an empty recall.
const NATIVE_WORKER: &str = r#"
use std::io::{BufRead, Write};
fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() { continue; }
        let _ = out.write_all(b"{\"type\":\"ingest_result\",\"memories\":[]}\n");
        let _ = out.flush();
    }
}
"#;

struct Case {
    label: &'static str,
    /// The plugin dir (worker example, persistent on).
    dir: PathBuf,
    /// The worker script and how the bare loop starts it.
    program: PathBuf,
    args: Vec<PathBuf>,
    oneshot_pairs: usize,
}

fn main() {
    pin_to_one_cpu();
    let root = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    for (label, example, program, pairs) in
        [("python", "python-worker", "python3", 30), ("node", "node-worker", "node", 20)]
    {
        let Some(program) = ctxhost::runner::process::find_on_path(program, std::env::var_os("PATH").as_deref()) else {
            println!("{label}: `{program}` is not installed; skipped");
            continue;
        };
        let dir = root.path().join(example);
        examples::copy_example(example, &dir);
        let script = std::fs::read_dir(dir.join("hooks")).unwrap().flatten().next().unwrap().path();
        cases.push(Case {
            label,
            dir: dir.clone(),
            program: program.clone(),
            args: vec![script.clone()],
            oneshot_pairs: pairs,
        });
        if label == "python" {
            // The same without the sandbox (spec section 6), to tell its cost from the worker's.
            let open = root.path().join("python-open").join(example);
            copy_tree(&dir, &open);
            let manifest = open.join("plugin.toml");
            let text = std::fs::read_to_string(&manifest).unwrap();
            let opened = "persistent_subprocess = true\nallow_filesystem = true\nallow_network = true";
            std::fs::write(&manifest, text.replace("persistent_subprocess = true", opened)).unwrap();
            let script = open.join(script.strip_prefix(&dir).unwrap());
            cases.push(Case { label: "python*", dir: open, program, args: vec![script], oneshot_pairs: pairs });
        }
    }
    cases.push(native_case(root.path()));

    println!("per call, medians of paired samples (ms):");
    println!(
        "{:<8} {:>10} {:>12} {:>10} {:>16} {:>14}",
        "runtime", "one-shot", "persistent", "bare loop", "persistent/bare", "one-shot/pers."
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for case in &cases {
        measure(&rt, root.path(), case);
    }
    println!("(python*: the same plugin with allow_filesystem and allow_network, i.e. without the sandbox)");
    jsonrpc_comparison(&rt, root.path());
    drop(rt);
    daemon_comparison(root.path());
}

/// The guard's `tool_call_pre` check as a `line` worker (pattern fixed).
const LINE_GUARD: &str = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    command = (req.get("args") or {}).get("command")
    if req.get("name") == "shell_exec" and isinstance(command, str) and "rm -rf" in command:
        reply = {"action": "block", "reason": "guard: refusing a command containing `rm -rf`"}
    else:
        reply = {"action": "pass"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"#;

/// guard-python (jsonrpc, services attached) against the same check in a
/// `line` worker.
fn jsonrpc_comparison(rt: &tokio::runtime::Runtime, root: &Path) {
    if ctxhost::runner::process::find_on_path("python3", std::env::var_os("PATH").as_deref()).is_none() {
        println!("jsonrpc: python3 is not installed; skipped");
        return;
    }
    let home = Home::at(root.join("home-jsonrpc"));
    let rpc_dir = home.plugins_dir().join("guard-python");
    examples::copy_example("guard-python", &rpc_dir);
    let line_dir = home.plugins_dir().join("guard-line");
    std::fs::create_dir_all(line_dir.join("hooks")).unwrap();
    std::fs::write(line_dir.join("hooks/guard.py"), LINE_GUARD).unwrap();
    std::fs::write(
        line_dir.join("plugin.toml"),
        "name = \"guard-line\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\n\
         persistent_subprocess = true\ntool_call_pre = \"hooks/guard.py\"\n",
    )
    .unwrap();
    let config = HostConfig::default();
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    let shared = ctxhost::host::services::SharedServices::open(&home).unwrap();
    let load_any = |dir: &Path| {
        let plugin = ctxhost::plugin::load_plugin(dir, &cx).unwrap_or_else(|e| panic!("load {}: {e}", dir.display()));
        ctxhost::plugin::attach_services(&plugin, &shared, &home).unwrap();
        plugin.runner
    };
    let (rpc, line) = (load_any(&rpc_dir), load_any(&line_dir));
    let request = |tool: &str| {
        let body = serde_json::json!({"name": tool, "args": {"command": "ls -la"}, "agent_id": "bench"});
        HookRequest::from_json(HookName::ToolCallPre, body).unwrap()
    };
    let (shell, other) = (request("shell_exec"), request("file_read"));
    let options = CallOptions::default();
    let call = |runner: &dyn Runner, request: &HookRequest| {
        let reply = rt.block_on(runner.call(request, &options)).unwrap();
        assert_eq!(reply["action"], "pass", "{reply}");
    };
    let (line_ms, rpc_ms, _, ratio) = support::paired(1000, || call(&*line, &shell), || call(&*rpc, &other));
    let (_, rpc_get_ms, _, get_ratio) = support::paired(1000, || call(&*line, &shell), || call(&*rpc, &shell));
    println!(
        "jsonrpc (python guard, tool_call_pre): line worker {line_ms:.4} ms; jsonrpc {rpc_ms:.4} ms ({ratio:.2}x); \
         jsonrpc + one config.get round trip {rpc_get_ms:.4} ms ({get_ratio:.2}x)"
    );
}

/// Compiles the native worker into a plugin dir.
fn native_case(root: &Path) -> Case {
    let dir = root.join("native-worker");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let source = root.join("worker.rs");
    std::fs::write(&source, NATIVE_WORKER).unwrap();
    let bin = dir.join("bin/worker");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args(["--edition", "2021", "-O", "-o"])
        .arg(&bin)
        .arg(&source)
        .status()
        .expect("run rustc for the native worker");
    assert!(status.success(), "compiling the native worker failed");
    std::fs::write(
        dir.join("plugin.toml"),
        "name = \"native-worker\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"native\"\n\
         persistent_subprocess = true\ningest = \"bin/worker\"\n",
    )
    .unwrap();
    Case { label: "native", dir, program: bin, args: Vec::new(), oneshot_pairs: 200 }
}

fn load(dir: &Path, home: &Path) -> ProcessRunner {
    let home = Home::at(home);
    let config = HostConfig::default();
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    load_script_plugin(dir, &cx).unwrap_or_else(|e| panic!("load {}: {e}", dir.display())).0
}

/// A copy of the plugin with `persistent_subprocess` off.
fn one_shot_copy(case: &Case, root: &Path) -> PathBuf {
    let dir = root.join(format!("{}-oneshot", case.label)).join(case.dir.file_name().unwrap());
    copy_tree(&case.dir, &dir);
    let manifest = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("persistent_subprocess = true", "persistent_subprocess = false")).unwrap();
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The yardstick: the worker script started directly, one line each way,
/// its stderr read by a thread.
struct Bare {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Bare {
    fn start(case: &Case) -> Bare {
        let mut child = Command::new(&case.program)
            .args(&case.args)
            .env_clear()
            .envs(["PATH", "HOME"].iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v))))
            .current_dir(&case.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Read, as any host must (spec section 7: ctxhost streams it to
            // `plugin_stderr`); the example logs a line per request.
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                if line.is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Bare { child, stdin, stdout, line: String::new() }
    }

    fn call(&mut self) {
        self.stdin.write_all(REQUEST.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        self.line.clear();
        self.stdout.read_line(&mut self.line).unwrap();
        assert!(self.line.contains("ingest_result"), "{}", self.line);
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn measure(rt: &tokio::runtime::Runtime, root: &Path, case: &Case) {
    let home = root.join(format!("home-{}", case.label));
    let request = HookRequest::from_json(HookName::Ingest, serde_json::from_str(REQUEST).unwrap()).unwrap();
    let options = CallOptions::default();
    let persistent = load(&case.dir, &home);
    let oneshot = load(&one_shot_copy(case, root), &home);
    let call = |runner: &ProcessRunner| {
        let reply = rt.block_on(runner.call(&request, &options)).unwrap();
        assert_eq!(reply["type"], "ingest_result", "{reply}");
    };
    let mut bare = Bare::start(case);
    let (bare_ms, pers_ms, _, ratio) = support::paired(2000, || bare.call(), || call(&persistent));
    let (_, one_ms, _, _) = support::paired(case.oneshot_pairs, || call(&persistent), || call(&oneshot));
    println!(
        "{:<8} {:>10.3} {:>12.4} {:>10.4} {:>15.2}x {:>13.0}x   goal persistent <= 1.3x bare: {}",
        case.label,
        one_ms,
        pers_ms,
        bare_ms,
        ratio,
        one_ms / pers_ms,
        if ratio <= 1.3 { "met" } else { "MISSED" }
    );
}

/// 100 sequential agent-API ingests against an in-process daemon, with the
/// python worker example persistent and one-shot.
fn daemon_comparison(root: &Path) {
    if ctxhost::runner::process::find_on_path("python3", std::env::var_os("PATH").as_deref()).is_none() {
        println!("daemon: python3 is not installed; skipped");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut totals = Vec::new();
    for persistent in [true, false] {
        let home = Home::at(root.join(format!("daemon-{persistent}")));
        let dir = home.plugins_dir().join("python-worker");
        examples::copy_example("python-worker", &dir);
        if !persistent {
            let manifest = dir.join("plugin.toml");
            let text = std::fs::read_to_string(&manifest).unwrap();
            std::fs::write(&manifest, text.replace("persistent_subprocess = true", "persistent_subprocess = false"))
                .unwrap();
        }
        std::fs::write(home.config_file(), "[context_engine]\nplugin_stack = [\"python-worker\"]\n").unwrap();
        let (config, _) = HostConfig::load(home.config_file()).unwrap();
        let total = rt.block_on(async {
            let options = ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, watch: false };
            let server = Server::bind(home.clone(), config, options).await.unwrap();
            let addr = server.local_addr().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let served = tokio::spawn(server.run(async move {
                let _ = rx.await;
            }));
            let body = r#"{"message":"what grows in my garden?"}"#;
            // Warm up (the worker starts on the first call).
            for _ in 0..3 {
                assert_eq!(support::http_post(addr, "/api/agents/bench/ingest", body).await.0, 200);
            }
            let start = Instant::now();
            for _ in 0..100 {
                let (status, reply) = support::http_post(addr, "/api/agents/bench/ingest", body).await;
                assert_eq!(status, 200, "{reply}");
            }
            let total = start.elapsed();
            let _ = tx.send(());
            let _ = served.await;
            total
        });
        totals.push(total);
    }
    let (on, off) = (totals[0], totals[1]);
    let speedup = off.as_secs_f64() / on.as_secs_f64();
    println!(
        "daemon agent API, 100 sequential ingests to python: persistent {:.1} ms ({:.3} ms/call), \
         one-shot {:.1} ms ({:.2} ms/call): {speedup:.0}x   goal >= 20x: {}",
        ms(on),
        ms(on) / 100.0,
        ms(off),
        ms(off) / 100.0,
        if speedup >= 20.0 { "met" } else { "MISSED" }
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs the bench, and every process it starts (workers, the yardstick's
/// script), on CPU 0. A worker call is a ping-pong between two processes:
/// unpinned, where the scheduler wakes each side (same CPU or the other)
/// decides more than the code does — the same run measured the
/// persistent/bare ratio anywhere from 0.9x to 2.7x on this 2-core VM. On
/// one CPU both sides pay the same switches and the difference left is the
/// host's own work. `WORKERS_BENCH_UNPINNED=1` measures unpinned.
fn pin_to_one_cpu() {
    if std::env::var_os("WORKERS_BENCH_UNPINNED").is_some() {
        println!("unpinned (WORKERS_BENCH_UNPINNED)");
        return;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes bit 0 of
    // it; sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    println!("{}", if ok { "pinned to CPU 0 (both sides)" } else { "could not pin to one CPU; unpinned" });
}
