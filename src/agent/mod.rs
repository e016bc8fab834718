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
//!   (pure); [`config`], [`vfs`], [`triggers`], [`storage`]: what the
//!   records mean (paths, owners, kinds, schemas) over the state store
//!   (`host::store`), pure of plugin calls.
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
/// The plugin's stored config cannot be read, or an old state file of its
/// own cannot be imported (named; it is left as it was).
pub fn attach_services(
    plugin: &crate::plugin::LoadedPlugin,
    shared: &std::sync::Arc<services::SharedServices>,
    home: &crate::home::Home,
) -> Result<std::sync::Arc<services::PluginServices>, services::ServiceError> {
    // Its own old state files, left by an older ctxhost (or written by hand).
    crate::host::store::migrate::plugin(home, &**shared.store(), &plugin.name)
        .map_err(|e| services::ServiceError::service(e.to_string()))?;
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

/// Replaces `file` with `value` as JSON, atomically; the error's text. A
/// value that cannot be serialised is an error, never an empty file.
fn save_json<T: serde::Serialize>(file: &std::path::Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string(value).map_err(|e| format!("`{}`: cannot serialise: {e}", file.display()))?;
    crate::home::Home::write_atomic(file, text.as_bytes()).map_err(|e| format!("`{}`: {e}", file.display()))
}
