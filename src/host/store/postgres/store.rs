//! [`Store`] on PostgreSQL: the same tables and semantics as the SQLite
//! store, for several instances on one database. Each change is one
//! transaction on a pooled connection (READ COMMITTED); what SQLite gets from
//! its single writer, this gets from locks taken inside the transaction:
//! - a quota check and its write hold a transaction-scoped advisory lock on
//!   the owner (`pg_advisory_xact_lock(kind, hashtext(owner))`), so two
//!   writers of one plugin, on any instances, cannot pass a quota together;
//! - a read-modify-write of one trigger locks its row (`FOR UPDATE`);
//! - [`Store::triggers_take_due`] claims the due rows with `FOR UPDATE SKIP
//!   LOCKED`: a row another instance is claiming is left to it, and one it
//!   already claimed is no longer due when the lock is released, so each
//!   firing is taken once across all instances.
//!
//! Upserts are `INSERT … ON CONFLICT DO UPDATE`. JSON is stored as text (the
//! plugin's key order kept). Never decides what a record means.
//!
//! The changes other instances must hear of — config values set, an enable
//! choice changed, a grant recorded or forgotten — append their entry to the
//! change feed (`changes`, `super::feed`) in their own transaction: under a
//! transaction-scoped advisory lock taken just before the id is drawn and
//! held to the commit, so ids are committed in order, and with a `NOTIFY`
//! that is sent at the commit. An import (old files at the first open) tells
//! nobody.

use crate::host::store::columns::{below_end, count, json_text, parse_json, scope_cols, secs, unsecs};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deadpool_postgres::Transaction;
use serde_json::{Map, Value};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::feed::{CHANNEL, LOCK_FEED};
use super::{BACKEND, Credentials, Pg};
use crate::host::store::feed::ChangeKind;
use crate::host::store::quota::{self, StorageLimits, VfsLimits};
use crate::host::store::{
    Actor, DueStep, ImportFile, Node, PluginVersion, Scope, Store, StoreError, StoreErrorKind, TriggerRecord, Usage,
};

/// Advisory lock classes (the first key of `pg_advisory_xact_lock(int, int)`).
const LOCK_VFS: i32 = 1;
const LOCK_STORAGE: i32 = 2;
const LOCK_TRIGGERS: i32 = 3;

/// Milliseconds since the epoch on the database's clock.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::BIGINT";

/// The PostgreSQL store.
pub struct PostgresStore {
    pg: Arc<Pg>,
}

fn refuse(op: &'static str, kind: StoreErrorKind) -> StoreError {
    StoreError::new(BACKEND, op, kind)
}

const TRIGGER_COLS: &str = "id, created, fired, wake, body";

fn trigger_from_row(op: &'static str, row: &Row) -> Result<TriggerRecord, StoreError> {
    let id: String = row.get(0);
    let body: String = row.get(4);
    let trigger: Map<String, Value> = parse_json(BACKEND, op, format!("trigger `{id}`"), &body)?;
    Ok(TriggerRecord {
        created: unsecs(row.get(1)),
        fired: row.get::<_, Option<i64>>(2).map(unsecs),
        wake: row.get::<_, Option<i64>>(3).map(unsecs),
        id,
        trigger,
    })
}

fn version_from_row(row: &Row) -> PluginVersion {
    PluginVersion {
        plugin: row.get(0),
        hash: row.get(1),
        version: row.get(2),
        recorded_by: row.get(3),
        recorded_at: unsecs(row.get(4)),
    }
}

fn check_owner(op: &'static str, actor: Actor<'_>, id: &str, owner: Option<&str>) -> Result<(), StoreError> {
    match actor {
        Actor::Plugin { name, .. } if owner != Some(name) => {
            Err(refuse(op, StoreErrorKind::NotYours { id: id.to_owned(), owner: owner.map(str::to_owned) }))
        }
        _ => Ok(()),
    }
}

impl PostgresStore {
    /// Connects to `url` and brings its schema up to date ([`Pg::open`]).
    ///
    /// # Errors
    /// See [`Pg::open`].
    pub fn open(url: &str, credentials: &Credentials) -> Result<PostgresStore, StoreError> {
        Ok(PostgresStore { pg: Arc::new(Pg::open(url, credentials)?) })
    }

