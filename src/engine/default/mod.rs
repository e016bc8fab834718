//! The built-in engine: what ctxhost does with no plugin, and what every
//! plugin falls back to. Memory behind [`memory::MemoryBackend`] (SQLite
//! with FTS5 by default, PostgreSQL full-text search), assemble by token
//! budget ([`assemble`]), compact by summary ([`compact`]), tokens counted by
//! `o200k_base` with a per-message cache ([`tokenizer`]).

pub mod assemble;
pub mod compact;
pub mod memory;
pub mod tokenizer;

use std::path::Path;
use std::sync::Arc;

use compact::{Compacted, LocalSummarizer, Summarizer};
use memory::{MemoryBackend, MemoryStore, NewMemory};
use tokenizer::{O200k, TokenCounter, Tokenizer};

use super::{ContextEngine, EngineError, Recalled};
use crate::protocol::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, IngestRequest, Memory, Message, Role,
    SubagentRequest, TransformToolResultRequest,
};
use crate::runner::BoxFuture;

/// Settings of the built-in engine (LibreFang's `[context_engine]` names).
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultSettings {
    /// Used when a request carries no window (0).
    pub context_window_tokens: u64,
    /// Caps the default recall only; plugin memories are not capped.
    pub max_recall_results: usize,
    /// Recall is skipped, so the prompt prefix stays stable across turns.
    pub stable_prefix_mode: bool,
}

impl Default for DefaultSettings {
    fn default() -> Self {
        DefaultSettings { context_window_tokens: 128_000, max_recall_results: 5, stable_prefix_mode: false }
    }
}

/// Messages remembered by the token cache before it starts over.
const TOKEN_CACHE_CAPACITY: usize = 200_000;

/// The built-in engine.
#[derive(Clone)]
pub struct DefaultEngine {
    memory: Arc<dyn MemoryBackend>,
    counter: Arc<TokenCounter>,
    summarizer: Arc<dyn Summarizer>,
    settings: DefaultSettings,
}

impl DefaultEngine {
    /// The engine with its memory at `db` (created when missing), counting
    /// with `o200k_base` and summarising locally.
    ///
    /// # Errors
    /// The memory database cannot be opened.
    pub fn open(db: &Path, settings: DefaultSettings) -> Result<Self, EngineError> {
        Ok(Self::with_memory(Arc::new(MemoryStore::open(db)?), settings))
    }

    /// The engine with its memory in `memory` (any backend), counting with
    /// `o200k_base` and summarising locally.
    pub fn with_memory(memory: Arc<dyn MemoryBackend>, settings: DefaultSettings) -> Self {
        // Built while the plugins load and bootstrap, not at the first turn.
        O200k::preload();
        Self::with_parts(memory, Box::new(O200k), Arc::new(LocalSummarizer), settings)
    }

    /// The engine from its parts (another tokenizer or summarizer).
    pub fn with_parts(
        memory: Arc<dyn MemoryBackend>,
        tokenizer: Box<dyn Tokenizer>,
        summarizer: Arc<dyn Summarizer>,
        settings: DefaultSettings,
    ) -> Self {
        let counter = Arc::new(TokenCounter::new(tokenizer, TOKEN_CACHE_CAPACITY));
        DefaultEngine { memory, counter, summarizer, settings }
    }

    pub fn settings(&self) -> &DefaultSettings {
        &self.settings
    }

    /// The built-in memory (the operator's routes browse and delete in it).
    pub fn memory(&self) -> &Arc<dyn MemoryBackend> {
        &self.memory
    }

    pub fn counter(&self) -> &TokenCounter {
        &self.counter
    }

    pub fn summarizer(&self) -> &dyn Summarizer {
        &*self.summarizer
    }

    /// Waits, off the async threads, for a tokenizer still loading.
    async fn counter_ready(&self) -> Result<(), EngineError> {
        if self.counter.is_ready() {
            return Ok(());
        }
        let counter = self.counter.clone();
        tokio::task::spawn_blocking(move || counter.wait_ready()).await.map_err(|e| EngineError::Task(e.to_string()))
    }

