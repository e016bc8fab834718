//! Script plugins run as processes: launchers, environment, one-shot calls.
//!
//! [`ProcessRunner`] owns everything about one plugin that is decided once
//! (launcher path, environment plan) and turns a typed [`HookRequest`] into
//! one process call and its reply. It never interprets the reply beyond the
//! stdout rule; typed reply handling is the engine's.

mod capture;
mod env;
mod exit;
mod forkserver;
pub mod launcher;
mod oneshot;
mod plan;
pub mod probe;
pub mod sandbox;
pub mod shim;
mod spawn;
pub mod tmp;
pub mod venv;
mod worker;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::RwLock;
use std::time::Duration;

use serde_json::Value;

pub use env::{EnvInputs, EnvPlan};
pub use exit::label as exit_label;
pub use forkserver::{PRELOAD as FORKSERVER_PRELOAD, decision as forkserver_decision};
pub use launcher::{CommandLine, Launcher, RuntimeInfo, find_on_path, info as runtime_info};
pub use oneshot::DEFAULT_OUTPUT_CAP;
pub use plan::{env_plan, system_launcher};
pub use worker::{
    LOOP_COOLDOWN as WORKER_LOOP_COOLDOWN, LOOP_LIMIT as WORKER_LOOP_LIMIT, MAX_REPLY as WORKER_MAX_REPLY,
};

use super::{BoxFuture, CallOptions, HookError, Runner};
use crate::manifest::{Manifest, Runtime, check_hook_path};
use crate::protocol::{HookRequest, parse_stdout};

/// Resolves the launcher of `runtime` for a plugin in `plugin_dir`: found on
/// `PATH` once, and seen through version-manager shims (cached under
/// `cache_dir`). A shim is asked with the hook environment but the user's
/// own `HOME` (`user_home`: where the managers keep their global version
/// files), not the hook home. Never fails: a missing launcher is recorded
/// and reported by each call and by the doctor.
pub fn resolve_launcher(
    runtime: &Runtime,
    plugin_dir: &Path,
    hook_env: &[(OsString, OsString)],
    user_home: Option<&Path>,
    cache_dir: &Path,
) -> Launcher {
    let info = runtime_info(runtime);
    // The hook's own PATH (a `[env] PATH` wins over the host's), as the hook
    // would search it: the last entry of a name is the one in force.
    let path = last(hook_env, "PATH");
    match runtime {
        Runtime::Native => return Launcher::Direct,
        Runtime::Wasm => return Launcher::InProcess,
        Runtime::Custom(given) => {
            let relative: std::path::PathBuf =
                given.components().filter(|c| *c != std::path::Component::CurDir).collect();
            let program = plugin_dir.join(relative);
            return if launcher::is_executable(&program) {
                Launcher::Program { program, args: Vec::new() }
            } else {
                Launcher::Missing { launcher: program.display().to_string(), reason: "not an executable file".into() }
            };
        }
        _ => {}
    }
    let Some(found) = info.programs.iter().find_map(|p| find_on_path(p, path)) else {
        return Launcher::Missing {
            launcher: info.programs.first().copied().unwrap_or("?").to_owned(),
            reason: format!("looked for {} ({})", info.programs.join(", "), info.install_hint),
        };
    };
    let args = info.args.iter().map(OsString::from).collect();
    let program = match info.exe_query {
        Some(exe_query) if shim::is_shim(&found) => {
            let mut env = hook_env.to_vec();
            if let Some(home) = user_home {
                env.retain(|(k, _)| k != "HOME");
                env.push(("HOME".into(), home.into()));
            }
            let query = shim::ShimQuery {
                shim: &found,
                plugin_dir,
                exe_query,
                append_bin: (*runtime == Runtime::Go).then_some("go"),
                env: &env,
                user_home,
            };
            match shim::resolve(&query, cache_dir) {
                Ok(real) => real,
                Err(reason) => {
                    tracing::warn!("keeping the shim `{}`: {reason}", found.display());
                    found
                }
            }
        }
        _ => found,
    };
    Launcher::Program { program, args }
}

/// The value of `name` in an ordered environment (later entries win).
fn last<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a std::ffi::OsStr> {
    env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_os_str())
}

/// A per-call temporary directory, removed when dropped ([`remove_tree_soon`])
/// — also when the hook left parts of it unwritable (the group is dead by then).
struct CallTmp(std::path::PathBuf);

