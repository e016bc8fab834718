//! The PostgreSQL backend of the state store, for several ctxhost instances
//! on one state: the connection ([`Pg`]: URL and password, pool, runtime),
//! the versioned migrations applied at open, and the error texts. The
//! [`super::Store`] implementation is [`store::PostgresStore`], the journal's
//! [`journal::PostgresJournal`]; both share one [`Pg`].
//!
//! The store's traits block, and their callers run them on the blocking
//! pool ([`super::off_runtime`]). The client is async (tokio-postgres, pooled
//! by deadpool-postgres): its connections are driven by a private runtime of
//! one worker thread owned by [`Pg`], so they keep running whatever runtime
//! the caller has (or none, as in `ctxhost hook`), and a call blocks its
//! thread on the query's future with that runtime's context entered.
//!
//! The password (from the URL, or from `PGPASSFILE` / `~/.pgpass` when the
//! URL has none) never reaches a message or a log: every text shows the URL
//! redacted ([`crate::config::redact_url`]) and has the password scrubbed.
//!
//! Migrations: [`MIGRATIONS`], version `n` is `MIGRATIONS[n - 1]`, each
//! applied in its own transaction, the version kept in `store_meta` as in
//! SQLite. The instance that opens first applies them holding a session
//! advisory lock ([`MIGRATION_LOCK`]) on a connection of its own, so two
//! instances starting together never race; one that finds a version newer
//! than it knows refuses to open. Must never: hold a pooled connection
//! between two trait calls, or decide what a record means.

pub mod feed;
pub mod journal;
pub mod store;
pub mod tls;

use std::error::Error as StdError;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::{StoreError, StoreErrorKind};
use crate::config::redact_url;

pub(crate) const BACKEND: &str = "postgres";

/// The key of the session advisory lock held while migrating.
pub const MIGRATION_LOCK: i64 = 0x6374_7868_6f73_7401; // "ctxhost" 01

/// Connections kept per instance at most.
const POOL_SIZE: usize = 16;

/// How long a call waits for a pooled connection, and a new connection for the server.
const WAIT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema, one entry per version (`MIGRATIONS[0]` makes version 1).
/// The tables of the SQLite store, in PostgreSQL's types, and the journal's.
pub const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE vfs_nodes (
    path TEXT COLLATE \"C\" PRIMARY KEY,
    owner TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    kind TEXT NOT NULL,
    searchable BOOLEAN NOT NULL DEFAULT FALSE,
    content TEXT
);
CREATE INDEX vfs_nodes_owner ON vfs_nodes (owner, bytes);
CREATE TABLE triggers (
    id TEXT COLLATE \"C\" PRIMARY KEY,
    owner TEXT,
    created BIGINT NOT NULL,
    fired BIGINT,
    wake BIGINT,
    body TEXT NOT NULL
);
CREATE INDEX triggers_wake ON triggers (wake) WHERE wake IS NOT NULL;
CREATE INDEX triggers_owner ON triggers (owner);
CREATE TABLE plugin_storage (
    plugin TEXT NOT NULL,
    scope TEXT NOT NULL,
    agent TEXT NOT NULL,
    key TEXT NOT NULL,
    bytes BIGINT NOT NULL,
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
    enabled BOOLEAN NOT NULL
);
CREATE TABLE store_imports (
    source TEXT PRIMARY KEY,
    imported_at BIGINT NOT NULL
);
CREATE TABLE journal_entries (
    id BIGSERIAL PRIMARY KEY,
    hook TEXT NOT NULL,
    target TEXT NOT NULL,
    agent TEXT NOT NULL,
    payload TEXT NOT NULL,
    origin TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before BIGINT NOT NULL,
    owner TEXT,
    lease_until BIGINT,
    last_error TEXT,
    dead_at BIGINT
);
CREATE INDEX journal_entries_due ON journal_entries (target, dead_at, not_before);
CREATE INDEX journal_entries_owner ON journal_entries (owner) WHERE owner IS NOT NULL;
",
    "
-- lease: version 2 (renumber at merge): named leases (a schedule runs on one
-- instance), held until `until_ms` on the database's clock.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until_ms BIGINT NOT NULL
);
",
    // notify: version 3 (renumber at merge): grants in the store, and the change feed (`feed.rs`).
    "
