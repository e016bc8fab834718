//! A hook's processes tied to the ctxhost that started them: when ctxhost
//! is gone — whatever way it died, `SIGKILL` included, which runs no code of
//! its own — nothing the hook started outlives it.
//!
//! A parent-death signal cannot carry this alone: `PR_SET_PDEATHSIG` fires
//! when the *thread* that forked the child ends, and ctxhost forks from
//! tokio threads (blocking-pool threads end when idle). So a process of the
//! hook's own, started single-threaded, watches ctxhost through a pidfd
//! opened in ctxhost ([`host_pidfd`], readable once ctxhost has exited)
//! beside waiting for the hook:
//!
//! - with a pid namespace, the namespace's init ([`super::pidns`]) watches:
//!   when ctxhost is gone it exits, and the kernel kills everything left in
//!   the namespace (a `setsid` + double-fork daemon included). The hook
//!   cannot signal its init, nor see the keeper outside;
//! - without one (no user namespaces for an unprivileged daemon, say), and
//!   for the operator's trusted plugin (no sandbox layer, tethered all the
//!   same), the process ctxhost started stays outside as the keeper
//!   ([`split`]): a child subreaper, so whatever the hook forks and leaves
//!   comes to it rather than to the machine's init; the hook dies with it
//!   (`PR_SET_PDEATHSIG`, reliable here: the keeper is single-threaded).
//!   When ctxhost is gone, or the hook ends, it kills its whole tree
//!   ([`kill_tree`]). A trusted one-shot hook's keeper is not forked but
//!   cloned sharing ctxhost's memory ([`super::shared`]); from
//!   [`start_and_keep`] on it is the same keeper.
//!
//! What remains without a pid namespace: a hook running as the daemon's own
//! user on a kernel without Landlock's signal scoping (Linux < 6.12) can
//! kill its keeper after clearing its own parent-death signal; without a
//! readable `/proc/thread-self/children` the keeper kills only its process
//! group. Without pidfds (Linux < 5.3) nothing watches ctxhost.
//!
//! Everything here but [`host_pidfd`] runs between fork and exec: raw
//! syscalls only, no allocation. This module never decides whether a hook
//! is tethered (the confinement does), and never signals a process that is
//! not the keeper's own descendant (or, as a last resort, in its group).

use std::io;
use std::os::fd::RawFd;

use super::pidns;

/// ctxhost's own pidfd (close-on-exec; it turns readable when ctxhost has
/// exited), opened once; -1 where pidfds are missing. Called in ctxhost
/// before a fork: the forked child keeps a copy.
pub fn host_pidfd() -> RawFd {
    static HOST: std::sync::OnceLock<(u32, RawFd)> = std::sync::OnceLock::new();
    let &(pid, fd) = HOST.get_or_init(|| {
        let pid = std::process::id();
        // SAFETY: pidfd_open(2) on this process; the fd (or -1) is kept for
        // the whole life of the process, never closed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        (pid, RawFd::try_from(fd).unwrap_or(-1))
    });
    // A forked copy of ctxhost watches nothing with its parent's pidfd.
    if pid == std::process::id() { fd } else { -1 }
}

