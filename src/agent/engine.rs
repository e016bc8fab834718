//! The agent engine: every enabled plugin that takes part in the agent loop,
//! in chain order, and the rules of `agent-hooks.md` for asking them — chains
//! of pass/replace/block, observers, tools wrapped by `tool_call_pre/post`,
//! `communicate` routed by id, `config_changed` after every set, the
//! `trigger_append` chain before a trigger is stored, symbolic vfs reads.
//!
//! Unlike the context engine's `plugin_stack`, membership is not configured:
//! a plugin that declares an agent hook or registration takes part. Each
//! plugin call is isolated — an error, a timeout or a reply that is not a
//! decision is logged, counted in [`Metrics`] and treated as a pass.
//!
//! The background work (trigger watcher, schedules, heartbeats) lives in
//! [`super::timers`]; this module never sleeps.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::config::Change;
use super::decision::{self, Form, Outcome, PrioritySource};
use super::services::{HostCalls, PluginServices, ServiceError, SharedServices};
use crate::manifest::{AgentDecl, ToolSpec};
use crate::metrics::{CallOutcome, Metrics};
use crate::plugin::LoadedPlugin;
use crate::protocol::{AgentRequest, HookName, HookRequest};
use crate::runner::{BoxFuture, CallOptions, Runner};

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
        let services = super::attach_services(plugin, shared, home)?;
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

/// A chain a plugin stopped.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Blocked {
    pub plugin: String,
    pub reason: String,
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool's result, after `tool_call_post`.
    Result { result: Value, is_error: bool },
    /// `tool_call_pre` denied it: the reason goes to the model.
    Blocked(Blocked),
}

/// Why a tool or communicate call could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error("no tool `{name}`{hint}")]
    UnknownTool { name: String, hint: String },
    #[error("no plugin '{name}' in the agent loop{hint}")]
    UnknownPlugin { name: String, hint: String },
    #[error("plugin '{plugin}' does not handle `{hook}`")]
    NoHook { plugin: String, hook: HookName },
    #[error("plugin '{plugin}' failed at `{hook}`: {error}")]
    Failed { plugin: String, hook: HookName, error: String },
    #[error("plugin '{plugin}' answered `{hook}` with {found}, not a JSON object")]
    NotAnObject { plugin: String, hook: HookName, found: &'static str },
}

/// The agent engine.
pub struct AgentEngine {
    plugins: arc_swap::ArcSwap<Vec<Arc<AgentPlugin>>>,
    shared: Arc<SharedServices>,
    metrics: Arc<Metrics>,
    /// Triggers fired (after `trigger_fire`), oldest first, for the embedder.
    fired: Mutex<std::collections::VecDeque<Value>>,
    fired_tx: tokio::sync::broadcast::Sender<Value>,
    /// Per plugin, the queue its `config_changed` calls go through, one at a
    /// time and in the order of the sets.
    me: std::sync::Weak<AgentEngine>,
    /// Plugins that failed to start (`register`), with the error.
    failed: Mutex<std::collections::BTreeMap<String, String>>,
    /// Whether each FaustBot plugin declares its dependencies.
    deps_declared: Mutex<std::collections::BTreeMap<String, bool>>,
    config_queues: Mutex<std::collections::HashMap<String, ConfigQueue>>,
}

/// The sending end of one plugin's `config_changed` queue.
type ConfigQueue = tokio::sync::mpsc::UnboundedSender<Map<String, Value>>;

/// How many fired triggers are kept for `fired()`.
const FIRED_KEPT: usize = 256;

/// The field a chain hook rewrites: what `replace` replaces.
pub fn subject(hook: HookName) -> Option<&'static str> {
    Some(match hook {
        HookName::MessageReceived => "text",
        HookName::LlmRequestPre => "messages",
        HookName::ToolCallPre => "args",
        HookName::ToolCallPost => "result",
        HookName::AgentEventSent => "event",
        HookName::MemoryReadPre => "query",
        HookName::MemoryReadPost => "results",
        HookName::MemoryWritePre => "content",
        HookName::TriggerAppend | HookName::TriggerFire => "trigger",
        _ => return None,
    })
}

fn form(hook: HookName) -> Form {
    if matches!(hook, HookName::MessageReceived | HookName::AgentEventSent) {
        Form::StringsReplaceOrBlock
    } else {
        Form::Strict
    }
}

