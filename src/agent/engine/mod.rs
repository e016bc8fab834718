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
//! This file holds the engine, its plugin list and the chain/observe rules;
//! the rest by job: `plugin` (who takes part, chain order), `register`
//! (run-time registration, FaustBot's permission policy), `hooks` (the
//! typed entry points), `tools`, `triggers`, `host_calls` (what the
//! services ask of the engine). The background work (trigger watcher,
//! schedules, heartbeats) lives in [`super::timers`]; this module never
//! sleeps, and it never loads or discovers a plugin (`app` hands them in).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};

mod hooks;
mod host_calls;
mod plugin;
mod register;
mod tools;
mod triggers;

pub use plugin::AgentPlugin;
use plugin::{sort_chain, warn_shadowed_tools};

use super::decision::{self, Form, Outcome};
use crate::host::services::{HostCalls, ServiceError, SharedServices};
use crate::manifest::{AgentDecl, ToolSpec};
use crate::metrics::{CallOutcome, Metrics};
use crate::protocol::{AgentRequest, HookName, HookRequest};
use crate::runner::{CallOptions, HookError};

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
    Failed {
        plugin: String,
        hook: HookName,
        #[source]
        error: HookError,
    },
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

    /// One plugin call, timed and counted; a failure is the runner's error
    /// (a reply that is not a decision, with `form`, a `BadReply`).
    async fn call(&self, plugin: &AgentPlugin, hook: HookName, fields: Map<String, Value>) -> Result<Value, HookError> {
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
    ) -> Result<Value, HookError> {
        let request = HookRequest::Agent(AgentRequest::new(hook, fields));
        let started = Instant::now();
        // The plugins this task is inside of: a service call made during this
        // call that would ask one of them again (a trigger_append chain, a
        // symbolic read) skips it instead of waiting on its busy worker.
        let mut stack = in_call();
        stack.push(plugin.name.clone());
        let options = CallOptions::default();
        let call = plugin.runner.call(&request, &options);
        let reply = IN_CALL.scope(stack, call).await;
        let reply = match (reply, form) {
            (Ok(v), Some(form)) => match decision::Decision::from_reply(&v, form) {
                Ok(_) => Ok(v),
                Err(e) => Err(HookError::BadReply(e.to_string())),
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
                    Some(p) => self.call_checked(&p, hook, request, Some(form(hook))).await.map_err(|e| e.to_string()),
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
                    Err(e) => json!({"status": "error", "error": e.to_string(), "kind": e.kind().as_str()}),
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
    ) -> Result<Value, HookError> {
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

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::decision::PrioritySource;
    use super::*;
    use crate::host::services::PluginServices;
    use crate::runner::{BoxFuture, Runner};

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
