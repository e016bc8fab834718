//! One hook call as one process (spec section 5): spawn, feed, read, bound, reap.
//!
//! Invariants this module keeps, whatever the hook does:
//! - the hook runs in its **own process group**, and that whole group is
//!   killed when the call ends — on timeout, on an output cap, on success,
//!   and when the calling future is dropped — so no grandchild outlives it;
//! - stdout and stderr are read concurrently with feeding stdin, so no pipe
//!   can fill up and deadlock either side;
//! - once the hook itself has exited, what is already in the pipes is taken
//!   without waiting: a background grandchild holding stdout open cannot
//!   stretch the call;
//! - each stream is capped; over the cap the group is killed at once.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use super::capture::{self, Capture, Stopped};
use super::exit::{self, ExitWatch};
use super::launcher::CommandLine;
use crate::protocol::HookName;
use crate::runner::HookError;

/// Default per-stream cap: 1 MiB.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;

/// Everything one process call needs.
pub struct OneShot<'a> {
    pub command: &'a CommandLine,
    pub cwd: &'a Path,
    pub env: Vec<(OsString, OsString)>,
    pub confinement: &'a super::sandbox::Confinement,
    pub tmpdir: Option<&'a Path>,
    pub stdin: &'a [u8],
    pub timeout: Duration,
    pub output_cap: usize,
    pub plugin: &'a str,
    pub hook: HookName,
}

/// A process that exited by itself.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// The last few KiB of stderr, trimmed.
    pub stderr_tail: String,
}

impl Finished {
    /// A non-zero exit as a labelled [`HookError::Exit`].
    pub fn check_status(self) -> Result<Vec<u8>, HookError> {
        if self.status.success() {
            Ok(self.stdout)
        } else {
            Err(HookError::Exit { label: exit::label(self.status), code: self.status.code(), stderr: self.stderr_tail })
        }
    }
}

/// Kills the process group when dropped (every exit path, cancellation included).
///
/// The group id is the hook's pid, so it may only be signalled while that pid
/// cannot have been reused: while the hook runs or is an unreaped zombie.
/// After reaping, [`GroupKill::disarm`] it.
pub(super) struct GroupKill(pub(super) libc::pid_t);

impl GroupKill {
    pub(super) fn disarm(&mut self) {
        self.0 = 0;
    }

    pub(super) fn kill(&self) {
        // Never signal group 0 or below: `kill(0, …)` would hit ctxhost's own group.
        if self.0 <= 1 {
            return;
        }
        // SAFETY: kill(2) with a negative pid signals the process group; the
        // group id is the hook's pid (process_group(0)). ESRCH is fine.
        unsafe {
            libc::kill(-self.0, libc::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the call to the end. Returns the exit status and output of a hook
/// that exited by itself, or the error that stopped it.
pub async fn run(mut call: OneShot<'_>) -> Result<Finished, HookError> {
    use super::spawn::CallProcess;
    let started = super::spawn::spawn_call(super::spawn::SpawnSpec {
        command: call.command,
        cwd: call.cwd,
        env: std::mem::take(&mut call.env),
        confinement: call.confinement,
        tmpdir: call.tmpdir,
        stdin: None,
    })?;
    let missing = || HookError::Io(std::io::Error::other("hook pipes were not set up"));
    match started {
        CallProcess::Spawned(super::spawn::Spawned { mut child, cleanup: _cleanup }) => {
            let pid = child.id().and_then(|id| libc::pid_t::try_from(id).ok()).unwrap_or(0);
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(missing());
            };
            let mut process = Spawned { child, exit: ExitWatch::new(pid) };
            drive(&call, pid, &mut process, stdin, stdout, stderr).await
        }
        CallProcess::Shared { mut keeper, cleanup: _cleanup } => {
            let pid = keeper.id();
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (keeper.stdin.take(), keeper.stdout.take(), keeper.stderr.take())
            else {
                return Err(missing());
            };
            let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?;
            let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout)?;
            let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr)?;
            drive(&call, pid, &mut keeper, stdin, stdout, stderr).await
        }
    }
}

/// A started call process, as [`drive`] waits for it.
trait CallExit {
    /// Returns once the process has exited: `None` without reaping it (its
    /// group can still be killed safely), or its status when it could only
    /// be told by reaping.
    async fn exited(&mut self) -> std::io::Result<Option<ExitStatus>>;
    /// Reaps it (at once once it has exited).
    async fn reap(&mut self) -> std::io::Result<ExitStatus>;
}

/// A process spawned through `Command`, watched through a pidfd of its own.
struct Spawned {
    child: tokio::process::Child,
    exit: ExitWatch,
}

impl CallExit for Spawned {
    async fn exited(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.exit.available() {
            self.exit.exited().await;
            Ok(None)
        } else {
            self.child.wait().await.map(Some)
        }
    }

    async fn reap(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }
}

impl CallExit for super::sandbox::shared::SharedKeeper {
    async fn exited(&mut self) -> std::io::Result<Option<ExitStatus>> {
        super::sandbox::shared::SharedKeeper::exited(self).await;
        Ok(None)
    }

    async fn reap(&mut self) -> std::io::Result<ExitStatus> {
        self.wait().await
    }
}

/// Feeds, reads, bounds and reaps a started call whose group is `pid`.
async fn drive<W, O, E>(
    call: &OneShot<'_>,
    pid: libc::pid_t,
    process: &mut impl CallExit,
    stdin: W,
    mut stdout: O,
    mut stderr: E,
) -> Result<Finished, HookError>
where
    W: tokio::io::AsyncWrite + Unpin,
    O: tokio::io::AsyncRead + Unpin + AsRawFd,
    E: tokio::io::AsyncRead + Unpin + AsRawFd,
{
    let mut group = GroupKill(pid);
    let deadline = tokio::time::sleep(call.timeout);
    tokio::pin!(deadline);
    let mut capture = Capture::new(call.plugin, call.hook, call.output_cap);
    let exited = process.exited();
    let pumped = capture::pump(&mut capture, stdin, call.stdin, &mut stdout, &mut stderr, exited, deadline).await;
    let reaped = match pumped {
        Ok(reaped) => reaped,
        Err(Stopped::Cap(e)) => {
            group.kill();
            return Err(e);
        }
        Err(Stopped::Io(e)) => return Err(HookError::Io(e)),
        Err(Stopped::Timeout) => {
            group.kill();
            let _ = process.reap().await;
            group.disarm();
            return Err(HookError::Timeout { secs: call.timeout.as_secs() });
        }
    };

    // The hook has exited: everything it wrote is already in the pipes. What
    // is left of its group are leftovers; kill them, then take what the pipes
    // hold without blocking.
    group.kill();
    let capped = capture.drain_rest(stdout.as_raw_fd(), stderr.as_raw_fd());
    // Only now reap the hook (at once: it has exited), then the guard is done.
    let status = match reaped {
        Some(status) => status,
        None => process.reap().await?,
    };
    group.disarm();
    capped?;
    let mut stderr_tail = capture.stderr.finish();
    if status.code() == Some(127)
        && stderr_tail.contains(super::sandbox::START_FAILED)
        && let Some(note) = call.confinement.distrust_cache()
    {
        stderr_tail.push_str(&format!("\n({note})"));
    }
    Ok(Finished { status, stdout: capture.stdout, stderr_tail })
}
