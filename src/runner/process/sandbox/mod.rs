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
//!   cgroup can be made, `RLIMIT_DATA` and (in a user namespace) `RLIMIT_NPROC`;
//! - processes: a pid namespace per process with its own `/proc` — the hook
//!   sees only its own processes, and whatever it leaves behind dies with
//!   it ([`pidns`]); nothing of it outlives ctxhost, however ctxhost dies
//!   ([`tether`]: its init, or without a pid namespace a keeper, watches);
//! - identity: as root, the plugin's own unprivileged uid ([`identity`]),
//!   reaching its roots through covers in its mount namespace ([`view`]);
//!   never a capability;
//! - syscalls: a seccomp filter refusing metadata changes by path and the
//!   kernel's attack surface with `EPERM` ([`seccomp`]);
//! - descriptors: nothing above 2 reaches the hook (close-on-exec is set on
//!   every inherited fd between fork and exec).
//!
//! A plugin granted both the filesystem and the network is the operator's
//! trusted plugin: none of these layers apply to it (it runs as the daemon's
//! user); it is still started off a keeper tying it to ctxhost ([`tether`]).
//! For a one-shot call that keeper shares ctxhost's memory ([`shared`])
//! rather than being forked: a fork's copy-on-write cost ctxhost ~0.5 ms
//! per call here.
//!
//! What the kernel lacks is reported once ([`probe`]) and, with
//! `[sandbox] require = true`, refuses the load. This module never reads a
//! manifest and never decides privileges; it only applies them.

pub mod cgroup;
pub mod fs;
pub mod identity;
pub mod netns;
pub mod pidns;
pub mod probe;
pub mod probe_cache;
pub mod seccomp;
pub mod shared;
pub mod tether;
pub mod view;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use probe::{Features, features};

use crate::manifest::ExecSettings;

pub use crate::config::DEFAULT_MAX_PROCESSES;

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
    /// Any layer applies (not a plugin granted both filesystem and network).
    confined: bool,
    /// As root: the uid and gid the hooks run as.
    hook_id: Option<u32>,
    /// As root: covers that let the hook's uid reach its roots (a template),
    /// planned at the first process, once the plugin's own dirs are made.
    view: std::sync::OnceLock<Option<view::View>>,
    /// Which seccomp rules apply.
    seccomp_mode: seccomp::Mode,
    /// Enter a fresh network namespace.
    isolate_net: bool,
    memory_bytes: Option<u64>,
    max_processes: Option<u64>,
    features: &'static Features,
    /// As root: the plugin's network namespace, made at its second call.
    shared_net: std::sync::OnceLock<Option<netns::SharedNetns>>,
    /// A process of the plugin was confined before (the shared network
    /// namespace is made from the second on).
    started: std::sync::atomic::AtomicBool,
}

impl Plan {
    /// A memory or process limit applies to the plugin's processes.
    fn limited(&self) -> bool {
        self.memory_bytes.is_some() || self.max_processes.is_some()
    }
}

