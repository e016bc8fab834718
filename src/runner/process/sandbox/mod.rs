//! Confinement of script hook processes (spec section 6): what a hook may
//! read, write and reach, and how much it may use. Decided once per plugin at
//! load from the **effective** privileges (after the operator's grant:
//! `ExecSettings.{allow_network, allow_filesystem, readable_paths,
//! writable_paths}`, never the manifest file) into a [`Confinement`], and
//! applied to every process the plugin starts — one-shot or worker — by
//! `spawn` through [`Confinement::prepare`]:
//!
//! - filesystem (`allow_filesystem = false`): Landlock ([`fs`]);
//! - network (`allow_network = false`): a fresh network namespace, with a
//!   user namespace when not root ([`netns`]);
//! - limits: a per-call cgroup with `max_memory_mb` and a process-count
//!   limit, killed whole at the end of the call ([`cgroup`]); where no
//!   cgroup can be made, `RLIMIT_DATA` and (in a user namespace) `RLIMIT_NPROC`.
//!
//! What the kernel lacks is reported once ([`probe`]) and, with
//! `[sandbox] require = true`, refuses the load. This module never reads a
//! manifest and never decides privileges; it only applies them.

pub mod cgroup;
pub mod fs;
pub mod netns;
pub mod probe;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use probe::{Features, features};

use crate::manifest::ExecSettings;

/// Default process-count limit of one call: none. A limit needs a per-call
/// cgroup, and joining one costs the hook's start an RCU grace period on a
/// kernel whose cgroups are not mounted with `favordynmods`: measured here
/// 0.03 ms when calls follow each other closely, but 8-15 ms when they are
/// 50 ms apart — more than a whole one-shot call. So cgroups are used only
/// when a limit asks for one (`[sandbox] max_processes`, `max_memory_mb`).
pub const DEFAULT_MAX_PROCESSES: u64 = 0;

/// The sandbox cannot be applied as the operator requires.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error(
        "plugin '{plugin}' cannot run: config.toml has `[sandbox] require = true`, but this machine lacks {missing} \
         ({summary}).\n  hint: run `ctxhost doctor` for the sandbox line; on Linux >= 5.13 with Landlock, \
         run as root or with unprivileged user namespaces and a delegated cgroup, or set `require = false`"
    )]
    Incomplete { plugin: String, missing: String, summary: String },
}

/// How one plugin's processes are confined. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    plan: Option<Arc<Plan>>,
}

#[derive(Debug)]
struct Plan {
    /// `None`: the filesystem is not confined (`allow_filesystem`, or no Landlock).
    fs: Option<fs::FsPolicy>,
    /// Enter a fresh network namespace.
    isolate_net: bool,
    memory_bytes: Option<u64>,
    max_processes: Option<u64>,
    features: &'static Features,
    /// As root: the plugin's network namespace, made at its first call.
    shared_net: std::sync::OnceLock<Option<netns::SharedNetns>>,
}

/// Everything a confinement is decided from (privileges already effective).
pub struct Inputs<'a> {
    pub plugin: &'a str,
    pub settings: &'a ExecSettings,
    pub plugin_dir: &'a Path,
    pub data_dir: &'a Path,
    /// The hook's `HOME`.
    pub user_home: Option<&'a Path>,
    pub launcher: Option<&'a Path>,
    pub venv: Option<&'a Path>,
    /// Directories of the runtime's passthrough path variables.
    pub path_vars: Vec<PathBuf>,
    /// `[sandbox] max_processes` (0: no limit).
    pub max_processes: u64,
    /// `[sandbox] require`.
    pub require: bool,
}

impl Confinement {
    /// No confinement at all.
    pub fn none() -> Self {
        Confinement::default()
    }