impl CallTmp {
    fn create(plugin: &str) -> std::io::Result<Self> {
        Ok(CallTmp(tempfile::Builder::new().prefix(&tmp::prefix(plugin, false)).tempdir()?.keep()))
    }
}

impl Drop for CallTmp {
    fn drop(&mut self) {
        remove_tree_soon(std::mem::take(&mut self.0));
    }
}

/// A hook's temporary directory, removed when this is dropped — wherever
/// that happens.
pub(crate) struct Removal(pub(crate) std::path::PathBuf);

impl Drop for Removal {
    fn drop(&mut self) {
        remove_tree(&self.0);
    }
}

/// Removes a hook's temporary directory, off the caller's path when a
/// runtime is at hand: on a filesystem mounted with `discard`, freeing a
/// directory's block waits for the disk (~0.1-0.5 ms here), which a call
/// need not wait for. The blocking task owns the [`Removal`], so the
/// directory goes on every path: the task runs it; or a runtime shutting
/// down drops the task unrun (tokio drops queued and refused blocking tasks
/// at shutdown) and the drop removes it there and then; without a runtime
/// it goes at once.
pub(crate) fn remove_tree_soon(path: std::path::PathBuf) {
    if path.as_os_str().is_empty() {
        return;
    }
    let removal = Removal(path);
    off_the_path(move || drop(removal));
}

/// Runs `work` on the blocking pool ([`blocking_pool`]) without waiting
/// for it, or at once when there is none. A runtime shutting down drops a
/// queued task unrun: what must happen on every path belongs in a drop of
/// something `work` owns (as a [`Removal`]).
pub(crate) fn off_the_path(work: impl FnOnce() + Send + 'static) {
    match blocking_pool() {
        Some(pool) => drop(pool.spawn_blocking(work)),
        None => work(),
    }
}

/// Set by [`one_call_per_process`].
static ONE_CALL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process makes one hook call and ends (`ctxhost hook`): work that
/// would go to the blocking pool to keep it off later calls' path is done
/// at once instead. The pool's first task makes a thread (~1 ms here), and
/// the runtime's shutdown would wait for the task all the same.
pub fn one_call_per_process() {
    ONE_CALL.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The runtime whose blocking pool takes work off a call's path: the
/// current one, unless this process makes only one call.
pub(crate) fn blocking_pool() -> Option<tokio::runtime::Handle> {
    if ONE_CALL.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    tokio::runtime::Handle::try_current().ok()
}

/// A close-on-exec pipe: (read end, write end).
///
/// # Errors
/// pipe2(2)'s (out of fds).
pub(crate) fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [-1; 2];
    // SAFETY: pipe2(2) writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Removes a hook's temporary directory, opening up what the hook locked.
pub(crate) fn remove_tree(path: &Path) {
    // Most hooks leave their directory empty: one rmdir, not a walk.
    if std::fs::remove_dir(path).is_ok() || std::fs::remove_dir_all(path).is_ok() {
        return;
    }
    open_up(path);
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("could not remove the hook's temporary directory `{}`: {e}", path.display());
    }
}

/// Makes every directory below `dir` (symlinks not followed) writable and
/// searchable by its owner, so it can be removed.
fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
}

/// Everything fixed about one script plugin, decided at load.
#[derive(Debug)]
pub struct ProcessPlugin {
    pub manifest: Manifest,
    pub launcher: Launcher,
    pub env: EnvPlan,
    /// How its processes are confined (from the operator's grant).
    pub confinement: sandbox::Confinement,
    /// One-shot hooks go through a fork server (Python only; decided at
    /// load from `[hooks] forkserver` and `[runner] python_forkserver`).
    pub forkserver: bool,
}

/// Runs hooks of one script plugin as one-shot processes, or on persistent
/// workers (`worker/`) when the plugin sets `persistent_subprocess`.
#[derive(Debug)]
pub struct ProcessRunner {
    plugin: ProcessPlugin,
    output_cap: usize,
    /// Bootstrap `env_overrides`, already filtered.
    overrides: RwLock<BTreeMap<String, String>>,
    /// The persistent workers; stopped when the runner is dropped.
    workers: Option<worker::Workers>,
    /// The fork server of one-shot Python hooks; stopped when dropped.
    forkserver: Option<forkserver::ForkServer>,
    /// The engine's metrics (fork server fallbacks are counted there).
    metrics: std::sync::OnceLock<std::sync::Arc<crate::metrics::Metrics>>,
}

