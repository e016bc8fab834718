//! The built-in memory on PostgreSQL: several ctxhost instances share one
//! memory. Full-text search with a `tsvector` column and a GIN index,
//! ranked by BM25 computed in SQL ([`recall_sql`]), keyed by agent and peer
//! as the SQLite backend is.
//!
//! - Tokenisation matches the SQLite path: ctxhost splits the content into
//!   runs of letters and digits, lowercased ([`index_text`], the same rule as
//!   [`query_words`]), stores them in `words`, and the generated column is
//!   `to_tsvector('simple', words)` (no stemming, no stopwords: FTS5's
//!   `unicode61` stems nothing either). So `alice@example.com` is
//!   `alice example com` on both backends, not one e-mail token, and the
//!   database's locale does not decide what a word is. Diacritics are
//!   folded as `unicode61` folds them ([`fold_word`]: `café` is
//!   `cafe`), in the stored words and in the query words alike. Only the
//!   first [`INDEXED_TEXT_MAX`] bytes of words are indexed (a `tsvector`
//!   holds at most 1 MB).
//! - The query is a `tsquery` of quoted words joined by `|`, cast, never
//!   parsed from user text: each word is letters and digits only.
//! - Idempotent writes: `UNIQUE (agent_id, peer_id, content_sha)` (the
//!   content's SHA-256, computed here: a b-tree entry cannot hold a long
//!   text) and
//!   `ON CONFLICT DO NOTHING`; a batch is one transaction, inserted in key
//!   order so concurrent batches never deadlock.
//! - Its own versioned schema (tables named `memory_*`, the version in
//!   `memory_schema`), migrated at connect under a transaction-scoped
//!   advisory lock, so instances starting together do not race; a schema
//!   newer than this binary is an error, never touched.
//!
//! TLS as the store's connections ([`crate::host::store::postgres::tls`]).
//!
//! Never logs or shows the password of the URL ([`location`]).

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio_postgres::config::Host;

use super::{MemoryBackend, MemoryEntry, MemoryError, NewMemory, StoredMemory, query_words};
use crate::host::store::postgres::tls::{Tls, TlsDefaults};
use crate::runner::BoxFuture;

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i32 = 3;

/// Each migration, version `i + 1` at index `i`.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE memory_items (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id TEXT NOT NULL,
    peer_id TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    content_sha BYTEA NOT NULL,
    words TEXT NOT NULL,
    word_count INT NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', words)) STORED,
    tags TEXT[] NOT NULL DEFAULT '{}',
    source TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (agent_id, peer_id, content_sha)
);
CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);
",
    "
-- perf (i16): each memory's term frequencies, so a recall ranks without
-- unnesting every matching tsvector (the same counts: a lexeme's positions).
CREATE FUNCTION memory_tf(tsvector) RETURNS jsonb LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS
    'SELECT coalesce(jsonb_object_agg(lexeme, cardinality(positions)), ''{}''::jsonb) FROM unnest($1)';
ALTER TABLE memory_items ADD COLUMN tf JSONB GENERATED ALWAYS AS (memory_tf(to_tsvector('simple', words))) STORED;
",
    "
-- fold: the words of memories stored before diacritics were folded are
-- written again by `refold` (Rust: the fold is `fold_word`).
",
];

/// The version whose migration rewrites the words of older rows ([`refold`]).
const REFOLD_VERSION: i32 = 3;

/// Rows [`refold`] reads at a time.
const REFOLD_BATCH: i64 = 500;

/// The advisory lock the migration holds (`ctxhost.memory` as a number).
const MIGRATION_LOCK: i64 = 0x6374_7868_6d65_6d31;

/// How many bytes of a memory's words are indexed.
pub const INDEXED_TEXT_MAX: usize = 128 * 1024;

/// Connections the pool keeps at most.
const POOL_SIZE: usize = 16;