    /// The confinement of one plugin. Returns it with warnings (refused roots).
    ///
    /// # Errors
    /// [`SandboxError::Incomplete`] when `require` is set and a part this
    /// plugin needs is missing on this machine.
    pub fn for_plugin(i: Inputs<'_>) -> Result<(Confinement, Vec<String>), SandboxError> {
        let features = features();
        let s = i.settings;
        let mut missing: Vec<&str> = Vec::new();
        if !s.allow_filesystem && features.landlock_abi < 1 {
            missing.push("landlock (filesystem confinement)");
        }
        if !s.allow_network && !features.netns {
            missing.push("network namespace");
        }
        missing.extend(features.missing().into_iter().filter(|m| m.starts_with("cgroup")));
        if i.require && !missing.is_empty() {
            return Err(SandboxError::Incomplete {
                plugin: i.plugin.to_owned(),
                missing: missing.join(", "),
                summary: features.summary(),
            });
        }
        let mut warnings = Vec::new();
        let fs = (!s.allow_filesystem && features.landlock_abi >= 1).then(|| {
            let (policy, w) = fs::FsPolicy::build(&fs::FsInputs {
                plugin: i.plugin,
                plugin_dir: i.plugin_dir,
                data_dir: i.data_dir,
                user_home: i.user_home,
                launcher: i.launcher,
                venv: i.venv,
                path_vars: i.path_vars,
                readable_paths: &s.readable_paths,
                writable_paths: &s.writable_paths,
            });
            warnings.extend(w);
            policy
        });
        let plan = Plan {
            fs,
            isolate_net: !s.allow_network && features.netns,
            memory_bytes: s.max_memory_mb.filter(|&mb| mb > 0).map(|mb| mb.saturating_mul(1024 * 1024)),
            max_processes: (i.max_processes > 0).then_some(i.max_processes),
            features,
            shared_net: std::sync::OnceLock::new(),
        };
        Ok((Confinement { plan: Some(Arc::new(plan)) }, warnings))
    }

    /// Whether the filesystem is confined (Landlock applies).
    pub fn confines_filesystem(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.fs.is_some())
    }

    /// Whether the process gets its own network namespace.
    pub fn isolates_network(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.isolate_net)
    }

    /// Prepares one process: its cgroup (made now), its Landlock ruleset, its
    /// namespaces and limits. The returned [`ChildSteps`] run between fork and
    /// exec; the [`Cleanup`] lives as long as the process.
    ///
    /// # Errors
    /// A cgroup or ruleset that cannot be made: the hook must not run
    /// unconfined.
    pub fn prepare(&self, tmpdir: Option<&Path>) -> io::Result<(Option<ChildSteps>, Cleanup)> {
        let Some(plan) = &self.plan else { return Ok((None, Cleanup::default())) };
        let f = plan.features;
        let bases = &f.cgroups;
        let mut cleanup = Cleanup::default();
        let mut join = Vec::new();
        // A cgroup only when a limit asks for one: joining costs the start
        // of the hook a cgroup migration (see DEFAULT_MAX_PROCESSES).
        let wants_cgroup = plan.memory_bytes.is_some() || plan.max_processes.is_some();
        let can_cgroup =
            bases.v2.is_some() || bases.v1_pids.is_some() || (plan.memory_bytes.is_some() && bases.v1_memory.is_some());
        if wants_cgroup && can_cgroup {
            let limits = cgroup::CgroupLimits { memory_bytes: plan.memory_bytes, max_processes: plan.max_processes };
            let (made, fds) = cgroup::CallCgroup::create(bases, limits)?;
            cleanup.cgroup = Some(made);
            join = fds;
        }
        let ruleset = match &plan.fs {
            Some(policy) => Some(policy.ruleset(tmpdir).map_err(|e| io::Error::other(format!("landlock: {e}")))?),
            None => None,
        };
        let user_ns = !f.root && f.userns;
        let shared = (plan.isolate_net && f.root)
            .then(|| {
                plan.shared_net.get_or_init(|| match netns::SharedNetns::create() {
                    Ok(ns) => Some(ns),
                    Err(e) => {
                        tracing::warn!("cannot make a shared network namespace ({e}); each call makes its own");
                        None
                    }
                })
            })
            .and_then(Option::as_ref);
        let namespaces = match shared {
            // The plan (and so the fd) outlives the spawn: the Confinement
            // holding it is borrowed for the whole of it.
            Some(ns) => Some(netns::Namespaces::join(ns)),
            None => netns::Namespaces::new(plan.isolate_net, user_ns),
        };
        let mut rlimits = Vec::new();
        if let (Some(bytes), "rlimit") = (plan.memory_bytes, f.memory_limit) {
            rlimits.push((libc::RLIMIT_DATA, bytes));
        }
        if let (Some(n), "rlimit") = (plan.max_processes, f.process_limit) {
            rlimits.push((libc::RLIMIT_NPROC, n));
        }
        if join.is_empty() && namespaces.is_none() && rlimits.is_empty() && ruleset.is_none() {
            // Nothing to do between fork and exec: no `pre_exec`, so the
            // process starts through posix_spawn (vfork) instead of a full
            // fork of the host — about 0.5 ms less per call.
            return Ok((None, cleanup));
        }
        // No core dumps of a confined hook (they could land outside its dirs).
        rlimits.push((libc::RLIMIT_CORE, 0));
        // A confined hook keeps no capability: as root it would otherwise
        // mknod, load modules, lift its rlimits… (in a user namespace the
        // capabilities are the namespace's, dropped all the same).
        Ok((Some(ChildSteps { join, namespaces, rlimits, ruleset, drop_caps: true }), cleanup))
    }
}

