//! Time and output limits, and that nothing a hook started outlives its call.
//!
//! A hook is pid 1 of its own pid namespace, so the processes a test follows
//! carry a [`Marker`] in their argv and are looked up in the host's `/proc`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::procs::Marker;
use crate::util::{TestPlugin, reply, stderr};

/// `ctxhost hook <dir> <hook>` as a child, so the test can look at the
/// hook's processes while the call runs.
fn spawn_hook(p: &TestPlugin, hook: &str) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), hook])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Bash: waits (bounded) until process `$1` runs a command line containing
/// `$2` (it exec'd), as the hook's own `/proc` shows it.
const WAIT_EXEC: &str = "wait_exec() { for _ in $(seq 1 300); do case \"$(tr '\\0' ' ' < /proc/$1/cmdline 2>/dev/null)\" in *\"$2\"*) return 0;; esac; sleep 0.01; done; return 1; }\n";

/// The hook (which becomes a marked sleep), its child (a bash whose script
/// names the marker) and its grandchild (a marked sleep) all run when the
/// timeout fires, and none of them is left afterwards.
#[test]
fn timeout_kills_the_hook_and_its_grandchildren() {
    let m = Marker::new();
    let sleep = m.sleep(300);
    let p = TestPlugin::bash("ingest", &format!("bash -c '{sleep} & wait' &\nexec {sleep}\n"), "hook_timeout_secs = 1");
    let started = Instant::now();
    let child = spawn_hook(&p, "ingest");
    let running = m.running(3, Duration::from_secs(5));
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    assert!(running, "the hook, its child and its grandchild ran: {:?}", m.pids());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error: Hook timed out after 1s"), "{err}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert!(m.gone_soon(), "processes survived the timeout: {:?}", m.pids());
}

#[test]
fn bootstrap_gets_twice_the_timeout() {
    let body = "sleep 1.5\necho '{\"type\":\"ok\"}'\n";
    let manifest = "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\nhook_timeout_secs = 1\n\
                    bootstrap = \"hooks/slow.sh\"\ningest = \"hooks/slow.sh\"\n";
    let p = TestPlugin::new("t", &[("plugin.toml", manifest), ("hooks/slow.sh", body)]);
    assert_eq!(reply(&p.hook("bootstrap", "{}").success()), serde_json::json!({"type": "ok"}));
    let err = stderr(&p.hook("ingest", "{}").failure());
    assert!(err.contains("error: Hook timed out after 1s"), "{err}");
}

#[test]
fn a_bootstrap_timeout_reports_the_doubled_limit() {
    let manifest = "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\nhook_timeout_secs = 1\n\
                    bootstrap = \"hooks/slow.sh\"\n";
    let p = TestPlugin::new("t", &[("plugin.toml", manifest), ("hooks/slow.sh", "sleep 30\n")]);
    let started = Instant::now();
    let err = stderr(&p.hook("bootstrap", "{}").failure());
    assert!(err.contains("error: Hook timed out after 2s"), "{err}");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(4), "took {took:?}");
}

#[test]
fn timeout_flag_overrides_the_manifest() {
    let p = TestPlugin::bash("ingest", "sleep 1.5\necho '{}'\n", "hook_timeout_secs = 1");
    let a = p.cmd().args(["hook", p.dir.to_str().unwrap(), "ingest", "--timeout-secs", "3"]).write_stdin("{}").assert();
    a.success();
}

#[test]
fn output_over_the_cap_fails_well_under_the_timeout() {
    // 2 MiB on stdout, then a long sleep: the cap must end the call, not the timeout.
    let p = TestPlugin::bash("ingest", "head -c 2097152 /dev/zero | tr '\\0' x\nsleep 60\n", "hook_timeout_secs = 30");
    let started = Instant::now();
    let err = stderr(&p.hook("ingest", "{}").failure());
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(err.contains("error: Hook stdout exceeded the 1024 KiB output cap; the hook was killed"), "{err}");

    let p =
        TestPlugin::bash("ingest", "head -c 2097152 /dev/zero | tr '\\0' e >&2\nsleep 60\n", "hook_timeout_secs = 30");
    let started = Instant::now();
    let err = stderr(&p.hook("ingest", "{}").failure());
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(err.contains("error: Hook stderr exceeded the 1024 KiB output cap"), "{err}");
}

