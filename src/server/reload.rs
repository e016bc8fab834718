//! Reloading one plugin: the catalog loads it afresh through the one path a
//! start takes (`app::catalog::load_one`: its FaustBot dependencies, its
//! manifest, launcher, component, checks), then this swaps that one load
//! into the stack and the agent loop atomically and records it in the
//! catalog. A plugin that fails to load or to start changes nothing — the
//! old version keeps answering, and its status says a reload failed.

use std::sync::Arc;

use serde::Serialize;

use super::AppState;
use crate::app::catalog::{self, Options, State};

/// What a successful reload reports (LibreFang's `{name, version, hooks_valid, …}`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Reloaded {
    pub name: String,
    pub version: String,
    pub runtime: String,
    pub hooks_valid: bool,
    pub hooks: Vec<String>,
    /// In the engine's stack or the agent loop, so new calls now use this version.
    pub active: bool,
    pub warnings: Vec<String>,
}

/// Why a reload did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReloadError {
    /// LibreFang's 404 text, and the nearest plugin name when one is near.
    #[error("Plugin '{name}' not found{hint}")]
    NotFound { name: String, hint: String },
    /// Not a plugin name (the manifest rules').
    #[error("{0}")]
    InvalidName(String),
    /// The catalog could not load it: its status's error.
    #[error("plugin '{name}': {error}")]
    Load { name: String, error: String },
    /// Its host services could not be opened.
    #[error("plugin '{name}': its host services: {source}")]
    Services { name: String, source: crate::host::services::ServiceError },
    /// It loaded but its `register` failed (the call's error).
    #[error("plugin '{name}' failed to start: {error}")]
    Start { name: String, error: String },
    /// The blocking load task itself failed (a panic in a loader).
    #[error("the reload task failed: {0}")]
    Task(String),
    /// Its files here are not the fleet's version: it was taken out and
    /// its calls are refused (`app::catalog::fleet`).
    #[error("plugin '{plugin}' is refused on this instance: {0}", plugin = .0.plugin)]
    Refused(Arc<catalog::fleet::Refusal>),
}

impl ReloadError {
    /// Which step refused the reload: `not_found`, `name`, `load`,
    /// `services`, `start`, `task`, `version` (the `stage` of the route's 400 body).
    pub(crate) fn stage(&self) -> &'static str {
        match self {
            ReloadError::NotFound { .. } => "not_found",
            ReloadError::InvalidName(_) => "name",
            ReloadError::Load { .. } => "load",
            ReloadError::Services { .. } => "services",
            ReloadError::Start { .. } => "start",
            ReloadError::Task(_) => "task",
            ReloadError::Refused(_) => "version",
        }
    }
}

/// Reloads plugin `name` of the plugins dir. A disabled plugin is taken
/// out of the stack and the agent loop instead (its stack slot stays for a
/// later reload); so is one whose files are not the fleet's version — it is
/// refused (unlike other failed reloads, the running version does not stay:
/// that would serve a version the other instances no longer run).
pub(crate) async fn reload(state: &Arc<AppState>, name: &str) -> Result<Reloaded, ReloadError> {
    reload_with(state, name, catalog::fleet::Rule::Record).await
}

