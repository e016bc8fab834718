//! Agent-loop hooks (`../shared/spec/agent-hooks.md`): message, tool-call,
//! memory and trigger interceptors that every plugin kind can take part in,
//! and the host services plugins call.
//!
//! - [`engine`]: the agent engine — which plugins take part, chain order,
//!   the combine rules, tools, communicate, triggers through their chains.
//! - [`timers`]: its clock — due triggers, schedules, heartbeats.
//! - [`services`]: the host services as one dispatcher (config, vfs,
//!   triggers, storage, log), shared by jsonrpc workers and components.
//! - [`decision`]: how one plugin's answer is read and how answers combine
//!   (pure); [`config`], [`vfs`], [`triggers`], [`storage`]: the stores
//!   (pure of plugin calls).
//!
//! Nothing here knows how a plugin runs: calls go through `runner::Runner`.

pub mod config;
pub mod decision;
pub mod engine;
pub mod services;
pub mod storage;
pub mod timers;
pub mod triggers;
pub mod vfs;

/// Opens `plugin`'s services on `shared` and attaches them to its runner:
/// what every host of agent-loop plugins (engine, `ctxhost hook`) does after
/// loading one.
///
/// # Errors
/// The plugin's service files cannot be made or read.
pub fn attach_services(
    plugin: &crate::plugin::LoadedPlugin,
    shared: &std::sync::Arc<services::SharedServices>,
    home: &crate::home::Home,
) -> Result<std::sync::Arc<services::PluginServices>, services::ServiceError> {
    let view = services::ConfigView::existing(crate::plugin::config_view_file(home, &plugin.name));
    let s = std::sync::Arc::new(services::PluginServices::open(
        shared.clone(),
        &plugin.name,
        plugin.agent.config.clone(),
        view,
    )?);
    plugin.runner.attach_services(s.clone());
    Ok(s)
}

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
