//! Running a component plugin: one shared wasmtime engine (pooling allocator,
//! fuel, epoch interruption with one ticker thread), per plugin an
//! `InstancePre`, per call a fresh store with a fuel budget, an epoch
//! deadline and memory limits. A store is never reused, so a trap cannot
//! poison a later call.
//!
//! Capabilities: the WASI context has no arguments, no environment but the
//! manifest's, preopens only for the granted dirs, and no network (TCP, UDP
//! and name lookups refused explicitly); stdout and stderr keep their last
//! 64 KiB (a guest panic's message comes from there; an error carries only
//! its last lines). Host services are the `host` interface of the world: log,
//! config, per-plugin storage (a cap-std `Dir` on the plugin's data dir; keys
//! become hex file names, so no key can name a path; held to
//! `services::quota`, the one storage quota), events.
//!
//! What a guest hands the host is bounded before it becomes host objects: one
//! lift (a reply, a host call's arguments) by the store's hostcall fuel, a
//! reply's items and text by `convert`'s budget, an agent-loop reply's JSON
//! text by the script stdout cap. Compiled code is loaded from the `.cwasm`
//! cache only through descriptors checked and read once (`cache`).
//!
//! Two worlds load here: `context-plugin` (the context hooks) and
//! `agent-plugin` (also the `agent` export — `describe-agent` at load,
//! `handle` per agent-loop hook — and the `services` import). The linker
//! always provides `services`; each call goes to the attached
//! [`PluginServices`] through its dispatcher, with the agent of the current
//! request. A service call never outlives the call's deadline, and never
//! panics or blocks a runtime worker: component calls run on the blocking
//! pool. This module never decides what an agent-loop reply means (that is
//! `agent::decision`): it only checks that it is JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use serde_json::{Map, Value};
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, Trap,
};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::agent::ctxhost::plugin::services;
use super::bindings::agent::exports::ctxhost::plugin::agent::GuestIndices as AgentIndices;
use super::bindings::ctxhost::plugin::{host, types as wit};
use super::bindings::{ContextPlugin, ContextPluginIndices};
use super::convert::{self, Budget, ReplyTooLarge};
use crate::host::services::{CallContext, PluginServices, quota};
use crate::manifest::{AgentDecl, DirGrant, DirMode};
use crate::protocol::{HookName, HookRequest};
use crate::runner::HookError;

/// One epoch tick.
const TICK: Duration = Duration::from_millis(1);

/// Bytes of each pooled memory and table reset by `memset` rather than
/// `madvise`: a fresh instance then faults in no pages for its stack and
/// first heap pages, and no TLB shootdown follows each call.
const KEEP_RESIDENT: usize = 256 << 10;

/// What a guest printed during one call. The host has no console to give
/// it: both streams are captured and go to tracing (target `plugin_stderr`,
/// as a script's stderr does), and stderr also explains a panic.
struct GuestOutput {
    stdout: TailPipe,
    stderr: TailPipe,
}

impl GuestOutput {
    fn log(&self, plugin: &str) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (bytes, dropped) = pipe.contents();
            if dropped > 0 {
                tracing::info!(target: "plugin_stderr", plugin, stream, "[{dropped} earlier bytes dropped]");
            }
            for line in String::from_utf8_lossy(&bytes).lines().filter(|l| !l.trim().is_empty()) {
                tracing::info!(target: "plugin_stderr", plugin, stream, "{line}");
            }
        }
    }
}

/// Captured guest output per stream, per call: the last this many bytes.
const STDERR_CAP: usize = 64 * 1024;

/// A guest output stream that keeps its last `cap` bytes: a guest never sees
/// it full (writes always succeed), and what it wrote last — a panic's cause
/// — is what is kept.
#[derive(Clone)]
struct TailPipe {
    cap: usize,
    kept: Arc<std::sync::Mutex<(std::collections::VecDeque<u8>, usize)>>,
}

impl TailPipe {
    fn new(cap: usize) -> TailPipe {
        TailPipe { cap, kept: Arc::default() }
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buf, dropped) = &mut *kept;
        let skip = bytes.len().saturating_sub(self.cap);
        buf.extend(&bytes[skip..]);
        let over = buf.len().saturating_sub(self.cap);
        buf.drain(..over);
        *dropped += skip + over;
    }

    /// The bytes kept, and how many earlier ones were dropped.
    fn contents(&self) -> (Vec<u8>, usize) {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (kept.0.iter().copied().collect(), kept.1)
    }
}

impl wasmtime_wasi::cli::IsTerminal for TailPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for TailPipe {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl wasmtime_wasi::p2::OutputStream for TailPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), wasmtime_wasi::p2::StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), wasmtime_wasi::p2::StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, wasmtime_wasi::p2::StreamError> {
        Ok(self.cap)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for TailPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for TailPipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

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

/// An engine configured as the shared one, but with fuel metering on or off
/// and no epoch ticker (deadlines never fire): for measuring what fuel costs.
#[doc(hidden)]
pub fn bench_engine(fuel: bool) -> Engine {
    let mut config = Config::new();
    config.consume_fuel(fuel).epoch_interruption(true);
    Engine::new(&config).unwrap_or_else(|e| panic!("bench engine: {e}"))
}

/// The process-wide engine, with its epoch ticker.
pub fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(256).total_memories(256).total_tables(256).max_memory_size(1 << 30);
            pool.linear_memory_keep_resident(KEEP_RESIDENT).table_keep_resident(KEEP_RESIDENT);
            let mut config = Config::new();
            config.consume_fuel(true).epoch_interruption(true);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            let engine = Engine::new(&config).map_err(|e| format!("cannot start the wasm engine: {e}"))?;
            let ticking = engine.clone();
            std::thread::Builder::new()
                .name("ctxhost-epoch".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(TICK);
                        ticking.increment_epoch();
                    }
                })
                .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
            Ok(engine)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Per-call state of a store.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    plugin: String,
    config: Map<String, Value>,
    data_dir: PathBuf,
    /// What the `host.storage-*` storage holds (the runner's, shared).
    storage_usage: SharedUsage,
    /// The host services of the `services` import, for this call.
    services: ServiceCall,
}

