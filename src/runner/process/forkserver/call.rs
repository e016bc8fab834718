//! One hook call through the fork server: hand the call over, feed stdin,
//! read both streams under the cap, take the exit status the server sends.
//!
//! Invariants, whatever the hook or the server does:
//! - the hook process is killed when the call ends by any path (deadline,
//!   cap, a dropped future): `pidfd_send_signal` on the pidfd the server
//!   sent, which can never hit a reused pid; closing the call's socket makes
//!   the server kill the hook's group and sweep what it left;
//! - stdout and stderr are read concurrently with feeding stdin;
//! - each stream is capped as bytes arrive;
//! - a call the server never started is reported as [`Unavailable`] (the
//!   caller spawns it); once it started, the call's result is the hook's.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::super::capture::{self, Capture, Stopped};
use super::super::oneshot::Finished;
use super::{Unavailable, hand_over, wire};
use crate::protocol::HookName;
use crate::runner::HookError;

/// Everything one call through the fork server needs.
pub(in crate::runner::process) struct ForkCall<'a> {
    pub control: &'a OwnedFd,
    pub script: &'a Path,
    /// `sys.argv` (the script path, as a spawned interpreter would have it).
    pub argv: Vec<OsString>,
    /// The whole environment, in spec order (later entries win).
    pub env: &'a [(OsString, OsString)],
    pub stdin: &'a [u8],
    pub timeout: Duration,
    pub output_cap: usize,
    pub plugin: &'a str,
    pub hook: HookName,
    /// The `cgroup.procs` files of the call's own cgroup (empty: none): the
    /// child waits until the host has moved it in.
    pub cgroup: &'a [OwnedFd],
}

/// Kills the hook when dropped: every exit path of a call. After the hook
/// was reaped the pidfd refers to no process and the signal is a no-op.
struct HookKill(Option<OwnedFd>);

impl HookKill {
    fn kill(&self) {
        if let Some(fd) = &self.0 {
            // SAFETY: pidfd_send_signal(2) on a pidfd we own; no memory passed.
            unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<u8>(), 0);
            }
        }
    }
}

impl Drop for HookKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The call's header: script, argv and environment (deduplicated as
/// `spawn` would: the last entry of a name, at its position).
fn header(call: &ForkCall<'_>) -> Result<Vec<u8>, Unavailable> {
    let text = |s: &std::ffi::OsStr| {
        s.to_str()
            .map(str::to_owned)
            .ok_or_else(|| Unavailable::Unfit(format!("`{}` is not UTF-8", s.to_string_lossy())))
    };
    let mut last = std::collections::HashMap::new();
    for (i, (k, _)) in call.env.iter().enumerate() {
        last.insert(k.as_bytes(), i);
    }
    let mut env = Vec::with_capacity(last.len());
    for (i, (k, v)) in call.env.iter().enumerate() {
        if last.get(k.as_bytes()) == Some(&i) {
            env.push(serde_json::json!([text(k)?, text(v)?]));
        }
    }
    let argv = call.argv.iter().map(|a| text(a)).collect::<Result<Vec<_>, _>>()?;
    let json = serde_json::json!({
        "script": text(call.script.as_os_str())?,
        "argv": argv,
        "env": env,
        "go": !call.cgroup.is_empty(),
    });
    serde_json::to_vec(&json).map_err(|e| Unavailable::Unfit(e.to_string()))
}

/// Waits for the next message on the call's socket (empty at end of stream).
async fn next_message(socket: &AsyncFd<OwnedFd>) -> std::io::Result<wire::Received> {
    loop {
        let mut ready = socket.readable().await?;
        match wire::recv(socket.get_ref()) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
            other => return other,
        }
    }
}

/// Runs the call. The outer error: the server did not start the hook (spawn
/// it instead); the inner result is the hook's, as `oneshot::run` gives it.
pub(in crate::runner::process) async fn run(call: ForkCall<'_>) -> Result<Result<Finished, HookError>, Unavailable> {
    let header = header(&call)?;
    let io = |e: std::io::Error| Unavailable::Start(e.to_string());
    let (mine, theirs) = wire::socket_pair().map_err(io)?;
    let (in_r, in_w) = super::super::pipe().map_err(io)?;
    let (out_r, out_w) = super::super::pipe().map_err(io)?;
    let (err_r, err_w) = super::super::pipe().map_err(io)?;
    hand_over(call.control, &header, &[&theirs, &in_r, &out_w, &err_w])?;
    drop((theirs, in_r, out_w, err_w));
    // Without a cgroup to join first, the hook may start as soon as the
    // server has passed the call on: its request is in the pipe by then (as
    // much as the pipe takes), not written once the server's answer came
    // back — and stdin is closed already when all of it fitted.
    let fed = if call.cgroup.is_empty() { prefeed(&in_w, call.stdin) } else { 0 };
    let stdin = Unfed { pipe: (fed < call.stdin.len()).then_some(in_w), from: fed };
    // SAFETY: the OwnedFd is moved into the AsyncFd, so it stays open and
    // the same for the AsyncFd's whole life. (Called inside the runtime.)
    let socket = unsafe { AsyncFd::register_with_interest(mine, tokio::io::Interest::READABLE) }
        .map_err(|e| io(e.into_parts().1))?;

    let deadline = tokio::time::sleep(call.timeout);
    tokio::pin!(deadline);
    // The hook's pidfd, or why the server did not start it.
    let started = tokio::select! {
        m = next_message(&socket) => m.map_err(Unavailable::Gone)?,
        () = &mut deadline => return Ok(Err(HookError::Timeout { secs: call.timeout.as_secs() })),
    };
    let reply: serde_json::Value = serde_json::from_slice(&started.bytes)
        .map_err(|_| Unavailable::Gone(std::io::Error::other("no answer to the call")))?;
    if let Some(reason) = reply.get("declined").and_then(|d| d.as_str()) {
        return Err(Unavailable::Declined(reason.to_owned()));
    }
    if reply.get("pid").is_none() {
        return Err(Unavailable::Gone(std::io::Error::other(format!("unexpected answer {reply}"))));
    }
    let hook = HookKill(started.fds.into_iter().next());
    if !call.cgroup.is_empty() {
        // Into the call's cgroup before it runs the script, or not at all
        // (dropping `hook` kills it): never unconfined.
        join_cgroup(&hook, call.cgroup)
            .and_then(|()| wire::send(socket.get_ref().as_raw_fd(), b"g", &[]))
            .map_err(|e| Unavailable::Unfit(format!("cannot move the hook into its cgroup: {e}")))?;
    }
    Ok(drive(call, socket, hook, deadline.as_mut(), stdin, out_r, err_r).await)
}

