//! How a hook process ended: human labels (LibreFang's wording), and
//! telling *that* it has ended without reaping it, so its process group can
//! still be killed safely (a pid is not reused before it is reaped).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// `exit code N`, `OOM-killed or SIGKILL (signal 9)`, `SIGSEGV — segfault
/// (signal 11)`, `SIGSYS — disallowed syscall, seccomp triggered (signal 31)`,
/// `killed by signal N`; shells report signal deaths as 128+N, labelled alike.
pub fn label(status: ExitStatus) -> String {
    if let Some(signal) = status.signal() {
        return match signal {
            9 => format!("OOM-killed or SIGKILL (signal {signal})"),
            11 => format!("SIGSEGV — segfault (signal {signal})"),
            31 => format!("SIGSYS — disallowed syscall, seccomp triggered (signal {signal})"),
            _ => format!("killed by signal {signal}"),
        };
    }
    match status.code() {
        Some(137) => "OOM-killed or SIGKILL (exit 137)".to_owned(),
        Some(139) => "SIGSEGV — segfault (exit 139)".to_owned(),
        Some(159) => "SIGSYS — disallowed syscall, seccomp triggered (exit 159)".to_owned(),
        Some(code) => format!("exit code {code}"),
        None => "unknown exit status".to_owned(),
    }
}

/// Tells when a child has exited **without reaping it** (its pidfd turns
/// readable). Without pidfd support (Linux < 5.3) it is not
/// [`available`](Self::available) and the caller falls back (waiting,
/// which reaps, or polling [`exited_unreaped`]).
#[derive(Default)]
pub(super) struct ExitWatch(Option<tokio::io::unix::AsyncFd<OwnedFd>>);

impl ExitWatch {
    pub(super) fn new(pid: libc::pid_t) -> Self {
        if pid <= 0 {
            return ExitWatch(None);
        }
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return ExitWatch(None);
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        Self::from_pidfd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// Watches through `pidfd` (one `clone(CLONE_PIDFD)` returned, say).
    /// Called inside the runtime.
    pub(super) fn from_pidfd(pidfd: OwnedFd) -> Self {
        // SAFETY: the OwnedFd is moved into the AsyncFd, so it stays open and
        // the same for the AsyncFd's whole life.
        let registered =
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        ExitWatch(registered.ok())
    }

    pub(super) fn available(&self) -> bool {
        self.0.is_some()
    }

    /// Returns once the child has exited; never when not
    /// [`available`](Self::available).
    pub(super) async fn exited(&self) {
        match &self.0 {
            Some(fd) => {
                let _ = fd.readable().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// True once child `pid` has exited (or cannot be waited for), without
/// reaping it.
pub(super) fn exited_unreaped(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data (integers and a union of them): all
    // zeroes is a valid value, and waitid overwrites what it reports.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`, a local of the right type; it
    // takes no other pointer. WNOWAIT leaves the child waitable, WNOHANG
    // makes this a poll.
    let rc = unsafe {
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
    };
    // SAFETY: si_pid is set by waitid when a child changed state, 0 otherwise.
    rc != 0 || unsafe { info.si_pid() } != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        let signal = ExitStatus::from_raw;
        assert_eq!(label(exit(3)), "exit code 3");
        assert_eq!(label(exit(137)), "OOM-killed or SIGKILL (exit 137)");
        assert_eq!(label(signal(9)), "OOM-killed or SIGKILL (signal 9)");
        assert_eq!(label(signal(11)), "SIGSEGV — segfault (signal 11)");
        assert_eq!(label(signal(31)), "SIGSYS — disallowed syscall, seccomp triggered (signal 31)");
        assert_eq!(label(signal(15)), "killed by signal 15");
    }
}