/// What a `services` import needs during one call: the plugin's services
/// (the ones attached when the call started), the call's agent, the tokio
/// runtime to finish a dispatch that has to wait, and the call's deadline.
struct ServiceCall {
    services: Option<Arc<PluginServices>>,
    context: CallContext,
    runtime: Option<tokio::runtime::Handle>,
    deadline: Instant,
}

/// Why a service import failed without reaching a service.
const NO_SERVICES: &str = "no host services are attached to this plugin";

impl ServiceCall {
    /// One dispatcher call, its JSON result or the refusal's text.
    ///
    /// Most service calls finish without waiting (their stores are in
    /// memory behind short locks), so the future is polled once, here. One
    /// that waits (a symbolic read or a `trigger_append` chain running other
    /// plugins) is finished as a task on the captured runtime while this
    /// thread waits for it, bounded by the call's deadline: that never blocks
    /// a runtime worker nor panics, whichever thread the call runs on. Without
    /// a runtime (a `call_sync` outside one) a small one is made for it.
    fn dispatch(&self, method: &str, params: Value) -> Result<Value, String> {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let Some(services) = self.services.clone() else { return Err(NO_SERVICES.to_owned()) };
        let (context, name) = (self.context.clone(), method.to_owned());
        let mut call = Box::pin(async move { services.dispatch(&name, params, &context).await });
        let first = {
            let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
            call.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        let late = || format!("the service call `{method}` outlived the hook's deadline");
        let left = self.deadline.saturating_duration_since(Instant::now());
        let result = match (first, &self.runtime) {
            (Poll::Ready(r), _) => r,
            (Poll::Pending, Some(rt)) => {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                rt.spawn(async move {
                    let _ = tx.send(tokio::time::timeout(left, call).await);
                });
                match rx.recv_timeout(left + TICK * 50) {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) | Err(_) => return Err(late()),
                }
            }
            (Poll::Pending, None) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot run the service call `{method}`: {e}"))?
                .block_on(async move { tokio::time::timeout(left, call).await })
                .map_err(|_| late())?,
        };
        result.map_err(|e| e.message)
    }

    /// [`ServiceCall::dispatch`] with a JSON text result.
    fn text(&self, method: &str, params: Value) -> Result<String, String> {
        self.dispatch(method, params).map(|v| v.to_string())
    }

    /// [`ServiceCall::dispatch`] where `null` means "nothing there".
    fn optional_text(&self, method: &str, params: Value) -> Result<Option<String>, String> {
        self.dispatch(method, params).map(|v| if v.is_null() { None } else { Some(v.to_string()) })
    }
}

/// JSON text from a guest, or the refusal naming the parameter.
fn json_param(name: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("`{name}` is not JSON text: {e}"))
}

fn scope_name(scope: services::Scope) -> &'static str {
    match scope {
        services::Scope::Global => "global",
        services::Scope::Session => "session",
    }
}

impl services::Host for State {
    fn config_get(&mut self, key: String, default_json: Option<String>) -> Result<String, String> {
        let default = default_json.as_deref().map(|d| json_param("default-json", d)).transpose()?;
        let mut params = serde_json::json!({"key": key});
        if let Some(d) = default {
            params["default"] = d;
        }
        self.services.text("config.get", params)
    }

    fn config_set(&mut self, key: String, value_json: String) -> Result<String, String> {
        let value = json_param("value-json", &value_json)?;
        self.services.text("config.set", serde_json::json!({"key": key, "value": value}))
    }

    fn config_list(&mut self) -> Result<String, String> {
        self.services.text("config.list", Value::Null)
    }

    fn config_register(&mut self, schema_json: String) -> Result<String, String> {
        let schema = json_param("schema-json", &schema_json)?;
        self.services.text("config.register", serde_json::json!({"schema": schema}))
    }

    fn vfs_read(&mut self, path: String) -> Result<Option<String>, String> {
        match self.services.dispatch("vfs.read", serde_json::json!({"path": path}))? {
            Value::String(text) => Ok(Some(text)),
            _ => Ok(None),
        }
    }

    fn vfs_write(&mut self, path: String, content: String) -> Result<String, String> {
        let written = self.services.dispatch("vfs.write", serde_json::json!({"path": path, "content": content}))?;
        Ok(written.as_str().map_or_else(|| written.to_string(), str::to_owned))
    }

    fn vfs_write_symbolic(&mut self, path: String, searchable: bool) -> Result<String, String> {
        let params = serde_json::json!({"path": path, "searchable": searchable});
        let written = self.services.dispatch("vfs.write_symbolic", params)?;
        Ok(written.as_str().map_or_else(|| written.to_string(), str::to_owned))
    }

    fn vfs_delete(&mut self, path: String) -> Result<bool, String> {
        Ok(self.services.dispatch("vfs.delete", serde_json::json!({"path": path}))?.as_bool().unwrap_or(false))
    }

    fn vfs_list(&mut self, path: String) -> Result<Vec<String>, String> {
        let children = self.services.dispatch("vfs.list", serde_json::json!({"path": path}))?;
        Ok(children.as_array().into_iter().flatten().filter_map(|c| c.as_str().map(str::to_owned)).collect())
    }

    fn trigger_create(&mut self, trigger_json: String) -> Result<String, String> {
        let trigger = json_param("trigger-json", &trigger_json)?;
        if !trigger.is_object() {
            return Err("`trigger-json` must be a JSON object".to_owned());
        }
        let id = self.services.dispatch("trigger.create", serde_json::json!({"trigger": trigger}))?;
        Ok(id.as_str().map_or_else(|| id.to_string(), str::to_owned))
    }

    fn trigger_get(&mut self, id: String) -> Result<Option<String>, String> {
        self.services.optional_text("trigger.get", serde_json::json!({"id": id}))
    }

