//! LibreFang's plugin routes (spec section 9) and `GET /api/plugins`.
//! The list and doctor report the daemon's catalog (one status per plugin,
//! the one `ctxhost doctor` and `plugin list` compute); each route also
//! reads the plugins dir when called, so a plugin that appears while the
//! daemon runs is listed, test-hookable and reloadable at once.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::body::{self, JsonReply};
use super::reload::{self, ReloadError};
use crate::protocol::{HookName, HookRequest};
use crate::runner::{CallOptions, Runner};

/// `GET /api/plugins`: the catalog's status of every plugin of the plugins
/// dir (`[{"name","version","runtime","hooks","enabled","error"?,"state",…}]`):
/// what the daemon runs, and a plugin that appeared since, loaded at a glance;
/// with what the operator sees of each: its agent-loop `priority`, its
/// recorded `grants` and the `sandbox` its calls run under (`null` for a
/// plugin not loaded).
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> JsonReply {
    let reader = state.clone();
    let listed = tokio::task::spawn_blocking(move || {
        let entries = reader.catalog.entries();
        let statuses = reader.catalog.current(&reader.load_context());
        let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
        let mut grants = crate::host::grants::get_many(&reader.home, &names).unwrap_or_else(|e| {
            tracing::warn!("GET /api/plugins: the grants could not be read: {e}");
            Default::default()
        });
        let list: Vec<Value> = statuses
            .into_iter()
            .map(|status| {
                let loaded = entries.get(&status.name).and_then(|e| e.plugin.clone());
                let grants = grants.remove(&status.name);
                let mut item = serde_json::to_value(&status).unwrap_or_else(|_| json!({}));
                item["priority"] = json!(loaded.as_ref().and_then(|p| match &p.faust {
                    Some(f) => Some(f.priority),
                    None => p.agent.priority,
                }));
                item["grants"] = grants.as_ref().map_or(Value::Null, super::plugin_admin::grant_json);
                item["sandbox"] = loaded.map_or(Value::Null, |p| json!(p.runner.sandbox()));
                item
            })
            .collect();
        list
    });
    match listed.await {
        Ok(list) => JsonReply::ok(Value::Array(list)),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("listing plugins failed: {e}")),
    }
}

/// `GET /api/plugins/doctor`: `{"runtimes":[…],"plugins":[…],"sandbox":{…}}`,
/// the plugins as `GET /api/plugins` lists them (plus the manual hooks).
pub(crate) async fn doctor(State(state): State<Arc<AppState>>) -> JsonReply {
    let reader = state.clone();
    let report = tokio::task::spawn_blocking(move || {
        let cx = reader.load_context();
        let mut plugins = reader.catalog.current(&cx);
        plugins.extend(reader.catalog.manual().map(|m| m.status));
        crate::app::doctor::report_of(plugins, &cx)
    });
    match report.await {
        Ok(report) => JsonReply::ok(serde_json::to_value(report).unwrap_or_default()),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("the doctor failed: {e}")),
    }
}

/// `POST /api/plugins/scaffold` `{"name","description"?,"runtime"?}` →
/// 201 `{"scaffolded":true,"name","path"}`, 409 when it exists, 400 otherwise.
pub(crate) async fn scaffold(State(state): State<Arc<AppState>>, bytes: Bytes) -> JsonReply {
    let request = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let fields = (|| {
        let name = body::optional_str(&request, "name")?
            .ok_or_else(|| JsonReply::bad_request("`name` is required"))?
            .to_owned();
        let description = body::optional_str(&request, "description")?.map(str::to_owned);
        let runtime = body::optional_str(&request, "runtime")?.map(str::to_owned);
        Ok::<_, JsonReply>((name, description, runtime))
    })();
    let (name, description, runtime) = match fields {
        Ok(f) => f,
        Err(reply) => return reply,
    };
    let plugins_dir = state.home.plugins_dir().to_owned();
    let job_name = name.clone();
    let result = tokio::task::spawn_blocking(move || {
        crate::scaffold::scaffold(
            &plugins_dir,
            &crate::scaffold::ScaffoldRequest {
                name: &job_name,
                description: description.as_deref(),
                runtime: runtime.as_deref(),
            },
        )
    })
    .await;
    match result {
        Ok(Ok(path)) => JsonReply::with_status(
            StatusCode::CREATED,
            json!({"scaffolded": true, "name": name, "path": path.to_string_lossy()}),
        ),
        Ok(Err(e @ crate::scaffold::ScaffoldError::AlreadyExists(_))) => {
            JsonReply::error(StatusCode::CONFLICT, e.to_string())
        }
        Ok(Err(e @ crate::scaffold::ScaffoldError::Io { .. })) => {
            JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Ok(Err(e)) => JsonReply::bad_request(e.to_string()),
        Err(e) => JsonReply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("scaffolding failed: {e}")),
    }
}