impl AgentEngine {
    /// An engine over `plugins` (sorted here into chain order), connected to
    /// `shared` so the services can call back into it.
    pub fn new(mut plugins: Vec<AgentPlugin>, shared: Arc<SharedServices>, metrics: Arc<Metrics>) -> Arc<Self> {
        sort_chain(&mut plugins);
        warn_shadowed_tools(&plugins);
        for p in &plugins {
            p.runner.attach_metrics(metrics.clone());
            if let Err(e) = p.services.publish_config() {
                tracing::warn!("plugin '{}': {e}", p.name);
            }
        }
        let (fired_tx, _) = tokio::sync::broadcast::channel(FIRED_KEPT);
        let engine = Arc::new_cyclic(|me| AgentEngine {
            me: me.clone(),
            failed: Mutex::new(Default::default()),
            deps_declared: Mutex::new(Default::default()),
            plugins: arc_swap::ArcSwap::from_pointee(plugins.into_iter().map(Arc::new).collect()),
            shared: shared.clone(),
            metrics,
            fired: Mutex::new(Default::default()),
            fired_tx,
            config_queues: Mutex::new(Default::default()),
        });
        let weak: std::sync::Weak<dyn HostCalls> = Arc::downgrade(&(engine.clone() as Arc<dyn HostCalls>));
        shared.connect(weak);
        engine
    }

