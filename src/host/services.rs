//! The host services one plugin reaches (`agent-hooks.md`, "Host services"
//! and "How script plugins reach the services"): one dispatcher,
//! [`PluginServices::dispatch`], that takes a method name and JSON params —
//! the JSON-RPC methods of persistent workers, and what the component imports
//! are turned into — so every plugin kind gets exactly the same behaviour.
//!
//! State lives in the home's state store (`host::store`, `<home>/state.db`):
//! the vfs and the triggers are shared by all plugins, config and storage
//! are per plugin. Every store call runs off the async runtime
//! (`host::store::off_runtime`), each change one transaction with its quota
//! checked inside it; no lock is held across an await or a plugin call, so
//! concurrent agents are safe and a slow plugin cannot stall another's
//! service call. The one in-memory copy is each plugin's config (schema and
//! values), changed only after the store committed.
//!
//! What needs other plugins — `config_changed` after a set, the
//! `trigger_append` chain before a trigger is stored, a symbolic vfs node's
//! content — goes through [`HostCalls`], which the agent engine implements.
//! This module never runs a plugin itself.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::BoxFuture;
use super::config::{Change, Field, PluginConfig};
use super::storage::{Scope, Storage, StorageError};
use super::triggers::{By, TriggerError, Triggers};
use super::vfs::{Read, Vfs, VfsError, Writer};
pub use crate::host::store::quota;
use crate::host::store::{self, Store, StoreError, off_runtime};

/// JSON-RPC 2.0 error codes the services answer with.
pub mod code {
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params missing or of the wrong type.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The service refused (unknown key, not your path, bad trigger, I/O).
    pub const SERVICE: i64 = -32000;
}

/// A refused service call: a JSON-RPC error code and a message naming what
/// was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub code: i64,
    pub message: String,
}

impl ServiceError {
    fn params(message: impl Into<String>) -> Self {
        ServiceError { code: code::INVALID_PARAMS, message: message.into() }
    }
    pub(crate) fn service(message: impl std::fmt::Display) -> Self {
        ServiceError { code: code::SERVICE, message: message.to_string() }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        ServiceError::service(e.message())
    }
}

impl From<VfsError> for ServiceError {
    fn from(e: VfsError) -> Self {
        ServiceError::service(e)
    }
}

impl From<TriggerError> for ServiceError {
    fn from(e: TriggerError) -> Self {
        ServiceError::service(e)
    }
}

impl From<StorageError> for ServiceError {
    fn from(e: StorageError) -> Self {
        ServiceError::service(e)
    }
}

/// The call a service request is made during: its agent is the default for
/// `session`-scoped storage.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub agent_id: Option<String>,
}

/// What the services need from the engine: calls into other plugins.
pub trait HostCalls: Send + Sync {
    /// Fire `config_changed` at `plugin` (in the background: the plugin that
    /// set the value may be busy in the very call that set it).
    fn config_changed(&self, plugin: &str, change: Change);
    /// Runs the `trigger_append` chain (without `from`, the plugin creating
    /// it): the trigger to store, or `Err(reason)` when a plugin blocked it.
    fn trigger_append(&self, from: Option<&str>, trigger: Map<String, Value>) -> BoxFuture<'_, Result<Value, String>>;
    /// The content of symbolic node `path`, computed by `owner`.
    fn read_symbolic(&self, owner: &str, path: &str) -> BoxFuture<'_, Result<String, String>>;
}

/// The stores every plugin shares.
pub struct SharedServices {
    store: Arc<dyn Store>,
    host: OnceLock<Weak<dyn HostCalls>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Held only for in-memory reads and changes, never across I/O on the
    // runtime; a panic there left the view as it was (changed after commits).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl SharedServices {
    /// The services on `home`'s state store (opened, and old state files
    /// imported, on first use in this process). Blocks.
    ///
    /// # Errors
    /// The store cannot be opened, or an old state file cannot be imported
    /// (named, with the reason; it is left as it was).
    pub fn open(home: &crate::home::Home) -> Result<Arc<SharedServices>, ServiceError> {
        Ok(Self::with_store(store::open(home).map_err(|e| ServiceError::service(e.to_string()))?))
    }