/// How long connecting, or waiting for a free connection, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Query words up to which a recall's statement is kept prepared per
/// connection (one per word count); longer queries are prepared per call.
const CACHED_WORDS_MAX: usize = 16;

/// A recall of `words` query words: the memories in scope that hold a
/// query word (`tsv @@` the tsquery, the GIN index or the agent's rows, as
/// the planner finds cheaper), ranked by Okapi BM25 (k1 = 1.2, b = 0.75,
/// FTS5's constants) with the statistics of those matches — document
/// frequencies and the average length among the memories that hold any
/// query word, not the whole table, so a recall costs in proportion to its
/// matches. One pass over the matches reads each word's term frequency from
/// the `tf` column (`memory_tf`, the tsvector's position counts; one
/// expression per word, hence one statement per word count), a second
/// scores them, and only the best `$4` are joined back for their content.
/// Both CTEs are `MATERIALIZED`: inlined, the one-row statistics would be
/// recomputed for every match whenever the planner (a generic plan, a table
/// not yet analysed) expects one match.
/// `ts_rank` is not comparable: a word's second mention adds a quarter,
/// rare words weigh no more, and its length normalisation flips the order
/// of repeated mentions against short memories. Ties: newest first, as on
/// SQLite. `$1` agent, `$2` peer or `''`, `$3` the tsquery, `$4` the limit,
/// `$5`… the words.
fn recall_sql(words: usize) -> String {
    let tf: Vec<String> = (0..words).map(|i| format!("(tf ->> ${}::text)::float8 AS t{i}", i + 5)).collect();
    let idf: Vec<String> = (0..words)
        .map(|i| format!("ln(1 + (count(*) - count(t{i}) + 0.5::float8) / (count(t{i}) + 0.5::float8)) AS i{i}"))
        .collect();
    let score: Vec<String> = (0..words)
        .map(|i| format!("coalesce(s.i{i} * h.t{i} * 2.2 / (h.t{i} + 1.2 * (0.25 + 0.75 * h.dl / s.avgdl)), 0)"))
        .collect();
    format!(
        "WITH hits AS MATERIALIZED (
            SELECT id, word_count::float8 AS dl, {tf} FROM memory_items
            WHERE agent_id = $1 AND (peer_id = $2 OR peer_id = '') AND tsv @@ CAST($3::text AS tsquery)
        ),
        s AS MATERIALIZED (SELECT greatest(avg(dl), 1) AS avgdl, {idf} FROM hits),
        top AS (
            SELECT h.id, {score} AS score FROM hits h CROSS JOIN s ORDER BY score DESC, h.id DESC LIMIT $4
        )
        SELECT m.content, m.tags, m.source FROM top JOIN memory_items m ON m.id = top.id
        ORDER BY top.score DESC, top.id DESC",
        tf = tf.join(", "),
        idf = idf.join(", "),
        score = score.join(" + "),
    )
}

/// The PostgreSQL memory (cheap to clone: a pool).
#[derive(Clone)]
pub struct PgMemory {
    pool: Pool,
    location: String,
}

impl PgMemory {
    /// Connects to `url` (`postgres://user[:password]@host/db`, or a unix
    /// socket directory as `?host=/path`) and migrates the memory's tables.
    ///
    /// # Errors
    /// The URL is malformed, the database is unreachable or refuses the
    /// role, or its memory schema is newer than this binary.
    pub async fn connect(url: &str) -> Result<Self, MemoryError> {
        Self::connect_with(url, &TlsDefaults::from_env()).await
    }

