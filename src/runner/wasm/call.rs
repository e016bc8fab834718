//! One hook call of a component plugin, and [`ComponentHandle`], the
//! component as a [`Runner`](crate::runner::Runner): the typed request
//! becomes the WIT request, the export is called in a fresh instance, and the
//! reply takes the JSON shape a script plugin would have printed, so the
//! engine reads both kinds alike. "Not implemented" becomes the hook's
//! neutral answer. What a guest hands back is bounded before it becomes host
//! objects: one lift by the store's hostcall fuel, a reply's items and text
//! by `convert`'s budget, an agent-loop reply's JSON text by
//! [`AGENT_REPLY_BYTES`](super::AGENT_REPLY_BYTES).
//!
//! Owns the calls. Calls run on the blocking pool (they are CPU-bound,
//! bounded by fuel and the deadline) and only hooks the component described
//! are called. Never calls an undeclared hook and never holds an async
//! worker while guest code runs.

use std::sync::Arc;

use serde_json::Value;

use super::bindings::ctxhost::plugin::types as wit;
use super::component::{AGENT_EXPORT, ComponentRunner, check_agent_reply};
use super::convert::{self, Budget};
use super::store::CallEnv;
use crate::host::services::PluginServices;
use crate::protocol::{HookName, HookRequest};
use crate::runner::HookError;

impl ComponentRunner {
    /// Runs one hook call and answers with the JSON a script plugin would
    /// have printed, so the engine reads both kinds alike. "Not implemented"
    /// becomes the hook's neutral answer ("no opinion").
    pub fn call_sync(&self, request: &HookRequest) -> Result<Value, HookError> {
        self.call_with_timeout(request, self.limits.timeout_ms)
    }

    /// [`ComponentRunner::call_sync`] with another deadline.
    pub fn call_with_timeout(&self, request: &HookRequest, timeout_ms: u64) -> Result<Value, HookError> {
        self.call_in(request, timeout_ms, tokio::runtime::Handle::try_current().ok())
    }