/// Everything a confinement is decided from (privileges already effective).
pub struct Inputs<'a> {
    pub plugin: &'a str,
    pub settings: &'a ExecSettings,
    pub plugin_dir: &'a Path,
    pub data_dir: &'a Path,
    /// The real `HOME` of ctxhost's user (never reachable whole).
    pub user_home: Option<&'a Path>,
    /// The hook's `HOME`, holding LibreFang's layout; `None`: no LibreFang
    /// dirs (an installer).
    pub hook_home: Option<&'a Path>,
    /// The home whose own `.librefang/plugins/<name>/` is looked at when the
    /// plugin's store is first made, to warn that state from before lies
    /// there (`None`: never, e.g. in a throw-away home).
    pub earlier_home: Option<&'a Path>,
    pub launcher: Option<&'a Path>,
    pub venv: Option<&'a Path>,
    /// Directories of the runtime's passthrough path variables.
    pub path_vars: Vec<PathBuf>,
    /// `[sandbox] max_processes` (0: no limit).
    pub max_processes: u64,
    /// `[sandbox] require`.
    pub require: bool,
    /// A dependency installer rather than a hook (pip): metadata changes
    /// allowed in what it may write.
    pub installer: bool,
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
        if i.require {
            // Landlock and the network count only where not granted (above).
            missing.extend(features.missing_layers().into_iter().filter(|m| *m == "pid namespace" || *m == "seccomp"));
            missing.extend(features.missing_limits());
            if !missing.is_empty() {
                return Err(SandboxError::Incomplete {
                    plugin: i.plugin.to_owned(),
                    missing: missing.join(", "),
                    summary: features.summary(),
                });
            }
        }
        let mut warnings = Vec::new();
        let confined = !(s.allow_filesystem && s.allow_network);
        // A plugin granted the filesystem has the daemon's files: it runs as
        // the daemon's user (its own uid could not use the grant).
        let hook_id = (confined && features.root && !s.allow_filesystem).then(|| identity::hook_id(i.plugin));
        let fs = (!s.allow_filesystem && features.landlock_abi >= 1).then(|| {
            let (policy, w) = fs::FsPolicy::build(&fs::FsInputs {
                plugin: i.plugin,
                plugin_dir: i.plugin_dir,
                data_dir: i.data_dir,
                user_home: i.user_home,
                hook_home: i.hook_home,
                earlier_home: i.earlier_home,
                launcher: i.launcher,
                venv: i.venv,
                path_vars: i.path_vars,
                readable_paths: &s.readable_paths,
                writable_paths: &s.writable_paths,
                hook_id,
            });
            warnings.extend(w);
            policy
        });
        let plan = Plan {
            fs,
            confined,
            hook_id,
            view: std::sync::OnceLock::new(),
            seccomp_mode: if i.installer || hook_id.is_some() || s.allow_filesystem {
                seccomp::Mode::OwnerChecked
            } else {
                seccomp::Mode::Strict
            },
            isolate_net: !s.allow_network && features.netns,
            memory_bytes: s.max_memory_mb.filter(|&mb| mb > 0).map(|mb| mb.saturating_mul(1024 * 1024)),
            max_processes: (i.max_processes > 0).then_some(i.max_processes),
            features,
            shared_net: std::sync::OnceLock::new(),
            started: std::sync::atomic::AtomicBool::new(false),
        };
        if plan.limited() {
            warn_limits_without_cgroups(features);
        }
        Ok((Confinement { plan: Some(Arc::new(plan)) }, warnings))
    }

    /// Whether the plugin's own dirs (data dir, LibreFang store and logs)
    /// are made already, or there are none to make.
    pub fn own_dirs_made(&self) -> bool {
        self.plan.as_ref().and_then(|p| p.fs.as_ref()).is_none_or(fs::FsPolicy::own_dirs_made)
    }

    /// Makes the plugin's own dirs (see [`fs::FsPolicy::own_dirs`]): what
    /// its first process needs, never done at load. [`Confinement::prepare`]
    /// does it too; a caller on the async runtime runs this on the blocking
    /// pool first (as root, it walks the trees it gives to the hook uid).
    pub fn make_own_dirs(&self) {
        if let Some(policy) = self.plan.as_ref().and_then(|p| p.fs.as_ref()) {
            policy.own_dirs();
        }
    }

    /// A process of this confinement could not start. When some of the
    /// features it was planned with came from the probe cache, the cache
    /// may claim what this machine lacks: it is removed (the next process
    /// probes them) and the error says so. Either way nothing ran.
    pub fn start_failed(&self, error: io::Error) -> io::Error {
        match self.distrust_cache() {
            Some(note) => io::Error::new(error.kind(), format!("{error} ({note})")),
            None => error,
        }
    }

    /// When this confinement was planned with features taken from the
    /// probe cache: removes the cache and says so (a process failed to
    /// start in its sandbox, [`START_FAILED`]). A hook that fakes that
    /// failure only costs the next process a probe.
    pub fn distrust_cache(&self) -> Option<String> {
        let plan = self.plan.as_ref()?;
        let cached = &plan.features.cached;
        let file = probe::cache_file().filter(|_| plan.confined && !cached.is_empty())?;
        probe_cache::distrust(file);
        Some(format!(
            "the sandbox features {} were taken from the probe cache `{}` and may be stale: it was removed, the \
             next start probes them",
            cached.join(", "),
            file.display()
        ))
    }

    /// The layers that apply to this plugin's processes on this machine
    /// (what [`Confinement::prepare`] sets up) and their limits.
    pub fn facts(&self) -> crate::runner::SandboxFacts {
        let mut facts = crate::runner::SandboxFacts::default();
        let Some(plan) = &self.plan else { return facts };
        let f = plan.features;
        if let Some(bytes) = plan.memory_bytes {
            facts.limits.insert("memory_bytes", bytes);
        }
        if let Some(n) = plan.max_processes {
            facts.limits.insert("max_processes", n);
        }
        if plan.limited() {
            let limits = f.limits();
            if limits.memory_limit.starts_with("cgroup") {
                facts.layers.push("cgroup");
            } else if limits.memory_limit == "rlimit" || limits.process_limit == "rlimit" {
                facts.layers.push("rlimit");
            }
        }
        if !plan.confined {
            return facts;
        }
        if plan.fs.is_some() {
            facts.layers.push("landlock");
        }
        if plan.isolate_net {
            facts.layers.push("network_namespace");
        }
        if f.pidns {
            facts.layers.push("pid_namespace");
        }
        if seccomp::programs().is_some() {
            facts.layers.push("seccomp");
        }
        if plan.hook_id.is_some() {
            facts.layers.push("uid");
        }
        facts
    }

    /// As root: the uid the plugin's hooks run as (what a directory made
    /// for them is given to).
    pub fn hook_uid(&self) -> Option<u32> {
        self.plan.as_ref().and_then(|p| p.hook_id)
    }

    /// Whether the filesystem is confined (Landlock applies).
    pub fn confines_filesystem(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.fs.is_some())
    }

    /// Whether the process gets its own network namespace.
    pub fn isolates_network(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.isolate_net)
    }

    /// The cgroup of one call, with the plugin's limits, when it would get
    /// one (a limit asks, the machine has a hierarchy for it): its cleanup
    /// and the `cgroup.procs` files the call's process joins through. A
    /// spawned hook joins in its child steps; a fork server's child is moved
    /// in by the host before it runs the script. No cgroup: an empty list.
    ///
    /// # Errors
    /// A cgroup that cannot be made or limited.
    pub fn call_cgroup(&self) -> io::Result<(Cleanup, Vec<OwnedFd>)> {
        let mut cleanup = Cleanup::default();
        let Some(plan) = &self.plan else { return Ok((cleanup, Vec::new())) };
        // A cgroup only when a limit asks for one: joining costs the start
        // of the hook a cgroup migration (see DEFAULT_MAX_PROCESSES).
        if !plan.limited() {
            return Ok((cleanup, Vec::new()));
        }
        let bases = &plan.features.limits().cgroups;
        let can_cgroup =
            bases.v2.is_some() || bases.v1_pids.is_some() || (plan.memory_bytes.is_some() && bases.v1_memory.is_some());
        if !can_cgroup {
            return Ok((cleanup, Vec::new()));
        }
        let limits = cgroup::CgroupLimits { memory_bytes: plan.memory_bytes, max_processes: plan.max_processes };
        let (made, fds) = cgroup::CallCgroup::create(bases, limits)?;
        cleanup.cgroup = Some(made);
        Ok((cleanup, fds))
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
        let (cleanup, join) = self.call_cgroup()?;
        let ruleset = match &plan.fs {
            Some(policy) => {
                let made = policy.ruleset(tmpdir).map_err(|e| io::Error::other(format!("landlock: {e}")))?;
                let fd: Option<OwnedFd> = made.into();
                // Decided confined, so never run unconfined.
                Some(fd.ok_or_else(|| io::Error::other("landlock: the kernel enforces no rule of the ruleset"))?)
            }
            None => None,
        };
        let mut rlimits = Vec::new();
        if let Some(bytes) = plan.memory_bytes
            && f.limits().memory_limit == "rlimit"
        {
            rlimits.push((libc::RLIMIT_DATA, bytes));
        }
        if let Some(n) = plan.max_processes
            && f.limits().process_limit == "rlimit"
        {
            rlimits.push((libc::RLIMIT_NPROC, n));
        }
        if !plan.confined {
            // The operator's trusted plugin: only its limits, and a keeper
            // tying it to ctxhost ([`tether`]). Only with nothing to do
            // between fork and exec (no pidfd to watch, no limit) does the
            // process start through posix_spawn (vfork) instead of a full
            // fork of the host.
            let host = tether::host_pidfd();
            if host < 0 && join.is_empty() && rlimits.is_empty() {
                return Ok((None, cleanup));
            }
            let steps = ChildSteps {
                confined: false,
                tether: host >= 0,
                join,
                namespaces: None,
                view: None,
                rlimits,
                hook_id: None,
                ruleset: None,
                proc_rule: 0,
                seccomp: None,
                wipe: pidns::Wipe::of_this_process(),
                host,
                exec: None,
            };
            return Ok((Some(steps), cleanup));
        }
        let pid = f.pidns;
        let user_ns = !f.root && f.userns && (plan.isolate_net || pid);
        // Shared from the plugin's second process on: making it takes a
        // thread (~1 ms here), which a process that starts one hook
        // (`ctxhost hook`) would pay on top of the namespace.
        let later = plan.started.swap(true, std::sync::atomic::Ordering::Relaxed);
        let shared = (plan.isolate_net && f.root && later)
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
            Some(ns) => Some(netns::Namespaces::join(ns, pid)),
            None => netns::Namespaces::new(plan.isolate_net, user_ns, pid),
        };
        let mut view = None;
        if let Some(id) = plan.hook_id {
            if let Some(tmp) = tmpdir {
                // SAFETY: chown on a path ctxhost just made for this process.
                std::os::unix::fs::chown(tmp, Some(id), Some(id))?;
            }
            view = plan_view(plan, tmpdir, id)?;
        }
        // No core dumps of a confined hook (they could land outside its dirs).
        rlimits.push((libc::RLIMIT_CORE, 0));
        let proc_rule = if pid && ruleset.is_some() { fs::read_bits() } else { 0 };
        // A confined hook keeps no capability: as root it would otherwise
        // mknod, load modules, lift its rlimits… (in a user namespace the
        // capabilities are the namespace's, dropped all the same).
        Ok((
            Some(ChildSteps {
                confined: true,
                tether: true,
                join,
                namespaces,
                view,
                rlimits,
                hook_id: plan.hook_id,
                ruleset,
                proc_rule,
                seccomp: seccomp::programs().map(|p| (p, plan.seccomp_mode)),
                wipe: pidns::Wipe::of_this_process(),
                host: tether::host_pidfd(),
                exec: None,
            }),
            cleanup,
        ))
    }
}