    /// The services on `store`.
    pub fn with_store(store: Arc<dyn Store>) -> Arc<SharedServices> {
        Arc::new(SharedServices { store, host: OnceLock::new() })
    }

    /// Connects the engine (once; later calls are ignored).
    pub fn connect(&self, host: Weak<dyn HostCalls>) {
        let _ = self.host.set(host);
    }

    fn host(&self) -> Option<Arc<dyn HostCalls>> {
        self.host.get().and_then(Weak::upgrade)
    }

    /// The state store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The vfs, for the embedder (reads everything, writes anywhere). Its
    /// methods block: on the runtime, use [`SharedServices::vfs_off`].
    pub fn vfs(&self) -> Vfs {
        Vfs::new(self.store.clone())
    }

    /// The trigger store, for the embedder and the clock. Its methods block:
    /// on the runtime, use [`SharedServices::triggers_off`].
    pub fn triggers(&self) -> Triggers {
        Triggers::new(self.store.clone())
    }

    /// Runs `f` on the vfs off the async runtime.
    ///
    /// # Errors
    /// What `f` returns, or the blocking pool failed it.
    pub async fn vfs_off<T: Send + 'static>(
        &self,
        f: impl FnOnce(Vfs) -> Result<T, VfsError> + Send + 'static,
    ) -> Result<T, VfsError> {
        let vfs = self.vfs();
        off_runtime("vfs", move || f(vfs)).await.map_err(VfsError::Store)?
    }

    /// Runs `f` on the triggers off the async runtime.
    ///
    /// # Errors
    /// What `f` returns, or the blocking pool failed it.
    pub async fn triggers_off<T: Send + 'static>(
        &self,
        f: impl FnOnce(Triggers) -> Result<T, TriggerError> + Send + 'static,
    ) -> Result<T, TriggerError> {
        let triggers = self.triggers();
        off_runtime("triggers", move || f(triggers)).await.map_err(TriggerError::Store)?
    }

    /// A vfs read as the embedder sees it: symbolic nodes computed by their
    /// owner. `Ok(None)` when nothing is at `path`.
    ///
    /// `reader` is the plugin reading, if one is: its own symbolic node is an
    /// error (its worker is busy in the very call that reads it).
    pub async fn read_vfs(&self, path: &str, reader: Option<&str>) -> Result<Option<Read>, ServiceError> {
        let at = path.to_owned();
        let read = self.vfs_off(move |vfs| vfs.read(&at)).await?;
        match read {
            Read::Missing => Ok(None),
            Read::Symbolic { owner, path } if Some(owner.as_str()) == reader => {
                Err(ServiceError::service(format!("{path} is this plugin's own symbolic node: compute it directly")))
            }
            Read::Symbolic { owner, path } => {
                let host = self.host().ok_or_else(|| ServiceError::service("the engine is gone"))?;
                let text = host.read_symbolic(&owner, &path).await.map_err(ServiceError::service)?;
                Ok(Some(Read::Text(text)))
            }
            other => Ok(Some(other)),
        }
    }
}

/// One plugin's view of the services.
pub struct PluginServices {
    name: String,
    shared: Arc<SharedServices>,
    /// The schema and the stored values; locked only for in-memory reads
    /// and changes.
    config: Arc<Mutex<PluginConfig>>,
    /// Serialises config changes (store, view file, `config_changed` in
    /// order); held only off the runtime.
    config_writes: Arc<Mutex<()>>,
    storage: Storage,
    view: Arc<ConfigView>,
}

/// Where one-shot hooks read the config (`LIBREFANG_PLUGIN_CONFIG`), and the
/// LibreFang `[config]` values it also holds.
#[derive(Debug, Clone, Default)]
pub struct ConfigView {
    pub file: Option<PathBuf>,
    pub base: Map<String, Value>,
}

