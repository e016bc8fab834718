//! The change feed of a shared store: what a change made through one
//! instance tells every other instance on the same database — a plugin's
//! config values set, a plugin enabled or disabled, a grant recorded, a
//! plugin reloaded.
//!
//! Each entry is a row of the store's `changes` table (a monotonic id, the
//! kind, the plugin, a JSON payload, the instance that made it), written in
//! the same transaction as the change itself by the store's methods
//! (`config_put`, `set_plugin_choice`, `grant_set`), or on its own by
//! [`Feed::note`] (a reload: nothing of it is stored). Ids follow the commit
//! order, so a reader that read up to id `n` never finds a later commit with
//! a smaller id ([`Feed::after`] from the last id seen is a complete
//! catch-up).
//!
//! A [`Listener`] wakes its reader when a change is committed (PostgreSQL's
//! `LISTEN`/`NOTIFY`) and after every (re)connection of its connection, when
//! wakeups may have been missed. The reader then reads the feed from the
//! last id it saw. What a change means to an instance (fire
//! `config_changed`, reload a plugin) is decided above (`server`), never
//! here.
//!
//! Only the PostgreSQL store has a feed ([`super::open_feed`]); on the
//! embedded SQLite store one instance owns the state and nothing is told.

use serde_json::Value;

use super::StoreError;

/// The kind of one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Config values set: `{"values": {key: value, …}}`, in the order set.
    Config,
    /// Enabled or disabled: `{"enabled": bool}`.
    Enable,
    /// A grant recorded or forgotten: `{"grant": {…} | null}`.
    Grant,
    /// Reloaded by the operator: `{}`; every instance reloads it from its own files.
    Reload,
    /// A version recorded as the fleet's (`ctxhost plugin adopt`, `plugin
    /// install`): `{"hash", "version"}`; every instance re-hashes its own
    /// files and refuses the plugin or resumes it.
    Adopt,
}

impl ChangeKind {
    /// How the `kind` column spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Config => "config",
            ChangeKind::Enable => "enable",
            ChangeKind::Grant => "grant",
            ChangeKind::Reload => "reload",
            ChangeKind::Adopt => "adopt",
        }
    }

    /// The kind a `kind` column holds; `None`: one this build does not know
    /// (a newer instance's), skipped by readers.
    pub fn parse(text: &str) -> Option<ChangeKind> {
        Some(match text {
            "config" => ChangeKind::Config,
            "enable" => ChangeKind::Enable,
            "grant" => ChangeKind::Grant,
            "reload" => ChangeKind::Reload,
            "adopt" => ChangeKind::Adopt,
            _ => return None,
        })
    }
}

/// One change as the feed holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    pub id: i64,
    /// `None`: a kind this build does not know.
    pub kind: Option<ChangeKind>,
    pub plugin: String,
    pub payload: Value,
    /// The instance that made it ([`Feed::origin`] of its process).
    pub origin: String,
}

/// Why a [`Listener`] woke its reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The listening connection is (re)connected: wakeups may have been
    /// missed while it was not, read the feed from the last id seen.
    Connected,
    /// A change was committed.
    Notified,
}

/// Wakes its reader on every committed change and after every (re)connect;
/// listening stops when it is dropped.
pub struct Listener {
    pub wakes: tokio::sync::mpsc::UnboundedReceiver<Wake>,
    /// Stops the listening task when dropped.
    pub stop: Box<dyn std::any::Any + Send + Sync>,
}

/// A store's change feed. Every method but [`Feed::listen`] blocks: on the
/// async runtime, call them through [`super::off_runtime`].
pub trait Feed: Send + Sync {
    /// This process's name in the `origin` column: its own entries are
    /// what it already applied.
    fn origin(&self) -> &str;

    /// The last id committed so far (0: none). An instance that starts reads
    /// it before loading, then reads the feed after it.
    fn head(&self) -> Result<i64, StoreError>;

    /// At most `limit` entries after id `after`, in id order.
    fn after(&self, after: i64, limit: usize) -> Result<Vec<FeedEntry>, StoreError>;

    /// Appends an entry that goes with no stored change (a reload); its id.
    fn note(&self, kind: ChangeKind, plugin: &str, payload: &Value) -> Result<i64, StoreError>;

    /// Starts listening on a connection of its own (reconnecting, with a
    /// [`Wake::Connected`] after each connect, until dropped). Needs no
    /// runtime of the caller's.
    fn listen(&self) -> Listener;
}
