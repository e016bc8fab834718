//! The journal: durable work items that outlive the process that accepted
//! them — the plugins' `after_turn` calls, which LibreFang acknowledges to
//! its agent before they run.
//!
//! Owns the [`Journal`] contract, the identity of the process holding an
//! entry ([`Owner`]), the [`RetryPolicy`], and the SQLite backend
//! ([`SqliteJournal`], tables `journal_*` in `<home>/state.db`).
//!
//! An entry is one call to make: hook `hook` of plugin `target` with the
//! request `payload` (JSON text). At most one owner holds it at a time, under
//! a lease it renews; every claim counts an attempt. It leaves the journal
//! when completed, or stays as a dead letter once the policy's attempts are
//! used up. Delivery is at least once: an owner that dies after the plugin
//! answered but before `complete` committed leaves the entry to run again.
//!
//! Must never: run plugin code, read payloads, or run on an async worker
//! thread — every method blocks (callers use `spawn_blocking`). Nothing
//! SQLite-specific crosses the trait (times are `SystemTime`, ids `i64`,
//! causes are boxed), so a networked backend — PostgreSQL, for several
//! ctxhost instances on one state — can implement it as it stands.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params, params_from_iter};

/// An entry's id: never reused, so a late `complete` cannot hit a newer entry.
pub type EntryId = i64;

/// A journal operation that failed, naming the journal and the operation.
#[derive(Debug, thiserror::Error)]
#[error("journal `{location}`: cannot {op}: {source}")]
pub struct JournalError {
    /// Where the journal is (a file, a database URL without credentials).
    pub location: String,
    pub op: &'static str,
    #[source]
    pub source: Box<dyn StdError + Send + Sync>,
}

/// Who holds entries: one process, as `<host>/<boot id>/<pid namespace>/<pid>/<start time>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

/// The parts of an owner name that tell whether its process still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    host: String,
    boot: String,
    pidns: String,
    pid: u32,
    start: u64,
}

impl Identity {
    fn current() -> Option<&'static Identity> {
        static ME: OnceLock<Option<Identity>> = OnceLock::new();
        ME.get_or_init(|| {
            let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
            let pidns = std::fs::read_link("/proc/self/ns/pid").ok()?;
            Some(Identity {
                host: read("/proc/sys/kernel/hostname")?,
                boot: read("/proc/sys/kernel/random/boot_id")?,
                pidns: pidns.to_string_lossy().trim_start_matches("pid:[").trim_end_matches(']').to_owned(),
                pid: std::process::id(),
                start: process_start(std::process::id())?.0,
            })
        })
        .as_ref()
    }

    fn parse(owner: &str) -> Option<Identity> {
        let mut parts = owner.rsplitn(5, '/');
        let start = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let pidns = parts.next()?.to_owned();
        let boot = parts.next()?.to_owned();
        let host = parts.next()?.to_owned();
        Some(Identity { host, boot, pidns, pid, start })
    }
}

/// `(start time in clock ticks since boot, is a zombie)` of process `pid`.
fn process_start(pid: u32) -> Option<(u64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?;
    // Field 22 (starttime) is the 20th after the name.
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z"))
}

impl Owner {
    /// This process. Outside Linux's `/proc` it is named by pid only, and
    /// never judged gone by another process ([`Owner::is_gone`]).
    pub fn this_process() -> Owner {
        match Identity::current() {
            Some(i) => Owner(format!("{}/{}/{}/{}/{}", i.host, i.boot, i.pidns, i.pid, i.start)),
            None => Owner(format!("pid-{}", std::process::id())),
        }
    }

