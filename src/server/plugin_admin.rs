//! The operator's actions on one plugin of any kind: enable and disable
//! (`POST /api/plugins/{name}/enable|disable`, the code FaustBot's admin
//! routes use too: the choice is recorded, then the plugin reloaded) and its
//! grant (`PUT /api/plugins/{name}/grants`: `app::grant`, the computation
//! `ctxhost plugin grant` makes, then a reload so the grant is in force).
//!
//! Never holds a lock across a plugin call: the reload takes its own.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::body::{self, JsonReply};
use super::reload::{self, ReloadError};
use crate::app::grant::{GrantChange, GrantError};

/// What setting a plugin's enable choice came to.
pub(crate) enum Switched {
    /// Recorded and reloaded: `active` it serves calls now.
    Done { active: bool },
    /// Recorded, but the plugin could not start (the reload's error).
    NotStarted(ReloadError),
    /// No such plugin.
    NotFound(ReloadError),
    /// The choice could not be recorded.
    Failed(String),
}

/// Records `enabled` for plugin `name` and reloads it (a disabled plugin
/// leaves the stack and the agent loop).
pub(crate) async fn set_enabled(state: &Arc<AppState>, name: &str, enabled: bool) -> Switched {
    if let Err(e) = reload::plugin_dir(state, name) {
        return Switched::NotFound(e);
    }
    let (home, plugin) = (state.home.clone(), name.to_owned());
    let recorded = crate::host::store::off_runtime("set_plugin_choice", move || {
        crate::host::state::set_enabled(&home, &plugin, enabled)
    })
    .await;
    match recorded {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Switched::Failed(e.to_string()),
        Err(e) => return Switched::Failed(e.to_string()),
    }
    match reload::reload(state, name).await {
        Ok(done) => Switched::Done { active: done.active },
        Err(e) => Switched::NotStarted(e),
    }
}

/// `POST /api/plugins/{name}/enable`.
pub(crate) async fn enable(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> JsonReply {
    switch(&state, name, true).await
}

/// `POST /api/plugins/{name}/disable`.
pub(crate) async fn disable(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> JsonReply {
    switch(&state, name, false).await
}

async fn switch(state: &Arc<AppState>, name: String, enabled: bool) -> JsonReply {
    let plugin_state = |state: &AppState| state.catalog.entry(&name).map_or(json!(null), |e| json!(e.status.state));
    match set_enabled(state, &name, enabled).await {
        Switched::Done { active } => {
            JsonReply::ok(json!({"name": name, "enabled": enabled, "state": plugin_state(state), "active": active}))
        }
        Switched::NotStarted(e) => JsonReply::with_status(
            StatusCode::BAD_REQUEST,
            json!({"name": name, "enabled": enabled, "state": plugin_state(state), "error": e.to_string()}),
        ),
        Switched::NotFound(e) => JsonReply::error(StatusCode::NOT_FOUND, e.to_string()),
        Switched::Failed(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `PUT /api/plugins/{name}/grants` `{"network"?,"filesystem"?,"env"?,
/// "source_builds"?,"dry_run"?}`: the grant `ctxhost plugin grant` would
/// record with those flags (`env` is the whole list), recorded and put in
/// force by a reload of an enabled plugin; a dry run records nothing.
pub(crate) async fn put_grants(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> JsonReply {
    if let Err(e) = reload::plugin_dir(&state, &name) {
        return match e {
            ReloadError::NotFound { .. } => JsonReply::error(StatusCode::NOT_FOUND, e.to_string()),
            e => JsonReply::bad_request(e.to_string()),
        };
    }
    let request = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let flag = |key: &str| match request.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => {
            Err(JsonReply::bad_request(format!("`{key}` must be true or false, not {}", body::type_name(other))))
        }
    };
    let env = match request.get("env") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .map(Some)
            .ok_or_else(|| JsonReply::bad_request("`env` must be a list of variable names")),
        Some(other) => Err(JsonReply::bad_request(format!(
            "`env` must be a list of variable names, not {}",
            body::type_name(other)
        ))),
    };
    let fields = (|| {
        Ok::<_, JsonReply>((flag("network")?, flag("filesystem")?, flag("source_builds")?, flag("dry_run")?, env?))
    })();
    let (network, filesystem, source_builds, dry_run, env) = match fields {
        Ok(f) => f,
        Err(reply) => return reply,
    };
    if let Some(key) =
        request.keys().find(|k| !["network", "filesystem", "env", "source_builds", "dry_run"].contains(&k.as_str()))
    {
        let hint = crate::hint::did_you_mean(key, ["network", "filesystem", "env", "source_builds", "dry_run"]);
        return JsonReply::bad_request(format!("unknown field `{key}`{hint}"));
    }
    let (home, plugin) = (state.home.clone(), name.clone());
    let done = tokio::task::spawn_blocking(move || {
        let recorded_env = match &env {
            Some(_) => {
                crate::host::grants::get(&home, &plugin).map_err(GrantError::from)?.map(|g| g.env).unwrap_or_default()
            }
            None => Vec::new(),
        };
        let change = GrantChange {
            network: network.unwrap_or(false),
            filesystem: filesystem.unwrap_or(false),
            revoke_env: match &env {
                Some(list) => recorded_env.into_iter().filter(|v| !list.contains(v)).collect(),
                None => Vec::new(),
            },
            add_env: env.unwrap_or_default(),
            source_builds,
            dry_run: dry_run.unwrap_or(false),
        };
        crate::app::grant::grant(&home, &plugin, &change)
    })
    .await;
    let done = match done {
        Ok(Ok(done)) => done,
        Ok(Err(e @ GrantError::NotFound(_))) => return JsonReply::error(StatusCode::NOT_FOUND, e.to_string()),
        Ok(Err(e @ (GrantError::BadEnv(_) | GrantError::Manifest { .. }))) => {
            return JsonReply::bad_request(e.to_string());
        }
        Ok(Err(e)) => return JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("the grant task failed: {e}")),
    };
    let mut reply = json!({
        "name": done.name,
        "dry_run": done.dry_run,
        "grant": grant_json(&done.grant),
        "before": done.before.as_ref().map(grant_json),
        "changes": done.changes,
        "opens": done.opens,
        "summary": done.summary,
        "location": done.location,
        "reloaded": false,
        "active": false,
    });
    let enabled = state.catalog.entry(&name).is_some_and(|e| e.status.enabled);
    if !done.dry_run && enabled {
        // In force now: the load narrows the manifest's settings to the grant.
        match reload::reload(&state, &name).await {
            Ok(r) => {
                reply["reloaded"] = json!(true);
                reply["active"] = json!(r.active);
            }
            Err(e) => reply["reload_error"] = json!(e.to_string()),
        }
    }
    JsonReply::ok(reply)
}

/// A grant as the plugin routes show it.
pub(crate) fn grant_json(g: &crate::host::grants::Grant) -> Value {
    json!({
        "network": g.allow_network,
        "filesystem": g.allow_filesystem,
        "readable_paths": g.readable_paths,
        "writable_paths": g.writable_paths,
        "env": g.env,
        "source_builds": g.source_builds,
    })
}
