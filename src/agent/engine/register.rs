//! Starting plugins that register at run time — FaustBot's policy: the
//! `register` hook answers what the plugin has (hooks, tools, schedules,
//! frontend, prompt suffix); only tools its plugin.json `permissions` allow
//! are kept; an import failure gets a hint about declaring dependencies; a
//! plugin that fails here is taken out and its error kept (`failed`).

use serde_json::{Map, Value, json};

use super::*;

impl AgentEngine {
    /// Records that plugin `name` could not start, with its error (what
    /// [`AgentEngine::failed`] reports).
    pub fn set_failed(&self, name: &str, error: String) {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned(), error);
    }

    /// Records whether plugin `name` declares its dependencies (for the hint
    /// when its imports fail).
    pub fn set_deps_declared(&self, name: &str, declared: bool) {
        self.deps_declared.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned(), declared);
    }

    /// Starts the plugins that register at run time (the `register` hook:
    /// FaustBot plugins load, start and say what they register). One that
    /// fails is taken out of the loop and its error kept ([`failed`]);
    /// the others go on. Returns a warning per failure and refusal.
    ///
    /// [`failed`]: AgentEngine::failed
    pub async fn start(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for p in self.plugins().iter().filter(|p| p.hooks.contains(&HookName::Register)) {
            match self.register(p).await {
                Ok(registered) => {
                    warnings.extend(refusal_warnings(&registered));
                    self.swap(&p.name, Some(registered));
                }
                Err(e) => {
                    warnings.push(format!("plugin '{}' failed to start and is left out: {e}", p.name));
                    self.swap(&p.name, None);
                    p.runner.shutdown().await;
                    self.failed.lock().unwrap_or_else(|p| p.into_inner()).insert(p.name.clone(), e);
                }
            }
        }
        warnings
    }

    /// Plugins that failed to start, with their error.
    pub fn failed(&self) -> std::collections::BTreeMap<String, String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks `plugin` to start and register (`register` hook): the plugin as
    /// registered — the hooks it implements, its tools (only those its
    /// `permissions` allow, for a FaustBot plugin), schedules, frontend,
    /// prompt suffix; what was refused is in `decl.refused`.
    ///
    /// # Errors
    /// The call failed (an import error gets a hint about declaring
    /// dependencies), or the reply is not a registration.
    pub async fn register(&self, plugin: &AgentPlugin) -> Result<AgentPlugin, String> {
        let reply = self.call(plugin, HookName::Register, Map::new()).await.map_err(|e| {
            let e = e.to_string();
            let declared = self.deps_declared.lock().unwrap_or_else(|p| p.into_inner()).get(&plugin.name).copied();
            if (e.contains("ModuleNotFoundError") || e.contains("ImportError")) && declared == Some(false) {
                format!(
                    "{e}; its imports failed and its dependencies could not be read without running it: \
                     list them in a requirements.txt beside plugin.json"
                )
            } else {
                e
            }
        })?;
        let mut decl = AgentDecl::from_json(&reply).map_err(|e| format!("its registration: {e}"))?;
        let mut hooks: BTreeSet<HookName> = reply
            .get("hooks")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(|n| n.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
        // A FaustBot plugin's runner serves every agent hook (the shim maps
        // them); others only what they declared.
        hooks.retain(|h| h.is_agent() && (plugin.faust.is_some() || plugin.hooks.contains(h)));
        if let Some(pj) = &plugin.faust {
            let (allowed, refused): (Vec<ToolSpec>, Vec<ToolSpec>) =
                decl.tools.into_iter().partition(|t| pj.permits("tool", &t.name));
            decl.tools = allowed;
            for t in refused {
                decl.refused.push(json!({"kind": "tool", "name": t.name, "reason": format!(
                    "plugin.json `permissions` does not list \"tool:{}\"", t.name)}));
            }
            let middlewares = reply.get("middlewares").and_then(Value::as_array).cloned().unwrap_or_default();
            for m in middlewares.iter().filter_map(Value::as_str).filter(|m| !pj.permits("middleware", m)) {
                decl.refused.push(json!({"kind": "middleware", "name": m, "reason": format!(
                    "plugin.json `permissions` does not list \"middleware:{m}\"")}));
            }
        }
        if decl.priority.is_none() {
            decl.priority = plugin.decl.priority;
        }
        Ok(AgentPlugin {
            name: plugin.name.clone(),
            version: plugin.version.clone(),
            order: plugin.order,
            hooks,
            decl,
            runner: plugin.runner.clone(),
            services: plugin.services.clone(),
            faust: plugin.faust.clone(),
        })
    }
}

/// A warning per registration `plugin` had refused.
pub(super) fn refusal_warnings(plugin: &AgentPlugin) -> Vec<String> {
    plugin
        .decl
        .refused
        .iter()
        .map(|r| {
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("?").to_owned();
            format!("plugin '{}': {} `{}` refused: {}", plugin.name, field("kind"), field("name"), field("reason"))
        })
        .collect()
}