    /// An owner by name (tests, embedders that run several queues).
    pub fn named(name: impl Into<String>) -> Owner {
        Owner(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True only when the process named `owner` is known to be gone: it ran
    /// on this host in this pid namespace and no longer runs (its pid is
    /// free, a zombie, or another process's), or it ran in an earlier boot
    /// of this host. An owner on another host is never judged here: its
    /// leases run out instead.
    pub fn is_gone(owner: &str) -> bool {
        let (Some(me), Some(them)) = (Identity::current(), Identity::parse(owner)) else { return false };
        if them.host != me.host {
            return false;
        }
        if them.boot != me.boot {
            return true;
        }
        if them.pidns != me.pidns {
            return false;
        }
        match process_start(them.pid) {
            None => true,
            Some((start, zombie)) => zombie || start != them.start,
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An owner and how long its claims last unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: Owner,
    pub duration: Duration,
}

/// How often an entry is tried, and how long to wait between tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Claims an entry gets; after the last one fails it is a dead letter.
    pub max_attempts: u32,
    /// The wait after the first failure; doubled after each further one.
    pub backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 5, backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(300) }
    }
}

impl RetryPolicy {
    /// The wait after `failed` attempts failed (from 1): `backoff * 2^(failed-1)`, capped.
    pub fn delay(&self, failed: u32) -> Duration {
        let factor = 1u32.checked_shl(failed.saturating_sub(1)).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// An entry to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// The call to make, e.g. `after_turn`.
    pub hook: String,
    /// Who runs it: the plugin's name.
    pub target: String,
    /// The agent it is about (inspection, ordering).
    pub agent: String,
    /// The request, JSON text.
    pub payload: String,
    /// Claimed by the appender in the same transaction (it runs the entry
    /// now), instead of waiting for a [`Journal::claim`].
    pub run_now: bool,
}

/// An entry a claim handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: EntryId,
    pub hook: String,
    pub target: String,
    pub agent: String,
    pub payload: String,
    /// The owner that appended it.
    pub origin: String,
    /// Claims so far, this one included (1 for a first run).
    pub attempt: u32,
}

/// What a claim did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    pub entries: Vec<Claimed>,
    /// Entries of the targets that had used every attempt (an owner died
    /// holding them at their last one) and became dead letters instead.
    pub dead_lettered: Vec<EntryInfo>,
    /// When the next entry of the targets becomes claimable (a retry's
    /// backoff ends, a lease runs out), if one is waiting.
    pub next_due: Option<SystemTime>,
}

/// What became of a failed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// It will be claimable again at `at`.
    Retry { at: SystemTime, attempts: u32 },
    /// Its attempts are used up: it stays as a dead letter.
    Dead { attempts: u32 },
    /// The caller did not hold it (its lease ran out and another owner took
    /// it, or it is gone): nothing changed.
    NotHeld,
}

/// An entry as inspection shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    pub id: EntryId,
    pub hook: String,
    pub target: String,
    pub agent: String,
    pub payload: String,
    pub origin: String,
    pub created_at: SystemTime,
    pub attempts: u32,
    /// Not claimable before this time (a retry's backoff).
    pub not_before: SystemTime,
    /// Who holds it now, and until when.
    pub owner: Option<String>,
    pub lease_until: Option<SystemTime>,
    pub last_error: Option<String>,
    /// Set for a dead letter.
    pub dead_at: Option<SystemTime>,
}

/// The journal's contract. Every method is one atomic step, durable when it
/// returns, and blocks.
pub trait Journal: Send + Sync {
    /// Where the journal lives, for messages.
    fn location(&self) -> String;

    /// Adds `entries` in one transaction, on stable storage when this
    /// returns; those with `run_now` are claimed under `lease` at once.
    /// `lease.owner` is recorded as their origin. Returns their ids in order.
    fn append(&self, entries: &[NewEntry], lease: &Lease) -> Result<Vec<EntryId>, JournalError>;

    /// Takes up to `limit` claimable entries of `targets` for `lease`, oldest
    /// first: not dead, held by nobody (or their lease ran out), due. Each
    /// claim counts an attempt; a claimable entry that has used every attempt
    /// becomes a dead letter instead. No two owners ever hold one entry.
    fn claim(&self, lease: &Lease, limit: usize, targets: &[String]) -> Result<Claims, JournalError>;

    /// Extends every lease `lease.owner` holds by `lease.duration` from now.
    /// Returns how many.
    fn renew(&self, lease: &Lease) -> Result<usize, JournalError>;

    /// The entry is done: it leaves the journal. Returns whether it was there.
    fn complete(&self, id: EntryId) -> Result<bool, JournalError>;

    /// The attempt `owner` holds failed with `error`: the entry is due again
    /// after the policy's backoff, or becomes a dead letter after the last attempt.
    fn fail(&self, id: EntryId, owner: &Owner, error: &str) -> Result<FailOutcome, JournalError>;

    /// Frees every entry `owner` holds (it is known gone), noting `reason`;
    /// their attempts stay counted. Returns how many.
    fn release(&self, owner: &str, reason: &str) -> Result<usize, JournalError>;

