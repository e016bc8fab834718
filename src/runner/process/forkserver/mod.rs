//! The per-plugin Python fork server (issue 18): one-shot Python hooks run
//! unmodified at near-worker speed.
//!
//! A plugin's [`ForkServer`] keeps one Python process (`server.py`, embedded
//! and passed with `-c`) started exactly as a one-shot call of the plugin
//! would be — the same `spawn.rs` path: launcher and its flags (`-B`),
//! cleared environment, cwd, the plugin's [`Confinement`] (cgroup,
//! namespaces, view, uid, Landlock, seccomp, tether) — so every child it
//! forks inherits that confinement. Its fd 0 is a `SOCK_SEQPACKET` socket
//! to the host. Each call sends one message: the script, argv and the
//! call's whole environment as JSON, with four fds — the call's own socket,
//! the hook's stdin read end, stdout and stderr write ends.
//!
//! The call runs in a **spare**: a child the server forks while no call
//! runs (not during one: on few cores that would take CPU from it), so the
//! fork — the largest part of a call's cost (Python's fork handling and the
//! page tables of an interpreter with its modules loaded) — is off the
//! next call's path. A spare does at once what every call's process does
//! first: its own process group, child subreaper, default signals, every
//! inherited fd closed but its own socket to the server, and a *rehearsal*
//! (`_rehearse`: compile and run a tiny JSON script, set and unset a
//! variable, walk `sys.modules` as the finalisation does, print, flush,
//! collect) whose writes copy the pages a call would copy on write, before
//! the call waits for them (~300 → ~110 page faults per call). Then
//! it waits. On a call the server passes it the header and the three pipes;
//! the spare points fds 0-2 at the pipes, replaces `os.environ` wholesale,
//! sets `sys.argv` and `sys.path[0]` and runs the script as `__main__` with
//! the interpreter's exit rules (`SystemExit`, uncaught exception →
//! traceback and 1, non-daemon threads joined, `atexit`, flush → 120 on a
//! failed stdout flush, module finalisers, `KeyboardInterrupt` → SIGINT).
//! Calls that overlap find no spare and get a child forked at once. A spare
//! is forked from the server, never from a call's process: nothing a call
//! does reaches a later one. The server answers on the call's socket with
//! the child's pidfd, then, once the child has exited, kills what is left
//! of its process group (before reaping: the group id cannot have been
//! reused), reaps it, kills every process the call left behind
//! (reparented to the server, a child subreaper: a daemonising hook's
//! double fork included) and sends the wait status.
//!
//! While idle the server also compiles the scripts of recent calls
//! (`_CODE`, keyed by path and a BLAKE2 digest of the source; read with
//! `O_NONBLOCK`, regular files up to 1 MiB only). A call's process reads its
//! script as a spawned interpreter would and runs the cached code only when
//! the digest of what it read matches: the same source, name and flags
//! compile to the same code, so an edited script runs its new text at the
//! next call. A script whose compiling warns is never cached (the warning
//! is the hook's stderr, every call).
//!
//! The host ([`call`]) writes the request into the stdin pipe right after
//! handing the call over (as much as the pipe takes, closing it when all
//! fitted; not for a call that joins a cgroup first), so the spare never
//! waits for the host to hear back before it can read its request. It
//! feeds the rest, reads both streams under the cap, and on
//! a deadline, a cap or a dropped call kills the child through its pidfd
//! (`pidfd_send_signal`: never a reused pid) and closes the call's socket,
//! which makes the server kill the group and sweep. It never signals a
//! process group itself: only the server, the reaping parent, knows when
//! that is safe.
//!
//! Each call's `TMPDIR` is a fresh 0700 directory inside the server's own
//! temporary root (`ctxhost-<plugin>-forkserver-<pid>.<random>`, the only
//! temporary directory its Landlock ruleset grants), removed on every path.
//! Concurrent calls of one plugin can so reach each other's `TMPDIR` (same
//! uid, same root): as they already share the uid and the data dir.
//!
//! What is not identical to a spawned hook (docs/reference/manifest.md says
//! it too): the modules of [`PRELOAD`] are in `sys.modules` from the start;
//! the hash seed is the server's, shared by its children; a daemonised
//! grandchild's parent is the hook process, not init, until the call ends.
//! Where a spawned hook would get a cgroup (`max_memory_mb`,
//! `max_processes`), each call gets its own (`Confinement::call_cgroup`):
//! the child waits for a `go` the server relays once the host has moved it
//! in (by the pid its pidfd shows the host), and the cgroup is killed and
//! removed with the call. A script directory holding a module that
//! shadows one the server preloaded (`json.py`) is declined by the server
//! and spawned.
//!
//! Never used for a plugin whose `[hooks] forkserver = false`, with
//! `[runner] python_forkserver = false`, for workers or non-Python runtimes.
//! When the server cannot take a call (not startable, dead, declined) the
//! call is spawned instead and counted (`forkserver_fallbacks`).

