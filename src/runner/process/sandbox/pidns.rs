//! A pid namespace per process: the hook runs in its own pid namespace
//! with its own `/proc`, so it sees only its own processes (not the
//! daemon's argv with a token on it, not other plugins' hooks), and when it
//! exits the kernel kills everything left in the namespace — a `setsid` +
//! double-fork daemon included — with no cgroup.
//!
//! `unshare(CLONE_NEWPID)` moves only the *children* of the caller, so the
//! forked child of `Command::spawn` (the "keeper", whose pid the host
//! knows) unshares and starts the namespace's init (pid 1), which makes a
//! mount namespace of its own (so that its teardown, an RCU grace period,
//! is the init's exit and not the keeper's, which ends the call), mounts
//! the namespace's `/proc` there and starts the hook (pid 2). Both start as
//! `CLONE_VM | CLONE_VFORK` clones on their own stacks, the hook doing its
//! own `execve` ([`split_without_copies`], [`Exec`]); plain forks, the hook
//! returning to `Command`'s exec, remain the fallback ([`split`],
//! [`fork_hook`]). The init reaps orphans and, when the hook ends, passes its wait
//! status to the keeper through a pipe and exits — taking every process
//! left in the namespace with it. The keeper and the init close every fd
//! (std's exec-error pipe included, so `spawn` returns as soon as the hook
//! execs); the keeper leaves with the hook's status — the same exit code,
//! or the same signal. Killing the keeper's process group kills all three
//! (they stay in the group). The init also watches ctxhost (its pidfd, see
//! [`super::tether`]): when ctxhost is gone, however it died, the init
//! exits and the namespace ends with it.
//!
//! Everything here runs between fork and exec: raw syscalls only.

use std::io;

/// Runs in the child after `unshare(CLONE_NEWPID)`: forks the
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
    // SAFETY: as this function.
    unsafe { fork_init(fds) }
}

/// As [`split`], with the whole start of the hook done without copying
/// memory: the init is cloned sharing the keeper's (`CLONE_VM |
/// CLONE_VFORK`, on its own stack), sets up the namespace and clones the
/// hook, which execs by itself. Every fd but the standard three and those
/// the steps still need is closed first (std's exec-error pipe among them:
/// the keeper waits, suspended, for the init to end). Never returns;
/// `Err` when the clone itself failed (the caller then forks).
///
/// # Safety
/// Only between fork and exec, in a single-threaded child, after `unshare`.
pub unsafe fn split_without_copies(steps: &super::ChildSteps, keep: &[libc::c_int]) -> io::Result<()> {
    extern "C" fn init_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the (keeper's) steps and status pipe,
        // alive while the keeper is suspended (CLONE_VFORK).
        unsafe {
            let (steps, pipe) = &*(arg as *const (&super::ChildSteps, [libc::c_int; 2]));
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::close(pipe[0]);
            if let Err(e) = steps.init_namespace() {
                super::report_and_exit(&e)
            }
            if let Err(e) = clone_hook(pipe[1], steps) {
                super::report_and_exit(&e)
            }
            libc::_exit(127)
        }
    }
    let mut fds = [-1; 2];
    // SAFETY: pipe2 into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: closing fds of this process that nothing below uses.
    unsafe { close_all_but(keep, fds) };
    let Some(exec) = &steps.exec else { return Err(io::Error::from_raw_os_error(libc::EINVAL)) };
    let arg = (steps, fds);
    // The init's stack: the upper half of the plan's stack, growing down
    // to its middle (the hook, cloned by the init, grows down from there).
    // SAFETY: the stack top, 16-byte aligned, the end of the plan's stack.
    let top = unsafe { exec.stack_base().add(exec.stack_len()) } as usize & !15;
    // SAFETY: clone with a valid function, stack and argument (which lives
    // on this stack frame: this process is suspended until the init ends).
    let pid = unsafe {
        libc::clone(
            init_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &arg as *const _ as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the keeper's whole remaining life: syscalls only.
    unsafe { keep_status(pid, fds) }
}

/// Closes every fd of this process but 0-2, `keep` and the pipe's two.
///
/// # Safety
/// Between fork and exec.
unsafe fn close_all_but(keep: &[libc::c_int], pipe: [libc::c_int; 2]) {
    let mut all = [-1 as libc::c_int; 72];
    for (slot, &fd) in all.iter_mut().zip(keep.iter().chain(&pipe).chain(&[0, 1, 2])) {
        *slot = fd;
    }
    // SAFETY: as this function.
    unsafe { close_ranges_around(&all) };
}

/// The keeper after a [`split_without_copies`]: closes the pipe's write
/// end, then as [`keep`].
///
/// # Safety
/// Between fork and exec; never returns.
unsafe fn keep_status(init: libc::pid_t, pipe: [libc::c_int; 2]) -> ! {
    // SAFETY: close on this process, then the keeper's life.
    unsafe {
        libc::close(pipe[1]);
        keep(init, pipe[0])
    }
}

/// `fork`; in the child, `SIGKILL` when the parent dies and `close_in_child`
/// closed. Returns the child's pid in the parent, 0 in the child.
///
/// # Safety
/// Between fork and exec, in a single-threaded process.
unsafe fn fork_dying_with_parent(close_in_child: libc::c_int) -> io::Result<libc::pid_t> {
    // SAFETY: fork in a single-threaded process; prctl and close on the child.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::close(close_in_child);
        }
        Ok(pid)
    }
}

