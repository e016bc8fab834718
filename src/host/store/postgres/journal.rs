//! The after_turn [`Journal`] on PostgreSQL (table `journal_entries`, made
//! by the store's migrations): the SQLite journal's semantics for several
//! instances on one database.
//!
//! Claims take rows with `FOR UPDATE SKIP LOCKED`, so two instances claiming
//! at once never take one entry (and neither waits on the other); an entry
//! whose owner's lease ran out is claimable by any instance — how a dead
//! instance's entries are taken over. Lease times are the database's clock
//! (`clock_timestamp()`), not the instances': leases held and judged by
//! several machines compare one clock. Every method is one transaction or
//! one statement, durable when it returns (the server's `synchronous_commit`
//! decides what durable means). Must never run plugin code or read payloads.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::Pg;
use crate::host::store::journal::{
    Claimed, Claims, EntryId, EntryInfo, FailOutcome, Journal, JournalError, Lease, NewEntry, Owner, RetryPolicy, clip,
    duration_ms, from_ms,
};

/// Now, in milliseconds of the database's clock.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::BIGINT";

const INFO_COLUMNS: &str = "id, hook, target, agent, payload, origin, created_at, attempts, not_before, owner, \
                            lease_until, last_error, dead_at";

/// The journal in a PostgreSQL database.
pub struct PostgresJournal {
    pg: Arc<Pg>,
    policy: RetryPolicy,
}

/// A message-only error (the journal's causes are boxed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Text(String);

fn attempts(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn info_from_row(r: &Row) -> EntryInfo {
    EntryInfo {
        id: r.get(0),
        hook: r.get(1),
        target: r.get(2),
        agent: r.get(3),
        payload: r.get(4),
        origin: r.get(5),
        created_at: from_ms(r.get(6)),
        attempts: attempts(r.get(7)),
        not_before: from_ms(r.get(8)),
        owner: r.get(9),
        lease_until: r.get::<_, Option<i64>>(10).map(from_ms),
        last_error: r.get(11),
        dead_at: r.get::<_, Option<i64>>(12).map(from_ms),
    }
}

impl PostgresJournal {
    /// The journal on an open database, retrying after `policy`.
    pub fn on(pg: Arc<Pg>, policy: RetryPolicy) -> PostgresJournal {
        PostgresJournal { pg, policy }
    }

    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    fn fail(&self, op: &'static str, e: &(dyn std::error::Error + 'static)) -> JournalError {
        JournalError { location: self.location(), op, source: Box::new(Text(self.pg.text(e))) }
    }

    /// Runs `f` on a pooled connection.
    fn with<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&mut deadpool_postgres::Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, JournalError> {
        self.pg.run(async {
            let mut client = self.pg.pool().get().await.map_err(|e| self.fail(op, &e))?;
            f(&mut client).await.map_err(|e| self.fail(op, &e))
        })
    }

    fn list(&self, op: &'static str, dead: bool) -> Result<Vec<EntryInfo>, JournalError> {
        let filter = if dead { "dead_at IS NOT NULL" } else { "dead_at IS NULL" };
        self.with(op, async |c| {
            let stmt = c
                .prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM journal_entries WHERE {filter} ORDER BY id"))
                .await?;
            Ok(c.query(&stmt, &[]).await?.iter().map(info_from_row).collect())
        })
    }
}

impl Journal for PostgresJournal {
    fn location(&self) -> String {
        self.pg.location().to_owned()
    }

    fn append(&self, entries: &[NewEntry], lease: &Lease) -> Result<Vec<EntryId>, JournalError> {
        let lease_ms = duration_ms(lease.duration);
        let owner = lease.owner.as_str();
        self.with("append", async |c| {
            let tx = c.transaction().await?;
            let insert = tx
                .prepare_cached(&format!(
                    "INSERT INTO journal_entries
                     (hook, target, agent, payload, origin, created_at, attempts, not_before, owner, lease_until)
                     SELECT $1, $2, $3, $4, $5, now_ms, $6, now_ms, $7, CASE WHEN $7::TEXT IS NULL THEN NULL ELSE now_ms + $8 END
                     FROM (SELECT {NOW_MS} AS now_ms) AS t
                     RETURNING id"
                ))
                .await?;
            let mut ids = Vec::with_capacity(entries.len());
            for e in entries {
                let (tries, holder): (i32, Option<&str>) = if e.run_now { (1, Some(owner)) } else { (0, None) };
                let row = tx
                    .query_one(&insert, &[&e.hook, &e.target, &e.agent, &e.payload, &owner, &tries, &holder, &lease_ms])
                    .await?;
                ids.push(row.get(0));
            }
            tx.commit().await?;
            Ok(ids)
        })
    }