    fn trigger_list(&mut self) -> Result<Vec<String>, String> {
        let all = self.services.dispatch("trigger.list", Value::Null)?;
        Ok(all.as_array().into_iter().flatten().map(Value::to_string).collect())
    }

    fn trigger_update(&mut self, id: String, patch_json: String) -> Result<String, String> {
        let patch = json_param("patch-json", &patch_json)?;
        self.services.text("trigger.update", serde_json::json!({"id": id, "patch": patch}))
    }

    fn trigger_delete(&mut self, id: String) -> Result<bool, String> {
        Ok(self.services.dispatch("trigger.delete", serde_json::json!({"id": id}))?.as_bool().unwrap_or(false))
    }

    fn storage_get(&mut self, scope: services::Scope, key: String) -> Result<Option<String>, String> {
        self.services.optional_text("storage.get", serde_json::json!({"scope": scope_name(scope), "key": key}))
    }

    fn storage_set(&mut self, scope: services::Scope, key: String, value_json: String) -> Result<(), String> {
        let value = json_param("value-json", &value_json)?;
        let params = serde_json::json!({"scope": scope_name(scope), "key": key, "value": value});
        self.services.dispatch("storage.set", params).map(drop)
    }

    fn storage_delete(&mut self, scope: services::Scope, key: String) -> Result<bool, String> {
        let params = serde_json::json!({"scope": scope_name(scope), "key": key});
        Ok(self.services.dispatch("storage.delete", params)?.as_bool().unwrap_or(false))
    }

    fn log(&mut self, level: host::Level, message: String) {
        // The same line as `host.log`: it needs no attached services.
        host::Host::log(self, level, message);
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl wit::Host for State {}

impl State {
    fn storage(&self) -> Result<cap_std::fs::Dir, String> {
        std::fs::create_dir_all(&self.data_dir).map_err(|e| format!("storage unavailable: {e}"))?;
        cap_std::fs::Dir::open_ambient_dir(&self.data_dir, cap_std::ambient_authority())
            .map_err(|e| format!("storage unavailable: {e}"))
    }
}

/// What a component's `host.storage-*` storage holds: counted from its files
/// at the runner's first storage call, then kept as values are written and
/// removed (under one lock, so concurrent calls cannot both take the last
/// key). The data dir is the plugin's own; a reload counts afresh.
#[derive(Debug, Clone, Copy)]
struct StorageUsage {
    keys: usize,
    bytes: usize,
}

/// The usage of one runner's storage, shared by its calls.
type SharedUsage = Arc<std::sync::Mutex<Option<StorageUsage>>>;

/// The storage files (`kv-…`) in `dir`: how many, and their bytes.
fn scan_storage(dir: &cap_std::fs::Dir) -> Result<StorageUsage, String> {
    let mut usage = StorageUsage { keys: 0, bytes: 0 };
    for entry in dir.entries().map_err(|e| format!("storage unavailable: {e}"))? {
        let entry = entry.map_err(|e| format!("storage unavailable: {e}"))?;
        if !entry.file_name().to_string_lossy().starts_with(KEY_PREFIX) {
            continue;
        }
        let meta = entry.metadata().map_err(|e| format!("storage unavailable: {e}"))?;
        if meta.is_file() {
            usage.keys += 1;
            usage.bytes = usage.bytes.saturating_add(usize::try_from(meta.len()).unwrap_or(usize::MAX));
        }
    }
    Ok(usage)
}

/// The size of the value stored in `file`, if there is one.
fn stored_size(dir: &cap_std::fs::Dir, file: &str) -> Option<usize> {
    let meta = dir.symlink_metadata(file).ok()?;
    meta.is_file().then(|| usize::try_from(meta.len()).unwrap_or(usize::MAX))
}

const KEY_PREFIX: &str = "kv-";

/// The longest storage key: its file name (`kv-` and two hex digits a
/// byte) must fit the 255-byte file-name limit.
pub const STORAGE_KEY_BYTES: usize = (255 - KEY_PREFIX.len()) / 2;

/// A storage key as a file name: hex, so it can never be a path.
fn key_file(key: &str) -> Result<String, String> {
    if key.len() > STORAGE_KEY_BYTES {
        return Err(format!(
            "storage key of {} bytes is too long: a key may hold at most {STORAGE_KEY_BYTES} bytes \
             (it is stored as a file name)",
            key.len()
        ));
    }
    Ok(format!("{KEY_PREFIX}{}", hex::encode(key.as_bytes())))
}

impl host::Host for State {
    fn log(&mut self, level: host::Level, message: String) {
        let plugin = self.plugin.as_str();
        match level {
            host::Level::Trace => tracing::trace!(target: "plugin_log", plugin, "{message}"),
            host::Level::Debug => tracing::debug!(target: "plugin_log", plugin, "{message}"),
            host::Level::Info => tracing::info!(target: "plugin_log", plugin, "{message}"),
            host::Level::Warn => tracing::warn!(target: "plugin_log", plugin, "{message}"),
            host::Level::Error => tracing::error!(target: "plugin_log", plugin, "{message}"),
        }
    }

    fn config_get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).map(Value::to_string)
    }

    fn storage_get(&mut self, key: String) -> Option<Vec<u8>> {
        self.storage().ok()?.read(key_file(&key).ok()?).ok()
    }