    /// The store on an open database (shared with the journal).
    pub fn on(pg: Arc<Pg>) -> PostgresStore {
        PostgresStore { pg }
    }

    /// The database, for the journal.
    pub fn pg(&self) -> &Arc<Pg> {
        &self.pg
    }

    /// The URL, redacted.
    pub fn location(&self) -> &str {
        self.pg.location()
    }

    fn err(&self, op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        move |e| (self.pg.fail(op))(&e)
    }

    /// Runs `f` on a pooled connection, outside a transaction (one statement).
    fn read<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&deadpool_postgres::Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.pg.run(async {
            let client = self.pg.pool().get().await.map_err(|e| (self.pg.fail(op))(&e))?;
            f(&client).await
        })
    }

    /// Runs `f` in one transaction: committed when it returns `Ok`, rolled
    /// back otherwise (also when the connection fails half-way).
    fn write<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.pg.run(async {
            let mut client = self.pg.pool().get().await.map_err(|e| (self.pg.fail(op))(&e))?;
            let tx = client.transaction().await.map_err(self.err(op))?;
            let out = f(&tx).await?;
            tx.commit().await.map_err(self.err(op))?;
            Ok(out)
        })
    }

    async fn one_opt(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let stmt = c.prepare_cached(sql).await.map_err(self.err(op))?;
        c.query_opt(&stmt, params).await.map_err(self.err(op))
    }

    async fn all(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = c.prepare_cached(sql).await.map_err(self.err(op))?;
        c.query(&stmt, params).await.map_err(self.err(op))
    }

    async fn exec(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let stmt = c.prepare_cached(sql).await.map_err(self.err(op))?;
        c.execute(&stmt, params).await.map_err(self.err(op))
    }

    /// Holds the transaction-scoped advisory lock of `name` in `class`.
    async fn lock(&self, tx: &Transaction<'_>, op: &'static str, class: i32, name: &str) -> Result<(), StoreError> {
        self.exec(tx, op, "SELECT pg_advisory_xact_lock($1, hashtext($2))", &[&class, &name]).await.map(drop)
    }

    async fn usage(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        sql: &str,
        key: &str,
    ) -> Result<Usage, StoreError> {
        let row = self.one_opt(c, op, sql, &[&key]).await?;
        let (n, b): (i64, i64) = row.map_or((0, 0), |r| (r.get(0), r.get(1)));
        Ok(Usage { entries: count(n), bytes: count(b) })
    }

    async fn get_trigger(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        id: &str,
        for_update: bool,
    ) -> Result<Option<TriggerRecord>, StoreError> {
        let sql =
            format!("SELECT {TRIGGER_COLS} FROM triggers WHERE id = $1{}", if for_update { " FOR UPDATE" } else { "" });
        self.one_opt(c, op, &sql, &[&id]).await?.map(|r| trigger_from_row(op, &r)).transpose()
    }

    async fn put_trigger(&self, tx: &Transaction<'_>, op: &'static str, r: &TriggerRecord) -> Result<(), StoreError> {
        let body = json_text(BACKEND, op, &Value::Object(r.trigger.clone()))?;
        self.exec(
            tx,
            op,
            "INSERT INTO triggers (id, owner, created, fired, wake, body) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, created = EXCLUDED.created, \
             fired = EXCLUDED.fired, wake = EXCLUDED.wake, body = EXCLUDED.body",
            &[&r.id, &r.owner(), &secs(r.created), &r.fired.map(secs), &r.wake.map(secs), &body],
        )
        .await
        .map(drop)
    }

    async fn put_node(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        path: &str,
        node: &Node,
    ) -> Result<(), StoreError> {
        let (kind, searchable, content) = match node {
            Node::File { content, .. } => ("file", false, Some(content.as_str())),
            Node::Symbolic { searchable, .. } => ("symbolic", *searchable, None),
        };
        self.exec(
            tx,
            op,
            "INSERT INTO vfs_nodes (path, owner, bytes, kind, searchable, content) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (path) DO UPDATE SET owner = EXCLUDED.owner, bytes = EXCLUDED.bytes, kind = EXCLUDED.kind, \
             searchable = EXCLUDED.searchable, content = EXCLUDED.content",
            &[&path, &node.owner(), &secs(node.bytes() as u64), &kind, &searchable, &content],
        )
        .await
        .map(drop)
    }

    async fn put_storage(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        plugin: &str,
        scope: Scope<'_>,
        key: &str,
        text: &str,
    ) -> Result<(), StoreError> {
        let (scope, agent) = scope_cols(scope);
        self.exec(
            tx,
            op,
            "INSERT INTO plugin_storage (plugin, scope, agent, key, bytes, value) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (plugin, scope, agent, key) DO UPDATE SET bytes = EXCLUDED.bytes, value = EXCLUDED.value",
            &[&plugin, &scope, &agent, &key, &secs(text.len() as u64), &text],
        )
        .await
        .map(drop)
    }

    async fn put_config(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        plugin: &str,
        key: &str,
        value: &Value,
    ) -> Result<(), StoreError> {
        let text = json_text(BACKEND, op, value)?;
        self.exec(
            tx,
            op,
            "INSERT INTO plugin_config (plugin, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (plugin, key) DO UPDATE SET value = EXCLUDED.value",
            &[&plugin, &key, &text],
        )
        .await
        .map(drop)
    }

    async fn put_choice(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        plugin: &str,
        enabled: bool,
    ) -> Result<(), StoreError> {
        self.exec(
            tx,
            op,
            "INSERT INTO plugin_state (plugin, enabled) VALUES ($1, $2) \
             ON CONFLICT (plugin) DO UPDATE SET enabled = EXCLUDED.enabled",
            &[&plugin, &enabled],
        )
        .await
        .map(drop)
    }
}

