//! The operator's view of the built-in memory: `GET /api/memory/{agent}`
//! (the newest memories, or those matching `q`) and `DELETE
//! /api/memory/{agent}/{id}`. Both are guarded routes (memories are what
//! users said). Never touches a plugin's memory: only the built-in one.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::body::JsonReply;

/// Memories one search returns at most.
const MAX_LIMIT: usize = 500;

#[derive(Debug, Deserialize)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: String,
    limit: Option<usize>,
}

/// `GET /api/memory/{agent}?q=&limit=`.
pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    Query(query): Query<SearchQuery>,
) -> JsonReply {
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_LIMIT);
    let memory = state.engine.default_engine().memory();
    let found = memory.browse(&agent, &query.q, limit).await;
    let total = memory.count(&agent).await;
    match (found, total) {
        (Ok(found), Ok(total)) => {
            let memories: Vec<_> = found
                .into_iter()
                .map(|m| {
                    json!({"id": m.id.to_string(), "content": m.content, "tags": m.tags, "source": m.source,
                           "peer_id": m.peer_id, "created_ms": m.created_ms})
                })
                .collect();
            JsonReply::ok(json!({"agent_id": agent, "total": total, "memories": memories}))
        }
        (Err(e), _) | (_, Err(e)) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `DELETE /api/memory/{agent}/{id}`.
pub(crate) async fn delete(State(state): State<Arc<AppState>>, Path((agent, id)): Path<(String, String)>) -> JsonReply {
    let Ok(row) = id.parse::<i64>() else {
        return JsonReply::error(StatusCode::NOT_FOUND, format!("agent '{agent}' has no memory {id}"));
    };
    match state.engine.default_engine().memory().delete(&agent, row).await {
        Ok(true) => JsonReply::ok(json!({"deleted": true, "id": id})),
        Ok(false) => JsonReply::error(StatusCode::NOT_FOUND, format!("agent '{agent}' has no memory {id}")),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
