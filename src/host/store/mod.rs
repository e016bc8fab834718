//! The host's state store: the vfs, the triggers, each plugin's storage and
//! config values, and the operator's enable/disable choices, behind one trait,
//! [`Store`], used as `Arc<dyn Store>`. The embedded default is SQLite
//! ([`sqlite::SqliteStore`], one file: [`crate::home::Home::state_db`]).
//!
//! The trait is written so that a networked backend (PostgreSQL, several
//! ctxhost instances on one state) can implement it: every method is one
//! whole change or one read, and each change is one transaction — a
//! conditional upsert ([`Store::trigger_put`] checks the owner), a
//! read-modify-write ([`Store::trigger_update`]), a claim of due rows
//! ([`Store::triggers_take_due`]) — so no caller holds a lock or a
//! connection between calls. Quotas ([`quota`]) are checked inside the
//! change's transaction, so concurrent writers cannot pass them together.
//! Nothing of SQLite shows through: no rowids, no pragmas, no SQL types;
//! errors are a [`StoreError`] naming the backend, the operation and the
//! reason.
//!
//! The methods block (file or network I/O): callers on the async runtime run
//! them through [`off_runtime`]. This module never decides what a record
//! means — paths, trigger kinds, schemas are `host::{vfs,triggers,config}`'s
//! — and never calls a plugin.
//!
//! Which backend: [`open`] reads the home's store URL ([`store_url`]:
//! `CTXHOST_STORE_URL`, else `[store] url` of its config.toml); none is the
//! embedded SQLite store, a `postgres://` URL the PostgreSQL one
//! ([`postgres`]), shared by several instances.
//!
//! Old JSON and TOML state files are imported once, at the first open
//! ([`migrate`]). The after_turn journal (`journal.rs`, its own trait and
//! table) shares the database file, not this trait; so does the change feed
//! of a PostgreSQL store ([`feed`]: what every change through one instance
//! tells the others), which its store methods write in their transactions.

mod columns;
#[cfg(test)]
mod contract;
pub mod feed;
pub mod journal;
pub mod migrate;
pub mod postgres;
pub mod quota;
pub mod sqlite;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::home::Home;

/// One vfs node, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Node {
    File { content: String, owner: String },
    Symbolic { owner: String, searchable: bool },
}

impl Node {
    /// Who wrote it: a plugin's name, or `host`.
    pub fn owner(&self) -> &str {
        match self {
            Node::File { owner, .. } | Node::Symbolic { owner, .. } => owner,
        }
    }

    /// The bytes it counts against its owner's quota (a file's text).
    pub fn bytes(&self) -> usize {
        match self {
            Node::File { content, .. } => content.len(),
            Node::Symbolic { .. } => 0,
        }
    }
}

/// Where a storage key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    Global,
    /// One agent's session.
    Session(&'a str),
}

/// One trigger as stored: the plugin's JSON object kept whole, and the
/// host's bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRecord {
    pub id: String,
    pub trigger: Map<String, Value>,
    /// Unix seconds of its creation (or last upsert).
    pub created: u64,
    /// Unix seconds of its last firing, if any.
    pub fired: Option<u64>,
    /// When the clock must look at it next (unix seconds): its next firing
    /// or its expiry. `None`: never by itself (an event trigger).
    pub wake: Option<u64>,
}

impl TriggerRecord {
    /// The plugin that owns it (its `plugin` field); `None`: the embedder's.
    pub fn owner(&self) -> Option<&str> {
        self.trigger.get("plugin").and_then(Value::as_str)
    }
}

/// Who changes a trigger, checked in the change's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    /// The embedder or the operator: any trigger.
    Host,
    /// A plugin: only triggers it owns; a new one only while it owns fewer
    /// than `max_triggers`.
    Plugin { name: &'a str, max_triggers: usize },
}

