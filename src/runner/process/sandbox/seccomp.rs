//! The syscall filter of a confined hook: what no hook needs is refused with
//! `EPERM` — never a kill, so a runtime that probes a syscall at start (as
//! many do for `io_uring` or `userfaultfd`) falls back instead of dying.
//!
//! Two things are refused:
//! - **metadata changes by path** (`chmod`, `chown`, `utime*` with a path,
//!   `*setxattr`, `*removexattr` and their `*at` forms). Landlock does not
//!   cover them, so a hook could otherwise make a file it can merely see
//!   world-writable, or change its times. The fd forms (`fchmod`, `fchown`,
//!   `futimens`, `fsetxattr`) stay allowed: they need a file the hook
//!   *opened*, which Landlock checked, and runtimes use them to copy files
//!   (libuv's `copyfile` fchmods its copy). As root the kernel's own owner
//!   check adds to this: the hook runs as an unprivileged uid.
//! - **the kernel's attack surface**: `ptrace`, `process_vm_*`, `bpf`,
//!   `perf_event_open`, keyrings, `io_uring_*`, the mount family,
//!   `pivot_root`, module and kexec loading, new user namespaces
//!   (`unshare`/`clone` with `CLONE_NEWUSER`, `setns`), `userfaultfd`.
//!   `clone3` answers `ENOSYS` (its flags sit in memory a filter cannot
//!   read), which makes libc fall back to `clone`, whose flags it can.
//!
//! The programs are compiled once per process ([`programs`]); the child only
//! installs them ([`Programs::install`]: two `seccomp(2)` calls, no
//! allocation). [`Mode::OwnerChecked`] leaves metadata calls to the
//! kernel's owner check: for a hook running as its plugin's own uid (as
//! root), which owns nothing but its plugin's files, and for pip.

use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The compiled filters: EPERM rules, and `clone3` → ENOSYS.
#[derive(Debug)]
pub struct Programs {
    strict: BpfProgram,
    owner_checked: BpfProgram,
    clone3: BpfProgram,
}

/// Which rule set a process gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Everything refused: a hook running as the daemon's own user, whose
    /// files it could otherwise chmod by path.
    Strict,
    /// The attack surface only; metadata changes are left to the kernel's
    /// owner check. For a hook running as its plugin's own uid (it owns
    /// exactly its plugin's files), and for a dependency installer (pip sets
    /// modes on what it unpacks into the venv, its only writable place).
    OwnerChecked,
}

/// The filters of this process, compiled on first use; `None` on an
/// architecture seccompiler does not know (reported by `probe`).
pub fn programs() -> Option<&'static Programs> {
    static PROGRAMS: OnceLock<Option<Programs>> = OnceLock::new();
    PROGRAMS
        .get_or_init(|| match Programs::compile() {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!("no seccomp filter for hooks on this machine: {e}");
                None
            }
        })
        .as_ref()
}

/// Syscalls refused outright (the kernel's attack surface).
fn surface() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_setns,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    calls
}

/// Path-based metadata changes, refused whatever their arguments.
fn metadata_by_path() -> Vec<i64> {
    /// `fchmodat2` (Linux 6.6), `setxattrat` / `removexattrat` (6.13): the
    /// same number on every architecture (the unified table).
    const FCHMODAT2: i64 = 452;
    const SETXATTRAT: i64 = 463;
    const REMOVEXATTRAT: i64 = 466;
    let mut calls = vec![
        libc::SYS_fchmodat,
        FCHMODAT2,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        SETXATTRAT,
        REMOVEXATTRAT,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    calls
}

impl Programs {
    fn compile() -> Result<Programs, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("{e}"))?;
        let cond = |arg, op, value| Cond::new(arg, Len::Qword, op, value).map_err(|e| format!("{e}"));
        let rule = |conds: Vec<Cond>| SeccompRule::new(conds).map_err(|e| format!("{e}"));
        let newuser = libc::CLONE_NEWUSER as u64;

        let mut base: BTreeMap<i64, Vec<SeccompRule>> = surface().into_iter().map(|n| (n, Vec::new())).collect();
        // New user namespaces: the flags are the first argument of both.
        base.insert(libc::SYS_unshare, vec![rule(vec![cond(0, Op::MaskedEq(newuser), newuser)?])?]);
        base.insert(libc::SYS_clone, vec![rule(vec![cond(0, Op::MaskedEq(newuser), newuser)?])?]);
        let owner_checked = base.clone();
        let mut strict = base;
        strict.extend(metadata_by_path().into_iter().map(|n| (n, Vec::new())));
        // utimensat(dirfd, NULL, …) is futimens: only a path is refused.
        strict.insert(libc::SYS_utimensat, vec![rule(vec![cond(1, Op::Ne, 0)?])?]);

        let eperm = SeccompAction::Errno(libc::EPERM as u32);
        let build = |rules| -> Result<BpfProgram, String> {
            let filter =
                SeccompFilter::new(rules, SeccompAction::Allow, eperm.clone(), arch).map_err(|e| format!("{e}"))?;
            BpfProgram::try_from(filter).map_err(|e| format!("{e}"))
        };
        let clone3 = SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(|e| format!("{e}"))?;
        Ok(Programs {
            strict: build(strict)?,
            owner_checked: build(owner_checked)?,
            clone3: BpfProgram::try_from(clone3).map_err(|e| format!("{e}"))?,
        })
    }

    /// Installs the filters on the calling thread (no-new-privs must be set,
    /// or the caller have CAP_SYS_ADMIN; `restrict` sets it).
    ///
    /// # Safety
    /// Between fork and exec: raw syscalls on prepared buffers only.
    pub unsafe fn install(&self, mode: Mode) -> io::Result<()> {
        let main = match mode {
            Mode::Strict => &self.strict,
            Mode::OwnerChecked => &self.owner_checked,
        };
        for program in [&self.clone3, main] {
            let Ok(len) = u16::try_from(program.len()) else { return Err(io::Error::from_raw_os_error(libc::E2BIG)) };
            let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut() };
            // SAFETY: a valid program that outlives the call (it is copied by the kernel).
            let rc = unsafe {
                libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &fprog as *const libc::sock_fprog)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_here() {
        let p = programs().expect("seccomp filters for this architecture");
        assert!(p.strict.len() > p.owner_checked.len());
        assert!(!p.clone3.is_empty());
    }
}
