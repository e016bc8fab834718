//! Building the context engine of a home: the built-in engine under the
//! layers config.toml's `[context_engine]` names, each loaded from the
//! plugins dir (a disabled or broken one kept as an empty slot so a reload
//! can bring it in).

use std::sync::Arc;

use crate::engine::EngineError;
use crate::engine::default::{DefaultEngine, DefaultSettings};
use crate::engine::layer::Layer;
use crate::engine::stack::{StackEngine, StackLayer, StackSettings};
use crate::metrics::Metrics;

/// Builds the engine `config.toml` describes: the built-in engine (memory at
/// `[memory] path`, default `<home>/memory.db`) under the layers of
/// `[context_engine] plugin_stack` (or `plugin`), looked up in the plugins
/// dir. A layer that fails to load is left out with a warning; the rest of
/// the stack works. Returns the engine and the warnings.
///
/// # Errors
/// The memory database cannot be opened, or `plugins-state.toml` cannot be
/// read (a disabled plugin must never run because its record is broken).
pub fn load_stack(cx: &crate::host::LoadContext<'_>) -> Result<(StackEngine, Vec<String>), EngineError> {
    crate::host::state::disabled(cx.home).map_err(EngineError::StateFile)?;
    let engine_config = &cx.config.context_engine;
    let db = cx.config.memory.path.clone().unwrap_or_else(|| cx.home.root().join("memory.db"));
    let default = DefaultEngine::open(
        &db,
        DefaultSettings {
            context_window_tokens: engine_config.context_window_tokens,
            max_recall_results: engine_config.max_recall_results,
            stable_prefix_mode: engine_config.stable_prefix_mode,
        },
    )?;
    let limiter = Arc::new(tokio::sync::Semaphore::new(cx.config.max_concurrent_hooks.max(1)));
    let metrics = Arc::new(Metrics::default());
    let mut warnings = Vec::new();
    let mut layers = Vec::new();
    let stack = engine_config.stack();
    let manual = engine_config.hooks.as_ref().filter(|h| !h.is_empty());
    if manual.is_some() && !stack.is_empty() {
        warnings.push("[context_engine.hooks] is ignored: `plugin` or `plugin_stack` is set (as in LibreFang)".into());
    }
    let sources: Vec<(String, Option<&toml::Table>)> = if stack.is_empty() && manual.is_some() {
        vec![("hooks".to_owned(), manual)]
    } else {
        stack.into_iter().map(|name| (name, None)).collect()
    };
    for (name, manual) in sources {
        if manual.is_none() && !crate::app::registry::is_enabled(cx.home, &name) {
            warnings.push(format!(
                "plugin '{name}' is disabled (`ctxhost plugin enable {name}` turns it on); it is left out of the stack"
            ));
            layers.push(StackLayer::empty(name.clone(), engine_config.weight(&name)));
            continue;
        }
        let loaded = match manual {
            Some(hooks) => crate::plugin::load_manual_hooks(hooks, cx)
                .map(|(runner, warnings)| crate::plugin::LoadedPlugin::script(runner, warnings)),
            None => crate::plugin::load_plugin(&cx.home.plugins_dir().join(&name), cx),
        };
        match loaded {
            Ok(plugin) => {
                warnings.extend(plugin.warnings.into_iter().map(|w| format!("plugin '{name}': {w}")));
                let layer = Layer::new(
                    name.clone(),
                    plugin.runner,
                    plugin.settings,
                    plugin.hooks,
                    limiter.clone(),
                    metrics.clone(),
                );
                layers.push(StackLayer::new(Arc::new(layer), engine_config.weight(&name)));
            }
            Err(e) => {
                warnings.push(format!("plugin '{name}' is left out of the stack: {e}"));
                // Kept as an empty slot: once fixed, a reload brings it in.
                layers.push(StackLayer::empty(name.clone(), engine_config.weight(&name)));
            }
        }
    }
    let settings = StackSettings {
        stable_prefix_mode: engine_config.stable_prefix_mode,
        after_turn_text_limit: engine_config.after_turn_text_limit,
    };
    Ok((StackEngine::with_limiter(default, layers, settings, metrics, limiter), warnings))
}