impl ConfigView {
    /// The view in `file` as the plugin's load wrote it (LibreFang `[config]`
    /// values and the agent config's); later sets rewrite its agent keys.
    /// No file: no view (a component, or a plugin without config).
    pub fn existing(file: PathBuf) -> ConfigView {
        match std::fs::read_to_string(&file).ok().and_then(|t| serde_json::from_str::<Map<String, Value>>(&t).ok()) {
            Some(base) => ConfigView { file: Some(file), base },
            None => ConfigView::default(),
        }
    }
}

impl ConfigView {
    /// Rewrites the view file (if any) with the base values and `values`.
    /// Blocks.
    fn write(&self, values: &std::collections::BTreeMap<String, Value>) -> Result<(), ServiceError> {
        let Some(file) = &self.file else { return Ok(()) };
        let mut all = self.base.clone();
        all.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        super::save_json(file, &all).map_err(ServiceError::service)
    }
}

/// The params object of a call (`null` counts as `{}`).
fn params_object(params: Value) -> Result<Map<String, Value>, ServiceError> {
    match params {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => {
            Err(ServiceError::params(format!("params must be an object, not {}", crate::protocol::json_kind(&other))))
        }
    }
}

fn str_param<'a>(p: &'a Map<String, Value>, key: &str) -> Result<&'a str, ServiceError> {
    p.get(key).and_then(Value::as_str).ok_or_else(|| ServiceError::params(format!("`{key}` must be a string")))
}