    /// The owners holding entries now.
    fn owners(&self) -> Result<Vec<String>, JournalError>;

    /// Entries not done and not dead, oldest first.
    fn pending(&self) -> Result<Vec<EntryInfo>, JournalError>;

    /// Dead letters, oldest first.
    fn dead(&self) -> Result<Vec<EntryInfo>, JournalError>;
}

/// The journal in an SQLite file (WAL, `synchronous = FULL`: a commit is on
/// disk when it returns). The file is shared with the rest of the state store;
/// this backend touches only its `journal_*` tables.
pub struct SqliteJournal {
    path: PathBuf,
    conn: Mutex<Connection>,
    policy: RetryPolicy,
}

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS journal_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS journal_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hook TEXT NOT NULL,
    target TEXT NOT NULL,
    agent TEXT NOT NULL,
    payload TEXT NOT NULL,
    origin TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before INTEGER NOT NULL,
    owner TEXT,
    lease_until INTEGER,
    last_error TEXT,
    dead_at INTEGER
);
CREATE INDEX IF NOT EXISTS journal_entries_due ON journal_entries (target, dead_at, not_before);
CREATE INDEX IF NOT EXISTS journal_entries_owner ON journal_entries (owner) WHERE owner IS NOT NULL;
";

/// How long a statement waits for another writer of the file.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Error texts kept per entry at most (bytes).
pub(super) const MAX_ERROR: usize = 4096;

/// Entry columns, in [`info_from_row`]'s order.
const INFO_COLUMNS: &str = "id, hook, target, agent, payload, origin, created_at, attempts, not_before, owner, lease_until, last_error, dead_at";

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(super) fn from_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

pub(super) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `text` cut to at most [`MAX_ERROR`] bytes, on a character boundary.
pub(super) fn clip(text: &str) -> &str {
    if text.len() <= MAX_ERROR {
        return text;
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `?, ?, …` for `n` values starting at `?{first}`.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

fn info_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<EntryInfo> {
    Ok(EntryInfo {
        id: row.get(0)?,
        hook: row.get(1)?,
        target: row.get(2)?,
        agent: row.get(3)?,
        payload: row.get(4)?,
        origin: row.get(5)?,
        created_at: from_ms(row.get(6)?),
        attempts: row.get(7)?,
        not_before: from_ms(row.get(8)?),
        owner: row.get(9)?,
        lease_until: row.get::<_, Option<i64>>(10)?.map(from_ms),
        last_error: row.get(11)?,
        dead_at: row.get::<_, Option<i64>>(12)?.map(from_ms),
    })
}

/// A schema this build does not know (a newer ctxhost wrote the file).
#[derive(Debug, thiserror::Error)]
#[error(
    "its journal tables are version {found}; this ctxhost knows version {SCHEMA_VERSION} (a newer ctxhost wrote them)"
)]
struct NewerSchema {
    found: i64,
}

impl SqliteJournal {
    /// Opens (creating when needed, mode 0600) the journal in the SQLite file
    /// `path`, retrying entries after `policy`.
    ///
    /// # Errors
    /// The file cannot be created or opened, is not SQLite, or holds journal
    /// tables of a newer version.
    pub fn open(path: &Path, policy: RetryPolicy) -> Result<SqliteJournal, JournalError> {
        let fail = |op, source: Box<dyn StdError + Send + Sync>| JournalError {
            location: path.display().to_string(),
            op,
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail("create its directory", e.into()))?;
        }
        {
            // Conversations are in it: only this user reads it (SQLite gives
            // its -wal and -shm files the same mode).
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| fail("create the file", e.into()))?;
        }
        let conn = Connection::open(path).map_err(|e| fail("open", e.into()))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| fail("set the busy timeout", e.into()))?;
        // Switching to WAL and creating the schema take locks the busy
        // handler does not always wait for (another process may be opening
        // the same file right now): retried on "busy" for a bounded time.
        let started = std::time::Instant::now();
        loop {
            let setup = conn
                .pragma_update(None, "journal_mode", "WAL")
                .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
                .and_then(|()| conn.execute_batch(SCHEMA))
                .and_then(|()| {
                    conn.execute(
                        "INSERT INTO journal_schema (version) SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM journal_schema)",
                        [SCHEMA_VERSION],
                    )
                });
            match setup {
                Ok(_) => break,
                Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(fail("create the journal tables", e.into())),
            }
        }
        let found: i64 = conn
            .query_row("SELECT MAX(version) FROM journal_schema", [], |r| r.get(0))
            .map_err(|e| fail("read the schema version", e.into()))?;
        if found > SCHEMA_VERSION {
            return Err(fail("open", Box::new(NewerSchema { found })));
        }
        Ok(SqliteJournal { path: path.to_owned(), conn: Mutex::new(conn), policy })
    }

    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, JournalError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut conn).map_err(|e| JournalError { location: self.location(), op, source: e.into() })
    }

    fn list(&self, op: &'static str, dead: bool) -> Result<Vec<EntryInfo>, JournalError> {
        let filter = if dead { "dead_at IS NOT NULL" } else { "dead_at IS NULL" };
        self.with(op, |c| {
            let mut stmt =
                c.prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM journal_entries WHERE {filter} ORDER BY id"))?;
            stmt.query_map([], info_from_row)?.collect()
        })
    }
}

