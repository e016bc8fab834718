//! FaustBot's plugin admin routes, for frontends written against FaustBot:
//! the plugin list (`GET /faust/admin/plugins`) and per-plugin enable and
//! disable, which persist the choice and reload that plugin at once.
//! Shapes follow FaustBot (`{"status":"ok",…}`, errors as `{"detail"}`);
//! unlike FaustBot, an unknown plugin is a 404 rather than a 200.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::body::JsonReply;
use crate::app::catalog::State as PluginState;

/// `GET /faust/admin/plugins`: every agent-loop plugin as FaustBot lists
/// them, plus the catalog's errors of plugins that asked for the loop
/// (`"state":"error"` with `"error"`).
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> JsonReply {
    let health = state.agent.health().await;
    let mut items: Vec<Value> = state
        .agent
        .plugins()
        .iter()
        .map(|p| {
            let pj = p.faust.as_deref();
            let config = p.services.config_snapshot();
            json!({
                "id": p.name,
                "name": pj.map_or(p.name.as_str(), |f| f.name.as_str()),
                "version": p.version,
                "description": pj.map_or("", |f| f.description.as_str()),
                "author": pj.map_or("", |f| f.author.as_str()),
                "homepage": pj.map_or("", |f| f.homepage.as_str()),
                "enabled": true,
                "permissions": pj.map(|f| f.permissions.clone()).unwrap_or_default(),
                "priority": pj.map_or(p.decl.priority.unwrap_or(0), |f| f.priority),
                "tools": p.decl.tools.iter().map(|t| json!({"name": t.name, "enabled": true, "description": t.description})).collect::<Vec<_>>(),
                "middlewares": [],
                "refused": p.decl.refused,
                "config": {
                    "plugin_id": p.name,
                    "schema": config["schema"],
                    "values": config["values"],
                },
                "health": health.get(&p.name).cloned().unwrap_or(json!({"status": "unknown"})),
                "state": PluginState::Loaded,
            })
        })
        .collect();
    // The catalog's errors of plugins that asked for the agent loop.
    let entries = state.catalog.entries();
    let failed = entries.values().filter(|e| e.agent_candidate && e.status.state == PluginState::Error);
    for e in failed {
        let error = e.status.error.as_deref().unwrap_or_default();
        items.push(json!({
            "id": e.status.name,
            "name": e.status.name,
            "version": e.status.version,
            "enabled": e.status.enabled,
            "state": e.status.state,
            "error": error,
            "health": {"status": "error", "error": error},
        }));
    }
    JsonReply::ok(json!({"status": "ok", "items": items}))
}

/// `POST /faust/admin/plugins/{id}/enable`.
pub(crate) async fn enable(state: State<Arc<AppState>>, id: Path<String>) -> JsonReply {
    set_enabled(state, id, true).await
}

/// `POST /faust/admin/plugins/{id}/disable`.
pub(crate) async fn disable(state: State<Arc<AppState>>, id: Path<String>) -> JsonReply {
    set_enabled(state, id, false).await
}

async fn set_enabled(State(state): State<Arc<AppState>>, Path(id): Path<String>, enabled: bool) -> JsonReply {
    use super::plugin_admin::Switched;
    match super::plugin_admin::set_enabled(&state, &id, enabled).await {
        Switched::Done { active } => {
            JsonReply::ok(json!({"status": "ok", "plugin_id": id, "enabled": enabled, "active": active}))
        }
        Switched::NotFound(_) => JsonReply::detail(StatusCode::NOT_FOUND, format!("Plugin not found: {id}")),
        Switched::Failed(e) => JsonReply::detail(StatusCode::INTERNAL_SERVER_ERROR, e),
        // The choice is kept; the plugin could not start (its error says why).
        Switched::NotStarted(e) => JsonReply::with_status(
            StatusCode::BAD_REQUEST,
            json!({"status": "error", "plugin_id": id, "enabled": enabled, "detail": e.to_string()}),
        ),
    }
}