impl PluginServices {
    /// `plugin`'s services, with its declared config `schema`. Blocks (reads
    /// its stored config).
    ///
    /// # Errors
    /// Its stored config cannot be read.
    pub fn open(
        shared: Arc<SharedServices>,
        plugin: &str,
        schema: Vec<Field>,
        view: ConfigView,
    ) -> Result<Self, ServiceError> {
        let config = PluginConfig::open(shared.store.clone(), plugin, schema).map_err(ServiceError::service)?;
        Ok(PluginServices {
            name: plugin.to_owned(),
            storage: Storage::new(shared.store.clone(), plugin),
            shared,
            config: Arc::new(Mutex::new(config)),
            config_writes: Arc::new(Mutex::new(())),
            view: Arc::new(view),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn shared(&self) -> &Arc<SharedServices> {
        &self.shared
    }

    /// `{"schema": […], "values": {…}}`: the HTTP config view.
    pub fn config_snapshot(&self) -> Value {
        let config = lock(&self.config);
        json!({"schema": config.schema(), "values": config.values()})
    }

    /// Writes the one-shot config view; called at load. Blocks.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn publish_config(&self) -> Result<(), ServiceError> {
        let values = lock(&self.config).values();
        self.view.write(&values)
    }

    /// Sets several values at once, all or nothing (each checked first, then
    /// stored in one transaction), firing `config_changed` for each: the HTTP
    /// `PUT`. The in-memory values and the view file change only after the
    /// store committed.
    ///
    /// # Errors
    /// The first key that is unknown or of the wrong type, or the store
    /// failed: nothing is set. The view file could not be rewritten: the
    /// values are set.
    pub async fn set_config(&self, values: &Map<String, Value>) -> Result<Value, ServiceError> {
        let (config, gate, view) = (self.config.clone(), self.config_writes.clone(), self.view.clone());
        let (shared, name, values) = (self.shared.clone(), self.name.clone(), values.clone());
        off_runtime("config_put", move || {
            let _writes = lock(&gate);
            let changes = lock(&config).plan(&values).map_err(|e| ServiceError::params(e.to_string()))?;
            PluginConfig::store_changes(&*shared.store, &name, &changes).map_err(ServiceError::service)?;
            let all = {
                let mut config = lock(&config);
                config.apply(&changes);
                config.values()
            };
            let written = view.write(&all);
            // Announced while the writes are serialised (a channel send), so
            // the calls come in the order the sets were stored.
            if let Some(host) = shared.host() {
                for change in changes {
                    host.config_changed(&name, change);
                }
            }
            written.map(|()| json!(all))
        })
        .await?
    }

    /// Takes values another instance stored (announced by the store's change
    /// feed) into this view, rewrites the view file and fires
    /// `config_changed` for each, as a set through this instance would: `old`
    /// is this view's value before, so changes applied in the feed's order
    /// report what the setting instance reported. Nothing is stored.
    ///
    /// # Errors
    /// The view file could not be rewritten (the values are taken).
    pub async fn config_set_elsewhere(&self, values: &Map<String, Value>) -> Result<(), ServiceError> {
        let (config, gate, view) = (self.config.clone(), self.config_writes.clone(), self.view.clone());
        let (shared, name, values) = (self.shared.clone(), self.name.clone(), values.clone());
        off_runtime("config_feed", move || {
            let _writes = lock(&gate);
            let (changes, all) = {
                let mut config = lock(&config);
                let changes: Vec<Change> = values
                    .into_iter()
                    .map(|(key, new)| Change { old: config.get(&key, Value::Null), key, new })
                    .collect();
                config.apply(&changes);
                (changes, config.values())
            };
            let written = view.write(&all);
            if let Some(host) = shared.host() {
                for change in changes {
                    host.config_changed(&name, change);
                }
            }
            written
        })
        .await?
    }

    /// Replaces the schema (`config.register`) and rewrites the view file.
    async fn register_config(&self, fields: Vec<Field>) -> Result<Value, ServiceError> {
        let (config, gate, view) = (self.config.clone(), self.config_writes.clone(), self.view.clone());
        off_runtime("config_register", move || {
            let _writes = lock(&gate);
            let values = {
                let mut config = lock(&config);
                config.set_schema(fields);
                config.values()
            };
            view.write(&values).map(|()| json!(values))
        })
        .await?
    }

    /// `(scope, key)` of a storage call; the agent is the call's unless given.
    fn storage_target(p: &Map<String, Value>, ctx: &CallContext) -> Result<(Option<String>, String), ServiceError> {
        let key = str_param(p, "key")?.to_owned();
        let agent = p.get("agent_id").and_then(Value::as_str).or(ctx.agent_id.as_deref());
        match p.get("scope").and_then(Value::as_str).unwrap_or("global") {
            "global" => Ok((None, key)),
            "session" => match agent.filter(|a| !a.is_empty()) {
                Some(agent) => Ok((Some(agent.to_owned()), key)),
                None => Err(ServiceError::params(
                    "`session` scope needs an agent: give `agent_id` or call during an agent's hook",
                )),
            },
            other => Err(ServiceError::params(format!("`scope` must be global or session, not {other:?}"))),
        }
    }

    /// One service call: `method` with `params`, as the JSON-RPC methods of
    /// the spec name them.
    ///
    /// # Errors
    /// An unknown method ([`code::METHOD_NOT_FOUND`]), bad params
    /// ([`code::INVALID_PARAMS`]) or a refusal ([`code::SERVICE`]).
    pub async fn dispatch(&self, method: &str, params: Value, ctx: &CallContext) -> Result<Value, ServiceError> {
        let p = params_object(params)?;
        match method {
            "config.get" => {
                let key = str_param(&p, "key")?;
                Ok(lock(&self.config).get(key, p.get("default").cloned().unwrap_or(Value::Null)))
            }
            "config.set" => {
                let key = str_param(&p, "key")?;
                let value = p.get("value").ok_or_else(|| ServiceError::params("`value` is missing"))?;
                let mut one = Map::new();
                one.insert(key.to_owned(), value.clone());
                let all = self.set_config(&one).await?;
                Ok(all.get(key).cloned().unwrap_or(Value::Null))
            }
            "config.list" => Ok(self.config_snapshot()),
            "config.register" => {
                let schema = p.get("schema").cloned().unwrap_or(Value::Array(Vec::new()));
                let fields = super::config::parse_schema(&schema).map_err(|e| ServiceError::params(e.to_string()))?;
                self.register_config(fields).await
            }
            "vfs.read" => {
                let path = str_param(&p, "path")?;
                let default = p.get("default").cloned().unwrap_or(Value::Null);
                Ok(match self.shared.read_vfs(path, Some(&self.name)).await? {
                    Some(Read::Text(t)) => Value::String(t),
                    _ => default,
                })
            }
            "vfs.write" => {
                let (path, content) = (str_param(&p, "path")?.to_owned(), str_param(&p, "content")?.to_owned());
                let me = self.name.clone();
                let written = self.shared.vfs_off(move |vfs| vfs.write(Writer::Plugin(&me), &path, &content)).await?;
                Ok(Value::String(written))
            }
            "vfs.write_symbolic" => {
                let path = str_param(&p, "path")?.to_owned();
                let searchable = p.get("searchable").and_then(Value::as_bool).unwrap_or(false);
                let me = self.name.clone();
                let written =
                    self.shared.vfs_off(move |vfs| vfs.write_symbolic(Writer::Plugin(&me), &path, searchable)).await?;
                Ok(Value::String(written))
            }
            "vfs.delete" => {
                let path = str_param(&p, "path")?.to_owned();
                let me = self.name.clone();
                Ok(Value::Bool(self.shared.vfs_off(move |vfs| vfs.delete(Writer::Plugin(&me), &path)).await?))
            }
            "vfs.list" => {
                let path = p.get("path").and_then(Value::as_str).unwrap_or("/").to_owned();
                Ok(json!(self.shared.vfs_off(move |vfs| vfs.list(&path)).await?))
            }
            "trigger.create" => {
                let trigger = match p.get("trigger") {
                    Some(Value::Object(t)) => t.clone(),
                    Some(_) => return Err(ServiceError::params("`trigger` must be an object")),
                    None => p.clone(),
                };
                self.create_trigger(trigger).await
            }
            "trigger.get" => {
                let id = str_param(&p, "id")?.to_owned();
                Ok(self.shared.triggers_off(move |t| t.get(&id)).await?.map_or(Value::Null, Value::Object))
            }
            "trigger.list" => Ok(json!(self.shared.triggers_off(|t| t.list()).await?)),
            "trigger.update" => {
                let id = str_param(&p, "id")?.to_owned();
                let mut patch = match p.get("patch").or_else(|| p.get("changes")) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => return Err(ServiceError::params("`patch` must be an object")),
                };
                // The owner is the host's record, not the plugin's to change.
                patch.remove("plugin");
                let me = self.name.clone();
                let updated = self.shared.triggers_off(move |t| t.update(&id, &patch, By::Plugin(&me))).await?;
                Ok(Value::Object(updated))
            }
            "trigger.delete" => {
                let id = str_param(&p, "id")?.to_owned();
                let me = self.name.clone();
                Ok(Value::Bool(self.shared.triggers_off(move |t| t.delete(&id, By::Plugin(&me))).await?))
            }
            "storage.get" | "storage.set" | "storage.delete" => {
                let (agent, key) = Self::storage_target(&p, ctx)?;
                let storage = self.storage.clone();
                let value = p.get("value").cloned().unwrap_or(Value::Null);
                let op = method.to_owned();
                off_runtime("storage", move || {
                    let scope = agent.as_deref().map_or(Scope::Global, Scope::Session);
                    match op.as_str() {
                        "storage.get" => storage.get(scope, &key).map(|v| v.unwrap_or(Value::Null)),
                        "storage.set" => storage.set(scope, &key, &value).map(|()| Value::Null),
                        _ => storage.delete(scope, &key).map(Value::Bool),
                    }
                })
                .await?
                .map_err(ServiceError::from)
            }
            "log" => {
                let message = p.get("message").and_then(Value::as_str).unwrap_or_default();
                match p.get("level").and_then(Value::as_str).unwrap_or("info") {
                    "error" => tracing::error!(target: "plugin_log", plugin = %self.name, "{message}"),
                    "warn" | "warning" => tracing::warn!(target: "plugin_log", plugin = %self.name, "{message}"),
                    "debug" => tracing::debug!(target: "plugin_log", plugin = %self.name, "{message}"),
                    _ => tracing::info!(target: "plugin_log", plugin = %self.name, "{message}"),
                }
                Ok(Value::Null)
            }
            other => Err(ServiceError {
                code: code::METHOD_NOT_FOUND,
                message: format!(
                    "no service method `{other}`{}",
                    crate::hint::did_you_mean(other, METHODS.iter().copied())
                ),
            }),
        }
    }

    async fn create_trigger(&self, mut trigger: Map<String, Value>) -> Result<Value, ServiceError> {
        trigger.insert("plugin".into(), Value::String(self.name.clone()));
        let id = trigger.get("id").cloned();
        if let Some(id) = id.as_ref().and_then(Value::as_str) {
            // Refused before the chain runs; the store checks again when it
            // stores it (the chain is awaited meanwhile).
            let (id, me) = (id.to_owned(), self.name.clone());
            self.shared
                .triggers_off(move |t| match t.get(&id)? {
                    Some(existing) => super::triggers::may_change(&id, &existing, &me),
                    None => Ok(()),
                })
                .await?;
        }
        let host = self.shared.host();
        let mut trigger = match host {
            Some(host) => match host.trigger_append(Some(&self.name), trigger).await {
                Ok(Value::Object(t)) => t,
                Ok(_) => {
                    return Err(ServiceError::service(
                        "a trigger_append plugin replaced the trigger with something that is not an object",
                    ));
                }
                Err(reason) => return Err(ServiceError::service(format!("trigger refused: {reason}"))),
            },
            None => trigger,
        };
        // Other plugins may rewrite the trigger, not whose it is or which.
        trigger.insert("plugin".into(), Value::String(self.name.clone()));
        match id {
            Some(id) => trigger.insert("id".into(), id),
            None => trigger.remove("id"),
        };
        let me = self.name.clone();
        let id = self.shared.triggers_off(move |t| t.create(trigger, now_secs(), By::Plugin(&me))).await?;
        Ok(Value::String(id))
    }
}

/// Every method [`PluginServices::dispatch`] knows.
pub const METHODS: [&str; 18] = [
    "config.get",
    "config.set",
    "config.list",
    "config.register",
    "vfs.read",
    "vfs.write",
    "vfs.delete",
    "vfs.list",
    "vfs.write_symbolic",
    "trigger.create",
    "trigger.get",
    "trigger.list",
    "trigger.update",
    "trigger.delete",
    "storage.get",
    "storage.set",
    "storage.delete",
    "log",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn two_plugins() -> (tempfile::TempDir, PluginServices, PluginServices) {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedServices::open(&crate::home::Home::at(dir.path())).unwrap();
        let a = PluginServices::open(shared.clone(), "a", Vec::new(), ConfigView::default()).unwrap();
        let b = PluginServices::open(shared, "b", Vec::new(), ConfigView::default()).unwrap();
        (dir, a, b)
    }

    fn run(p: &PluginServices, method: &str, params: Value) -> Result<Value, ServiceError> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(p.dispatch(method, params, &CallContext { agent_id: Some("agent-1".into()) }))
    }