impl ProcessRunner {
    pub fn new(plugin: ProcessPlugin) -> Self {
        let workers = plugin.manifest.settings.persistent_subprocess.then(|| worker::Workers::new(&plugin.manifest));
        let forkserver = (plugin.forkserver && plugin.manifest.settings.runtime == Runtime::Python).then(|| {
            let idle = Duration::from_secs(plugin.manifest.settings.worker_idle_secs.max(1));
            forkserver::ForkServer::new(&plugin.manifest.name, idle)
        });
        ProcessRunner {
            plugin,
            output_cap: DEFAULT_OUTPUT_CAP,
            overrides: RwLock::new(BTreeMap::new()),
            workers,
            forkserver,
            metrics: std::sync::OnceLock::new(),
        }
    }

    /// The pid of the plugin's fork server, when one runs now.
    pub fn forkserver_pid(&self) -> Option<u32> {
        self.forkserver.as_ref().and_then(forkserver::ForkServer::running_pid)
    }

    /// Pids of the plugin's persistent workers alive now (empty for one-shot plugins).
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.as_ref().map(worker::Workers::pids).unwrap_or_default()
    }

    /// Sets the per-stream output cap (default [`DEFAULT_OUTPUT_CAP`]).
    pub fn with_output_cap(mut self, cap: usize) -> Self {
        self.output_cap = cap;
        self
    }

    pub fn plugin(&self) -> &ProcessPlugin {
        &self.plugin
    }

    async fn call_inner(&self, request: &HookRequest, options: &CallOptions) -> Result<Value, HookError> {
        let manifest = &self.plugin.manifest;
        let hook = request.hook();
        let script = manifest
            .hook(hook)
            .ok_or_else(|| HookError::not_declared(&manifest.name, hook, manifest.hooks.keys().copied()))?;
        let base_secs = options.timeout_secs.unwrap_or(manifest.settings.hook_timeout_secs);
        let secs = base_secs.saturating_mul(u64::from(hook.timeout_factor()));
        if let Some(workers) = &self.workers {
            self.own_dirs().await;
            // The path is checked when a worker starts (a running worker has
            // its script loaded already).
            let timeout = Duration::from_secs(secs);
            return workers.call(&self.plugin, &self.overrides, request, script, timeout).await;
        }
        // Checked on every call: the file may have moved or been replaced by
        // an escaping symlink since load.
        let path = check_hook_path(&manifest.dir, &script.raw)?;
        let command = self.plugin.launcher.command_for(&path).map_err(HookError::Launch)?;
        self.own_dirs().await;
        let stdin = request.to_json_line();
        let timeout = Duration::from_secs(secs);
        if let Some(server) = &self.forkserver {
            match self.through_forkserver(server, request, &command, &path, &stdin, timeout).await {
                Ok(finished) => {
                    let stdout = finished?.check_status()?;
                    return Ok(parse_stdout(&stdout)?);
                }
                Err(why) => {
                    tracing::debug!(plugin = %manifest.name, hook = %hook, "spawning the call: {why}");
                    if let Some(metrics) = self.metrics.get() {
                        metrics.record_worker(&manifest.name, hook, crate::metrics::WorkerEvent::ForkserverFallback);
                    }
                }
            }
        }
        let tmp = CallTmp::create(&manifest.name).map_err(HookError::Io)?;
        let env = {
            let overrides = self.overrides.read().map(|o| o.clone()).unwrap_or_default();
            self.plugin.env.for_call(request, &overrides, &tmp.0)
        };
        let finished = oneshot::run(oneshot::OneShot {
            command: &command,
            cwd: &manifest.dir,
            env,
            confinement: &self.plugin.confinement,
            tmpdir: Some(&tmp.0),
            stdin: &stdin,
            timeout,
            output_cap: self.output_cap,
            plugin: &manifest.name,
            hook,
        })
        .await?;
        drop(tmp);
        let stdout = finished.check_status()?;
        Ok(parse_stdout(&stdout)?)
    }
}

