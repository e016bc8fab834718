//! Reloading one plugin: re-read its manifest, re-resolve launchers,
//! recompile a component, then swap it into the stack atomically. A plugin
//! that fails to load changes nothing — the old version keeps answering.

use std::sync::Arc;

use serde::Serialize;

use super::AppState;
use crate::manifest::Manifest;
use crate::plugin::load_plugin;

/// What a successful reload reports (LibreFang's `{name, version, hooks_valid, …}`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Reloaded {
    pub name: String,
    pub version: String,
    pub runtime: String,
    pub hooks_valid: bool,
    pub hooks: Vec<String>,
    /// In the engine's stack, so new calls now use this version.
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

/// Reloads plugin `name` of the plugins dir.
pub(crate) async fn reload(state: &Arc<AppState>, name: &str) -> Result<Reloaded, ReloadError> {
    let dir = plugin_dir(state, name)?;
    let _one_at_a_time = state.reload_lock.lock().await;
    let loader = state.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let cx = loader.load_context();
        let lookup = |var: &str| std::env::var(var).ok();
        let manifest = Manifest::load_with_env(&dir, &lookup).map_err(|e| e.to_string())?.manifest;
        let plugin = load_plugin(&dir, &cx).map_err(|e| e.to_string())?;
        Ok::<_, String>((manifest.version, manifest.settings.runtime.to_string(), plugin))
    })
    .await
    .map_err(|e| ReloadError::Invalid(format!("the reload task failed: {e}")))?
    .map_err(ReloadError::Invalid)?;
    let (version, runtime, plugin) = loaded;
    let report = Reloaded {
        name: plugin.name.clone(),
        version,
        runtime,
        hooks_valid: true,
        hooks: plugin.hooks.iter().map(|h| h.as_str().to_owned()).collect(),
        active: false,
        warnings: plugin.warnings.clone(),
    };
    let active = state.engine.replace_layer(plugin).await;
    if active {
        tracing::info!(plugin = %name, "reloaded; new calls use the new version");
    }
    Ok(Reloaded { active, ..report })
}

/// `<plugins dir>/<name>` when `name` is a valid plugin name with a directory.
pub(crate) fn plugin_dir(state: &AppState, name: &str) -> Result<std::path::PathBuf, ReloadError> {
    crate::manifest::validate_name(name).map_err(ReloadError::Invalid)?;
    let dir = state.home.plugins_dir().join(name);
    if dir.is_dir() { Ok(dir) } else { Err(ReloadError::NotFound(name.to_owned())) }
}
