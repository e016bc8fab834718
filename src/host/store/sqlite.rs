//! The embedded [`Store`]: one SQLite file (`<home>/state.db`), in WAL mode,
//! `synchronous = NORMAL`, a busy timeout for other processes on the same
//! file (`ctxhost hook`, `ctxhost plugin disable` beside a daemon).
//!
//! Why NORMAL and not FULL: in WAL mode NORMAL never corrupts the database and
//! never loses a commit when the process dies (SIGKILL included); only a power
//! loss or an OS crash can take back the last commits. FULL adds an fsync to
//! every change — every vfs write a plugin makes would wait on the disk. The
//! JSON files this replaces were renamed into place without any fsync.
//! A caller that needs more (the after_turn journal) sets `synchronous` on
//! its own connection.
//!
//! Changes go through one writer connection, each its own `BEGIN IMMEDIATE`
//! transaction (so a change never has to upgrade a read lock, and another
//! process's writer waits on the busy timeout rather than failing); reads use
//! a small pool of reader connections, which WAL lets run beside the writer.
//! Every method blocks: callers on the async runtime use
//! [`super::off_runtime`]. This module never decides what a record means.

use super::columns::{below_end, count, json_text, parse_json, scope_cols, secs, unsecs};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde_json::{Map, Value};

use super::quota::{StorageLimits, VfsLimits};
use super::{
    Actor, DueStep, ImportFile, Node, PluginVersion, Scope, Store, StoreError, StoreErrorKind, TriggerRecord, Usage,
    quota,
};

const BACKEND: &str = "sqlite";

/// The schema this code writes. Version 1: `vfs_nodes`, `triggers`,
/// `plugin_storage`, `plugin_config`, `plugin_state`, `store_imports`, and
/// `store_meta` (which holds the version). Version 2 (lease stream):
/// `leases` (who holds a named lease until when, [`Store::lease_take`]).
/// Version 3 (notify stream): `plugin_grants`. Version 4 (hash stream):
/// `plugin_versions` (each plugin's content hash, [`Store::record_plugin_version`]).
pub const SCHEMA_VERSION: u32 = STEPS.len() as u32 + 1;

/// How long a change waits for another process's transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Reader connections kept for reuse.
const READERS_KEPT: usize = 4;

const SCHEMA_V1: &str = "
CREATE TABLE vfs_nodes (
    path TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    kind TEXT NOT NULL,
    searchable INTEGER NOT NULL DEFAULT 0,
    content TEXT
);
CREATE INDEX vfs_nodes_owner ON vfs_nodes (owner, bytes);
CREATE TABLE triggers (
    id TEXT PRIMARY KEY,
    owner TEXT,
    created INTEGER NOT NULL,
    fired INTEGER,
    wake INTEGER,
    body TEXT NOT NULL
);
CREATE INDEX triggers_wake ON triggers (wake) WHERE wake IS NOT NULL;
CREATE INDEX triggers_owner ON triggers (owner);
CREATE TABLE plugin_storage (
    plugin TEXT NOT NULL,
    scope TEXT NOT NULL,
    agent TEXT NOT NULL,
    key TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (plugin, scope, agent, key)
);
CREATE INDEX plugin_storage_usage ON plugin_storage (plugin, bytes);
CREATE TABLE plugin_config (
    plugin TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (plugin, key)
);
CREATE TABLE plugin_state (
    plugin TEXT PRIMARY KEY,
    enabled INTEGER NOT NULL
);
CREATE TABLE store_imports (
    source TEXT PRIMARY KEY,
    imported_at INTEGER NOT NULL
);
";

// lease: schema version 2 (renumber at merge).
const SCHEMA_V2: &str = "
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until_ms INTEGER NOT NULL
);
";

// notify: schema version 3 (renumber at merge): grants in the store (a
// SQLite home keeps using `grants.toml`; the table keeps one contract on
// both backends).
const SCHEMA_V3: &str = "
CREATE TABLE plugin_grants (
    plugin TEXT PRIMARY KEY,
    grant_json TEXT NOT NULL
);
";

/// The steps from version `n` to `n + 1`, `STEPS[n - 1]` (version 1 is
/// made whole by `SCHEMA_V1`).
const STEPS: &[&str] = &[SCHEMA_V2, SCHEMA_V3, SCHEMA_V4];

// hash: schema version 4 (renumber at merge): each plugin's recorded
// content hash, the version the instances on a store run.
const SCHEMA_V4: &str = "
CREATE TABLE plugin_versions (
    plugin TEXT PRIMARY KEY,
    hash TEXT NOT NULL,
    version TEXT NOT NULL,
    recorded_by TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);
";