    /// Held to the storage quota of `services` ([`quota::check_storage_write`]).
    fn storage_set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        let file = key_file(&key)?;
        let dir = self.storage()?;
        let mut shared = self.storage_usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let usage = match *shared {
            Some(usage) => usage,
            None => *shared.insert(scan_storage(&dir)?),
        };
        let replaced = stored_size(&dir, &file);
        quota::check_storage_write(&self.plugin, &key, value.len(), replaced, usage.keys, usage.bytes)?;
        match dir.write(&file, &value) {
            Ok(()) => {
                *shared = Some(StorageUsage {
                    keys: usage.keys + usize::from(replaced.is_none()),
                    bytes: usage.bytes.saturating_sub(replaced.unwrap_or(0)) + value.len(),
                });
                Ok(())
            }
            Err(e) => {
                *shared = None; // a partial write: count again next time
                Err(format!("storage key `{key}`: {e}"))
            }
        }
    }

    fn storage_delete(&mut self, key: String) -> Result<(), String> {
        let file = key_file(&key)?;
        let dir = self.storage()?;
        let mut shared = self.storage_usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let replaced = stored_size(&dir, &file);
        match dir.remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("storage key `{key}`: {e}")),
            _ => {
                if let (Some(usage), Some(size)) = (shared.as_mut(), replaced) {
                    usage.keys = usage.keys.saturating_sub(1);
                    usage.bytes = usage.bytes.saturating_sub(size);
                }
                Ok(())
            }
        }
    }

    fn emit_event(&mut self, name: String, payload: String) {
        tracing::debug!(target: "plugin_log", plugin = self.plugin.as_str(), "event `{name}`: {payload}");
    }
}

/// A loaded component plugin.
pub struct ComponentRunner {
    name: String,
    pre: InstancePre<State>,
    context: ContextPluginIndices,
    /// Present when the component exports the `agent` interface.
    agent: Option<AgentExport>,
    /// Context hooks (`describe`) and agent-loop hooks (`describe-agent`).
    hooks: BTreeSet<HookName>,
    limits: Limits,
    config: Map<String, Value>,
    data_dir: PathBuf,
    /// What the `host.storage-*` storage holds, shared by every call.
    storage_usage: SharedUsage,
    from_cache: bool,
    /// The host services of the `services` import; the last attached wins.
    services: ArcSwapOption<PluginServices>,
}

/// The `agent` export of an `agent-plugin` component.
struct AgentExport {
    indices: AgentIndices,
    decl: AgentDecl,
}

/// The interface a component exports to take part in the agent loop.
const AGENT_EXPORT: &str = "ctxhost:plugin/agent@0.1.0";

/// The per-call context of [`ComponentRunner::call_in`]: the request's agent
/// and the runtime a waiting service call finishes on.
#[derive(Default)]
struct CallEnv {
    /// The export called (`ingest`, `describe`, …), for errors.
    export: &'static str,
    agent_id: Option<String>,
    runtime: Option<tokio::runtime::Handle>,
}

impl CallEnv {
    fn export(export: &'static str) -> CallEnv {
        CallEnv { export, ..CallEnv::default() }
    }
}

/// Reads `describe-agent`'s JSON: the agent-loop hooks it lists and the
/// declarations [`AgentDecl::from_json`] reads.
fn read_describe_agent(text: &str) -> Result<(BTreeSet<HookName>, AgentDecl), String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("its describe-agent reply is not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!(
            "its describe-agent reply must be a JSON object, not {}",
            crate::protocol::json_kind(&value)
        ));
    }
    let mut hooks = BTreeSet::new();
    match value.get("hooks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            for name in names {
                let Some(name) = name.as_str() else {
                    return Err(format!("its describe-agent `hooks` must list hook names, not {name}"));
                };
                let hook: HookName = name.parse().map_err(|_| {
                    let hint = crate::hint::did_you_mean(name, HookName::AGENT.iter().map(|h| h.as_str()));
                    format!("its describe-agent `hooks` lists `{name}`, which is not an agent-loop hook{hint}")
                })?;
                if !HookName::AGENT.contains(&hook) {
                    return Err(format!(
                        "its describe-agent `hooks` lists `{name}`, a context hook: context hooks are listed by `describe`"
                    ));
                }
                hooks.insert(hook);
            }
        }
        Some(other) => return Err(format!("its describe-agent `hooks` must be a list, not {other}")),
    }
    let decl = AgentDecl::from_json(&value).map_err(|e| format!("its describe-agent reply: {e}"))?;
    Ok((hooks, decl))
}

fn hook_of(h: wit::Hook) -> HookName {
    match h {
        wit::Hook::Bootstrap => HookName::Bootstrap,
        wit::Hook::Ingest => HookName::Ingest,
        wit::Hook::Assemble => HookName::Assemble,
        wit::Hook::Compact => HookName::Compact,
        wit::Hook::AfterTurn => HookName::AfterTurn,
        wit::Hook::TransformToolResult => HookName::TransformToolResult,
        wit::Hook::PrepareSubagent => HookName::PrepareSubagent,
        wit::Hook::MergeSubagent => HookName::MergeSubagent,
    }
}

impl ComponentRunner {
    /// Compiles and links `wasm` and asks it to describe itself.
    ///
    /// # Errors
    /// Not a component, built for another world version, an import outside
    /// the policy, or `describe` failing.
    pub fn load(
        name: &str,
        wasm: &Path,
        limits: Limits,
        config: Map<String, Value>,
        data_dir: PathBuf,
        cache_dir: Option<&Path>,
    ) -> Result<Self, HookError> {
        let shared = engine().map_err(|m| HookError::Component(format!("`{}`: {m}", wasm.display())))?;
        Self::load_with_engine(shared, name, wasm, limits, config, data_dir, cache_dir)
    }

