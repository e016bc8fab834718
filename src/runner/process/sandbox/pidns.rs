//! A pid namespace per process: the hook is pid 1 of its own namespace,
//! with its own `/proc`, so it sees only its own processes (not the
//! daemon's argv with a token on it, not other plugins' hooks), and when it
//! exits the kernel kills everything left in the namespace — a `setsid` +
//! double-fork daemon included — with no cgroup and no per-call cost
//! beyond one fork.
//!
//! `unshare(CLONE_NEWPID)` moves only the *children* of the caller, so the
//! forked child of `Command::spawn` (the "keeper", whose pid the host
//! knows) unshares and forks once more: the grandchild returns to `exec`
//! the hook as pid 1; the keeper closes every fd (std's exec-error pipe
//! included, so `spawn` returns as soon as the hook execs), waits for the
//! hook and leaves with its status — the same exit code, or the same
//! signal. Killing the keeper's process group kills the hook too (it
//! stays in the group).
//!
//! Everything here runs between fork and exec: raw syscalls only.

use std::io;

/// Runs in the child after `unshare(CLONE_NEWPID | CLONE_NEWNS)`: forks the
/// hook. Returns in the hook (pid 1 of the new namespace); never returns in
/// the keeper.
///
/// # Safety
/// Only between fork and exec, in a single-threaded child.
pub unsafe fn split() -> io::Result<()> {
    // SAFETY: fork in a single-threaded child; the keeper only makes
    // syscalls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The hook: die with the keeper (a keeper killed alone must not
        // leave its namespace running).
        // SAFETY: prctl on this process.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        return Ok(());
    }
    // SAFETY: the keeper's whole remaining life: syscalls only.
    unsafe { keep(pid) }
}

/// The keeper: no fds, every signal blocked (a stray one must not leave the
/// hook without its parent), waits for the hook, mirrors its end.
///
/// # Safety
/// Between fork and exec; never returns.
unsafe fn keep(hook: libc::pid_t) -> ! {
    // SAFETY: signal mask, close_range, waitpid, kill, _exit: all on this process.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut status = 0;
        loop {
            let r = libc::waitpid(hook, &mut status, 0);
            if r == hook {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let signal = libc::WTERMSIG(status);
        libc::signal(signal, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal);
    }
}

/// In the hook, first thing: nothing it mounts reaches the host
/// (everything private), and `/proc` shows this namespace.
///
/// # Safety
/// Between fork and exec, in the new mount namespace.
pub unsafe fn mount_proc() -> io::Result<()> {
    // SAFETY: mount(2) with valid NUL-terminated strings.
    unsafe {
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