mod call;
mod wire;

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::launcher::CommandLine;
use super::sandbox::{Cleanup, Confinement};

pub(super) use call::{ForkCall, run};

/// The Python code of the server (passed with `-c`).
const SERVER_PY: &str = include_str!("server.py");

/// The stdlib modules the server imports before it waits (`PRELOAD` in
/// `server.py`, kept equal by a test). Measured here (Python 3.11, import
/// time in a fresh interpreter, median of 7): json 1.8 ms, hashlib 3.5,
/// subprocess 3.5, traceback 2.8, uuid 2.7, datetime 1.5, argparse 1.9,
/// logging 5.0, dataclasses 6.9, inspect 5.9, base64 0.4, copy 0.5, string
/// 0.8, textwrap 1.2; re, pathlib, collections, typing, tempfile, threading,
/// random, shutil, urllib.parse, struct, math are loaded by `site` already.
/// The examples and LibreFang-style fixtures import json, sys, os, re, time,
/// pathlib, traceback, subprocess, tempfile, threading. Left out: asyncio
/// (35 ms, and a hook using it is rare), urllib.request (24 ms, loads ssl).
pub const PRELOAD: &[&str] = &[
    "json",
    "re",
    "time",
    "datetime",
    "pathlib",
    "hashlib",
    "collections",
    "traceback",
    "typing",
    "tempfile",
    "subprocess",
    "threading",
    "random",
    "base64",
    "uuid",
    "copy",
    "string",
    "textwrap",
    "struct",
    "math",
    "functools",
    "itertools",
    "urllib.parse",
    "shutil",
    "argparse",
    "dataclasses",
    "logging",
    "inspect",
];

/// Whether the one-shot hooks of a plugin with `settings` go through a fork
/// server under the host's `[runner]` config: `None` for a plugin that is
/// not a Python script plugin, else `Ok` or why not (said by `ctxhost
/// doctor` and the catalog status). The loader decides with this too.
///
/// A process limit this machine keeps with `RLIMIT_NPROC` (no cgroup for
/// it) rules the server out: that limit counts the processes of a user (of
/// the user namespace a spawned hook gets to itself), so every call of one
/// server, the server and its spare would share one count where a spawned
/// hook has its own.
pub fn decision(
    settings: &crate::manifest::ExecSettings,
    config: &crate::config::HostConfig,
) -> Option<Result<(), &'static str>> {
    if settings.runtime != crate::manifest::Runtime::Python {
        return None;
    }
    Some(if settings.persistent_subprocess {
        Err("a persistent worker: its process already stays up between calls")
    } else if !settings.forkserver {
        Err("`forkserver = false` in the plugin's [hooks]")
    } else if !config.runner.python_forkserver {
        Err("`[runner] python_forkserver = false` in config.toml")
    } else if config.sandbox.max_processes > 0 && super::sandbox::features().limits().process_limit == "rlimit" {
        Err("`[sandbox] max_processes` is kept with RLIMIT_NPROC here (no cgroup for it), which counts per user: \
             the server's calls would share one count")
    } else {
        Ok(())
    })
}

/// Environment variables that differ per call; any other difference from the
/// server's own environment (a bootstrap override, a changed venv) restarts it.
const PER_CALL_VARS: &[&str] = &["LIBREFANG_AGENT_ID", "LIBREFANG_MESSAGE", "TMPDIR"];

/// Why a call did not go through the fork server (it is spawned instead).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unavailable {
    #[error("cannot start the fork server: {0}")]
    Start(String),
    #[error("the fork server is gone: {0}")]
    Gone(std::io::Error),
    #[error("the fork server declined the call: {0}")]
    Declined(String),
    #[error("the call cannot be passed to the fork server: {0}")]
    Unfit(String),
}