    #[test]
    fn a_plugin_changes_only_its_own_triggers_and_cannot_give_them_away() {
        let (_dir, a, b) = two_plugins();
        let t = json!({"trigger": {"id": "t", "type": "interval", "interval_seconds": 5, "plugin": "b"}});
        assert_eq!(run(&a, "trigger.create", t).unwrap(), json!("t"));
        assert_eq!(run(&b, "trigger.get", json!({"id": "t"})).unwrap()["plugin"], "a", "the host records the owner");
        let err = run(&b, "trigger.delete", json!({"id": "t"})).unwrap_err();
        assert!(err.message.contains("belongs to plugin 'a'"), "{err}");
        let err = run(&b, "trigger.create", json!({"id": "t", "type": "event", "event_name": "x"})).unwrap_err();
        assert!(err.message.contains("belongs to plugin 'a'"), "no upsert over another's trigger: {err}");
        let out = run(&a, "trigger.update", json!({"id": "t", "patch": {"plugin": "b", "priority": 3}})).unwrap();
        assert_eq!((&out["plugin"], &out["priority"]), (&json!("a"), &json!(3)));
        // One without an owner is the embedder's.
        let host = json!({"id": "h", "type": "interval", "interval_seconds": 5});
        a.shared().triggers().create(host.as_object().unwrap().clone(), 0, By::Host).unwrap();
        let err = run(&a, "trigger.update", json!({"id": "h", "patch": {"payload": 1}})).unwrap_err();
        assert!(err.message.contains("belongs to the embedder"), "{err}");
        assert!(run(&a, "trigger.delete", json!({"id": "h"})).is_err());
        assert!(run(&a, "trigger.create", json!({"id": "h", "type": "event", "event_name": "x"})).is_err());
    }