/// What the child does between fork and exec, in order: join the call's
/// cgroups, enter the namespaces, set the rlimits, restrict itself with
/// Landlock (no-new-privs first). Only syscalls on what the parent prepared.
pub struct ChildSteps {
    join: cgroup::JoinFds,
    namespaces: Option<netns::Namespaces>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    ruleset: Option<::landlock::RulesetCreated>,
    drop_caps: bool,
}

impl ChildSteps {
    /// Applies the steps to the calling process.
    ///
    /// # Safety
    /// Only in a forked child before exec (it changes the process for good).
    ///
    /// # Errors
    /// The first step that failed; the process must then not exec.
    pub unsafe fn apply(&mut self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        for fd in &self.join {
            // SAFETY: an open cgroup.procs fd; "0" means the writing process.
            if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(ns) = &self.namespaces {
            // SAFETY: we are between fork and exec.
            unsafe { ns.enter()? };
        }
        for &(resource, value) in &self.rlimits {
            let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
            // SAFETY: setrlimit with a valid struct.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if self.drop_caps {
            // SAFETY: prctl/capset syscalls on this process only.
            unsafe { drop_capabilities()? };
        }
        if let Some(ruleset) = self.ruleset.take() {
            let status = ruleset.restrict_self().map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
            if status.ruleset == ::landlock::RulesetStatus::NotEnforced {
                // Decided confined, so never run unconfined.
                return Err(io::Error::from_raw_os_error(libc::ENOSYS));
            }
        }
        Ok(())
    }
}

/// Drops every capability for good: the bounding set, the ambient set,
/// then effective/permitted/inheritable, with securebits locked so that an
/// exec as uid 0 does not grant them back.
///
/// # Safety
/// Between fork and exec: raw syscalls, no allocation.
unsafe fn drop_capabilities() -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset with valid arguments on the calling process.
    unsafe {
        // Needs CAP_SETPCAP, so before the sets are emptied.
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        for cap in 0..64 {
            // EINVAL past the kernel's last capability: done.
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                break;
            }
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let header = Header { version: CAPABILITY_VERSION_3, pid: 0 };
        let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What must happen when a confined process's life ends: its cgroup killed
/// whole (also processes that left its process group) and removed. Kept by
/// the caller for as long as the process runs; dropping it cleans up — the
/// kill at once, the removal (which waits for the dead) on the blocking pool
/// when a runtime is at hand.
#[derive(Debug, Default)]
pub struct Cleanup {
    cgroup: Option<cgroup::CallCgroup>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(cgroup) = self.cgroup.take() else { return };
        cgroup.kill_now();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(move || cgroup.kill_and_remove())),
            Err(_) => cgroup.kill_and_remove(),
        }
    }
}
