//! What this kernel and this user can confine with, found once per process:
//! the Landlock ABI, whether a network namespace can be made, and — only
//! when first asked ([`Features::limits`]: a plugin with a limit, `[sandbox]
//! require`, `doctor`) — which cgroup hierarchies take a per-call cgroup
//! (memory, pids, and a v2 one to kill with `cgroup.kill`).
//!
//! Probing only looks and tries (a throwaway cgroup made and removed, a
//! forked child that unshares and exits); it never changes the host's own
//! confinement. A short-lived command ([`use_cache`]) takes the namespace
//! answers a file says are yes from [`super::probe_cache`] instead of
//! forking for them — only those: whatever the file does not claim is
//! probed, and a false claim makes the hook's start fail, never run it
//! with less.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::probe_cache::{self, Claims};

use serde::Serialize;

use super::cgroup::Bases;

/// The sandbox features available to this process.
#[derive(Debug, Clone, Serialize)]
pub struct Features {
    /// Landlock ABI version; 0 when Landlock is missing or disabled.
    pub landlock_abi: i32,
    /// A fresh network namespace can be made (a user namespace with it when not root).
    pub netns: bool,
    /// A user namespace can be made (only needed when not root).
    pub userns: bool,
    /// Running as root (euid 0): cgroups may be written, rlimits do not bind;
    /// hooks run as their plugin's own uid.
    pub root: bool,
    /// A pid namespace with its own `/proc` can be made per process.
    pub pidns: bool,
    /// The seccomp filter can be installed (the kernel has seccomp filters
    /// and ctxhost knows this architecture's syscalls).
    pub seccomp: bool,
    /// The features taken from the probe cache's claims rather than
    /// probed by this process (`userns`, `netns`, `pidns`).
    #[serde(skip)]
    pub cached: Vec<&'static str>,
    /// The limits' part, probed on first use ([`Features::limits`]).
    #[serde(skip)]
    limits: OnceLock<Limits>,
}

/// How limits are kept and leftovers killed here: the cgroup part of the
/// probe. Probed only when asked (a limit configured, `[sandbox] require`,
/// `doctor`): finding the hierarchies means making and removing a cgroup,
/// which a hook without limits (the default) has no use for.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Where per-call cgroups go.
    #[serde(skip)]
    pub cgroups: Bases,
    /// How memory is limited: `cgroup v2`, `cgroup v1` or `rlimit`.
    pub memory_limit: &'static str,
    /// How the process count is limited: `cgroup v2`, `cgroup v1`, `rlimit`
    /// (per user namespace) or `none`.
    pub process_limit: &'static str,
    /// How a call's leftovers (escaped its process group) are killed:
    /// `pid namespace`, `cgroup v2`, `cgroup v1` or `none` (process group only).
    pub kill: &'static str,
}

impl Features {
    /// How limits are kept here (probed on first use).
    pub fn limits(&self) -> &Limits {
        self.limits.get_or_init(|| probe_limits(self.userns, self.pidns))
    }

    /// Every part of the policy can be applied.
    pub fn full(&self) -> bool {
        self.missing().is_empty()
    }

    /// The parts of the policy this machine cannot apply, in words.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut missing = self.missing_layers();
        missing.extend(self.missing_limits());
        missing
    }

    /// The limits' part of [`Features::missing`] (probes [`Features::limits`]).
    pub fn missing_limits(&self) -> Vec<&'static str> {
        let limits = self.limits();
        let mut missing = Vec::new();
        if !limits.memory_limit.starts_with("cgroup") {
            missing.push("cgroup memory limit");
        }
        if !limits.process_limit.starts_with("cgroup") {
            missing.push("cgroup process limit");
        }
        if limits.kill == "none" {
            missing.push("cgroup kill of escaped processes");
        }
        missing
    }

    /// Warns that the sandbox lacks `missing` here (nothing when empty).
    pub fn warn_partial(&self, missing: &[&str]) {
        if !missing.is_empty() {
            tracing::warn!(
                "the script sandbox is partial on this machine ({}): missing {}",
                self.summary(),
                missing.join(", ")
            );
        }
    }

    /// The layers every confined hook gets that this machine cannot apply
    /// (the limits, which only a configured limit needs, aside).
    pub fn missing_layers(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.landlock_abi < 1 {
            missing.push("landlock (filesystem confinement)");
        }
        if !self.netns {
            missing.push("network namespace");
        }
        if !self.pidns {
            missing.push("pid namespace");
        }
        if !self.seccomp {
            missing.push("seccomp");
        }
        missing
    }

    /// One line: `landlock abi 7, seccomp yes, netns yes, pidns yes, uid per plugin, …`.
    pub fn summary(&self) -> String {
        let landlock =
            if self.landlock_abi > 0 { format!("landlock abi {}", self.landlock_abi) } else { "landlock no".into() };
        let netns = match (self.netns, self.root) {
            (true, true) => "netns yes",
            (true, false) => "netns yes (user namespace)",
            (false, _) => "netns no",
        };
        let yes = |b: bool| if b { "yes" } else { "no" };
        let uid = if self.root {
            format!("uid per plugin ({}+, never 0)", super::identity::HOOK_UID_BASE)
        } else {
            // SAFETY: geteuid has no preconditions.
            format!("uid {}", unsafe { libc::geteuid() })
        };
        let limits = self.limits();
        format!(
            "{landlock}, seccomp {}, {netns}, pidns {}, {uid}, memory limit {}, process limit {}, kill {}",
            yes(self.seccomp),
            yes(self.pidns),
            limits.memory_limit,
            limits.process_limit,
            limits.kill
        )
    }
}

