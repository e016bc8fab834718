//! The host's side of agent-loop plugins: the services plugins call
//! (`services`: config, vfs, triggers, storage, log, as one dispatcher for
//! workers and components) and the state they keep (`config`, `vfs`,
//! `triggers`, `storage`), plus the operator's records about plugins
//! (`grants`, `state`, kept by `filestore`) and the context every load reads
//! ([`LoadContext`]), and the state store in `<home>/state.db` ([`store`]:
//! what `config`, `vfs`, `triggers`, `storage` and `state` keep, and the
//! after_turn journal).
//!
//! This layer sits below the runners: it never runs a plugin and never loads
//! one. A service that needs a plugin call (a symbolic read, a trigger
//! chain) asks through [`services::HostCalls`], which the agent engine
//! implements above.

pub mod config;
mod context;
pub mod filestore;
pub mod grants;
pub mod services;
pub mod state;
pub mod storage;
pub mod store;
pub mod triggers;
pub mod vfs;

pub use context::LoadContext;

/// A boxed, sendable future (runners are used as trait objects).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Replaces `file` with `value` as JSON, atomically; the error's text. A
/// value that cannot be serialised is an error, never an empty file.
fn save_json<T: serde::Serialize>(file: &std::path::Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string(value).map_err(|e| format!("`{}`: cannot serialise: {e}", file.display()))?;
    crate::home::Home::write_atomic(file, text.as_bytes()).map_err(|e| format!("`{}`: {e}", file.display()))
}
