//! The agent engine of a home as a view of its [`Catalog`]: every loaded
//! plugin that takes part in the agent loop, with the very load the context
//! stack has (one runner, one worker pool, one set of host services).
//! Discovers and loads nothing.

use std::sync::Arc;

use super::catalog::{Catalog, Options, State};
use crate::agent::engine::{AgentEngine, AgentPlugin};
use crate::host::services::{ServiceError, SharedServices};
use crate::metrics::Metrics;

/// Builds the agent engine from `catalog`: each loaded plugin that takes
/// part, its host services opened and attached to its (shared) runner. A
/// plugin of the catalog in error that asked for the agent loop is left out
/// with a warning and kept in [`AgentEngine::failed`]. Returns the engine
/// and the warnings.
///
/// # Errors
/// The home's state store cannot be opened, or a plugin's stored config (or
/// an old state file of its own) cannot be read — unless config.toml
/// lists the plugin in `[plugins] optional`: then it is left out and is an
/// error in the catalog.
pub fn build(
    catalog: &Catalog,
    cx: &crate::host::LoadContext<'_>,
    metrics: Arc<Metrics>,
) -> Result<(Arc<AgentEngine>, Vec<String>), ServiceError> {
    let shared = SharedServices::open(cx.home)?;
    let mut warnings = Vec::new();
    let mut plugins = Vec::new();
    let entries = catalog.entries();
    for (name, entry) in entries.iter() {
        let Some(plugin) = entry.plugin.as_ref().filter(|_| entry.status.state == State::Loaded) else {
            if let (Some(error), true) = (&entry.status.error, entry.agent_candidate) {
                warnings.push(format!("plugin '{name}' is left out of the agent loop: {error}"));
            }
            continue;
        };
        if !AgentPlugin::takes_part(plugin) {
            continue;
        }
        match AgentPlugin::new(plugin, &shared, cx.home) {
            Ok(p) => plugins.push(p),
            // A guard that cannot run must not silently stop guarding: only
            // a plugin the operator marked optional is left out.
            Err(e) if cx.config.plugins.optional.contains(name) => {
                let error = format!("its host services: {e}");
                warnings
                    .push(format!("plugin '{name}' (optional in config.toml) is left out of the agent loop: {error}"));
                catalog.fail(name, &error);
            }
            Err(e) => {
                return Err(ServiceError::service(format!(
                    "plugin '{name}' cannot run: its host services: {e}. Fix or remove that file, or \
                     let ctxhost start without the plugin: `[plugins] optional = [\"{name}\"]` in `{}`",
                    cx.home.config_file().display()
                )));
            }
        }
    }
    let engine = AgentEngine::new(plugins, shared.clone(), metrics);
    for (name, entry) in catalog.entries().iter() {
        if let Some(declared) = entry.deps_declared {
            engine.set_deps_declared(name, declared);
        }
        if let (Some(error), true) = (&entry.status.error, entry.agent_candidate) {
            engine.set_failed(name, error.clone());
        }
    }
    Ok((engine, warnings))
}

/// The agent loop alone (for an embedder, benches): a catalog of every
/// plugin and the agent engine over it. The warnings are the agent loop's,
/// then the catalog's.
///
/// # Errors
/// As [`build`].
pub fn load_agent(
    cx: &crate::host::LoadContext<'_>,
    metrics: Arc<Metrics>,
) -> Result<(Arc<AgentEngine>, Vec<String>), ServiceError> {
    let catalog = Catalog::load(cx, &Options::start(cx.config));
    let (engine, mut warnings) = build(&catalog, cx, metrics)?;
    warnings.extend(catalog.warnings());
    Ok((engine, warnings))
}
