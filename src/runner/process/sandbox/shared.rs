//! The operator's trusted hook started without a copy of ctxhost: its
//! keeper ([`super::tether`]) is a clone *sharing ctxhost's memory*
//! (`CLONE_VM`), not a fork.
//!
//! Why: a fork copies ctxhost's page tables and marks every page it has
//! written copy-on-write, so ctxhost then takes a page fault on each page it
//! writes during the call (about a hundred per call here), and the keeper's
//! exit tears the copy down again. That was most of what a trusted hook's
//! call cost over spawning the program bare (0.6 of 0.8 ms). A trusted
//! plugin has no sandbox layer to set up between fork and exec — only the
//! tether and its limits — so its keeper can run in ctxhost's memory.
//!
//! What sharing the memory asks of the keeper, and how it is kept:
//! - **It never allocates, locks or unwinds**: as every step between fork and
//!   exec already ([`super::ChildSteps`]), syscalls on what ctxhost prepared.
//!   It runs on a stack of its own ([`Stack`]); the hook it clones runs on
//!   the steps' stack until its exec.
//! - **It writes nothing of ctxhost's**: no wipe of the argv/environment
//!   area (a fork's keeper wipes its *copy*; here it would be ctxhost's own,
//!   and the trusted hook runs as ctxhost's user, able to read ctxhost's
//!   `/proc/<pid>/environ` anyway), no `PR_SET_DUMPABLE` (a property of the
//!   memory, so of ctxhost).
//! - **Its C library state is not a thread's of ctxhost**: the keeper gets
//!   the thread pointer of a thread that only ever sleeps ([`donor_tls`]),
//!   so the `errno` the keeper's calls set is never one a working thread
//!   of ctxhost is about to read. Keepers share that one `errno` among
//!   themselves; none of them decides anything on an `errno` another can
//!   set (every signal is blocked in a keeper, so no call is interrupted).
//! - **Its memory outlives it**: the steps and stacks are freed only once
//!   the keeper is reaped *and* the hook has left them (exec'd or died: the
//!   start pipe, close-on-exec, reads end-of-file, [`Held::released`]);
//!   a keeper dropped before that is kept in [`ORPHANS`] until then.
//! - **No signal handler of ctxhost runs in it**: ctxhost blocks every
//!   signal around the clone; the keeper resets every handler to its
//!   default before unblocking.
//! - **No C library call that acts on "all threads"**: the C library in the
//!   keeper still believes it has ctxhost's threads (a fork's child is told
//!   it has one), so `setuid`-family wrappers would signal ctxhost's own
//!   threads to change identity with it. The trusted steps make none (only
//!   rlimits, which are per process); a confined hook's identity change is
//!   one more reason it is never started here.
//!
//! Everything else is the fork keeper's: its own process group (the hook's
//! group, killed whole at the end of the call), a child subreaper watching
//! ctxhost's pidfd, the hook dying with it. Never used for a confined hook:
//! a process sharing memory cannot make a user namespace, and the
//! namespace's init must be a copy that can be wiped.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::sync::Mutex;

use super::ChildSteps;
use crate::runner::process::exit::{ExitWatch, exited_unreaped};

/// The keeper's own stack (it waits in `poll` and reads `/proc` lists into
/// 512-byte buffers; the hook runs on the steps' stack).
const KEEPER_STACK: usize = 64 * 1024;