/// Reaps every child until `hook` ends and returns its wait status, or
/// `None` as soon as ctxhost is gone (`host` readable). Signals must be
/// blocked (SIGCHLD is taken through a signalfd). Without `host` or a
/// signalfd, only waits.
///
/// # Safety
/// Between fork and exec, in a single-threaded process.
pub(super) unsafe fn reap_watching(hook: libc::pid_t, host: RawFd) -> Option<libc::c_int> {
    // SAFETY: signal-set calls on a local, signalfd/waitpid/poll/read/close
    // on this process's own fds and children.
    unsafe {
        if host < 0 {
            return Some(pidns::reap_until(hook));
        }
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let sfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if sfd < 0 {
            return Some(pidns::reap_until(hook));
        }
        let done = |result| {
            libc::close(sfd);
            result
        };
        loop {
            // Everything that ended so far (a SIGCHLD after this loop wakes
            // the poll below: it stays pending for the signalfd).
            loop {
                let mut status = 0;
                let r = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if r == hook {
                    return done(Some(status));
                }
                if r > 0 {
                    continue;
                }
                if r < 0 && errno() == libc::EINTR {
                    continue;
                }
                if r < 0 {
                    // No child at all: the hook cannot be waited for.
                    libc::_exit(127);
                }
                break;
            }
            let mut fds = [
                libc::pollfd { fd: sfd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: host, events: libc::POLLIN, revents: 0 },
            ];
            if libc::poll(fds.as_mut_ptr(), 2, -1) < 0 {
                continue;
            }
            if fds[1].revents & libc::POLLNVAL != 0 {
                // Not a pidfd after all: nothing to watch.
                return done(Some(pidns::reap_until(hook)));
            }
            if fds[1].revents != 0 {
                return done(None);
            }
            let mut info = [0u8; 128];
            while libc::read(sfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
        }
    }
}

/// This thread's errno.
fn errno() -> libc::c_int {
    // SAFETY: reading the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Ends this process as the hook ended: the same exit code, or the same
/// signal (unblocked and reset to its default first).
///
/// # Safety
/// Between fork and exec; never returns.
pub(super) unsafe fn exit_like(status: libc::c_int) -> ! {
    // SAFETY: signal calls and _exit on this process.
    unsafe {
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

/// Without a pid namespace: this process (the one ctxhost started) becomes
/// the keeper and starts the hook — a `CLONE_VM | CLONE_VFORK` clone that
/// runs the last steps and execs by itself when the steps carry the exec
/// (never returning here), else a fork that returns `Ok` in the hook.
///
/// # Errors
/// The keeper could not be made (the hook must not run untethered).
///
/// # Safety
/// Between fork and exec, in a single-threaded child.
pub(super) unsafe fn split(steps: &super::ChildSteps) -> io::Result<()> {
    // SAFETY: the wipe in a process that never returns to code using argv
    // or environment (the hook execs with the steps' own, or std's
    // prepared, arguments); the rest as this function's own contract.
    unsafe {
        pidns::hide_daemon(&steps.wipe);
        start_and_keep(steps, true)
    }
}

/// The keeper's part once it runs: a child subreaper, it starts the hook
/// (the clone that execs by itself when the steps carry the exec; else, or
/// when that clone fails and `fork` allows it, a fork that returns `Ok` in
/// the hook) and keeps it ([`keep`], never returning).
///
/// # Errors
/// The hook could not be started (it must not run untethered).
///
/// # Safety
/// Between fork (or a clone sharing ctxhost's memory, [`super::shared`])
/// and exec, in a single-threaded keeper.
pub(super) unsafe fn start_and_keep(steps: &super::ChildSteps, fork: bool) -> io::Result<()> {
    extern "C" fn hook_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the keeper's steps and pid, alive while the
        // keeper is suspended (CLONE_VFORK) until this process execs or exits.
        unsafe {
            let (steps, keeper) = &*(arg as *const (&super::ChildSteps, libc::pid_t));
            die_with_parent(*keeper);
            steps.finish_and_exec()
        }
    }
    // SAFETY: prctl/clone/fork on this single-threaded process.
    unsafe {
        // Whatever the hook leaves comes to the keeper, not to the machine's init.
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let keeper = libc::getpid();
        if let Some(exec) = &steps.exec {
            let arg = (steps, keeper);
            // SAFETY: clone with a valid function, stack and argument (on
            // this frame: this process is suspended until the hook execs).
            let pid = libc::clone(
                hook_main,
                exec.stack_top() as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &arg as *const _ as *mut libc::c_void,
            );
            if pid > 0 {
                keep(pid, steps)
            }
            if !fork {
                return Err(io::Error::last_os_error());
            }
        }
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            die_with_parent(keeper);
            return Ok(());
        }
        keep(pid, steps)
    }
}

/// In the hook, first thing: `SIGKILL` when the keeper ends; gone at once
/// if it already has.
///
/// # Safety
/// Between fork and exec.
unsafe fn die_with_parent(keeper: libc::pid_t) {
    // SAFETY: prctl/getppid/_exit on this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != keeper {
            libc::_exit(127);
        }
    }
}

/// The keeper's life without a pid namespace (its copy of the daemon's
/// argv and environment already wiped): no fd but ctxhost's pidfd, every
/// signal blocked; waits for the hook (reaping what comes to it)
/// while ctxhost lives, kills the hook's whole tree, and ends as the hook
/// did — or, ctxhost gone, kills the tree and its own process group.
///
/// # Safety
/// Between fork and exec; never returns.
unsafe fn keep(hook: libc::pid_t, steps: &super::ChildSteps) -> ! {
    // SAFETY: syscalls on this process, its fds and its children.
    unsafe {
        pidns::quiet(&[steps.host]);
        match reap_watching(hook, steps.host) {
            Some(status) => {
                kill_tree();
                exit_like(status)
            }
            None => {
                if !kill_tree() {
                    // What /proc could not list: at least the process group
                    // (this process with it).
                    libc::kill(0, libc::SIGKILL);
                }
                libc::_exit(128 + libc::SIGKILL)
            }
        }
    }
}