/// The probe cache this process uses: its file, and whether its claims
/// are taken (`false`: probe everything, then write what was found).
static CACHE: OnceLock<(PathBuf, bool)> = OnceLock::new();

/// Makes [`features`] use the probe cache at `file` (see
/// [`super::probe_cache`]): with `trust`, the features it claims are taken
/// without probing them; either way, what the probe finds is written back.
/// Only before the first [`features`]; returns false when too late (or set
/// already).
pub fn use_cache(file: PathBuf, trust: bool) -> bool {
    if FEATURES.get().is_some() {
        return false;
    }
    CACHE.set((file, trust)).is_ok()
}

/// The probe cache file in use, if any.
pub fn cache_file() -> Option<&'static Path> {
    CACHE.get().map(|(f, _)| f.as_path())
}

static FEATURES: OnceLock<Features> = OnceLock::new();

/// The features of this process, probed on first use.
pub fn features() -> &'static Features {
    FEATURES.get_or_init(|| {
        let features = match CACHE.get() {
            Some((file, trust)) => {
                let key = probe_cache::Key::of_this_process();
                let read = if *trust { probe_cache::read(file, &key) } else { None };
                let claims = read.unwrap_or_default();
                let features = probe(claims);
                let found = Claims { userns: features.userns, netns: features.netns, pidns: features.pidns };
                // Rewritten when missing, for another key, or claiming less
                // than was found (a full probe always rewrites it).
                if read != Some(found) {
                    probe_cache::write(file, &key, found);
                }
                features
            }
            None => probe(Claims::none()),
        };
        // The layers every confined hook gets; a limit kept without a
        // cgroup is said where a plugin sets one (`Confinement::for_plugin`).
        features.warn_partial(&features.missing_layers());
        features
    })
}

/// Probes what `claims` does not claim (a claim is taken as it is: one
/// that does not hold fails the hook's start).
fn probe(claims: Claims) -> Features {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let landlock_abi = landlock_abi();
    let mut cached = Vec::new();
    let mut claimed = |claim: bool, name: &'static str| {
        if claim {
            cached.push(name);
        }
        claim
    };
    let userns = !root && (claimed(claims.userns, "userns") || can_unshare(libc::CLONE_NEWUSER));
    let netns = claimed(claims.netns, "netns")
        || if root { can_unshare(libc::CLONE_NEWNET) } else { userns && can_unshare_user_net() };
    let pidns = claimed(claims.pidns, "pidns") || can_pid_namespace(root, userns);
    let seccomp = super::seccomp::programs().is_some()
        // SAFETY: PR_GET_SECCOMP only reads this process's mode.
        && unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
    Features { landlock_abi, netns, userns, root, pidns, seccomp, cached, limits: OnceLock::new() }
}

/// The limits' part of the probe: the cgroup hierarchies ctxhost can make
/// per-call cgroups in, and what that leaves to rlimits.
fn probe_limits(userns: bool, pidns: bool) -> Limits {
    let cgroups = Bases::probe(Path::new("/proc/self/mountinfo"), Path::new("/proc/self/cgroup"));
    let memory_limit = if cgroups.v2_memory {
        "cgroup v2"
    } else if cgroups.v1_memory.is_some() {
        "cgroup v1"
    } else {
        "rlimit"
    };
    let process_limit = if cgroups.v2_pids {
        "cgroup v2"
    } else if cgroups.v1_pids.is_some() {
        "cgroup v1"
    } else if userns {
        "rlimit"
    } else {
        "none"
    };
    let kill = if pidns {
        "pid namespace"
    } else if cgroups.use_v2() {
        "cgroup v2"
    } else if cgroups.v1_pids.is_some() || cgroups.v1_memory.is_some() {
        "cgroup v1"
    } else {
        "none"
    };
    Limits { cgroups, memory_limit, process_limit, kill }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call
    // only returns the ABI version (or -1).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(abi).unwrap_or(0).max(0)
}

/// Whether a forked child can `unshare(flags)`.
fn can_unshare(flags: libc::c_int) -> bool {
    in_child(|| {
        // SAFETY: unshare only changes the (forked, single-threaded) child.
        unsafe { libc::unshare(flags) == 0 }
    })
}

/// Whether a forked child can make a user namespace and, in it, a network namespace.
fn can_unshare_user_net() -> bool {
    in_child(|| {
        // SAFETY: as above.
        unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 && libc::unshare(libc::CLONE_NEWNET) == 0 }
    })
}

/// Whether a forked child can make a pid and mount namespace (in a user
/// namespace when not root) and, in a grandchild, mount its own `/proc`.
fn can_pid_namespace(root: bool, userns: bool) -> bool {
    if !root && !userns {
        return false;
    }
    let flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | if root { 0 } else { libc::CLONE_NEWUSER };
    in_child(|| {
        // SAFETY: unshare + fork + mount in the forked, single-threaded
        // child and its own child; both leave with _exit.
        unsafe {
            if libc::unshare(flags) != 0 {
                return false;
            }
            let pid = libc::fork();
            if pid < 0 {
                return false;
            }
            if pid == 0 {
                libc::_exit(if super::pidns::mount_proc().is_ok() { 0 } else { 1 });
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0) == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
    })
}

/// Runs `test` in a forked child (syscalls only) and returns its answer.
fn in_child(test: impl Fn() -> bool) -> bool {
    // SAFETY: the child runs only `test` (raw syscalls, no allocation, no
    // locks) and leaves with _exit; the parent waits for it by pid.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            libc::_exit(if test() { 0 } else { 1 });
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// A path made from a mount point and a cgroup path (`/a/b` → `<mount>/a/b`).
pub(super) fn join_cgroup(mount: &Path, cgroup: &str) -> PathBuf {
    mount.join(cgroup.trim_start_matches('/'))
}