/// One plugin's fork server, started at its first call, restarted when its
/// environment or command changed or it died, stopped after `idle` unused.
#[derive(Debug)]
pub(super) struct ForkServer {
    plugin: String,
    idle: Duration,
    slot: Arc<tokio::sync::Mutex<Option<Running>>>,
}

/// A running server.
#[derive(Debug)]
struct Running {
    /// The host's end of the control socket (fd 0 of the server).
    control: Arc<OwnedFd>,
    /// What it was started with: a call with another command or base
    /// environment restarts it.
    command: CommandLine,
    base_env: Vec<(OsString, OsString)>,
    /// Its temporary root, removed when it stops.
    tmp_root: PathBuf,
    last_used: Instant,
    /// The server process (killed on drop) and its confinement's cleanup.
    _child: tokio::process::Child,
    _cleanup: Cleanup,
}

impl Drop for Running {
    fn drop(&mut self) {
        // `_child` is killed on drop (its group: the server's own); the
        // children of the server die with it (its pid namespace's init, or
        // the keeper, ends them); the root goes once they are gone.
        super::remove_tree_soon(std::mem::take(&mut self.tmp_root));
    }
}

/// What a call needs from the server: its control socket and a fresh
/// per-call `TMPDIR` inside the server's root.
pub(super) struct Lease {
    pub control: Arc<OwnedFd>,
    pub tmpdir: CallDir,
}

/// A call's `TMPDIR` inside the server's root, removed when dropped.
pub(super) struct CallDir(pub PathBuf);

impl Drop for CallDir {
    fn drop(&mut self) {
        super::remove_tree_soon(std::mem::take(&mut self.0));
    }
}

/// The base of a call environment: everything but the per-call variables.
pub(super) fn base_env(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    env.iter().filter(|(k, _)| !PER_CALL_VARS.iter().any(|v| k == v)).cloned().collect()
}

impl ForkServer {
    pub(super) fn new(plugin: &str, idle: Duration) -> Self {
        ForkServer { plugin: plugin.to_owned(), idle, slot: Arc::new(tokio::sync::Mutex::new(None)) }
    }

    /// The running server for `command` and `base`, started (or restarted)
    /// as needed, with a fresh call directory in its root.
    pub(super) async fn lease(
        &self,
        command: &CommandLine,
        cwd: &Path,
        base: &[(OsString, OsString)],
        confinement: &Confinement,
        fresh: bool,
    ) -> Result<Lease, Unavailable> {
        let mut slot = self.slot.lock().await;
        let stale = match slot.as_ref() {
            Some(r) => fresh || r.command != *command || r.base_env != base,
            None => true,
        };
        if stale {
            // Dropping the old one stops it.
            *slot = None;
            let running = self.start(command, cwd, base, confinement)?;
            *slot = Some(running);
            self.reap_when_idle();
        }
        let Some(running) = slot.as_mut() else { return Err(Unavailable::Start("no server".into())) };
        running.last_used = Instant::now();
        let dir = call_dir(&running.tmp_root, confinement.hook_uid())
            .map_err(|e| Unavailable::Start(format!("cannot make the call's TMPDIR: {e}")))?;
        Ok(Lease { control: Arc::clone(&running.control), tmpdir: dir })
    }

    /// Forgets the running server (it died, or failed a call's handover).
    pub(super) async fn forget(&self) {
        *self.slot.lock().await = None;
    }

    /// Stops the server now (reload, shutdown).
    pub(super) fn stop(&self) {
        if let Ok(mut slot) = self.slot.try_lock() {
            *slot = None;
        }
    }

    /// Whether a server runs now (tests, status).
    pub(super) fn running_pid(&self) -> Option<u32> {
        self.slot.try_lock().ok().and_then(|s| s.as_ref().and_then(|r| r._child.id()))
    }