/// Says once per process, for the first plugin with a limit, which limits
/// this machine keeps without a cgroup (with rlimits, or not at all): the
/// probe's own warning leaves the limits out, which plugins without one
/// (the default) never use.
fn warn_limits_without_cgroups(features: &Features) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| features.warn_partial(&features.missing_limits()));
}

/// The covers of one process: the plugin's template, plus its TMPDIR when
/// that lies below a directory the hook's uid cannot walk through.
fn plan_view(plan: &Plan, tmpdir: Option<&Path>, id: u32) -> io::Result<Option<view::View>> {
    // The plugin's template, planned once its own dirs exist (the first process).
    let template = plan.view.get_or_init(|| match &plan.fs {
        Some(policy) if plan.features.pidns => {
            let view = view::View::plan(&view_roots(policy), id, id);
            (!view.is_empty()).then_some(view)
        }
        _ => None,
    });
    let tmp_blocked = tmpdir.is_some_and(|t| view::blocked(t, id, id));
    if !tmp_blocked {
        return Ok(template.clone());
    }
    let (Some(policy), Some(tmp)) = (&plan.fs, tmpdir) else { return Ok(template.clone()) };
    let tmp_fd = fs::open_path(tmp)?;
    let mut roots = view_roots(policy);
    roots.push(view::Root { path: tmp, fd: tmp_fd.as_raw_fd() });
    let mut made = view::View::plan(&roots, id, id);
    // The fd must live until the child cloned the tree.
    made.hold(tmp_fd);
    Ok(Some(made))
}

