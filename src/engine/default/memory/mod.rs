//! The built-in memory: what the user said, keyed by agent and peer, recalled
//! by the words of a message. One trait, [`MemoryBackend`], used as
//! `Arc<dyn MemoryBackend>` by the engine; two backends: SQLite with FTS5 and
//! BM25 ([`sqlite::MemoryStore`], the embedded default, one file) and
//! PostgreSQL full-text search ([`postgres::PgMemory`], several ctxhost
//! instances on one database).
//!
//! What every backend keeps:
//! - A memory belongs to an agent and to one peer or to none; a recall for a
//!   peer sees that peer's memories and those about no peer, never another
//!   agent's or another peer's.
//! - Writes are idempotent: the same content for the same agent and peer is
//!   stored once, also when two writers race (`UNIQUE (agent_id, peer_id,
//!   content)`); a batch is one transaction.
//! - A recall searches for the words of the query ([`query_words`]: distinct,
//!   lowercased, no stopwords, no one-letter words) with OR, best first;
//!   no user text is ever parsed as query syntax.
//!
//! This module never decides what is worth remembering (the engine does) and
//! never calls a plugin.

pub mod postgres;
pub mod sqlite;

use std::error::Error as StdError;
use std::path::Path;
use std::sync::Arc;

use crate::runner::BoxFuture;

pub use sqlite::MemoryStore;

/// A memory to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMemory {
    pub agent_id: String,
    /// The peer the memory is about, or `None` for the agent as a whole.
    pub peer_id: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    /// Who wrote it: `default` or a plugin name.
    pub source: String,
}

/// A recalled memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMemory {
    pub content: String,
    pub tags: Vec<String>,
    pub source: String,
}

/// A stored memory as the operator sees it (`GET /api/memory/{agent}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryEntry {
    /// The backend's row id (opaque to callers).
    pub id: i64,
    pub peer_id: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    pub source: String,
    pub created_ms: i64,
}

/// A memory operation that failed, naming the store and the operation.
#[derive(Debug, thiserror::Error)]
#[error("memory store `{location}`: cannot {op}: {source}")]
pub struct MemoryError {
    /// Where the memory is (a file, a database URL without credentials).
    pub location: String,
    /// `open`, `store`, `recall`, `count`, `migrate`.
    pub op: &'static str,
    #[source]
    pub source: Box<dyn StdError + Send + Sync>,
}

impl MemoryError {
    pub fn new(
        location: impl Into<String>,
        op: &'static str,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        MemoryError { location: location.into(), op, source: source.into() }
    }
}

/// A built-in memory backend. Calls run off the async threads (a backend
/// that blocks moves the work to the blocking pool itself).
pub trait MemoryBackend: Send + Sync {
    /// Where the memory is, for messages (never a password).
    fn location(&self) -> String;

    /// Stores `memories` in one transaction; a memory already stored for the
    /// same agent and peer is not stored twice, and blank ones are skipped.
    /// Returns how many were new.
    fn store(&self, memories: Vec<NewMemory>) -> BoxFuture<'_, Result<usize, MemoryError>>;

    /// The best `limit` memories of `agent_id` for the words of `query`:
    /// those about `peer_id` and those about no peer in particular.
    fn recall<'a>(
        &'a self,
        agent_id: &'a str,
        peer_id: Option<&'a str>,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<StoredMemory>, MemoryError>>;

    /// How many memories `agent_id` has (all peers).
    fn count<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<usize, MemoryError>>;

    /// The operator's view of `agent_id`'s memories (every peer): with an
    /// empty `query` the newest `limit`, else the best `limit` for its words
    /// (none when it has no word a recall would search for).
    fn browse<'a>(
        &'a self,
        agent_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>>;

    /// Deletes memory `id` of `agent_id`; false when it has none by that id.
    fn delete<'a>(&'a self, agent_id: &'a str, id: i64) -> BoxFuture<'a, Result<bool, MemoryError>>;
}

/// The built-in memory a configuration names: PostgreSQL at `store_url`
/// (the `[store] url`) when there is one, else SQLite at `db`.
///
/// Blocks until connected and migrated. With a URL it must run within the
/// multi-threaded Tokio runtime that will use the memory (the pool's
/// connections live on it): on a `spawn_blocking` thread, as the engine is
/// built, or on a worker thread.
///
/// # Errors
/// The file cannot be opened; the database is unreachable, refuses the
/// role, or its memory schema is newer than this binary; a URL without a
/// runtime to run on.
pub fn open_memory(db: &Path, store_url: Option<&str>) -> Result<Arc<dyn MemoryBackend>, MemoryError> {
    let Some(url) = store_url else { return Ok(Arc::new(MemoryStore::open(db)?)) };
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        MemoryError::new("<the [store] url>", "open", "the PostgreSQL memory needs the async runtime it will run on")
    })?;
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return Err(MemoryError::new(
            "<the [store] url>",
            "open",
            "the PostgreSQL memory needs a multi-threaded runtime to run on",
        ));
    }
    // Also from a worker thread: the runtime moves its other tasks away.
    let memory = tokio::task::block_in_place(|| runtime.block_on(postgres::PgMemory::connect(url)))?;
    Ok(Arc::new(memory))
}

/// Words too common to help a recall.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "does", "for", "from", "has", "have", "he", "her",
    "his", "how", "i", "if", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "that", "the",
    "their", "them", "they", "this", "to", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why",
    "will", "with", "you", "your",
];

/// The words a recall searches for: the distinct, lowercased runs of
/// letters and digits of `text`, without stopwords and one-letter words, in
/// their first order. Each is letters and digits only, so it can never be
/// query syntax in any backend.
pub fn query_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if word.chars().count() < 2 || STOPWORDS.contains(&word.as_str()) || words.contains(&word) {
            continue;
        }
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_words_are_distinct_lowercased_alphanumeric_runs() {
        assert_eq!(query_words("What's in my Garden? garden! Tomatoes"), ["garden", "tomatoes"]);
        assert_eq!(query_words("a ! ?"), Vec::<String>::new());
        assert_eq!(query_words("x&y|z !(a:*) 'ÉTÉ' \"b2b\""), ["été", "b2b"]);
    }
}