    fn start(
        &self,
        command: &CommandLine,
        cwd: &Path,
        base: &[(OsString, OsString)],
        confinement: &Confinement,
    ) -> Result<Running, Unavailable> {
        let tmp_root = tempfile::Builder::new()
            .prefix(&super::tmp::prefix(&format!("{}-forkserver", self.plugin), false))
            .tempdir()
            .map_err(|e| Unavailable::Start(format!("cannot make its temporary root: {e}")))?
            .keep();
        let (host, server) = wire::socket_pair().map_err(|e| Unavailable::Start(e.to_string()))?;
        // The launcher's own flags (`-B`), then the server code for the script.
        let mut args = command.args.clone();
        args.pop();
        args.push("-c".into());
        args.push(SERVER_PY.into());
        let server_command = CommandLine { program: command.program.clone(), args };
        let mut env = vec![
            (OsString::from("LIBREFANG_AGENT_ID"), OsString::new()),
            (OsString::from("LIBREFANG_MESSAGE"), OsString::new()),
        ];
        env.extend(base.iter().cloned());
        env.push(("TMPDIR".into(), tmp_root.clone().into_os_string()));
        let spawned = super::spawn::spawn(super::spawn::SpawnSpec {
            command: &server_command,
            cwd,
            env,
            confinement,
            tmpdir: Some(&tmp_root),
            stdin: Some(server),
        });
        let super::spawn::Spawned { mut child, cleanup } = match spawned {
            Ok(s) => s,
            Err(e) => {
                super::remove_tree_soon(tmp_root);
                return Err(Unavailable::Start(e.to_string()));
            }
        };
        drop(child.stdout.take());
        if let Some(stderr) = child.stderr.take() {
            let plugin = self.plugin.clone();
            tokio::spawn(log_stderr(plugin, stderr));
        }
        tracing::debug!(plugin = %self.plugin, pid = child.id(), "fork server started");
        Ok(Running {
            control: Arc::new(host),
            command: command.clone(),
            base_env: base.to_vec(),
            tmp_root,
            last_used: Instant::now(),
            _child: child,
            _cleanup: cleanup,
        })
    }

    /// Stops the server once it has been unused for `idle`.
    fn reap_when_idle(&self) {
        let slot = Arc::downgrade(&self.slot);
        let idle = self.idle;
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        handle.spawn(async move {
            let mut wait = idle;
            loop {
                tokio::time::sleep(wait).await;
                let Some(slot) = slot.upgrade() else { return };
                let mut guard = slot.lock().await;
                let Some(running) = guard.as_ref() else { return };
                let unused = running.last_used.elapsed();
                if unused >= idle {
                    *guard = None;
                    return;
                }
                wait = idle - unused;
            }
        });
    }
}

/// Sends one call to the server: the header and the four fds.
pub(super) fn hand_over(control: &OwnedFd, header: &[u8], fds: &[&OwnedFd; 4]) -> Result<(), Unavailable> {
    if header.len() > wire::MAX_MESSAGE {
        return Err(Unavailable::Unfit("the call's environment is too large".into()));
    }
    let raw = fds.map(AsRawFd::as_raw_fd);
    wire::send(control.as_raw_fd(), header, &raw).map_err(Unavailable::Gone)
}

/// A fresh 0700 directory in the server's root (given to the hook uid as root).
fn call_dir(root: &Path, hook_uid: Option<u32>) -> std::io::Result<CallDir> {
    let dir = tempfile::Builder::new().prefix("call-").tempdir_in(root)?.keep();
    if let Some(id) = hook_uid {
        std::os::unix::fs::chown(&dir, Some(id), Some(id))?;
    }
    Ok(CallDir(dir))
}

/// The server's own stderr (its start failing, a bug of server.py), logged.
async fn log_stderr(plugin: String, mut stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(&mut stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!(target: "plugin_stderr", plugin = %plugin, "fork server: {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRELOAD` here and in server.py are the same list.
    #[test]
    fn preload_lists_agree() {
        let start = SERVER_PY.find("PRELOAD = (").expect("server.py has PRELOAD");
        let end = start + SERVER_PY[start..].find(')').expect("PRELOAD ends");
        let listed: Vec<&str> = SERVER_PY[start..end].split('"').skip(1).step_by(2).collect();
        assert_eq!(listed, PRELOAD);
    }

    #[test]
    fn per_call_variables_are_not_the_base() {
        let env: Vec<(OsString, OsString)> =
            [("LIBREFANG_AGENT_ID", "a"), ("PATH", "/bin"), ("TMPDIR", "/tmp/x"), ("LIBREFANG_MESSAGE", "m")]
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
        assert_eq!(base_env(&env), vec![(OsString::from("PATH"), OsString::from("/bin"))]);
    }
}