    /// One call; a service call that has to wait finishes on `runtime` (the
    /// caller's, captured before moving to the blocking pool).
    fn call_in(
        &self,
        request: &HookRequest,
        timeout_ms: u64,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Value, HookError> {
        use serde_json::json;
        let env = || CallEnv {
            export: request.hook().as_str(),
            agent_id: request.agent_id().map(str::to_owned),
            runtime: runtime.clone(),
        };
        let budget = || Budget::new(request.hook().as_str());
        let failed = |e: wit::HookError| match e {
            wit::HookError::NotImplemented => None,
            wit::HookError::Failed(m) => Some(reported(&m)),
        };
        macro_rules! answer {
            ($call:expr, $ok:expr, $neutral:expr) => {
                match self.with_context(timeout_ms, env(), $call)? {
                    Ok(v) => $ok(v),
                    Err(e) => match failed(e) {
                        Some(err) => Err(err),
                        None => Ok($neutral),
                    },
                }
            };
        }
        match request {
            HookRequest::Bootstrap(r) => {
                let req = wit::BootstrapRequest {
                    context_window_tokens: r.context_window_tokens,
                    stable_prefix_mode: r.stable_prefix_mode,
                    max_recall_results: r.max_recall_results,
                };
                answer!(|p, s| p.call_bootstrap(s, req), |()| Ok(json!({"type": "ok"})), json!({"type": "ok"}))
            }
            HookRequest::Ingest(r) => {
                let req = wit::IngestRequest {
                    agent_id: r.agent_id.clone(),
                    message: r.message.clone(),
                    peer_id: r.peer_id.clone(),
                };
                answer!(
                    |p, s| p.call_ingest(s, &req),
                    |m| convert::ingest_json(m).map_err(HookError::from),
                    json!({"memories": []})
                )
            }
            HookRequest::Assemble(r) => {
                let req = wit::AssembleRequest {
                    agent_id: r.agent_id.clone(),
                    system_prompt: r.system_prompt.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                    context_window_tokens: r.context_window_tokens,
                };
                answer!(
                    |p, s| p.call_assemble(s, &req),
                    |ms| convert::messages_from_wit(ms, &mut budget())
                        .map(|ms| json!({"messages": ms}))
                        .map_err(HookError::from),
                    json!({"messages": []})
                )
            }
            HookRequest::Compact(r) => {
                let req = wit::CompactRequest {
                    agent_id: r.agent_id.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                    model: r.model.clone(),
                    context_window_tokens: r.context_window_tokens,
                    token_pressure: wit::TokenPressure {
                        used_tokens: r.token_pressure.used_tokens,
                        max_tokens: r.token_pressure.max_tokens,
                        pressure: r.token_pressure.pressure,
                        recommendation: convert::recommendation_to_wit(r.token_pressure.recommendation),
                    },
                };
                let reply = |c: wit::CompactReply| -> Result<Value, HookError> {
                    let mut budget = budget();
                    Ok(match c {
                        wit::CompactReply::Compacted(c) => {
                            let messages = convert::messages_from_wit(c.messages, &mut budget)?;
                            json!({"messages": messages, "summary": c.summary})
                        }
                        wit::CompactReply::RequestLlmSummary(d) => json!({"request_llm_summary": {
                            "prompt": d.prompt,
                            "summarize": convert::messages_from_wit(d.summarize, &mut budget)?,
                            "keep": convert::messages_from_wit(d.keep, &mut budget)?,
                            "max_tokens": d.max_tokens,
                        }}),
                    })
                };
                answer!(|p, s| p.call_compact(s, &req), reply, json!({"messages": []}))
            }
            HookRequest::AfterTurn(r) => {
                let req = wit::AfterTurnRequest {
                    agent_id: r.agent_id.clone(),
                    messages: convert::messages_to_wit(&r.messages),
                };
                answer!(
                    |p, s| p.call_after_turn(s, &req),
                    |m| convert::after_turn_json(m).map_err(HookError::from),
                    json!({"type": "ok"})
                )
            }
            HookRequest::TransformToolResult(r) => {
                let req = wit::TransformRequest {
                    agent_id: r.agent_id.clone(),
                    tool_name: r.tool_name.clone(),
                    tool_use_id: r.tool_use_id.clone(),
                    args: r.args.to_string(),
                    result: r.result.clone(),
                    is_error: r.is_error,
                };
                answer!(
                    |p, s| p.call_transform_tool_result(s, &req),
                    |t: Option<String>| Ok(t.map_or_else(|| json!({}), |t| json!({"content": t}))),
                    json!({})
                )
            }
            HookRequest::PrepareSubagent(r) | HookRequest::MergeSubagent(r) => {
                let req = wit::SubagentRequest { parent_id: r.parent_id.clone(), child_id: r.child_id.clone() };
                if matches!(request, HookRequest::PrepareSubagent(_)) {
                    answer!(
                        |p, s| p.call_prepare_subagent(s, &req),
                        |()| Ok(json!({"type": "ok"})),
                        json!({"type": "ok"})
                    )
                } else {
                    answer!(
                        |p, s| p.call_merge_subagent(s, &req),
                        |()| Ok(json!({"type": "ok"})),
                        json!({"type": "ok"})
                    )
                }
            }
            HookRequest::OnEvent(_) => Ok(json!({"type": "ok"})),
            HookRequest::Agent(r) => self.call_agent(request, r.hook, timeout_ms, env()),
        }
    }

    /// An agent-loop hook through the `agent` export's `handle`: the request
    /// as its JSON line, the reply JSON text parsed.
    fn call_agent(
        &self,
        request: &HookRequest,
        hook: HookName,
        timeout_ms: u64,
        env: CallEnv,
    ) -> Result<Value, HookError> {
        let Some(agent) = &self.agent else {
            return Err(HookError::Unsupported(format!(
                "plugin '{}' is a context-only component (world `context-plugin`): it has no agent-loop hooks, \
                 so it cannot run `{hook}`; export `{AGENT_EXPORT}` (world `agent-plugin`) for them",
                self.name
            )));
        };
        if !self.hooks.contains(&hook) {
            return Err(HookError::not_declared(&self.name, hook, self.hooks.iter().copied()));
        }
        let line = serde_json::to_string(request)
            .map_err(|e| HookError::Host(format!("cannot serialise the `{hook}` request: {e}")))?;
        let reply = self.with_instance(timeout_ms, env, |instance, store| {
            agent.indices.load(&mut *store, instance)?.call_handle(store, hook.as_str(), &line)
        })?;
        match reply {
            Ok(text) => serde_json::from_str(check_agent_reply(hook.as_str(), &text)?).map_err(|e| {
                HookError::BadReply(format!(
                    "'{}' answered `{hook}` with text that is not JSON ({e}): {text:.200}",
                    self.name
                ))
            }),
            Err(wit::HookError::NotImplemented) => Ok(serde_json::json!({"action": "pass"})),
            Err(wit::HookError::Failed(m)) => Err(reported(&m)),
        }
    }
}

/// A component's own `failed(message)`.
fn reported(message: &str) -> HookError {
    HookError::Failed(format!("the plugin reported a failure: {message}"))
}

/// A component plugin as a [`Runner`](crate::runner::Runner): calls run on a blocking thread (they
/// are CPU-bound and bounded by fuel and the deadline), and only the hooks the
/// component described are called.
#[derive(Clone)]
pub struct ComponentHandle(pub std::sync::Arc<ComponentRunner>);

impl crate::runner::Runner for ComponentHandle {
    fn sandbox(&self) -> crate::runner::SandboxFacts {
        super::sandbox_facts(&self.0.limits)
    }

    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        options: &'a crate::runner::CallOptions,
    ) -> crate::runner::BoxFuture<'a, Result<Value, HookError>> {
        Box::pin(async move {
            let hook = request.hook();
            if !self.0.hooks.contains(&hook) {
                return Err(HookError::not_declared(&self.0.name, hook, self.0.hooks.iter().copied()));
            }
            let timeout_ms = super::call_timeout_ms(options, self.0.limits.timeout_ms);
            let (runner, request) = (self.0.clone(), request.clone());
            let runtime = tokio::runtime::Handle::current();
            super::on_blocking_pool(move || runner.call_in(&request, timeout_ms, Some(runtime))).await
        })
    }

    fn attach_services(&self, services: Arc<PluginServices>) {
        self.0.attach_services(services);
    }

    fn calls_services(&self) -> bool {
        true
    }
}
