//! The agent API: `POST /api/agents/{agent_id}/{hook}` with the hook's
//! request body (spec section 3; `type` and `agent_id` may be left out, the
//! route gives them), answered with what the engine decided after stack
//! merging and fallbacks (spec section 12):
//!
//! | hook | reply |
//! |---|---|
//! | ingest | `{"memories":[{"content","source","sources"}]}` (one per content: `sources` names every recaller, `source` the first) |
//! | assemble | `{"messages":[…]}` |
//! | compact | `{"messages":[…],"summary"?}` |
//! | transform_tool_result | `{"content":…}` |
//! | others | `{"type":"ok"}` |
//!
//! An agent in any language uses ctxhost as its context engine this way.
//! A call whose hook a stack plugin declares that is refused on this
//! instance (its files are not the fleet's version) is a 503 with
//! `Retry-After` and `kind` `plugin_version_mismatch` ([`JsonReply::refused`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::body::{self, JsonReply};
use crate::engine::{ContextEngine, EngineError};
use crate::protocol::{HookName, HookRequest, TokenPressure};

/// The context hooks an agent calls: all but `on_event`, a plugin
/// notification rather than a point of the turn. (Agent-loop hooks have
/// their own routes: messages, tools.)
fn agent_hooks() -> impl Iterator<Item = HookName> {
    HookName::CONTEXT.into_iter().filter(|h| *h != HookName::OnEvent)
}

pub(crate) async fn call(
    State(state): State<Arc<AppState>>,
    Path((agent_id, hook)): Path<(String, String)>,
    bytes: Bytes,
) -> JsonReply {
    let Some(hook) = hook.parse::<HookName>().ok().filter(|h| agent_hooks().any(|a| a == *h)) else {
        let hint = crate::hint::did_you_mean(&hook, agent_hooks().map(HookName::as_str));
        let names: Vec<&str> = agent_hooks().map(HookName::as_str).collect();
        return JsonReply::with_status(
            StatusCode::NOT_FOUND,
            json!({"error": format!("`{hook}` is not an agent hook{hint}"), "hooks": names}),
        );
    };
    let mut request = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    // A stack plugin with this hook whose files are not the fleet's version
    // here: the call is refused, never served without it.
    if let Some(refusal) = state.refused_in_stack(hook) {
        return JsonReply::refused(&refusal, hook.as_str());
    }
    // The route names the agent; for sub-agents it is the parent.
    let key = match hook {
        HookName::Bootstrap => None,
        HookName::PrepareSubagent | HookName::MergeSubagent => Some("parent_id"),
        _ => Some("agent_id"),
    };
    if let Some(key) = key {
        match request.get(key) {
            None | Some(Value::Null) => {
                request.insert(key.to_owned(), Value::String(agent_id.clone()));
            }
            Some(Value::String(given)) if *given == agent_id => {}
            Some(other) => {
                return JsonReply::bad_request(format!(
                    "the body's `{key}` is {other} but the route's agent is \"{agent_id}\"; leave it out or make them equal"
                ));
            }
        }
    }
    let compact_without_pressure = hook == HookName::Compact && !request.contains_key("token_pressure");
    let request = match HookRequest::from_json(hook, Value::Object(request)) {
        Ok(r) => r,
        Err(e) => return JsonReply::bad_request(e.to_string()),
    };
    // The turn log's copy of the request, only when the recorder has room.
    let slot = state.turns.slot();
    let logged = slot.as_ref().map(|_| request.clone());
    let (result, calls) = crate::metrics::traced(run(&state, request, compact_without_pressure)).await;
    match result {
        Ok(reply) => {
            if let (Some(slot), Some(request)) = (slot, logged) {
                slot.send(super::turns::TurnEvent { agent: agent_id, request, reply: reply.clone(), calls });
            }
            JsonReply::ok(reply)
        }
        Err(e) => engine_failure(e),
    }
}

async fn run(state: &AppState, request: HookRequest, fill_pressure: bool) -> Result<Value, EngineError> {
    let engine = &state.engine;
    let ok = || json!({"type": "ok"});
    Ok(match request {
        HookRequest::Bootstrap(r) => engine.bootstrap(&r).await.map(|()| ok())?,
        HookRequest::Ingest(r) => {
            let memories = engine.ingest(&r).await?;
            json!({ "memories": memories })
        }
        HookRequest::Assemble(mut r) => {
            if r.context_window_tokens == 0 {
                r.context_window_tokens = state.config.context_engine.context_window_tokens;
            }
            // Plugins' prompt suffixes are part of the system prompt the
            // assembly is made for (and counted in), and are returned with it.
            r.system_prompt = state.agent.with_prompt_suffixes(&r.system_prompt);
            json!({ "messages": engine.assemble(&r).await?, "system_prompt": r.system_prompt })
        }
        HookRequest::Compact(mut r) => {
            if r.context_window_tokens == 0 {
                r.context_window_tokens = state.config.context_engine.context_window_tokens;
            }
            if fill_pressure {
                // What the host would have sent: the history's size against the window.
                let used = engine.default_engine().counter().messages(&r.messages) as u64;
                r.token_pressure = TokenPressure::new(used, r.context_window_tokens);
            }
            let out = engine.compact(&r).await?;
            let mut reply = json!({ "messages": out.messages });
            if let Some(summary) = out.summary {
                reply["summary"] = Value::String(summary);
            }
            reply
        }
        HookRequest::AfterTurn(r) => engine.after_turn(&r).await.map(|()| ok())?,
        HookRequest::TransformToolResult(r) => json!({ "content": engine.transform_tool_result(&r).await? }),
        HookRequest::PrepareSubagent(r) => engine.prepare_subagent(&r).await.map(|()| ok())?,
        HookRequest::MergeSubagent(r) => engine.merge_subagent(&r).await.map(|()| ok())?,
        HookRequest::OnEvent(_) | HookRequest::Agent(_) => json!({"type": "ok"}),
    })
}

/// A plugin that failed under `abort` answers with the status of its kind
/// ([`body::hook_failure_status`]: 502, 504 for a timeout, …); the host's
/// own failures are 500.
fn engine_failure(e: EngineError) -> JsonReply {
    match &e {
        EngineError::Plugin(f) => JsonReply::hook_failure(f.kind, e.to_string(), &f.plugin, f.hook.as_str()),
        _ => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
