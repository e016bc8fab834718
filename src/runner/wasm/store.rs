//! The limits of a component call and the store that enforces them: per call
//! a fresh [`Store`] holding a fresh [`State`], with a fuel budget, an epoch
//! deadline, memory and instance limits (a failed grow traps) and the
//! hostcall fuel that bounds one lift. A store is never reused, so a trap
//! cannot poison a later call.
//!
//! Owns [`Limits`], [`State`] and building a store. Never runs guest code
//! and never keeps a store past its call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::WasiCtx;

use super::component::ComponentRunner;
use super::convert;
use super::host_imports::SharedUsage;
use super::service_imports::ServiceCall;
use super::wasi::{self, GuestOutput};
use crate::host::services::CallContext;
use crate::manifest::DirGrant;
use crate::runner::HookError;

/// The limits and grants of every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub fuel: u64,
    pub timeout_ms: u64,
    pub memory_mb: u64,
    /// Preopened directories; nothing else of the host filesystem is visible.
    pub dirs: Vec<DirGrant>,
    /// The guest's whole environment.
    pub env: BTreeMap<String, String>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { fuel: 1_000_000_000, timeout_ms: 30_000, memory_mb: 64, dirs: Vec::new(), env: BTreeMap::new() }
    }
}

/// Per-call state of a store.
pub struct State {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limits: StoreLimits,
    pub(super) plugin: String,
    pub(super) config: Map<String, Value>,
    pub(super) data_dir: PathBuf,
    /// What the `host.storage-*` storage holds (the runner's, shared).
    pub(super) storage_usage: SharedUsage,
    /// The host services of the `services` import, for this call.
    pub(super) services: ServiceCall,
}

/// The per-call context of [`ComponentRunner::call_in`]: the request's agent
/// and the runtime a waiting service call finishes on.
#[derive(Default)]
pub(super) struct CallEnv {
    /// The export called (`ingest`, `describe`, …), for errors.
    pub(super) export: &'static str,
    pub(super) agent_id: Option<String>,
    pub(super) runtime: Option<tokio::runtime::Handle>,
}

impl CallEnv {
    pub(super) fn export(export: &'static str) -> CallEnv {
        CallEnv { export, ..CallEnv::default() }
    }
}

impl ComponentRunner {
    /// A fresh store for one call of at most `timeout_ms`.
    pub(super) fn store(&self, timeout_ms: u64, env: CallEnv) -> Result<(Store<State>, GuestOutput), HookError> {
        let (wasi, output) = wasi::context(&self.limits)?;
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.limits.memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
            .instances(8)
            .tables(64)
            .memories(8)
            .trap_on_grow_failure(true)
            .build();
        let state = State {
            wasi,
            table: ResourceTable::new(),
            limits,
            plugin: self.name.clone(),
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            storage_usage: self.storage_usage.clone(),
            services: ServiceCall {
                services: self.services.load_full(),
                context: CallContext { agent_id: env.agent_id },
                runtime: env.runtime,
                deadline: Instant::now() + Duration::from_millis(timeout_ms.max(1)),
            },
        };
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.limits);
        // Fails only on an engine without fuel metering (benchmarks): fine.
        let _ = store.set_fuel(self.limits.fuel);
        // What one lift (a reply, a host call's arguments) may allocate in
        // the host, checked before it is allocated.
        store.set_hostcall_fuel(convert::REPLY_BYTES);
        store.set_epoch_deadline(timeout_ms.max(1));
        Ok((store, output))
    }
}