    /// Loads every enabled plugin of the plugins dir that takes part in the
    /// agent loop. Plugins that fail to load are left out with a warning.
    ///
    /// # Errors
    /// The home's state store cannot be opened, or a plugin's stored config
    /// cannot be read — unless config.toml
    /// lists the plugin in `[plugins] optional`: then it is left out, its
    /// error kept in [`AgentEngine::failed`].
    ///
    /// A plugin also in `stack` (the context engine's) shares that runner —
    /// one worker pool, one set of host services — instead of a second one.
    pub fn load(
        cx: &crate::plugin::LoadContext<'_>,
        metrics: Arc<Metrics>,
        stack: Option<&crate::engine::stack::StackEngine>,
    ) -> Result<(Arc<AgentEngine>, Vec<String>), ServiceError> {
        let shared = SharedServices::open(cx.home)?;
        let mut warnings = Vec::new();
        let mut plugins = Vec::new();
        let mut deps_declared = std::collections::BTreeMap::new();
        let mut failed = std::collections::BTreeMap::new();
        for name in crate::registry::installed(cx.home) {
            let dir = cx.home.plugins_dir().join(&name);
            if !crate::faust::is_plugin_dir(&dir) || !crate::registry::is_enabled(cx.home, &name) {
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
        engine.deps_declared.lock().unwrap_or_else(|p| p.into_inner()).extend(deps_declared);
        engine.failed.lock().unwrap_or_else(|p| p.into_inner()).extend(failed);
        Ok((engine, warnings))
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

    /// Puts `plugin` in place of plugin `name` (or takes it out), keeping the
    /// chain order; nothing is stopped.
    fn swap(&self, name: &str, plugin: Option<AgentPlugin>) {
        let mut list: Vec<Arc<AgentPlugin>> = self.plugins.load().iter().filter(|p| p.name != name).cloned().collect();
        if let Some(p) = plugin {
            list.push(Arc::new(p));
        }
        sort_chain(&mut list);
        warn_shadowed_tools(&list);
        self.plugins.store(Arc::new(list));
    }

    pub fn shared(&self) -> &Arc<SharedServices> {
        &self.shared
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The plugins, in chain order.
    pub fn plugins(&self) -> Arc<Vec<Arc<AgentPlugin>>> {
        self.plugins.load_full()
    }

    pub fn plugin(&self, name: &str) -> Option<Arc<AgentPlugin>> {
        self.plugins.load().iter().find(|p| p.name == name).cloned()
    }

    /// Puts `plugin` in (replacing one of the same name) or, with `None`,
    /// takes plugin `name` out. The old one is told (`unload`) and its
    /// workers are stopped. On a reload the new one has already started, so
    /// a failing new version leaves the old one running; the old one's
    /// `unload` comes after the new one's start.
    pub async fn replace(&self, name: &str, plugin: Option<AgentPlugin>) {
        let old = self.plugin(name);
        if let Some(p) = &plugin {
            p.runner.attach_metrics(self.metrics.clone());
            if let Err(e) = p.services.publish_config() {
                tracing::warn!("plugin '{}': {e}", p.name);
            }
        }
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.swap(name, plugin);
        if let Some(old) = old {
            self.unload(&old).await;
        }
    }

    /// `unload` (when the plugin has it), then its workers stop.
    async fn unload(&self, plugin: &AgentPlugin) {
        if plugin.hooks.contains(&HookName::Unload) {
            let _ = self.call(plugin, HookName::Unload, Map::new()).await;
        }
        plugin.runner.shutdown().await;
    }

    fn unknown_plugin(&self, name: &str) -> AgentError {
        let plugins = self.plugins.load();
        AgentError::UnknownPlugin {
            name: name.to_owned(),
            hint: crate::hint::did_you_mean(name, plugins.iter().map(|p| p.name.as_str())),
        }
    }

    /// One plugin call, timed and counted; a failure is `Err(text)`.
    async fn call(&self, plugin: &AgentPlugin, hook: HookName, fields: Map<String, Value>) -> Result<Value, String> {
        self.call_checked(plugin, hook, fields, None).await
    }

    /// [`AgentEngine::call`]; with `form`, a reply that is not a decision
    /// counts as a failed call too.
    async fn call_checked(
        &self,
        plugin: &AgentPlugin,
        hook: HookName,
        fields: Map<String, Value>,
        form: Option<Form>,
    ) -> Result<Value, String> {
        let request = HookRequest::Agent(AgentRequest::new(hook, fields));
        let started = Instant::now();
        // The plugins this task is inside of: a service call made during this
        // call that would ask one of them again (a trigger_append chain, a
        // symbolic read) skips it instead of waiting on its busy worker.
        let mut stack = in_call();
        stack.push(plugin.name.clone());
        let options = CallOptions::default();
        let call = plugin.runner.call(&request, &options);
        let reply = IN_CALL.scope(stack, call).await.map_err(|e| e.to_string());
        let reply = match (reply, form) {
            (Ok(v), Some(form)) => match decision::Decision::from_reply(&v, form) {
                Ok(_) => Ok(v),
                Err(e) => Err(e.to_string()),
            },
            (other, _) => other,
        };
        let outcome = if reply.is_ok() { CallOutcome::Success } else { CallOutcome::Failure };
        self.metrics.record(&plugin.name, hook, started.elapsed(), outcome);
        reply.map_err(|e| {
            tracing::warn!(plugin = %plugin.name, hook = %hook, "agent hook failed (counted as pass): {e}");
            e
        })
    }

    fn members(&self, hook: HookName, except: Option<&str>) -> Vec<Arc<AgentPlugin>> {
        let busy = in_call();
        self.plugins
            .load()
            .iter()
            .filter(|p| p.hooks.contains(&hook) && Some(p.name.as_str()) != except && !busy.contains(&p.name))
            .cloned()
            .collect()
    }

    /// Runs chain hook `hook` over `fields` (its subject field rewritten by
    /// each replace): the final fields, or the block.
    pub async fn chain(&self, hook: HookName, fields: Map<String, Value>) -> Result<Map<String, Value>, Blocked> {
        self.chain_except(hook, fields, None).await
    }

    async fn chain_except(
        &self,
        hook: HookName,
        mut fields: Map<String, Value>,
        except: Option<&str>,
    ) -> Result<Map<String, Value>, Blocked> {
        let Some(key) = subject(hook) else { return Ok(fields) };
        let members = self.members(hook, except);
        if members.is_empty() {
            return Ok(fields);
        }
        let names: Vec<String> = members.iter().map(|p| p.name.clone()).collect();
        let initial = fields.remove(key).unwrap_or(Value::Null);
        let base = &fields;
        let (outcome, skipped) = decision::chain(&names, initial, form(hook), |name, value| {
            let plugin = members.iter().find(|p| p.name == name).cloned();
            let mut request = base.clone();
            request.insert(key.to_owned(), value.clone());
            async move {
                match plugin {
                    Some(p) => self.call_checked(&p, hook, request, Some(form(hook))).await,
                    None => Err("gone".into()),
                }
            }
        })
        .await;
        // Each skipped plugin was logged and counted by `call_checked`.
        drop(skipped);
        match outcome {
            Outcome::Value(v) => {
                fields.insert(key.to_owned(), v);
                Ok(fields)
            }
            Outcome::Blocked { plugin, reason } => Err(Blocked { plugin, reason }),
        }
    }

    /// Calls observer hook `hook` on every plugin that has it, in order
    /// (replies ignored; failures counted).
    pub async fn observe(&self, hook: HookName, fields: Map<String, Value>) {
        for p in self.members(hook, None) {
            let _ = self.call(&p, hook, fields.clone()).await;
        }
    }

    /// `message_received`: the text to go on with, or the block (message
    /// dropped).
    pub async fn message_received(
        &self,
        agent_id: &str,
        text: &str,
        origin: &str,
        history: Value,
    ) -> Result<String, Blocked> {
        let fields = obj(json!({"agent_id": agent_id, "text": text, "origin": origin, "history": history}));
        let out = self.chain(HookName::MessageReceived, fields).await?;
        Ok(match out.get("text") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
    }

    /// `llm_request_pre`: the messages to send.
    pub async fn llm_request_pre(&self, agent_id: &str, messages: Value) -> Value {
        let fields = obj(json!({"agent_id": agent_id, "messages": messages.clone()}));
        match self.chain(HookName::LlmRequestPre, fields).await {
            Ok(mut f) => f.remove("messages").unwrap_or(messages),
            // A block is not a rule of this hook: the request goes out as it was.
            Err(_) => messages,
        }
    }

    /// `tool_call_pre`: the (possibly rewritten) args, or the denial.
    pub async fn tool_call_pre(&self, agent_id: &str, name: &str, args: Value) -> Result<Value, Blocked> {
        let fields = obj(json!({"agent_id": agent_id, "name": name, "args": args}));
        let mut out = self.chain(HookName::ToolCallPre, fields).await?;
        Ok(out.remove("args").unwrap_or(Value::Null))
    }

    /// `tool_call_post`: the result the model sees.
    pub async fn tool_call_post(
        &self,
        agent_id: &str,
        name: &str,
        args: &Value,
        result: Value,
        is_error: bool,
    ) -> Value {
        let fields = obj(
            json!({"agent_id": agent_id, "name": name, "args": args, "result": result.clone(), "is_error": is_error}),
        );
        match self.chain(HookName::ToolCallPost, fields).await {
            Ok(mut f) => f.remove("result").unwrap_or(result),
            Err(_) => result,
        }
    }

    /// Every registered tool: `(plugin, spec)`, in plugin order. A name two
    /// plugins register belongs to the first in chain order (the other one
    /// is warned about when it joins).
    pub fn tools(&self) -> Vec<(String, ToolSpec)> {
        let mut seen = BTreeSet::new();
        self.plugins
            .load()
            .iter()
            .flat_map(|p| p.decl.tools.iter().map(|t| (p.name.clone(), t.clone())))
            .filter(|(_, t)| seen.insert(t.name.clone()))
            .collect()
    }

    /// Calls registered tool `name`: `tool_call_pre` (which may deny it or
    /// rewrite the args), the owner's `call_tool`, then `tool_call_post`.
    ///
    /// # Errors
    /// No such tool, or its plugin has no `call_tool` hook.
    pub async fn call_tool(&self, agent_id: &str, name: &str, args: Value) -> Result<ToolOutcome, AgentError> {
        let owner = self.plugins.load().iter().find(|p| p.decl.tools.iter().any(|t| t.name == name)).cloned();
        let Some(owner) = owner else {
            let tools = self.tools();
            return Err(AgentError::UnknownTool {
                name: name.to_owned(),
                hint: crate::hint::did_you_mean(name, tools.iter().map(|(_, t)| t.name.as_str())),
            });
        };
        if !owner.hooks.contains(&HookName::CallTool) {
            return Err(AgentError::NoHook { plugin: owner.name.clone(), hook: HookName::CallTool });
        }
        let args = match self.tool_call_pre(agent_id, name, args).await {
            Ok(args) => args,
            Err(blocked) => return Ok(ToolOutcome::Blocked(blocked)),
        };
        let fields = obj(json!({"agent_id": agent_id, "name": name, "args": args.clone()}));
        let (result, is_error) = match self.call(&owner, HookName::CallTool, fields).await {
            Ok(Value::Object(reply)) => match (reply.get("error"), reply.get("result")) {
                (Some(Value::String(e)), _) => (Value::String(e.clone()), true),
                (Some(e), _) if !e.is_null() => (Value::String(e.to_string()), true),
                (_, Some(r)) => (r.clone(), false),
                _ => (Value::Null, false),
            },
            Ok(other) => (other, false),
            Err(e) => (Value::String(format!("tool `{name}` failed: {e}")), true),
        };
        let result = self.tool_call_post(agent_id, name, &args, result, is_error).await;
        Ok(ToolOutcome::Result { result, is_error })
    }

    /// `agent_event_sent`: the event to send, or `None` when suppressed.
    pub async fn agent_event_sent(&self, event: Value) -> Option<Value> {
        let out = self.chain(HookName::AgentEventSent, obj(json!({"event": event}))).await.ok()?;
        out.get("event").cloned()
    }

    /// `memory_read_pre`: the query to run.
    pub async fn memory_read_pre(&self, query: Value, filters: Value) -> Value {
        let fields = obj(json!({"query": query.clone(), "filters": filters}));
        self.chain(HookName::MemoryReadPre, fields).await.ok().and_then(|mut f| f.remove("query")).unwrap_or(query)
    }

    /// `memory_read_post`: the results to return.
    pub async fn memory_read_post(&self, query: Value, results: Value) -> Value {
        let fields = obj(json!({"query": query, "results": results.clone()}));
        self.chain(HookName::MemoryReadPost, fields).await.ok().and_then(|mut f| f.remove("results")).unwrap_or(results)
    }

    /// `memory_write_pre`: the content to write, or the refusal.
    pub async fn memory_write_pre(&self, content: Value, metadata: Value) -> Result<Value, Blocked> {
        let fields = obj(json!({"content": content, "metadata": metadata}));
        let mut out = self.chain(HookName::MemoryWritePre, fields).await?;
        Ok(out.remove("content").unwrap_or(Value::Null))
    }

    /// `memory_write_post`: every plugin observes the stored write.
    pub async fn memory_write_post(&self, content: Value, metadata: Value, id: Value) {
        self.observe(HookName::MemoryWritePost, obj(json!({"content": content, "metadata": metadata, "id": id}))).await;
    }

    /// Creates (upserts) a trigger for the embedder: `trigger_append` first.
    ///
    /// # Errors
    /// A plugin blocked it (`Ok(Err)`), or the store refused it.
    pub async fn create_trigger(&self, trigger: Map<String, Value>) -> Result<Result<String, Blocked>, ServiceError> {
        let out = match self.chain(HookName::TriggerAppend, obj(json!({"trigger": trigger}))).await {
            Ok(out) => out,
            Err(b) => return Ok(Err(b)),
        };
        let trigger = match out.get("trigger") {
            Some(Value::Object(t)) => t.clone(),
            _ => {
                return Err(ServiceError {
                    code: super::services::code::SERVICE,
                    message: "trigger_append replaced the trigger with a non-object".into(),
                });
            }
        };
        let now = super::services::now_secs();
        let created = self.shared.triggers_off(move |t| t.create(trigger, now, super::triggers::By::Host)).await;
        created.map(Ok).map_err(|e| ServiceError { code: super::services::code::SERVICE, message: e.to_string() })
    }

    /// Runs `trigger_fire` over a due trigger; delivered ones are kept for
    /// [`AgentEngine::fired`] and sent to subscribers.
    pub async fn fire(&self, trigger: Map<String, Value>) -> Option<Value> {
        let out = match self.chain(HookName::TriggerFire, obj(json!({"trigger": trigger}))).await {
            Ok(out) => out,
            Err(b) => {
                tracing::info!(plugin = %b.plugin, "trigger firing cancelled: {}", b.reason);
                return None;
            }
        };
        let trigger = out.get("trigger").cloned().unwrap_or(Value::Null);
        {
            let mut fired = self.fired.lock().unwrap_or_else(|p| p.into_inner());
            if fired.len() == FIRED_KEPT {
                fired.pop_front();
            }
            fired.push_back(trigger.clone());
        }
        let _ = self.fired_tx.send(trigger.clone());
        Some(trigger)
    }

    /// Fires the event triggers listening for `name`, with `payload` added
    /// as `event_payload`; returns the delivered ones.
    pub async fn fire_event(&self, name: &str, payload: Value) -> Vec<Value> {
        let owned = name.to_owned();
        let listening = match self.shared.triggers_off(move |t| t.event(&owned)).await {
            Ok(listening) => listening,
            Err(e) => {
                tracing::warn!("event `{name}`: its triggers cannot be read: {e}");
                return Vec::new();
            }
        };
        let mut delivered = Vec::new();
        for mut t in listening {
            t.insert("event_payload".into(), payload.clone());
            if let Some(v) = self.fire(t).await {
                delivered.push(v);
            }
        }
        delivered
    }

    /// The triggers delivered so far (the last 256), oldest first.
    pub fn fired(&self) -> Vec<Value> {
        self.fired.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Delivered triggers from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Value> {
        self.fired_tx.subscribe()
    }

    /// `communicate`: `payload` to plugin `name`; its reply object.
    ///
    /// # Errors
    /// No such plugin, no `communicate` hook, a failed call, or a reply that
    /// is not a JSON object.
    pub async fn communicate(&self, name: &str, payload: Value) -> Result<Value, AgentError> {
        let plugin = self.plugin(name).ok_or_else(|| self.unknown_plugin(name))?;
        let hook = HookName::Communicate;
        if !plugin.hooks.contains(&hook) {
            return Err(AgentError::NoHook { plugin: plugin.name.clone(), hook });
        }
        let reply = self
            .call(&plugin, hook, obj(json!({"payload": payload})))
            .await
            .map_err(|error| AgentError::Failed { plugin: plugin.name.clone(), hook, error })?;
        match reply {
            Value::Object(_) => Ok(reply),
            other => Err(AgentError::NotAnObject {
                plugin: plugin.name.clone(),
                hook,
                found: crate::protocol::json_kind(&other),
            }),
        }
    }

    /// `health_check` of every plugin: its reply, `{"status":"ok"}` when it
    /// has no such hook or answers nothing, `{"status":"error",…}` on failure.
    pub async fn health(&self) -> Map<String, Value> {
        let mut all = Map::new();
        for p in self.plugins().iter() {
            let status = if p.hooks.contains(&HookName::HealthCheck) {
                match self.call(p, HookName::HealthCheck, Map::new()).await {
                    Ok(Value::Object(m)) if m.contains_key("status") => Value::Object(m),
                    Ok(Value::Null) => json!({"status": "ok"}),
                    Ok(Value::Object(m)) if m.is_empty() => json!({"status": "ok"}),
                    Ok(other) => json!({"status": "ok", "reply": other}),
                    Err(e) => json!({"status": "error", "error": e}),
                }
            } else {
                json!({"status": "ok"})
            };
            all.insert(p.name.clone(), status);
        }
        all
    }

    /// Calls `hook` (heartbeat, run_schedule, …) on one plugin, isolated.
    pub async fn call_one(
        &self,
        plugin: &AgentPlugin,
        hook: HookName,
        fields: Map<String, Value>,
    ) -> Result<Value, String> {
        self.call(plugin, hook, fields).await
    }

    /// The prompt suffixes, in plugin order.
    pub fn prompt_suffixes(&self) -> Vec<String> {
        self.plugins.load().iter().filter_map(|p| p.decl.prompt_suffix.clone()).filter(|s| !s.is_empty()).collect()
    }

    /// `system_prompt` with every plugin's suffix appended (a blank line
    /// between each).
    pub fn with_prompt_suffixes(&self, system_prompt: &str) -> String {
        let mut out = system_prompt.to_owned();
        for suffix in self.prompt_suffixes() {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&suffix);
        }
        out
    }

    /// Unloads every plugin and stops its workers.
    pub async fn shutdown(&self) {
        for p in self.plugins().iter() {
            self.unload(p).await;
        }
    }
}

tokio::task_local! {
    /// The plugins whose calls the current task is inside of, outermost first.
    static IN_CALL: Vec<String>;
}

/// [`IN_CALL`] of this task (empty outside any plugin call).
fn in_call() -> Vec<String> {
    IN_CALL.try_with(Clone::clone).unwrap_or_default()
}

/// Sorts plugins into chain order: ascending order key, ties by name.
fn sort_chain<P: Borrow<AgentPlugin>>(plugins: &mut [P]) {
    plugins.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name))
    });
}

/// Warns about each tool name a later plugin (in chain order) registers
/// again: calls go to the first.
fn warn_shadowed_tools<P: Borrow<AgentPlugin>>(plugins: &[P]) {
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

/// A warning per registration `plugin` had refused.
fn refusal_warnings(plugin: &AgentPlugin) -> Vec<String> {
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

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl HostCalls for AgentEngine {
    fn config_changed(&self, plugin: &str, change: Change) {
        let Some(p) = self.plugin(plugin) else { return };
        if !p.hooks.contains(&HookName::ConfigChanged) {
            return;
        }
        let fields = obj(json!({"key": change.key, "old": change.old, "new": change.new}));
        // In the background (the plugin that set the value may be busy in the
        // very call that set it), through one queue per plugin so the calls
        // arrive one at a time, in the order of the sets.
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let mut queues = self.config_queues.lock().unwrap_or_else(|p| p.into_inner());
        let queue = queues.entry(plugin.to_owned()).or_insert_with(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Map<String, Value>>();
            let (name, me) = (plugin.to_owned(), self.me.clone());
            handle.spawn(async move {
                while let Some(fields) = rx.recv().await {
                    // The plugin as it is now (a reload may have replaced it);
                    // the call is timed, counted and its failure logged as
                    // every plugin call is.
                    let Some(engine) = me.upgrade() else { return };
                    let Some(p) = engine.plugin(&name) else { continue };
                    let _ = engine.call(&p, HookName::ConfigChanged, fields).await;
                }
            });
            tx
        });
        let _ = queue.send(fields);
    }

    fn trigger_append(&self, from: Option<&str>, trigger: Map<String, Value>) -> BoxFuture<'_, Result<Value, String>> {
        let from = from.map(str::to_owned);
        Box::pin(async move {
            match self.chain_except(HookName::TriggerAppend, obj(json!({"trigger": trigger})), from.as_deref()).await {
                Ok(mut out) => Ok(out.remove("trigger").unwrap_or(Value::Null)),
                Err(b) => Err(format!("plugin '{}' blocked it: {}", b.plugin, b.reason)),
            }
        })
    }

    fn read_symbolic(&self, owner: &str, path: &str) -> BoxFuture<'_, Result<String, String>> {
        let (owner, path) = (owner.to_owned(), path.to_owned());
        Box::pin(async move {
            let plugin = self.plugin(&owner).ok_or_else(|| format!("the owner '{owner}' of {path} is not loaded"))?;
            if in_call().contains(&owner) {
                return Err(format!(
                    "plugin '{owner}' owns {path} but is busy in the call this read is part of (a cycle)"
                ));
            }
            if !plugin.hooks.contains(&HookName::ReadSymbolic) {
                return Err(format!("plugin '{owner}' owns {path} but has no read_symbolic hook"));
            }
            match self.call(&plugin, HookName::ReadSymbolic, obj(json!({"path": path}))).await? {
                Value::String(s) => Ok(s),
                Value::Object(m) => match m.get("content") {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(format!("plugin '{owner}' answered read_symbolic without a `content` string")),
                },
                other => Ok(other.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::HookError;

    type Answer = dyn Fn(&Map<String, Value>) -> Result<Value, String> + Send + Sync;

    /// A plugin whose every hook answers through `answer`; calls are logged.
    struct Fake {
        answer: Box<Answer>,
        log: Arc<Mutex<Vec<String>>>,
        name: String,
    }

    impl Runner for Fake {
        fn call<'a>(&'a self, request: &'a HookRequest, _: &'a CallOptions) -> BoxFuture<'a, Result<Value, HookError>> {
            let HookRequest::Agent(r) = request else { panic!("not an agent request") };
            self.log.lock().unwrap().push(format!("{}:{}", self.name, r.hook));
            let reply = (self.answer)(&r.fields).map_err(HookError::Worker);
            Box::pin(async move { reply })
        }
    }

    struct Setup {
        _dir: tempfile::TempDir,
        engine: Arc<AgentEngine>,
        log: Arc<Mutex<Vec<String>>>,
    }

    /// A fake plugin: name, priority, hooks, answer.
    type FakePlugin<'a> = (&'a str, Option<i64>, &'a [HookName], Box<Answer>);

    fn setup(plugins: Vec<FakePlugin<'_>>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedServices::open(&crate::home::Home::at(dir.path())).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let list = plugins
            .into_iter()
            .map(|(name, priority, hooks, answer)| {
                let services =
                    Arc::new(PluginServices::open(shared.clone(), name, Vec::new(), Default::default()).unwrap());
                AgentPlugin {
                    name: name.into(),
                    version: "1".into(),
                    order: decision::order_key(PrioritySource::Toml(priority)),
                    hooks: hooks.iter().copied().collect(),
                    decl: AgentDecl { priority, ..Default::default() },
                    runner: Arc::new(Fake { answer, log: log.clone(), name: name.into() }),
                    services,
                    faust: None,
                }
            })
            .collect();
        let engine = AgentEngine::new(list, shared, Arc::default());
        Setup { _dir: dir, engine, log }
    }

    const PRE: &[HookName] = &[HookName::ToolCallPre];

    fn append_to_args(tag: &'static str) -> Box<Answer> {
        Box::new(move |f| {
            let seen = f["args"]["seen"].as_str().unwrap_or_default();
            Ok(json!({"action": "replace", "value": {"seen": format!("{seen}{tag}")}}))
        })
    }

    #[tokio::test]
    async fn chain_order_is_by_priority_larger_first_then_name_and_each_sees_the_previous_value() {
        let s = setup(vec![
            ("zeta", None, PRE, append_to_args("z")),
            ("alpha", None, PRE, append_to_args("a")),
            ("high", Some(10), PRE, append_to_args("h")),
            ("low", Some(-5), PRE, append_to_args("l")),
        ]);
        let args = s.engine.tool_call_pre("a1", "t", json!({})).await.unwrap();
        assert_eq!(args, json!({"seen": "hazl"}));
        assert_eq!(
            *s.log.lock().unwrap(),
            ["high:tool_call_pre", "alpha:tool_call_pre", "zeta:tool_call_pre", "low:tool_call_pre"]
        );
    }

    #[tokio::test]
    async fn block_stops_the_chain_and_a_failing_plugin_counts_as_pass() {
        let s = setup(vec![
            ("a-broken", Some(3), PRE, Box::new(|_| Err("crashed".into()))),
            ("b-junk", Some(2), PRE, Box::new(|_| Ok(json!({"action": "explode"})))),
            ("c-rewrite", Some(1), PRE, append_to_args("c")),
            (
                "d-block",
                Some(0),
                PRE,
                Box::new(|f| Ok(json!({"action": "block", "reason": format!("no {}", f["args"]["seen"])}))),
            ),
            ("e-after", Some(-1), PRE, append_to_args("e")),
        ]);
        let blocked = s.engine.tool_call_pre("a1", "shell_exec", json!({})).await.unwrap_err();
        assert_eq!(blocked, Blocked { plugin: "d-block".into(), reason: "no \"c\"".into() });
        assert!(!s.log.lock().unwrap().iter().any(|c| c.starts_with("e-after")), "nothing runs after a block");
        let m = s.engine.metrics().by_plugin();
        assert_eq!(m["a-broken"]["tool_call_pre"].failures, 1, "the failure is counted");
    }

    #[tokio::test]
    async fn a_denied_tool_is_never_called_and_post_rewrites_the_result() {
        let tools: &[HookName] = &[HookName::CallTool, HookName::ToolCallPre, HookName::ToolCallPost];
        let s = setup(vec![(
            "tools",
            None,
            tools,
            Box::new(|f| {
                Ok(match (f.get("result"), f["args"]["q"].as_str()) {
                    (Some(r), _) => json!({"action": "replace", "value": format!("{} (checked)", r.as_str().unwrap())}),
                    (None, Some("bad")) if !f.contains_key("is_error") && f["name"] == "lookup" && f.len() == 3 => {
                        json!({"action": "block", "reason": "bad query"})
                    }
                    (None, q) => json!({"result": format!("found {}", q.unwrap_or("?"))}),
                })
            }),
        )]);
        with_tools(&s.engine, "tools", &["lookup"]).await;
        let out = s.engine.call_tool("a1", "lookup", json!({"q": "x"})).await.unwrap();
        assert_eq!(out, ToolOutcome::Result { result: json!("found x (checked)"), is_error: false });
        s.log.lock().unwrap().clear();
        let out = s.engine.call_tool("a1", "lookup", json!({"q": "bad"})).await.unwrap();
        assert_eq!(out, ToolOutcome::Blocked(Blocked { plugin: "tools".into(), reason: "bad query".into() }));
        assert_eq!(*s.log.lock().unwrap(), ["tools:tool_call_pre"], "call_tool never ran");
        let err = s.engine.call_tool("a1", "lookpu", json!({})).await.unwrap_err();
        assert!(err.to_string().contains("did you mean `lookup`"), "{err}");
    }

    /// Gives plugin `name` of `engine` the tools `names` (a copy swapped in).
    async fn with_tools(engine: &AgentEngine, name: &str, names: &[&str]) {
        let old = engine.plugin(name).unwrap();
        let tools = names
            .iter()
            .map(|n| ToolSpec { name: (*n).into(), description: String::new(), parameters: json!({}) })
            .collect();
        let copy = AgentPlugin {
            name: old.name.clone(),
            version: old.version.clone(),
            order: old.order,
            hooks: old.hooks.clone(),
            decl: AgentDecl { tools, ..old.decl.clone() },
            runner: old.runner.clone(),
            services: old.services.clone(),
            faust: None,
        };
        engine.replace(name, Some(copy)).await;
    }

    #[tokio::test]
    async fn a_tool_name_registered_twice_belongs_to_the_first_in_chain_order() {
        let tool: &[HookName] = &[HookName::CallTool];
        let s = setup(vec![
            ("b-low", Some(1), tool, Box::new(|_| Ok(json!({"result": "from b"})))),
            ("a-high", Some(5), tool, Box::new(|_| Ok(json!({"result": "from a"})))),
        ]);
        with_tools(&s.engine, "b-low", &["t", "only_b"]).await;
        with_tools(&s.engine, "a-high", &["t"]).await;
        let tools: Vec<(String, String)> = s.engine.tools().into_iter().map(|(p, t)| (p, t.name)).collect();
        assert_eq!(tools, [("a-high".into(), "t".into()), ("b-low".into(), "only_b".into())]);
        let out = s.engine.call_tool("x", "t", json!({})).await.unwrap();
        assert_eq!(out, ToolOutcome::Result { result: json!("from a"), is_error: false });
    }

    #[tokio::test]
    async fn message_hooks_take_faustbot_strings_and_observers_all_run() {
        let msg: &[HookName] = &[HookName::MessageReceived, HookName::MemoryWritePost];
        let s = setup(vec![
            (
                "a",
                Some(1),
                msg,
                Box::new(|f| Ok(json!(format!("{}!", f.get("text").and_then(Value::as_str).unwrap_or_default())))),
            ),
            (
                "b",
                Some(0),
                msg,
                Box::new(|f| {
                    Ok(if f.get("text") == Some(&json!("drop!")) { json!("__IGNORED__") } else { Value::Null })
                }),
            ),
        ]);
        assert_eq!(s.engine.message_received("a1", "hi", "user", json!([])).await.unwrap(), "hi!");
        assert_eq!(s.engine.message_received("a1", "drop", "user", json!([])).await.unwrap_err().plugin, "b");
        s.log.lock().unwrap().clear();
        s.engine.memory_write_post(json!("c"), json!({}), json!("id1")).await;
        assert_eq!(*s.log.lock().unwrap(), ["a:memory_write_post", "b:memory_write_post"]);
    }

    #[tokio::test]
    async fn trigger_append_can_refuse_or_rewrite_and_fire_can_cancel() {
        let hooks: &[HookName] = &[HookName::TriggerAppend, HookName::TriggerFire];
        let s = setup(vec![(
            "filter",
            None,
            hooks,
            Box::new(|f| {
                let t = &f["trigger"];
                Ok(if t["id"] == "spam" {
                    json!({"action": "block", "reason": "no spam"})
                } else if t.get("seen").is_none() {
                    let mut t = t.clone();
                    t["seen"] = json!(true);
                    json!({"action": "replace", "value": t})
                } else {
                    json!({"action": "pass"})
                })
            }),
        )]);
        let t = |id: &str| obj(json!({"id": id, "type": "event", "event_name": "go"}));
        assert_eq!(s.engine.create_trigger(t("spam")).await.unwrap().unwrap_err().reason, "no spam");
        assert!(s.engine.shared().triggers().get("spam").unwrap().is_none(), "a refused trigger is not stored");
        assert_eq!(s.engine.create_trigger(t("ok")).await.unwrap(), Ok("ok".into()));
        assert_eq!(s.engine.shared().triggers().get("ok").unwrap().unwrap()["seen"], json!(true));
        let delivered = s.engine.fire_event("go", json!({"n": 1})).await;
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0]["event_payload"], json!({"n": 1}));
        assert_eq!(s.engine.fired().len(), 1);
    }
}
