//! A one-shot hook's pipes while it runs: feed stdin, read stdout and stderr
//! concurrently under the cap, stop at its exit, its deadline or the cap;
//! then take what the pipes hold without waiting. Shared by a spawned call
//! (`oneshot.rs`) and a call through the fork server (`forkserver/call.rs`).
//!
//! It never kills, signals or reaps anything: the caller, who knows the
//! process and when signalling it is safe, does that on what [`pump`]
//! returns. It never blocks: the pipes are read by the runtime, the final
//! drain with non-blocking reads.

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::protocol::HookName;
use crate::runner::HookError;

/// How much of stderr is kept for an error message.
const STDERR_TAIL: usize = 4096;

/// A stderr line longer than this is logged in pieces.
const MAX_LOG_LINE: usize = 16 * 1024;

/// What a call has read of its hook's output so far.
pub(super) struct Capture<'a> {
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: StderrLog<'a>,
    cap: usize,
    out_open: bool,
    err_open: bool,
}

/// Why [`pump`] returned before the hook exited: the caller kills it.
pub(super) enum Stopped {
    /// A stream went over the cap (the error says which).
    Cap(HookError),
    Timeout,
    /// Waiting for the exit failed.
    Io(std::io::Error),
}

impl<'a> Capture<'a> {
    pub(super) fn new(plugin: &'a str, hook: HookName, cap: usize) -> Self {
        Capture { stdout: Vec::new(), stderr: StderrLog::new(plugin, hook), cap, out_open: true, err_open: true }
    }

    fn over_cap(&self, stream: &'static str) -> HookError {
        HookError::OutputCap { stream, cap: self.cap }
    }

    /// Takes what the pipes hold now, without waiting and never more than
    /// the cap (something outside the hook may keep writing), then checks
    /// the cap: the hook has exited, so all it wrote is there.
    pub(super) fn drain_rest(&mut self, stdout: RawFd, stderr: RawFd) -> Result<(), HookError> {
        let cap = self.cap;
        if self.out_open {
            let out = &mut self.stdout;
            drain(stdout, |chunk| {
                out.extend_from_slice(chunk);
                out.len() <= cap
            });
        }
        if self.err_open {
            let err = &mut self.stderr;
            drain(stderr, |chunk| {
                err.feed(chunk);
                err.total <= cap
            });
        }
        if self.stdout.len() > cap {
            return Err(self.over_cap("stdout"));
        }
        if self.stderr.total > cap {
            return Err(self.over_cap("stderr"));
        }
        Ok(())
    }
}

/// Feeds `request` to the hook's stdin and reads its stdout and stderr into
/// `capture` until `exited` resolves (its value is returned), the deadline
/// passes, or a stream goes over the cap.
pub(super) async fn pump<W, O, E, T>(
    capture: &mut Capture<'_>,
    stdin: W,
    request: &[u8],
    stdout: &mut O,
    stderr: &mut E,
    exited: impl Future<Output = std::io::Result<T>>,
    mut deadline: Pin<&mut tokio::time::Sleep>,
) -> Result<T, Stopped>
where
    W: AsyncWrite + Unpin,
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let write = feed(stdin, request);
    tokio::pin!(write);
    tokio::pin!(exited);
    let mut out_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 16 * 1024];
    let mut writing = true;
    loop {
        tokio::select! {
            () = &mut write, if writing => writing = false,
            r = stdout.read(&mut out_buf), if capture.out_open => match r {
                Ok(0) | Err(_) => capture.out_open = false,
                Ok(n) => {
                    capture.stdout.extend_from_slice(&out_buf[..n]);
                    if capture.stdout.len() > capture.cap {
                        return Err(Stopped::Cap(capture.over_cap("stdout")));
                    }
                }
            },
            r = stderr.read(&mut err_buf), if capture.err_open => match r {
                Ok(0) | Err(_) => capture.err_open = false,
                Ok(n) => {
                    capture.stderr.feed(&err_buf[..n]);
                    if capture.stderr.total > capture.cap {
                        return Err(Stopped::Cap(capture.over_cap("stderr")));
                    }
                }
            },
            r = &mut exited => return r.map_err(Stopped::Io),
            () = &mut deadline => return Err(Stopped::Timeout),
        }
    }
}

/// Writes the request and closes stdin. A hook that never reads its stdin
/// (EPIPE) is fine: its answer decides.
async fn feed(mut stdin: impl AsyncWrite + Unpin, bytes: &[u8]) {
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

    pub(super) fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.emit(&line);
        }
        let start = self.tail.len().saturating_sub(STDERR_TAIL);
        String::from_utf8_lossy(&self.tail[start..]).trim().to_owned()
    }
}