/// Kills every descendant of this process (a child subreaper: orphans of
/// the tree come to it as their parents die): its children, listed in
/// `/proc/thread-self/children`, killed and reaped until none is left.
/// False when the list cannot be read.
///
/// # Safety
/// Between fork and exec, in a single-threaded child subreaper.
unsafe fn kill_tree() -> bool {
    // SAFETY: open/read/close/kill/waitpid on this process and its children.
    unsafe {
        loop {
            let fd = libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return false;
            }
            let mut listed = 0;
            let mut pid: libc::pid_t = 0;
            let mut buf = [0u8; 512];
            loop {
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                if n < 0 && errno() == libc::EINTR {
                    continue;
                }
                if n <= 0 {
                    break;
                }
                for &b in &buf[..n as usize] {
                    if b.is_ascii_digit() {
                        pid = pid.saturating_mul(10).saturating_add(libc::pid_t::from(b - b'0'));
                    } else if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                        listed += 1;
                        pid = 0;
                    }
                }
            }
            if pid > 0 {
                libc::kill(pid, libc::SIGKILL);
                listed += 1;
            }
            libc::close(fd);
            if listed == 0 {
                // No child left (zombies are listed too): done.
                return true;
            }
            // Wait for one to end (its own children come here as it does),
            // then take every other that has.
            let mut status = 0;
            let mut r = libc::waitpid(-1, &mut status, 0);
            while r > 0 || (r < 0 && errno() == libc::EINTR) {
                r = libc::waitpid(-1, &mut status, libc::WNOHANG);
            }
            if r < 0 && errno() == libc::ECHILD {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    use super::super::{ChildSteps, pidns};

    /// Steps that only tether (no sandbox layer), watching `host`.
    fn tethered(host: RawFd) -> ChildSteps {
        ChildSteps {
            confined: false,
            tether: true,
            join: Vec::new(),
            namespaces: None,
            view: None,
            rlimits: Vec::new(),
            hook_id: None,
            ruleset: None,
            proc_rule: 0,
            seccomp: None,
            wipe: pidns::Wipe::default(),
            host,
            exec: None,
        }
    }

    /// A marker no other test (nor run) uses, for `sleep <secs>.<marker>`.
    fn marker(test: u32) -> String {
        format!("{}{test:03}7", std::process::id())
    }

    /// Pids of live processes with an argument containing `needle`.
    fn pids_with(needle: &str) -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                cmdline.split(|&b| b == 0).any(|a| String::from_utf8_lossy(a).contains(needle)).then_some(pid)
            })
            .collect()
    }

    fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while !done() {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// `sh -c <script>` started through the steps (the fork, or with
    /// `clone` the hook's own exec), in its own process group.
    fn start(script: &str, clone: bool, host: RawFd) -> std::process::Child {
        let mut steps = tethered(host);
        let args = ["-c".into(), script.into()];
        if clone {
            steps.set_exec(std::path::Path::new("/bin/sh"), &args, &[("PATH".into(), "/usr/bin:/bin".into())]);
            assert!(steps.exec.is_some());
        }
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(&args).env_clear().env("PATH", "/usr/bin:/bin").process_group(0);
        // SAFETY: `apply` only makes syscalls on what the steps hold.
        unsafe { cmd.pre_exec(move || steps.apply()) };
        cmd.spawn().unwrap()
    }

    /// A stand-in for ctxhost and its pidfd.
    fn host() -> (std::process::Child, OwnedFd) {
        let host = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        // SAFETY: pidfd_open on our own child; the fd is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, host.id() as libc::pid_t, 0) };
        assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd nobody else owns.
        (host, unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// The host gone, the keeper kills the hook and a grandchild that left
    /// its session, and ends.
    fn the_tree_dies_with_the_host(clone: bool, test: u32) {
        let m = marker(test);
        let (mut host, pidfd) = host();
        let mut keeper = start(
            &format!("setsid sleep 300.{m} </dev/null >/dev/null 2>&1 & sleep 301.{m}"),
            clone,
            pidfd.as_raw_fd(),
        );
        let ran = wait_for(Duration::from_secs(10), || {
            pids_with(&format!("300.{m}")).len() + pids_with(&format!("301.{m}")).len() >= 2
        });
        assert!(ran, "the sleeps never ran: {:?} {:?}", pids_with(&m), keeper.try_wait());
        host.kill().unwrap();
        host.wait().unwrap();
        let gone = wait_for(Duration::from_secs(2), || pids_with(&m).is_empty());
        let ended = wait_for(Duration::from_secs(2), || keeper.try_wait().unwrap().is_some());
        for pid in pids_with(&m) {
            // SAFETY: kill(2) on this test's own leftovers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = keeper.kill();
        assert!(gone && ended, "left running: hook tree {gone}, keeper {ended}");
    }

    #[test]
    fn with_the_host_gone_the_forked_hook_and_its_escaped_grandchild_die() {
        the_tree_dies_with_the_host(false, 1);
    }

    #[test]
    fn with_the_host_gone_the_cloned_hook_and_its_escaped_grandchild_die() {
        the_tree_dies_with_the_host(true, 2);
    }

    /// The hook ends by itself: the keeper ends as it did (exit code 3),
    /// and what it left in a session of its own is killed.
    #[test]
    fn the_keeper_ends_as_the_hook_did_and_kills_what_it_left() {
        let m = marker(3);
        let (mut host, pidfd) = host();
        for clone in [false, true] {
            let mut keeper = start(
                &format!("setsid sleep 302.{m} </dev/null >/dev/null 2>&1 & sleep 0.3; exit 3"),
                clone,
                pidfd.as_raw_fd(),
            );
            let status = keeper.wait().unwrap();
            let gone = wait_for(Duration::from_secs(2), || pids_with(&m).is_empty());
            for pid in pids_with(&m) {
                // SAFETY: kill(2) on this test's own leftovers.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            assert_eq!(status.code(), Some(3), "clone {clone}");
            assert!(gone, "the escaped grandchild outlived the hook (clone {clone})");
        }
        let _ = host.kill();
        let _ = host.wait();
    }
}