/// What the clock does with a trigger whose wake time came
/// ([`Store::triggers_take_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueStep {
    /// Removed without firing (its lifespan ran out).
    Expire,
    /// Fired, then removed (it fires once).
    FireOnce,
    /// Fired and kept: its last firing is `fired`, it wakes next at `wake`.
    Fire { fired: u64, wake: Option<u64> },
    /// Not due after all: kept, waking at `wake`.
    Wait { wake: Option<u64> },
    /// Claimed for a firing that has not happened yet: kept as it is, its
    /// wake time moved to `until` (unix seconds), the claim's end. The
    /// claimer settles it ([`Store::trigger_settle`]) once fired; if it
    /// never does (it died), the trigger is due again at `until` and
    /// another instance claims it.
    Claim { until: u64 },
}

/// Bytes and entries one owner keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: usize,
    pub bytes: usize,
}

/// The rows one old state file holds ([`Store::import`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportFile {
    /// The file, as a path: recorded, so a file is imported at most once.
    pub source: String,
    pub vfs: Vec<(String, Node)>,
    pub triggers: Vec<TriggerRecord>,
    /// `(plugin, agent (None: global), key, value)`.
    pub storage: Vec<(String, Option<String>, String, Value)>,
    /// `(plugin, key, value)`.
    pub config: Vec<(String, String, Value)>,
    /// `(plugin, enabled)`.
    pub choices: Vec<(String, bool)>,
    /// `(plugin, grant)`: `grants.toml`'s records, into a PostgreSQL store.
    pub grants: Vec<(String, Value)>,
}

/// The version of a plugin the instances on a store run: its content hash
/// (`sha256:<hex>` over the files that define it), recorded by the first
/// instance that loaded it or by the operator ([`Store::record_plugin_version`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginVersion {
    pub plugin: String,
    pub hash: String,
    /// The manifest's version string, for people.
    pub version: String,
    /// Who recorded it (`<host>:<home>`), for people.
    pub recorded_by: String,
    /// Unix seconds.
    pub recorded_at: u64,
}

/// The state store. Every method blocks; each change is one transaction and
/// leaves the store as it was when it fails.
pub trait Store: Send + Sync {
    /// The backend's name (`sqlite`, …), as errors name it.
    fn backend(&self) -> &'static str;

    /// The version of the store's schema (its tables), after the upgrade
    /// done at open.
    fn schema_version(&self) -> Result<u32, StoreError>;

    /// The node at `path` (in normal form), if any.
    fn vfs_get(&self, path: &str) -> Result<Option<Node>, StoreError>;

    /// The names directly below `dir` (normal form), sorted, without repeats.
    fn vfs_list(&self, dir: &str) -> Result<Vec<String>, StoreError>;

    /// Puts `node` at `path`, replacing what is there. With `limits`, the
    /// node's owner must stay within them, counted without the node replaced.
    fn vfs_put(&self, path: &str, node: &Node, limits: Option<&quota::VfsLimits>) -> Result<(), StoreError>;

    /// Deletes `path` and everything below it; whether anything went.
    fn vfs_delete(&self, path: &str) -> Result<bool, StoreError>;

    /// The nodes and file bytes `owner` keeps.
    fn vfs_usage(&self, owner: &str) -> Result<Usage, StoreError>;

    /// Trigger `id`, if any.
    fn trigger_get(&self, id: &str) -> Result<Option<TriggerRecord>, StoreError>;

    /// Every trigger, by id.
    fn trigger_list(&self) -> Result<Vec<TriggerRecord>, StoreError>;

