//! One plugin of the agent loop ([`AgentPlugin`]): which loaded plugins take
//! part, their services attached, their place in chain order, and the
//! warning when two register the same tool.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::super::decision::{self, PrioritySource};
use crate::host::services::{PluginServices, ServiceError, SharedServices};
use crate::manifest::AgentDecl;
use crate::plugin::LoadedPlugin;
use crate::protocol::HookName;
use crate::runner::Runner;

/// One plugin of the agent loop.
pub struct AgentPlugin {
    pub name: String,
    pub version: String,
    /// Ascending chain order (ties by name).
    pub order: i64,
    pub hooks: BTreeSet<HookName>,
    pub decl: AgentDecl,
    pub runner: Arc<dyn Runner>,
    pub services: Arc<PluginServices>,
    /// A FaustBot plugin's plugin.json (permissions, priority).
    pub faust: Option<Arc<crate::faust::PluginJson>>,
}

impl AgentPlugin {
    /// Whether a loaded plugin takes part in the agent loop at all (a
    /// jsonrpc worker does, for its host services, even with context hooks
    /// only).
    pub fn takes_part(plugin: &LoadedPlugin) -> bool {
        let d = &plugin.agent;
        plugin.hooks.iter().any(|h| h.is_agent())
            || plugin.settings.worker_protocol == crate::manifest::WorkerProtocol::Jsonrpc
            || !d.tools.is_empty()
            || !d.schedules.is_empty()
            || !d.config.is_empty()
            || d.prompt_suffix.is_some()
            || !d.frontend.js.is_empty()
            || !d.frontend.css.is_empty()
    }

    /// `plugin` with its services opened on `shared` and attached.
    ///
    /// # Errors
    /// Its service files cannot be made or read.
    /// The runner is shared with whoever else holds `plugin` (a reload puts
    /// one load into both the context stack and the agent loop).
    pub fn new(
        plugin: &LoadedPlugin,
        shared: &Arc<SharedServices>,
        home: &crate::home::Home,
    ) -> Result<AgentPlugin, ServiceError> {
        let services = crate::plugin::attach_services(plugin, shared, home)?;
        // plugin.json orders smaller first, plugin.toml larger first.
        let source = match &plugin.faust {
            Some(pj) => PrioritySource::Json(Some(pj.priority)),
            None => PrioritySource::Toml(plugin.agent.priority),
        };
        Ok(AgentPlugin {
            faust: plugin.faust.clone(),
            order: decision::order_key(source),
            name: plugin.name.clone(),
            version: plugin.version.clone(),
            hooks: plugin.hooks.clone(),
            decl: plugin.agent.clone(),
            runner: plugin.runner.clone(),
            services,
        })
    }
}

/// Sorts plugins into chain order: ascending order key, ties by name.
pub(super) fn sort_chain<P: Borrow<AgentPlugin>>(plugins: &mut [P]) {
    plugins.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name))
    });
}

/// Warns about each tool name a later plugin (in chain order) registers
/// again: calls go to the first.
pub(super) fn warn_shadowed_tools<P: Borrow<AgentPlugin>>(plugins: &[P]) {
    let mut owners: std::collections::BTreeMap<&str, &str> = Default::default();
    for p in plugins.iter().map(Borrow::borrow) {
        for t in &p.decl.tools {
            if let Some(first) = owners.get(t.name.as_str()) {
                tracing::warn!(
                    "plugin '{}' registers tool `{}`, which plugin '{first}' (earlier in the chain) has; calls go to '{first}'",
                    p.name,
                    t.name
                );
            } else {
                owners.insert(&t.name, &p.name);
            }
        }
    }
}