/// A started keeper (its hook under it) and the pipe ends ctxhost keeps.
pub struct SharedKeeper {
    pid: libc::pid_t,
    exit: ExitWatch,
    held: Option<Held>,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// What the keeper and the hook run on and read, until both have left it.
struct Held {
    _start: Box<Start>,
    _stack: Stack,
    /// The start pipe's read end: end-of-file once no process holds the
    /// write end (the keeper closes it after the hook's clone returned; the
    /// hook's closes at its exec, or at its death).
    started: OwnedFd,
}

impl Held {
    /// Whether no process runs on this memory any more: the keeper reaped
    /// (the caller's part) and the start pipe at end-of-file.
    fn released(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: read(2) into a local byte on a non-blocking pipe we own.
        let n = unsafe { libc::read(self.started.as_raw_fd(), (&raw mut byte).cast(), 1) };
        n == 0
    }
}

/// What the keeper reads: the steps, the hook's working directory and its
/// three standard streams (ctxhost's copies are closed once cloned).
struct Start {
    steps: ChildSteps,
    cwd: CString,
    stdio: [RawFd; 3],
}

/// An mmap'd stack with a guard page at its low end.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is owned by the `Stack` alone; ctxhost never reads
// or writes it through the pointer (only the keeper runs on it).
unsafe impl Send for Stack {}
// SAFETY: as above: nothing is reached through `&Stack` but the address.
unsafe impl Sync for Stack {}

impl Stack {
    fn new(len: usize) -> io::Result<Stack> {
        // SAFETY: a fresh anonymous private mapping, ours alone.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, page_size(), libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top, 16-byte aligned (the stack grows down).
    fn top(&self) -> *mut libc::c_void {
        ((self.base as usize + self.len) & !15) as *mut libc::c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used by any process.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Keepers dropped before they were reaped or before their hook left the
/// memory: kept (killed) until both, then freed. Looked at on every start
/// and every drop.
static ORPHANS: Mutex<Vec<(libc::pid_t, Option<Held>)>> = Mutex::new(Vec::new());

/// Frees what [`ORPHANS`] holds that no process runs on any more.
fn sweep_orphans() {
    let Ok(mut orphans) = ORPHANS.lock() else { return };
    orphans.retain_mut(|(pid, held)| {
        if *pid > 0 {
            let mut status = 0;
            // SAFETY: waitpid(2) on a child of ours, without blocking.
            if unsafe { libc::waitpid(*pid, &mut status, libc::WNOHANG) } == *pid {
                *pid = 0;
            }
        }
        *pid > 0 || !held.as_ref().is_none_or(Held::released)
    });
}

/// The thread pointer of a thread of ctxhost that only ever sleeps, given
/// to every keeper as its own (`CLONE_SETTLS`): the C library's per-thread
/// state the keeper touches (`errno`) is then never a working thread's.
/// `None` where the thread pointer cannot be read (then a hook's keeper is
/// forked).
fn donor_tls() -> Option<usize> {
    static TLS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *TLS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned =
            std::thread::Builder::new().name("ctxhost-keepers".into()).stack_size(32 * 1024).spawn(move || {
                if !TP_IS_PTHREAD_T {
                    let _ = tx.send(thread_pointer());
                }
                // Never ends: its thread-local area is the keepers'.
                loop {
                    std::thread::park();
                }
            });
        let handle = spawned.ok()?;
        if TP_IS_PTHREAD_T {
            // The thread's TCB, set up by pthread_create before it returns:
            // no need to wait for the thread to run.
            use std::os::unix::thread::JoinHandleExt;
            return Some(handle.as_pthread_t() as usize);
        }
        rx.recv().ok().flatten()
    })
}

/// Whether a thread's `pthread_t` is its thread pointer (x86-64: the TCB
/// sits at the thread pointer, with glibc and musl alike).
const TP_IS_PTHREAD_T: bool = cfg!(target_arch = "x86_64");

/// This thread's thread pointer (what `CLONE_SETTLS` takes).
#[cfg(target_arch = "x86_64")]
fn thread_pointer() -> Option<usize> {
    let tp: usize;
    // SAFETY: reads the TCB's self pointer at %fs:0 (the x86-64 TLS ABI).
    unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags)) };
    Some(tp)
}

#[cfg(target_arch = "aarch64")]
fn thread_pointer() -> Option<usize> {
    let tp: usize;
    // SAFETY: reads this thread's TPIDR_EL0.
    unsafe { std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags)) };
    Some(tp)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn thread_pointer() -> Option<usize> {
    None
}

/// Whether keepers can start sharing memory in this process.
pub fn available() -> bool {
    donor_tls().is_some()
}

/// A pipe, both ends close-on-exec, with fds above 2 (the keeper moves
/// the hook's ends onto 0–2).
fn pipe_above_stdio() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = crate::runner::process::pipe()?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an fd we own; the copy is owned below.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