/// Milliseconds since the epoch on this machine's clock (the lease clock of
/// a store only this machine uses).
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Opens a connection to the database at `path` the way every user of the
/// file must: WAL, `synchronous = NORMAL`, a busy timeout.
///
/// # Errors
/// The file cannot be opened or set up.
pub fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = retry_busy(|| conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!("{}: the file system does not allow WAL; journal mode is {mode}", path.display());
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Runs `f` again while it fails with "busy", for at most the busy timeout:
/// switching to WAL and the first schema change take locks the busy handler
/// does not always wait for (another process opening the file right now).
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let started = std::time::Instant::now();
    loop {
        match f() {
            Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

fn fail(op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::new(BACKEND, op, StoreErrorKind::Backend(e.to_string()))
}

fn refuse(op: &'static str, kind: StoreErrorKind) -> StoreError {
    StoreError::new(BACKEND, op, kind)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding it dropped the transaction (rolled back) first.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Unix seconds as SQLite's integer (which is signed).
/// A row of `vfs_nodes` back as a node.
fn node_from_row(op: &'static str, path: &str, row: &rusqlite::Row<'_>) -> Result<Node, StoreError> {
    let get = |i| -> Result<Option<String>, StoreError> { row.get(i).map_err(fail(op)) };
    let owner = get(0)?.unwrap_or_default();
    let kind = get(1)?.unwrap_or_default();
    match kind.as_str() {
        "file" => Ok(Node::File { content: get(3)?.unwrap_or_default(), owner }),
        "symbolic" => {
            let searchable: i64 = row.get(2).map_err(fail(op))?;
            Ok(Node::Symbolic { owner, searchable: searchable != 0 })
        }
        other => Err(refuse(
            op,
            StoreErrorKind::Corrupt { what: format!("vfs node {path}"), reason: format!("unknown kind {other:?}") },
        )),
    }
}

const TRIGGER_COLS: &str = "id, created, fired, wake, body";

fn trigger_from_row(op: &'static str, row: &rusqlite::Row<'_>) -> Result<TriggerRecord, StoreError> {
    let id: String = row.get(0).map_err(fail(op))?;
    let created: i64 = row.get(1).map_err(fail(op))?;
    let fired: Option<i64> = row.get(2).map_err(fail(op))?;
    let wake: Option<i64> = row.get(3).map_err(fail(op))?;
    let body: String = row.get(4).map_err(fail(op))?;
    let trigger: Map<String, Value> = parse_json(BACKEND, op, format!("trigger `{id}`"), &body)?;
    Ok(TriggerRecord { id, trigger, created: unsecs(created), fired: fired.map(unsecs), wake: wake.map(unsecs) })
}

fn get_trigger(conn: &Connection, op: &'static str, id: &str) -> Result<Option<TriggerRecord>, StoreError> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {TRIGGER_COLS} FROM triggers WHERE id = ?1")).map_err(fail(op))?;
    let mut rows = stmt.query([id]).map_err(fail(op))?;
    match rows.next().map_err(fail(op))? {
        Some(row) => trigger_from_row(op, row).map(Some),
        None => Ok(None),
    }
}

fn put_trigger(tx: &Connection, op: &'static str, r: &TriggerRecord) -> Result<(), StoreError> {
    let body = json_text(BACKEND, op, &Value::Object(r.trigger.clone()))?;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO triggers (id, owner, created, fired, wake, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| s.execute(params![r.id, r.owner(), secs(r.created), r.fired.map(secs), r.wake.map(secs), body]))
    .map_err(fail(op))?;
    Ok(())
}

/// Whether `actor` may change trigger `id`, which exists with `owner`.
fn check_owner(op: &'static str, actor: Actor<'_>, id: &str, owner: Option<&str>) -> Result<(), StoreError> {
    match actor {
        Actor::Plugin { name, .. } if owner != Some(name) => {
            Err(refuse(op, StoreErrorKind::NotYours { id: id.to_owned(), owner: owner.map(str::to_owned) }))
        }
        _ => Ok(()),
    }
}

fn put_node(tx: &Connection, op: &'static str, path: &str, node: &Node) -> Result<(), StoreError> {
    let (kind, searchable, content) = match node {
        Node::File { content, .. } => ("file", false, Some(content.as_str())),
        Node::Symbolic { searchable, .. } => ("symbolic", *searchable, None),
    };
    tx.prepare_cached(
        "INSERT OR REPLACE INTO vfs_nodes (path, owner, bytes, kind, searchable, content) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| s.execute(params![path, node.owner(), secs(node.bytes() as u64), kind, searchable, content]))
    .map_err(fail(op))?;
    Ok(())
}

fn put_storage(
    tx: &Connection,
    op: &'static str,
    plugin: &str,
    scope: Scope<'_>,
    key: &str,
    text: &str,
) -> Result<(), StoreError> {
    let (scope, agent) = scope_cols(scope);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO plugin_storage (plugin, scope, agent, key, bytes, value) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| s.execute(params![plugin, scope, agent, key, secs(text.len() as u64), text]))
    .map_err(fail(op))?;
    Ok(())
}

fn put_config(tx: &Connection, op: &'static str, plugin: &str, key: &str, value: &Value) -> Result<(), StoreError> {
    let text = json_text(BACKEND, op, value)?;
    tx.prepare_cached("INSERT OR REPLACE INTO plugin_config (plugin, key, value) VALUES (?1, ?2, ?3)")
        .and_then(|mut s| s.execute(params![plugin, key, text]))
        .map_err(fail(op))?;
    Ok(())
}

fn put_choice(tx: &Connection, op: &'static str, plugin: &str, enabled: bool) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT OR REPLACE INTO plugin_state (plugin, enabled) VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![plugin, enabled]))
        .map_err(fail(op))?;
    Ok(())
}

/// The JSON text of `plugin`'s grant, if one is recorded.
fn get_grant(conn: &Connection, op: &'static str, plugin: &str) -> Result<Option<String>, StoreError> {
    conn.prepare_cached("SELECT grant_json FROM plugin_grants WHERE plugin = ?1")
        .and_then(|mut s| s.query_row([plugin], |r| r.get(0)).optional())
        .map_err(fail(op))
}

fn put_grant(tx: &Connection, op: &'static str, plugin: &str, grant: &Value) -> Result<(), StoreError> {
    let text = json_text(BACKEND, op, grant)?;
    tx.prepare_cached("INSERT OR REPLACE INTO plugin_grants (plugin, grant_json) VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![plugin, text]))
        .map_err(fail(op))?;
    Ok(())
}

/// `(count, sum)` of a `SELECT COUNT(*), COALESCE(SUM(bytes), 0) …`.
fn get_version(conn: &Connection, op: &'static str, plugin: &str) -> Result<Option<PluginVersion>, StoreError> {
    conn.prepare_cached("SELECT plugin, hash, version, recorded_by, recorded_at FROM plugin_versions WHERE plugin = ?1")
        .and_then(|mut s| {
            s.query_row([plugin], |r| {
                Ok(PluginVersion {
                    plugin: r.get(0)?,
                    hash: r.get(1)?,
                    version: r.get(2)?,
                    recorded_by: r.get(3)?,
                    recorded_at: unsecs(r.get(4)?),
                })
            })
            .optional()
        })
        .map_err(fail(op))
}

fn usage(conn: &Connection, op: &'static str, sql: &str, p: impl rusqlite::Params) -> Result<Usage, StoreError> {
    let (n, b): (i64, i64) =
        conn.prepare_cached(sql).and_then(|mut s| s.query_row(p, |r| Ok((r.get(0)?, r.get(1)?)))).map_err(fail(op))?;
    Ok(Usage { entries: count(n), bytes: count(b) })
}

impl SqliteStore {
    /// Opens (creating) the database at `path` and brings its schema to
    /// [`SCHEMA_VERSION`].
    ///
    /// # Errors
    /// The file cannot be opened or created, or it was written by a newer
    /// ctxhost (a schema this code does not know).
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        const OP: &str = "open";
        if let Some(dir) = path.parent() {
            crate::home::Home::ensure_dir(dir)
                .map_err(|e| refuse(OP, StoreErrorKind::Backend(format!("`{}`: {e}", path.display()))))?;
        }
        {
            // Plugins' values and config are in it: only this user reads it
            // (SQLite gives its -wal and -shm files the same mode).
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| refuse(OP, StoreErrorKind::Backend(format!("`{}`: {e}", path.display()))))?;
        }
        let named = |e: rusqlite::Error| refuse(OP, StoreErrorKind::Backend(format!("`{}`: {e}", path.display())));
        let mut conn = connect(path).map_err(named)?;
        retry_busy(|| Self::upgrade(&mut conn, path)).map_err(named)??;
        Ok(SqliteStore { path: path.to_owned(), writer: Mutex::new(conn), readers: Mutex::new(Vec::new()) })
    }

    /// Brings the schema to [`SCHEMA_VERSION`] in one transaction: the SQL
    /// result, and inside it this store's verdict on the version found.
    fn upgrade(conn: &mut Connection, path: &Path) -> rusqlite::Result<Result<(), StoreError>> {
        const OP: &str = "open";
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")?;
        let version: Option<String> =
            tx.query_row("SELECT value FROM store_meta WHERE key = 'schema_version'", [], |r| r.get(0)).optional()?;
        match version.as_deref().map(str::parse::<u32>) {
            None => {
                tx.execute_batch(SCHEMA_V1)?;
                for step in STEPS {
                    tx.execute_batch(step)?;
                }
                tx.execute(
                    "INSERT INTO store_meta (key, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION.to_string()],
                )?;
            }
            Some(Ok(v)) if v == SCHEMA_VERSION => {}
            Some(Ok(v)) if (1..SCHEMA_VERSION).contains(&v) => {
                for step in &STEPS[v as usize - 1..] {
                    tx.execute_batch(step)?;
                }
                tx.execute(
                    "UPDATE store_meta SET value = ?1 WHERE key = 'schema_version'",
                    [SCHEMA_VERSION.to_string()],
                )?;
            }
            Some(Ok(v)) => {
                return Ok(Err(refuse(
                    OP,
                    StoreErrorKind::Backend(format!(
                        "`{}` holds schema version {v}, written by another ctxhost; this one knows version \
                         {SCHEMA_VERSION}",
                        path.display()
                    )),
                )));
            }
            Some(Err(e)) => {
                return Ok(Err(refuse(
                    OP,
                    StoreErrorKind::Corrupt {
                        what: format!("`{}` schema_version", path.display()),
                        reason: e.to_string(),
                    },
                )));
            }
        }
        tx.commit()?;
        Ok(Ok(()))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer
    /// connection: committed when it returns `Ok`, rolled back otherwise.
    fn write<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = lock(&self.writer);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(fail(op))?;
        let out = f(&tx)?;
        tx.commit().map_err(fail(op))?;
        Ok(out)
    }

    /// Runs `f` on a reader connection (each statement sees the last commit).
    fn read<T>(&self, op: &'static str, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let pooled = lock(&self.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.path).map_err(fail(op))?,
        };
        let out = f(&conn);
        let mut readers = lock(&self.readers);
        if readers.len() < READERS_KEPT {
            readers.push(conn);
        }
        out
    }

    /// Whether any trigger's wake time is `now` or earlier (no lock taken).
    fn any_due(&self, now: u64) -> Result<bool, StoreError> {
        const OP: &str = "triggers_take_due";
        self.read(OP, |c| {
            c.prepare_cached("SELECT EXISTS (SELECT 1 FROM triggers WHERE wake IS NOT NULL AND wake <= ?1)")
                .and_then(|mut s| s.query_row([secs(now)], |r| r.get::<_, bool>(0)))
                .map_err(fail(OP))
        })
    }

    /// The writer connection, for tests that break it on purpose.
    #[cfg(test)]
    fn writer(&self) -> MutexGuard<'_, Connection> {
        lock(&self.writer)
    }
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn schema_version(&self) -> Result<u32, StoreError> {
        const OP: &str = "schema_version";
        let text: String = self.read(OP, |c| {
            c.query_row("SELECT value FROM store_meta WHERE key = 'schema_version'", [], |r| r.get(0)).map_err(fail(OP))
        })?;
        text.parse().map_err(|e: std::num::ParseIntError| {
            refuse(OP, StoreErrorKind::Corrupt { what: "schema_version".into(), reason: e.to_string() })
        })
    }

    fn vfs_get(&self, path: &str) -> Result<Option<Node>, StoreError> {
        const OP: &str = "vfs_get";
        self.read(OP, |c| {
            let mut stmt = c
                .prepare_cached("SELECT owner, kind, searchable, content FROM vfs_nodes WHERE path = ?1")
                .map_err(fail(OP))?;
            let mut rows = stmt.query([path]).map_err(fail(OP))?;
            match rows.next().map_err(fail(OP))? {
                Some(row) => node_from_row(OP, path, row).map(Some),
                None => Ok(None),
            }
        })
    }

    fn vfs_list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        const OP: &str = "vfs_list";
        let prefix = if dir == "/" { "/".to_owned() } else { format!("{dir}/") };
        let end = below_end(&prefix);
        let paths: Vec<String> = self.read(OP, |c| {
            let mut stmt = c
                .prepare_cached("SELECT path FROM vfs_nodes WHERE path >= ?1 AND path < ?2 ORDER BY path")
                .map_err(fail(OP))?;
            let rows = stmt.query_map([&prefix, &end], |r| r.get(0)).map_err(fail(OP))?;
            rows.collect::<Result<_, _>>().map_err(fail(OP))
        })?;
        let names: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| p.get(prefix.len()..).and_then(|rest| rest.split('/').next()).map(str::to_owned))
            .filter(|n| !n.is_empty())
            .collect();
        Ok(names.into_iter().collect())
    }

    fn vfs_put(&self, path: &str, node: &Node, limits: Option<&VfsLimits>) -> Result<(), StoreError> {
        const OP: &str = "vfs_put";
        self.write(OP, |tx| {
            if let Some(limits) = limits {
                // The owner's total (read from the index alone), less the
                // node this one replaces if it is the owner's.
                let mut u = usage(
                    tx,
                    OP,
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM vfs_nodes WHERE owner = ?1",
                    [node.owner()],
                )?;
                let replaced: Option<(String, i64)> = tx
                    .prepare_cached("SELECT owner, bytes FROM vfs_nodes WHERE path = ?1")
                    .and_then(|mut s| s.query_row([path], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                    .map_err(fail(OP))?;
                if let Some((owner, bytes)) = replaced
                    && owner == node.owner()
                {
                    u.entries = u.entries.saturating_sub(1);
                    u.bytes = u.bytes.saturating_sub(count(bytes));
                }
                limits
                    .check(node.owner(), path, node.bytes(), u.entries, u.bytes)
                    .map_err(|r| refuse(OP, StoreErrorKind::Quota(r)))?;
            }
            put_node(tx, OP, path, node)
        })
    }

    fn vfs_delete(&self, path: &str) -> Result<bool, StoreError> {
        const OP: &str = "vfs_delete";
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let end = below_end(&prefix);
        self.write(OP, |tx| {
            let n = tx
                .prepare_cached("DELETE FROM vfs_nodes WHERE path = ?1 OR (path >= ?2 AND path < ?3)")
                .and_then(|mut s| s.execute(params![path, prefix, end]))
                .map_err(fail(OP))?;
            Ok(n > 0)
        })
    }

    fn vfs_usage(&self, owner: &str) -> Result<Usage, StoreError> {
        const OP: &str = "vfs_usage";
        self.read(OP, |c| {
            usage(c, OP, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM vfs_nodes WHERE owner = ?1", [owner])
        })
    }

    fn trigger_get(&self, id: &str) -> Result<Option<TriggerRecord>, StoreError> {
        self.read("trigger_get", |c| get_trigger(c, "trigger_get", id))
    }

    fn trigger_list(&self) -> Result<Vec<TriggerRecord>, StoreError> {
        const OP: &str = "trigger_list";
        self.read(OP, |c| {
            let mut stmt =
                c.prepare_cached(&format!("SELECT {TRIGGER_COLS} FROM triggers ORDER BY id")).map_err(fail(OP))?;
            let mut rows = stmt.query([]).map_err(fail(OP))?;
            let mut all = Vec::new();
            while let Some(row) = rows.next().map_err(fail(OP))? {
                all.push(trigger_from_row(OP, row)?);
            }
            Ok(all)
        })
    }

    fn trigger_put(&self, record: &TriggerRecord, actor: Actor<'_>) -> Result<(), StoreError> {
        const OP: &str = "trigger_put";
        self.write(OP, |tx| {
            let existing: Option<Option<String>> = tx
                .prepare_cached("SELECT owner FROM triggers WHERE id = ?1")
                .and_then(|mut s| s.query_row([&record.id], |r| r.get(0)).optional())
                .map_err(fail(OP))?;
            match (existing, actor) {
                (Some(owner), _) => check_owner(OP, actor, &record.id, owner.as_deref())?,
                (None, Actor::Plugin { name, max_triggers }) => {
                    let owned: i64 = tx
                        .prepare_cached("SELECT COUNT(*) FROM triggers WHERE owner = ?1")
                        .and_then(|mut s| s.query_row([name], |r| r.get(0)))
                        .map_err(fail(OP))?;
                    if count(owned) >= max_triggers {
                        return Err(refuse(OP, StoreErrorKind::Quota(quota::triggers_refusal(name, count(owned)))));
                    }
                }
                (None, Actor::Host) => {}
            }
            put_trigger(tx, OP, record)
        })
    }

    fn trigger_update(
        &self,
        id: &str,
        actor: Actor<'_>,
        change: &mut dyn FnMut(&TriggerRecord) -> Result<TriggerRecord, String>,
    ) -> Result<Option<TriggerRecord>, StoreError> {
        const OP: &str = "trigger_update";
        self.write(OP, |tx| {
            let Some(old) = get_trigger(tx, OP, id)? else { return Ok(None) };
            check_owner(OP, actor, id, old.owner())?;
            let mut new = change(&old).map_err(|reason| refuse(OP, StoreErrorKind::Rejected(reason)))?;
            new.id = id.to_owned();
            put_trigger(tx, OP, &new)?;
            Ok(Some(new))
        })
    }

    fn trigger_delete(&self, id: &str, actor: Actor<'_>) -> Result<bool, StoreError> {
        const OP: &str = "trigger_delete";
        self.write(OP, |tx| {
            let existing: Option<Option<String>> = tx
                .prepare_cached("SELECT owner FROM triggers WHERE id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
                .map_err(fail(OP))?;
            let Some(owner) = existing else { return Ok(false) };
            check_owner(OP, actor, id, owner.as_deref())?;
            tx.prepare_cached("DELETE FROM triggers WHERE id = ?1")
                .and_then(|mut s| s.execute([id]))
                .map_err(fail(OP))?;
            Ok(true)
        })
    }

    fn triggers_take_due(
        &self,
        now: u64,
        step: &mut dyn FnMut(&TriggerRecord) -> DueStep,
    ) -> Result<Vec<(TriggerRecord, DueStep)>, StoreError> {
        const OP: &str = "triggers_take_due";
        // Most ticks find nothing: answered by a reader, the writer untouched.
        if !self.any_due(now)? {
            return Ok(Vec::new());
        }
        self.write(OP, |tx| {
            let due: Vec<TriggerRecord> = {
                let mut stmt = tx
                    .prepare_cached(&format!(
                        "SELECT {TRIGGER_COLS} FROM triggers WHERE wake IS NOT NULL AND wake <= ?1 ORDER BY id"
                    ))
                    .map_err(fail(OP))?;
                let mut rows = stmt.query([secs(now)]).map_err(fail(OP))?;
                let mut due = Vec::new();
                while let Some(row) = rows.next().map_err(fail(OP))? {
                    due.push(trigger_from_row(OP, row)?);
                }
                due
            };
            let mut out = Vec::with_capacity(due.len());
            for record in due {
                let s = step(&record);
                match s {
                    DueStep::Expire | DueStep::FireOnce => {
                        tx.prepare_cached("DELETE FROM triggers WHERE id = ?1")
                            .and_then(|mut st| st.execute([&record.id]))
                            .map_err(fail(OP))?;
                    }
                    DueStep::Fire { fired, wake } => {
                        tx.prepare_cached("UPDATE triggers SET fired = ?2, wake = ?3 WHERE id = ?1")
                            .and_then(|mut st| st.execute(params![record.id, secs(fired), wake.map(secs)]))
                            .map_err(fail(OP))?;
                    }
                    DueStep::Wait { wake } if wake != record.wake => {
                        tx.prepare_cached("UPDATE triggers SET wake = ?2 WHERE id = ?1")
                            .and_then(|mut st| st.execute(params![record.id, wake.map(secs)]))
                            .map_err(fail(OP))?;
                    }
                    DueStep::Wait { .. } => {}
                    DueStep::Claim { until } => {
                        tx.prepare_cached("UPDATE triggers SET wake = ?2 WHERE id = ?1")
                            .and_then(|mut st| st.execute(params![record.id, secs(until)]))
                            .map_err(fail(OP))?;
                    }
                }
                out.push((record, s));
            }
            Ok(out)
        })
    }

    fn trigger_settle(&self, id: &str, claimed: u64, step: DueStep) -> Result<bool, StoreError> {
        const OP: &str = "trigger_settle";
        let claimed = secs(claimed);
        self.write(OP, |tx| {
            let n = match step {
                DueStep::Expire | DueStep::FireOnce => tx
                    .prepare_cached("DELETE FROM triggers WHERE id = ?1 AND wake = ?2")
                    .and_then(|mut st| st.execute(params![id, claimed])),
                DueStep::Fire { fired, wake } => tx
                    .prepare_cached("UPDATE triggers SET fired = ?3, wake = ?4 WHERE id = ?1 AND wake = ?2")
                    .and_then(|mut st| st.execute(params![id, claimed, secs(fired), wake.map(secs)])),
                DueStep::Wait { wake } => tx
                    .prepare_cached("UPDATE triggers SET wake = ?3 WHERE id = ?1 AND wake = ?2")
                    .and_then(|mut st| st.execute(params![id, claimed, wake.map(secs)])),
                DueStep::Claim { until } => tx
                    .prepare_cached("UPDATE triggers SET wake = ?3 WHERE id = ?1 AND wake = ?2")
                    .and_then(|mut st| st.execute(params![id, claimed, secs(until)])),
            }
            .map_err(fail(OP))?;
            Ok(n == 1)
        })
    }

    fn lease_take(&self, name: &str, holder: &str, duration: Duration) -> Result<bool, StoreError> {
        const OP: &str = "lease_take";
        let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        self.write(OP, |tx| {
            let now = now_ms();
            let n = tx
                .prepare_cached(
                    "INSERT INTO leases (name, holder, until_ms) VALUES (?1, ?2, ?3 + ?4)
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms
                     WHERE leases.holder = excluded.holder OR leases.until_ms <= ?3",
                )
                .and_then(|mut st| st.execute(params![name, holder, now, ms]))
                .map_err(fail(OP))?;
            Ok(n == 1)
        })
    }

    fn lease_drop(&self, name: &str, holder: &str) -> Result<bool, StoreError> {
        const OP: &str = "lease_drop";
        self.write(OP, |tx| {
            let n = tx
                .prepare_cached("DELETE FROM leases WHERE name = ?1 AND holder = ?2")
                .and_then(|mut st| st.execute(params![name, holder]))
                .map_err(fail(OP))?;
            Ok(n == 1)
        })
    }

    fn storage_get(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<Option<Value>, StoreError> {
        const OP: &str = "storage_get";
        let (scope_col, agent) = scope_cols(scope);
        let text: Option<String> = self.read(OP, |c| {
            c.prepare_cached(
                "SELECT value FROM plugin_storage WHERE plugin = ?1 AND scope = ?2 AND agent = ?3 AND key = ?4",
            )
            .and_then(|mut s| s.query_row(params![plugin, scope_col, agent, key], |r| r.get(0)).optional())
            .map_err(fail(OP))
        })?;
        text.map(|t| parse_json(BACKEND, OP, format!("storage value `{key}` of plugin '{plugin}'"), &t)).transpose()
    }

    fn storage_put(
        &self,
        plugin: &str,
        scope: Scope<'_>,
        key: &str,
        value: &Value,
        limits: Option<&StorageLimits>,
    ) -> Result<(), StoreError> {
        const OP: &str = "storage_put";
        let text = json_text(BACKEND, OP, value)?;
        let (scope_col, agent) = scope_cols(scope);
        self.write(OP, |tx| {
            if let Some(limits) = limits {
                let replaced: Option<i64> = tx
                    .prepare_cached(
                        "SELECT bytes FROM plugin_storage \
                         WHERE plugin = ?1 AND scope = ?2 AND agent = ?3 AND key = ?4",
                    )
                    .and_then(|mut s| s.query_row(params![plugin, scope_col, agent, key], |r| r.get(0)).optional())
                    .map_err(fail(OP))?;
                let u = usage(
                    tx,
                    OP,
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM plugin_storage WHERE plugin = ?1",
                    [plugin],
                )?;
                limits
                    .check(plugin, key, text.len(), replaced.map(count), u.entries, u.bytes)
                    .map_err(|r| refuse(OP, StoreErrorKind::Quota(r)))?;
            }
            put_storage(tx, OP, plugin, scope, key, &text)
        })
    }

    fn storage_delete(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<bool, StoreError> {
        const OP: &str = "storage_delete";
        let (scope_col, agent) = scope_cols(scope);
        self.write(OP, |tx| {
            let n = tx
                .prepare_cached(
                    "DELETE FROM plugin_storage WHERE plugin = ?1 AND scope = ?2 AND agent = ?3 AND key = ?4",
                )
                .and_then(|mut s| s.execute(params![plugin, scope_col, agent, key]))
                .map_err(fail(OP))?;
            Ok(n > 0)
        })
    }

    fn storage_usage(&self, plugin: &str) -> Result<Usage, StoreError> {
        const OP: &str = "storage_usage";
        self.read(OP, |c| {
            usage(c, OP, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM plugin_storage WHERE plugin = ?1", [plugin])
        })
    }

    fn config_values(&self, plugin: &str) -> Result<BTreeMap<String, Value>, StoreError> {
        const OP: &str = "config_values";
        let rows: Vec<(String, String)> = self.read(OP, |c| {
            let mut stmt =
                c.prepare_cached("SELECT key, value FROM plugin_config WHERE plugin = ?1").map_err(fail(OP))?;
            let rows = stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?))).map_err(fail(OP))?;
            rows.collect::<Result<_, _>>().map_err(fail(OP))
        })?;
        rows.into_iter()
            .map(|(k, text)| {
                let value = parse_json(BACKEND, OP, format!("config value `{k}` of plugin '{plugin}'"), &text)?;
                Ok((k, value))
            })
            .collect()
    }

    fn config_put(&self, plugin: &str, values: &BTreeMap<String, Value>) -> Result<(), StoreError> {
        const OP: &str = "config_put";
        self.write(OP, |tx| values.iter().try_for_each(|(k, v)| put_config(tx, OP, plugin, k, v)))
    }

    fn plugin_choice(&self, plugin: &str) -> Result<Option<bool>, StoreError> {
        const OP: &str = "plugin_choice";
        self.read(OP, |c| {
            c.prepare_cached("SELECT enabled FROM plugin_state WHERE plugin = ?1")
                .and_then(|mut s| s.query_row([plugin], |r| r.get(0)).optional())
                .map_err(fail(OP))
        })
    }

    fn plugin_choices(&self) -> Result<BTreeMap<String, bool>, StoreError> {
        const OP: &str = "plugin_choices";
        self.read(OP, |c| {
            let mut stmt = c.prepare_cached("SELECT plugin, enabled FROM plugin_state").map_err(fail(OP))?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(fail(OP))?;
            rows.collect::<Result<_, _>>().map_err(fail(OP))
        })
    }

    fn set_plugin_choice(&self, plugin: &str, enabled: bool) -> Result<bool, StoreError> {
        const OP: &str = "set_plugin_choice";
        self.write(OP, |tx| {
            let old: Option<bool> = tx
                .prepare_cached("SELECT enabled FROM plugin_state WHERE plugin = ?1")
                .and_then(|mut s| s.query_row([plugin], |r| r.get(0)).optional())
                .map_err(fail(OP))?;
            if old == Some(enabled) {
                return Ok(false);
            }
            put_choice(tx, OP, plugin, enabled)?;
            Ok(true)
        })
    }

    fn grant_get(&self, plugin: &str) -> Result<Option<Value>, StoreError> {
        const OP: &str = "grant_get";
        let text: Option<String> = self.read(OP, |c| get_grant(c, OP, plugin))?;
        text.map(|t| parse_json(BACKEND, OP, format!("grant of plugin '{plugin}'"), &t)).transpose()
    }

    fn grant_set(&self, plugin: &str, grant: Option<&Value>) -> Result<Option<Value>, StoreError> {
        const OP: &str = "grant_set";
        self.write(OP, |tx| {
            let before = get_grant(tx, OP, plugin)?
                .map(|t| parse_json::<Value>(BACKEND, OP, format!("grant of plugin '{plugin}'"), &t))
                .transpose()?;
            match grant {
                Some(g) => put_grant(tx, OP, plugin, g)?,
                None => {
                    tx.prepare_cached("DELETE FROM plugin_grants WHERE plugin = ?1")
                        .and_then(|mut s| s.execute([plugin]))
                        .map_err(fail(OP))?;
                }
            }
            Ok(before)
        })
    }

    fn grant_first(&self, plugin: &str, grant: &Value) -> Result<Value, StoreError> {
        const OP: &str = "grant_first";
        self.write(OP, |tx| match get_grant(tx, OP, plugin)? {
            Some(t) => parse_json(BACKEND, OP, format!("grant of plugin '{plugin}'"), &t),
            None => {
                put_grant(tx, OP, plugin, grant)?;
                Ok(grant.clone())
            }
        })
    }

    fn shared(&self) -> bool {
        false
    }

    fn plugin_version(&self, plugin: &str) -> Result<Option<PluginVersion>, StoreError> {
        const OP: &str = "plugin_version";
        self.read(OP, |c| get_version(c, OP, plugin))
    }

    fn record_plugin_version(&self, record: &PluginVersion, replace: bool) -> Result<PluginVersion, StoreError> {
        const OP: &str = "record_plugin_version";
        let verb = if replace { "INSERT OR REPLACE" } else { "INSERT OR IGNORE" };
        self.write(OP, |tx| {
            tx.prepare_cached(&format!(
                "{verb} INTO plugin_versions (plugin, hash, version, recorded_by, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5)"
            ))
            .and_then(|mut s| {
                s.execute(params![
                    record.plugin,
                    record.hash,
                    record.version,
                    record.recorded_by,
                    secs(record.recorded_at)
                ])
            })
            .map_err(fail(OP))?;
            get_version(tx, OP, &record.plugin)?.ok_or_else(|| {
                refuse(OP, StoreErrorKind::Backend(format!("the version of plugin '{}' did not stay", record.plugin)))
            })
        })
    }

    fn import(&self, files: &[ImportFile]) -> Result<(), StoreError> {
        const OP: &str = "import";
        let now = secs(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        self.write(OP, |tx| {
            for file in files {
                let done: bool = tx
                    .prepare_cached("SELECT EXISTS (SELECT 1 FROM store_imports WHERE source = ?1)")
                    .and_then(|mut s| s.query_row([&file.source], |r| r.get(0)))
                    .map_err(fail(OP))?;
                if done {
                    continue;
                }
                for (path, node) in &file.vfs {
                    put_node(tx, OP, path, node)?;
                }
                for t in &file.triggers {
                    put_trigger(tx, OP, t)?;
                }
                for (plugin, agent, key, value) in &file.storage {
                    let scope = agent.as_deref().map_or(Scope::Global, Scope::Session);
                    put_storage(tx, OP, plugin, scope, key, &json_text(BACKEND, OP, value)?)?;
                }
                for (plugin, key, value) in &file.config {
                    put_config(tx, OP, plugin, key, value)?;
                }
                for (plugin, enabled) in &file.choices {
                    put_choice(tx, OP, plugin, *enabled)?;
                }
                for (plugin, grant) in &file.grants {
                    put_grant(tx, OP, plugin, grant)?;
                }
                tx.prepare_cached("INSERT INTO store_imports (source, imported_at) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![file.source, now]))
                    .map_err(fail(OP))?;
            }
            Ok(())
        })
    }

    fn imported(&self) -> Result<BTreeSet<String>, StoreError> {
        const OP: &str = "imported";
        self.read(OP, |c| {
            let mut stmt = c.prepare_cached("SELECT source FROM store_imports").map_err(fail(OP))?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(fail(OP))?;
            rows.collect::<Result<_, _>>().map_err(fail(OP))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract::{self, file, trigger};
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn open() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("state.db")).unwrap();
        (dir, store)
    }

    /// A SQL trigger that makes every write to `table` fail, as a full disk
    /// or a read-only file would: the backend refusing mid-transaction.
    fn break_writes(db: &Path, table: &str) {
        let c = Connection::open(db).unwrap();
        for op in ["INSERT", "UPDATE", "DELETE"] {
            c.execute_batch(&format!(
                "CREATE TRIGGER fail_{table}_{op} BEFORE {op} ON {table} BEGIN SELECT RAISE(ABORT, 'disk says no'); END;"
            ))
            .unwrap();
        }
    }

    #[test]
    fn opens_wal_with_a_schema_version_and_refuses_a_newer_schema() {
        let (dir, store) = open();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(store.backend(), "sqlite");
        let mode: String = store.writer().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = store.writer().query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 1, "NORMAL");
        drop(store);
        let db = dir.path().join("state.db");
        assert_eq!(SqliteStore::open(&db).unwrap().schema_version().unwrap(), SCHEMA_VERSION, "reopened as is");
        Connection::open(&db)
            .unwrap()
            .execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'", [])
            .unwrap();
        let err = SqliteStore::open(&db).err().unwrap().to_string();
        assert!(err.starts_with("sqlite store, open: ") && err.contains("schema version 99"), "{err}");
        std::fs::write(dir.path().join("junk.db"), "not a database at all, just text").unwrap();
        let err = SqliteStore::open(&dir.path().join("junk.db")).err().unwrap().to_string();
        assert!(err.contains("junk.db") && err.contains("not a database"), "{err}");
    }

    #[test]
    fn vfs_nodes_put_get_list_delete_and_usage() {
        let (_dir, s) = open();
        contract::vfs_nodes(&s);
    }

    #[test]
    fn vfs_quota_is_checked_in_the_write() {
        let (_dir, s) = open();
        contract::vfs_quota(&s);
    }

    #[test]
    fn triggers_owners_quota_update_and_due() {
        let (_dir, s) = open();
        contract::triggers(&s);
    }

    #[test]
    fn storage_scopes_quota_and_usage() {
        let (_dir, s) = open();
        contract::storage(&s);
    }

    #[test]
    fn plugin_versions_and_the_upgrade_from_the_version_before() {
        let (dir, s) = open();
        contract::plugin_versions(&s);
        assert!(!s.shared(), "one home's file");
        let on_file = || Arc::new(SqliteStore::open(&dir.path().join("state.db")).unwrap());
        contract::plugin_versions_race(on_file(), on_file());
        drop(s);
        // A file of the version before (an older ctxhost's) gains the table and keeps its rows.
        let db = dir.path().join("state.db");
        let c = Connection::open(&db).unwrap();
        c.execute_batch(&format!(
            "DROP TABLE plugin_versions; UPDATE store_meta SET value = '{}' WHERE key = 'schema_version';
             INSERT OR REPLACE INTO plugin_state (plugin, enabled) VALUES ('kept', 0);",
            SCHEMA_VERSION - 1
        ))
        .unwrap();
        drop(c);
        let s = SqliteStore::open(&db).unwrap();
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(s.plugin_choice("kept").unwrap(), Some(false));
        assert_eq!(s.plugin_version("p").unwrap(), None);
        contract::plugin_versions(&s);
    }

    #[test]
    fn config_values_and_plugin_choices() {
        let (_dir, s) = open();
        contract::config_and_choices(&s);
    }

    #[test]
    fn grants_first_set_and_forget() {
        let (_dir, s) = open();
        contract::grants(&s);
    }

    #[test]
    fn trigger_claims_and_leases() {
        let (_dir, s) = open();
        contract::claims_and_leases(&s);
    }

    /// A version-1 file (before `leases`) is upgraded in place, its rows kept.
    #[test]
    fn a_version_1_file_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        {
            let c = connect(&db).unwrap();
            c.execute_batch("CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);").unwrap();
            c.execute_batch(SCHEMA_V1).unwrap();
            c.execute_batch(
                "INSERT INTO store_meta VALUES ('schema_version', '1'); INSERT INTO plugin_state VALUES ('p', 0);",
            )
            .unwrap();
        }
        let s = SqliteStore::open(&db).unwrap();
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(s.plugin_choice("p").unwrap(), Some(false));
        assert!(s.lease_take("x", "me", Duration::from_secs(1)).unwrap());
        contract::grants(&s);
    }

    #[test]
    fn import_is_one_transaction_and_at_most_once_per_source() {
        let (dir, s) = open();
        let files = vec![
            ImportFile {
                source: "agent/vfs.json".into(),
                vfs: vec![("/plugins/a/x".into(), file("x", "a"))],
                ..Default::default()
            },
            ImportFile {
                source: "plugins-state.toml".into(),
                choices: vec![("a".into(), false)],
                storage: vec![("a".into(), Some("ag".into()), "k".into(), json!(1))],
                config: vec![("a".into(), "K".into(), json!("v"))],
                triggers: vec![trigger("t", Some("a"), Some(0))],
                ..Default::default()
            },
        ];
        break_writes(&dir.path().join("state.db"), "plugin_config");
        assert!(s.import(&files).is_err());
        assert!(s.imported().unwrap().is_empty(), "nothing recorded");
        assert_eq!(s.vfs_get("/plugins/a/x").unwrap(), None, "nothing imported: one transaction");
        Connection::open(dir.path().join("state.db"))
            .unwrap()
            .execute_batch(
                "DROP TRIGGER fail_plugin_config_INSERT; DROP TRIGGER fail_plugin_config_UPDATE; \
                 DROP TRIGGER fail_plugin_config_DELETE;",
            )
            .unwrap();
        s.import(&files).unwrap();
        assert_eq!(s.imported().unwrap(), BTreeSet::from(["agent/vfs.json".into(), "plugins-state.toml".into()]));
        assert_eq!(s.plugin_choice("a").unwrap(), Some(false));
        assert_eq!(s.storage_get("a", Scope::Session("ag"), "k").unwrap(), Some(json!(1)));
        assert_eq!(s.config_values("a").unwrap()["K"], "v");
        assert_eq!(s.trigger_get("t").unwrap().unwrap().wake, Some(0));
        s.vfs_put("/plugins/a/x", &file("newer", "a"), None).unwrap();
        s.import(&files).unwrap();
        assert_eq!(s.vfs_get("/plugins/a/x").unwrap(), Some(file("newer", "a")), "a source is imported once");
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let (dir, s) = open();
        let db = dir.path().join("state.db");
        s.vfs_put("/p/a/f", &file("old", "a"), None).unwrap();
        s.storage_put("a", Scope::Global, "k", &json!("old"), None).unwrap();
        s.config_put("a", &BTreeMap::from([("K".to_owned(), json!(1)), ("L".to_owned(), json!(1))])).unwrap();
        s.trigger_put(&trigger("t", Some("a"), Some(5)), Actor::Host).unwrap();
        // The writer made read-only: every change fails, as on a read-only file.
        s.writer().pragma_update(None, "query_only", true).unwrap();
        let err = s.vfs_put("/p/a/f", &file("new", "a"), None).unwrap_err();
        assert!(!err.is_refusal(), "a backend failure");
        assert!(err.to_string().starts_with("sqlite store, vfs_put: "), "{err}");
        assert!(err.to_string().contains("readonly"), "{err}");
        assert!(s.vfs_delete("/p/a").is_err());
        assert!(s.storage_put("a", Scope::Global, "k", &json!("new"), None).is_err());
        assert!(s.set_plugin_choice("a", false).is_err());
        assert!(s.trigger_delete("t", Actor::Host).is_err());
        assert!(s.triggers_take_due(10, &mut |_| DueStep::FireOnce).is_err());
        s.writer().pragma_update(None, "query_only", false).unwrap();
        // One value of two failing fails both.
        break_writes(&db, "plugin_config");
        let both = BTreeMap::from([("K".to_owned(), json!(2)), ("L".to_owned(), json!(2))]);
        let err = s.config_put("a", &both).unwrap_err();
        assert!(err.to_string().contains("disk says no"), "{err}");

        drop(s);
        let again = SqliteStore::open(&db).unwrap();
        assert_eq!(again.vfs_get("/p/a/f").unwrap(), Some(file("old", "a")));
        assert_eq!(again.storage_get("a", Scope::Global, "k").unwrap(), Some(json!("old")));
        assert_eq!(again.config_values("a").unwrap(), BTreeMap::from([("K".into(), json!(1)), ("L".into(), json!(1))]));
        assert_eq!(again.plugin_choice("a").unwrap(), None);
        let t = again.trigger_get("t").unwrap().unwrap();
        assert_eq!((t.fired, t.wake), (None, Some(5)), "the failed claim left it due");
    }

    #[test]
    fn concurrent_writers_keep_every_change_and_the_quota() {
        let (dir, s) = open();
        // A second store on the same file: another process's connection.
        let other = SqliteStore::open(&dir.path().join("state.db")).unwrap();
        contract::concurrent_writers(Arc::new(s), Arc::new(other));
    }
}