    /// [`PgMemory::connect`] with the TLS defaults given rather than read
    /// from the environment.
    ///
    /// # Errors
    /// See [`PgMemory::connect`]; also a TLS setting that cannot be used
    /// (an unknown `sslmode`, an unreadable `sslrootcert`).
    pub async fn connect_with(url: &str, defaults: &TlsDefaults) -> Result<Self, MemoryError> {
        let (url, tls) = Tls::from_url(url, defaults)
            .map_err(|e| MemoryError::new(crate::config::redact_url(url), "open", e.to_string()))?;
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| MemoryError::new("<the [store] url>", "open", format!("not a PostgreSQL URL: {e}")))?;
        let location = location(&config);
        let mut config = config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        tls.apply(&mut config);
        let manager =
            Manager::from_config(config, tls.connector(), ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| MemoryError::new(&location, "open", e))?;
        let memory = PgMemory { pool, location };
        memory.migrate().await?;
        Ok(memory)
    }

    fn fail(&self, op: &'static str) -> impl Fn(tokio_postgres::Error) -> MemoryError + '_ {
        move |e| MemoryError::new(&self.location, op, describe(&e))
    }

    async fn client(&self, op: &'static str) -> Result<deadpool_postgres::Object, MemoryError> {
        self.pool.get().await.map_err(|e| {
            let reason = match &e {
                deadpool_postgres::PoolError::Backend(e) => describe(e),
                other => other.to_string(),
            };
            MemoryError::new(&self.location, op, format!("cannot connect: {reason}"))
        })
    }

    /// Brings the schema to [`SCHEMA_VERSION`] under the advisory lock.
    async fn migrate(&self) -> Result<(), MemoryError> {
        let fail = self.fail("migrate");
        let mut client = self.client("open").await?;
        let tx = client.transaction().await.map_err(&fail)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(&fail)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS memory_schema (version INT NOT NULL)").await.map_err(&fail)?;
        let current: i32 =
            tx.query_one("SELECT coalesce(max(version), 0) FROM memory_schema", &[]).await.map_err(&fail)?.get(0);
        if current > SCHEMA_VERSION {
            return Err(MemoryError::new(
                &self.location,
                "migrate",
                format!(
                    "the memory schema is version {current}, newer than this ctxhost's {SCHEMA_VERSION}: \
                     an instance of a newer ctxhost migrated it; run that version"
                ),
            ));
        }
        for (version, sql) in (1..).zip(MIGRATIONS).skip(usize::try_from(current).unwrap_or(0)) {
            tx.batch_execute(sql).await.map_err(&fail)?;
            if version == REFOLD_VERSION {
                let n = refold(&tx).await.map_err(&fail)?;
                if n > 0 {
                    tracing::info!("{}: the words of {n} memories folded (diacritics)", self.location);
                }
            }
            tx.execute("INSERT INTO memory_schema (version) VALUES ($1)", &[&version]).await.map_err(&fail)?;
        }
        tx.commit().await.map_err(&fail)
    }
}

/// `postgres://user@host/db`: the URL without its password, for messages.
pub fn location(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    format!("postgres://{}@{}/{}", config.get_user().unwrap_or(""), hosts.join(","), config.get_dbname().unwrap_or(""))
}

/// A driver error with the server's message (and detail), never a password.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({}): {detail}", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => {
            // The driver's own text leaves out its cause (an I/O error).
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            text
        }
    }
}

/// Rewrites the words of the rows written before diacritics were folded
/// (those with a character beyond ASCII), in id order, a batch at a time;
/// the generated `tsv` and `tf` follow. How many rows changed.
async fn refold(tx: &deadpool_postgres::Transaction<'_>) -> Result<u64, tokio_postgres::Error> {
    let (mut after, mut changed) = (0_i64, 0);
    loop {
        let rows = tx
            .query(
                "SELECT id, content, words FROM memory_items \
                 WHERE id > $1 AND octet_length(words) <> char_length(words) ORDER BY id LIMIT $2",
                &[&after, &REFOLD_BATCH],
            )
            .await?;
        let Some(last) = rows.last() else { return Ok(changed) };
        after = last.get(0);
        for row in &rows {
            let (id, content, words): (i64, &str, &str) = (row.get(0), row.get(1), row.get(2));
            let folded = index_text(content);
            if folded != words {
                changed += tx.execute("UPDATE memory_items SET words = $2 WHERE id = $1", &[&id, &folded]).await?;
            }
        }
    }
}