/// The policy's pinned roots, as the view plans them.
fn view_roots(policy: &fs::FsPolicy) -> Vec<view::Root<'_>> {
    policy.roots().map(|r| view::Root { path: &r.path, fd: r.fd().as_raw_fd() }).collect()
}

/// What the child does between fork and exec, in order: mark every
/// inherited fd close-on-exec, join the call's cgroups, clone the roots the
/// hook's uid must reach, enter the namespaces (a pid namespace forks the
/// hook off a keeper; without one a confined hook is forked off a keeper
/// too, [`tether`]), mount its `/proc` and covers, set the rlimits, drop
/// every capability and (as root) become the hook's uid, restrict itself
/// with Landlock (no-new-privs first), install the seccomp filter. Only
/// syscalls on what the parent prepared.
pub struct ChildSteps {
    /// Any layer beyond the limits applies.
    confined: bool,
    /// The hook is started off a keeper that watches ctxhost ([`tether`]).
    tether: bool,
    join: cgroup::JoinFds,
    namespaces: Option<netns::Namespaces>,
    view: Option<view::View>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    hook_id: Option<u32>,
    /// The Landlock ruleset fd (rules added; restrict_self not yet called).
    ruleset: Option<OwnedFd>,
    /// Read rights for a rule on the hook's own `/proc` (0: none).
    proc_rule: u64,
    seccomp: Option<(&'static seccomp::Programs, seccomp::Mode)>,
    /// What the namespace's init (or the keeper) wipes of its copy of the daemon.
    wipe: pidns::Wipe,
    /// ctxhost's pidfd (-1: none), watched by the init or keeper
    /// ([`tether`]); inherited by the fork, close-on-exec.
    host: std::os::fd::RawFd,
    /// The hook's own exec, when the init clones it (see `set_exec`).
    exec: Option<pidns::Exec>,
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
        // SAFETY: every call below is a syscall on this process with
        // buffers and fds prepared by the parent.
        unsafe {
            // Nothing the daemon inherited reaches the hook (std's own fds
            // are close-on-exec already; the steps below use theirs first).
            if self.confined {
                mark_inherited_fds_close_on_exec();
            }
            if self.tether {
                default_signal_handlers();
            }
            self.join_cgroups()?;
            if let Some(view) = &mut self.view {
                view.clone_trees()?;
            }
            let mut split = false;
            if let Some(ns) = &self.namespaces {
                ns.enter()?;
                if ns.new_pid() {
                    if self.exec.is_some() {
                        let mut keep = [-1; 64];
                        let mut n = 0;
                        for fd in self
                            .ruleset
                            .iter()
                            .map(|f| f.as_raw_fd())
                            .chain(self.view.iter().flat_map(|v| v.tree_fds()))
                            .chain([self.host])
                        {
                            if n < keep.len() {
                                keep[n] = fd;
                                n += 1;
                            }
                        }
                        // Returns only when the clone itself failed: then fork.
                        let _ = pidns::split_without_copies(self, &keep[..n]);
                    }
                    let status_pipe = pidns::split()?;
                    split = true;
                    self.init_namespace()?;
                    if self.exec.is_some() {
                        // The hook starts from the init without copying its
                        // memory and execs by itself (never returns here).
                        pidns::clone_hook(status_pipe, self)?;
                    }
                    pidns::fork_hook(status_pipe, self)?;
                }
            }
            if self.tether && !split {
                // No pid namespace to end with ctxhost: a keeper outside
                // watches (with the exec, never returns here).
                tether::split(self)?;
                split = true;
            }
            self.finish(split)
        }
    }

