//! Building the agent engine of a home: every enabled plugin of the plugins
//! dir that takes part in the agent loop, a FaustBot plugin's dependencies
//! prepared first, a plugin already in the context stack sharing its runner.

use std::sync::Arc;

use crate::agent::engine::{AgentEngine, AgentPlugin};
use crate::host::services::{ServiceError, SharedServices};
use crate::metrics::Metrics;

/// Loads every enabled plugin of the plugins dir that takes part in the
/// agent loop. Plugins that fail to load are left out with a warning.
///
/// # Errors
/// The services' state under the home cannot be opened, or a plugin's
/// own state (`<home>/agent/plugins/<name>/`) cannot be — unless config.toml
/// lists the plugin in `[plugins] optional`: then it is left out, its
/// error kept in [`AgentEngine::failed`].
///
/// A plugin also in `stack` (the context engine's) shares that runner —
/// one worker pool, one set of host services — instead of a second one.
pub fn load_agent(
    cx: &crate::host::LoadContext<'_>,
    metrics: Arc<Metrics>,
    stack: Option<&crate::engine::stack::StackEngine>,
) -> Result<(Arc<AgentEngine>, Vec<String>), ServiceError> {
    let shared = SharedServices::open(&cx.home.agent_dir())?;
    let mut warnings = Vec::new();
    let mut plugins = Vec::new();
    let mut deps_declared = std::collections::BTreeMap::new();
    let mut failed = std::collections::BTreeMap::new();
    for name in crate::app::registry::installed(cx.home) {
        let dir = cx.home.plugins_dir().join(&name);
        if !crate::faust::is_plugin_dir(&dir) || !crate::app::registry::is_enabled(cx.home, &name) {
            continue;
        }
        if crate::faust::is_faust_plugin(&dir) {
            // Dependencies go in before the module is first imported.
            // Installed only when the operator turned that on.
            let install = crate::faust::deps::Install::at_start(cx.config);
            match crate::faust::deps::prepare(&dir, cx, install) {
                Ok(prepared) => {
                    deps_declared.insert(name.clone(), prepared.declared);
                }
                Err(e) => {
                    let error = format!("its dependencies: {e}");
                    warnings.push(format!("plugin '{name}' is left out of the agent loop: {error}"));
                    failed.insert(name.clone(), error);
                    continue;
                }
            }
        }
        match crate::plugin::load_plugin(&dir, cx) {
            Ok(mut plugin) if AgentPlugin::takes_part(&plugin) => {
                if let Some(layer) = stack.and_then(|s| s.layer(&name)) {
                    plugin.runner = layer.runner().clone();
                }
                match AgentPlugin::new(&plugin, &shared, cx.home) {
                    Ok(p) => plugins.push(p),
                    // A guard that cannot run must not silently stop
                    // guarding: only a plugin the operator marked
                    // optional is left out.
                    Err(e) if cx.config.plugins.optional.contains(&name) => {
                        let error = format!("its host services: {e}");
                        warnings.push(format!(
                            "plugin '{name}' (optional in config.toml) is left out of the agent loop: {error}"
                        ));
                        failed.insert(name.clone(), error);
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
            Ok(_) => {}
            Err(e) => {
                warnings.push(format!("plugin '{name}' is left out of the agent loop: {e}"));
                if crate::faust::is_faust_plugin(&dir) {
                    failed.insert(name.clone(), e.to_string());
                }
            }
        }
    }
    let engine = AgentEngine::new(plugins, shared.clone(), metrics);
    for (name, declared) in deps_declared {
        engine.set_deps_declared(&name, declared);
    }
    for (name, error) in failed {
        engine.set_failed(&name, error);
    }
    Ok((engine, warnings))
}
