//! The agent-loop routes (`agent-hooks.md`, "HTTP shapes"): messages and
//! tools through their interceptor chains, the per-plugin config, the vfs,
//! triggers, other chain hooks by name, and FaustBot's communicate route.
//!
//! Every answer comes from [`AgentEngine`]; this module only maps HTTP onto
//! it: bodies parsed by [`super::body`], a block is a 403 naming the plugin
//! and its reason, an unknown name a 404 with a did-you-mean.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use super::AppState;
use super::body::{self, JsonReply};
use crate::agent::engine::{AgentError, Blocked, ToolOutcome, subject};
use crate::host::triggers::{By, TriggerError};
use crate::host::vfs::Read;
use crate::protocol::HookName;

fn blocked(b: &Blocked) -> JsonReply {
    JsonReply::with_status(StatusCode::FORBIDDEN, json!({"blocked": b.reason, "plugin": b.plugin}))
}

/// A plugin call that failed answers with the status of its kind
/// ([`body::hook_failure_status`]).
fn agent_error(e: AgentError) -> JsonReply {
    let status = match &e {
        AgentError::Failed { plugin, hook, error } => {
            return JsonReply::hook_failure(error.kind(), e.to_string(), plugin, hook.as_str());
        }
        AgentError::UnknownTool { .. } | AgentError::UnknownPlugin { .. } | AgentError::NoHook { .. } => {
            StatusCode::NOT_FOUND
        }
        AgentError::NotAnObject { .. } => StatusCode::BAD_REQUEST,
    };
    JsonReply::error(status, e.to_string())
}

/// `POST /api/agents/{agent_id}/messages` `{"text","origin"?,"history"?}`
/// → `{"text"}` or `{"blocked":true,"plugin","reason"}`.
pub(crate) async fn message(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    bytes: Bytes,
) -> JsonReply {
    let b = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let text = match body::optional_str(&b, "text") {
        Ok(Some(t)) => t.to_owned(),
        Ok(None) => return JsonReply::bad_request("`text` is required"),
        Err(reply) => return reply,
    };
    let origin = match body::optional_str(&b, "origin") {
        Ok(o) => o.unwrap_or("user").to_owned(),
        Err(reply) => return reply,
    };
    if !["user", "trigger_foreground", "trigger_background"].contains(&origin.as_str()) {
        return JsonReply::bad_request(format!(
            "`origin` must be user, trigger_foreground or trigger_background, not {origin:?}"
        ));
    }
    if let Some(refusal) = state.refused_in_agent_loop(HookName::MessageReceived) {
        return JsonReply::refused(&refusal, HookName::MessageReceived.as_str());
    }
    let history = b.get("history").cloned().unwrap_or(Value::Array(Vec::new()));
    match state.agent.message_received(&agent_id, &text, &origin, history).await {
        Ok(text) => JsonReply::ok(json!({"text": text})),
        Err(b) => JsonReply::ok(json!({"blocked": true, "plugin": b.plugin, "reason": b.reason})),
    }
}