    fn window(&self, requested: u64) -> usize {
        let w = if requested == 0 { self.settings.context_window_tokens } else { requested };
        usize::try_from(w).unwrap_or(usize::MAX)
    }

    /// Stores memories a plugin's `after_turn` reply carried, under its name.
    pub async fn store_plugin_memories(
        &self,
        agent_id: &str,
        memories: &[Memory],
        source: &str,
    ) -> Result<usize, EngineError> {
        let rows = memories
            .iter()
            .map(|m| NewMemory {
                agent_id: agent_id.to_owned(),
                peer_id: None,
                content: m.content.clone(),
                tags: m.tags.clone(),
                source: source.to_owned(),
            })
            .collect();
        Ok(self.memory.store(rows).await?)
    }
}

impl ContextEngine for DefaultEngine {
    fn bootstrap<'a>(&'a self, _request: &'a BootstrapRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }

    fn ingest<'a>(&'a self, request: &'a IngestRequest) -> BoxFuture<'a, Result<Vec<Recalled>, EngineError>> {
        Box::pin(async move {
            if self.settings.stable_prefix_mode || self.settings.max_recall_results == 0 {
                return Ok(Vec::new());
            }
            let limit = self.settings.max_recall_results;
            let found =
                self.memory.recall(&request.agent_id, request.peer_id.as_deref(), &request.message, limit).await?;
            Ok(found.into_iter().map(|m| Recalled::new(m.content, m.source)).collect())
        })
    }

    fn assemble<'a>(&'a self, request: &'a AssembleRequest) -> BoxFuture<'a, Result<Vec<Message>, EngineError>> {
        Box::pin(async move {
            self.counter_ready().await?;
            let window = self.window(request.context_window_tokens);
            Ok(assemble::fit(&request.system_prompt, &request.messages, window, &self.counter))
        })
    }

    fn compact<'a>(&'a self, request: &'a CompactRequest) -> BoxFuture<'a, Result<Compacted, EngineError>> {
        Box::pin(async move {
            self.counter_ready().await?;
            let window = self.window(request.context_window_tokens);
            compact::compact(&request.messages, window, &self.counter, &*self.summarizer)
                .await
                .map_err(EngineError::Summary)
        })
    }

    /// Stores what the user said this turn: each user message with text
    /// (tool results and summaries are not memories), keyed by agent and, when
    /// the request carries a `peer_id`, by peer.
    fn after_turn<'a>(&'a self, request: &'a AfterTurnRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let texts: Vec<String> = request
                .messages
                .iter()
                .filter(|m| m.role == Role::User)
                .map(Message::text_content)
                .filter(|t| !t.trim().is_empty() && !t.starts_with(compact::SUMMARY_PREFIX))
                .collect();
            if texts.is_empty() {
                return Ok(());
            }
            // The spec's after_turn has no peer; an embedder may add one
            // (`peer_id`, as `ctxhost run` does) to key the turn by peer.
            let peer = request.extra.get("peer_id").and_then(serde_json::Value::as_str).map(str::to_owned);
            let rows = texts
                .into_iter()
                .map(|content| NewMemory {
                    agent_id: request.agent_id.clone(),
                    peer_id: peer.clone(),
                    content,
                    tags: Vec::new(),
                    source: "default".into(),
                })
                .collect();
            self.memory.store(rows).await?;
            Ok(())
        })
    }

    fn transform_tool_result<'a>(
        &'a self,
        request: &'a TransformToolResultRequest,
    ) -> BoxFuture<'a, Result<String, EngineError>> {
        Box::pin(async move { Ok(request.result.clone()) })
    }

    fn prepare_subagent<'a>(&'a self, _request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }

    fn merge_subagent<'a>(&'a self, _request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }
}
