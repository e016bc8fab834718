//! The FaustBot shim's own test suite (`src/faust/shim/tests`, Python
//! unittest): a fake host drives the real worker over JSON-RPC — every hook
//! mapping, sync and async plugins, `ctx` with and without `await`, the
//! register reply, load failures, symbolic vfs — plus `deps.py`.
//!
//! Writes the shim as ctxhost does (`faust::shim::install`: the embedded
//! files, the JSON-RPC client of guest-examples/rpc-clients, the hook list
//! generated from `HookName`) into a fresh home, then runs `python3 -m
//! unittest discover -s src/faust/shim/tests -v` against it
//! (`CTXHOST_FAUST_SHIM`), failing with its whole output when it fails, runs
//! no test, or skips one.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::require_program;

const LIMIT: Duration = Duration::from_secs(300);

#[test]
fn python_suite_passes() {
    require_program("python3", "python3");
    let root = env!("CARGO_MANIFEST_DIR");
    let home = tempfile::tempdir().expect("temp dir");
    let shim = ctxhost::faust::shim::install(&ctxhost::home::Home::at(home.path())).expect("the shim is written");
    let mut child = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "src/faust/shim/tests", "-v"])
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CTXHOST_FAUST_SHIM", &shim)
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for python3") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the shim's python suite ran longer than {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    assert!(status.success(), "the shim's python suite failed ({status}):\n{output}");
    let ran = output
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ").and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse::<u32>().ok())
        })
        .unwrap_or(0);
    assert!(ran >= 50, "expected the whole suite (50+ tests), ran {ran}:\n{output}");
    assert!(!output.contains("skipped"), "no test may be skipped:\n{output}");
}
