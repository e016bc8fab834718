//! The context engine: the one interface an embedder calls at each hook.
//!
//! [`ContextEngine`] is implemented by the built-in [`default::DefaultEngine`]
//! (useful on its own, and the fallback of every plugin) and, on top of it,
//! by the plugin engine and the stack. Requests and results are typed; no
//! JSON crosses this interface.
//!
//! # Example
//!
//! ```
//! use ctxhost::engine::ContextEngine;
//! use ctxhost::engine::default::{DefaultEngine, DefaultSettings};
//! use ctxhost::protocol::{AfterTurnRequest, IngestRequest, Message, Role};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let engine = DefaultEngine::open(&home.path().join("memory.db"), DefaultSettings::default())?;
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let turn = AfterTurnRequest {
//!         agent_id: "a1".into(),
//!         messages: vec![Message::text(Role::User, "My garden has basil and tomatoes")],
//!         ..Default::default()
//!     };
//!     engine.after_turn(&turn).await?;
//!     let ask = IngestRequest { agent_id: "a1".into(), message: "what grows in my garden?".into(), ..Default::default() };
//!     let recalled = engine.ingest(&ask).await?;
//!     assert_eq!(recalled[0].content, "My garden has basil and tomatoes");
//!     assert_eq!(recalled[0].source, "default");
//!     Ok::<_, ctxhost::engine::EngineError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod default;
pub mod durable;
pub mod layer;
pub mod recall;
pub mod repair;
pub mod stack;

use crate::protocol::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, IngestRequest, Message, SubagentRequest,
    TransformToolResultRequest,
};
use crate::runner::BoxFuture;

pub use default::compact::Compacted;

pub use recall::Recalled;

/// Why an engine call failed (after any fallback).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Memory(#[from] default::memory::MemoryError),
    #[error("summarizer failed: {0}")]
    Summary(String),
    #[error("background task failed: {0}")]
    Task(String),
    /// The state store (`state.db`) cannot be read: which plugins the
    /// operator turned off is unknown, so nothing starts.
    #[error("{0}; ctxhost does not start without knowing which plugins are disabled (fix or restore the file)")]
    StateFile(#[source] crate::host::filestore::StoreError),
    /// after_turn's write to the built-in memory failed: the turn is lost
    /// unless the caller sends it again.
    #[error("the turn was not stored in the built-in memory: {0}")]
    NotStored(#[source] Box<EngineError>),
    /// after_turn's plugin calls could not be journaled: they run now, but
    /// a restart would lose them, so the turn is not acknowledged.
    #[error("the turn's plugin calls could not be journaled (they run now, but would not survive a restart): {0}")]
    NotJournaled(#[source] crate::host::store::journal::JournalError),
    /// A plugin failed and its `on_hook_failure` is `abort`.
    #[error("plugin '{}' failed in `{}` (abort policy): {}", .0.plugin, .0.hook, .0.message)]
    Plugin(layer::LayerFailure),
}

/// The eight hooks of an agent's turn.
pub trait ContextEngine: Send + Sync {
    /// Once at start.
    fn bootstrap<'a>(&'a self, request: &'a BootstrapRequest) -> BoxFuture<'a, Result<(), EngineError>>;
    /// Per user message: memories to show the model.
    fn ingest<'a>(&'a self, request: &'a IngestRequest) -> BoxFuture<'a, Result<Vec<Recalled>, EngineError>>;
    /// Before each model call: the messages the model sees.
    fn assemble<'a>(&'a self, request: &'a AssembleRequest) -> BoxFuture<'a, Result<Vec<Message>, EngineError>>;
    /// When the window fills: a shorter history.
    fn compact<'a>(&'a self, request: &'a CompactRequest) -> BoxFuture<'a, Result<Compacted, EngineError>>;
    /// End of turn: learn from it.
    fn after_turn<'a>(&'a self, request: &'a AfterTurnRequest) -> BoxFuture<'a, Result<(), EngineError>>;
    /// A tool result as the model should see it.
    fn transform_tool_result<'a>(
        &'a self,
        request: &'a TransformToolResultRequest,
    ) -> BoxFuture<'a, Result<String, EngineError>>;
    fn prepare_subagent<'a>(&'a self, request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>>;
    fn merge_subagent<'a>(&'a self, request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>>;
}
