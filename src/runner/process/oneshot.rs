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
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::exit;
use super::launcher::CommandLine;
use crate::protocol::HookName;
use crate::runner::HookError;

/// Default per-stream cap: 1 MiB.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;

/// How much of stderr is kept for an error message.
const STDERR_TAIL: usize = 4096;

/// A stderr line longer than this is logged in pieces.
const MAX_LOG_LINE: usize = 16 * 1024;

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
pub async fn run(call: OneShot<'_>) -> Result<Finished, HookError> {
    let super::spawn::Spawned { mut child, cleanup: _cleanup } = super::spawn::spawn(super::spawn::SpawnSpec {
        command: call.command,
        cwd: call.cwd,
        env: call.env,
        confinement: call.confinement,
        tmpdir: call.tmpdir,
        stdin: None,
    })?;
    let pid = child.id().and_then(|id| libc::pid_t::try_from(id).ok()).unwrap_or(0);
    let mut group = GroupKill(pid);
    let exit = ExitWatch::new(pid);
    let (Some(stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(HookError::Io(std::io::Error::other("hook pipes were not set up")));
    };

    let write = feed(stdin, call.stdin);
    tokio::pin!(write);
    let deadline = tokio::time::sleep(call.timeout);
    tokio::pin!(deadline);

    let mut out = Vec::new();
    let mut err = StderrLog::new(call.plugin, call.hook);
    let mut out_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 16 * 1024];
    let (mut out_open, mut err_open, mut writing) = (true, true, true);
    let over_cap = |stream| HookError::OutputCap { stream, cap: call.output_cap };

    let reaped = loop {
        tokio::select! {
            () = &mut write, if writing => writing = false,
            r = stdout.read(&mut out_buf), if out_open => match r {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => {
                    out.extend_from_slice(&out_buf[..n]);
                    if out.len() > call.output_cap {
                        group.kill();
                        return Err(over_cap("stdout"));
                    }
                }
            },
            r = stderr.read(&mut err_buf), if err_open => match r {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => {
                    err.feed(&err_buf[..n]);
                    if err.total > call.output_cap {
                        group.kill();
                        return Err(over_cap("stderr"));
                    }
                }
            },
            () = exit.exited(), if exit.available() => break None,
            status = child.wait(), if !exit.available() => break Some(status?),
            () = &mut deadline => {
                group.kill();
                let _ = child.wait().await;
                group.disarm();
                return Err(HookError::Timeout { secs: call.timeout.as_secs() });
            }
        }
    };

    // The hook has exited: everything it wrote is already in the pipes. What
    // is left of its group are leftovers; kill them, then take what the pipes
    // hold without blocking (and never more than the cap, in case something
    // outside the group keeps writing).
    group.kill();
    let cap = call.output_cap;
    if out_open {
        drain(stdout.as_raw_fd(), |chunk| {
            out.extend_from_slice(chunk);
            out.len() <= cap
        });
    }
    if err_open {
        drain(stderr.as_raw_fd(), |chunk| {
            err.feed(chunk);
            err.total <= cap
        });
    }
    // Only now reap the hook (at once: it has exited), then the guard is done.
    let status = match reaped {
        Some(status) => status,
        None => child.wait().await?,
    };
    group.disarm();
    if out.len() > cap {
        return Err(over_cap("stdout"));
    }
    if err.total > cap {
        return Err(over_cap("stderr"));
    }
    Ok(Finished { status, stdout: out, stderr_tail: err.finish() })
}

/// Tells when the hook has exited **without reaping it** (a pidfd turns
/// readable), so its group can still be killed safely. Without pidfd support
/// (Linux < 5.3) the caller falls back to waiting, which reaps.
pub(super) struct ExitWatch(Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>);

impl ExitWatch {
    pub(super) fn new(pid: libc::pid_t) -> Self {
        use std::os::fd::FromRawFd;
        if pid <= 0 {
            return ExitWatch(None);
        }
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return ExitWatch(None);
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: the OwnedFd is moved into the AsyncFd, so it stays open and
        // the same for the AsyncFd's whole life. (Called inside the runtime.)
        let registered = unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
        ExitWatch(registered.ok())
    }

    pub(super) fn available(&self) -> bool {
        self.0.is_some()
    }

    pub(super) async fn exited(&self) {
        match &self.0 {
            Some(fd) => {
                let _ = fd.readable().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// Writes the request and closes stdin. A hook that never reads its stdin
/// (EPIPE) is fine: its answer decides.
async fn feed(mut stdin: tokio::process::ChildStdin, bytes: &[u8]) {
    if let Err(e) = stdin.write_all(bytes).await
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::debug!("writing the hook request failed: {e}");
    }
    drop(stdin);
}

/// Reads what is available on a pipe right now, without waiting, until the
/// pipe is empty or closed, or `sink` says stop.
pub(super) fn drain(fd: RawFd, mut sink: impl FnMut(&[u8]) -> bool) {
    let mut buf = [0u8; 16 * 1024];
    // SAFETY: `fd` is an open pipe owned by the caller for the whole call;
    // fcntl/read on it have no memory-safety preconditions beyond a valid buffer.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n > 0 {
                if !sink(&buf[..n as usize]) {
                    break;
                }
            } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            } else {
                break; // EOF, or EAGAIN: nothing more without waiting.
            }
        }
    }
}

/// Streams stderr to tracing line by line (target `plugin_stderr`) and keeps
/// a tail for error messages.
pub(super) struct StderrLog<'a> {
    plugin: &'a str,
    hook: HookName,
    partial: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
}

impl<'a> StderrLog<'a> {
    pub(super) fn new(plugin: &'a str, hook: HookName) -> Self {
        StderrLog { plugin, hook, partial: Vec::new(), tail: Vec::new(), total: 0 }
    }

    pub(super) fn feed(&mut self, chunk: &[u8]) {
        self.total += chunk.len();
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * STDERR_TAIL {
            self.tail.drain(..self.tail.len() - STDERR_TAIL);
        }
        self.partial.extend_from_slice(chunk);
        while let Some(pos) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=pos).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if self.partial.len() > MAX_LOG_LINE {
            let line = std::mem::take(&mut self.partial);
            self.emit(&line);
        }
    }

    fn emit(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        tracing::info!(target: "plugin_stderr", plugin = self.plugin, hook = %self.hook, "{line}");
    }

    /// Bytes of stderr seen so far.
    pub(super) fn total(&self) -> usize {
        self.total
    }

    pub(super) fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.emit(&line);
        }
        let start = self.tail.len().saturating_sub(STDERR_TAIL);
        String::from_utf8_lossy(&self.tail[start..]).trim().to_owned()
    }
}
