//! Time and output limits, and that nothing a hook started outlives its call.

use std::time::{Duration, Instant};

use crate::util::{TestPlugin, is_dead, reply, stderr};

fn pids(p: &TestPlugin, names: &[&str]) -> Vec<i32> {
    names
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(p.dir.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            text.trim().parse().unwrap()
        })
        .collect()
}

/// SIGKILL is delivered at once, but the kernel may take a moment to tear a
/// process down: true when `pid` is gone within 2 s.
fn dies_soon(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !is_dead(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    is_dead(pid)
}

#[test]
fn timeout_kills_the_hook_and_its_grandchildren() {
    let p = TestPlugin::bash(
        "ingest",
        "(sleep 300 & echo $! > grandchild.pid; wait) &\necho $! > child.pid\necho $$ > hook.pid\nsleep 300\n",
        "hook_timeout_secs = 1",
    );
    let started = Instant::now();
    let a = p.hook("ingest", "{}").failure().code(1);
    let elapsed = started.elapsed();
    assert!(stderr(&a).contains("error: Hook timed out after 1s"), "{}", stderr(&a));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    for pid in pids(&p, &["hook.pid", "child.pid", "grandchild.pid"]) {
        assert!(dies_soon(pid), "process {pid} survived the timeout");
    }
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

#[test]
fn a_background_grandchild_holding_stdout_does_not_delay_the_reply() {
    let p = TestPlugin::bash("ingest", "sleep 30 &\necho $! > bg.pid\necho '{\"ok\":1}'\n", "hook_timeout_secs = 20");
    let started = Instant::now();
    let a = p.hook("ingest", "{}").success();
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert_eq!(reply(&a), serde_json::json!({"ok": 1}));
    let bg = pids(&p, &["bg.pid"])[0];
    assert!(dies_soon(bg), "the leftover background process {bg} was not cleaned up");
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

#[test]
fn sigterm_to_ctxhost_kills_the_running_hook() {
    let p = TestPlugin::bash(
        "ingest",
        "sleep 300 &\necho $! > bg.pid\necho $$ > hook.pid\nwait\n",
        "hook_timeout_secs = 60",
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.dir.join("hook.pid").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: signalling a child process we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: interrupted by SIGTERM; the hook and everything it started were killed"), "{err}");
    for pid in pids(&p, &["hook.pid", "bg.pid"]) {
        assert!(dies_soon(pid), "process {pid} outlived ctxhost");
    }
}
