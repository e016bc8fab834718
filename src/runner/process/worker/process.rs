//! One persistent worker process: started like a one-shot call (the shared
//! spawn builder), then fed one request per call and read for its reply,
//! within the call's deadline:
//! - `line` protocol: one request line, one reply line (`line.rs`);
//! - `jsonrpc` protocol: the call is a JSON-RPC request; until the response
//!   with its id arrives, the worker's own requests are answered by the
//!   plugin's host services, its notifications dispatched, and every other
//!   line (junk, responses to other ids) logged — rate-limited, each line
//!   cut short — and skipped (`rpc.rs`). A service call runs under the same
//!   deadline, holding no lock of the pool: a worker calling services forever
//!   still times out and is killed.
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
//!   deadline;
//! - a reply is only ever read for the request just written (`line`): before
//!   a request the stdout pipe is read by system call, and anything written
//!   since the last reply is a fault; a line that arrives while the request
//!   still sits unread in the stdin pipe (`FIONREAD`) is a fault too.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use super::line::{self, Cursor, Next, Scan};
use super::rpc::{self, Incoming, RpcError};
use crate::host::services::{CallContext, PluginServices, ServiceError, code};
use crate::protocol::HookName;
use crate::runner::HookError;
use crate::runner::process::capture::{StderrLog, drain};
use crate::runner::process::exit::ExitWatch;
use crate::runner::process::launcher::CommandLine;
use crate::runner::process::oneshot::GroupKill;
use crate::runner::process::sandbox::{Cleanup, Confinement};
use crate::runner::process::spawn::{SpawnSpec, Spawned, spawn};
use crate::runner::process::{Removal, remove_tree, remove_tree_soon};

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

/// Junk lines logged per worker per [`JUNK_WINDOW`]; the rest are counted
/// and the count logged when the window ends.
const JUNK_LOGGED: u32 = 10;
const JUNK_WINDOW: Duration = Duration::from_secs(10);

/// How a call was answered.
#[derive(Debug)]
pub(super) enum Answer {
    /// The hook's reply (`line`, or a JSON-RPC `result`).
    Reply(Value),
    /// A JSON-RPC `error` response: the call fails, the worker is fine.
    Refused(RpcError),
}

/// A `jsonrpc` call: what it is, and what the worker's requests reach.
pub(super) struct RpcCall<'a> {
    pub plugin: &'a str,
    pub hook: HookName,
    /// `hook/<name>` or `vfs/read_symbolic`.
    pub method: String,
    /// The plugin's services, if attached (taken once per call: no lock is
    /// held while they run).
    pub services: Option<std::sync::Arc<PluginServices>>,
    /// The call's agent, for `session`-scoped storage.
    pub context: CallContext,
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
    /// The last JSON-RPC id the host used with it.
    last_id: u64,
    /// It answered, but left some of the host's lines unread: not reused.
    retired: bool,
    junk: JunkLog,
}

/// Rate limit of the "skipped a line" warnings of one worker.
#[derive(Debug)]
struct JunkLog {
    since: Instant,
    logged: u32,
    suppressed: u64,
}

impl JunkLog {
    fn new() -> Self {
        JunkLog { since: Instant::now(), logged: 0, suppressed: 0 }
    }

    fn note(&mut self, plugin: &str, hook: HookName, why: &str, preview: &str) {
        if self.since.elapsed() >= JUNK_WINDOW {
            if self.suppressed > 0 {
                tracing::warn!(
                    target: "plugin_stdout", plugin, hook = %hook,
                    "{} more lines that are not JSON-RPC (or answer no pending call) were skipped",
                    self.suppressed
                );
            }
            *self = JunkLog::new();
        }
        if self.logged < JUNK_LOGGED {
            self.logged += 1;
            tracing::warn!(target: "plugin_stdout", plugin, hook = %hook, "skipped a worker line ({why}): `{preview}`");
        } else {
            self.suppressed += 1;
        }
    }
}