/// `word` lowercased, with diacritics removed, as SQLite FTS5's
/// `unicode61` tokenizer does both (`remove_diacritics 1`, its default): a
/// character whose canonical decomposition is one ASCII letter or digit and
/// one combining mark becomes that letter (`é` → `e`, `Ü` → `u`, `ş` → `s`,
/// `İ` → `i`; the long `ſ` is `s`); others stay as they are (`ß`, `ø`, `ł`
/// have no such decomposition; a letter with two marks, as Vietnamese `ế`,
/// keeps them). `diacritics_fold_as_sqlite_fts5_folds_them` holds it to
/// SQLite's own tokenizer over the Latin blocks.
pub fn fold_word(word: &str) -> String {
    use unicode_normalization::char::{decompose_canonical, is_combining_mark};
    let fold = |c: char| -> char {
        if c.is_ascii() {
            return c;
        }
        let mut parts = [None, None, None];
        let mut n = 0;
        decompose_canonical(c, |p| {
            if let Some(slot) = parts.get_mut(n) {
                *slot = Some(p);
            }
            n += 1;
        });
        match parts {
            [Some('ſ'), Some(mark), None] if is_combining_mark(mark) => 's',
            [Some(base), Some(mark), None] if base.is_ascii_alphanumeric() && is_combining_mark(mark) => base,
            _ if c == 'ſ' => 's',
            _ => c,
        }
    };
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        let mut lower = c.to_lowercase();
        match (lower.next(), lower.next(), lower.next()) {
            // `İ` lowercases to `i` and a combining dot: one folded letter.
            (Some(base), Some(mark), None) if base.is_ascii_alphanumeric() && is_combining_mark(mark) => out.push(base),
            (Some(a), b, c) => out.extend([Some(a), b, c].into_iter().flatten().chain(lower).map(fold)),
            (None, _, _) => {}
        }
    }
    out
}

/// The words of `content` as the index sees them: its runs of letters and
/// digits, lowercased and diacritics folded ([`fold_word`]), joined by
/// spaces, at most [`INDEXED_TEXT_MAX`] bytes.
pub fn index_text(content: &str) -> String {
    let mut out = String::new();
    for word in content.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = fold_word(word);
        if out.len() + word.len() + 1 > INDEXED_TEXT_MAX {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&word);
    }
    out
}

/// `'word1' | 'word2' …` from [`query_words`]; `None` when nothing is left
/// to search for.
fn ts_query(words: &[String]) -> Option<String> {
    if words.is_empty() {
        return None;
    }
    // Letters and digits only; the escape keeps it a lexeme regardless.
    let quoted: Vec<String> =
        words.iter().map(|w| format!("'{}'", w.replace('\\', "\\\\").replace('\'', "''"))).collect();
    Some(quoted.join(" | "))
}

/// Stores one memory unless its agent, peer and content are stored.
const INSERT: &str = "INSERT INTO memory_items
    (agent_id, peer_id, content, content_sha, words, word_count, tags, source)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";

/// Runs [`INSERT`] (prepared on this connection) for `m`: 1 if it was new.
async fn insert_one(
    client: &impl deadpool_postgres::GenericClient,
    insert: &tokio_postgres::Statement,
    m: &NewMemory,
) -> Result<u64, tokio_postgres::Error> {
    let peer = m.peer_id.as_deref().unwrap_or("");
    let words = index_text(&m.content);
    let sha = Sha256::digest(m.content.as_bytes()).to_vec();
    let count = i32::try_from(words.split(' ').filter(|w| !w.is_empty()).count()).unwrap_or(i32::MAX);
    client.execute(insert, &[&m.agent_id, &peer, &m.content, &sha, &words, &count, &m.tags, &m.source]).await
}