    /// [`ComponentRunner::load`] on another engine (benchmarks).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)] // `load`'s arguments plus the engine
    pub fn load_with_engine(
        engine: &Engine,
        name: &str,
        wasm: &Path,
        limits: Limits,
        config: Map<String, Value>,
        data_dir: PathBuf,
        cache_dir: Option<&Path>,
    ) -> Result<Self, HookError> {
        let fail = |m: String| HookError::Component(format!("`{}`: {m}", wasm.display()));
        // The checked (canonical) path, never through a link swapped in since.
        let bytes =
            crate::manifest::beneath::read_no_symlinks(wasm, u64::MAX).map_err(|e| fail(e.reason.to_string()))?;
        if !wasmparser_is_component(&bytes) {
            return Err(fail("not a WebAssembly component (build it with `--target wasm32-wasip2`)".into()));
        }
        let (component, from_cache) = compile(engine, &bytes, cache_dir).map_err(fail)?;
        check_world_version(&component, engine).map_err(fail)?;
        let mut linker: Linker<State> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| fail(e.to_string()))?;
        ContextPlugin::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(|e| fail(e.to_string()))?;
        services::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(|e| fail(e.to_string()))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| fail(describe_link_error(&e)))?;
        let context = ContextPluginIndices::new(&pre)
            .map_err(|e| fail(format!("does not implement ctxhost:plugin@0.1.0: {e:#}")))?;
        let agent = match component.get_export_index(None, AGENT_EXPORT) {
            None => None,
            Some(_) => Some(AgentIndices::new(&pre).map_err(|e| {
                fail(format!("exports `{AGENT_EXPORT}` but not as the world agent-plugin defines it: {e:#}"))
            })?),
        };
        let mut runner = ComponentRunner {
            name: name.to_owned(),
            pre,
            context,
            agent: None,
            hooks: BTreeSet::new(),
            limits,
            config,
            data_dir,
            storage_usage: SharedUsage::default(),
            from_cache,
            services: ArcSwapOption::empty(),
        };
        let timeout_ms = runner.limits.timeout_ms;
        let description = runner.with_context(timeout_ms, CallEnv::export("describe"), |p, s| p.call_describe(s))?;
        runner.hooks = description.hooks.into_iter().map(hook_of).collect();
        if let Some(indices) = agent {
            let text = runner.with_instance(timeout_ms, CallEnv::export("describe-agent"), |instance, store| {
                indices.load(&mut *store, instance)?.call_describe_agent(store)
            })?;
            check_agent_reply("describe-agent", &text)?;
            let (hooks, decl) = read_describe_agent(&text).map_err(|m| fail(format!("plugin '{name}': {m}")))?;
            runner.hooks.extend(hooks);
            runner.agent = Some(AgentExport { indices, decl });
        }
        Ok(runner)
    }

    /// Attaches the host services the `services` import reaches; the last
    /// attached wins. Calls already running keep the ones they started with.
    pub fn attach_services(&self, services: Arc<PluginServices>) {
        self.services.store(Some(services));
    }

    /// Whether the component exports the `agent` interface.
    pub fn is_agent_plugin(&self) -> bool {
        self.agent.is_some()
    }

    /// Whether the compiled code came from the `.cwasm` cache.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// The hooks the component says it implements.
    pub fn hooks(&self) -> &BTreeSet<HookName> {
        &self.hooks
    }

    /// What the component declares for the agent loop (`describe-agent`),
    /// when it exports the agent interface.
    pub fn agent_decl(&self) -> Option<&AgentDecl> {
        self.agent.as_ref().map(|a| &a.decl)
    }

    fn store(&self, timeout_ms: u64, env: CallEnv) -> Result<(Store<State>, GuestOutput), HookError> {
        let output = GuestOutput { stdout: TailPipe::new(STDERR_CAP), stderr: TailPipe::new(STDERR_CAP) };
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(output.stdout.clone()).stderr(output.stderr.clone());
        // No network, said explicitly rather than left to wasmtime's defaults:
        // no TCP, no UDP, no name lookups, and no address passes the check.
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        wasi.socket_addr_check(|_, _| Box::pin(async { false }));
        for (k, v) in &self.limits.env {
            wasi.env(k, v);
        }
        for d in &self.limits.dirs {
            let perms = match d.mode {
                DirMode::Ro => wasmtime_wasi::FsPerms::ReadOnly,
                DirMode::Rw => wasmtime_wasi::FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&d.host, &d.guest, perms).map_err(|e| {
                HookError::Component(format!("cannot grant `{}` as `{}`: {e}", d.host.display(), d.guest))
            })?;
        }
        let wasi = wasi.build();
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

    /// A fresh instance in a fresh store, `f` called on it, traps turned into
    /// errors a user can act on.
    fn with_instance<T>(
        &self,
        timeout_ms: u64,
        env: CallEnv,
        f: impl FnOnce(&Instance, &mut Store<State>) -> wasmtime::Result<T>,
    ) -> Result<T, HookError> {
        let export = env.export;
        let (mut store, output) = self.store(timeout_ms, env)?;
        let result = self.pre.instantiate(&mut store).and_then(|instance| f(&instance, &mut store));
        output.log(&self.name);
        result.map_err(|e| {
            // wasmtime's (private) error for data past the hostcall fuel.
            if format!("{e:#}").contains("fuel allocated for hostcalls has been exhausted") {
                return ReplyTooLarge::Lifted { hook: export, limit: convert::REPLY_BYTES }.into();
            }
            let used = self.limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
            HookError::Component(explain_trap(&e, used, timeout_ms, self.limits.memory_mb, &output.stderr))
        })
    }

    /// [`ComponentRunner::with_instance`] with the context-plugin exports.
    fn with_context<T>(
        &self,
        timeout_ms: u64,
        env: CallEnv,
        f: impl FnOnce(&ContextPlugin, &mut Store<State>) -> wasmtime::Result<T>,
    ) -> Result<T, HookError> {
        self.with_instance(timeout_ms, env, |instance, store| {
            let plugin = self.context.load(&mut *store, instance)?;
            f(&plugin, store)
        })
    }

    /// Runs one hook call and answers with the JSON a script plugin would
    /// have printed, so the engine reads both kinds alike. "Not implemented"
    /// becomes the hook's neutral answer ("no opinion").
    pub fn call_sync(&self, request: &HookRequest) -> Result<Value, HookError> {
        self.call_with_timeout(request, self.limits.timeout_ms)
    }

    /// [`ComponentRunner::call_sync`] with another deadline.
    pub fn call_with_timeout(&self, request: &HookRequest, timeout_ms: u64) -> Result<Value, HookError> {
        self.call_in(request, timeout_ms, tokio::runtime::Handle::try_current().ok())
    }

    /// One call; a service call that has to wait finishes on `runtime` (the
    /// caller's, captured before moving to the blocking pool).
    fn call_in(
        &self,
        request: &HookRequest,
        timeout_ms: u64,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Value, HookError> {
        use serde_json::json;
        let env = || CallEnv {
            export: request.hook().as_str(),
            agent_id: request.agent_id().map(str::to_owned),
            runtime: runtime.clone(),
        };
        let budget = || Budget::new(request.hook().as_str());
        let failed = |e: wit::HookError| match e {
            wit::HookError::NotImplemented => None,
            wit::HookError::Failed(m) => Some(HookError::Component(format!("the plugin failed: {m}"))),
        };
        macro_rules! answer {
            ($call:expr, $ok:expr, $neutral:expr) => {
                match self.with_context(timeout_ms, env(), $call)? {
                    Ok(v) => $ok(v),
                    Err(e) => match failed(e) {
                        Some(err) => Err(err),
                        None => Ok($neutral),
                    },
                }
            };
        }
        match request {
            HookRequest::Bootstrap(r) => {
                let req = wit::BootstrapRequest {
                    context_window_tokens: r.context_window_tokens,
                    stable_prefix_mode: r.stable_prefix_mode,
                    max_recall_results: r.max_recall_results,
                };
                answer!(|p, s| p.call_bootstrap(s, req), |()| Ok(json!({"type": "ok"})), json!({"type": "ok"}))
            }
            HookRequest::Ingest(r) => {
                let req = wit::IngestRequest {
                    agent_id: r.agent_id.clone(),
                    message: r.message.clone(),
                    peer_id: r.peer_id.clone(),
                };
                answer!(
                    |p, s| p.call_ingest(s, &req),
                    |m| convert::ingest_json(m).map_err(HookError::from),
                    json!({"memories": []})
                )
            }
            HookRequest::Assemble(r) => {
                let req = wit::AssembleRequest {
                    agent_id: r.agent_id.clone(),
                    system_prompt: r.system_prompt.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                    context_window_tokens: r.context_window_tokens,
                };
                answer!(
                    |p, s| p.call_assemble(s, &req),
                    |ms| convert::messages_from_wit(ms, &mut budget())
                        .map(|ms| json!({"messages": ms}))
                        .map_err(HookError::from),
                    json!({"messages": []})
                )
            }
            HookRequest::Compact(r) => {
                let req = wit::CompactRequest {
                    agent_id: r.agent_id.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                    model: r.model.clone(),
                    context_window_tokens: r.context_window_tokens,
                    token_pressure: wit::TokenPressure {
                        used_tokens: r.token_pressure.used_tokens,
                        max_tokens: r.token_pressure.max_tokens,
                        pressure: r.token_pressure.pressure,
                        recommendation: convert::recommendation_to_wit(r.token_pressure.recommendation),
                    },
                };
                let reply = |c: wit::CompactReply| -> Result<Value, HookError> {
                    let mut budget = budget();
                    Ok(match c {
                        wit::CompactReply::Compacted(c) => {
                            let messages = convert::messages_from_wit(c.messages, &mut budget)?;
                            json!({"messages": messages, "summary": c.summary})
                        }
                        wit::CompactReply::RequestLlmSummary(d) => json!({"request_llm_summary": {
                            "prompt": d.prompt,
                            "summarize": convert::messages_from_wit(d.summarize, &mut budget)?,
                            "keep": convert::messages_from_wit(d.keep, &mut budget)?,
                            "max_tokens": d.max_tokens,
                        }}),
                    })
                };
                answer!(|p, s| p.call_compact(s, &req), reply, json!({"messages": []}))
            }
            HookRequest::AfterTurn(r) => {
                let req = wit::AfterTurnRequest {
                    agent_id: r.agent_id.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                };
                answer!(
                    |p, s| p.call_after_turn(s, &req),
                    |m| convert::after_turn_json(m).map_err(HookError::from),
                    json!({"type": "ok"})
                )
            }
            HookRequest::TransformToolResult(r) => {
                let req = wit::TransformRequest {
                    agent_id: r.agent_id.clone(),
                    tool_name: r.tool_name.clone(),
                    tool_use_id: r.tool_use_id.clone(),
                    args: r.args.to_string(),
                    result: r.result.clone(),
                    is_error: r.is_error,
                };
                answer!(
                    |p, s| p.call_transform_tool_result(s, &req),
                    |t: Option<String>| Ok(t.map_or_else(|| json!({}), |t| json!({"content": t}))),
                    json!({})
                )
            }
            HookRequest::PrepareSubagent(r) | HookRequest::MergeSubagent(r) => {
                let req = wit::SubagentRequest { parent_id: r.parent_id.clone(), child_id: r.child_id.clone() };
                if matches!(request, HookRequest::PrepareSubagent(_)) {
                    answer!(
                        |p, s| p.call_prepare_subagent(s, &req),
                        |()| Ok(json!({"type": "ok"})),
                        json!({"type": "ok"})
                    )
                } else {
                    answer!(
                        |p, s| p.call_merge_subagent(s, &req),
                        |()| Ok(json!({"type": "ok"})),
                        json!({"type": "ok"})
                    )
                }
            }
            HookRequest::OnEvent(_) => Ok(json!({"type": "ok"})),
            HookRequest::Agent(r) => self.call_agent(request, r.hook, timeout_ms, env()),
        }
    }

    /// An agent-loop hook through the `agent` export's `handle`: the request
    /// as its JSON line, the reply JSON text parsed.
    fn call_agent(
        &self,
        request: &HookRequest,
        hook: HookName,
        timeout_ms: u64,
        env: CallEnv,
    ) -> Result<Value, HookError> {
        let Some(agent) = &self.agent else {
            return Err(HookError::Unsupported(format!(
                "plugin '{}' is a context-only component (world `context-plugin`): it has no agent-loop hooks, \
                 so it cannot run `{hook}`; export `{AGENT_EXPORT}` (world `agent-plugin`) for them",
                self.name
            )));
        };
        if !self.hooks.contains(&hook) {
            return Err(HookError::not_declared(&self.name, hook, self.hooks.iter().copied()));
        }
        let line = serde_json::to_string(request)
            .map_err(|e| HookError::Component(format!("cannot serialise the `{hook}` request: {e}")))?;
        let reply = self.with_instance(timeout_ms, env, |instance, store| {
            agent.indices.load(&mut *store, instance)?.call_handle(store, hook.as_str(), &line)
        })?;
        match reply {
            Ok(text) => serde_json::from_str(check_agent_reply(hook.as_str(), &text)?).map_err(|e| {
                HookError::Component(format!(
                    "'{}' answered `{hook}` with text that is not JSON ({e}): {text:.200}",
                    self.name
                ))
            }),
            Err(wit::HookError::NotImplemented) => Ok(serde_json::json!({"action": "pass"})),
            Err(wit::HookError::Failed(m)) => Err(HookError::Component(format!("the plugin failed: {m}"))),
        }
    }
}

/// Compiles `bytes`, or loads the machine code a previous compile left in
/// `cache_dir` (`<sha256 of the component>-<engine compatibility>.cwasm`).
///
/// Loading precompiled code runs it as-is, so only files this host wrote are
/// loaded: the cache dir must belong to this user and be writable by no one
/// else (else nothing is loaded from it nor written to it); each `.cwasm` has
/// a `.sha256` beside it written in the same step; both are opened once,
/// without following a symlink, checked through that descriptor (a regular
/// file of this user, writable by no one else) and read from it; and the
/// hash must match. Anything else is ignored and recompiled over.
fn compile(engine: &Engine, bytes: &[u8], cache_dir: Option<&Path>) -> Result<(Component, bool), String> {
    use sha2::{Digest, Sha256};
    use std::hash::{Hash, Hasher};
    let compile = || Component::new(engine, bytes).map_err(|e| format!("cannot compile it: {e:#}"));
    let Some(cache_dir) = cache_dir else { return compile().map(|c| (c, false)) };
    let mut compat = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let key = format!("{}-{:016x}", &hex::encode(Sha256::digest(bytes))[..40], compat.finish());
    let (cwasm, stamp) = (format!("{key}.cwasm"), format!("{key}.sha256"));
    let dir = match cache::open_dir(cache_dir) {
        Ok(dir) => dir,
        Err(why) => {
            tracing::warn!("not using the compile cache `{}`: {why}", cache_dir.display());
            return compile().map(|c| (c, false));
        }
    };
    if let Some(code) = cache::trusted_file(&dir, &cwasm, &stamp) {
        // SAFETY: `code` is a serialized component this host wrote (see
        // `cache::trusted_file`) for an engine with this compatibility hash.
        if let Ok(component) = unsafe { Component::deserialize(engine, &code) } {
            return Ok((component, true));
        }
    }
    let component = compile()?;
    if let Ok(code) = component.serialize() {
        let written = crate::home::Home::write_atomic(&cache_dir.join(&cwasm), &code).and_then(|()| {
            crate::home::Home::write_atomic(&cache_dir.join(&stamp), hex::encode(Sha256::digest(&code)).as_bytes())
        });
        if let Err(e) = written {
            tracing::debug!("could not cache the compiled component in `{}`: {e}", cache_dir.display());
        }
    }
    Ok((component, false))
}

/// The `.cwasm` cache's trust checks, on descriptors: what is checked is what
/// is read.
mod cache {
    use std::ffi::CString;
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    use std::path::Path;

    /// Mode bits that let the group or others write.
    const OTHERS_WRITE: u32 = 0o022;

    /// The largest file read from the cache (a compiled component is a few MiB).
    const MAX_FILE: u64 = 1 << 30;

    fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    /// `dir` (made `0755` when missing), opened; refused when another user
    /// owns it or the group or others may write to it (they could swap its
    /// files between check and use).
    pub(super) fn open_dir(dir: &Path) -> Result<File, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("cannot create it: {e}"))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| format!("cannot open it: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
        if meta.uid() != euid() {
            return Err(format!("it belongs to uid {}, not to this user (uid {})", meta.uid(), euid()));
        }
        if meta.mode() & OTHERS_WRITE != 0 {
            return Err(format!(
                "its group or others may write to it (mode {:o}); `chmod go-w` it",
                meta.mode() & 0o7777
            ));
        }
        Ok(file)
    }

    /// The bytes of `name` in `dir`, opened once without following a symlink
    /// (nor blocking on a FIFO): a regular file of this user that no one else
    /// may write, no larger than [`MAX_FILE`].
    fn read_own(dir: &File, name: &str) -> Option<Vec<u8>> {
        let name = CString::new(Path::new(name).as_os_str().as_bytes()).ok()?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: `dir` is an open directory and `name` a NUL-terminated path.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.uid() != euid() || meta.mode() & OTHERS_WRITE != 0 || meta.len() > MAX_FILE {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
        file.by_ref().take(MAX_FILE).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// The code of `cwasm` when it matches its `stamp` (a sha256 in hex), both
    /// read through [`read_own`].
    pub(super) fn trusted_file(dir: &File, cwasm: &str, stamp: &str) -> Option<Vec<u8>> {
        use sha2::{Digest, Sha256};
        let code = read_own(dir, cwasm)?;
        let expected = read_own(dir, stamp)?;
        (hex::encode(Sha256::digest(&code)).as_bytes() == expected.trim_ascii()).then_some(code)
    }
}

/// `text` when it is within [`convert::AGENT_REPLY_BYTES`]: JSON text becomes
/// host objects many times its size.
fn check_agent_reply<'a>(export: &'static str, text: &'a str) -> Result<&'a str, ReplyTooLarge> {
    if text.len() > convert::AGENT_REPLY_BYTES {
        return Err(ReplyTooLarge::Bytes { hook: export, limit: convert::AGENT_REPLY_BYTES });
    }
    Ok(text)
}

/// The component-model layer byte of the binary header tells a component
/// (`0d 00 01 00`) from a core module (`01 00 00 00`).
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[..4] == b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// The world version this host implements.
pub const WORLD_VERSION: &str = "0.1.0";

/// Refuses a component that imports `ctxhost:plugin/…` of another
/// compatible-version line (0.x: another minor; else another major), naming both.
fn check_world_version(component: &Component, engine: &Engine) -> Result<(), String> {
    let line = |v: &str| {
        let mut parts = v.split('.');
        let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if major == "0" { format!("0.{minor}") } else { major.to_owned() }
    };
    for (name, _) in component.component_type().imports(engine) {
        let Some(rest) = name.strip_prefix("ctxhost:plugin/") else { continue };
        let version = rest.split_once('@').map_or("", |(_, v)| v);
        if line(version) != line(WORLD_VERSION) {
            return Err(format!(
                "built for ctxhost:plugin@{version}, but this host implements ctxhost:plugin@{WORLD_VERSION}; \
                 rebuild it against this host's wit/ctxhost.wit"
            ));
        }
    }
    Ok(())
}

fn describe_link_error(e: &wasmtime::Error) -> String {
    format!(
        "imports something ctxhost does not provide (only WASI without network, ctxhost:plugin/host@0.1.0 and \
         ctxhost:plugin/services@0.1.0): {e:#}"
    )
}

/// The most of a guest's stderr an error carries: its last lines, where a
/// panic's cause is.
const STDERR_IN_ERROR: usize = 1024;

/// The end of `text`, at most `max` bytes (cut at a char boundary, `…` first
/// when cut).
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// What a panic said: the lines from the last `panicked at` on (a guest may
/// print anything before it), without the backtrace hint, on one line and
/// bounded by [`STDERR_IN_ERROR`] (keeping the end, the cause).
fn panic_text(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().rposition(|l| l.contains(" panicked at "))?;
    let said = lines[start..].iter().filter(|l| !l.starts_with("note:")).copied().collect::<Vec<_>>().join(" ");
    Some(tail(&said, STDERR_IN_ERROR))
}

/// Errors a user can act on: out of fuel, deadline, memory, guest panic.
fn explain_trap(e: &wasmtime::Error, fuel_used: u64, timeout_ms: u64, memory_mb: u64, stderr: &TailPipe) -> String {
    let guest_said = String::from_utf8_lossy(&stderr.contents().0).trim().to_owned();
    let panic = panic_text(&guest_said);
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!("out of fuel after {fuel_used} units"),
        Some(Trap::Interrupt) => format!("deadline of {timeout_ms} ms exceeded"),
        Some(Trap::StackOverflow) => "stack overflow (too deep a recursion)".to_owned(),
        // Rust guests keep their stack in linear memory: running off its end
        // is an out-of-bounds access, not a wasm stack overflow.
        Some(Trap::MemoryOutOfBounds) => {
            "out-of-bounds memory access (in a Rust guest usually a stack overflow from too deep a recursion)"
                .to_owned()
        }
        Some(Trap::UnreachableCodeReached) if panic.is_some() => format!("guest panic: {}", panic.unwrap_or_default()),
        _ if format!("{e:#}").contains("memory") && format!("{e:#}").contains("grow") => {
            format!("memory limit of {memory_mb} MiB exceeded")
        }
        trap => {
            // A trap's own name, not the wasm backtrace around it.
            let base = trap.map_or_else(|| format!("{e:#}"), |t| format!("trap: {t}"));
            if guest_said.is_empty() {
                base
            } else {
                format!("{base}; guest stderr: {}", tail(&guest_said, STDERR_IN_ERROR))
            }
        }
    }
}

/// A component plugin as a [`Runner`]: calls run on a blocking thread (they
/// are CPU-bound and bounded by fuel and the deadline), and only the hooks the
/// component described are called.
#[derive(Clone)]
pub struct ComponentHandle(pub std::sync::Arc<ComponentRunner>);

impl crate::runner::Runner for ComponentHandle {
    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        options: &'a crate::runner::CallOptions,
    ) -> crate::runner::BoxFuture<'a, Result<Value, HookError>> {
        Box::pin(async move {
            let hook = request.hook();
            if !self.0.hooks.contains(&hook) {
                return Err(HookError::not_declared(&self.0.name, hook, self.0.hooks.iter().copied()));
            }
            let timeout_ms = super::call_timeout_ms(options, self.0.limits.timeout_ms);
            let (runner, request) = (self.0.clone(), request.clone());
            let runtime = tokio::runtime::Handle::current();
            super::on_blocking_pool(move || runner.call_in(&request, timeout_ms, Some(runtime))).await
        })
    }

    fn attach_services(&self, services: Arc<PluginServices>) {
        self.0.attach_services(services);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_output_keeps_its_last_bytes_and_counts_the_rest() {
        let pipe = TailPipe::new(8);
        pipe.push(b"0123");
        pipe.push(b"456789");
        assert_eq!(pipe.contents(), (b"23456789".to_vec(), 2));
        pipe.push(b"a very long write");
        assert_eq!(pipe.contents(), (b"ng write".to_vec(), 2 + 8 + 9));
    }

    #[test]
    fn a_panic_is_told_by_its_last_lines_within_the_bound() {
        let noise = "noise\n".repeat(500);
        let stderr = format!("{noise}thread '<unnamed>' panicked at src/lib.rs:1:1:\nthe cause\nnote: run with …");
        assert_eq!(panic_text(&stderr).unwrap(), "thread '<unnamed>' panicked at src/lib.rs:1:1: the cause");
        let long = format!("x panicked at y:\n{}é the end", "é".repeat(2000));
        let told = panic_text(&long).unwrap();
        assert!(told.len() <= STDERR_IN_ERROR + "…".len() && told.ends_with("é the end"), "{told}");
        assert_eq!(panic_text("no panic here"), None);
    }

    #[test]
    fn storage_keys_longer_than_a_file_name_allows_are_refused() {
        let longest = "k".repeat(STORAGE_KEY_BYTES);
        assert_eq!(key_file(&longest).unwrap().len(), 255);
        let err = key_file(&format!("{longest}k")).unwrap_err();
        assert!(err.contains(&format!("at most {STORAGE_KEY_BYTES} bytes")), "{err}");
    }
}
