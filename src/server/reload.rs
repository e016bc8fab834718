//! Reloading one plugin: re-read its manifest, re-resolve launchers,
//! recompile a component, then swap it into the stack atomically. A plugin
//! that fails to load changes nothing — the old version keeps answering.

use std::sync::Arc;

use serde::Serialize;

use super::AppState;
use crate::plugin::load_plugin;

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
    #[error("Plugin '{0}' not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

/// Reloads plugin `name` of the plugins dir. A disabled plugin is taken
/// out of the stack instead (its slot stays for a later reload).
pub(crate) async fn reload(state: &Arc<AppState>, name: &str) -> Result<Reloaded, ReloadError> {
    let dir = plugin_dir(state, name)?;
    let _one_at_a_time = state.reload_lock.lock().await;
    let loader = state.clone();
    let plugin_name = name.to_owned();
    let plugin = tokio::task::spawn_blocking(move || {
        let cx = loader.load_context();
        if crate::faust::is_faust_plugin(&dir) && crate::app::registry::is_enabled(&loader.home, &plugin_name) {
            // Dependencies go in before the module is first imported — and
            // only when the operator turned installs at start on.
            let install = crate::faust::deps::Install::at_start(cx.config);
            let prepared = crate::faust::deps::prepare(&dir, &cx, install)
                .map_err(|e| format!("plugin '{plugin_name}': its dependencies: {e}"))?;
            loader.agent.set_deps_declared(&plugin_name, prepared.declared);
        }
        let plugin = load_plugin(&dir, &cx).map_err(|e| e.to_string())?;
        // Loading succeeds for a plugin whose launcher is missing (a call
        // would say so); a reload must not swap such a plugin in.
        plugin.runner.ready().map_err(|e| format!("plugin '{}' cannot run: {e}", plugin.name))?;
        Ok::<_, String>(plugin)
    })
    .await
    .map_err(|e| ReloadError::Invalid(format!("the reload task failed: {e}")))?
    .map_err(ReloadError::Invalid)?;
    let mut report = Reloaded {
        name: plugin.name.clone(),
        version: plugin.version.clone(),
        runtime: plugin.settings.runtime.to_string(),
        hooks_valid: true,
        hooks: plugin.hooks.iter().map(|h| h.as_str().to_owned()).collect(),
        active: false,
        warnings: plugin.warnings.clone(),
    };
    if !crate::app::registry::is_enabled(&state.home, name) {
        if state.engine.clear_layer(name) {
            tracing::info!(plugin = %name, "disabled: taken out of the stack");
        }
        if state.agent.plugin(name).is_some() || state.agent.failed().contains_key(name) {
            // Also forgets a start failure: a disabled plugin is not failing.
            state.agent.replace(name, None).await;
            tracing::info!(plugin = %name, "disabled: taken out of the agent loop");
        }
        report.warnings.push(format!("plugin '{name}' is disabled; `ctxhost plugin enable {name}` turns it on"));
        return Ok(report);
    }
    // The agent loop gets the same load (one runner) when the plugin takes
    // part in it, and loses it when it no longer does.
    let agent_plugin = if crate::agent::engine::AgentPlugin::takes_part(&plugin) {
        let built = crate::agent::engine::AgentPlugin::new(&plugin, state.agent.shared(), &state.home);
        let built = built.map_err(|e| ReloadError::Invalid(format!("plugin '{name}': host services: {e}")))?;
        // A plugin that registers at run time starts before it is swapped in:
        // one that fails leaves the running version in place.
        if built.hooks.contains(&crate::protocol::HookName::Register) {
            let registered = state.agent.register(&built).await;
            match registered {
                Ok(p) => Some(p),
                Err(e) => {
                    built.runner.shutdown().await;
                    return Err(ReloadError::Invalid(format!("plugin '{name}' failed to start: {e}")));
                }
            }
        } else {
            Some(built)
        }
    } else {
        None
    };
    let in_loop = agent_plugin.is_some();
    if in_loop || state.agent.plugin(name).is_some() {
        state.agent.replace(name, agent_plugin).await;
    }
    report.active = state.engine.replace_layer(plugin).await || in_loop;
    if report.active {
        tracing::info!(plugin = %name, "reloaded; new calls use the new version");
    }
    Ok(report)
}

/// `<plugins dir>/<name>` when `name` is a valid plugin name with a directory.
pub(crate) fn plugin_dir(state: &AppState, name: &str) -> Result<std::path::PathBuf, ReloadError> {
    crate::manifest::validate_name(name).map_err(ReloadError::Invalid)?;
    let dir = state.home.plugins_dir().join(name);
    if dir.is_dir() { Ok(dir) } else { Err(ReloadError::NotFound(name.to_owned())) }
}
