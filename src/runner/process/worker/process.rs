//! One persistent worker process: started like a one-shot call (the shared
//! spawn builder), then fed one request line per call and read for one reply
//! line (`line.rs`), within the call's deadline.
//!
//! Invariants:
//! - its process group is killed whenever the worker is dropped or stopped,
//!   and only while the leader is unreaped (its group id cannot have been
//!   reused), as in `oneshot`;
//! - stderr is streamed to tracing target `plugin_stderr` for the worker's
//!   whole life by a task that ends when the worker stops (bounded: what is
//!   left in the pipe is taken without waiting);
//! - a worker's I/O belongs to the tokio runtime that started it: it is never
//!   used from another one (the pool replaces it);
//! - nothing a worker writes can panic the host or make it wait past the
//!   deadline.

use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitStatus;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use super::line::{self, Cursor, Scan};
use crate::protocol::HookName;
use crate::runner::HookError;
use crate::runner::process::launcher::CommandLine;
use crate::runner::process::oneshot::{ExitWatch, GroupKill, StderrLog, drain};
use crate::runner::process::remove_tree;
use crate::runner::process::sandbox::{Cleanup, Confinement};
use crate::runner::process::spawn::{SpawnSpec, Spawned, spawn};

/// The longest reply line (spec section 7).
pub const MAX_REPLY: usize = 4 * 1024 * 1024;

/// How long a stopping worker gets to exit by itself after its stdin closes.
pub(super) const STOP_GRACE: Duration = Duration::from_millis(500);

/// How long a worker that closed its stdout gets to exit, so the error can
/// say how it ended.
const EXIT_AFTER_EOF: Duration = Duration::from_millis(200);

/// Bound on reaping a killed worker (SIGKILL is not instant for a process in
/// uninterruptible sleep); past it the runtime reaps the orphan later.
const REAP_BOUND: Duration = Duration::from_secs(5);

/// Read size for stdout.
const CHUNK: usize = 64 * 1024;

/// What a worker is started with.
pub(super) struct Start<'a> {
    pub command: CommandLine,
    pub cwd: &'a std::path::Path,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub confinement: &'a Confinement,
    pub tmpdir: PathBuf,
    pub plugin: &'a str,
    /// The hook whose call started the worker (its stderr lines carry it).
    pub hook: HookName,
    /// The environment generation it was started with.
    pub generation: u64,
}

/// Why an exchange failed: the worker is no longer usable.
#[derive(Debug)]
pub(super) enum Fault {
    Timeout(Duration),
    /// Its stdout ended (or it exited) without a reply.
    Ended,
    TooLong,
    /// The reply line is not JSON.
    Garbage(String),
    /// Output nobody asked for was waiting before the request.
    Stray(String),
}

/// One running worker.
pub(super) struct Worker {
    pid: u32,
    child: Child,
    group: GroupKill,
    exit: ExitWatch,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    buf: Vec<u8>,
    cursor: Cursor,
    /// Set once stdout ended.
    eof: bool,
    stderr: Option<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<String>)>,
    _cleanup: Cleanup,
    tmpdir: Option<PathBuf>,
    runtime: tokio::runtime::Id,
    pub generation: u64,
    pub idle_since: Instant,
}

