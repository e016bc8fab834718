//! The host services one plugin reaches (`agent-hooks.md`, "Host services"
//! and "How script plugins reach the services"): one dispatcher,
//! [`PluginServices::dispatch`], that takes a method name and JSON params —
//! the JSON-RPC methods of persistent workers, and what the component imports
//! are turned into — so every plugin kind gets exactly the same behaviour.
//!
//! State lives under the ctxhost home (`<home>/agent/`): the vfs and the
//! trigger store are shared by all plugins (`vfs.json`, `triggers.json`),
//! config and storage are per plugin (`<home>/agent/plugins/<name>/`). Each
//! store sits behind its own mutex, held only for the in-memory change and its
//! atomic file write, never across a plugin call, so concurrent agents are
//! safe and a slow plugin cannot stall another's service call.
//!
//! What needs other plugins — `config_changed` after a set, the
//! `trigger_append` chain before a trigger is stored, a symbolic vfs node's
//! content — goes through [`HostCalls`], which the agent engine implements.
//! This module never runs a plugin itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::BoxFuture;
use super::config::{Change, Field, PluginConfig};
use super::storage::{Scope, Storage};
use super::triggers::Triggers;
use super::vfs::{Read, Vfs, Writer};

/// JSON-RPC 2.0 error codes the services answer with.
pub mod code {
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params missing or of the wrong type.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The service refused (unknown key, not your path, bad trigger, I/O).
    pub const SERVICE: i64 = -32000;
}

/// What one plugin may keep in the shared stores: a misbehaving plugin must
/// not fill the host's memory or disk (every vfs write rewrites the file).
pub mod quota {
    /// Bytes of one vfs file.
    pub const VFS_FILE_BYTES: usize = 4 * 1024 * 1024;
    /// Bytes of all of one plugin's vfs files.
    pub const VFS_PLUGIN_BYTES: usize = 16 * 1024 * 1024;
    /// vfs nodes of one plugin.
    pub const VFS_PLUGIN_NODES: usize = 10_000;
    /// Bytes of one storage value (as JSON).
    pub const STORAGE_VALUE_BYTES: usize = 1024 * 1024;
    /// Keys of one plugin's storage, all scopes.
    pub const STORAGE_KEYS: usize = 10_000;
    /// Bytes of all of one plugin's storage values.
    pub const STORAGE_PLUGIN_BYTES: usize = 16 * 1024 * 1024;
    /// Triggers one plugin owns.
    pub const TRIGGERS: usize = 1_000;

