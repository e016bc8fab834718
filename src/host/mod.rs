//! The host's side of agent-loop plugins: the services plugins call
//! (`services`: config, vfs, triggers, storage, log, as one dispatcher for
//! workers and components) and the state they keep (`config`, `vfs`,
//! `triggers`, `storage`), plus the operator's records about plugins
//! (`grants`, `state`, kept by `filestore`) and the context every load reads
//! ([`LoadContext`]), and the state store in `<home>/state.db` ([`store`]:
//! today the after_turn journal).
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

/// How a service's JSON file failed to load.
#[derive(Debug, thiserror::Error)]
enum JsonFileError {
    #[error("{0}")]
    Read(std::io::Error),
    #[error("{0}")]
    Parse(serde_json::Error),
}

/// The value stored in `file`, or the default when there is no file yet:
/// how every service here loads its state.
fn load_json<T: serde::de::DeserializeOwned + Default>(file: &std::path::Path) -> Result<T, JsonFileError> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text).map_err(JsonFileError::Parse),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(JsonFileError::Read(e)),
    }
}

/// Replaces `file` with `value` as JSON, atomically; the error's text.
fn save_json<T: serde::Serialize>(file: &std::path::Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string(value).unwrap_or_else(|_| "{}".into());
    crate::home::Home::write_atomic(file, text.as_bytes()).map_err(|e| e.to_string())
}
