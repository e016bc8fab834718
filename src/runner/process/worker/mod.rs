//! Persistent workers (spec section 7, `persistent_subprocess = true`): one
//! long-lived process per hook script answering one JSON line per request,
//! instead of one process per call. With `worker_protocol = "jsonrpc"`
//! (`agent-hooks.md`, "How script plugins reach the services") every line
//! both ways is JSON-RPC 2.0: the call is a request `hook/<name>` (or
//! `vfs/read_symbolic`) whose params are the request a one-shot script
//! reads, and while handling it the worker may call the plugin's host
//! services (attached with `Runner::attach_services`).
//!
//! A worker starts exactly like a one-shot call of its script (the shared
//! spawn builder: same command, cleared environment in spec order with the
//! `LIBREFANG_*` variables kept, cwd, own process group, confinement), with a
//! TMPDIR of its own that lives as long as it does. The per-call variables
//! `LIBREFANG_AGENT_ID` and `LIBREFANG_MESSAGE` are set but empty in a
//! worker: it serves many agents, and each request line carries both.
//! Bootstrap `env_overrides` that change the environment retire the workers
//! started before them (replaced at their next use).
//!
//! - `line.rs`: the reading rule of a worker's lines (pure);
//! - `rpc.rs`: the `jsonrpc` messages — what a worker's line is, the host's
//!   lines (pure);
//! - `process.rs`: one worker process (start, exchange in either protocol,
//!   fail, stop);
//! - `pool.rs`: the workers of one script (`max_workers`, fair queueing, idle
//!   stop, respawn + one retry, crash-loop fail-fast, metrics events).
//!
//! Choices: `prewarm_subprocesses` starts every script's workers when the
//! engine starts (`Runner::prewarm`, after bootstrap, so `env_overrides`
//! apply) or at the first call — not at load (loading also serves `doctor`,
//! `plugin list` and install checks, which must not run plugin code);
//! a JSON-RPC `error` answer fails the call without replacing the worker (it
//! answered); the services are taken from their slot once per call, so no
//! lock is held while they run; `worker_idle_secs = 0` keeps idle workers until the runner goes; the
//! runner's one-shot output cap does not apply (a reply line may be 4 MiB).
//! Dropping the runner (reload, shutdown) stops its workers gracefully.

mod line;
mod pool;
mod process;
mod rpc;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;

use super::ProcessPlugin;
use crate::host::services::{CallContext, PluginServices};
use crate::manifest::{HookScript, Manifest, WorkerProtocol, check_hook_path};
use crate::protocol::HookRequest;
use crate::runner::HookError;

pub use pool::{LOOP_COOLDOWN, LOOP_LIMIT};
pub use process::MAX_REPLY;

/// Where a plugin's worker events are counted: the engine's metrics, once a
/// layer attaches them (`Runner::attach_metrics`); none for a bare runner.
pub(super) type MetricsSlot = Arc<RwLock<Option<Arc<crate::metrics::Metrics>>>>;

/// The workers of one script plugin, one pool per hook script.
#[derive(Debug)]
pub(super) struct Workers {
    max_workers: u32,
    idle_secs: u64,
    prewarm: bool,
    protocol: WorkerProtocol,
    pools: Mutex<HashMap<PathBuf, Arc<pool::Pool>>>,
    /// Bumped when bootstrap changes the environment.
    generation: AtomicU64,
    prewarmed: AtomicBool,
    metrics: MetricsSlot,
    /// The plugin's host services (`jsonrpc` workers call them).
    services: ServicesSlot,
}

/// Where the attached services wait for the next call.
#[derive(Default)]
struct ServicesSlot(RwLock<Option<Arc<PluginServices>>>);

impl std::fmt::Debug for ServicesSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let attached = self.0.read().map(|s| s.as_ref().map(|s| s.name().to_owned())).unwrap_or_default();
        f.debug_tuple("ServicesSlot").field(&attached).finish()
    }
}

impl std::fmt::Debug for pool::Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("pids", &self.pids()).finish_non_exhaustive()
    }
}

impl Workers {
    pub(super) fn new(manifest: &Manifest) -> Workers {
        let s = &manifest.settings;
        Workers {
            max_workers: s.max_workers,
            idle_secs: s.worker_idle_secs,
            prewarm: s.prewarm_subprocesses,
            protocol: s.worker_protocol,
            pools: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            prewarmed: AtomicBool::new(false),
            metrics: MetricsSlot::default(),
            services: ServicesSlot::default(),
        }
    }

    /// The services `jsonrpc` workers' requests reach from the next call on.
    pub(super) fn attach_services(&self, services: Arc<PluginServices>) {
        *self.services.0.write().unwrap_or_else(|p| p.into_inner()) = Some(services);
    }

    /// Counts worker events into `metrics` from now on.
    pub(super) fn attach_metrics(&self, metrics: Arc<crate::metrics::Metrics>) {
        *self.metrics.write().unwrap_or_else(|p| p.into_inner()) = Some(metrics);
    }