/// [`reload`], with what it does to the store's record of the plugin's
/// version: the reload route's is the operator's ([`catalog::fleet::Rule::Adopt`]:
/// these files become the version every instance runs); a reload another
/// instance asked for (the change feed), `--watch` and enable only compare.
pub(crate) async fn reload_with(
    state: &Arc<AppState>,
    name: &str,
    versions: catalog::fleet::Rule,
) -> Result<Reloaded, ReloadError> {
    plugin_dir(state, name)?;
    let _one_at_a_time = state.reload_lock.lock().await;
    let loader = state.clone();
    let plugin_name = name.to_owned();
    let entry = tokio::task::spawn_blocking(move || {
        let cx = loader.load_context();
        catalog::load_one(&plugin_name, &cx, &Options { versions, ..Options::start(&loader.config) })
    })
    .await
    .map_err(|e| ReloadError::Task(e.to_string()))?;
    let status = &entry.status;
    let mut report = Reloaded {
        name: name.to_owned(),
        version: status.version.clone(),
        runtime: status.runtime.clone(),
        hooks_valid: status.hooks_valid,
        hooks: status.hooks.clone(),
        active: false,
        warnings: status.warnings.clone(),
    };
    if let Some(refusal) = entry.refused.clone() {
        take_out(state, name).await;
        state.catalog.put(name, entry.clone());
        state.catalog.sync(&state.engine, &state.agent);
        return Err(ReloadError::Refused(refusal));
    }
    let plugin = match (status.state, &entry.plugin) {
        (State::Disabled, _) => {
            take_out(state, name).await;
            state.catalog.put(name, entry.clone());
            state.catalog.sync(&state.engine, &state.agent);
            report.warnings.push(format!("plugin '{name}' is disabled; `ctxhost plugin enable {name}` turns it on"));
            return Ok(report);
        }
        (State::Loaded, Some(plugin)) => plugin.clone(),
        _ => {
            let error = status.error.clone().unwrap_or_else(|| "it did not load".to_owned());
            state.catalog.reload_failed(name, &entry, &error);
            return Err(ReloadError::Load { name: name.to_owned(), error });
        }
    };
    // The agent loop gets the same load (one runner) when the plugin takes
    // part in it, and loses it when it no longer does.
    let agent_plugin = if crate::agent::engine::AgentPlugin::takes_part(&plugin) {
        let built = crate::agent::engine::AgentPlugin::new(&plugin, state.agent.shared(), &state.home);
        let built = match built {
            Ok(built) => built,
            Err(source) => {
                state.catalog.reload_failed(name, &entry, &format!("its host services: {source}"));
                return Err(ReloadError::Services { name: name.to_owned(), source });
            }
        };
        // A plugin that registers at run time starts before it is swapped in:
        // one that fails leaves the running version in place.
        if built.hooks.contains(&crate::protocol::HookName::Register) {
            let registered = state.agent.register(&built).await;
            match registered {
                Ok(p) => Some(p),
                Err(e) => {
                    built.runner.shutdown().await;
                    state.catalog.reload_failed(name, &entry, &format!("failed to start: {e}"));
                    return Err(ReloadError::Start { name: name.to_owned(), error: e });
                }
            }
        } else {
            Some(built)
        }
    } else {
        None
    };
    let in_loop = agent_plugin.is_some();
    if in_loop || state.agent.plugin(name).is_some() || state.agent.failed().contains_key(name) {
        state.agent.replace(name, agent_plugin).await;
    }
    report.active = state.engine.replace_layer(&plugin).await || in_loop;
    state.catalog.put(name, entry.clone());
    state.catalog.sync(&state.engine, &state.agent);
    if report.active {
        tracing::info!(plugin = %name, "reloaded; new calls use the new version");
    }
    Ok(report)
}

/// Takes plugin `name` out of the stack (its slot stays) and the agent loop.
async fn take_out(state: &AppState, name: &str) {
    if state.engine.clear_layer(name) {
        tracing::info!(plugin = %name, "taken out of the stack");
    }
    if state.agent.plugin(name).is_some() || state.agent.failed().contains_key(name) {
        // Also forgets a start failure: a plugin that does not run is not failing.
        state.agent.replace(name, None).await;
        tracing::info!(plugin = %name, "taken out of the agent loop");
    }
}

/// Tells the other instances on the store (its change feed, if it has one)
/// that the operator reloaded `name` here: each reloads it from its own
/// files. A failure is logged; the reload here stands.
pub(crate) async fn announce(state: &Arc<AppState>, name: &str) {
    let Some(feed) = state.feed.clone() else { return };
    let plugin = name.to_owned();
    let noted = crate::host::store::off_runtime("feed_note", move || {
        feed.note(crate::host::store::feed::ChangeKind::Reload, &plugin, &serde_json::json!({}))
    })
    .await;
    if let Err(e) = noted.and_then(|r| r) {
        tracing::warn!(plugin = %name, "reloaded here, but the other instances were not told: {e}");
    }
}

/// `<plugins dir>/<name>` when `name` is a valid plugin name with a directory.
pub(crate) fn plugin_dir(state: &AppState, name: &str) -> Result<std::path::PathBuf, ReloadError> {
    crate::manifest::validate_name(name).map_err(ReloadError::InvalidName)?;
    let dir = state.home.plugins_dir().join(name);
    if dir.is_dir() {
        return Ok(dir);
    }
    // The plugins the daemon knows (every plugin dir it loaded), as the CLI
    // suggests from the plugins dir.
    let known = state.catalog.entries();
    let hint = crate::hint::did_you_mean(name, known.keys().map(String::as_str));
    Err(ReloadError::NotFound { name: name.to_owned(), hint })
}