impl Journal for SqliteJournal {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn append(&self, entries: &[NewEntry], lease: &Lease) -> Result<Vec<EntryId>, JournalError> {
        let now = to_ms(SystemTime::now());
        let until = now.saturating_add(duration_ms(lease.duration));
        let owner = lease.owner.as_str();
        self.with("append", |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut ids = Vec::with_capacity(entries.len());
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO journal_entries
                     (hook, target, agent, payload, origin, created_at, attempts, not_before, owner, lease_until)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9)",
                )?;
                for e in entries {
                    let (attempts, holder, lease_until) =
                        if e.run_now { (1, Some(owner), Some(until)) } else { (0, None, None) };
                    insert.execute(params![
                        e.hook,
                        e.target,
                        e.agent,
                        e.payload,
                        owner,
                        now,
                        attempts,
                        holder,
                        lease_until
                    ])?;
                    ids.push(tx.last_insert_rowid());
                }
            }
            tx.commit()?;
            Ok(ids)
        })
    }

    fn claim(&self, lease: &Lease, limit: usize, targets: &[String]) -> Result<Claims, JournalError> {
        if targets.is_empty() {
            return Ok(Claims::default());
        }
        let now = to_ms(SystemTime::now());
        let until = now.saturating_add(duration_ms(lease.duration));
        let max = i64::from(self.policy.max_attempts.max(1));
        let owner = lease.owner.as_str();
        let n = targets.len();
        // ?1 now, ?2 max attempts, ?3 limit, ?4.. targets.
        let in_targets = format!("target IN ({})", placeholders(4, n));
        let free = "dead_at IS NULL AND (lease_until IS NULL OR lease_until <= ?1)";
        let next_due_sql = format!(
            "SELECT MIN(CASE WHEN lease_until > ?1 THEN lease_until ELSE not_before END)
             FROM journal_entries WHERE dead_at IS NULL AND {in_targets}
             AND (CASE WHEN lease_until > ?1 THEN lease_until ELSE not_before END) > ?1"
        );
        let args = || {
            let mut v: Vec<rusqlite::types::Value> = vec![now.into(), max.into(), (limit as i64).into()];
            v.extend(targets.iter().map(|t| rusqlite::types::Value::from(t.clone())));
            v
        };
        self.with("claim", |c| {
            // A read first: an idle journal never takes the write lock.
            let claimable: i64 = c.query_row(
                &format!(
                    "SELECT COUNT(*) FROM journal_entries WHERE {free} AND {in_targets}
                     AND (not_before <= ?1 OR attempts >= ?2)"
                ),
                params_from_iter(args()),
                |r| r.get(0),
            )?;
            if claimable == 0 || limit == 0 {
                let next: Option<i64> = c.query_row(&next_due_sql, params_from_iter(args()), |r| r.get(0))?;
                return Ok(Claims { next_due: next.map(from_ms), ..Claims::default() });
            }
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let dead_lettered = {
                let mut stmt = tx.prepare(&format!(
                    "UPDATE journal_entries SET dead_at = ?1, owner = NULL, lease_until = NULL
                     WHERE {free} AND {in_targets} AND attempts >= ?2
                     RETURNING {INFO_COLUMNS}"
                ))?;
                stmt.query_map(params_from_iter(args()), info_from_row)?.collect::<rusqlite::Result<Vec<_>>>()?
            };
            let ids: Vec<EntryId> = {
                let mut stmt = tx.prepare(&format!(
                    "SELECT id FROM journal_entries WHERE {free} AND {in_targets} AND not_before <= ?1
                     ORDER BY id LIMIT ?3"
                ))?;
                stmt.query_map(params_from_iter(args()), |r| r.get(0))?.collect::<rusqlite::Result<_>>()?
            };
            let mut entries = Vec::with_capacity(ids.len());
            {
                let mut take = tx.prepare_cached(
                    "UPDATE journal_entries SET owner = ?2, lease_until = ?3, attempts = attempts + 1
                     WHERE id = ?1 RETURNING id, hook, target, agent, payload, origin, attempts",
                )?;
                for id in ids {
                    entries.push(take.query_row(params![id, owner, until], |r| {
                        Ok(Claimed {
                            id: r.get(0)?,
                            hook: r.get(1)?,
                            target: r.get(2)?,
                            agent: r.get(3)?,
                            payload: r.get(4)?,
                            origin: r.get(5)?,
                            attempt: r.get(6)?,
                        })
                    })?);
                }
            }
            let next: Option<i64> = tx.query_row(&next_due_sql, params_from_iter(args()), |r| r.get(0))?;
            tx.commit()?;
            Ok(Claims { entries, dead_lettered, next_due: next.map(from_ms) })
        })
    }

    fn renew(&self, lease: &Lease) -> Result<usize, JournalError> {
        let until = to_ms(SystemTime::now()).saturating_add(duration_ms(lease.duration));
        self.with("renew leases", |c| {
            c.execute(
                "UPDATE journal_entries SET lease_until = ?2 WHERE owner = ?1 AND dead_at IS NULL",
                params![lease.owner.as_str(), until],
            )
        })
    }

    fn complete(&self, id: EntryId) -> Result<bool, JournalError> {
        self.with("complete an entry", |c| {
            c.execute("DELETE FROM journal_entries WHERE id = ?1 AND dead_at IS NULL", [id]).map(|n| n > 0)
        })
    }

    fn fail(&self, id: EntryId, owner: &Owner, error: &str) -> Result<FailOutcome, JournalError> {
        let now = SystemTime::now();
        let policy = self.policy;
        self.with("record a failure", |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let attempts: Option<u32> = tx
                .query_row(
                    "SELECT attempts FROM journal_entries WHERE id = ?1 AND owner = ?2 AND dead_at IS NULL",
                    params![id, owner.as_str()],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(attempts) = attempts else { return Ok(FailOutcome::NotHeld) };
            let outcome = if attempts >= policy.max_attempts.max(1) {
                tx.execute(
                    "UPDATE journal_entries SET dead_at = ?2, owner = NULL, lease_until = NULL, last_error = ?3
                     WHERE id = ?1",
                    params![id, to_ms(now), clip(error)],
                )?;
                FailOutcome::Dead { attempts }
            } else {
                let at = now + policy.delay(attempts);
                tx.execute(
                    "UPDATE journal_entries SET not_before = ?2, owner = NULL, lease_until = NULL, last_error = ?3
                     WHERE id = ?1",
                    params![id, to_ms(at), clip(error)],
                )?;
                FailOutcome::Retry { at, attempts }
            };
            tx.commit()?;
            Ok(outcome)
        })
    }

    fn release(&self, owner: &str, reason: &str) -> Result<usize, JournalError> {
        self.with("release leases", |c| {
            c.execute(
                "UPDATE journal_entries SET owner = NULL, lease_until = NULL, last_error = ?2
                 WHERE owner = ?1 AND dead_at IS NULL",
                params![owner, clip(reason)],
            )
        })
    }

    fn owners(&self) -> Result<Vec<String>, JournalError> {
        self.with("list owners", |c| {
            let mut stmt = c.prepare_cached(
                "SELECT DISTINCT owner FROM journal_entries WHERE owner IS NOT NULL AND dead_at IS NULL",
            )?;
            stmt.query_map([], |r| r.get(0))?.collect()
        })
    }

    fn pending(&self) -> Result<Vec<EntryInfo>, JournalError> {
        self.list("list pending entries", false)
    }

    fn dead(&self) -> Result<Vec<EntryInfo>, JournalError> {
        self.list("list dead letters", true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str, secs: u64) -> Lease {
        Lease { owner: Owner::named(owner), duration: Duration::from_secs(secs) }
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

    fn targets(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn open(dir: &Path, policy: RetryPolicy) -> SqliteJournal {
        SqliteJournal::open(&dir.join("state.db"), policy).unwrap()
    }

    #[test]
    fn entries_survive_reopening_and_leave_when_completed() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path(), RetryPolicy::default());
        let me = lease("me", 60);
        let ids = j.append(&[entry("p", "{\"n\":1}", false), entry("q", "{\"n\":2}", true)], &me).unwrap();
        assert_eq!(ids.len(), 2);
        drop(j);
        let j = open(dir.path(), RetryPolicy::default());
        let pending = j.pending().unwrap();
        assert_eq!(pending.len(), 2);
        assert_eq!((pending[1].owner.as_deref(), pending[1].attempts), (Some("me"), 1), "run_now is claimed");
        assert_eq!(pending[0].origin, "me");
        // q is held; p is free.
        let claims = j.claim(&lease("other", 60), 10, &targets(&["p", "q"])).unwrap();
        assert_eq!(claims.entries.len(), 1);
        assert_eq!((claims.entries[0].id, claims.entries[0].attempt), (ids[0], 1));
        assert_eq!(claims.entries[0].payload, "{\"n\":1}");
        assert!(claims.next_due.is_some(), "q's lease ends some time");
        assert!(j.complete(ids[0]).unwrap());
        assert!(!j.complete(ids[0]).unwrap(), "twice is a no-op");
        assert!(j.complete(ids[1]).unwrap());
        assert!(j.pending().unwrap().is_empty());
        let mode = std::fs::metadata(dir.path().join("state.db")).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    }

    #[test]
    fn failures_back_off_then_dead_letter_and_other_targets_go_on() {
        let dir = tempfile::tempdir().unwrap();
        // Long enough that a loaded machine still claims within the backoff.
        let wait = Duration::from_millis(500);
        let policy = RetryPolicy { max_attempts: 3, backoff: wait, max_backoff: wait };
        let j = open(dir.path(), policy);
        let me = lease("me", 60);
        let all = targets(&["bad", "good"]);
        let ids = j.append(&[entry("bad", "{}", true), entry("good", "{}", false)], &me).unwrap();
        let outcome = j.fail(ids[0], &me.owner, "exit 1").unwrap();
        let FailOutcome::Retry { at, attempts: 1 } = outcome else { panic!("{outcome:?}") };
        assert!(at > SystemTime::now());
        // During the backoff only good is claimable.
        let claims = j.claim(&me, 10, &all).unwrap();
        assert_eq!(claims.entries.iter().map(|c| c.target.as_str()).collect::<Vec<_>>(), ["good"]);
        assert!(claims.next_due.is_some_and(|d| d <= at + Duration::from_millis(1)), "{claims:?}");
        assert!(j.complete(claims.entries[0].id).unwrap());
        for attempt in 2..=3 {
            std::thread::sleep(policy.delay(attempt - 1) + Duration::from_millis(5));
            let claims = j.claim(&me, 10, &all).unwrap();
            assert_eq!(claims.entries.len(), 1, "attempt {attempt}");
            assert_eq!(claims.entries[0].attempt, attempt);
            let outcome = j.fail(ids[0], &me.owner, &format!("exit {attempt}")).unwrap();
            if attempt < 3 {
                assert!(matches!(outcome, FailOutcome::Retry { attempts, .. } if attempts == attempt), "{outcome:?}");
            } else {
                assert_eq!(outcome, FailOutcome::Dead { attempts: 3 });
            }
        }
        assert!(j.pending().unwrap().is_empty());
        let dead = j.dead().unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].target.as_str(), dead[0].attempts), ("bad", 3));
        assert_eq!(dead[0].last_error.as_deref(), Some("exit 3"));
        assert!(j.claim(&me, 10, &all).unwrap().entries.is_empty(), "a dead letter is never claimed");
        assert_eq!(j.fail(ids[0], &me.owner, "again").unwrap(), FailOutcome::NotHeld);
    }

    #[test]
    fn a_gone_owners_entries_are_released_and_its_last_attempt_dead_letters() {
        let dir = tempfile::tempdir().unwrap();
        let policy = RetryPolicy { max_attempts: 2, ..RetryPolicy::default() };
        let j = open(dir.path(), policy);
        let (dead_owner, me) = (lease("crashed", 600), lease("me", 60));
        let ids = j.append(&[entry("p", "1", true), entry("p", "2", true)], &dead_owner).unwrap();
        assert!(j.claim(&me, 10, &targets(&["p"])).unwrap().entries.is_empty(), "held under a live lease");
        assert_eq!(j.owners().unwrap(), ["crashed"]);
        assert_eq!(j.release("crashed", "interrupted: its owner is gone").unwrap(), 2);
        let claims = j.claim(&me, 1, &targets(&["p"])).unwrap();
        assert_eq!(claims.entries.len(), 1, "the limit holds");
        assert_eq!((claims.entries[0].id, claims.entries[0].attempt), (ids[0], 2));
        // Held at its last attempt by an owner that dies: dead at the next claim.
        assert_eq!(j.release("me", "interrupted: its owner is gone").unwrap(), 1);
        let claims = j.claim(&me, 10, &targets(&["p"])).unwrap();
        assert_eq!(claims.dead_lettered.iter().map(|d| d.id).collect::<Vec<_>>(), [ids[0]]);
        assert_eq!(claims.entries.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[1]]);
        assert_eq!(j.dead().unwrap()[0].last_error.as_deref(), Some("interrupted: its owner is gone"));
    }

    #[test]
    fn an_expired_lease_can_be_taken_and_a_renewed_one_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path(), RetryPolicy::default());
        let short = Lease { owner: Owner::named("slow"), duration: Duration::from_millis(30) };
        j.append(&[entry("p", "1", true), entry("q", "2", true)], &short).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let renewed = Lease { owner: Owner::named("slow"), duration: Duration::from_secs(60) };
        // Renewing after expiry still extends: nobody took them yet.
        assert_eq!(j.renew(&renewed).unwrap(), 2);
        assert!(j.claim(&lease("me", 60), 10, &targets(&["p", "q"])).unwrap().entries.is_empty());
        j.renew(&short).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let claims = j.claim(&lease("me", 60), 10, &targets(&["p"])).unwrap();
        assert_eq!(claims.entries.len(), 1, "only the targets asked for");
        assert_eq!(claims.entries[0].attempt, 2);
    }

    #[test]
    fn concurrent_claimers_never_share_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path(), RetryPolicy::default());
        let entries: Vec<NewEntry> = (0..200).map(|i| entry("p", &i.to_string(), false)).collect();
        j.append(&entries, &lease("me", 60)).unwrap();
        drop(j);
        let path = dir.path().join("state.db");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let j = SqliteJournal::open(&path, RetryPolicy::default()).unwrap();
                    let me = lease(&format!("worker-{t}"), 60);
                    let mut got = Vec::new();
                    loop {
                        let claims = j.claim(&me, 7, &targets(&["p"])).unwrap();
                        if claims.entries.is_empty() {
                            return got;
                        }
                        got.extend(claims.entries.into_iter().map(|c| c.id));
                    }
                })
            })
            .collect();
        let mut all: Vec<EntryId> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!((n, all.len()), (200, 200));
    }

    #[test]
    fn owners_are_judged_gone_only_when_known_gone() {
        let me = Owner::this_process();
        assert!(!Owner::is_gone(me.as_str()), "{me}");
        let Some(i) = Identity::current() else { return };
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = format!("{}/{}/{}/{pid}/1", i.host, i.boot, i.pidns);
        assert!(Owner::is_gone(&gone), "a reaped child");
        let reused = format!("{}/{}/{}/{}/{}", i.host, i.boot, i.pidns, i.pid, i.start + 1);
        assert!(Owner::is_gone(&reused), "our pid, another start time");
        let earlier_boot = format!("{}/not-this-boot/{}/{}/{}", i.host, i.pidns, i.pid, i.start);
        assert!(Owner::is_gone(&earlier_boot));
        let elsewhere = format!("other-host/{}/{}/{pid}/1", i.boot, i.pidns);
        assert!(!Owner::is_gone(&elsewhere), "another host's owner runs out its lease instead");
        let other_ns = format!("{}/{}/1/{pid}/1", i.host, i.boot);
        assert!(!Owner::is_gone(&other_ns));
        assert!(!Owner::is_gone("me"), "a name this host did not make");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy { max_attempts: 9, backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(5) };
        let waits: Vec<u64> = (1..=5).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        assert_eq!(p.delay(200), Duration::from_secs(5));
    }
}