/// The fork of [`split`].
///
/// # Safety
/// As [`split`].
unsafe fn fork_init(fds: [libc::c_int; 2]) -> io::Result<libc::c_int> {
    // The init dies with the keeper (a keeper killed alone must not leave
    // its namespace running).
    // SAFETY: as this function.
    let pid = unsafe { fork_dying_with_parent(fds[0])? };
    if pid == 0 {
        return Ok(fds[1]);
    }
    // SAFETY: the keeper's whole remaining life: syscalls only.
    unsafe { keep(pid, fds[0]) }
}

/// Keeps only the fds of `keep` open (negative ones ignored), and stops a
/// stray signal from ending the process (every signal blocked).
///
/// # Safety
/// Between fork and exec.
pub(super) unsafe fn quiet(keep: &[libc::c_int]) {
    // SAFETY: signal mask and close_range on this process.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        close_ranges_around(keep);
    }
}

/// Closes every fd but those of `keep` (at most 72; negative ones ignored).
///
/// # Safety
/// Between fork and exec.
unsafe fn close_ranges_around(keep: &[libc::c_int]) {
    let mut all = [0 as libc::c_int; 72];
    let mut n = 0;
    for &fd in keep {
        if fd >= 0 && n < all.len() {
            all[n] = fd;
            n += 1;
        }
    }
    let kept = &mut all[..n];
    kept.sort_unstable();
    let mut from: u32 = 0;
    for &fd in kept.iter() {
        let fd = fd as u32;
        if fd > from {
            // SAFETY: close_range on this process's fds.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32) };
}

/// Reaps children until `pid` ends, returning its wait status (the init
/// reaps the namespace's orphans on the way; the keeper has no other child).
///
/// # Safety
/// Between fork and exec.
pub(super) unsafe fn reap_until(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waitpid into a local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
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
        quiet(&[status_pipe]);
        // The hook's status comes first: the init's own end (tearing down
        // the namespace's mounts waits for an RCU grace period) is not the
        // call's business. It was SIGKILLed with the keeper's group if
        // anything of it remains.
        let mut raw = [0u8; 4];
        let status = loop {
            let n = libc::read(status_pipe, raw.as_mut_ptr().cast(), 4);
            if n == 4 {
                break i32::from_ne_bytes(raw);
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            // The init ended without a word (killed, or ctxhost is gone):
            // its own status.
            break reap_until(init);
        };
        super::tether::exit_like(status)
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
pub unsafe fn fork_hook(status_pipe: libc::c_int, steps: &super::ChildSteps) -> io::Result<()> {
    // SAFETY: as this function.
    let pid = unsafe { fork_dying_with_parent(status_pipe)? };
    if pid == 0 {
        return Ok(());
    }
    // SAFETY: the init's whole remaining life: syscalls only.
    unsafe { init(pid, status_pipe, steps) }
}

/// The namespace's init: reaps every process of the namespace until the
/// hook ends, hands its wait status to the keeper, exits — or exits at once
/// when ctxhost is gone (its pidfd readable): the namespace ends with it.
///
/// # Safety
/// Between fork and exec, in the init; never returns.
unsafe fn init(pid: libc::pid_t, status_pipe: libc::c_int, steps: &super::ChildSteps) -> ! {
    let hook_id = steps.hook_id;
    // SAFETY: syscalls on this process only.
    unsafe {
        quiet(&[status_pipe, steps.host]);
        // Nothing the init keeps is worth having: no capability, the hook's uid.
        let _ = super::drop_capabilities(hook_id);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        // ctxhost gone: this exit takes the namespace with it.
        let Some(status) = super::tether::reap_watching(pid, steps.host) else { libc::_exit(0) };
        let raw = status.to_ne_bytes();
        libc::write(status_pipe, raw.as_ptr().cast(), 4);
        libc::_exit(0);
    }
}

/// A hook's `execve`, prepared in the parent: no allocation in the child.
pub struct Exec {
    program: std::ffi::CString,
    _argv: Vec<std::ffi::CString>,
    _envp: Vec<std::ffi::CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    /// The cloned hook's stack.
    stack: Vec<u8>,
}

// SAFETY: the raw pointers point into the CStrings owned alongside them,
// which are never changed; the plan moves between threads only whole.
unsafe impl Send for Exec {}
// SAFETY: through `&Exec` this process only reads (no interior mutability):
// the pointers and strings are fixed at `new`, and the stack is written only
// by the clones started between fork and exec (in the keeper, on its own
// copy of the memory), never in the daemon.
unsafe impl Sync for Exec {}

/// Stack of the cloned hook until it execs: the last steps and `execve`.
const HOOK_STACK: usize = 256 * 1024;

impl Exec {
    pub fn new(program: std::ffi::CString, argv: Vec<std::ffi::CString>, envp: Vec<std::ffi::CString>) -> Exec {
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        Exec { program, _argv: argv, _envp: envp, argv_ptrs, envp_ptrs, stack: vec![0u8; HOOK_STACK] }
    }

    fn stack_len(&self) -> usize {
        self.stack.len()
    }

    fn stack_base(&self) -> *const u8 {
        self.stack.as_ptr()
    }

    /// The top of the whole stack, 16-byte aligned (a clone growing down
    /// from it may use all of it).
    pub(super) fn stack_top(&self) -> usize {
        (self.stack.as_ptr() as usize + self.stack.len()) & !15
    }

    /// `execve`; returns only with its error.
    ///
    /// # Safety
    /// In the hook, between clone and exec.
    pub(super) unsafe fn exec(&self) -> io::Error {
        // SAFETY: NUL-terminated strings and null-terminated arrays owned by self.
        unsafe { libc::execve(self.program.as_ptr(), self.argv_ptrs.as_ptr(), self.envp_ptrs.as_ptr()) };
        io::Error::last_os_error()
    }
}

/// In the init: clones the hook with `CLONE_VM | CLONE_VFORK` on its own
/// stack — no copy of the init's memory; the init waits until the hook has
/// exec'd — then becomes the namespace's init. Never returns (a failure to
/// clone returns its error, and the caller forks instead).
///
/// # Safety
/// Between fork and exec, in the init.
pub unsafe fn clone_hook(status_pipe: libc::c_int, steps: &super::ChildSteps) -> io::Result<()> {
    extern "C" fn hook_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the ChildSteps of the init, alive while the init
        // is suspended (CLONE_VFORK) until this process execs or exits.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            let steps = &*(arg as *const super::ChildSteps);
            steps.finish_and_exec()
        }
    }
    let Some(exec) = &steps.exec else { return Ok(()) };
    // SAFETY: the stack top, 16-byte aligned, inside the plan's stack (the
    // first half: the init may run on the second).
    let top = unsafe { exec.stack.as_ptr().add(exec.stack.len() / 2) } as usize & !15;
    // The hook must not keep the status pipe (it is close-on-exec, and
    // closed at the hook's exec; CLONE_VFORK keeps the init from writing
    // before then).
    // SAFETY: clone with a valid function, stack and argument.
    let pid = unsafe {
        libc::clone(
            hook_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            steps as *const super::ChildSteps as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the init's remaining life.
    unsafe { init(pid, status_pipe, steps) }
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
    pub(super) unsafe fn apply(&self) {
        for &(start, end) in &self.ranges {
            if start != 0 {
                // SAFETY: the process's own argument/environment pages (on
                // its stack, writable), copied on write from the daemon.
                unsafe { libc::memset(start as *mut libc::c_void, 0, end - start) };
            }
        }
    }
}

/// In the init, before the hook starts: the init is a copy of the daemon
/// that never execs, and the hook sees it as pid 1. Its `/proc/1/cmdline`
/// and `environ` would show the daemon's (a `--token` among them): wiped —
/// now, or the hook could read them before the init runs again — and the
/// rest of its memory kept from the hook (not dumpable).
///
/// # Safety
/// Between fork and exec, in the init (or a keeper) that never returns to
/// Rust code using its arguments or environment.
pub unsafe fn hide_daemon(wipe: &Wipe) {
    // SAFETY: prctl on this process; the wipe as the caller promises.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        wipe.apply();
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