/// At most this many bytes of the host's answers may wait unread by a
/// worker; one that keeps asking without reading is faulted.
const MAX_UNSENT: usize = 8 * 1024 * 1024;

/// The host's bytes still to write to a worker in one call.
struct Outbox {
    bytes: Vec<u8>,
    sent: usize,
    /// Where the call's own request ends.
    request_end: usize,
}

impl Outbox {
    fn unsent(&self) -> &[u8] {
        &self.bytes[self.sent..]
    }
    fn pending(&self) -> bool {
        self.sent < self.bytes.len()
    }
    fn push(&mut self, line: &[u8]) {
        if !self.pending() {
            self.bytes.clear();
            self.sent = 0;
            self.request_end = 0;
        }
        self.bytes.extend_from_slice(line);
    }
}

/// What one wait on a worker's pipes brought.
enum Event {
    Wrote(std::io::Result<usize>),
    Read(std::io::Result<usize>),
    Exited,
}

/// A service call of the worker's, answered by the plugin's services.
async fn serve(call: &RpcCall<'_>, method: &str, params: Value) -> Result<Value, ServiceError> {
    match &call.services {
        Some(services) => services.dispatch(method, params, &call.context).await,
        None => Err(ServiceError {
            code: code::SERVICE,
            message: format!("no host services are attached to plugin '{}'", call.plugin),
        }),
    }
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
            stdin: None,
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
            last_id: 0,
            retired: false,
            junk: JunkLog::new(),
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

    /// Whether it must not serve another call although it answered this one.
    pub(super) fn retired(&self) -> bool {
        self.retired
    }

    /// Runs one call within `timeout`: `request` is the request line (as a
    /// one-shot script reads it); with `rpc` it goes out as a JSON-RPC
    /// request. Call [`Worker::check_quiet`] first.
    pub(super) async fn exchange(
        &mut self,
        request: &[u8],
        rpc: Option<&RpcCall<'_>>,
        timeout: Duration,
    ) -> Result<Answer, Fault> {
        match rpc {
            None => self.exchange_line(request, timeout).await.map(Answer::Reply),
            Some(call) => self.exchange_rpc(request, call, timeout).await,
        }
    }

    fn shrink(&mut self) {
        if self.buf.capacity() > 4 * CHUNK {
            self.buf.shrink_to(CHUNK);
        }
    }

    /// The `jsonrpc` exchange (see the module doc).
    async fn exchange_rpc(&mut self, params: &[u8], call: &RpcCall<'_>, timeout: Duration) -> Result<Answer, Fault> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        if self.stdin.is_none() {
            return Err(Fault::Ended);
        }
        self.last_id += 1;
        let id = self.last_id;
        let request = rpc::request_line(id, &call.method, params);
        let mut out = Outbox { request_end: request.len(), bytes: request, sent: 0 };
        let mut writable = true;
        loop {
            // Every whole line read so far, in order.
            loop {
                // A worker flooding service requests must not outlive its
                // deadline: each served request is ready at once, so the
                // deadline is checked here too, not only where we wait.
                if deadline.is_elapsed() {
                    return Err(Fault::Timeout(timeout));
                }
                if out.unsent().len() > MAX_UNSENT {
                    return Err(Fault::Stray(format!(
                        "it sends service requests without reading the answers (over {} MiB unread)",
                        MAX_UNSENT / (1024 * 1024)
                    )));
                }
                let line = match self.cursor.next_line(&mut self.buf, MAX_REPLY, self.eof) {
                    Next::Line(line) => line,
                    Next::TooLong => return Err(Fault::TooLong),
                    Next::NeedMore if self.eof => return Err(Fault::Ended),
                    Next::NeedMore => break,
                };
                match rpc::classify(&line) {
                    Incoming::Response { id: answered, outcome } if answered.as_u64() == Some(id) => {
                        if out.sent < out.request_end {
                            return Err(Fault::Stray("it answered before reading the whole request".to_owned()));
                        }
                        if out.pending() {
                            // Our answers to its requests are not all
                            // written: its stdin would start mid-line.
                            tracing::debug!(
                                plugin = call.plugin,
                                "the worker answered before reading every service reply; replacing it"
                            );
                            self.retired = true;
                        }
                        self.shrink();
                        return Ok(match outcome {
                            Ok(value) => Answer::Reply(value),
                            Err(error) => Answer::Refused(error),
                        });
                    }
                    Incoming::Response { id: other, .. } => {
                        let why = format!("a response to id {other}, while the call pending is id {id}");
                        self.junk.note(call.plugin, call.hook, &why, &line::preview(&line));
                    }
                    Incoming::Request { id: asked, method, params } => {
                        let answer = tokio::select! {
                            answer = serve(call, &method, params) => answer,
                            () = &mut deadline => return Err(Fault::Timeout(timeout)),
                        };
                        out.push(&match answer {
                            Ok(value) => rpc::result_line(&asked, &value),
                            Err(e) => rpc::error_line(&asked, e.code, &e.message),
                        });
                        // Let the runtime's other tasks (and timers) run.
                        tokio::task::consume_budget().await;
                    }
                    Incoming::Notification { method, params } => {
                        if call.services.is_none() && method == "log" {
                            let message = params.get("message").and_then(Value::as_str).unwrap_or_default();
                            tracing::info!(target: "plugin_log", plugin = call.plugin, "{message}");
                            continue;
                        }
                        let result = tokio::select! {
                            result = serve(call, &method, params) => result,
                            () = &mut deadline => return Err(Fault::Timeout(timeout)),
                        };
                        if let Err(e) = result {
                            tracing::debug!(plugin = call.plugin, "the worker's `{method}` notification failed: {e}");
                        }
                    }
                    Incoming::Junk { why, preview } => self.junk.note(call.plugin, call.hook, why, &preview),
                }
            }
            self.buf.reserve(CHUNK);
            let stdin = &mut self.stdin;
            let unsent = out.unsent();
            let event = tokio::select! {
                r = async { match stdin { Some(s) => s.write(unsent).await, None => Ok(0) } },
                    if writable && !unsent.is_empty() => Event::Wrote(r),
                r = self.stdout.read_buf(&mut self.buf) => Event::Read(r),
                () = self.exit.exited(), if self.exit.available() && !self.eof => Event::Exited,
                () = &mut deadline => return Err(Fault::Timeout(timeout)),
            };
            match event {
                Event::Wrote(Ok(n)) if n > 0 => out.sent += n,
                Event::Wrote(r) => {
                    // It stopped reading (most likely it is exiting): what
                    // it wrote, or its end, decides.
                    tracing::debug!("writing to the worker failed: {r:?}");
                    writable = false;
                }
                Event::Read(Ok(0) | Err(_)) => {
                    self.eof = true;
                    writable = false;
                }
                Event::Read(Ok(_)) => {}
                Event::Exited => {
                    drain_exited(&self.stdout, &mut self.buf);
                    self.eof = true;
                    writable = false;
                }
            }
        }
    }

    /// The `line` exchange: one request line, one reply line.
    async fn exchange_line(&mut self, request: &[u8], timeout: Duration) -> Result<Value, Fault> {
        // Once more right before the write (the checkout's check may be a
        // while ago): a line written since is never this request's answer.
        if !self.eof
            && let Waiting::Ended =
                take_waiting(std::os::fd::AsRawFd::as_raw_fd(&self.stdout), &mut self.buf, MAX_REPLY + 1)
        {
            self.eof = true;
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let Some(stdin) = self.stdin.as_mut() else { return Err(Fault::Ended) };
        let stdin_fd = std::os::fd::AsRawFd::as_raw_fd(stdin);
        let write = async move {
            stdin.write_all(request).await?;
            stdin.flush().await
        };
        tokio::pin!(write);
        let mut writing = true;
        loop {
            match self.cursor.scan(&mut self.buf, MAX_REPLY, self.eof) {
                Scan::Reply(_) if writing || unread_in_pipe(stdin_fd) > 0 => {
                    // Written before the worker read the request: not its
                    // answer (a late line of the previous call, or a guess).
                    return Err(Fault::Stray("it answered before reading the whole request".to_owned()));
                }
                Scan::Reply(value) => {
                    self.shrink();
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
                    drain_exited(&self.stdout, &mut self.buf);
                    self.eof = true;
                    writing = false;
                }
                () = &mut deadline => return Err(Fault::Timeout(timeout)),
            }
        }
    }

    /// Before a request: in the `line` protocol nothing may be waiting on
    /// stdout (a second line to the previous request would be read as this
    /// one's reply): `Stray`. With `keep_lines` (`jsonrpc`: every line says
    /// what it is) what waits stays for the exchange to read. `Ended`: it
    /// exited (or closed stdout) since its last reply.
    ///
    /// The pipe is read by system call, not through the runtime's readiness
    /// (which may not have seen a line written an instant ago): whatever the
    /// worker wrote before this check is seen by it.
    pub(super) fn check_quiet(&mut self, keep_lines: bool) -> Result<(), Fault> {
        if !self.eof {
            match take_waiting(std::os::fd::AsRawFd::as_raw_fd(&self.stdout), &mut self.buf, MAX_REPLY + 1) {
                Waiting::Open => {}
                Waiting::Ended => self.eof = true,
            }
        }
        if keep_lines {
            return if self.eof { Err(Fault::Ended) } else { Ok(()) };
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
            Fault::Stray(what) => invalid(format!("the worker broke the protocol: {what}")),
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
            // Awaited: a stopped worker's TMPDIR is gone when `stop` returns
            // (or, the runtime shutting down, when the unrun task is dropped).
            let removal = Removal(dir);
            let _ = tokio::task::spawn_blocking(move || drop(removal)).await;
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
            remove_tree_soon(dir);
        }
    }
}