    /// In the namespace's init: the daemon's argv and environment hidden,
    /// a mount namespace of its own with its `/proc` and the view's covers.
    ///
    /// The init makes the mount namespace, not the keeper: the last process
    /// of a mount namespace to exit tears its mounts down, which waits for
    /// an RCU grace period (0.1 to 20 ms here). The init exits after handing
    /// the hook's status to the keeper, off the call's path; the keeper,
    /// whose exit ends the call, is never in it.
    ///
    /// # Safety
    /// Between clone and exec, in the init.
    pub(super) unsafe fn init_namespace(&self) -> io::Result<()> {
        // SAFETY: prctl and memset on the init's own memory, unshare of its
        // own mount namespace, mounts in it.
        unsafe {
            pidns::hide_daemon(&self.wipe);
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            pidns::mount_proc()?;
            if let Some(view) = &self.view {
                view.apply()?;
            }
        }
        Ok(())
    }

    /// The last steps, in the hook: rlimits, capabilities and identity,
    /// no-new-privs, Landlock, seccomp.
    ///
    /// # Safety
    /// Between fork (or clone) and exec.
    unsafe fn finish(&self, split: bool) -> io::Result<()> {
        // SAFETY: syscalls on this process with buffers prepared by the parent.
        unsafe {
            for &(resource, value) in &self.rlimits {
                let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if !self.confined {
                return Ok(());
            }
            drop_capabilities(self.hook_id)?;
            if split {
                // Changing uid cleared it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(ruleset) = &self.ruleset {
                if self.proc_rule != 0 {
                    add_proc_rule(ruleset.as_raw_fd(), self.proc_rule)?;
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some((programs, mode)) = self.seccomp {
                programs.install(mode)?;
            }
        }
        Ok(())
    }

    /// Moves the calling process into the call's cgroups (their
    /// `cgroup.procs`, opened in the parent). No allocation: fit for the
    /// time between fork (or clone) and exec.
    ///
    /// # Errors
    /// A write into `cgroup.procs` failed.
    fn join_cgroups(&self) -> io::Result<()> {
        for fd in &self.join {
            // "0" means the writing process.
            // SAFETY: write(2) of a static byte to an fd the steps own.
            if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether the keeper may start sharing ctxhost's memory
    /// ([`shared`]): the operator's trusted plugin (no sandbox layer, only
    /// the tether and limits), its exec prepared, ctxhost's pidfd open.
    /// Never a confined hook: its steps wipe the init's copy of ctxhost's
    /// argv, make a user namespace, and change uid through the C library's
    /// all-threads wrappers — none of which may run in ctxhost's memory.
    pub fn shares_memory(&self) -> bool {
        !self.confined && self.tether && self.exec.is_some() && self.host >= 0 && self.namespaces.is_none()
    }

    /// The hook's own `execve` (program, argv, envp prepared in the parent),
    /// for the start that does not go back through `Command`: the
    /// namespace's init (or the keeper, [`tether`]) clones the hook sharing
    /// its memory (no copy of the daemon's page tables, about 0.2 ms less
    /// per call).
    pub fn set_exec(
        &mut self,
        program: &Path,
        args: &[std::ffi::OsString],
        env: &[(std::ffi::OsString, std::ffi::OsString)],
    ) {
        use std::os::unix::ffi::OsStrExt;
        if !program.is_absolute() || !self.tether {
            return;
        }
        let c = |b: &[u8]| std::ffi::CString::new(b).ok();
        let Some(program) = c(program.as_os_str().as_bytes()) else { return };
        let mut argv = vec![program.clone()];
        for a in args {
            let Some(a) = c(a.as_bytes()) else { return };
            argv.push(a);
        }
        // Later entries win, as with `Command::envs` (the spec's order).
        let mut last: std::collections::HashMap<&std::ffi::OsStr, usize> = std::collections::HashMap::new();
        for (i, (k, _)) in env.iter().enumerate() {
            last.insert(k.as_os_str(), i);
        }
        let mut envp = Vec::with_capacity(env.len());
        for (i, (k, v)) in env.iter().enumerate() {
            if last.get(k.as_os_str()) != Some(&i) {
                continue;
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            let Some(kv) = c(&kv) else { return };
            envp.push(kv);
        }
        self.exec = Some(pidns::Exec::new(program, argv, envp));
    }

    /// In the cloned hook: the last steps, then `execve`. Never returns.
    /// (A failure is written to the hook's stderr; exit code 127.)
    ///
    /// # Safety
    /// In the hook cloned by the init, on its own stack.
    pub(super) unsafe fn finish_and_exec(&self) -> ! {
        // SAFETY: syscalls only; the exec plan lives as long as the init
        // (suspended until this process execs or exits).
        unsafe {
            let error = match self.finish(true) {
                Ok(()) => match &self.exec {
                    Some(exec) => exec.exec(),
                    None => io::Error::from_raw_os_error(libc::EINVAL),
                },
                Err(e) => e,
            };
            report_and_exit(&error)
        }
    }
}

/// Every signal back to its default action. The keeper and the init never
/// exec: the daemon's signal handlers (a runtime's SIGCHLD handler writing
/// to a pipe they closed) must not run in them. exec would reset them for
/// the hook all the same.
///
/// # Safety
/// Between fork (or clone) and exec.
unsafe fn default_signal_handlers() {
    for signal in 1..libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: signal(2) on this process's own handler table.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

/// What a process that could not start in its sandbox writes on stderr
/// (then `(errno N)`), exiting 127.
pub const START_FAILED: &str = "ctxhost: the hook could not start in its sandbox";

/// Writes `ctxhost: the hook could not start in its sandbox (errno N)` to
/// stderr and exits 127: after a clone there is no way back to `spawn`.
///
/// # Safety
/// Between fork/clone and exec.
pub(super) unsafe fn report_and_exit(error: &io::Error) -> ! {
    let code = error.raw_os_error().unwrap_or(0);
    let mut msg = *b"ctxhost: the hook could not start in its sandbox (errno    )\n";
    let digits = [code / 100 % 10, code / 10 % 10, code % 10];
    for (i, d) in digits.iter().enumerate() {
        msg[57 + i] = b'0' + *d as u8;
    }
    // SAFETY: write + _exit.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// Marks every fd above 2 close-on-exec (`close_range`, or fd by fd up to
/// the limit on Linux < 5.11): what a process inherited does not reach
/// what it execs. ctxhost calls it at start; every confined hook process
/// again before exec. Syscalls only (safe between fork and exec).
pub fn mark_inherited_fds_close_on_exec() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range/getrlimit/fcntl only change flags of this
    // process's fds (or read its limit into a local).
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 { limit.rlim_cur.min(65_536) } else { 1024 };
        for fd in 3..max as libc::c_int {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// A Landlock read rule on the `/proc` the hook mounted (the parent's rule
/// names the host's `/proc`, another file system).
///
/// # Safety
/// Between fork and exec.
unsafe fn add_proc_rule(ruleset: libc::c_int, access: u64) -> io::Result<()> {
    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    // SAFETY: open/landlock_add_rule/close with valid arguments.
    unsafe {
        let fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let err = io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// `capget`/`capset`'s header and data records (`linux/capability.h`,
/// version 3: two data records, capabilities 0-31 and 32-63).
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability for good: the bounding set, the ambient set,
/// then (as root) the uid and gid for `hook_id`'s, then
/// effective/permitted/inheritable, with securebits locked so that an exec
/// as uid 0 does not grant them back.
///
/// # Safety
/// Between fork and exec: raw syscalls, no allocation.
pub(super) unsafe fn drop_capabilities(hook_id: Option<u32>) -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    // SAFETY: prctl and capset with valid arguments on the calling process.
    unsafe {
        // Needs CAP_SETPCAP, so before the sets are emptied.
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 {
            let error = io::Error::last_os_error();
            // Without CAP_SETPCAP — an unprivileged daemon without user
            // namespaces — there is no capability to keep: no-new-privs
            // (set before the exec) keeps a set-user-ID binary from
            // granting any.
            if error.raw_os_error() != Some(libc::EPERM) || hook_id.is_some() || holds_capabilities() {
                return Err(error);
            }
        }
        for cap in 0..64 {
            // EINVAL past the kernel's last capability: done.
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                break;
            }
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if let Some(id) = hook_id {
            // Still holding CAP_SETUID/CAP_SETGID (securebits keep them
            // across the change; they are emptied just below).
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(id, id, id) != 0
                || libc::setresuid(id, id, id) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
        let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this process holds any capability (effective or permitted).
/// Between fork and exec: one syscall.
fn holds_capabilities() -> bool {
    let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capget into a local array of the size version 3 expects.
    if unsafe { libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) } != 0 {
        return true;
    }
    data.iter().any(|d| d.effective != 0 || d.permitted != 0)
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
        super::off_the_path(move || cgroup.kill_and_remove());
    }
}
