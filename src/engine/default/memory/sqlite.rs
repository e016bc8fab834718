//! The built-in memory's embedded backend: an SQLite store (bundled, FTS5)
//! under the ctxhost home, keyed by agent and peer.
//!
//! - WAL journal and `synchronous = NORMAL`: readers never block the writer,
//!   and a crash mid-write loses at most that transaction, never the file.
//! - A busy timeout, so several processes (agents) can share one file.
//! - Recall ranks by BM25 over the words of the query; the query is built
//!   from quoted words, so no user text is ever parsed as FTS syntax. FTS5's
//!   default tokenizer (`unicode61`: letters and digits, case-folded,
//!   diacritics removed, no stemming) indexes the content.
//!
//! The inherent methods block; the [`MemoryBackend`] methods run them on the
//! blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use super::{MemoryBackend, MemoryEntry, MemoryError, NewMemory, StoredMemory, query_words};
use crate::runner::BoxFuture;

/// The SQLite memory store (cheap to clone: one connection, shared).
#[derive(Clone)]
pub struct MemoryStore {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    peer_id TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (agent_id, peer_id, content)
);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(content, content='memories', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END;
";

/// How long a call waits for another writer before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

impl MemoryStore {
    /// Opens (creating when needed) the store at `path`.
    ///
    /// # Errors
    /// The file cannot be created or opened, or is not a memory store.
    pub fn open(path: &Path) -> Result<Self, MemoryError> {
        let location = path.display().to_string();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| MemoryError::new(&location, "open", e))?;
        }
        let fail = |source: rusqlite::Error| MemoryError::new(&location, "open", source);
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        // Switching to WAL and creating the schema take locks that SQLite's
        // busy handler does not always wait for (another process may be doing
        // the same right now), so these retry on "busy" for a bounded time.
        let started = std::time::Instant::now();
        loop {
            let setup = conn
                .pragma_update(None, "journal_mode", "WAL")
                .and_then(|()| conn.pragma_update(None, "synchronous", "NORMAL"))
                .and_then(|()| conn.execute_batch(SCHEMA));
            match setup {
                Ok(()) => break,
                Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(MemoryStore { path: path.to_owned(), conn: Arc::new(Mutex::new(conn)) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, MemoryError> {
        let mut conn = self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut conn).map_err(|source| MemoryError::new(self.path.display().to_string(), op, source))
    }

    /// Stores memories in one transaction; a memory already stored for the
    /// same agent and peer is not stored twice. Returns how many were new.
    pub fn store(&self, memories: &[NewMemory]) -> Result<usize, MemoryError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        self.with("store", |conn| {
            // IMMEDIATE takes the write lock up front, where the busy timeout
            // applies; a deferred transaction upgrading later would fail at once.
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut added = 0;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO memories (agent_id, peer_id, content, tags, source, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for m in memories {
                    if m.content.trim().is_empty() {
                        continue;
                    }
                    let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
                    added += insert.execute(params![
                        m.agent_id,
                        m.peer_id.as_deref().unwrap_or(""),
                        m.content,
                        tags,
                        m.source,
                        now
                    ])?;
                }
            }
            tx.commit()?;
            Ok(added)
        })
    }

    /// The best `limit` memories of `agent_id` for `query` by BM25: those
    /// about `peer_id` and those about no peer in particular.
    pub fn recall(
        &self,
        agent_id: &str,
        peer_id: Option<&str>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<StoredMemory>, MemoryError> {
        let Some(fts_query) = fts_query(query) else { return Ok(Vec::new()) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.with("recall", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT m.content, m.tags, m.source FROM memories_fts
                 JOIN memories m ON m.id = memories_fts.rowid
                 WHERE memories_fts MATCH ?1 AND m.agent_id = ?2 AND (m.peer_id = ?3 OR m.peer_id = '')
                 ORDER BY bm25(memories_fts), m.id DESC LIMIT ?4",
            )?;
            let rows = stmt.query_map(params![fts_query, agent_id, peer_id.unwrap_or(""), limit as i64], |row| {
                let tags: String = row.get(1)?;
                Ok(StoredMemory {
                    content: row.get(0)?,
                    tags: serde_json::from_str(&tags).unwrap_or_default(),
                    source: row.get(2)?,
                })
            })?;
            rows.collect()
        })
    }

    /// See [`MemoryBackend::browse`]: by BM25 for a query, else newest first.
    pub fn browse(&self, agent_id: &str, query: &str, limit: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let row = |row: &rusqlite::Row<'_>| {
            let tags: String = row.get(3)?;
            let peer: String = row.get(1)?;
            Ok(MemoryEntry {
                id: row.get(0)?,
                peer_id: (!peer.is_empty()).then_some(peer),
                content: row.get(2)?,
                tags: serde_json::from_str(&tags).unwrap_or_default(),
                source: row.get(4)?,
                created_ms: row.get(5)?,
            })
        };
        if query.trim().is_empty() {
            return self.with("browse", |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT id, peer_id, content, tags, source, created_at FROM memories
                     WHERE agent_id = ?1 ORDER BY id DESC LIMIT ?2",
                )?;
                stmt.query_map(params![agent_id, limit], row)?.collect()
            });
        }
        let Some(fts_query) = fts_query(query) else { return Ok(Vec::new()) };
        self.with("browse", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT m.id, m.peer_id, m.content, m.tags, m.source, m.created_at FROM memories_fts
                 JOIN memories m ON m.id = memories_fts.rowid
                 WHERE memories_fts MATCH ?1 AND m.agent_id = ?2
                 ORDER BY bm25(memories_fts), m.id DESC LIMIT ?3",
            )?;
            stmt.query_map(params![fts_query, agent_id, limit], row)?.collect()
        })
    }

    /// See [`MemoryBackend::delete`].
    pub fn delete(&self, agent_id: &str, id: i64) -> Result<bool, MemoryError> {
        self.with("delete", |conn| {
            conn.execute("DELETE FROM memories WHERE id = ?1 AND agent_id = ?2", params![id, agent_id]).map(|n| n > 0)
        })
    }

    /// How many memories `agent_id` has.
    pub fn count(&self, agent_id: &str) -> Result<usize, MemoryError> {
        self.with("count", |conn| {
            conn.query_row("SELECT COUNT(*) FROM memories WHERE agent_id = ?1", [agent_id], |r| r.get::<_, i64>(0))
                .optional()
                .map(|n| n.unwrap_or(0) as usize)
        })
    }
}