    #[test]
    fn storage_scopes_config_register_and_unknown_methods() {
        let (_dir, a, b) = two_plugins();
        run(&a, "storage.set", json!({"key": "k", "value": 1})).unwrap();
        run(&a, "storage.set", json!({"key": "k", "value": 2, "scope": "session"})).unwrap();
        assert_eq!(run(&a, "storage.get", json!({"key": "k"})).unwrap(), json!(1));
        assert_eq!(run(&a, "storage.get", json!({"key": "k", "scope": "session"})).unwrap(), json!(2));
        let other = json!({"key": "k", "scope": "session", "agent_id": "agent-2"});
        assert_eq!(run(&a, "storage.get", other).unwrap(), Value::Null);
        assert_eq!(run(&b, "storage.get", json!({"key": "k"})).unwrap(), Value::Null, "per plugin");
        let err = run(&a, "storage.get", json!({"key": "k", "scope": "forever"})).unwrap_err();
        assert_eq!(err.code, code::INVALID_PARAMS);

        let values = run(&a, "config.register", json!({"schema": ["LIMIT:int:Limit=3", "NAME:str"]})).unwrap();
        assert_eq!(values, json!({"LIMIT": 3, "NAME": null}));
        assert_eq!(run(&a, "config.set", json!({"key": "LIMIT", "value": "9"})).unwrap(), json!(9));
        let err = run(&a, "config.set", json!({"key": "LIMT", "value": 1})).unwrap_err();
        assert!(err.message.contains("did you mean `LIMIT`"), "{err}");

        let big = "x".repeat(quota::VFS_FILE_BYTES + 1);
        let err = run(&a, "vfs.write", json!({"path": "/plugins/a/big", "content": big})).unwrap_err();
        assert!(err.message.contains("at most"), "{err}");
        let half = "x".repeat(quota::VFS_FILE_BYTES);
        for i in 0..quota::VFS_PLUGIN_BYTES / quota::VFS_FILE_BYTES {
            run(&a, "vfs.write", json!({"path": format!("/plugins/a/f{i}"), "content": half})).unwrap();
        }
        let err = run(&a, "vfs.write", json!({"path": "/plugins/a/one-more", "content": "x"})).unwrap_err();
        assert!(err.message.contains("the most it may keep"), "{err}");
        run(&a, "vfs.write", json!({"path": "/plugins/a/f0", "content": "replaced"})).unwrap();
        let huge = json!({"key": "k", "value": "x".repeat(quota::STORAGE_VALUE_BYTES + 1)});
        assert!(run(&a, "storage.set", huge).unwrap_err().message.contains("at most"));
        // The plugin's total: a new value past it is refused, replacing one
        // counts only the difference.
        let full = quota::STORAGE_PLUGIN_BYTES - 10;
        let err = quota::check_storage_write("a", "k", 11, None, 5, full).unwrap_err();
        assert!(err.contains(&format!("the most it may keep is {}", quota::STORAGE_PLUGIN_BYTES)), "{err}");
        quota::check_storage_write("a", "k", 11, Some(1), 5, full).unwrap();
        quota::check_storage_write("a", "k", 5, Some(6), 5, 2 * full).unwrap();
        let err = quota::check_storage_write("a", "k", 1, None, quota::STORAGE_KEYS, 0).unwrap_err();
        assert!(err.contains("storage keys already"), "{err}");

        let err = run(&a, "vfs.wirte", json!({})).unwrap_err();
        assert_eq!(err.code, code::METHOD_NOT_FOUND);
        assert!(err.message.contains("did you mean `vfs.write`"), "{err}");
        assert_eq!(run(&a, "vfs.list", json!([1])).unwrap_err().code, code::INVALID_PARAMS);
    }
}
