//! The reading rules and exit handling of spec section 5, through real processes.

use crate::util::{TestPlugin, reply, stderr};

fn bash_reply(body: &str) -> serde_json::Value {
    let p = TestPlugin::bash("ingest", body, "");
    reply(&p.hook("ingest", "{}").success())
}

#[test]
fn log_lines_before_the_json() {
    assert_eq!(
        bash_reply("echo starting\necho '[x] loaded'\necho '{\"memories\":[]}'\n"),
        serde_json::json!({"memories": []})
    );
}

#[test]
fn several_json_lines_last_wins() {
    assert_eq!(bash_reply("echo '{\"n\":1}'\necho '{\"n\":2}'\necho\n"), serde_json::json!({"n": 2}));
}

#[test]
fn non_json_becomes_text() {
    assert_eq!(bash_reply("echo hello\necho world\n"), serde_json::json!({"text": "hello\nworld"}));
}

#[test]
fn blank_output_is_an_error() {
    let p = TestPlugin::bash("ingest", "echo\necho '   '\n", "");
    let a = p.hook("ingest", "{}").failure().code(1);
    assert_eq!(stderr(&a).lines().last(), Some("error: Hook produced no output"));
}

#[test]
fn non_utf8_bytes_are_tolerated() {
    let r = bash_reply("printf '\\377\\376 log\\n'\nprintf '{\"v\":\"caf\\303\\251\"}\\n'\n");
    assert_eq!(r, serde_json::json!({"v": "café"}));
    let r = bash_reply("printf 'bad \\377 byte\\n'\n");
    assert_eq!(r, serde_json::json!({"text": "bad \u{fffd} byte"}));
}

#[test]
fn a_900_kib_single_line_reply() {
    let r = bash_reply("printf '{\"content\":\"'\nhead -c 921600 /dev/zero | tr '\\0' x\nprintf '\"}\\n'\n");
    assert_eq!(r["content"].as_str().map(str::len), Some(900 * 1024));
}

#[test]
fn a_hook_that_never_reads_stdin_still_succeeds() {
    // A request far larger than a pipe buffer, to a hook that exits at once:
    // writing it hits EPIPE, which must not count as a failure.
    let p = TestPlugin::bash("ingest", "echo '{\"ok\":true}'\n", "");
    let big = format!("{{\"message\":\"{}\"}}", "m".repeat(4 * 1024 * 1024));
    let a = p.hook("ingest", &big).success();
    assert_eq!(reply(&a), serde_json::json!({"ok": true}));
}

#[test]
fn the_request_arrives_as_one_line_and_stdin_is_closed() {
    // `cat` only ends when stdin is closed after the request.
    let p = TestPlugin::bash("ingest", "line=$(cat)\necho \"$line\"\n", "");
    let a = p.hook("ingest", r#"{"agent_id":"a1","message":"hi","extra":{"k":[1,2]}}"#).success();
    assert_eq!(
        reply(&a),
        serde_json::json!({"type":"ingest","agent_id":"a1","message":"hi","peer_id":null,"extra":{"k":[1,2]}})
    );
    let raw = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(raw.starts_with(r#"{"type":"ingest","agent_id":"a1","message":"hi","peer_id":null"#), "{raw}");
}

#[test]
fn non_zero_exit_is_labelled_with_its_stderr() {
    let p = TestPlugin::bash("ingest", "echo 'partial {' \necho 'boom: bad input' >&2\nexit 3\n", "");
    let a = p.hook("ingest", "{}").failure().code(1);
    let err = stderr(&a);
    assert!(err.contains("error: Hook exited with exit code 3\nstderr: boom: bad input"), "{err}");
}

/// A hook that dies of a signal is labelled with it. The hook is pid 1 of
/// its pid namespace, which ignores signals it sends itself, so the deaths
/// are real ones: a stack overflow (the kernel's SIGSEGV), and a SIGKILL
/// from outside (the host, as the OOM killer would) at the hook found by
/// the marker it runs as.
#[test]
fn signal_deaths_are_labelled() {
    let p = TestPlugin::bash(
        "ingest",
        "ulimit -s 256
f() { f; }
f
",
        "",
    );
    let err = stderr(&p.hook("ingest", "{}").failure());
    assert!(err.contains("error: Hook exited with SIGSEGV — segfault (signal 11) (stderr was empty)"), "{err}");

    let m = crate::util::procs::Marker::new();
    let p = TestPlugin::bash("ingest", &format!("exec {}\n", m.sleep(30)), "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let running = m.running(1, std::time::Duration::from_secs(10));
    m.kill_all();
    if !running {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(running, "the hook ran as the marked sleep");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: Hook exited with OOM-killed or SIGKILL (signal 9)"), "{err}");
}

#[test]
fn stderr_lines_are_streamed_to_the_log() {
    let p = TestPlugin::bash("ingest", "echo 'first note' >&2\necho 'second note' >&2\necho '{}'\n", "");
    let err = stderr(&p.hook("ingest", "{}").success());
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("plugin_stderr")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("first note") && lines[0].contains("plugin=\"t\"") && lines[0].contains("hook=ingest"));
}

#[test]
fn stderr_lines_arrive_while_the_hook_still_runs() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let p = TestPlugin::bash("ingest", "echo 'early note' >&2\nsleep 3\necho '{}'\n", "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let seen_after = started.elapsed();
    assert!(line.contains("plugin_stderr") && line.contains("early note"), "{line}");
    assert!(seen_after < Duration::from_millis(2500), "the line came only after {seen_after:?} (the hook sleeps 3 s)");
    assert!(child.wait().unwrap().success());
}