    /// The environment changed: workers started before stop at their next use.
    pub(super) fn env_changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Pids of the workers alive now.
    /// Stops every idle worker gracefully and waits for it (its stderr
    /// logged to the end). Workers busy with a call stop when it ends.
    pub(super) async fn shutdown(&self) {
        let pools: Vec<Arc<pool::Pool>> =
            self.pools.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        for pool in pools {
            pool.shutdown().await;
        }
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools.values().flat_map(|p| p.pids()).collect()
    }

    fn pool(&self, plugin: &str, script: &Path) -> Arc<pool::Pool> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools
            .entry(script.to_owned())
            .or_insert_with(|| {
                pool::Pool::new(plugin, script.to_owned(), self.max_workers, self.idle_secs, self.metrics.clone())
            })
            .clone()
    }

    /// With `prewarm_subprocesses`, starts every script's workers, once:
    /// when the engine starts (after bootstrap, so `env_overrides` apply) or
    /// at the first call, whichever comes first. Needs a tokio runtime.
    pub(super) fn prewarm(
        &self,
        plugin: &ProcessPlugin,
        overrides: &RwLock<BTreeMap<String, String>>,
        request: &HookRequest,
    ) {
        if !self.prewarm || self.prewarmed.swap(true, Ordering::SeqCst) {
            return;
        }
        let generation = self.generation.load(Ordering::SeqCst);
        // One pool per script (the canonical path of load), however many hooks share it.
        let mut scripts: Vec<&HookScript> = plugin.manifest.hooks.values().collect();
        scripts.sort_by(|a, b| a.path.cmp(&b.path));
        scripts.dedup_by(|a, b| a.path == b.path);
        for script in scripts {
            let starter = Starter { plugin, overrides, request, generation, script };
            self.pool(&plugin.manifest.name, &script.path).fill(&|| starter.start());
        }
    }

    /// Runs `request` on a worker of `script`. The script's path is checked
    /// (spec section 5, step 1) whenever a worker starts, not on every call:
    /// a running worker has loaded its script already.
    pub(super) async fn call(
        &self,
        plugin: &ProcessPlugin,
        overrides: &RwLock<BTreeMap<String, String>>,
        request: &HookRequest,
        script: &HookScript,
        timeout: Duration,
    ) -> Result<Value, HookError> {
        let manifest = &plugin.manifest;
        let generation = self.generation.load(Ordering::SeqCst);
        let hook = request.hook();
        let rpc = (self.protocol == WorkerProtocol::Jsonrpc).then(|| process::RpcCall {
            plugin: &manifest.name,
            hook,
            method: hook.rpc_method(),
            services: self.services.0.read().unwrap_or_else(|p| p.into_inner()).clone(),
            context: CallContext { agent_id: request.agent_id().map(str::to_owned) },
        });
        self.prewarm(plugin, overrides, request);
        let starter = Starter { plugin, overrides, request, generation, script };
        let start = || starter.start();
        let pool = self.pool(&manifest.name, &script.path);
        pool.call(&start, generation, hook, &request.to_json_line(), rpc.as_ref(), timeout).await
    }
}

/// What starting a worker for one script needs, borrowed from the call.
struct Starter<'a> {
    plugin: &'a ProcessPlugin,
    overrides: &'a RwLock<BTreeMap<String, String>>,
    request: &'a HookRequest,
    generation: u64,
    script: &'a HookScript,
}

impl<'a> Starter<'a> {
    /// The command, environment (as a one-shot call's, per-call variables
    /// empty) and a fresh TMPDIR for one worker.
    fn start(&self) -> Result<process::Start<'a>, HookError> {
        let (plugin, manifest) = (self.plugin, &self.plugin.manifest);
        // Checked at every start: the file may have moved or been replaced
        // by an escaping symlink since load.
        let path = check_hook_path(&manifest.dir, &self.script.raw)?;
        let command = plugin.launcher.command_for(&path).map_err(HookError::Launch)?;
        let tmpdir = tempfile::Builder::new()
            .prefix(&crate::runner::process::tmp::prefix(&manifest.name, true))
            .tempdir()
            .map_err(HookError::Io)?
            .keep();
        let overrides = self.overrides.read().map(|o| o.clone()).unwrap_or_default();
        let mut env = plugin.env.for_call(self.request, &overrides, &tmpdir);
        blank_first(&mut env, "LIBREFANG_AGENT_ID");
        blank_first(&mut env, "LIBREFANG_MESSAGE");
        Ok(process::Start {
            command,
            cwd: &manifest.dir,
            env,
            confinement: &plugin.confinement,
            tmpdir,
            plugin: &manifest.name,
            hook: self.request.hook(),
            generation: self.generation,
        })
    }
}

/// Empties the first `name` entry: the per-call value, which a worker gets
/// from each request line instead.
fn blank_first(env: &mut [(OsString, OsString)], name: &str) {
    if let Some((_, v)) = env.iter_mut().find(|(k, _)| k == name) {
        *v = OsString::new();
    }
}
