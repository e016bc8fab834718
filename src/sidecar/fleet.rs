//! The sidecar's plugins among the instances on one shared store: which
//! calls are refused because a stack plugin's files here are not the
//! fleet's version (`app::catalog::fleet`), and the store's change feed
//! applied to the stack, as `ctxhost serve` applies it (config values,
//! enable/disable, grants, reloads and adopted versions through any
//! instance reach the sidecar within a second or two).
//!
//! The sidecar has no agent loop, so every entry about a stack plugin means
//! one thing here: reload that layer from this home's files (which reads
//! its config values, enable choice and grant from the store and compares
//! its hash with the fleet's). A plugin that no longer matches is taken out
//! and refused; one that fails to load otherwise keeps its running version.
//! Must never append to the feed, or touch stdin/stdout.

use std::sync::Arc;

use crate::app::catalog::fleet::Refusal;
use crate::app::catalog::{self, Catalog, State};
use crate::app::follow::{Follower, adopt_changes};
use crate::config::HostConfig;
use crate::engine::stack::StackEngine;
use crate::home::Home;
use crate::host::LoadContext;
use crate::host::store::feed::{Feed, FeedEntry};
use crate::protocol::HookName;

/// The catalog behind the sidecar's stack, and what reloading one of its
/// plugins needs.
pub struct Plugins {
    catalog: Catalog,
    home: Home,
    config: HostConfig,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl Plugins {
    /// `catalog` is the one the stack was built from.
    pub fn new(catalog: Catalog, home: Home, config: HostConfig) -> Plugins {
        Plugins { catalog, home, config, reloading: tokio::sync::Mutex::new(()) }
    }

    fn load_context(&self) -> LoadContext<'_> {
        LoadContext { home: &self.home, config: &self.config, host_env: &LoadContext::process_env }
    }

    /// A plugin of `engine`'s stack that declares `hook` and is refused here.
    pub fn refusing(&self, engine: &StackEngine, hook: HookName) -> Option<Arc<Refusal>> {
        self.catalog.refusing_in_stack(engine, hook)
    }

    /// Every refused plugin (for the log at start).
    pub fn refused(&self) -> Vec<Arc<Refusal>> {
        self.catalog.refused()
    }
}

/// Starts applying `feed` after id `seen` (read before the catalog was
/// loaded) to `engine`'s stack.
pub fn follow(engine: Arc<StackEngine>, plugins: Arc<Plugins>, feed: Arc<dyn Feed>, seen: i64) -> Follower {
    crate::app::follow::follow(feed, seen, move |entry| {
        let (engine, plugins) = (engine.clone(), plugins.clone());
        async move {
            apply(&engine, &plugins, entry).await;
            true
        }
    })
}

async fn apply(engine: &Arc<StackEngine>, plugins: &Arc<Plugins>, entry: FeedEntry) {
    let name = entry.plugin.clone();
    let Some(kind) = entry.kind else {
        tracing::debug!("change {}: a kind this ctxhost does not know; skipped", entry.id);
        return;
    };
    if !engine.configured_names().contains(&name) {
        return;
    }
    if kind == crate::host::store::feed::ChangeKind::Adopt {
        let (looker, plugin, payload) = (plugins.clone(), name.clone(), entry.payload.clone());
        let changes = crate::host::store::off_runtime("feed_adopt", move || {
            adopt_changes(&looker.catalog, &looker.load_context(), &plugin, &payload)
        })
        .await;
        if matches!(changes, Ok(false)) {
            return;
        }
    }
    reload(engine, plugins, &name, kind.as_str()).await;
}

/// Reloads stack plugin `name` from this home's files.
async fn reload(engine: &Arc<StackEngine>, plugins: &Arc<Plugins>, name: &str, why: &str) {
    let _one_at_a_time = plugins.reloading.lock().await;
    let (loader, plugin) = (plugins.clone(), name.to_owned());
    let loaded = tokio::task::spawn_blocking(move || {
        let cx = loader.load_context();
        catalog::load_one(&plugin, &cx, &catalog::Options::stack(&loader.config))
    })
    .await;
    let entry = match loaded {
        Ok(entry) => entry,
        Err(e) => {
            tracing::warn!(plugin = %name, "{why} through another instance: the reload task failed: {e}");
            return;
        }
    };
    let catalog = &plugins.catalog;
    match (&entry.refused, entry.status.state, &entry.plugin) {
        (Some(refusal), _, _) => {
            engine.clear_layer(name);
            tracing::warn!(plugin = %name, "{why} through another instance: refused here: {refusal}");
            catalog.put(name, entry.clone());
        }
        (None, State::Disabled, _) => {
            engine.clear_layer(name);
            tracing::info!(plugin = %name, "{why} through another instance: disabled, taken out of the stack");
            catalog.put(name, entry.clone());
        }
        (None, State::Loaded, Some(plugin)) => {
            engine.replace_layer(plugin).await;
            tracing::info!(plugin = %name, "{why} through another instance: reloaded");
            catalog.put(name, entry.clone());
        }
        _ => {
            let error = entry.status.error.clone().unwrap_or_else(|| "it did not load".to_owned());
            tracing::warn!(plugin = %name, "{why} through another instance: the reload failed: {error}");
            catalog.reload_failed(name, &entry, &error);
        }
    }
}