/// The hook replies only once its background sleep (holding stdout) runs
/// (`ok` says it saw it); the reply is not held up, and the sleep is gone.
#[test]
fn a_background_grandchild_holding_stdout_does_not_delay_the_reply() {
    let m = Marker::new();
    let body = format!(
        "{WAIT_EXEC}{} &\nif wait_exec $! {}; then echo '{{\"ok\":1}}'; else echo '{{\"ok\":0}}'; fi\n",
        m.sleep(30),
        m.arg(30)
    );
    let p = TestPlugin::bash("ingest", &body, "hook_timeout_secs = 20");
    let started = Instant::now();
    let a = p.hook("ingest", "{}").success();
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert_eq!(reply(&a), serde_json::json!({"ok": 1}));
    assert!(m.gone_soon(), "the leftover background process was not cleaned up: {:?}", m.pids());
}

#[test]
fn the_tmpdir_is_removed_after_a_timeout_and_when_the_hook_locked_parts_of_it() {
    let p = TestPlugin::bash(
        "ingest",
        "mkdir \"$TMPDIR/ro\" && touch \"$TMPDIR/ro/f\" && chmod 500 \"$TMPDIR/ro\"\necho \"$TMPDIR\" > tmp.path\nsleep 30\n",
        "hook_timeout_secs = 1",
    );
    p.hook("ingest", "{}").failure();
    let tmp = std::fs::read_to_string(p.dir.join("tmp.path")).unwrap();
    assert!(!std::path::Path::new(tmp.trim()).exists(), "{} still exists", tmp.trim());
}

#[test]
fn the_per_call_tmpdir_is_removed_afterwards() {
    let p = TestPlugin::bash("ingest", "echo data > \"$TMPDIR/scratch\"\necho \"{\\\"tmp\\\":\\\"$TMPDIR\\\"}\"\n", "");
    let r = reply(&p.hook("ingest", "{}").success());
    let tmp = std::path::PathBuf::from(r["tmp"].as_str().unwrap());
    assert!(tmp.file_name().unwrap().to_string_lossy().starts_with("ctxhost-t-"));
    assert!(!tmp.exists(), "{} still exists", tmp.display());
}

#[test]
fn a_leftover_flooding_stdout_cannot_hang_the_call() {
    // `setsid` takes the writer out of the hook's process group, so only the
    // output cap and the bounded drain can stop it from holding the call.
    let p = TestPlugin::bash("ingest", "setsid yes flood &\necho '{\"ok\":1}'\n", "hook_timeout_secs = 20");
    let started = Instant::now();
    let a = p.hook("ingest", "{}");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    let out = a.get_output();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("exceeded the 1024 KiB output cap"), "{err}");
    }
}

/// SIGTERM to ctxhost while the hook (a marked sleep, after `exec`) and
/// its background child (another) run: both are gone afterwards.
#[test]
fn sigterm_to_ctxhost_kills_the_running_hook() {
    let m = Marker::new();
    let sleep = m.sleep(300);
    let p = TestPlugin::bash("ingest", &format!("{sleep} &\nexec {sleep}\n"), "hook_timeout_secs = 60");
    let child = spawn_hook(&p, "ingest");
    assert!(m.running(2, Duration::from_secs(10)), "the hook and its child run: {:?}", m.pids());
    // SAFETY: signalling a child process we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: interrupted by SIGTERM; the hook and everything it started were killed"), "{err}");
    assert!(m.gone_soon(), "processes outlived ctxhost: {:?}", m.pids());
}

/// The hook temp dirs (`ctxhost-<plugin>-…`) in `tmp`.
fn hook_tmpdirs(tmp: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ctxhost-"))
        .collect();
    names.sort();
    names
}