    fn claim(&self, lease: &Lease, limit: usize, targets: &[String]) -> Result<Claims, JournalError> {
        if targets.is_empty() {
            return Ok(Claims::default());
        }
        let lease_ms = duration_ms(lease.duration);
        let max = i32::try_from(self.policy.max_attempts.max(1)).unwrap_or(i32::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let owner = lease.owner.as_str();
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        let free = "dead_at IS NULL AND (lease_until IS NULL OR lease_until <= $1)";
        self.with("claim", async |c| {
            let tx = c.transaction().await?;
            let now: i64 = tx.query_one(&format!("SELECT {NOW_MS}"), &[]).await?.get(0);
            // Held at their last attempt by an owner that is gone: dead letters.
            let dead_stmt = tx
                .prepare_cached(&format!(
                    "UPDATE journal_entries SET dead_at = $1, owner = NULL, lease_until = NULL
                     WHERE id IN (SELECT id FROM journal_entries WHERE {free} AND target = ANY($2) AND attempts >= $3
                                  FOR UPDATE SKIP LOCKED)
                     RETURNING {INFO_COLUMNS}"
                ))
                .await?;
            let mut dead_lettered: Vec<EntryInfo> =
                tx.query(&dead_stmt, &[&now, &targets, &max]).await?.iter().map(info_from_row).collect();
            dead_lettered.sort_by_key(|d| d.id);
            let take = tx
                .prepare_cached(&format!(
                    "UPDATE journal_entries SET owner = $4, lease_until = $1 + $5, attempts = attempts + 1
                     WHERE id IN (SELECT id FROM journal_entries WHERE {free} AND target = ANY($2) AND not_before <= $1
                                  AND attempts < $3 ORDER BY id LIMIT $6 FOR UPDATE SKIP LOCKED)
                     RETURNING id, hook, target, agent, payload, origin, attempts"
                ))
                .await?;
            let mut entries: Vec<Claimed> = tx
                .query(&take, &[&now, &targets, &max, &owner, &lease_ms, &limit])
                .await?
                .iter()
                .map(|r| Claimed {
                    id: r.get(0),
                    hook: r.get(1),
                    target: r.get(2),
                    agent: r.get(3),
                    payload: r.get(4),
                    origin: r.get(5),
                    attempt: attempts(r.get(6)),
                })
                .collect();
            entries.sort_by_key(|e| e.id);
            let next = tx
                .prepare_cached(
                    "SELECT MIN(CASE WHEN lease_until > $1 THEN lease_until ELSE not_before END)
                     FROM journal_entries WHERE dead_at IS NULL AND target = ANY($2)
                     AND (CASE WHEN lease_until > $1 THEN lease_until ELSE not_before END) > $1",
                )
                .await?;
            let next: Option<i64> = tx.query_one(&next, &[&now, &targets]).await?.get(0);
            tx.commit().await?;
            // The wait is measured on the database's clock; this process waits on its own.
            let next_due = next.map(|n| SystemTime::now() + Duration::from_millis(u64::try_from(n - now).unwrap_or(0)));
            Ok(Claims { entries, dead_lettered, next_due })
        })
    }

    fn renew(&self, lease: &Lease) -> Result<usize, JournalError> {
        let lease_ms = duration_ms(lease.duration);
        self.with("renew leases", async |c| {
            let n = c
                .execute(
                    &format!(
                        "UPDATE journal_entries SET lease_until = {NOW_MS} + $2 WHERE owner = $1 AND dead_at IS NULL"
                    ),
                    &[&lease.owner.as_str(), &lease_ms],
                )
                .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn complete(&self, id: EntryId) -> Result<bool, JournalError> {
        self.with("complete an entry", async |c| {
            Ok(c.execute("DELETE FROM journal_entries WHERE id = $1 AND dead_at IS NULL", &[&id]).await? > 0)
        })
    }

    fn fail(&self, id: EntryId, owner: &Owner, error: &str) -> Result<FailOutcome, JournalError> {
        let policy = self.policy;
        let error = clip(error);
        self.with("record a failure", async |c| {
            let tx = c.transaction().await?;
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT attempts, {NOW_MS} FROM journal_entries WHERE id = $1 AND owner = $2 AND dead_at IS NULL \
                         FOR UPDATE"
                    ),
                    &[&id, &owner.as_str()],
                )
                .await?;
            let Some(row) = row else { return Ok(FailOutcome::NotHeld) };
            let (tries, now): (u32, i64) = (attempts(row.get(0)), row.get(1));
            let outcome = if tries >= policy.max_attempts.max(1) {
                tx.execute(
                    "UPDATE journal_entries SET dead_at = $2, owner = NULL, lease_until = NULL, last_error = $3
                     WHERE id = $1",
                    &[&id, &now, &error],
                )
                .await?;
                FailOutcome::Dead { attempts: tries }
            } else {
                let delay = policy.delay(tries);
                tx.execute(
                    "UPDATE journal_entries SET not_before = $2, owner = NULL, lease_until = NULL, last_error = $3
                     WHERE id = $1",
                    &[&id, &now.saturating_add(duration_ms(delay)), &error],
                )
                .await?;
                FailOutcome::Retry { at: SystemTime::now() + delay, attempts: tries }
            };
            tx.commit().await?;
            Ok(outcome)
        })
    }

    fn release(&self, owner: &str, reason: &str) -> Result<usize, JournalError> {
        let reason = clip(reason);
        self.with("release leases", async |c| {
            let n = c
                .execute(
                    "UPDATE journal_entries SET owner = NULL, lease_until = NULL, last_error = $2
                     WHERE owner = $1 AND dead_at IS NULL",
                    &[&owner, &reason],
                )
                .await?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn owners(&self) -> Result<Vec<String>, JournalError> {
        self.with("list owners", async |c| {
            let rows = c
                .query("SELECT DISTINCT owner FROM journal_entries WHERE owner IS NOT NULL AND dead_at IS NULL ORDER BY owner", &[])
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn pending(&self) -> Result<Vec<EntryInfo>, JournalError> {
        self.list("list pending entries", false)
    }

    fn dead(&self) -> Result<Vec<EntryInfo>, JournalError> {
        self.list("list dead letters", true)
    }
}