    /// Whether storing a value of `value_bytes` under `key` keeps `plugin`
    /// within its storage quota, in a storage holding `keys` keys and `bytes`
    /// bytes of values; `replaced` is the size of the value `key` holds now,
    /// if any. The one check of every storage a plugin writes (the `services`
    /// storage and a component's `host.storage-*`); the refusal names the limit.
    ///
    /// # Errors
    /// The refusal, naming the plugin or key and the limit.
    pub fn check_storage_write(
        plugin: &str,
        key: &str,
        value_bytes: usize,
        replaced: Option<usize>,
        keys: usize,
        bytes: usize,
    ) -> Result<(), String> {
        if value_bytes > STORAGE_VALUE_BYTES {
            return Err(format!(
                "storage value `{key:.80}` is {value_bytes} bytes; a value may hold at most {STORAGE_VALUE_BYTES} bytes"
            ));
        }
        if replaced.is_none() && keys >= STORAGE_KEYS {
            return Err(format!("plugin '{plugin}' has {keys} storage keys already, the most it may keep"));
        }
        // A write that does not grow the storage passes (a storage over the
        // quota, written before it existed, can still shrink).
        let after = bytes.saturating_sub(replaced.unwrap_or(0)).saturating_add(value_bytes);
        if after > STORAGE_PLUGIN_BYTES && value_bytes > replaced.unwrap_or(0) {
            return Err(format!(
                "plugin '{plugin}' would keep {after} bytes of storage values; the most it may keep is \
                 {STORAGE_PLUGIN_BYTES} bytes"
            ));
        }
        Ok(())
    }
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
    dir: PathBuf,
    vfs: Mutex<Vfs>,
    triggers: Mutex<Triggers>,
    host: OnceLock<Weak<dyn HostCalls>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock left the store as it was before the
    // change (each change is applied in memory only after its checks).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `<agent dir>/plugins/<plugin>`: one plugin's config and storage.
pub fn plugin_dir(agent_dir: &Path, plugin: &str) -> PathBuf {
    agent_dir.join("plugins").join(plugin)
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl SharedServices {
    /// Opens (creating the directory) the stores under `dir`, normally
    /// `<home>/agent`.
    ///
    /// # Errors
    /// The directory cannot be made, or a store file is unreadable.
    pub fn open(dir: &Path) -> Result<Arc<SharedServices>, ServiceError> {
        std::fs::create_dir_all(dir.join("plugins"))
            .map_err(|e| ServiceError::service(format!("cannot create {}: {e}", dir.display())))?;
        let vfs = Vfs::open(&dir.join("vfs.json")).map_err(ServiceError::service)?;
        let triggers = Triggers::open(&dir.join("triggers.json")).map_err(ServiceError::service)?;
        Ok(Arc::new(SharedServices {
            dir: dir.to_owned(),
            vfs: Mutex::new(vfs),
            triggers: Mutex::new(triggers),
            host: OnceLock::new(),
        }))
    }

    /// Connects the engine (once; later calls are ignored).
    pub fn connect(&self, host: Weak<dyn HostCalls>) {
        let _ = self.host.set(host);
    }

    fn host(&self) -> Option<Arc<dyn HostCalls>> {
        self.host.get().and_then(Weak::upgrade)
    }

    /// The vfs, for the embedder (reads everything, writes anywhere).
    pub fn vfs(&self) -> MutexGuard<'_, Vfs> {
        lock(&self.vfs)
    }

    /// The trigger store, for the embedder and the watcher.
    pub fn triggers(&self) -> MutexGuard<'_, Triggers> {
        lock(&self.triggers)
    }

    /// The per-plugin directory of `plugin`'s config and storage.
    pub fn plugin_dir(&self, plugin: &str) -> PathBuf {
        plugin_dir(&self.dir, plugin)
    }

