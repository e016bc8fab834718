//! Re-running tests as an unprivileged user (uid 65534): the test binary
//! re-runs a module of its own under `setpriv` from a world-readable copy
//! (the checkout may sit where that user cannot go, e.g. under /root), with
//! ctxhost next to it where `cargo_bin` looks and the repo files the tests
//! read under `CTXHOST_TEST_REPO_ROOT`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::{copy_tree, repo_root, require_program};

/// Whether the tests run as root (only then is a re-run as 65534 meaningful).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Gives the tree to uid/gid 65534.
pub fn chown_tree(dir: &Path) {
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
    if dir.is_dir() && !dir.is_symlink() {
        for e in std::fs::read_dir(dir).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

/// Runs the tests matching `filter` (minus `skip`) again as uid 65534 and
/// asserts they pass — at least `min_passed` of them. `repo_dirs` are
/// copied from the repository for them. Not root, there is nothing to do:
/// they already ran unprivileged.
pub fn rerun_as_nobody(filter: &str, skip: &[&str], repo_dirs: &[&str], min_passed: usize) {
    if !is_root() {
        eprintln!("not root: the `{filter}` tests already ran unprivileged");
        return;
    }
    require_program("setpriv", "util-linux");
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(home.path());
    let place = tempfile::tempdir().unwrap();
    std::fs::set_permissions(place.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let me = place.path().join("deps/integration");
    link_or_copy(&std::env::current_exe().unwrap(), &me);
    link_or_copy(&assert_cmd::cargo::cargo_bin("ctxhost"), &place.path().join("ctxhost"));
    let repo = place.path().join("repo");
    for dir in repo_dirs {
        copy_tree(&repo_root().join(dir), &repo.join(dir));
    }
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(&me).arg(filter);
    for s in skip {
        cmd.args(["--skip", s]);
    }
    let out = cmd
        .args(["--test-threads", "2"])
        .env_clear()
        // The runtimes this user can run (a pyenv under /root is not one).
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home.path())
        .env("TMPDIR", std::env::temp_dir())
        .env("CTXHOST_TEST_REPO_ROOT", &repo)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the `{filter}` tests failed as uid 65534:\n{stdout}\n{stderr}");
    let passed = stdout.lines().filter(|l| l.starts_with(&format!("test {filter}")) && l.ends_with(" ok")).count();
    assert!(passed >= min_passed, "it really ran the tests ({passed} passed):\n{stdout}");
}

/// A hard link of `from` at `to` (same file system), else a copy; parents
/// made world-readable.
pub fn link_or_copy(from: &Path, to: &Path) {
    let parent = to.parent().unwrap();
    std::fs::create_dir_all(parent).unwrap();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}