CREATE TABLE plugin_grants (
    plugin TEXT PRIMARY KEY,
    grant_json TEXT NOT NULL
);
CREATE TABLE changes (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    plugin TEXT NOT NULL,
    payload TEXT NOT NULL,
    origin TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX changes_at ON changes (at);
",
    // hash: version 4 (renumber at merge): each plugin's recorded content
    // hash, the version the instances on a store run.
    "
CREATE TABLE plugin_versions (
    plugin TEXT PRIMARY KEY,
    hash TEXT NOT NULL,
    version TEXT NOT NULL,
    recorded_by TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);
",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// One database: the pool, the runtime driving its connections, and how to
/// name it in messages.
pub struct Pg {
    /// `Some` until dropped (shut down without blocking: the last owner may
    /// be on an async thread).
    rt: Option<tokio::runtime::Runtime>,
    pool: Pool,
    /// The URL, redacted.
    location: String,
    /// The password, scrubbed from every message.
    secret: Option<String>,
    /// How to connect (the feed's listener keeps a connection of its own).
    config: Config,
    /// TLS (every connection: the pool's, the migration's, the feed's).
    tls: tls::Tls,
    /// This process's name in the change feed's `origin` column.
    origin: String,
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.pool.close();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// What the environment adds to the URL: where the password comes from,
/// the user, the TLS defaults.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `PGPASSFILE`, else `~/.pgpass` (read when the URL has no password).
    pub passfile: Option<PathBuf>,
    /// The user when the URL names none (`USER`).
    pub default_user: Option<String>,
    /// `PGSSLMODE`, `PGSSLROOTCERT`, libpq's default root file.
    pub tls: tls::TlsDefaults,
}

impl Credentials {
    /// From the process environment, as libpq reads it.
    pub fn from_env() -> Credentials {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let passfile =
            var("PGPASSFILE").map(PathBuf::from).or_else(|| var("HOME").map(|h| Path::new(&h).join(".pgpass")));
        Credentials { passfile, default_user: var("USER"), tls: tls::TlsDefaults::from_env() }
    }
}

impl Pg {
    /// Connects to `url`, checks the server answers, and brings the schema
    /// to [`SCHEMA_VERSION`] (under [`MIGRATION_LOCK`]). Blocks.
    ///
    /// # Errors
    /// A URL that does not parse, a server that cannot be reached or refuses
    /// the login (the message names the URL, redacted), or a schema newer
    /// than this build's.
    pub fn open(url: &str, credentials: &Credentials) -> Result<Pg, StoreError> {
        const OP: &str = "open";
        let location = redact_url(url);
        let (rest, tls) = tls::Tls::from_url(url, &credentials.tls)
            .map_err(|e| StoreError::new(BACKEND, OP, StoreErrorKind::Backend(format!("`{location}`: {e}"))))?;
        let mut config = Config::from_str(&rest).map_err(|e| {
            StoreError::new(BACKEND, OP, StoreErrorKind::Backend(format!("`{location}` is not a PostgreSQL URL: {e}")))
        })?;
        if config.get_user().is_none() {
            match &credentials.default_user {
                Some(user) => {
                    config.user(user);
                }
                None => {
                    return Err(StoreError::new(
                        BACKEND,
                        OP,
                        StoreErrorKind::Backend(format!("`{location}` names no user (and USER is not set)")),
                    ));
                }
            }
        }
        if config.get_password().is_none()
            && let Some(file) = &credentials.passfile
            && let Some(password) = passfile_password(file, &config)
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        tls.apply(&mut config);
        let secret = config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()).filter(|p| !p.is_empty());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ctxhost-pg")
            .enable_all()
            .build()
            .map_err(|e| {
                StoreError::new(BACKEND, OP, StoreErrorKind::Backend(format!("cannot start a runtime: {e}")))
            })?;
        let manager = Manager::from_config(
            config.clone(),
            tls.connector(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = {
            let _enter = rt.enter();
            Pool::builder(manager)
                .max_size(POOL_SIZE)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(WAIT))
                .create_timeout(Some(CONNECT_TIMEOUT + Duration::from_secs(1)))
                .build()
        }
        .map_err(|e| StoreError::new(BACKEND, OP, StoreErrorKind::Backend(format!("cannot make a pool: {e}"))))?;
        let origin = format!(
            "{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        );
        let pg = Pg { rt: Some(rt), pool, location, secret, config: config.clone(), tls, origin };
        pg.migrate(&config)?;
        Ok(pg)
    }

    /// The URL, redacted: how messages name the database.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// This process's name in the change feed ([`super::feed`]).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How to connect (for a connection outside the pool).
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The TLS connector for a connection outside the pool.
    pub(crate) fn tls(&self) -> tls::Connector {
        self.tls.connector()
    }

    /// Spawns `f` on the private runtime (which drives it whatever runtime
    /// the caller has, or none); `None` once the runtime is gone.
    pub(crate) fn spawn<F>(&self, f: F) -> Option<tokio::task::JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.as_ref().map(|rt| rt.spawn(f))
    }

    /// The pool (for the backends in this module).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs `f` to completion on this thread, with the private runtime's
    /// context entered (its connections are driven by that runtime's worker).
    pub(crate) fn run<F: Future>(&self, f: F) -> F::Output {
        let _enter = self.rt.as_ref().map(tokio::runtime::Runtime::enter);
        futures_executor::block_on(f)
    }

    /// `e` and its causes as one text, the password scrubbed.
    pub(crate) fn text(&self, e: &(dyn StdError + 'static)) -> String {
        let mut out = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            let next = c.to_string();
            if !out.ends_with(&next) {
                out.push_str(": ");
                out.push_str(&next);
            }
            cause = c.source();
        }
        self.scrub(out)
    }

    /// `text` without the password.
    pub(crate) fn scrub(&self, text: String) -> String {
        match &self.secret {
            Some(secret) if text.contains(secret.as_str()) => text.replace(secret.as_str(), "***"),
            _ => text,
        }
    }

    /// A backend failure of `op`.
    pub(crate) fn fail(&self, op: &'static str) -> impl Fn(&(dyn StdError + 'static)) -> StoreError + '_ {
        move |e| StoreError::new(BACKEND, op, StoreErrorKind::Backend(self.text(e)))
    }

    /// Brings the schema to [`SCHEMA_VERSION`] on a connection of its own
    /// (closing it releases the lock, whatever happened).
    fn migrate(&self, config: &Config) -> Result<(), StoreError> {
        const OP: &str = "open";
        let unreachable = |e: &tokio_postgres::Error| {
            StoreError::new(
                BACKEND,
                OP,
                StoreErrorKind::Backend(format!("cannot reach the database `{}`: {}", self.location, self.text(e))),
            )
        };
        let failed = |e: &tokio_postgres::Error| {
            StoreError::new(
                BACKEND,
                OP,
                StoreErrorKind::Backend(format!("`{}`: cannot upgrade the schema: {}", self.location, self.text(e))),
            )
        };
        self.run(async {
            let (mut client, conn) = config.connect(self.tls()).await.map_err(|e| unreachable(&e))?;
            let driver = tokio::spawn(conn);
            let out = async {
                client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(|e| failed(&e))?;
                client
                    .batch_execute("CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    .await
                    .map_err(|e| failed(&e))?;
                let row = client
                    .query_opt("SELECT value FROM store_meta WHERE key = 'schema_version'", &[])
                    .await
                    .map_err(|e| failed(&e))?;
                let found = match row.map(|r| r.get::<_, String>(0)) {
                    None => 0,
                    Some(text) => text.parse::<u32>().map_err(|e| {
                        StoreError::new(
                            BACKEND,
                            OP,
                            StoreErrorKind::Corrupt {
                                what: format!("`{}` store_meta schema_version {text:?}", self.location),
                                reason: e.to_string(),
                            },
                        )
                    })?,
                };
                if found > SCHEMA_VERSION {
                    return Err(StoreError::new(
                        BACKEND,
                        OP,
                        StoreErrorKind::Backend(format!(
                            "`{}` holds schema version {found}, written by a newer ctxhost; this one knows version \
                             {SCHEMA_VERSION}",
                            self.location
                        )),
                    ));
                }
                for version in found + 1..=SCHEMA_VERSION {
                    let tx = client.transaction().await.map_err(|e| failed(&e))?;
                    tx.batch_execute(MIGRATIONS[version as usize - 1]).await.map_err(|e| failed(&e))?;
                    tx.execute(
                        "INSERT INTO store_meta (key, value) VALUES ('schema_version', $1) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        &[&version.to_string()],
                    )
                    .await
                    .map_err(|e| failed(&e))?;
                    tx.commit().await.map_err(|e| failed(&e))?;
                    tracing::info!("{}: store schema upgraded to version {version}", self.location);
                }
                client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await.map_err(|e| failed(&e))?;
                Ok(())
            }
            .await;
            drop(client);
            let _ = driver.await;
            out
        })
    }
}