impl Worker {
    /// Starts a worker (in the current tokio runtime).
    ///
    /// # Errors
    /// [`HookError::Spawn`] naming the program.
    pub(super) fn start(s: Start<'_>) -> Result<Worker, HookError> {
        let spawned = spawn(SpawnSpec {
            command: &s.command,
            cwd: s.cwd,
            env: s.env,
            confinement: s.confinement,
            tmpdir: Some(&s.tmpdir),
        });
        let Spawned { mut child, cleanup } = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                remove_tree(&s.tmpdir);
                return Err(e);
            }
        };
        let pid = child.id().unwrap_or(0);
        let group = GroupKill(libc::pid_t::try_from(pid).unwrap_or(0));
        let exit = ExitWatch::new(group.0);
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            drop(group);
            remove_tree(&s.tmpdir);
            return Err(HookError::Io(std::io::Error::other("worker pipes were not set up")));
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let logger = tokio::spawn(log_stderr(stderr, s.plugin.to_owned(), s.hook, stopped));
        Ok(Worker {
            pid,
            child,
            group,
            exit,
            stdin: Some(stdin),
            stdout,
            buf: Vec::new(),
            cursor: Cursor::default(),
            eof: false,
            stderr: Some((stop, logger)),
            _cleanup: cleanup,
            tmpdir: Some(s.tmpdir),
            runtime: tokio::runtime::Handle::current().id(),
            generation: s.generation,
            idle_since: Instant::now(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether this worker's I/O can be used from the current runtime.
    pub(super) fn in_current_runtime(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok_and(|h| h.id() == self.runtime)
    }

    /// Whether its stdout ended (it may still answer what is buffered, but
    /// never another request).
    pub(super) fn ended(&self) -> bool {
        self.eof
    }

    /// Sends one request line and reads its reply within `timeout`. Call
    /// [`Worker::check_quiet`] first.
    pub(super) async fn exchange(&mut self, request: &[u8], timeout: Duration) -> Result<Value, Fault> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let Some(stdin) = self.stdin.as_mut() else { return Err(Fault::Ended) };
        let write = async move {
            stdin.write_all(request).await?;
            stdin.flush().await
        };
        tokio::pin!(write);
        let mut writing = true;
        loop {
            match self.cursor.scan(&mut self.buf, MAX_REPLY, self.eof) {
                Scan::Reply(_) if writing => {
                    return Err(Fault::Stray("it answered before reading the whole request".to_owned()));
                }
                Scan::Reply(value) => {
                    if self.buf.capacity() > 4 * CHUNK {
                        self.buf.shrink_to(CHUNK);
                    }
                    return Ok(value);
                }
                Scan::Garbage(start) => return Err(Fault::Garbage(start)),
                Scan::TooLong => return Err(Fault::TooLong),
                Scan::NeedMore if self.eof => return Err(Fault::Ended),
                Scan::NeedMore => {}
            }
            self.buf.reserve(CHUNK);
            tokio::select! {
                r = &mut write, if writing => {
                    writing = false;
                    if let Err(e) = r {
                        // It stopped reading (most likely it is exiting):
                        // what it wrote, or its end, decides.
                        tracing::debug!("writing to the worker failed: {e}");
                    }
                }
                r = self.stdout.read_buf(&mut self.buf) => match r {
                    Ok(0) | Err(_) => {
                        self.eof = true;
                        writing = false;
                    }
                    Ok(_) => {}
                },
                () = self.exit.exited(), if self.exit.available() && !self.eof => {
                    // It exited: take what the pipe holds, without waiting
                    // for a grandchild that may keep it open.
                    let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stdout);
                    let buf = &mut self.buf;
                    drain(fd, |chunk| {
                        buf.extend_from_slice(chunk);
                        buf.len() <= MAX_REPLY + 1
                    });
                    self.eof = true;
                    writing = false;
                }
                () = &mut deadline => return Err(Fault::Timeout(timeout)),
            }
        }
    }

    /// Before a request: nothing may be waiting on stdout (a second line to
    /// the previous request would be read as this one's reply): `Stray`.
    /// `Ended`: it exited (or closed stdout) since its last reply.
    pub(super) fn check_quiet(&mut self) -> Result<(), Fault> {
        if !self.eof {
            let mut chunk = [0u8; 4096];
            let mut read = ReadBuf::new(&mut chunk);
            let mut cx = Context::from_waker(Waker::noop());
            match Pin::new(&mut self.stdout).poll_read(&mut cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => self.eof = true,
                Poll::Ready(Ok(())) => self.buf.extend_from_slice(read.filled()),
                Poll::Ready(Err(_)) => self.eof = true,
                Poll::Pending => {}
            }
        }
        if line::has_text(&self.buf) {
            let stray = line::preview(self.buf.trim_ascii());
            return Err(Fault::Stray(format!("it wrote output nobody asked for: `{stray}`")));
        }
        self.buf.clear();
        if self.eof { Err(Fault::Ended) } else { Ok(()) }
    }

    /// Turns a fault into the call's error: kills the group, reaps, and
    /// takes the stderr tail.
    pub(super) async fn fail(mut self, fault: Fault) -> HookError {
        // A worker whose stdout ended usually exits at once: let it, so the
        // error says how it ended.
        let exited_by_itself = match fault {
            Fault::Ended if self.exit.available() => {
                tokio::time::timeout(EXIT_AFTER_EOF, self.exit.exited()).await.is_ok()
            }
            _ => false,
        };
        let status = self.kill().await;
        let stderr = self.stderr_tail().await;
        match fault {
            Fault::Timeout(t) => HookError::Timeout { secs: t.as_secs() },
            Fault::TooLong => HookError::OutputCap { stream: "stdout", cap: MAX_REPLY },
            Fault::Garbage(start) => invalid(format!(
                "the worker's reply is not a JSON line (line protocol: exactly one JSON line per request): `{start}`"
            )),
            Fault::Stray(what) => invalid(format!("the worker broke the line protocol: {what}")),
            Fault::Ended => {
                let (label, code) = match status {
                    Some(status) if exited_by_itself || !self.exit.available() => {
                        (format!("{} before replying", crate::runner::process::exit_label(status)), status.code())
                    }
                    _ => ("no reply: the worker closed its stdout".to_owned(), None),
                };
                HookError::Exit { label, code, stderr }
            }
        }
    }

    /// Kills the group and reaps the leader (bounded). Returns its status.
    async fn kill(&mut self) -> Option<ExitStatus> {
        self.stdin = None;
        self.group.kill();
        let status = tokio::time::timeout(REAP_BOUND, self.child.wait()).await.ok().and_then(Result::ok);
        if status.is_some() {
            self.group.disarm();
        }
        status
    }

    /// Stops the stderr logger and returns the last few KiB it saw.
    async fn stderr_tail(&mut self) -> String {
        let Some((stop, logger)) = self.stderr.take() else { return String::new() };
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(1), logger).await.ok().and_then(Result::ok).unwrap_or_default()
    }

    /// Graceful stop: close stdin, give it [`STOP_GRACE`] to exit, then kill
    /// the group; the TMPDIR goes too.
    pub(super) async fn stop(mut self) {
        if !self.in_current_runtime() {
            return; // Dropping kills the group.
        }
        self.stdin = None;
        if self.exit.available() {
            let _ = tokio::time::timeout(STOP_GRACE, self.exit.exited()).await;
        } else {
            // Without pidfd the wait reaps; the group kill that follows is
            // then best effort, as in oneshot.
            let _ = tokio::time::timeout(STOP_GRACE, self.child.wait()).await;
        }
        self.kill().await;
        self.stderr_tail().await;
        if let Some(dir) = self.tmpdir.take() {
            let _ = tokio::task::spawn_blocking(move || remove_tree(&dir)).await;
        }
    }
}