/// `GET /api/tools` → `[{"plugin","name","description","parameters"}]`.
pub(crate) async fn tools(State(state): State<Arc<AppState>>) -> JsonReply {
    let list: Vec<Value> = state
        .agent
        .tools()
        .into_iter()
        .map(|(plugin, t)| json!({"plugin": plugin, "name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    JsonReply::ok(Value::Array(list))
}

/// `POST /api/agents/{agent_id}/tools/{name}` `{"args"}` → `{"result"}`
/// (`"is_error": true` when the tool failed) or 403 `{"blocked"}`.
pub(crate) async fn call_tool(
    State(state): State<Arc<AppState>>,
    Path((agent_id, name)): Path<(String, String)>,
    bytes: Bytes,
) -> JsonReply {
    let b = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    for hook in [HookName::ToolCallPre, HookName::ToolCallPost] {
        if let Some(refusal) = state.refused_in_agent_loop(hook) {
            return JsonReply::refused(&refusal, hook.as_str());
        }
    }
    let args = b.get("args").cloned().unwrap_or(Value::Object(Map::new()));
    match state.agent.call_tool(&agent_id, &name, args).await {
        Ok(ToolOutcome::Result { result, is_error }) => {
            let mut reply = json!({"result": result});
            if is_error {
                reply["is_error"] = Value::Bool(true);
            }
            JsonReply::ok(reply)
        }
        Ok(ToolOutcome::Blocked(b)) => blocked(&b),
        // A tool no running plugin has may be a refused plugin's.
        Err(e @ AgentError::UnknownTool { .. }) => match state.refused_in_agent_loop(HookName::CallTool) {
            Some(refusal) => JsonReply::refused(&refusal, HookName::CallTool.as_str()),
            None => agent_error(e),
        },
        Err(e) => agent_error(e),
    }
}

/// `POST /api/agent-hooks/{hook}`: runs one chain hook (its request fields
/// as the body) → `{"value": <the hook's subject after the chain>}` or 403;
/// an observer hook → `{}` after every plugin saw it.
pub(crate) async fn chain(State(state): State<Arc<AppState>>, Path(hook): Path<String>, bytes: Bytes) -> JsonReply {
    let chains: Vec<HookName> =
        HookName::AGENT.into_iter().filter(|h| subject(*h).is_some() || *h == HookName::MemoryWritePost).collect();
    let Some(hook) = hook.parse::<HookName>().ok().filter(|h| chains.contains(h)) else {
        let hint = crate::hint::did_you_mean(&hook, chains.iter().map(|h| h.as_str()));
        let names: Vec<&str> = chains.iter().map(|h| h.as_str()).collect();
        return JsonReply::with_status(
            StatusCode::NOT_FOUND,
            json!({"error": format!("`{hook}` is not a chain hook{hint}"), "hooks": names}),
        );
    };
    let fields = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    if let Some(refusal) = state.refused_in_agent_loop(hook) {
        return JsonReply::refused(&refusal, hook.as_str());
    }
    let Some(key) = subject(hook) else {
        state.agent.observe(hook, fields).await;
        return JsonReply::ok(json!({}));
    };
    match state.agent.chain(hook, fields).await {
        Ok(mut out) => JsonReply::ok(json!({"value": out.remove(key).unwrap_or(Value::Null)})),
        Err(b) => blocked(&b),
    }
}

/// `GET /api/plugins/{name}/config` → `{"schema","values"}`.
pub(crate) async fn get_config(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> JsonReply {
    match state.agent.plugin(&name) {
        Some(p) => JsonReply::ok(p.services.config_snapshot()),
        None => unknown_plugin(&state, &name),
    }
}

/// `PUT /api/plugins/{name}/config` `{"values":{…}}` → the coerced values;
/// 400 naming the key and the type it expects (nothing is set then).
pub(crate) async fn put_config(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> JsonReply {
    let Some(plugin) = state.agent.plugin(&name) else { return unknown_plugin(&state, &name) };
    let b = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let values = match b.get("values") {
        Some(Value::Object(v)) => v.clone(),
        Some(other) => {
            return JsonReply::bad_request(format!("`values` must be an object, not {}", body::type_name(other)));
        }
        None => return JsonReply::bad_request("`values` is required: {\"values\": {\"KEY\": value}}"),
    };
    match plugin.services.set_config(&values).await {
        Ok(values) => JsonReply::ok(json!({"values": values})),
        Err(e) if e.code == crate::host::services::code::INVALID_PARAMS => JsonReply::bad_request(e.message),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.message),
    }
}

fn unknown_plugin(state: &AppState, name: &str) -> JsonReply {
    let plugins = state.agent.plugins();
    let hint = crate::hint::did_you_mean(name, plugins.iter().map(|p| p.name.as_str()));
    JsonReply::error(StatusCode::NOT_FOUND, format!("no plugin '{name}' in the agent loop{hint}"))
}

#[derive(serde::Deserialize)]
pub(crate) struct VfsQuery {
    #[serde(default)]
    path: Option<String>,
}

/// At most this many entries of a directory are described (`entries`); the
/// names are all in `children`.
const VFS_ENTRIES: usize = 1000;

/// `GET /api/vfs?path=/a/b` → `{"path","content"}` (a symbolic node computed
/// by its plugin, marked `"symbolic":true,"owner"`), `{"path","children",
/// "entries"}` (each child's `kind`: `dir`, `file` or `symbolic` with its
/// `owner`), or 404.
pub(crate) async fn vfs(State(state): State<Arc<AppState>>, Query(q): Query<VfsQuery>) -> JsonReply {
    let path = crate::host::vfs::normalize(q.path.as_deref().unwrap_or("/"));
    let at = path.clone();
    let stored = state
        .agent
        .shared()
        .vfs_off(move |vfs| {
            let read = vfs.read(&at)?;
            let mut entries = Vec::new();
            if let Read::Directory(children) = &read {
                for name in children.iter().take(VFS_ENTRIES) {
                    let child = if at == "/" { format!("/{name}") } else { format!("{at}/{name}") };
                    entries.push(match vfs.read(&child)? {
                        Read::Text(_) => json!({"name": name, "kind": "file"}),
                        Read::Symbolic { owner, .. } => json!({"name": name, "kind": "symbolic", "owner": owner}),
                        Read::Directory(_) | Read::Missing => json!({"name": name, "kind": "dir"}),
                    });
                }
            }
            Ok((read, entries))
        })
        .await;
    match stored {
        Ok((Read::Text(content), _)) => JsonReply::ok(json!({"path": path, "content": content})),
        Ok((Read::Directory(children), entries)) => {
            JsonReply::ok(json!({"path": path, "children": children, "entries": entries}))
        }
        Ok((Read::Symbolic { owner, .. }, _)) => match state.agent.shared().read_vfs(&path, None).await {
            Ok(Some(Read::Text(content))) => {
                JsonReply::ok(json!({"path": path, "content": content, "symbolic": true, "owner": owner}))
            }
            Ok(_) => JsonReply::error(StatusCode::NOT_FOUND, format!("nothing at {path}")),
            Err(e) => JsonReply::error(StatusCode::BAD_GATEWAY, e.message),
        },
        Ok((Read::Missing, _)) => JsonReply::error(StatusCode::NOT_FOUND, format!("nothing at {path}")),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/triggers`: every trigger, highest priority first.
pub(crate) async fn list_triggers(State(state): State<Arc<AppState>>) -> JsonReply {
    match state.agent.shared().triggers_off(|t| t.list()).await {
        Ok(list) => JsonReply::ok(Value::Array(list.into_iter().map(Value::Object).collect())),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /api/triggers`: upsert by `id`, through `trigger_append` (403
/// when a plugin refuses it).
pub(crate) async fn create_trigger(State(state): State<Arc<AppState>>, bytes: Bytes) -> JsonReply {
    let trigger = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    match state.agent.create_trigger(trigger).await {
        Ok(Ok(id)) => {
            let at = id.clone();
            match state.agent.shared().triggers_off(move |t| t.get(&at)).await {
                Ok(Some(t)) => JsonReply::with_status(StatusCode::CREATED, Value::Object(t)),
                _ => JsonReply::with_status(StatusCode::CREATED, json!({"id": id})),
            }
        }
        Ok(Err(b)) => blocked(&b),
        Err(e) => JsonReply::bad_request(e.message),
    }
}

/// `GET /api/triggers/{id}`.
pub(crate) async fn get_trigger(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> JsonReply {
    let at = id.clone();
    match state.agent.shared().triggers_off(move |t| t.get(&at)).await {
        Ok(Some(t)) => JsonReply::ok(Value::Object(t)),
        Ok(None) => JsonReply::error(StatusCode::NOT_FOUND, format!("no trigger `{id}`")),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `PATCH /api/triggers/{id}`: merges the body into the trigger (RFC 7396).
pub(crate) async fn patch_trigger(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> JsonReply {
    let patch = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let at = id.clone();
    match state.agent.shared().triggers_off(move |t| t.update(&at, &patch, By::Host)).await {
        Ok(t) => JsonReply::ok(Value::Object(t)),
        Err(TriggerError::Unknown(_)) => JsonReply::error(StatusCode::NOT_FOUND, format!("no trigger `{id}`")),
        Err(e @ TriggerError::Store(_)) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => JsonReply::bad_request(e.to_string()),
    }
}

/// `DELETE /api/triggers/{id}` → `{"deleted": true}`, or 404.
pub(crate) async fn delete_trigger(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> JsonReply {
    let at = id.clone();
    match state.agent.shared().triggers_off(move |t| t.delete(&at, By::Host)).await {
        Ok(true) => JsonReply::ok(json!({"deleted": true})),
        Ok(false) => JsonReply::error(StatusCode::NOT_FOUND, format!("no trigger `{id}`")),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/triggers/fired`: the triggers delivered so far (last 256).
pub(crate) async fn fired(State(state): State<Arc<AppState>>) -> JsonReply {
    JsonReply::ok(Value::Array(state.agent.fired()))
}

/// `POST /api/events/{name}` (body: the payload) → the event triggers it
/// fired.
pub(crate) async fn event(State(state): State<Arc<AppState>>, Path(name): Path<String>, bytes: Bytes) -> JsonReply {
    let payload = match body::object(&bytes) {
        Ok(b) => Value::Object(b),
        Err(reply) => return reply,
    };
    JsonReply::ok(json!({"fired": state.agent.fire_event(&name, payload).await}))
}

/// `GET /api/agent/plugins`: the agent-loop plugins in chain order, with
/// what each declares (hooks, tools, schedules, prompt suffix, frontend
/// assets).
pub(crate) async fn plugins(State(state): State<Arc<AppState>>) -> JsonReply {
    let list: Vec<Value> = state
        .agent
        .plugins()
        .iter()
        .map(|p| {
            let d = &p.decl;
            json!({
                "name": p.name,
                "version": p.version,
                "priority": d.priority,
                // `register` only marks a plugin that starts by registering.
                "hooks": p.hooks.iter().filter(|h| h.is_agent() && **h != HookName::Register).map(|h| h.as_str()).collect::<Vec<_>>(),
                "tools": d.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                "schedules": d.schedules,
                "prompt_suffix": d.prompt_suffix,
                "frontend": d.frontend,
                "refused": d.refused,
                "permissions": p.faust.as_ref().map(|f| f.permissions.clone()),
                "state": crate::app::catalog::State::Loaded,
            })
        })
        .collect();
    // The catalog's errors of plugins that asked for the agent loop (a
    // failed start, dependencies, a load error), as every surface shows them.
    let failed = state.catalog.entries();
    let failed = failed.values().filter(|e| e.agent_candidate && e.status.state == crate::app::catalog::State::Error);
    let mut list = list;
    list.extend(failed.map(
        |e| json!({"name": e.status.name, "state": e.status.state, "kind": e.status.kind, "error": e.status.error}),
    ));
    JsonReply::ok(Value::Array(list))
}

/// `GET /api/agent/health`: each agent-loop plugin's `health_check`.
pub(crate) async fn health(State(state): State<Arc<AppState>>) -> JsonReply {
    JsonReply::ok(Value::Object(state.agent.health().await))
}

/// `POST /faust/plugins/{id}/communicate` (FaustBot's route): the body is
/// the payload; the plugin's reply object is the answer. 404 unknown (or
/// failed to start), 503 disabled, 400 no `communicate` hook or a reply that
/// is not an object, 500 when the plugin failed.
pub(crate) async fn communicate(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> JsonReply {
    let payload = match body::object(&bytes) {
        Ok(b) => Value::Object(b),
        Err(reply) => return reply,
    };
    let installed = super::reload::plugin_dir(&state, &id).is_ok();
    if installed && !crate::app::registry::is_enabled(&state.home, &id) {
        return JsonReply::detail(StatusCode::SERVICE_UNAVAILABLE, format!("Plugin is disabled: {id}"));
    }
    if state.agent.plugin(&id).is_none() {
        let refused = state.catalog.entry(&id).filter(|e| e.declares(HookName::Communicate)).and_then(|e| e.refused);
        if let Some(refusal) = refused {
            return JsonReply::refused(&refusal, HookName::Communicate.as_str());
        }
        return JsonReply::detail(StatusCode::NOT_FOUND, format!("Plugin not found: {id}"));
    }
    match state.agent.communicate(&id, payload).await {
        Ok(reply) => JsonReply::ok(reply),
        Err(AgentError::NoHook { .. }) => {
            JsonReply::detail(StatusCode::BAD_REQUEST, format!("Plugin does not support communicate: {id}"))
        }
        Err(AgentError::NotAnObject { .. }) => {
            JsonReply::detail(StatusCode::BAD_REQUEST, format!("Plugin communicate result must be dict: {id}"))
        }
        // FaustBot's 500 for a plugin that failed, whatever the kind (the
        // route's shape, like test-hook's 400); the body says the kind.
        Err(e) => {
            let kind = match &e {
                AgentError::Failed { error, .. } => Some(error.kind()),
                _ => None,
            };
            let mut reply = JsonReply::detail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            if let Some(kind) = kind {
                reply.body["kind"] = json!(kind.as_str());
            }
            reply
        }
    }
}

/// `GET /faust/admin/plugins/assets` (FaustBot's route): every enabled
/// agent-loop plugin's frontend assets, in chain order —
/// `{"status":"ok","assets":[{"type","path","plugin_id",…}]}`.
pub(crate) async fn assets(State(state): State<Arc<AppState>>) -> JsonReply {
    let plugins_dir = state.home.plugins_dir().to_owned();
    let plugins = state.agent.plugins();
    let listed = tokio::task::spawn_blocking(move || {
        let mut assets = Vec::new();
        // Only the checked `frontend` lists (relative paths under frontend/): a
        // plugin cannot advertise another origin's script or another plugin's
        // file; and only files the frontend route would serve (no link out).
        for p in plugins.iter() {
            let root = frontend_root(&plugins_dir, &p.name).ok();
            for (kind, files) in [("js", &p.decl.frontend.js), ("css", &p.decl.frontend.css)] {
                for f in files {
                    let rel = f.trim_start_matches('/');
                    if !root.as_ref().is_some_and(|r| r.is_file(std::path::Path::new(rel))) {
                        tracing::debug!(
                            "plugin '{}': frontend asset `{rel}` is not a file beneath its frontend/",
                            p.name
                        );
                        continue;
                    }
                    let path = format!("/faust/plugins/{}/frontend/{rel}", p.name);
                    assets.push(json!({"type": kind, "path": path, "plugin_id": p.name}));
                }
            }
        }
        assets
    })
    .await
    .unwrap_or_default();
    JsonReply::ok(json!({"status": "ok", "assets": listed}))
}

/// `<plugins>/<id>/frontend`, held open; nothing below it through a link.
fn frontend_root(
    plugins_dir: &std::path::Path,
    id: &str,
) -> Result<crate::manifest::beneath::Root, crate::manifest::beneath::BeneathError> {
    crate::manifest::beneath::Root::open(&plugins_dir.join(id))?.sub_dir(std::path::Path::new("frontend"))
}

/// `GET /faust/plugins/{id}/frontend/{path}`: a file of the plugin's
/// `frontend/` directory; nothing outside it — every component below the
/// plugin directory is opened without following a link, `..` is refused
/// (`manifest::beneath`), so neither a `frontend` that is a link nor a link
/// inside it serves a file from elsewhere.
pub(crate) async fn frontend(
    State(state): State<Arc<AppState>>,
    Path((id, path)): Path<(String, String)>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let not_found = || JsonReply::detail(StatusCode::NOT_FOUND, "Not Found".to_owned()).into_response();
    if crate::manifest::validate_name(&id).is_err() {
        return not_found();
    }
    if std::path::Path::new(&path).components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return not_found();
    }
    let plugins_dir = state.home.plugins_dir().to_owned();
    let file = std::path::PathBuf::from(&path);
    let read =
        tokio::task::spawn_blocking(move || frontend_root(&plugins_dir, &id)?.read(&file, FRONTEND_FILE_LIMIT)).await;
    match read {
        Ok(Ok(bytes)) => {
            ([(axum::http::header::CONTENT_TYPE, content_type(std::path::Path::new(&path)))], bytes).into_response()
        }
        Ok(Err(e)) => {
            if !e.reason.is_not_found() {
                tracing::warn!("frontend file refused: {e}");
            }
            not_found()
        }
        Err(_) => not_found(),
    }
}

/// A frontend file larger than this is not served.
const FRONTEND_FILE_LIMIT: u64 = 64 * 1024 * 1024;

/// The `Content-Type` of a frontend file, by extension.
fn content_type(file: &std::path::Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        Some("wasm") => "application/wasm",
        _ => "application/octet-stream",
    }
}
