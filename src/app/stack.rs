//! The context engine of a home as a view of its [`Catalog`]: the built-in
//! engine under the layers config.toml's `[context_engine]` names, each the
//! catalog's one load of that plugin (a disabled or broken one kept as an
//! empty slot so a reload can bring it in). Discovers and loads nothing.

use std::sync::Arc;

use super::catalog::{Catalog, MANUAL_HOOKS, Options, State};
use crate::engine::EngineError;
use crate::engine::default::memory::{MemoryError, open_memory};
use crate::engine::default::{DefaultEngine, DefaultSettings};
use crate::engine::layer::Layer;
use crate::engine::stack::{StackEngine, StackLayer, StackSettings};
use crate::metrics::Metrics;

/// Builds the engine `config.toml` describes from `catalog`: the built-in
/// engine (memory at `[memory] path`, else in the `[store] url` database,
/// else `<home>/memory.db`) under the
/// layers of `[context_engine] plugin_stack` (or `plugin`, or the manual
/// hooks). A layer whose plugin is disabled, broken or not installed is left
/// out with a warning; the rest of the stack works. Returns the engine and
/// the warnings (about the stack only; the catalog's own are
/// [`Catalog::warnings`]).
///
/// Needs a multi-threaded tokio runtime to be current when the memory is in
/// PostgreSQL.
///
/// # Errors
/// The memory database cannot be opened, or the state store (`state.db`, which
/// plugins are disabled) cannot be
/// read (a disabled plugin must never run because its record is broken).
pub fn build(catalog: &Catalog, cx: &crate::host::LoadContext<'_>) -> Result<(StackEngine, Vec<String>), EngineError> {
    crate::host::state::disabled(cx.home).map_err(EngineError::StateFile)?;
    let engine_config = &cx.config.context_engine;
    let db = cx.config.memory.path.clone().unwrap_or_else(|| cx.home.root().join("memory.db"));
    // `[memory] path` names a SQLite file and wins (`ctxhost run` always sets
    // one); without it, `[store] url` holds the memory in PostgreSQL, shared
    // by every instance on that store.
    let url = match &cx.config.memory.path {
        Some(_) => None,
        None => crate::host::store::store_url(cx.home)
            .map_err(|e| MemoryError::new("<the [store] url>", "open", e.message()))?,
    };
    let default = DefaultEngine::with_memory(
        open_memory(&db, url.as_deref())?,
        DefaultSettings {
            context_window_tokens: engine_config.context_window_tokens,
            max_recall_results: engine_config.max_recall_results,
            stable_prefix_mode: engine_config.stable_prefix_mode,
        },
    );
    let limiter = Arc::new(tokio::sync::Semaphore::new(cx.config.max_concurrent_hooks.max(1)));
    let metrics = Arc::new(Metrics::default());
    let mut warnings = Vec::new();
    let mut layers = Vec::new();
    let manual = catalog.manual();
    let names = match &manual {
        Some(_) => vec![MANUAL_HOOKS.to_owned()],
        None => engine_config.stack(),
    };
    for name in names {
        let weight = engine_config.weight(&name);
        let entry = match &manual {
            Some(m) => Some(m.clone()),
            None => catalog.entry(&name),
        };
        let Some(entry) = entry else {
            warnings.push(format!(
                "plugin '{name}' is left out of the stack: no plugin `{name}` in `{}`",
                cx.home.plugins_dir().display()
            ));
            layers.push(StackLayer::empty(name.clone(), weight));
            continue;
        };
        match (&entry.plugin, entry.status.state) {
            (Some(plugin), State::Loaded) => {
                let layer = Layer::new(
                    name.clone(),
                    plugin.runner.clone(),
                    plugin.settings.clone(),
                    plugin.hooks.clone(),
                    limiter.clone(),
                    metrics.clone(),
                );
                layers.push(StackLayer::new(Arc::new(layer), weight));
            }
            (_, State::Disabled) => {
                warnings.push(format!(
                    "plugin '{name}' is disabled (`ctxhost plugin enable {name}` turns it on); it is left out of the stack"
                ));
                layers.push(StackLayer::empty(name.clone(), weight));
            }
            _ if entry.refused.is_some() => {
                let error = entry.status.error.as_deref().unwrap_or("its version is not the fleet's");
                warnings.push(format!(
                    "plugin '{name}' is refused on this instance: calls of its hooks ({}) are answered with an error \
                     until it agrees with the fleet: {error}",
                    entry.status.hooks.join(", ")
                ));
                layers.push(StackLayer::empty(name.clone(), weight));
            }
            _ => {
                let error = entry.status.error.as_deref().unwrap_or("it did not load");
                warnings.push(format!("plugin '{name}' is left out of the stack: {error}"));
                // Kept as an empty slot: once fixed, a reload brings it in.
                layers.push(StackLayer::empty(name.clone(), weight));
            }
        }
    }
    let settings = StackSettings {
        stable_prefix_mode: engine_config.stable_prefix_mode,
        after_turn_text_limit: engine_config.after_turn_text_limit,
    };
    Ok((StackEngine::with_limiter(default, layers, settings, metrics, limiter), warnings))
}

/// The context stack alone (for an embedder, the sidecar, tests): a catalog
/// of the stack's plugins, and the engine over it. The warnings are the
/// stack's, then the catalog's.
///
/// # Errors
/// As [`build`].
pub fn load_stack(cx: &crate::host::LoadContext<'_>) -> Result<(StackEngine, Vec<String>), EngineError> {
    let catalog = Catalog::load(cx, &Options::stack(cx.config));
    let (engine, mut warnings) = build(&catalog, cx)?;
    warnings.extend(catalog.warnings());
    Ok((engine, warnings))
}