impl Drop for Worker {
    /// Kills the group (the `GroupKill` field does it when still armed),
    /// ends the stderr logger and removes the TMPDIR.
    fn drop(&mut self) {
        self.group.kill();
        if let Some((stop, _)) = self.stderr.take() {
            let _ = stop.send(());
        }
        if let Some(dir) = self.tmpdir.take() {
            // A large TMPDIR must not stall a runtime thread.
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(move || remove_tree(&dir))),
                Err(_) => remove_tree(&dir),
            }
        }
    }
}

fn invalid(message: String) -> HookError {
    HookError::Worker(message)
}

/// Streams a worker's stderr to tracing until it ends or `stop` fires; then
/// takes what the pipe holds without waiting. Returns the stderr tail.
async fn log_stderr(
    mut stderr: ChildStderr,
    plugin: String,
    hook: HookName,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> String {
    let mut log = StderrLog::new(&plugin, hook);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            r = stderr.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => log.feed(&buf[..n]),
            },
            _ = &mut stop => {
                let mut taken = 0usize;
                drain(std::os::fd::AsRawFd::as_raw_fd(&stderr), |chunk| {
                    log.feed(chunk);
                    taken += chunk.len();
                    taken <= MAX_REPLY
                });
                break;
            }
        }
    }
    log.finish()
}
