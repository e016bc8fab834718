//! The change feed ([`crate::host::store::feed`]) on PostgreSQL: the
//! `changes` table, `NOTIFY ctxhost_changes` at each commit that appends to
//! it, and a listener on a connection of its own.
//!
//! The listener runs on [`Pg`]'s private runtime: it connects (outside the
//! pool; `application_name` is `ctxhost-listen-<pid>`), runs `LISTEN`,
//! removes entries older than [`KEEP`], sends [`Wake::Connected`], then
//! drives the connection with `Connection::poll_message`, sending
//! [`Wake::Notified`] for every notification on the channel. A connection
//! that fails (the server restarted, the backend was terminated, a ping
//! every [`PING`] went unanswered) is replaced after a backoff (up to
//! [`MAX_BACKOFF`]), and the reader is woken again to catch up. It stops
//! when the [`Listener`] is dropped. Never applies a change itself.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::AsyncMessage;

use super::Pg;
use super::store::PostgresStore;
use crate::host::store::StoreError;
use crate::host::store::feed::{ChangeKind, Feed, FeedEntry, Listener, Wake};

/// The notification channel.
pub const CHANNEL: &str = "ctxhost_changes";

/// The transaction-scoped advisory lock held from drawing a feed id to the
/// commit, so ids are committed in order.
pub const LOCK_FEED: i64 = 0x6374_7868_6f73_7402; // "ctxhost" 02

/// How long entries are kept: a listener disconnected for longer than
/// this misses what went (an instance that restarts reads the state whole).
pub const KEEP: &str = "1 day";

/// How often an idle listening connection is checked.
const PING: Duration = Duration::from_secs(15);

/// How long a ping may take before the connection counts as dead.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The first wait before reconnecting, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The feed of one PostgreSQL database.
pub struct PgFeed {
    store: PostgresStore,
}

impl PgFeed {
    /// The feed on an open database (shared with the store and the journal).
    pub fn on(pg: Arc<Pg>) -> PgFeed {
        PgFeed { store: PostgresStore::on(pg) }
    }

    fn pg(&self) -> &Arc<Pg> {
        self.store.pg()
    }
}

/// Aborts the listening task when dropped.
struct StopOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Feed for PgFeed {
    fn origin(&self) -> &str {
        self.pg().origin()
    }

    fn head(&self) -> Result<i64, StoreError> {
        const OP: &str = "feed_head";
        let pg = self.pg();
        pg.run(async {
            let client = pg.pool().get().await.map_err(|e| (pg.fail(OP))(&e))?;
            let row = client
                .query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM changes", &[])
                .await
                .map_err(|e| (pg.fail(OP))(&e))?;
            Ok(row.get(0))
        })
    }

    fn after(&self, after: i64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        const OP: &str = "feed_after";
        let pg = self.pg();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = pg.run(async {
            let client = pg.pool().get().await.map_err(|e| (pg.fail(OP))(&e))?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, kind, plugin, payload, origin FROM changes WHERE id > $1 ORDER BY id LIMIT $2",
                )
                .await
                .map_err(|e| (pg.fail(OP))(&e))?;
            client.query(&stmt, &[&after, &limit]).await.map_err(|e| (pg.fail(OP))(&e))
        })?;
        rows.iter()
            .map(|r| {
                let (id, kind, payload): (i64, String, String) = (r.get(0), r.get(1), r.get(3));
                let payload: Value = serde_json::from_str(&payload).map_err(|e| {
                    StoreError::new(
                        super::BACKEND,
                        OP,
                        crate::host::store::StoreErrorKind::Corrupt {
                            what: format!("change {id}"),
                            reason: e.to_string(),
                        },
                    )
                })?;
                Ok(FeedEntry { id, kind: ChangeKind::parse(&kind), plugin: r.get(2), payload, origin: r.get(4) })
            })
            .collect()
    }

    fn note(&self, kind: ChangeKind, plugin: &str, payload: &Value) -> Result<i64, StoreError> {
        self.store.note_change(kind, plugin, payload)
    }

    fn listen(&self) -> Listener {
        let (tx, wakes) = tokio::sync::mpsc::unbounded_channel();
        let pg = self.pg().clone();
        let task = self.pg().spawn(listen(pg.clone(), tx));
        // The task holds the database while it runs; `StopOnDrop` ends it.
        Listener { wakes, stop: Box::new(StopOnDrop(task)) }
    }
}

/// Listens until `wakes` has no receiver, reconnecting as needed.
async fn listen(pg: Arc<Pg>, wakes: UnboundedSender<Wake>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listen_once(&pg, &wakes).await {
            Ended::ReaderGone => return,
            Ended::Lost { connected, reason } => {
                if connected {
                    backoff = FIRST_BACKOFF;
                }
                tracing::warn!(
                    "{}: the change feed's connection {}: {reason}; reconnecting in {} ms",
                    pg.location(),
                    if connected { "was lost" } else { "failed" },
                    backoff.as_millis()
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if wakes.is_closed() {
            return;
        }
    }
}

/// How one connection ended.
enum Ended {
    ReaderGone,
    /// `connected`: it had been listening (the backoff starts over).
    Lost {
        connected: bool,
        reason: String,
    },
}

/// One connection: connect, `LISTEN`, wake the reader, then forward
/// notifications until the connection fails or the reader is gone.
async fn listen_once(pg: &Arc<Pg>, wakes: &UnboundedSender<Wake>) -> Ended {
    let lost = |connected: bool, e: &tokio_postgres::Error| Ended::Lost { connected, reason: pg.text(e) };
    let mut config = pg.config().clone();
    config.application_name(format!("ctxhost-listen-{}", std::process::id()));
    let (client, mut connection) = match config.connect(pg.tls()).await {
        Ok(pair) => pair,
        Err(e) => return lost(false, &e),
    };
    // The connection is driven here, its notifications forwarded; the
    // client's queries (LISTEN, pings) complete while it is driven.
    let (notes_tx, mut notes) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => {
                    if notes_tx.send(Ok(())).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = notes_tx.send(Err(e.to_string()));
                    return;
                }
                None => {
                    let _ = notes_tx.send(Err("the server closed the connection".to_owned()));
                    return;
                }
            }
        }
    });
    let _stop_driver = StopOnDrop(Some(driver));
    if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
        return lost(false, &e);
    }
    // Old entries go (any instance may do it; each does at its connects).
    if let Err(e) = client.execute(&format!("DELETE FROM changes WHERE at < now() - interval '{KEEP}'"), &[]).await {
        tracing::warn!("{}: could not remove old change-feed entries: {}", pg.location(), pg.text(&e));
    }
    if wakes.send(Wake::Connected).is_err() {
        return Ended::ReaderGone;
    }
    let mut ping = tokio::time::interval(PING);
    ping.tick().await;
    loop {
        tokio::select! {
            note = notes.recv() => match note {
                Some(Ok(())) => {
                    if wakes.send(Wake::Notified).is_err() {
                        return Ended::ReaderGone;
                    }
                }
                Some(Err(reason)) => return Ended::Lost { connected: true, reason: pg.scrub(reason) },
                None => return Ended::Lost { connected: true, reason: "the connection ended".to_owned() },
            },
            _ = ping.tick() => {
                if wakes.is_closed() {
                    return Ended::ReaderGone;
                }
                match tokio::time::timeout(PING_TIMEOUT, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return lost(true, &e),
                    Err(_) => {
                        return Ended::Lost {
                            connected: true,
                            reason: format!("no answer to a ping in {} s", PING_TIMEOUT.as_secs()),
                        };
                    }
                }
            }
        }
    }
}