/// The password `~/.pgpass`-format `file` holds for `config`'s first host,
/// port, database and user (`*` matches anything; `\:` and `\\` escape),
/// as libpq reads it: ignored, with a warning, when others may read it.
fn passfile_password(file: &Path, config: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!("{}: ignored: others may read it (its mode must be 0600 or less, as for libpq)", file.display());
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let unix = matches!(config.get_hosts().first(), Some(Host::Unix(_)) | None);
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        let [h, p, d, u, password] = fields.as_slice() else { continue };
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        let host_ok = matches(h, &host) || (unix && h == "localhost");
        if host_ok && matches(p, &port) && matches(d, db) && matches(u, user) {
            return Some(password.clone());
        }
    }
    None
}

/// The five fields of a `.pgpass` line (`:` separates, `\` escapes).
fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next()
                    && let Some(f) = fields.last_mut()
                {
                    f.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
#[path = "../../../../tests/util/pg.rs"]
mod pg;

#[cfg(test)]
mod tests {
    use super::store::PostgresStore;
    use super::*;
    use crate::host::store::journal::{Journal, Lease, NewEntry, Owner, RetryPolicy};
    use crate::host::store::{Actor, DueStep, Store, contract};
    use std::sync::Arc;

    fn open(url: &str) -> PostgresStore {
        PostgresStore::open(url, &Credentials::default()).unwrap()
    }

    fn fresh() -> PostgresStore {
        open(&super::pg::database().url)
    }

    #[test]
    fn the_store_contract_holds_on_postgres() {
        contract::vfs_nodes(&fresh());
        contract::vfs_quota(&fresh());
        contract::triggers(&fresh());
        contract::storage(&fresh());
        contract::config_and_choices(&fresh());
        contract::grants(&fresh());
        contract::claims_and_leases(&fresh());
        let db = super::pg::database();
        contract::concurrent_writers(Arc::new(open(&db.url)), Arc::new(open(&db.url)));
        let s = fresh();
        assert!(s.shared());
        contract::plugin_versions(&s);
        let db = super::pg::database();
        contract::plugin_versions_race(Arc::new(open(&db.url)), Arc::new(open(&db.url)));
    }

    /// Two instances claiming the due triggers of one database at once: each
    /// firing is taken exactly once.
    #[test]
    fn two_stores_take_each_due_trigger_exactly_once() {
        let db = super::pg::database();
        let (a, b) = (Arc::new(open(&db.url)), Arc::new(open(&db.url)));
        const N: usize = 400;
        for i in 0..N {
            // Half fire once, half fire and wake again in the far future.
            a.trigger_put(&contract::trigger(&format!("t{i:04}"), None, Some(100 + (i % 7) as u64)), Actor::Host)
                .unwrap();
        }
        let taken: Vec<Vec<String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = [a.clone(), b.clone(), a.clone(), b.clone()]
                .into_iter()
                .map(|s| {
                    scope.spawn(move || {
                        let mut got = Vec::new();
                        for _ in 0..50 {
                            let claimed = s
                                .triggers_take_due(1_000, &mut |r| {
                                    if r.id.ends_with(['0', '2', '4', '6', '8']) {
                                        DueStep::FireOnce
                                    } else {
                                        DueStep::Fire { fired: 1_000, wake: Some(u64::MAX / 4) }
                                    }
                                })
                                .unwrap();
                            got.extend(claimed.into_iter().map(|(r, _)| r.id));
                        }
                        got
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<String> = taken.concat();
        all.sort();
        let n = all.len();
        all.dedup();
        assert_eq!((n, all.len()), (N, N), "every due trigger taken, none twice");
        assert_eq!(a.trigger_list().unwrap().len(), N / 2, "the fire-once ones are gone");
        assert!(a.trigger_list().unwrap().iter().all(|t| t.fired == Some(1_000)));
        assert!(b.triggers_take_due(1_000, &mut |_| panic!("nothing is due any more")).unwrap().is_empty());
    }

    /// The change feed: the changes other instances must hear of are
    /// appended in their own transaction and wake a listener; a no-op
    /// change, a first grant and an import append nothing.
    #[test]
    fn changes_are_appended_with_their_change_and_wake_a_listener() {
        use crate::host::store::feed::{ChangeKind, Feed, Wake};
        use serde_json::json;
        let db = super::pg::database();
        let (a, b) = (open(&db.url), open(&db.url));
        let feed_b = feed::PgFeed::on(b.pg().clone());
        assert_ne!(a.pg().origin(), feed_b.origin(), "two opens, two origins");
        assert_eq!(feed_b.head().unwrap(), 0);
        let mut listener = feed_b.listen();
        assert_eq!(listener.wakes.blocking_recv(), Some(Wake::Connected));

        a.config_put("p", &[("K".to_owned(), json!(1))].into()).unwrap();
        assert_eq!(listener.wakes.blocking_recv(), Some(Wake::Notified));
        assert!(a.set_plugin_choice("p", false).unwrap());
        assert!(!a.set_plugin_choice("p", false).unwrap(), "no change, no entry");
        assert_eq!(a.grant_first("p", &json!({"allow_network": false})).unwrap(), json!({"allow_network": false}));
        a.grant_set("p", Some(&json!({"allow_network": true}))).unwrap();
        a.grant_set("p", Some(&json!({"allow_network": true}))).unwrap();
        let reload = feed::PgFeed::on(a.pg().clone()).note(ChangeKind::Reload, "p", &json!({})).unwrap();
        a.import(&[crate::host::store::ImportFile {
            source: "x".into(),
            config: vec![("p".into(), "K".into(), json!(2))],
            choices: vec![("p".into(), true)],
            grants: vec![("p".into(), json!({}))],
            ..Default::default()
        }])
        .unwrap();

        let all = feed_b.after(0, 100).unwrap();
        let seen: Vec<(Option<ChangeKind>, &str, serde_json::Value)> =
            all.iter().map(|e| (e.kind, e.plugin.as_str(), e.payload.clone())).collect();
        assert_eq!(
            seen,
            [
                (Some(ChangeKind::Config), "p", json!({"values": {"K": 1}})),
                (Some(ChangeKind::Enable), "p", json!({"enabled": false})),
                (Some(ChangeKind::Grant), "p", json!({"grant": {"allow_network": true}})),
                (Some(ChangeKind::Reload), "p", json!({})),
            ]
        );
        assert!(all.iter().all(|e| e.origin == a.pg().origin()));
        assert!(all.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(all[3].id, reload);
        assert_eq!(feed_b.head().unwrap(), reload);
        assert_eq!(feed_b.after(all[1].id, 1).unwrap(), [all[2].clone()], "from an id, at most `limit`");

        // The listening connection killed: it reconnects and says so.
        while listener.wakes.try_recv().is_ok() {}
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'ctxhost-listen-%'",
        )
        .unwrap();
        assert_eq!(listener.wakes.blocking_recv(), Some(Wake::Connected));
        b.config_put("q", &[("K".to_owned(), json!(3))].into()).unwrap();
        assert_eq!(listener.wakes.blocking_recv(), Some(Wake::Notified), "listening again");
        drop(listener);
        std::thread::sleep(Duration::from_millis(300));
        let left =
            db.query("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'ctxhost-listen-%'").unwrap();
        assert_eq!(left, [[Some("0".to_owned())]], "a dropped listener closes its connection");
    }

    /// Ids follow the commit order: a reader that reads on from the last id
    /// it saw while four writers on two instances append never skips one.
    #[test]
    fn a_reader_following_the_feed_misses_no_change_of_concurrent_writers() {
        use crate::host::store::feed::Feed;
        use serde_json::json;
        let db = super::pg::database();
        let (a, b) = (Arc::new(open(&db.url)), Arc::new(open(&db.url)));
        let reader = feed::PgFeed::on(a.pg().clone());
        const EACH: usize = 40;
        let done = std::sync::atomic::AtomicBool::new(false);
        let got = std::thread::scope(|scope| {
            for t in 0..4 {
                let s = if t % 2 == 0 { a.clone() } else { b.clone() };
                scope.spawn(move || {
                    for i in 0..EACH {
                        s.config_put(&format!("w{t}"), &[("K".to_owned(), json!(i))].into()).unwrap();
                    }
                });
            }
            let follow = scope.spawn(|| {
                let (mut seen, mut got) = (0, Vec::new());
                loop {
                    let last_round = done.load(std::sync::atomic::Ordering::SeqCst);
                    for e in reader.after(seen, 7).unwrap() {
                        seen = e.id;
                        got.push((e.plugin, e.payload["values"]["K"].as_u64().unwrap()));
                    }
                    if last_round && reader.after(seen, 1).unwrap().is_empty() {
                        return got;
                    }
                }
            });
            // Writers first (the scope joins them when it ends; wait here).
            while reader.head().unwrap() < (4 * EACH) as i64 {
                std::thread::sleep(Duration::from_millis(5));
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            follow.join().unwrap()
        });
        assert_eq!(got.len(), 4 * EACH, "every change read, none twice");
        for t in 0..4 {
            let mine: Vec<u64> = got.iter().filter(|(p, _)| *p == format!("w{t}")).map(|(_, k)| *k).collect();
            assert_eq!(mine, (0..EACH as u64).collect::<Vec<_>>(), "each writer's changes in its order");
        }
    }

    /// `grants.toml` goes into a PostgreSQL store once (renamed aside); a
    /// SQLite store leaves it where it is, the home's record of grants.
    #[test]
    fn grants_toml_is_imported_into_postgres_once_and_left_to_sqlite() {
        use crate::home::Home;
        use crate::host::store::migrate;
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let text =
            "# header\n[plugins.a]\nallow_network = true\nreadable_paths = [\"/x\"]\n\n[plugins.b]\nenv = [\"KEY\"]\n";
        std::fs::write(home.grants_file(), text).unwrap();

        let sqlite = crate::host::store::sqlite::SqliteStore::open(&home.state_db()).unwrap();
        assert!(migrate::run(&home, &sqlite).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(home.grants_file()).unwrap(), text, "a SQLite home keeps its file");
        assert_eq!(sqlite.grant_get("a").unwrap(), None);

        let pg = fresh();
        let renamed = migrate::run(&home, &pg).unwrap();
        assert_eq!(renamed, [dir.path().join("grants.toml.migrated")]);
        assert_eq!(pg.grant_get("a").unwrap(), Some(json!({"allow_network": true, "readable_paths": ["/x"]})));
        assert_eq!(pg.grant_get("b").unwrap(), Some(json!({"env": ["KEY"]})));
        // Written again (an old ctxhost): imported at most once.
        std::fs::write(home.grants_file(), "[plugins.a]\nallow_network = false\n").unwrap();
        migrate::run(&home, &pg).unwrap();
        assert_eq!(pg.grant_get("a").unwrap().unwrap()["allow_network"], true);

        std::fs::write(home.grants_file(), "plugins = 3 [").unwrap();
        let err = migrate::run(&home, &fresh()).unwrap_err().to_string();
        assert!(err.contains("grants.toml"), "{err}");
    }

    /// Instances starting together: one migrates, the others wait on the
    /// lock and find the schema done.
    #[test]
    fn instances_opening_together_migrate_once() {
        let db = super::pg::database();
        let stores: Vec<PostgresStore> = std::thread::scope(|scope| {
            let hs: Vec<_> = (0..4).map(|_| scope.spawn(|| open(&db.url))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for s in &stores {
            assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        }
        let rows = db.query("SELECT key, value FROM store_meta").unwrap();
        assert_eq!(rows, [[Some("schema_version".to_owned()), Some(SCHEMA_VERSION.to_string())]]);
    }

    #[test]
    fn a_newer_schema_and_an_unreachable_database_are_clear_errors() {
        let db = super::pg::database();
        drop(open(&db.url));
        db.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'").unwrap();
        let err = PostgresStore::open(&db.url, &Credentials::default()).err().unwrap().to_string();
        assert!(err.starts_with("postgres store, open: ") && err.contains("schema version 99"), "{err}");
        assert!(err.contains(&db.name) && err.contains("newer ctxhost"), "{err}");

        let gone = "postgres://ctx:hunter2@/state?host=/nonexistent/socket/dir";
        let err = PostgresStore::open(gone, &Credentials::default()).err().unwrap().to_string();
        assert!(
            err.contains("cannot reach the database `postgres://ctx:***@/state?host=/nonexistent/socket/dir`"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }

    /// A password given in the URL or found in a passfile logs in, and shows
    /// in no error: not a refused login's, not a failed statement's.
    #[test]
    fn the_password_logs_in_and_never_shows() {
        let db = super::pg::database();
        let secret = "Sup3r-s3cret-PW";
        let url = db.role("ctx_user", secret);
        let s = PostgresStore::open(&url, &Credentials::default()).unwrap();
        s.set_plugin_choice("p", false).unwrap();
        assert_eq!(s.plugin_choice("p").unwrap(), Some(false));
        let location = s.location().to_owned();
        assert!(location.contains("ctx_user:***@") && !location.contains(secret), "{location}");

        let wrong = url.replace(secret, "not-it-at-all");
        let err = PostgresStore::open(&wrong, &Credentials::default()).err().unwrap().to_string();
        assert!(err.contains("password authentication failed"), "{err}");
        assert!(!err.contains("not-it-at-all") && !err.contains(secret), "{err}");

        // No password in the URL: the passfile's.
        let dir = tempfile::tempdir().unwrap();
        let passfile = dir.path().join("pgpass");
        std::fs::write(&passfile, format!("*:*:{}:ctx_user:{secret}\n", db.name)).unwrap();
        std::fs::set_permissions(&passfile, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let bare = url.replace(&format!(":{secret}"), "");
        assert!(!bare.contains(secret));
        let creds = Credentials { passfile: Some(passfile), ..Default::default() };
        let s = PostgresStore::open(&bare, &creds).unwrap();
        assert_eq!(s.plugin_choice("p").unwrap(), Some(false));
        // A failing statement's error does not carry it either.
        db.execute("REVOKE ALL ON plugin_state FROM ctx_user; ALTER TABLE plugin_state OWNER TO postgres").unwrap();
        let err = s.set_plugin_choice("q", true).unwrap_err().to_string();
        assert!(err.contains("permission denied") && !err.contains(secret), "{err}");
    }

    /// TLS against a server with `ssl = on` whose `pg_hba.conf` lets TCP
    /// connections in with TLS only (`hostssl`): every mode does what libpq's
    /// does, every connection (pool, change feed) is encrypted, and a
    /// refused certificate or a refused plain connection is an error naming
    /// the URL (password hidden) and why.
    #[test]
    fn tls_modes_against_a_server_that_takes_tls_only() {
        use crate::host::store::feed::{Feed, Wake};
        let db = super::pg::tls_database();
        let files = db.cluster.tls.clone().unwrap();
        let secret = "tls-S3cret-pw";
        db.role("tls_user", secret);
        let url = |host: &str, params: &str| db.tcp_url(host, "tls_user", secret, params);
        let open_at = |host: &str, params: &str| PostgresStore::open(&url(host, params), &Credentials::default());
        let (ca, other) = (files.ca.display().to_string(), files.other_ca.display().to_string());

        // require: encrypted, the certificate unchecked; prefer (the default) takes TLS when offered.
        let s = open_at("127.0.0.1", "sslmode=require").unwrap();
        s.set_plugin_choice("p", false).unwrap();
        let mut listener = feed::PgFeed::on(s.pg().clone()).listen();
        assert_eq!(listener.wakes.blocking_recv(), Some(Wake::Connected));
        let s = open_at("127.0.0.1", "").unwrap();
        assert_eq!(s.plugin_choice("p").unwrap(), Some(false));
        let rows = db
            .query(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl), \
                 count(*) FILTER (WHERE s.ssl AND a.application_name LIKE 'ctxhost-listen-%') \
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'tls_user'",
            )
            .unwrap();
        let counts: Vec<u32> = rows[0].iter().map(|c| c.as_deref().unwrap().parse().unwrap()).collect();
        assert!(counts[0] >= 3 && counts[1] == 0 && counts[2] == 1, "encrypted, plain, listener: {counts:?}");
        drop(listener);

        // verify-full with the authority that signed the server's certificate: by name and by address.
        for host in ["localhost", "127.0.0.1"] {
            let s = open_at(host, &format!("sslmode=verify-full&sslrootcert={ca}")).unwrap();
            assert_eq!(s.plugin_choice("p").unwrap(), Some(false), "{host}");
        }
        // A name the certificate does not hold: verify-ca passes, verify-full does not.
        let elsewhere = "hostaddr=127.0.0.1";
        let by_other_name = |mode: &str| {
            PostgresStore::open(
                &url("ctxhost-test.invalid", &format!("{elsewhere}&sslmode={mode}&sslrootcert={ca}")),
                &Credentials::default(),
            )
        };
        by_other_name("verify-ca").unwrap();
        let err = by_other_name("verify-full").err().unwrap().to_string();
        assert!(err.contains("is not for the host connected to") && err.contains("sslmode=verify-ca"), "{err}");

        // Another authority: refused, saying which file and why, the password hidden.
        for mode in ["verify-full", "verify-ca", "require"] {
            let params = format!("sslmode={mode}&sslrootcert={other}");
            let err = open_at("localhost", &params).err().unwrap().to_string();
            let shown = url("localhost", &params).replace(secret, "***");
            assert!(err.contains(&format!("cannot reach the database `{shown}`")), "{err}");
            assert!(
                err.contains(&format!(
                    "the server's certificate is not signed by a certificate in sslrootcert `{other}`"
                )),
                "{mode}: {err}"
            );
            assert!(!err.contains(secret), "{err}");
        }

        // disable against hostssl-only: the server refuses, and says why.
        let err = open_at("127.0.0.1", "sslmode=disable").err().unwrap().to_string();
        assert!(err.contains("cannot reach the database `postgres://tls_user:***@127.0.0.1:"), "{err}");
        assert!(err.contains("no pg_hba.conf entry") && err.contains("no encryption"), "{err}");
        assert!(!err.contains(secret), "{err}");
    }

    fn entry(target: &str, payload: &str, run_now: bool) -> NewEntry {
        NewEntry {
            hook: "after_turn".into(),
            target: target.into(),
            agent: "a1".into(),
            payload: payload.into(),
            run_now,
        }
    }

    /// The journal on PostgreSQL: four claimers on two instances never share
    /// an entry; a dead owner's entries are taken over when its lease runs out.
    #[test]
    fn the_journal_on_postgres_claims_once_and_takes_over_expired_leases() {
        let db = super::pg::database();
        let (a, b) = (open(&db.url), open(&db.url));
        let ja = Arc::new(journal::PostgresJournal::on(a.pg().clone(), RetryPolicy::default()));
        let jb = Arc::new(journal::PostgresJournal::on(b.pg().clone(), RetryPolicy::default()));
        let me = Lease { owner: Owner::named("me"), duration: Duration::from_secs(60) };
        let entries: Vec<NewEntry> = (0..200).map(|i| entry("p", &i.to_string(), false)).collect();
        let ids = ja.append(&entries, &me).unwrap();
        assert_eq!(ids.len(), 200);
        let got: Vec<i64> = std::thread::scope(|scope| {
            let hs: Vec<_> = (0..4)
                .map(|t| {
                    let j = if t % 2 == 0 { ja.clone() } else { jb.clone() };
                    scope.spawn(move || {
                        let lease = Lease { owner: Owner::named(format!("w{t}")), duration: Duration::from_secs(60) };
                        let mut got = Vec::new();
                        loop {
                            let c = j.claim(&lease, 7, &["p".to_owned()]).unwrap();
                            if c.entries.is_empty() {
                                return got;
                            }
                            assert!(c.entries.iter().all(|e| e.attempt == 1));
                            got.extend(c.entries.into_iter().map(|e| e.id));
                        }
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut all = got.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!((got.len(), all.len()), (200, 200));
        for id in &ids {
            assert!(ja.complete(*id).unwrap());
        }
        assert!(jb.pending().unwrap().is_empty());

        // An instance dies holding entries: another takes them after the lease.
        let dying = Lease { owner: Owner::named("dying"), duration: Duration::from_millis(300) };
        let held = ja.append(&[entry("p", "x", true), entry("q", "y", true)], &dying).unwrap();
        let other = Lease { owner: Owner::named("other"), duration: Duration::from_secs(60) };
        let targets = ["p".to_owned(), "q".to_owned()];
        let first = jb.claim(&other, 10, &targets).unwrap();
        assert!(first.entries.is_empty(), "held under a live lease");
        assert!(first.next_due.is_some(), "the lease's end is the next due time");
        std::thread::sleep(Duration::from_millis(400));
        let taken = jb.claim(&other, 10, &targets).unwrap();
        assert_eq!(taken.entries.iter().map(|e| (e.id, e.attempt)).collect::<Vec<_>>(), [(held[0], 2), (held[1], 2)]);
        assert_eq!(taken.entries[0].origin, "dying");
        assert_eq!(jb.owners().unwrap(), ["other"]);
        let outcome = jb.fail(held[0], &Owner::named("other"), "exit 1").unwrap();
        assert!(matches!(outcome, crate::host::store::journal::FailOutcome::Retry { attempts: 2, .. }), "{outcome:?}");
        assert_eq!(
            ja.fail(held[1], &Owner::named("dying"), "late").unwrap(),
            crate::host::store::journal::FailOutcome::NotHeld
        );
        assert_eq!(ja.pending().unwrap()[0].last_error.as_deref(), Some("exit 1"));
    }

    #[test]
    fn pgpass_lines_match_as_libpq_matches_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:ctx:nope\n/run/pg:*:state:ctx:pa\\:ss\\\\word\n*:*:*:ctx:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let cfg = |url: &str| Config::from_str(url).unwrap();
        assert_eq!(
            passfile_password(&file, &cfg("postgres://ctx@/state?host=/run/pg")).as_deref(),
            Some("pa:ss\\word")
        );
        assert_eq!(passfile_password(&file, &cfg("postgres://ctx@db/other")).as_deref(), Some("fallback"));
        assert_eq!(passfile_password(&file, &cfg("postgres://someone@db/other")), None);
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert_eq!(passfile_password(&file, &cfg("postgres://ctx@db/other")), None, "others may read it: ignored");
    }
}