impl PostgresStore {
    /// Appends a change-feed entry made by this process, in `tx` (see the
    /// module doc); its id.
    pub(super) async fn append_change(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        kind: ChangeKind,
        plugin: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        let text = json_text(BACKEND, op, payload)?;
        self.exec(tx, op, "SELECT pg_advisory_xact_lock($1)", &[&LOCK_FEED]).await?;
        let row = self
            .one_opt(
                tx,
                op,
                "INSERT INTO changes (kind, plugin, payload, origin) VALUES ($1, $2, $3, $4) RETURNING id",
                &[&kind.as_str(), &plugin, &text, &self.pg.origin()],
            )
            .await?;
        let id: i64 = row.map_or(0, |r| r.get(0));
        self.exec(tx, op, "SELECT pg_notify($1, $2)", &[&CHANNEL, &id.to_string()]).await?;
        Ok(id)
    }

    /// Appends a change-feed entry that goes with no stored change, in a
    /// transaction of its own; its id.
    pub(super) fn note_change(&self, kind: ChangeKind, plugin: &str, payload: &Value) -> Result<i64, StoreError> {
        const OP: &str = "feed_note";
        self.write(OP, async |tx| self.append_change(tx, OP, kind, plugin, payload).await)
    }

    async fn get_grant(
        &self,
        c: &impl deadpool_postgres::GenericClient,
        op: &'static str,
        plugin: &str,
        for_update: bool,
    ) -> Result<Option<Value>, StoreError> {
        let sql = format!(
            "SELECT grant_json FROM plugin_grants WHERE plugin = $1{}",
            if for_update { " FOR UPDATE" } else { "" }
        );
        let text: Option<String> = self.one_opt(c, op, &sql, &[&plugin]).await?.map(|r| r.get(0));
        text.map(|t| parse_json(BACKEND, op, format!("grant of plugin '{plugin}'"), &t)).transpose()
    }

    async fn put_grant(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        plugin: &str,
        grant: &Value,
    ) -> Result<(), StoreError> {
        let text = json_text(BACKEND, op, grant)?;
        self.exec(
            tx,
            op,
            "INSERT INTO plugin_grants (plugin, grant_json) VALUES ($1, $2) \
             ON CONFLICT (plugin) DO UPDATE SET grant_json = EXCLUDED.grant_json",
            &[&plugin, &text],
        )
        .await
        .map(drop)
    }
}

impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn schema_version(&self) -> Result<u32, StoreError> {
        const OP: &str = "schema_version";
        let text: String = self.read(OP, async |c| {
            let row = self.one_opt(c, OP, "SELECT value FROM store_meta WHERE key = 'schema_version'", &[]).await?;
            row.map(|r| r.get(0)).ok_or_else(|| {
                refuse(OP, StoreErrorKind::Corrupt { what: "schema_version".into(), reason: "missing".into() })
            })
        })?;
        text.parse().map_err(|e: std::num::ParseIntError| {
            refuse(OP, StoreErrorKind::Corrupt { what: "schema_version".into(), reason: e.to_string() })
        })
    }

    fn vfs_get(&self, path: &str) -> Result<Option<Node>, StoreError> {
        const OP: &str = "vfs_get";
        self.read(OP, async |c| {
            let Some(row) = self
                .one_opt(c, OP, "SELECT owner, kind, searchable, content FROM vfs_nodes WHERE path = $1", &[&path])
                .await?
            else {
                return Ok(None);
            };
            let owner: String = row.get(0);
            let kind: String = row.get(1);
            match kind.as_str() {
                "file" => Ok(Some(Node::File { content: row.get::<_, Option<String>>(3).unwrap_or_default(), owner })),
                "symbolic" => Ok(Some(Node::Symbolic { owner, searchable: row.get(2) })),
                other => Err(refuse(
                    OP,
                    StoreErrorKind::Corrupt {
                        what: format!("vfs node {path}"),
                        reason: format!("unknown kind {other:?}"),
                    },
                )),
            }
        })
    }

    fn vfs_list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        const OP: &str = "vfs_list";
        let prefix = if dir == "/" { "/".to_owned() } else { format!("{dir}/") };
        let end = below_end(&prefix);
        let rows = self.read(OP, async |c| {
            self.all(c, OP, "SELECT path FROM vfs_nodes WHERE path >= $1 AND path < $2 ORDER BY path", &[&prefix, &end])
                .await
        })?;
        let names: BTreeSet<String> = rows
            .iter()
            .map(|r| r.get::<_, String>(0))
            .filter_map(|p| p.get(prefix.len()..).and_then(|rest| rest.split('/').next()).map(str::to_owned))
            .filter(|n| !n.is_empty())
            .collect();
        Ok(names.into_iter().collect())
    }

    fn vfs_put(&self, path: &str, node: &Node, limits: Option<&VfsLimits>) -> Result<(), StoreError> {
        const OP: &str = "vfs_put";
        self.write(OP, async |tx| {
            if let Some(limits) = limits {
                self.lock(tx, OP, LOCK_VFS, node.owner()).await?;
                let mut u = self
                    .usage(
                        tx,
                        OP,
                        "SELECT COUNT(*), COALESCE(SUM(bytes), 0)::BIGINT FROM vfs_nodes WHERE owner = $1",
                        node.owner(),
                    )
                    .await?;
                let replaced =
                    self.one_opt(tx, OP, "SELECT owner, bytes FROM vfs_nodes WHERE path = $1", &[&path]).await?;
                if let Some(row) = replaced
                    && row.get::<_, String>(0) == node.owner()
                {
                    u.entries = u.entries.saturating_sub(1);
                    u.bytes = u.bytes.saturating_sub(count(row.get(1)));
                }
                limits
                    .check(node.owner(), path, node.bytes(), u.entries, u.bytes)
                    .map_err(|r| refuse(OP, StoreErrorKind::Quota(r)))?;
            }
            self.put_node(tx, OP, path, node).await
        })
    }

    fn vfs_delete(&self, path: &str) -> Result<bool, StoreError> {
        const OP: &str = "vfs_delete";
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let end = below_end(&prefix);
        self.write(OP, async |tx| {
            let n = self
                .exec(
                    tx,
                    OP,
                    "DELETE FROM vfs_nodes WHERE path = $1 OR (path >= $2 AND path < $3)",
                    &[&path, &prefix, &end],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn vfs_usage(&self, owner: &str) -> Result<Usage, StoreError> {
        const OP: &str = "vfs_usage";
        self.read(OP, async |c| {
            self.usage(c, OP, "SELECT COUNT(*), COALESCE(SUM(bytes), 0)::BIGINT FROM vfs_nodes WHERE owner = $1", owner)
                .await
        })
    }

    fn trigger_get(&self, id: &str) -> Result<Option<TriggerRecord>, StoreError> {
        const OP: &str = "trigger_get";
        self.read(OP, async |c| self.get_trigger(c, OP, id, false).await)
    }

    fn trigger_list(&self) -> Result<Vec<TriggerRecord>, StoreError> {
        const OP: &str = "trigger_list";
        let rows = self.read(OP, async |c| {
            self.all(c, OP, &format!("SELECT {TRIGGER_COLS} FROM triggers ORDER BY id"), &[]).await
        })?;
        rows.iter().map(|r| trigger_from_row(OP, r)).collect()
    }

    fn trigger_put(&self, record: &TriggerRecord, actor: Actor<'_>) -> Result<(), StoreError> {
        const OP: &str = "trigger_put";
        self.write(OP, async |tx| {
            if let Actor::Plugin { name, .. } = actor {
                self.lock(tx, OP, LOCK_TRIGGERS, name).await?;
            }
            let existing =
                self.one_opt(tx, OP, "SELECT owner FROM triggers WHERE id = $1 FOR UPDATE", &[&record.id]).await?;
            match (existing, actor) {
                (Some(row), _) => check_owner(OP, actor, &record.id, row.get::<_, Option<&str>>(0))?,
                (None, Actor::Plugin { name, max_triggers }) => {
                    let row = self.one_opt(tx, OP, "SELECT COUNT(*) FROM triggers WHERE owner = $1", &[&name]).await?;
                    let owned = count(row.map_or(0, |r| r.get(0)));
                    if owned >= max_triggers {
                        return Err(refuse(OP, StoreErrorKind::Quota(quota::triggers_refusal(name, owned))));
                    }
                }
                (None, Actor::Host) => {}
            }
            self.put_trigger(tx, OP, record).await
        })
    }

    fn trigger_update(
        &self,
        id: &str,
        actor: Actor<'_>,
        change: &mut dyn FnMut(&TriggerRecord) -> Result<TriggerRecord, String>,
    ) -> Result<Option<TriggerRecord>, StoreError> {
        const OP: &str = "trigger_update";
        self.write(OP, async |tx| {
            let Some(old) = self.get_trigger(tx, OP, id, true).await? else { return Ok(None) };
            check_owner(OP, actor, id, old.owner())?;
            let mut new = change(&old).map_err(|reason| refuse(OP, StoreErrorKind::Rejected(reason)))?;
            new.id = id.to_owned();
            self.put_trigger(tx, OP, &new).await?;
            Ok(Some(new))
        })
    }

    fn trigger_delete(&self, id: &str, actor: Actor<'_>) -> Result<bool, StoreError> {
        const OP: &str = "trigger_delete";
        self.write(OP, async |tx| {
            let Some(row) = self.one_opt(tx, OP, "SELECT owner FROM triggers WHERE id = $1 FOR UPDATE", &[&id]).await?
            else {
                return Ok(false);
            };
            check_owner(OP, actor, id, row.get::<_, Option<&str>>(0))?;
            self.exec(tx, OP, "DELETE FROM triggers WHERE id = $1", &[&id]).await?;
            Ok(true)
        })
    }

    fn triggers_take_due(
        &self,
        now: u64,
        step: &mut dyn FnMut(&TriggerRecord) -> DueStep,
    ) -> Result<Vec<(TriggerRecord, DueStep)>, StoreError> {
        const OP: &str = "triggers_take_due";
        let now = secs(now);
        // Most ticks find nothing: one read, no transaction.
        let any = self.read(OP, async |c| {
            let row = self
                .one_opt(c, OP, "SELECT EXISTS (SELECT 1 FROM triggers WHERE wake IS NOT NULL AND wake <= $1)", &[&now])
                .await?;
            Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
        })?;
        if !any {
            return Ok(Vec::new());
        }
        self.write(OP, async |tx| {
            // Rows another instance is claiming right now are its own.
            let rows = self
                .all(
                    tx,
                    OP,
                    &format!(
                        "SELECT {TRIGGER_COLS} FROM triggers WHERE wake IS NOT NULL AND wake <= $1 ORDER BY id \
                         FOR UPDATE SKIP LOCKED"
                    ),
                    &[&now],
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let record = trigger_from_row(OP, &row)?;
                let s = step(&record);
                match s {
                    DueStep::Expire | DueStep::FireOnce => {
                        self.exec(tx, OP, "DELETE FROM triggers WHERE id = $1", &[&record.id]).await?;
                    }
                    DueStep::Fire { fired, wake } => {
                        self.exec(
                            tx,
                            OP,
                            "UPDATE triggers SET fired = $2, wake = $3 WHERE id = $1",
                            &[&record.id, &secs(fired), &wake.map(secs)],
                        )
                        .await?;
                    }
                    DueStep::Wait { wake } if wake != record.wake => {
                        self.exec(
                            tx,
                            OP,
                            "UPDATE triggers SET wake = $2 WHERE id = $1",
                            &[&record.id, &wake.map(secs)],
                        )
                        .await?;
                    }
                    DueStep::Wait { .. } => {}
                    DueStep::Claim { until } => {
                        self.exec(tx, OP, "UPDATE triggers SET wake = $2 WHERE id = $1", &[&record.id, &secs(until)])
                            .await?;
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
        // One statement: the `wake = claimed` test and the change happen
        // under the row's lock, so a claim lost meanwhile changes nothing.
        let n = self.read(OP, async |c| match step {
            DueStep::Expire | DueStep::FireOnce => {
                self.exec(c, OP, "DELETE FROM triggers WHERE id = $1 AND wake = $2", &[&id, &claimed]).await
            }
            DueStep::Fire { fired, wake } => {
                self.exec(
                    c,
                    OP,
                    "UPDATE triggers SET fired = $3, wake = $4 WHERE id = $1 AND wake = $2",
                    &[&id, &claimed, &secs(fired), &wake.map(secs)],
                )
                .await
            }
            DueStep::Wait { wake } => {
                self.exec(
                    c,
                    OP,
                    "UPDATE triggers SET wake = $3 WHERE id = $1 AND wake = $2",
                    &[&id, &claimed, &wake.map(secs)],
                )
                .await
            }
            DueStep::Claim { until } => {
                self.exec(
                    c,
                    OP,
                    "UPDATE triggers SET wake = $3 WHERE id = $1 AND wake = $2",
                    &[&id, &claimed, &secs(until)],
                )
                .await
            }
        })?;
        Ok(n == 1)
    }

    fn lease_take(&self, name: &str, holder: &str, duration: std::time::Duration) -> Result<bool, StoreError> {
        const OP: &str = "lease_take";
        let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        // The database's clock decides, so instances' clocks may differ.
        let n = self.read(OP, async |c| {
            self.exec(
                c,
                OP,
                &format!(
                    "INSERT INTO leases (name, holder, until_ms) VALUES ($1, $2, {NOW_MS} + $3)
                     ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until_ms = EXCLUDED.until_ms
                     WHERE leases.holder = EXCLUDED.holder OR leases.until_ms <= {NOW_MS}"
                ),
                &[&name, &holder, &ms],
            )
            .await
        })?;
        Ok(n == 1)
    }

    fn lease_drop(&self, name: &str, holder: &str) -> Result<bool, StoreError> {
        const OP: &str = "lease_drop";
        let n = self.read(OP, async |c| {
            self.exec(c, OP, "DELETE FROM leases WHERE name = $1 AND holder = $2", &[&name, &holder]).await
        })?;
        Ok(n == 1)
    }

    fn storage_get(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<Option<Value>, StoreError> {
        const OP: &str = "storage_get";
        let (scope_col, agent) = scope_cols(scope);
        let text: Option<String> = self.read(OP, async |c| {
            let row = self
                .one_opt(
                    c,
                    OP,
                    "SELECT value FROM plugin_storage WHERE plugin = $1 AND scope = $2 AND agent = $3 AND key = $4",
                    &[&plugin, &scope_col, &agent, &key],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
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
        self.write(OP, async |tx| {
            if let Some(limits) = limits {
                self.lock(tx, OP, LOCK_STORAGE, plugin).await?;
                let replaced = self
                    .one_opt(
                        tx,
                        OP,
                        "SELECT bytes FROM plugin_storage WHERE plugin = $1 AND scope = $2 AND agent = $3 AND key = $4",
                        &[&plugin, &scope_col, &agent, &key],
                    )
                    .await?
                    .map(|r| count(r.get(0)));
                let u = self
                    .usage(
                        tx,
                        OP,
                        "SELECT COUNT(*), COALESCE(SUM(bytes), 0)::BIGINT FROM plugin_storage WHERE plugin = $1",
                        plugin,
                    )
                    .await?;
                limits
                    .check(plugin, key, text.len(), replaced, u.entries, u.bytes)
                    .map_err(|r| refuse(OP, StoreErrorKind::Quota(r)))?;
            }
            self.put_storage(tx, OP, plugin, scope, key, &text).await
        })
    }

    fn storage_delete(&self, plugin: &str, scope: Scope<'_>, key: &str) -> Result<bool, StoreError> {
        const OP: &str = "storage_delete";
        let (scope_col, agent) = scope_cols(scope);
        self.write(OP, async |tx| {
            let n = self
                .exec(
                    tx,
                    OP,
                    "DELETE FROM plugin_storage WHERE plugin = $1 AND scope = $2 AND agent = $3 AND key = $4",
                    &[&plugin, &scope_col, &agent, &key],
                )
                .await?;
            Ok(n > 0)
        })
    }

    fn storage_usage(&self, plugin: &str) -> Result<Usage, StoreError> {
        const OP: &str = "storage_usage";
        self.read(OP, async |c| {
            self.usage(
                c,
                OP,
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0)::BIGINT FROM plugin_storage WHERE plugin = $1",
                plugin,
            )
            .await
        })
    }

    fn config_values(&self, plugin: &str) -> Result<BTreeMap<String, Value>, StoreError> {
        const OP: &str = "config_values";
        let rows = self.read(OP, async |c| {
            self.all(c, OP, "SELECT key, value FROM plugin_config WHERE plugin = $1", &[&plugin]).await
        })?;
        rows.iter()
            .map(|r| {
                let (k, text): (String, String) = (r.get(0), r.get(1));
                let value = parse_json(BACKEND, OP, format!("config value `{k}` of plugin '{plugin}'"), &text)?;
                Ok((k, value))
            })
            .collect()
    }

    fn config_put(&self, plugin: &str, values: &BTreeMap<String, Value>) -> Result<(), StoreError> {
        const OP: &str = "config_put";
        let announced = Value::Object(values.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        self.write(OP, async |tx| {
            for (k, v) in values {
                self.put_config(tx, OP, plugin, k, v).await?;
            }
            self.append_change(tx, OP, ChangeKind::Config, plugin, &serde_json::json!({"values": announced})).await?;
            Ok(())
        })
    }

    fn plugin_choice(&self, plugin: &str) -> Result<Option<bool>, StoreError> {
        const OP: &str = "plugin_choice";
        self.read(OP, async |c| {
            Ok(self
                .one_opt(c, OP, "SELECT enabled FROM plugin_state WHERE plugin = $1", &[&plugin])
                .await?
                .map(|r| r.get(0)))
        })
    }

    fn plugin_choices(&self) -> Result<BTreeMap<String, bool>, StoreError> {
        const OP: &str = "plugin_choices";
        let rows = self.read(OP, async |c| self.all(c, OP, "SELECT plugin, enabled FROM plugin_state", &[]).await)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn set_plugin_choice(&self, plugin: &str, enabled: bool) -> Result<bool, StoreError> {
        const OP: &str = "set_plugin_choice";
        self.write(OP, async |tx| {
            let old = self
                .one_opt(tx, OP, "SELECT enabled FROM plugin_state WHERE plugin = $1 FOR UPDATE", &[&plugin])
                .await?
                .map(|r| r.get::<_, bool>(0));
            if old == Some(enabled) {
                return Ok(false);
            }
            self.put_choice(tx, OP, plugin, enabled).await?;
            self.append_change(tx, OP, ChangeKind::Enable, plugin, &serde_json::json!({"enabled": enabled})).await?;
            Ok(true)
        })
    }

    fn grant_get(&self, plugin: &str) -> Result<Option<Value>, StoreError> {
        const OP: &str = "grant_get";
        self.read(OP, async |c| self.get_grant(c, OP, plugin, false).await)
    }

    fn grant_set(&self, plugin: &str, grant: Option<&Value>) -> Result<Option<Value>, StoreError> {
        const OP: &str = "grant_set";
        self.write(OP, async |tx| {
            let before = self.get_grant(tx, OP, plugin, true).await?;
            if before.as_ref() == grant {
                return Ok(before);
            }
            match grant {
                Some(g) => self.put_grant(tx, OP, plugin, g).await?,
                None => {
                    self.exec(tx, OP, "DELETE FROM plugin_grants WHERE plugin = $1", &[&plugin]).await?;
                }
            }
            self.append_change(tx, OP, ChangeKind::Grant, plugin, &serde_json::json!({"grant": grant})).await?;
            Ok(before)
        })
    }

    fn grant_first(&self, plugin: &str, grant: &Value) -> Result<Value, StoreError> {
        const OP: &str = "grant_first";
        let text = json_text(BACKEND, OP, grant)?;
        self.write(OP, async |tx| {
            // Another instance recording the first grant at once waits here,
            // then finds its record.
            self.exec(
                tx,
                OP,
                "INSERT INTO plugin_grants (plugin, grant_json) VALUES ($1, $2) ON CONFLICT (plugin) DO NOTHING",
                &[&plugin, &text],
            )
            .await?;
            let found = self.get_grant(tx, OP, plugin, false).await?;
            found.ok_or_else(|| {
                refuse(OP, StoreErrorKind::Backend(format!("the grant of plugin '{plugin}' went while recording it")))
            })
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn plugin_version(&self, plugin: &str) -> Result<Option<PluginVersion>, StoreError> {
        const OP: &str = "plugin_version";
        let row = self.read(OP, async |c| {
            self.one_opt(
                c,
                OP,
                "SELECT plugin, hash, version, recorded_by, recorded_at FROM plugin_versions WHERE plugin = $1",
                &[&plugin],
            )
            .await
        })?;
        Ok(row.as_ref().map(version_from_row))
    }

    fn record_plugin_version(&self, record: &PluginVersion, replace: bool) -> Result<PluginVersion, StoreError> {
        const OP: &str = "record_plugin_version";
        let sql = if replace {
            "INSERT INTO plugin_versions (plugin, hash, version, recorded_by, recorded_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (plugin) DO UPDATE SET hash = excluded.hash, version = excluded.version, \
             recorded_by = excluded.recorded_by, recorded_at = excluded.recorded_at"
        } else {
            "INSERT INTO plugin_versions (plugin, hash, version, recorded_by, recorded_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (plugin) DO NOTHING"
        };
        let at = secs(record.recorded_at);
        let row = self.write(OP, async |tx| {
            // Two instances recording at once: the second waits on the
            // first's row and then reads it.
            self.exec(tx, OP, sql, &[&record.plugin, &record.hash, &record.version, &record.recorded_by, &at]).await?;
            self.one_opt(
                tx,
                OP,
                "SELECT plugin, hash, version, recorded_by, recorded_at FROM plugin_versions WHERE plugin = $1",
                &[&record.plugin],
            )
            .await
        })?;
        row.as_ref().map(version_from_row).ok_or_else(|| {
            refuse(OP, StoreErrorKind::Backend(format!("the version of plugin '{}' did not stay", record.plugin)))
        })
    }

    fn import(&self, files: &[ImportFile]) -> Result<(), StoreError> {
        const OP: &str = "import";
        let now = secs(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        self.write(OP, async |tx| {
            for file in files {
                // Another instance importing the same source waits here, then skips it.
                let inserted = self
                    .exec(
                        tx,
                        OP,
                        "INSERT INTO store_imports (source, imported_at) VALUES ($1, $2) ON CONFLICT (source) DO NOTHING",
                        &[&file.source, &now],
                    )
                    .await?;
                if inserted == 0 {
                    continue;
                }
                for (path, node) in &file.vfs {
                    self.put_node(tx, OP, path, node).await?;
                }
                for t in &file.triggers {
                    self.put_trigger(tx, OP, t).await?;
                }
                for (plugin, agent, key, value) in &file.storage {
                    let scope = agent.as_deref().map_or(Scope::Global, Scope::Session);
                    self.put_storage(tx, OP, plugin, scope, key, &json_text(BACKEND, OP, value)?).await?;
                }
                for (plugin, key, value) in &file.config {
                    self.put_config(tx, OP, plugin, key, value).await?;
                }
                for (plugin, enabled) in &file.choices {
                    self.put_choice(tx, OP, plugin, *enabled).await?;
                }
                for (plugin, grant) in &file.grants {
                    self.put_grant(tx, OP, plugin, grant).await?;
                }
            }
            Ok(())
        })
    }

    fn imported(&self) -> Result<BTreeSet<String>, StoreError> {
        const OP: &str = "imported";
        let rows = self.read(OP, async |c| self.all(c, OP, "SELECT source FROM store_imports", &[]).await)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