/// Every way a call can end — a reply, a failure, a timeout, a hook killed,
/// a worker, a call cut by `ctxhost hook`'s SIGTERM, a daemon's shutdown, a
/// call in flight when the sidecar shuts down — leaves no hook temp dir in
/// the TMPDIR ctxhost was given. (Those cut short by a shutdown were left
/// before: their removal was queued on a runtime that was going away.)
#[test]
fn no_hook_temp_dir_is_left_on_any_path() {
    let root = tempfile::tempdir().unwrap();
    let (home, tmp) = (root.path().join("home"), root.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let plugin = |name: &str, extra: &str, body: &str| {
        let dir = home.join("plugins").join(name);
        crate::util::write(
            &dir.join("plugin.toml"),
            &format!(
                "name = \"{name}\"\nversion = \"1\"\n{extra}\n[hooks]\nruntime = \"bash\"\ningest = \"hook.sh\"\n"
            ),
        );
        crate::util::write(&dir.join("hook.sh"), &format!("echo x > \"$TMPDIR/scratch\"\n{body}"));
        dir
    };
    plugin("ok", "", "echo '{\"memories\":[]}'\n");
    plugin("fails", "", "exit 3\n");
    plugin("slow", "hook_timeout_secs = 1", "sleep 30\n");
    plugin("killed", "", "kill -9 $$\n");
    plugin("worker", "persistent_subprocess = true", "while read -r l; do echo '{\"memories\":[]}'; done\n");
    let hang = plugin("hang", "hook_timeout_secs = 60", "touch \"$TMPDIR/started\"\nsleep 60\n");
    let started = || hook_tmpdirs(&tmp).iter().any(|d| tmp.join(d).join("started").exists());

    // `ctxhost hook` stopped by SIGTERM while its hook runs.
    let child = Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env("TMPDIR", &tmp)
        .arg("--home")
        .arg(&home)
        .args(["hook", hang.to_str().unwrap(), "ingest"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::util::within(20, "the hook started", started);
    // SAFETY: signalling a child process we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hook_tmpdirs(&tmp), Vec::<String>::new(), "after `ctxhost hook` was interrupted");

    // The daemon: each way a call ends, then its shutdown.
    let d = crate::util::http::Daemon::start(&home, &[], &[("TMPDIR", tmp.to_str().unwrap())]);
    for (plugin, status) in [("ok", 200), ("fails", 400), ("slow", 400), ("killed", 400), ("worker", 200)] {
        let body = serde_json::json!({"hook": "ingest", "input": {"agent_id": "a", "message": "m"}});
        let r = d.post(&format!("/api/plugins/{plugin}/test-hook"), &body.to_string());
        assert_eq!(r.status, status, "{plugin}: {}", r.body);
    }
    // Only the worker's own, while it lives.
    let left = hook_tmpdirs(&tmp);
    assert!(left.len() == 1 && left[0].starts_with("ctxhost-worker-worker-"), "{left:?}");
    assert!(tmp.join(&left[0]).join("scratch").exists(), "the worker used its TMPDIR");
    let (stopped, err) = d.stop();
    assert!(stopped, "{err}");
    assert_eq!(hook_tmpdirs(&tmp), Vec::<String>::new(), "after the daemon shut down");

    // A call in flight when the sidecar shuts down: its after_turn outlives
    // the settle timeout, and is dropped with the runtime.
    let hang_manifest = std::fs::read_to_string(hang.join("plugin.toml")).unwrap();
    crate::util::write(&hang.join("plugin.toml"), &hang_manifest.replace("ingest = ", "after_turn = "));
    crate::util::write(&home.join("config.toml"), "[context_engine]\nplugin_stack = [\"hang\"]\n");
    let mut sidecar = Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env("TMPDIR", &tmp)
        .arg("--home")
        .arg(&home)
        .args(["sidecar", "--settle-timeout-secs", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = sidecar.stdin.take().unwrap();
    let turn = serde_json::json!({"id": 1, "method": "after_turn", "params": {"agent_id": "a", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}});
    std::io::Write::write_all(&mut stdin, format!("{turn}\n").as_bytes()).unwrap();
    crate::util::within(20, "the sidecar's after_turn hook started", started);
    drop(stdin);
    let out = sidecar.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hook_tmpdirs(&tmp), Vec::<String>::new(), "after the sidecar shut down with a call in flight");
}
