//! How a hook call executes. [`Runner`] is the one interface the layers above
//! use; they never learn whether a plugin is a process, a worker or a
//! component. A runner serialises the typed request at its boundary and
//! returns the plugin's raw JSON reply.

mod error;
pub mod process;
pub mod wasm;

use serde_json::Value;

pub use error::{ErrorKind, HookError};

use crate::protocol::HookRequest;

pub use crate::host::BoxFuture;

/// Per-call adjustments.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Replaces the manifest's `hook_timeout_secs` (bootstrap still doubles it).
    pub timeout_secs: Option<u64>,
}

/// The confinement in force for a plugin's calls, as the plugin list shows
/// it: the layers that apply (`landlock`, `network_namespace`,
/// `pid_namespace`, `seccomp`, `uid`, `cgroup`, `rlimit` for processes;
/// `fuel`, `deadline`, `memory` for wasm) and their limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SandboxFacts {
    pub layers: Vec<&'static str>,
    pub limits: std::collections::BTreeMap<&'static str, u64>,
}

/// Executes hook calls for one plugin.
pub trait Runner: Send + Sync {
    /// Runs `request` (its `hook()` says which script) and returns the reply.
    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        options: &'a CallOptions,
    ) -> BoxFuture<'a, Result<Value, HookError>>;

    /// Whether every hook of the plugin can start now (its launcher exists,
    /// a native script is executable, …): the first problem, named. A reload
    /// refuses to swap in a plugin that is not ready. Runners that check
    /// everything at load (components) are always ready.
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    /// The engine's metrics, for what a runner counts itself (persistent
    /// worker respawns and retries). The last attached wins.
    fn attach_metrics(&self, metrics: std::sync::Arc<crate::metrics::Metrics>) {
        let _ = metrics;
    }

    /// The plugin's host services (config, vfs, triggers, storage), for
    /// runners whose plugins call them during a hook: persistent workers
    /// with `worker_protocol = "jsonrpc"` and components. The last attached
    /// wins; without one, a service call is answered with an error.
    fn attach_services(&self, services: std::sync::Arc<crate::host::services::PluginServices>) {
        let _ = services;
    }

    /// Whether [`attach_services`](Self::attach_services) reaches anything:
    /// a caller with a single call to make (`ctxhost hook`) opens the store
    /// only for a runner whose plugins can call it.
    fn calls_services(&self) -> bool {
        false
    }

    /// Stops what the plugin keeps running between calls (persistent
    /// workers), gracefully, and waits for it: their last stderr lines are
    /// logged before this returns. Calls after it start afresh.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Starts what the plugin keeps running between calls (persistent
    /// workers with `prewarm_subprocesses`), once. Called by the engine at
    /// start, after bootstrap, inside a tokio runtime. Others do nothing.
    fn prewarm(&self) {}

    /// Applies a bootstrap reply's `env_overrides` to later calls; returns a
    /// warning per refused key. Runners without an environment ignore them.
    fn set_env_overrides(&self, overrides: std::collections::BTreeMap<String, String>) -> Vec<String> {
        let _ = overrides;
        Vec::new()
    }

    /// The confinement its calls run under (none unless the runner says).
    fn sandbox(&self) -> SandboxFacts {
        SandboxFacts::default()
    }
}
