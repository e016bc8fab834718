//! A pid namespace per process: the hook runs in its own pid namespace
//! with its own `/proc`, so it sees only its own processes (not the
//! daemon's argv with a token on it, not other plugins' hooks), and when it
//! exits the kernel kills everything left in the namespace — a `setsid` +
//! double-fork daemon included — with no cgroup; the cost is two forks.
//!
//! `unshare(CLONE_NEWPID)` moves only the *children* of the caller, so the
//! forked child of `Command::spawn` (the "keeper", whose pid the host
//! knows) unshares and forks the namespace's init (pid 1), which sets up
//! the namespace's `/proc` and forks the hook (pid 2) that returns to
//! `exec`. The init reaps orphans and, when the hook ends, passes its wait
//! status to the keeper through a pipe and exits — taking every process
//! left in the namespace with it. The keeper and the init close every fd
//! (std's exec-error pipe included, so `spawn` returns as soon as the hook
//! execs); the keeper leaves with the hook's status — the same exit code,
//! or the same signal. Killing the keeper's process group kills all three
//! (they stay in the group).
//!
//! Everything here runs between fork and exec: raw syscalls only.

use std::io;

/// Runs in the child after `unshare(CLONE_NEWPID | CLONE_NEWNS)`: forks the
/// namespace's init. Returns in the init (pid 1 of the new namespace) with
/// the write end of the status pipe; never returns in the keeper.
///
/// # Safety
/// Only between fork and exec, in a single-threaded child.
pub unsafe fn split() -> io::Result<libc::c_int> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fork in a single-threaded child; the keeper only makes
    // syscalls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The init: die with the keeper (a keeper killed alone must not
        // leave its namespace running).
        // SAFETY: prctl and close on this process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::close(fds[0]);
        }
        return Ok(fds[1]);
    }
    // SAFETY: the keeper's whole remaining life: syscalls only.
    unsafe { keep(pid, fds[0]) }
}

/// Keeps only `fd` open (and stops a stray signal from ending the process).
///
/// # Safety
/// Between fork and exec.
unsafe fn quiet_except(fd: libc::c_int) {
    // SAFETY: signal mask and close_range on this process.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        if fd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
    }
}

/// Waits for `pid`, returning its wait status.
///
/// # Safety
/// Between fork and exec.
unsafe fn wait_for(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waitpid into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status;
        }
        // SAFETY: reading errno.
        if r < 0 && unsafe { *libc::__errno_location() } != libc::EINTR {
            // SAFETY: leaving.
            unsafe { libc::_exit(127) };
        }
    }
}

/// The keeper (outside the namespace, the process the host started): no
/// fd but the status pipe, every signal blocked, waits for the init, then
/// ends as the hook ended — the same exit code, or the same signal.
///
/// # Safety
/// Between fork and exec; never returns.
unsafe fn keep(init: libc::pid_t, status_pipe: libc::c_int) -> ! {
    // SAFETY: syscalls on this process only.
    unsafe {
        quiet_except(status_pipe);
        let mut status = wait_for(init);
        let mut raw = [0u8; 4];
        if libc::read(status_pipe, raw.as_mut_ptr().cast(), 4) == 4 {
            status = i32::from_ne_bytes(raw);
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let signal = if libc::WIFSIGNALED(status) { libc::WTERMSIG(status) } else { libc::SIGKILL };
        libc::signal(signal, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal);
    }
}

/// In the init, once the namespace is set up: forks the hook. Returns in
/// the hook (pid 2); the init reaps every orphan of the namespace until the
/// hook ends, hands its wait status to the keeper and exits — and with it,
/// by the kernel's rule for a pid namespace's init, everything left.
///
/// The hook is not pid 1 on purpose: pid 1 ignores signals it has no
/// handler for (`kill -TERM $$`, `abort()` would not end it) and would have
/// to reap orphans its runtime never waits for.
///
/// # Safety
/// Between fork and exec, in the init.
pub unsafe fn fork_hook(status_pipe: libc::c_int, hook_id: Option<u32>, wipe: &Wipe) -> io::Result<()> {
    // SAFETY: fork in the single-threaded init.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: prctl and close on this process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::close(status_pipe);
        }
        return Ok(());
    }
    // SAFETY: the init's whole remaining life: syscalls only.
    unsafe {
        quiet_except(status_pipe);
        // The init is a copy of the daemon that never execs: the hook sees
        // it as pid 1. Its `/proc/1/cmdline` and `environ` would show the
        // daemon's (a `--token` among them): wiped, and the rest of its
        // memory kept from the hook (not dumpable).
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        wipe.apply();
        // Nothing the init keeps is worth having: no capability, the hook's uid.
        let _ = super::drop_capabilities(hook_id);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        let mut status = 0;
        loop {
            let r = libc::waitpid(-1, &mut status, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let raw = status.to_ne_bytes();
        libc::write(status_pipe, raw.as_ptr().cast(), 4);
        libc::_exit(0);
    }
}

/// The daemon's argument and environment areas (from `/proc/self/stat`),
/// found once in the parent: the init overwrites its copies.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wipe {
    ranges: [(usize, usize); 2],
}

impl Wipe {
    /// This process's areas; empty when they cannot be read.
    pub fn of_this_process() -> Wipe {
        static WIPE: std::sync::OnceLock<Wipe> = std::sync::OnceLock::new();
        *WIPE.get_or_init(|| {
            let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return Wipe::default() };
            // Fields after the command name (which may hold spaces): the
            // first one there is field 3; arg_start..env_end are 48..=51.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return Wipe::default() };
            let fields: Vec<usize> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
            let field = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
            let (a0, a1, e0, e1) = (field(48), field(49), field(50), field(51));
            let ok = |s: usize, e: usize| if s != 0 && e > s && e - s < (1 << 24) { (s, e) } else { (0, 0) };
            Wipe { ranges: [ok(a0, a1), ok(e0, e1)] }
        })
    }

    /// Zeroes the areas in this (forked) process.
    ///
    /// # Safety
    /// Only in a forked child that never returns to Rust code using its
    /// arguments or environment.
    unsafe fn apply(&self) {
        for &(start, end) in &self.ranges {
            if start != 0 {
                // SAFETY: the process's own argument/environment pages (on
                // its stack, writable), copied on write from the daemon.
                unsafe { libc::memset(start as *mut libc::c_void, 0, end - start) };
            }
        }
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