/// `POST /api/plugins/{name}/reload`: 200 with the new version's facts, 400
/// on a bad plugin (the old version keeps running), 404 when there is none.
pub(crate) async fn reload(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> JsonReply {
    // The operator's reload: this instance's files become the version every
    // instance on the store runs (the others reload and compare).
    match reload::reload_with(&state, &name, crate::app::catalog::fleet::Rule::Adopt).await {
        Ok(done) => {
            reload::announce(&state, &name).await;
            JsonReply::ok(serde_json::to_value(done).unwrap_or_default())
        }
        Err(e @ ReloadError::NotFound { .. }) => JsonReply::error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => JsonReply::with_status(
            StatusCode::BAD_REQUEST,
            json!({"name": name, "hooks_valid": false, "error": e.to_string(), "stage": e.stage()}),
        ),
    }
}

/// `GET /api/context-engine/metrics`: 204 without plugins, else the flat
/// per-hook view summed over the stack.
pub(crate) async fn engine_metrics(State(state): State<Arc<AppState>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if state.engine.layer_names().is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    JsonReply::ok(serde_json::to_value(state.engine.metrics().flat()).unwrap_or_default()).into_response()
}

/// `POST /api/plugins/{name}/test-hook` `{"hook","input"}`: runs exactly
/// that plugin's hook (no policies, no fallback), like `ctxhost hook`. A
/// plugin the daemon loaded answers with its live version (the load the
/// stack and the agent loop share); any other is loaded from the plugins
/// dir for the call. A failed call is LibreFang's 400
/// whatever its kind (the one route that does not use
/// [`body::hook_failure_status`]: its status is the spec's); the body says
/// the kind.
pub(crate) async fn test_hook(State(state): State<Arc<AppState>>, Path(name): Path<String>, bytes: Bytes) -> JsonReply {
    let dir = match reload::plugin_dir(&state, &name) {
        Ok(dir) => dir,
        Err(e @ ReloadError::NotFound { .. }) => return JsonReply::error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => return JsonReply::bad_request(e.to_string()),
    };
    let request = match body::object(&bytes) {
        Ok(b) => b,
        Err(reply) => return reply,
    };
    let hook_text = match body::optional_str(&request, "hook") {
        Ok(Some(h)) => h.to_owned(),
        Ok(None) => return JsonReply::bad_request("`hook` is required"),
        Err(reply) => return reply,
    };
    let failed = |message: String, elapsed_ms: f64| {
        JsonReply::with_status(
            StatusCode::BAD_REQUEST,
            json!({"hook": hook_text, "plugin": name, "success": false, "elapsed_ms": elapsed_ms, "error": message}),
        )
    };
    let hook: HookName = match hook_text.parse() {
        Ok(h) => h,
        Err(e) => {
            let hint = crate::hint::did_you_mean(&hook_text, HookName::ALL.iter().map(|h| h.as_str()));
            return failed(format!("{e}{hint}"), 0.0);
        }
    };
    let input = match request.get("input") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => return failed(format!("`input` must be a JSON object, not {}", body::type_name(other)), 0.0),
    };
    let hook_request = match HookRequest::from_json(hook, input) {
        Ok(r) => r,
        Err(e) => return failed(e.to_string(), 0.0),
    };
    // The daemon's one load when it has one (the runner the stack and the
    // agent loop share: no second worker pool).
    let live = state.catalog.entry(&name).and_then(|e| e.plugin).map(|p| p.runner.clone());
    let runner: Arc<dyn Runner> = match state.engine.layer(&name).map(|l| l.runner().clone()).or(live) {
        Some(runner) => runner,
        None => {
            let loader = state.clone();
            let loaded = tokio::task::spawn_blocking(move || crate::plugin::load_plugin(&dir, &loader.load_context()))
                .await
                .map_err(|e| e.to_string());
            match loaded {
                Ok(Ok(plugin)) => plugin.runner,
                Ok(Err(e)) => return failed(e.to_string(), 0.0),
                Err(e) => return failed(e, 0.0),
            }
        }
    };
    // Within the host-wide bound on hook processes, like every engine call.
    let Ok(_permit) = state.engine.limiter().acquire().await else {
        return failed("the server is shutting down".into(), 0.0);
    };
    let start = Instant::now();
    let result = runner.call(&hook_request, &CallOptions::default()).await;
    let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok(output) => JsonReply::ok(
            json!({"hook": hook.as_str(), "plugin": name, "success": true, "elapsed_ms": elapsed_ms, "output": output}),
        ),
        // LibreFang's 400 (spec section 9), with the failure's kind.
        Err(e) => {
            let mut reply = failed(e.to_string(), elapsed_ms);
            reply.body["kind"] = json!(e.kind().as_str());
            reply
        }
    }
}