impl SharedKeeper {
    /// Starts the keeper (and through it the hook) with `steps`
    /// ([`ChildSteps::shares_memory`]) in `cwd`, its standard streams piped.
    ///
    /// # Errors
    /// A pipe, the stack or the clone failed (nothing was started). What
    /// fails in the keeper or the hook before the exec ends the call with
    /// exit 127 and [`super::START_FAILED`] on stderr, as for any tethered
    /// hook.
    pub fn start(steps: ChildSteps, cwd: &std::path::Path) -> io::Result<SharedKeeper> {
        use std::os::unix::ffi::OsStrExt;
        sweep_orphans();
        let tls = donor_tls().ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))?;
        let cwd = CString::new(cwd.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let (stdin_r, stdin_w) = pipe_above_stdio()?;
        let (stdout_r, stdout_w) = pipe_above_stdio()?;
        let (stderr_r, stderr_w) = pipe_above_stdio()?;
        let (started_r, started_w) = pipe_above_stdio()?;
        let stack = Stack::new(KEEPER_STACK)?;
        let start =
            Box::new(Start { steps, cwd, stdio: [stdin_r.as_raw_fd(), stdout_w.as_raw_fd(), stderr_w.as_raw_fd()] });
        let mut pidfd: libc::c_int = -1;
        // SAFETY: the signal mask of this thread only, restored below; clone
        // with a valid function, a stack of its own, an argument and memory
        // that outlive the keeper (`Held`, freed only once released), and
        // the thread pointer of a thread that never ends.
        let pid = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                keeper_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_SETTLS | libc::CLONE_PIDFD | libc::SIGCHLD,
                (&raw const *start).cast_mut().cast(),
                &mut pidfd as *mut libc::c_int,
                tls as *mut libc::c_void,
                std::ptr::null_mut::<libc::pid_t>(),
            );
            let error = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid < 0 {
                return Err(error);
            }
            pid
        };
        // The keeper has its own copies; ours would keep the pipes open.
        drop((stdin_r, stdout_w, stderr_w, started_w));
        // SAFETY: fcntl on our own read end.
        unsafe { libc::fcntl(started_r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let exit = if pidfd >= 0 {
            // SAFETY: the pidfd clone just returned, owned by nobody else.
            ExitWatch::from_pidfd(unsafe { OwnedFd::from_raw_fd(pidfd) })
        } else {
            ExitWatch::default()
        };
        Ok(SharedKeeper {
            pid,
            exit,
            held: Some(Held { _start: start, _stack: stack, started: started_r }),
            stdin: Some(stdin_w),
            stdout: Some(stdout_r),
            stderr: Some(stderr_r),
        })
    }

    /// The keeper's pid, also the process group of the hook.
    pub fn id(&self) -> libc::pid_t {
        self.pid
    }

    /// Returns once the keeper has exited, **without reaping it** (its
    /// group can still be killed safely).
    pub async fn exited(&self) {
        if self.exit.available() {
            self.exit.exited().await;
        } else {
            // No pidfd (no runtime reactor for it): checks every millisecond.
            while !exited_unreaped(self.pid) {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
    }

    /// Reaps the keeper (its status is the hook's, [`super::tether`]) and
    /// frees what it ran on once the hook has left it too.
    ///
    /// # Errors
    /// waitpid failed.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        self.exited().await;
        let mut status = 0;
        loop {
            // SAFETY: waitpid(2) on our own child; it has exited.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        self.pid = 0;
        if let Some(held) = self.held.take()
            && !held.released()
        {
            // The hook has not yet left the memory (the keeper was killed
            // while the hook had not yet exec'd): kept until it has.
            if let Ok(mut orphans) = ORPHANS.lock() {
                orphans.push((0, Some(held)));
            }
        }
        Ok(ExitStatus::from_raw(status))
    }
}

impl Drop for SharedKeeper {
    /// A keeper dropped unreaped (the call dropped, or its deadline) is
    /// killed and handed to [`ORPHANS`]; a task of the runtime reaps it as
    /// soon as it has exited (else the next start or drop does).
    fn drop(&mut self) {
        if self.pid > 0 {
            // SAFETY: kill(2) on our own unreaped child (its pid cannot be reused).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            if let Ok(mut orphans) = ORPHANS.lock() {
                orphans.push((self.pid, self.held.take()));
            }
            if let Ok(runtime) = tokio::runtime::Handle::try_current()
                && self.exit.available()
            {
                // Only the pidfd moves into the task: what the keeper runs
                // on stays in ORPHANS, whatever becomes of the task.
                let exit = std::mem::take(&mut self.exit);
                runtime.spawn(async move {
                    exit.exited().await;
                    sweep_orphans();
                });
            }
        }
        sweep_orphans();
    }
}

/// The keeper: what `Command` would do for a spawn (standard streams,
/// working directory, own process group), every signal handler reset and
/// the mask emptied, the call's cgroups joined, then the tether's keeper
/// ([`super::tether::start_and_keep`]). Never returns.
extern "C" fn keeper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Start` ctxhost keeps until this process is
    // reaped and the hook has left it; only syscalls on what it holds.
    unsafe {
        let start = &*(arg as *const Start);
        for (target, &fd) in start.stdio.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                super::report_and_exit(&io::Error::last_os_error())
            }
        }
        if libc::chdir(start.cwd.as_ptr()) != 0 || libc::setpgid(0, 0) != 0 {
            super::report_and_exit(&io::Error::last_os_error())
        }
        super::default_signal_handlers();
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if let Err(e) = start.steps.join_cgroups() {
            super::report_and_exit(&e)
        }
        match super::tether::start_and_keep(&start.steps, false) {
            Err(e) => super::report_and_exit(&e),
            Ok(()) => libc::_exit(127),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The thread pointer `CLONE_SETTLS` is given is the donor thread's own:
    /// on x86-64 its `pthread_t` is read without waiting for it to run, so
    /// check that the two agree for a thread.
    #[test]
    fn a_threads_pthread_t_is_its_thread_pointer_where_relied_on() {
        use std::os::unix::thread::JoinHandleExt;
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || tx.send(super::thread_pointer()).unwrap());
        let pthread = handle.as_pthread_t() as usize;
        let seen = rx.recv().unwrap();
        handle.join().unwrap();
        if super::TP_IS_PTHREAD_T {
            assert_eq!(seen, Some(pthread));
        }
        assert!(super::available(), "keepers can share memory on this machine");
    }
}