impl MemoryBackend for PgMemory {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn store(&self, memories: Vec<NewMemory>) -> BoxFuture<'_, Result<usize, MemoryError>> {
        Box::pin(async move {
            let mut rows: Vec<NewMemory> = memories.into_iter().filter(|m| !m.content.trim().is_empty()).collect();
            // One lock order for every writer: no deadlock between batches.
            rows.sort_by(|a, b| (&a.agent_id, &a.peer_id, &a.content).cmp(&(&b.agent_id, &b.peer_id, &b.content)));
            rows.dedup_by(|a, b| (&a.agent_id, &a.peer_id, &a.content) == (&b.agent_id, &b.peer_id, &b.content));
            if rows.is_empty() {
                return Ok(0);
            }
            let fail = self.fail("store");
            let mut client = self.client("store").await?;
            let insert = client.prepare_cached(INSERT).await.map_err(&fail)?;
            let added = if let [m] = rows.as_slice() {
                // One statement is its own transaction: one round trip, not three.
                insert_one(&client, &insert, m).await.map_err(&fail)?
            } else {
                let tx = client.transaction().await.map_err(&fail)?;
                let mut added = 0;
                for m in &rows {
                    added += insert_one(&tx, &insert, m).await.map_err(&fail)?;
                }
                tx.commit().await.map_err(&fail)?;
                added
            };
            Ok(usize::try_from(added).unwrap_or(usize::MAX))
        })
    }

    fn recall<'a>(
        &'a self,
        agent_id: &'a str,
        peer_id: Option<&'a str>,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<StoredMemory>, MemoryError>> {
        Box::pin(async move {
            // Folded as the stored words are (two query words may fold into one).
            let mut words: Vec<String> = Vec::new();
            for w in query_words(query).iter().map(|w| fold_word(w)) {
                if !words.contains(&w) {
                    words.push(w);
                }
            }
            let Some(ts_query) = ts_query(&words) else { return Ok(Vec::new()) };
            if limit == 0 {
                return Ok(Vec::new());
            }
            let fail = self.fail("recall");
            let client = self.client("recall").await?;
            let sql = recall_sql(words.len());
            let stmt = if words.len() <= CACHED_WORDS_MAX {
                client.prepare_cached(&sql).await
            } else {
                client.prepare(&sql).await
            }
            .map_err(&fail)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let peer = peer_id.unwrap_or("");
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&agent_id, &peer, &ts_query, &limit];
            params.extend(words.iter().map(|w| w as &(dyn tokio_postgres::types::ToSql + Sync)));
            let rows = client.query(&stmt, &params).await.map_err(&fail)?;
            Ok(rows.iter().map(|r| StoredMemory { content: r.get(0), tags: r.get(1), source: r.get(2) }).collect())
        })
    }

    fn browse<'a>(
        &'a self,
        agent_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            let fail = self.fail("browse");
            let client = self.client("browse").await?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            const COLUMNS: &str = "id, peer_id, content, tags, source, (extract(epoch FROM created_at) * 1000)::bigint";
            let rows = if query.trim().is_empty() {
                let sql = format!("SELECT {COLUMNS} FROM memory_items WHERE agent_id = $1 ORDER BY id DESC LIMIT $2");
                client.query(&sql, &[&agent_id, &limit]).await.map_err(&fail)?
            } else {
                let Some(ts_query) = ts_query(&query_words(query)) else { return Ok(Vec::new()) };
                let sql = format!(
                    "SELECT {COLUMNS} FROM memory_items WHERE agent_id = $1 AND tsv @@ CAST($2::text AS tsquery)
                     ORDER BY ts_rank(tsv, CAST($2::text AS tsquery)) DESC, id DESC LIMIT $3"
                );
                client.query(&sql, &[&agent_id, &ts_query, &limit]).await.map_err(&fail)?
            };
            Ok(rows
                .iter()
                .map(|r| {
                    let peer: String = r.get(1);
                    MemoryEntry {
                        id: r.get(0),
                        peer_id: (!peer.is_empty()).then_some(peer),
                        content: r.get(2),
                        tags: r.get(3),
                        source: r.get(4),
                        created_ms: r.get(5),
                    }
                })
                .collect())
        })
    }

    fn delete<'a>(&'a self, agent_id: &'a str, id: i64) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            let client = self.client("delete").await?;
            let n = client
                .execute("DELETE FROM memory_items WHERE id = $1 AND agent_id = $2", &[&id, &agent_id])
                .await
                .map_err(self.fail("delete"))?;
            Ok(n > 0)
        })
    }

    fn count<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<usize, MemoryError>> {
        Box::pin(async move {
            let client = self.client("count").await?;
            let row = client
                .query_one("SELECT count(*) FROM memory_items WHERE agent_id = $1", &[&agent_id])
                .await
                .map_err(self.fail("count"))?;
            Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_text_is_the_words_a_query_finds() {
        assert_eq!(
            index_text("Bob's e-mail: alice@Example.COM, v10.4 — Über!"),
            "bob s e mail alice example com v10 4 uber"
        );
        let long = "word ".repeat(INDEXED_TEXT_MAX);
        let indexed = index_text(&long);
        assert!(indexed.len() <= INDEXED_TEXT_MAX && indexed.len() > INDEXED_TEXT_MAX - 8, "{}", indexed.len());
    }

    /// The fold is FTS5's: every character of the Latin blocks (and a few
    /// others) is tokenised by SQLite's `unicode61` and by [`index_text`]
    /// into the same word.
    #[test]
    fn diacritics_fold_as_sqlite_fts5_folds_them() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x); CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');",
        )
        .unwrap();
        let chars: Vec<char> = (0xC0..=0x24F_u32)
            .chain(0x1E00..=0x1EFF)
            .chain([0x391, 0x3AC, 0x3CC, 0x401, 0x419, 0x439, 0x4E9, 0xFB01])
            .filter_map(char::from_u32)
            .filter(|c| c.is_alphanumeric())
            .collect();
        for (i, c) in chars.iter().enumerate() {
            db.execute("INSERT INTO t (rowid, x) VALUES (?1, ?2)", rusqlite::params![i as i64 + 1, format!("q{c}z")])
                .unwrap();
        }
        let mut stmt = db.prepare("SELECT doc, term FROM v ORDER BY doc").unwrap();
        let sqlite: Vec<(i64, String)> =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
        let mut differ = Vec::new();
        for (doc, term) in sqlite {
            let c = chars[usize::try_from(doc).unwrap() - 1];
            let ours = index_text(&format!("q{c}z"));
            if ours != term {
                differ.push(format!("U+{:04X} {c}: sqlite {term:?}, ours {ours:?}", c as u32));
            }
        }
        assert!(differ.is_empty(), "{} differ:\n{}", differ.len(), differ.join("\n"));
        assert_eq!(index_text("Crème Brûlée in São Paulo, Łódź, Straße"), "creme brulee in sao paulo łodz straße");
    }

    #[test]
    fn ts_query_is_quoted_words_only() {
        let q = |text: &str| ts_query(&query_words(text));
        assert_eq!(q("garden & !tomatoes:* | ('basil')").as_deref(), Some("'garden' | 'tomatoes' | 'basil'"));
        assert_eq!(q("& | ! ( ) : * ' \""), None);
    }

    #[test]
    fn location_has_no_password() {
        let config: tokio_postgres::Config = "postgres://ann:s3cret@db.example:5432/ctx".parse().unwrap();
        assert_eq!(location(&config), "postgres://ann@db.example/ctx");
        let config: tokio_postgres::Config = "postgres://postgres@/t1?host=/tmp/pg%20dir".parse().unwrap();
        assert_eq!(location(&config), "postgres://postgres@/tmp/pg dir/t1");
    }
}
