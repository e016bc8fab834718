//! The guest examples, for tests and benches (benches include this file by
//! path): copied out of the repo so their state files stay in a temp dir, and
//! the native one built once per run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository (`CTXHOST_TEST_REPO_ROOT` when set: the sandbox suite
/// re-runs itself as another user from a copy that user can read).
pub fn repo_root() -> PathBuf {
    std::env::var_os("CTXHOST_TEST_REPO_ROOT").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// Copies `guest-examples/<name>` to `dest`; the native example gets its binary.
pub fn copy_example(name: &str, dest: &Path) {
    copy_dir(&repo_root().join("guest-examples").join(name), dest);
    if name == "native-memory" {
        let bin = dest.join("bin").join("native-memory");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::copy(native_example_binary(), &bin).unwrap();
    }
    // A component example gets the file its `component = "<name>.wasm"` names,
    // built from the crate of that name.
    let manifest = std::fs::read_to_string(dest.join("plugin.toml")).unwrap_or_default();
    let wasm = manifest.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "component").then(|| value.trim().trim_matches('"').to_owned())
    });
    if let Some(file) = wasm
        && !dest.join(&file).exists()
    {
        let stem = file.trim_end_matches(".wasm");
        std::fs::copy(component(stem), dest.join(&file)).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == "bin" || name == "memory.jsonl" {
            continue;
        }
        let src = entry.path();
        if src.is_dir() {
            copy_dir(&src, &to.join(&name));
        } else {
            std::fs::copy(&src, to.join(&name)).unwrap();
        }
    }
}

/// `cargo build --release` of `guest-examples/<crate_dir>` into
/// `<target>/<target_name>`, run from inside `guest-examples/` so its
/// `.cargo/config.toml` applies. Returns the target dir.
fn build_guests(crate_dir: &str, target_name: &str, extra: &[&str], hint: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join(target_name);
    let manifest = repo_root().join("guest-examples").join(crate_dir).join("Cargo.toml");
    // A re-run as another user (the sandbox bench as uid 65534) uses what
    // the first run built: that user may not reach cargo.
    if std::env::var_os("CTXHOST_GUESTS_PREBUILT").is_some() && target.is_dir() {
        return target;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(repo_root().join("guest-examples"))
        .args(["build", "--release", "--quiet"])
        .args(extra)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("run cargo for the guest examples");
    assert!(status.success(), "building `{}` failed{hint}", manifest.display());
    target
}

/// Builds `guest-examples/native-memory` once per test run, into its own
/// target dir (`target/guest-native`).
pub fn native_example_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_guests("native-memory", "guest-native", &[], "").join("release").join("native-memory"))
}

/// The benches' yardstick: runs `program args…` directly from Rust, in `cwd`
/// with only `PATH` and `HOME` (as a hook gets), feeding `request` (one line)
/// on stdin; returns its stdout. Panics when it fails: benches only.
pub fn run_bare(program: &Path, args: &[&Path], cwd: &Path, request: &str) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(["PATH", "HOME"].iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v))))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(request.as_bytes()).unwrap();
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{} failed", program.display());
    out.stdout
}

/// Builds the Rust component examples (`guest-examples/`, target
/// `wasm32-wasip2`) once per test run and returns the path of `name`.wasm.
pub fn component(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let hint =
            "; is the wasm32-wasip2 target installed? (`rustup target add wasm32-wasip2`, which scripts/test.sh does)";
        build_guests("", "guest-wasm", &["--target", "wasm32-wasip2"], hint).join("wasm32-wasip2/release")
    });
    dir.join(format!("{name}.wasm"))
}