    /// Creates or replaces trigger `record.id`, as `actor` may.
    fn trigger_put(&self, record: &TriggerRecord, actor: Actor<'_>) -> Result<(), StoreError>;

    /// Replaces trigger `id` with what `change` makes of it, as `actor`
    /// may; `Ok(None)` when there is none. An `Err` from `change` is a
    /// [`StoreErrorKind::Rejected`] and changes nothing.
    fn trigger_update(
        &self,
        id: &str,
        actor: Actor<'_>,
        change: &mut dyn FnMut(&TriggerRecord) -> Result<TriggerRecord, String>,
    ) -> Result<Option<TriggerRecord>, StoreError>;

    /// Deletes trigger `id`, as `actor` may; whether there was one.
    fn trigger_delete(&self, id: &str, actor: Actor<'_>) -> Result<bool, StoreError>;

    /// Claims the triggers whose wake time is `now` or earlier: `step`
    /// says what becomes of each, applied in one transaction (only those
    /// rows are written). Returns them (in id order) with their step. Two
    /// instances on one store never both claim a firing.
    fn triggers_take_due(
        &self,
        now: u64,
        step: &mut dyn FnMut(&TriggerRecord) -> DueStep,
    ) -> Result<Vec<(TriggerRecord, DueStep)>, StoreError>;

    /// Settles a claim ([`DueStep::Claim`]) of trigger `id` whose wake
    /// time the claim set to `claimed`: applies `step` (a `FireOnce` deletes
    /// it, a `Fire` records the firing, a `Claim` renews the claim, …) only
    /// while the trigger is still so claimed. `false`: the claim was lost
    /// (it ran out and another instance claimed the trigger, or the trigger
    /// was changed or deleted meanwhile); nothing changed.
    fn trigger_settle(&self, id: &str, claimed: u64, step: DueStep) -> Result<bool, StoreError>;

    /// Takes or renews the lease `name` for `holder` for `duration`, on the
    /// store's clock (the database's, for a shared store): one conditional
    /// upsert, granted when nobody holds it, `holder` already does, or the
    /// last holder's lease ran out. Whether `holder` holds it now.
    fn lease_take(&self, name: &str, holder: &str, duration: std::time::Duration) -> Result<bool, StoreError>;

    /// Gives lease `name` up, if `holder` holds it; whether it did.
    fn lease_drop(&self, name: &str, holder: &str) -> Result<bool, StoreError>;

    /// `plugin`'s value for `key` in `scope`.
    fn storage_get(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<Option<Value>, StoreError>;

    /// Stores `value`; with `limits`, the plugin's storage must stay within them.
    fn storage_put(
        &self,
        plugin: &str,
        scope: Scope<'_>,
        key: &str,
        value: &Value,
        limits: Option<&quota::StorageLimits>,
    ) -> Result<(), StoreError>;

    /// Removes `key`; whether it was there.
    fn storage_delete(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<bool, StoreError>;

    /// The keys and value bytes (as JSON) of `plugin`'s storage, every scope.
    fn storage_usage(&self, plugin: &str) -> Result<Usage, StoreError>;

    /// `plugin`'s stored config values.
    fn config_values(&self, plugin: &str) -> Result<BTreeMap<String, Value>, StoreError>;

    /// Stores several config values of `plugin` at once: all or none.
    fn config_put(&self, plugin: &str, values: &BTreeMap<String, Value>) -> Result<(), StoreError>;

    /// What the operator chose for `plugin`: enabled, disabled, or nothing.
    fn plugin_choice(&self, plugin: &str) -> Result<Option<bool>, StoreError>;

    /// Every choice the operator made.
    fn plugin_choices(&self) -> Result<BTreeMap<String, bool>, StoreError>;

    /// Records a choice; whether it changed anything.
    fn set_plugin_choice(&self, plugin: &str, enabled: bool) -> Result<bool, StoreError>;

    /// `plugin`'s recorded grant (its JSON, as `host::grants` wrote it).
    fn grant_get(&self, plugin: &str) -> Result<Option<Value>, StoreError>;

    /// Records `grant` for `plugin`, or with `None` forgets it; returns the
    /// one it replaced.
    fn grant_set(&self, plugin: &str, grant: Option<&Value>) -> Result<Option<Value>, StoreError>;

    /// Records `grant` for `plugin` unless one is recorded (another instance
    /// may have recorded one since the caller looked); returns the grant in
    /// force.
    fn grant_first(&self, plugin: &str, grant: &Value) -> Result<Value, StoreError>;

    /// Whether other homes (other ctxhost instances) may share this store:
    /// `false` for the embedded SQLite file of one home.
    fn shared(&self) -> bool;

    /// The version recorded for `plugin`, if any.
    fn plugin_version(&self, plugin: &str) -> Result<Option<PluginVersion>, StoreError>;

    /// Records `record` as its plugin's version when none is recorded — or,
    /// with `replace`, in place of the one that is — in one transaction;
    /// returns the record in force afterwards (another instance's, when it
    /// got there first and `replace` is false).
    fn record_plugin_version(&self, record: &PluginVersion, replace: bool) -> Result<PluginVersion, StoreError>;

    /// Imports old state files in one transaction, records their sources and
    /// skips those recorded before. Rows replace rows; no quota applies (the
    /// state existed).
    fn import(&self, files: &[ImportFile]) -> Result<(), StoreError>;

    /// The sources imported so far.
    fn imported(&self) -> Result<BTreeSet<String>, StoreError>;
}

/// A store operation that failed or was refused.
#[derive(Debug, thiserror::Error)]
#[error("{backend} store, {op}: {kind}")]
pub struct StoreError {
    /// The backend (`sqlite`, …).
    pub backend: &'static str,
    /// The operation (`vfs_put`, `open`, `migrate`, …).
    pub op: &'static str,
    pub kind: StoreErrorKind,
}

/// Why a store operation did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// A quota would be exceeded; the text names the limit.
    #[error("{0}")]
    Quota(String),
    /// A plugin changing a trigger that is not its own.
    #[error("{}", not_yours(id, owner.as_deref()))]
    NotYours { id: String, owner: Option<String> },
    /// The caller's change refused the record (`trigger_update`).
    #[error("{0}")]
    Rejected(String),
    /// A stored value that does not read back (named, with the reason).
    #[error("{what}: {reason}")]
    Corrupt { what: String, reason: String },
    /// An old state file that cannot be imported; it is left as it was.
    #[error("`{}`: {reason}", file.display())]
    Legacy { file: PathBuf, reason: String },
    /// The backend failed (I/O, a read-only database, a busy lock, …).
    #[error("{0}")]
    Backend(String),
}

fn not_yours(id: &str, owner: Option<&str>) -> String {
    match owner {
        Some(owner) => {
            format!("trigger `{id}` belongs to plugin '{owner}'; a plugin changes only its own triggers")
        }
        None => format!("trigger `{id}` belongs to the embedder; a plugin changes only its own triggers"),
    }
}

impl StoreError {
    pub fn new(backend: &'static str, op: &'static str, kind: StoreErrorKind) -> StoreError {
        StoreError { backend, op, kind }
    }

    /// A refusal (quota, owner, a rejected change): the caller's request was
    /// wrong, the store is fine. Its text is the kind's alone.
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, StoreErrorKind::Quota(_) | StoreErrorKind::NotYours { .. } | StoreErrorKind::Rejected(_))
    }

    /// What a plugin or an HTTP client is told: a refusal's reason alone, a
    /// failure's whole text.
    pub fn message(&self) -> String {
        if self.is_refusal() { self.kind.to_string() } else { self.to_string() }
    }
}

/// The stores opened in this process, by database (`sqlite:<file>`,
/// `postgres:<url>`): every part of the host on one home (engine, registry,
/// `ctxhost hook`) shares one.
static OPEN: Mutex<Option<HashMap<String, Weak<dyn Store>>>> = Mutex::new(None);

/// The PostgreSQL databases open in this process, by URL: the store and the
/// journal of one home share one pool.
static PG: Mutex<Option<HashMap<String, Weak<postgres::Pg>>>> = Mutex::new(None);

/// The store URL of `home`: `CTXHOST_STORE_URL` when set (it wins), else
/// `[store] url` of its config.toml; `None`: the embedded SQLite store.
///
/// # Errors
/// The config file cannot be read (named).
pub fn store_url(home: &Home) -> Result<Option<String>, StoreError> {
    let env = |k: &str| std::env::var(k).ok();
    if let Some(url) = crate::config::StoreConfig::default().effective_url(&env) {
        return Ok(Some(url));
    }
    let (config, _) = crate::config::HostConfig::load(home.config_file())
        .map_err(|e| StoreError::new("host", "open", StoreErrorKind::Backend(e.to_string())))?;
    Ok(config.store.effective_url(&|_| None))
}

/// The database at `url`, opened (and its schema upgraded) at the first call
/// in this process; later calls share it while anyone holds it. Blocks.
///
/// # Errors
/// See [`postgres::Pg::open`].
pub fn postgres_db(url: &str) -> Result<Arc<postgres::Pg>, StoreError> {
    let mut open = PG.lock().unwrap_or_else(|p| p.into_inner());
    let open = open.get_or_insert_with(HashMap::new);
    if let Some(pg) = open.get(url).and_then(Weak::upgrade) {
        return Ok(pg);
    }
    open.retain(|_, w| w.strong_count() > 0);
    let pg = Arc::new(postgres::Pg::open(url, &postgres::Credentials::from_env())?);
    open.insert(url.to_owned(), Arc::downgrade(&pg));
    Ok(pg)
}

/// The store of `home` — `<home>/state.db`, or the PostgreSQL database its
/// [`store_url`] names — opened, and the home's old state files imported
/// ([`migrate`]), at the first call in this process; later calls share it
/// while anyone holds it. Blocks.
///
/// # Errors
/// The database cannot be opened, reached or upgraded, or an old state file
/// cannot be read (named; it is left as it was and nothing is imported).
pub fn open(home: &Home) -> Result<Arc<dyn Store>, StoreError> {
    let url = store_url(home)?;
    let key = match &url {
        Some(url) => format!("postgres:{url}"),
        None => format!("sqlite:{}", home.state_db().display()),
    };
    // Opened under the lock, so one process never imports the old files twice.
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let open = open.get_or_insert_with(HashMap::new);
    if let Some(store) = open.get(&key).and_then(Weak::upgrade) {
        return Ok(store);
    }
    open.retain(|_, w| w.strong_count() > 0);
    let store: Arc<dyn Store> = match &url {
        Some(url) => Arc::new(postgres::store::PostgresStore::on(postgres_db(url)?)),
        None => Arc::new(sqlite::SqliteStore::open(&home.state_db())?),
    };
    migrate::run(home, &*store)?;
    open.insert(key, Arc::downgrade(&store));
    Ok(store)
}

/// The after_turn journal of `home`, on the same database as its store
/// ([`open`]), retrying after `policy`. Blocks.
///
/// # Errors
/// The database cannot be opened, reached or upgraded.
pub fn open_journal(
    home: &Home,
    policy: journal::RetryPolicy,
) -> Result<Arc<dyn journal::Journal>, journal::JournalError> {
    let failed = |location: String, e: StoreError| journal::JournalError { location, op: "open", source: Box::new(e) };
    match store_url(home).map_err(|e| failed(home.config_file().display().to_string(), e))? {
        Some(url) => {
            let pg = postgres_db(&url).map_err(|e| failed(crate::config::redact_url(&url), e))?;
            Ok(Arc::new(postgres::journal::PostgresJournal::on(pg, policy)))
        }
        None => Ok(Arc::new(journal::SqliteJournal::open(&home.state_db(), policy)?)),
    }
}

/// The change feed of `home`'s store ([`feed`]): `None` on the embedded
/// SQLite store (one instance: nothing to tell). Blocks.
///
/// # Errors
/// The database cannot be opened, reached or upgraded.
pub fn open_feed(home: &Home) -> Result<Option<Arc<dyn feed::Feed>>, StoreError> {
    match store_url(home)? {
        Some(url) => Ok(Some(Arc::new(postgres::feed::PgFeed::on(postgres_db(&url)?)))),
        None => Ok(None),
    }
}

/// Whether `home` has any state yet: a store URL (the database is there),
/// the database file, or an old file to import. Readers of a home with none
/// need not create one.
pub fn exists(home: &Home) -> bool {
    matches!(store_url(home), Ok(Some(_))) || home.state_db().exists() || migrate::has_legacy_files(home)
}

/// Runs `f` (store calls, file I/O) where blocking is allowed: on the
/// blocking pool when a tokio runtime is around, else right here. A panic in
/// `f` is a [`StoreErrorKind::Backend`] failure of operation `op`.
///
/// # Errors
/// `f` panicked or the runtime is shutting down.
pub async fn off_runtime<T: Send + 'static>(
    op: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt
            .spawn_blocking(f)
            .await
            .map_err(|e| StoreError::new("host", op, StoreErrorKind::Backend(format!("the store call failed: {e}")))),
        Err(_) => Ok(f()),
    }
}