    /// A vfs read as the embedder sees it: symbolic nodes computed by their
    /// owner. `Ok(None)` when nothing is at `path`.
    ///
    /// `reader` is the plugin reading, if one is: its own symbolic node is an
    /// error (its worker is busy in the very call that reads it).
    pub async fn read_vfs(&self, path: &str, reader: Option<&str>) -> Result<Option<Read>, ServiceError> {
        let read = self.vfs().read(path);
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
    config: Mutex<PluginConfig>,
    storage: Mutex<Storage>,
    view: ConfigView,
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
    /// `plugin`'s services, with its declared config `schema`.
    ///
    /// # Errors
    /// Its directory cannot be made, or its files are unreadable.
    pub fn open(
        shared: Arc<SharedServices>,
        plugin: &str,
        schema: Vec<Field>,
        view: ConfigView,
    ) -> Result<Self, ServiceError> {
        let dir = shared.plugin_dir(plugin);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ServiceError::service(format!("cannot create {}: {e}", dir.display())))?;
        let config = PluginConfig::open(&dir, schema).map_err(ServiceError::service)?;
        let storage = Storage::open(&dir).map_err(ServiceError::service)?;
        Ok(PluginServices {
            name: plugin.to_owned(),
            shared,
            config: Mutex::new(config),
            storage: Mutex::new(storage),
            view,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn shared(&self) -> &Arc<SharedServices> {
        &self.shared
    }

    fn write_config_view(&self, values: &std::collections::BTreeMap<String, Value>) -> Result<(), ServiceError> {
        let Some(file) = &self.view.file else { return Ok(()) };
        let mut all = self.view.base.clone();
        all.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        super::save_json(file, &all).map_err(ServiceError::service)
    }

    /// `{"schema": […], "values": {…}}`: the HTTP config view.
    pub fn config_snapshot(&self) -> Value {
        let config = lock(&self.config);
        json!({"schema": config.schema(), "values": config.values()})
    }

    /// Writes the one-shot config view; called at load.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn publish_config(&self) -> Result<(), ServiceError> {
        let values = lock(&self.config).values();
        self.write_config_view(&values)
    }

    /// Sets several values at once, all or nothing (each checked first),
    /// firing `config_changed` for each: the HTTP `PUT`.
    ///
    /// # Errors
    /// The first key that is unknown or of the wrong type; nothing is set.
    pub fn set_config(&self, values: &Map<String, Value>) -> Result<Value, ServiceError> {
        let mut config = lock(&self.config);
        for (key, value) in values {
            config.check(key, value).map_err(|e| ServiceError::params(e.to_string()))?;
        }
        let mut changes = Vec::new();
        for (key, value) in values {
            changes.push(config.set(key, value).map_err(ServiceError::service)?);
        }
        let all = config.values();
        self.write_config_view(&all)?;
        // Queued while the lock is held (a channel send), so the calls come in
        // the order the sets were applied.
        self.announce(changes);
        Ok(json!(all))
    }

    fn announce(&self, changes: Vec<Change>) {
        if let Some(host) = self.shared.host() {
            for change in changes {
                host.config_changed(&self.name, change);
            }
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
        let me = Writer::Plugin(&self.name);
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
                self.set_config(&one)?;
                Ok(lock(&self.config).get(key, Value::Null))
            }
            "config.list" => Ok(self.config_snapshot()),
            "config.register" => {
                let schema = p.get("schema").cloned().unwrap_or(Value::Array(Vec::new()));
                let fields = super::config::parse_schema(&schema).map_err(|e| ServiceError::params(e.to_string()))?;
                let values = {
                    let mut config = lock(&self.config);
                    config.set_schema(fields);
                    config.values()
                };
                self.write_config_view(&values)?;
                Ok(json!(values))
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
                let path = str_param(&p, "path")?;
                let content = str_param(&p, "content")?;
                let mut vfs = self.shared.vfs();
                self.check_vfs_quota(&vfs, path, content.len())?;
                vfs.write(me, path, content).map(Value::String).map_err(ServiceError::service)
            }
            "vfs.write_symbolic" => {
                let path = str_param(&p, "path")?;
                let searchable = p.get("searchable").and_then(Value::as_bool).unwrap_or(false);
                let mut vfs = self.shared.vfs();
                self.check_vfs_quota(&vfs, path, 0)?;
                vfs.write_symbolic(me, path, searchable).map(Value::String).map_err(ServiceError::service)
            }
            "vfs.delete" => {
                let path = str_param(&p, "path")?;
                self.shared.vfs().delete(me, path).map(Value::Bool).map_err(ServiceError::service)
            }
            "vfs.list" => {
                let path = p.get("path").and_then(Value::as_str).unwrap_or("/");
                Ok(json!(self.shared.vfs().list(path)))
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
                let id = str_param(&p, "id")?;
                Ok(self.shared.triggers().get(id).cloned().map_or(Value::Null, Value::Object))
            }
            "trigger.list" => Ok(json!(self.shared.triggers().list())),
            "trigger.update" => {
                let id = str_param(&p, "id")?;
                let mut patch = match p.get("patch").or_else(|| p.get("changes")) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => return Err(ServiceError::params("`patch` must be an object")),
                };
                // The owner is the host's record, not the plugin's to change.
                patch.remove("plugin");
                let mut triggers = self.shared.triggers();
                self.check_owner(&triggers, id)?;
                triggers.update(id, &patch).map(|t| Value::Object(t.clone())).map_err(ServiceError::service)
            }
            "trigger.delete" => {
                let id = str_param(&p, "id")?;
                let mut triggers = self.shared.triggers();
                self.check_owner(&triggers, id)?;
                triggers.delete(id).map(Value::Bool).map_err(ServiceError::service)
            }
            "storage.get" | "storage.set" | "storage.delete" => {
                let key = str_param(&p, "key")?;
                let agent = p.get("agent_id").and_then(Value::as_str).or(ctx.agent_id.as_deref());
                let scope = match p.get("scope").and_then(Value::as_str).unwrap_or("global") {
                    "global" => Scope::Global,
                    "session" => Scope::Session(agent.filter(|a| !a.is_empty()).ok_or_else(|| {
                        ServiceError::params(
                            "`session` scope needs an agent: give `agent_id` or call during an agent's hook",
                        )
                    })?),
                    other => {
                        return Err(ServiceError::params(format!("`scope` must be global or session, not {other:?}")));
                    }
                };
                let mut storage = lock(&self.storage);
                match method {
                    "storage.get" => Ok(storage.get(scope, key).cloned().unwrap_or(Value::Null)),
                    "storage.set" => {
                        let value = p.get("value").cloned().unwrap_or(Value::Null);
                        let size = |v: &Value| serde_json::to_vec(v).map_or(0, |v| v.len());
                        let replaced = storage.get(scope, key).map(size);
                        quota::check_storage_write(
                            &self.name,
                            key,
                            size(&value),
                            replaced,
                            storage.len(),
                            storage.bytes(),
                        )
                        .map_err(ServiceError::service)?;
                        storage.set(scope, key, value).map(|()| Value::Null).map_err(ServiceError::service)
                    }
                    _ => storage.delete(scope, key).map(Value::Bool).map_err(ServiceError::service),
                }
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

    /// Whether writing `bytes` at `path` keeps the plugin within its vfs quota.
    fn check_vfs_quota(&self, vfs: &Vfs, path: &str, bytes: usize) -> Result<(), ServiceError> {
        if bytes > quota::VFS_FILE_BYTES {
            return Err(ServiceError::service(format!(
                "{path}: {bytes} bytes; a vfs file may hold at most {} bytes",
                quota::VFS_FILE_BYTES
            )));
        }
        let (nodes, used) = vfs.usage(&self.name, path);
        if nodes + 1 > quota::VFS_PLUGIN_NODES || used + bytes > quota::VFS_PLUGIN_BYTES {
            return Err(ServiceError::service(format!(
                "plugin '{}' would keep {} vfs nodes and {} bytes; the most it may keep is {} nodes and {} bytes",
                self.name,
                nodes + 1,
                used + bytes,
                quota::VFS_PLUGIN_NODES,
                quota::VFS_PLUGIN_BYTES
            )));
        }
        Ok(())
    }

    /// A plugin changes only the triggers it created; one without an owner
    /// is the embedder's.
    fn check_owner(&self, triggers: &Triggers, id: &str) -> Result<(), ServiceError> {
        let Some(trigger) = triggers.get(id) else { return Ok(()) };
        match trigger.get("plugin").and_then(Value::as_str) {
            Some(owner) if owner == self.name => Ok(()),
            Some(owner) => Err(ServiceError::service(format!(
                "trigger `{id}` belongs to plugin '{owner}'; a plugin changes only its own triggers"
            ))),
            None => Err(ServiceError::service(format!(
                "trigger `{id}` belongs to the embedder; a plugin changes only its own triggers"
            ))),
        }
    }

    async fn create_trigger(&self, mut trigger: Map<String, Value>) -> Result<Value, ServiceError> {
        trigger.insert("plugin".into(), Value::String(self.name.clone()));
        let id = trigger.get("id").cloned();
        if let Some(id) = id.as_ref().and_then(Value::as_str) {
            self.check_owner(&self.shared.triggers(), id)?;
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
        let mut triggers = self.shared.triggers();
        if let Some(id) = trigger.get("id").and_then(Value::as_str) {
            // Checked again under the lock: the chain was awaited.
            self.check_owner(&triggers, id)?;
            let mine =
                triggers.list().iter().filter(|t| t.get("plugin").and_then(Value::as_str) == Some(&self.name)).count();
            if triggers.get(id).is_none() && mine >= quota::TRIGGERS {
                return Err(ServiceError::service(format!(
                    "plugin '{}' has {mine} triggers already, the most it may keep",
                    self.name
                )));
            }
        }
        triggers.create(trigger, now_secs()).map(Value::String).map_err(ServiceError::service)
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
        let shared = SharedServices::open(dir.path()).unwrap();
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
        a.shared().triggers().create(host.as_object().unwrap().clone(), 0).unwrap();
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
