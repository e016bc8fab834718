//! Shared helpers: throwaway plugins, a ctxhost command with its own home,
//! and the guest examples (copied, and built once per test run when native).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

pub mod examples;
pub mod http;
pub mod nobody;
pub mod pg;
pub mod procs;
pub mod routes;
pub mod site;

pub use examples::repo_root;

/// A plugin written into a fresh temporary plugins dir.
pub struct TestPlugin {
    pub root: TempDir,
    pub dir: PathBuf,
    pub home: PathBuf,
}

impl TestPlugin {
    /// `files` are (relative path, content); `plugin.toml` among them.
    pub fn new(name: &str, files: &[(&str, &str)]) -> TestPlugin {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("plugins").join(name);
        for (rel, content) in files {
            write(&dir.join(rel), content);
        }
        let home = root.path().join("home");
        TestPlugin { root, dir, home }
    }

    /// A bash plugin whose `hook` script is `body`.
    pub fn bash(hook: &str, body: &str, extra_manifest: &str) -> TestPlugin {
        let manifest = format!(
            "name = \"t\"\nversion = \"0.1.0\"\n{extra_manifest}\n[hooks]\nruntime = \"bash\"\n{hook} = \"hooks/{hook}.sh\"\n"
        );
        TestPlugin::new("t", &[("plugin.toml", &manifest), (&format!("hooks/{hook}.sh"), body)])
    }

    /// `ctxhost --home <home> hook <dir> <hook>` with `input` on stdin.
    pub fn hook(&self, hook: &str, input: &str) -> assert_cmd::assert::Assert {
        self.cmd().args(["hook", self.dir.to_str().unwrap(), hook]).write_stdin(input).assert()
    }

    pub fn cmd(&self) -> assert_cmd::Command {
        let mut cmd = ctxhost();
        cmd.arg("--home").arg(&self.home);
        cmd
    }
}

/// The script plugin in `dir` loaded as the engine loads it, with `home`
/// as ctxhost's home and `config` as its config.toml.
pub fn load_script(
    dir: &Path,
    home: &Path,
    config: &ctxhost::config::HostConfig,
) -> ctxhost::runner::process::ProcessRunner {
    let home = ctxhost::home::Home::at(home);
    let cx = ctxhost::plugin::LoadContext { home: &home, config, host_env: &ctxhost::plugin::LoadContext::process_env };
    ctxhost::plugin::load_script_plugin(dir, &cx).unwrap_or_else(|e| panic!("load {}: {e}", dir.display())).0
}

pub fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// The ctxhost binary with a clean log setup.
pub fn ctxhost() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("ctxhost").expect("ctxhost binary");
    cmd.env_remove("RUST_LOG").env_remove("CTXHOST_HOME").env_remove("CTXHOST_PLUGINS_DIR");
    cmd
}

/// Parses the single JSON line a successful `ctxhost hook` prints.
pub fn reply(assert: &assert_cmd::assert::Assert) -> Value {
    let out = &assert.get_output().stdout;
    let text = String::from_utf8_lossy(out);
    assert_eq!(text.lines().count(), 1, "expected one JSON line, got: {text}");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {text}"))
}

pub fn stderr(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stderr).into_owned()
}

/// Fails with an install hint when a runtime the tests need is missing.
pub fn require_program(program: &str, package: &str) {
    let path = std::env::var_os("PATH");
    if ctxhost::runner::process::find_on_path(program, path.as_deref()).is_none() {
        panic!(
            "`{program}` is not installed, and this test runs it for real. \
             Run `scripts/test.sh` (it installs what is missing) or `apt-get install -y {package}`."
        );
    }
}

/// Copies a guest example into a fresh plugins dir (state files stay there).
pub fn example(name: &str) -> TestPlugin {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("plugins").join(name);
    examples::copy_example(name, &dir);
    let home = root.path().join("home");
    TestPlugin { root, dir, home }
}

/// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
pub fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Copies the LibreFang-style fixture plugin `name` (tests/fixtures/librefang)
/// into `plugins_dir`.
pub fn librefang_fixture(name: &str, plugins_dir: &Path) {
    copy_tree(&repo_root().join("tests/fixtures/librefang").join(name), &plugins_dir.join(name));
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Writes `<package>-0.1-py3-none-any.whl` into `dir` by hand (a wheel is a
/// zip: the package — whose `VALUE` is `value` —, METADATA, WHEEL and RECORD),
/// so pip can install it with no index and no network.
pub fn write_wheel(dir: &Path, package: &str, value: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let script = "import sys, zipfile\n\
        pkg, value = sys.argv[2], sys.argv[3]\n\
        with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
        \x20   z.writestr(pkg + '/__init__.py', 'VALUE = %r\\n' % value)\n\
        \x20   d = pkg + '-0.1.dist-info/'\n\
        \x20   z.writestr(d + 'METADATA', 'Metadata-Version: 2.1\\nName: %s\\nVersion: 0.1\\n' % pkg)\n\
        \x20   z.writestr(d + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: ctxhost-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
        \x20   z.writestr(d + 'RECORD', '')\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir.join(format!("{package}-0.1-py3-none-any.whl")))
        .args([package, value])
        .output()
        .expect("run python3");
    assert!(out.status.success(), "writing the wheel failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `cmd` with `{}` and a newline on stdin: (success, stdout, stderr).
pub fn run_with_empty_request(cmd: &mut std::process::Command) -> (bool, String, String) {
    let out = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"{}\n")?;
            child.wait_with_output()
        })
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits up to `secs` seconds for `done`, failing the test with `what`.
pub fn within(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < std::time::Duration::from_secs(secs), "timed out after {secs} s waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