impl MemoryBackend for MemoryStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn store(&self, memories: Vec<NewMemory>) -> BoxFuture<'_, Result<usize, MemoryError>> {
        Box::pin(async move { self.blocking("store", move |s| s.store(&memories)).await })
    }

    fn recall<'a>(
        &'a self,
        agent_id: &'a str,
        peer_id: Option<&'a str>,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<StoredMemory>, MemoryError>> {
        let (agent, peer, query) = (agent_id.to_owned(), peer_id.map(str::to_owned), query.to_owned());
        Box::pin(
            async move { self.blocking("recall", move |s| s.recall(&agent, peer.as_deref(), &query, limit)).await },
        )
    }

    fn count<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<usize, MemoryError>> {
        let agent = agent_id.to_owned();
        Box::pin(async move { self.blocking("count", move |s| s.count(&agent)).await })
    }

    fn browse<'a>(
        &'a self,
        agent_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        let (agent, query) = (agent_id.to_owned(), query.to_owned());
        Box::pin(async move { self.blocking("browse", move |s| s.browse(&agent, &query, limit)).await })
    }

    fn delete<'a>(&'a self, agent_id: &'a str, id: i64) -> BoxFuture<'a, Result<bool, MemoryError>> {
        let agent = agent_id.to_owned();
        Box::pin(async move { self.blocking("delete", move |s| s.delete(&agent, id)).await })
    }
}

impl MemoryStore {
    /// Runs `f` on a clone of the store on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&MemoryStore) -> Result<T, MemoryError> + Send + 'static,
    ) -> Result<T, MemoryError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|e| MemoryError::new(self.location(), op, format!("the blocking task failed: {e}")))?
    }
}

/// `"word1" OR "word2" …` from the [`query_words`] of `text`; `None` when
/// nothing is left to search for.
fn fts_query(text: &str) -> Option<String> {
    let words = query_words(text);
    if words.is_empty() {
        return None;
    }
    Some(words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(agent: &str, peer: Option<&str>, content: &str) -> NewMemory {
        NewMemory {
            agent_id: agent.into(),
            peer_id: peer.map(str::to_owned),
            content: content.into(),
            tags: Vec::new(),
            source: "default".into(),
        }
    }

    fn contents(v: Vec<StoredMemory>) -> Vec<String> {
        v.into_iter().map(|m| m.content).collect()
    }

    #[test]
    fn recall_ranks_by_relevance_per_agent_and_peer() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::open(&dir.path().join("memory.db")).unwrap();
        let added = store
            .store(&[
                mem("a1", None, "My garden has tomatoes and basil"),
                mem("a1", None, "The garden gate is broken; garden tools are in the shed"),
                mem("a1", None, "I like jazz"),
                mem("a1", Some("bob"), "Bob's garden is tiny"),
                mem("a2", None, "garden secrets of another agent"),
                mem("a1", None, "My garden has tomatoes and basil"),
            ])
            .unwrap();
        assert_eq!(added, 5, "the duplicate is not stored twice");
        let r = contents(store.recall("a1", None, "What is in my garden?", 5).unwrap());
        assert_eq!(r.len(), 2);
        assert!(r[0].contains("gate"), "two mentions of garden rank first: {r:?}");
        let r = contents(store.recall("a1", Some("bob"), "garden", 5).unwrap());
        assert_eq!(r.len(), 3, "peer memories plus agent-wide ones: {r:?}");
        assert_eq!(contents(store.recall("a1", None, "garden", 1).unwrap()).len(), 1);
        assert!(store.recall("a1", None, "the and of", 5).unwrap().is_empty(), "stopwords only");
        assert!(store.recall("a1", None, "\"unbalanced ( OR NOT", 5).unwrap().is_empty(), "no FTS syntax leaks");
    }

    #[test]
    fn memories_survive_reopening_and_concurrent_writers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        std::thread::scope(|s| {
            for t in 0..4 {
                let path = path.clone();
                s.spawn(move || {
                    let store = MemoryStore::open(&path).unwrap();
                    for i in 0..25 {
                        let content = format!("thread {t} note {i} about llamas");
                        store.store(&[mem("shared", None, &content)]).unwrap();
                    }
                });
            }
        });
        let store = MemoryStore::open(&path).unwrap();
        assert_eq!(store.count("shared").unwrap(), 100);
        assert_eq!(store.recall("shared", None, "llamas", 500).unwrap().len(), 100);
    }

    #[test]
    fn fts_query_quotes_words() {
        assert_eq!(fts_query("What's in my Garden? garden! Tomatoes").as_deref(), Some("\"garden\" OR \"tomatoes\""));
        assert_eq!(fts_query("a ! ?"), None);
    }
}