/// Writes as much of `bytes` to the pipe `fd` as it takes without waiting;
/// returns how much. (The rest is fed as the hook reads.)
fn prefeed(fd: &OwnedFd, bytes: &[u8]) -> usize {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl(2) on a pipe fd we own; O_NONBLOCK only changes how it waits.
    let nonblocking = unsafe {
        let flags = libc::fcntl(raw, libc::F_GETFL);
        flags >= 0 && libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if !nonblocking {
        return 0;
    }
    let mut written = 0;
    while written < bytes.len() {
        let rest = &bytes[written..];
        // SAFETY: write(2) of a live slice to a pipe fd we own.
        let n = unsafe { libc::write(raw, rest.as_ptr().cast(), rest.len()) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => written += n,
            _ => break, // full (EAGAIN), or the reader is gone: the call's own end says
        }
    }
    written
}

/// Writes the hook's pid (in the host's pid namespace: the pidfd's, as
/// this process's `/proc` shows it) to each `cgroup.procs`.
fn join_cgroup(hook: &HookKill, procs: &[OwnedFd]) -> std::io::Result<()> {
    let Some(pidfd) = &hook.0 else { return Err(std::io::Error::other("the server sent no pidfd")) };
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .map(str::trim)
        .filter(|p| p.parse::<u32>().is_ok_and(|p| p > 0))
        .ok_or_else(|| std::io::Error::other("the hook's pid is not in its pidfd's fdinfo"))?;
    for fd in procs {
        // SAFETY: write(2) of a local buffer to an fd we own.
        let n = unsafe { libc::write(fd.as_raw_fd(), pid.as_ptr().cast(), pid.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The hook's stdin still to write: the pipe (none when all of the request
/// fitted before the call started: closed then) and where the rest starts.
struct Unfed {
    pipe: Option<OwnedFd>,
    from: usize,
}

/// The started call to its end.
async fn drive(
    call: ForkCall<'_>,
    socket: AsyncFd<OwnedFd>,
    hook: HookKill,
    mut deadline: std::pin::Pin<&mut tokio::time::Sleep>,
    unfed: Unfed,
    out_r: OwnedFd,
    err_r: OwnedFd,
) -> Result<Finished, HookError> {
    let stdin: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match unfed.pipe {
        Some(fd) => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        None => Box::new(tokio::io::sink()),
    };
    let mut stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(out_r)?;
    let mut stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(err_r)?;
    let mut capture = Capture::new(call.plugin, call.hook, call.output_cap);
    // The server sends the wait status once it has reaped the hook.
    let exited = async {
        let m = next_message(&socket).await?;
        Ok(serde_json::from_slice::<serde_json::Value>(&m.bytes)
            .ok()
            .and_then(|v| v.get("status").and_then(serde_json::Value::as_i64))
            .and_then(|s| i32::try_from(s).ok()))
    };
    let rest = call.stdin.get(unfed.from..).unwrap_or_default();
    let pumped = capture::pump(&mut capture, stdin, rest, &mut stdout, &mut stderr, exited, deadline.as_mut()).await;
    let status = match pumped {
        Ok(status) => status,
        Err(Stopped::Cap(e)) => {
            hook.kill();
            return Err(e);
        }
        Err(Stopped::Io(e)) => return Err(HookError::Io(e)),
        Err(Stopped::Timeout) => {
            hook.kill();
            return Err(HookError::Timeout { secs: call.timeout.as_secs() });
        }
    };
    // The server has reaped the hook, killed its group and what it left:
    // everything it wrote is in the pipes. Take it without waiting, capped.
    capture.drain_rest(stdout.as_raw_fd(), stderr.as_raw_fd())?;
    let Some(raw) = status else {
        return Err(HookError::Exit {
            label: "the fork server went away before the hook's status".into(),
            code: None,
            stderr: capture.stderr.finish(),
        });
    };
    drop(hook);
    Ok(Finished {
        status: std::process::ExitStatus::from_raw(raw),
        stdout: capture.stdout,
        stderr_tail: capture.stderr.finish(),
    })
}