/// The worker exited: take what its stdout pipe holds (bounded), without
/// waiting for a grandchild that may keep it open.
fn drain_exited(stdout: &ChildStdout, buf: &mut Vec<u8>) {
    drain(std::os::fd::AsRawFd::as_raw_fd(stdout), |chunk| {
        buf.extend_from_slice(chunk);
        buf.len() <= MAX_REPLY + 1
    });
}

/// Whether a worker's stdout pipe is still open after [`take_waiting`].
enum Waiting {
    Open,
    /// End of file, or the pipe failed.
    Ended,
}

/// Takes what the pipe `fd` holds now into `buf` (up to `cap` bytes in all),
/// by `poll(2)` with no wait and `read(2)`: never blocks, whatever the fd's
/// mode, and sees bytes the runtime's readiness has not caught up with.
fn take_waiting(fd: std::os::fd::RawFd, buf: &mut Vec<u8>, cap: usize) -> Waiting {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < cap {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
        if ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if ready <= 0 || pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
            return Waiting::Open;
        }
        let want = chunk.len().min(cap - buf.len());
        // SAFETY: `fd` is the worker's open stdout pipe; the buffer is valid for `want` bytes.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), want) };
        match n {
            0 => return Waiting::Ended,
            n if n > 0 => buf.extend_from_slice(&chunk[..n as usize]),
            _ => match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => {}
                std::io::ErrorKind::WouldBlock => return Waiting::Open,
                _ => return Waiting::Ended,
            },
        }
    }
    Waiting::Open
}

/// Bytes the host wrote to a worker's stdin pipe that it has not read yet
/// (`FIONREAD` on the pipe); 0 when that cannot be known (not a pipe).
fn unread_in_pipe(fd: std::os::fd::RawFd) -> usize {
    // SAFETY: fstat and ioctl(FIONREAD) on an open fd, writing into locals.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return 0;
        }
        let mut n: libc::c_int = 0;
        if libc::ioctl(fd, libc::FIONREAD, &mut n) != 0 {
            return 0;
        }
        usize::try_from(n).unwrap_or(0)
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