impl ProcessRunner {
    /// One call through the fork server: `Err` when the server did not take
    /// it (the caller spawns it); a server that failed a handover is
    /// restarted once.
    async fn through_forkserver(
        &self,
        server: &forkserver::ForkServer,
        request: &HookRequest,
        command: &CommandLine,
        script: &Path,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<Result<oneshot::Finished, HookError>, forkserver::Unavailable> {
        let manifest = &self.plugin.manifest;
        let overrides = self.overrides.read().map(|o| o.clone()).unwrap_or_default();
        let mut fresh = false;
        loop {
            // The environment without TMPDIR decides which server fits.
            let probe = self.plugin.env.for_call(request, &overrides, Path::new(""));
            let base = forkserver::base_env(&probe);
            let lease = server.lease(command, &manifest.dir, &base, &self.plugin.confinement, fresh).await?;
            let env = self.plugin.env.for_call(request, &overrides, &lease.tmpdir.0);
            // The call's own cgroup, as a spawned hook would get (its limits
            // per call, killed with the call); removed when this drops.
            let (_cgroup, join) = self
                .plugin
                .confinement
                .call_cgroup()
                .map_err(|e| forkserver::Unavailable::Start(format!("cannot make the call's cgroup: {e}")))?;
            let result = forkserver::run(forkserver::ForkCall {
                control: &lease.control,
                script,
                argv: vec![script.as_os_str().to_owned()],
                env: &env,
                stdin,
                timeout,
                output_cap: self.output_cap,
                plugin: &manifest.name,
                hook: request.hook(),
                cgroup: &join,
            })
            .await;
            drop(lease);
            match result {
                Err(forkserver::Unavailable::Gone(e)) if !fresh => {
                    tracing::debug!(plugin = %manifest.name, "fork server gone ({e}); restarting it");
                    fresh = true;
                }
                Err(forkserver::Unavailable::Gone(e)) => {
                    server.forget().await;
                    return Err(forkserver::Unavailable::Gone(e));
                }
                other => return other,
            }
        }
    }

    /// The plugin's own dirs (data dir, LibreFang store), made before its
    /// first process — on the blocking pool ([`blocking_pool`]): as root
    /// this gives them to the hook uid, walking their trees. Made once;
    /// later calls pay a load.
    async fn own_dirs(&self) {
        if !self.plugin.confinement.own_dirs_made() {
            let confinement = self.plugin.confinement.clone();
            match blocking_pool() {
                Some(pool) => drop(pool.spawn_blocking(move || confinement.make_own_dirs()).await),
                None => confinement.make_own_dirs(),
            }
        }
    }
}

impl Runner for ProcessRunner {
    fn sandbox(&self) -> crate::runner::SandboxFacts {
        self.plugin.confinement.facts()
    }

    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        options: &'a CallOptions,
    ) -> BoxFuture<'a, Result<Value, HookError>> {
        Box::pin(self.call_inner(request, options))
    }

    /// Every hook must turn into a command line: the launcher exists, a
    /// native script is executable or has a `#!` line.
    fn ready(&self) -> Result<(), String> {
        let plugin = &self.plugin;
        plugin.manifest.hooks.iter().try_for_each(|(hook, script)| {
            plugin.launcher.command_for(&script.path).map(|_| ()).map_err(|e| format!("hook `{hook}`: {e}"))
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            if let Some(workers) = &self.workers {
                workers.shutdown().await;
            }
            if let Some(server) = &self.forkserver {
                server.stop();
            }
        })
    }

    fn attach_metrics(&self, metrics: std::sync::Arc<crate::metrics::Metrics>) {
        let _ = self.metrics.set(std::sync::Arc::clone(&metrics));
        if let Some(workers) = &self.workers {
            workers.attach_metrics(metrics);
        }
    }

    /// `jsonrpc` workers' service calls reach `services`; one-shot hooks
    /// read their config from `LIBREFANG_PLUGIN_CONFIG` instead.
    fn attach_services(&self, services: std::sync::Arc<crate::host::services::PluginServices>) {
        if let Some(workers) = &self.workers {
            workers.attach_services(services);
        }
    }

    fn calls_services(&self) -> bool {
        self.workers.is_some()
    }

    fn prewarm(&self) {
        if let Some(workers) = &self.workers {
            let request = HookRequest::Bootstrap(crate::protocol::BootstrapRequest::default());
            workers.prewarm(&self.plugin, &self.overrides, &request);
        }
    }

    fn set_env_overrides(&self, overrides: BTreeMap<String, String>) -> Vec<String> {
        let (kept, warnings) = self.plugin.env.filter_overrides(overrides);
        if let Ok(mut slot) = self.overrides.write() {
            if let Some(workers) = &self.workers
                && *slot != kept
            {
                workers.env_changed();
            }
            *slot = kept;
        }
        warnings
    }
}
