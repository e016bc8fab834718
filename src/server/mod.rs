//! `ctxhost serve`: the engine as an HTTP service any agent can call.
//!
//! The daemon owns one [`StackEngine`] (the configured plugin stack over the
//! built-in engine) and serves three kinds of routes:
//!
//! - LibreFang's plugin routes (spec section 9: scaffold, doctor, reload,
//!   context-engine metrics, test-hook) plus `GET /api/plugins`, all reading
//!   the plugins dir on demand, so a plugin that appears while the daemon
//!   runs is listed, test-hookable and reloadable at once ([`plugins`]);
//! - the agent API, `POST /api/agents/{agent_id}/{hook}`, answering what the
//!   engine decided after stack merging and fallbacks ([`agents`]);
//! - `GET /metrics` (Prometheus text, [`prometheus`]) and `GET /healthz`;
//! - the dashboard, `GET /` and its embedded files ([`dashboard`]), which
//!   reads all it shows from the routes above.
//!
//! Every request is logged in one line ([`access`]); a path no route has is a
//! 404 naming the nearest route ([`route_table`] is the one list the router
//! is built from).
//!
//! Every request body is parsed here, so bad JSON is a 400 that says what is
//! wrong, never a 500 ([`body`]). A bearer token guards the mutating routes
//! and doctor, and binding beyond loopback without one is refused ([`auth`]).
//! Connections are capped and timed out ([`conn`]); bodies are capped per
//! request and in total, requests timed out ([`limits`]). Reloads
//! swap a layer atomically: calls under way finish on the old plugin
//! ([`reload`]); `--watch` triggers them on file changes ([`watch`]).
//!
//! This module must never run a plugin call on the async worker threads'
//! critical path with blocking work: loading (launcher probes, component
//! compiles) runs on the blocking pool.

mod access;
mod agent_loop;
mod agents;
mod auth;
mod body;
mod conn;
mod dashboard;
mod faust_admin;
mod feed;
mod health;
mod limits;
mod logs;
mod memory;
mod plugin_admin;
mod plugins;
mod prometheus;
mod reload;
mod turns;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{MethodRouter, delete, get, patch, post, put};

use crate::app::catalog::{Catalog, Options};
use crate::config::HostConfig;
use crate::engine::ContextEngine;
use crate::engine::stack::StackEngine;
use crate::home::Home;
use crate::host::LoadContext;
use crate::protocol::BootstrapRequest;

pub use access::TARGET as LOG_TARGET;
pub use auth::AddressPolicyError;
pub use logs::capture_layer;

/// How long shutdown waits for pending `after_turn` calls.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How the daemon listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    /// Bearer token for the mutating routes; required off loopback.
    pub token: Option<String>,
    /// Reload stack plugins when their manifest, hook scripts or component change.
    pub watch: bool,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(transparent)]
    Address(#[from] AddressPolicyError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("cannot watch the plugins dir for --watch: {0}")]
    Watch(String),
    #[error("agent-loop host services: {0}")]
    Agent(crate::host::services::ServiceError),
    #[error(transparent)]
    Journal(#[from] crate::host::store::journal::JournalError),
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

/// What every handler shares.
pub(crate) struct AppState {
    home: Home,
    config: HostConfig,
    engine: StackEngine,
    /// Every plugin of the home: its one load and its status (what the
    /// plugin routes, doctor and reload read and write).
    catalog: Catalog,
    /// The agent loop: every enabled plugin with agent hooks or registrations.
    agent: Arc<crate::agent::engine::AgentEngine>,
    token: Option<String>,
    /// One reload at a time: two reloads of one plugin must not interleave.
    reload_lock: tokio::sync::Mutex<()>,
    /// Body sizes, the shared body budget, the request timeout (`[server]`).
    limits: limits::RequestLimits,
    /// The store's change feed (PostgreSQL): what this instance tells the
    /// others beyond what its store writes announce (a reload).
    feed: Option<Arc<dyn crate::host::store::feed::Feed>>,
    /// The metrics over time (`GET /api/health/series`).
    health: Arc<health::Health>,
    /// Each agent's recent turns (`GET /api/turns`).
    turns: Arc<turns::TurnLog>,
    /// Set once when the daemon stops: long-lived answers (the log stream) end.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    fn load_context(&self) -> LoadContext<'_> {
        LoadContext { home: &self.home, config: &self.config, host_env: &LoadContext::process_env }
    }

    /// A plugin of the stack's configuration that declares `hook` and is
    /// refused here (its files are not the fleet's version).
    fn refused_in_stack(&self, hook: crate::protocol::HookName) -> Option<Arc<crate::app::catalog::fleet::Refusal>> {
        self.catalog.refusing_in_stack(&self.engine, hook)
    }

    /// A plugin that asks to take part in the agent loop, declares `hook`
    /// and is refused here.
    fn refused_in_agent_loop(
        &self,
        hook: crate::protocol::HookName,
    ) -> Option<Arc<crate::app::catalog::fleet::Refusal>> {
        self.catalog.refusing(hook, |_, entry| entry.agent_candidate)
    }
}

/// A daemon that has loaded its engine and bound its port, not yet serving.
pub struct Server {
    routes: Routes,
    listener: tokio::net::TcpListener,
    /// Watching since `bind`, so no change after the address is printed is missed.
    watcher: Option<notify::RecommendedWatcher>,
}

impl Server {
    /// [`Routes::load`], then binds `options.addr` (and starts `--watch`).
    ///
    /// # Errors
    /// A non-loopback address without a token, a port in use, or what
    /// [`Routes::load`] fails with.
    pub async fn bind(home: Home, config: HostConfig, options: ServeOptions) -> Result<Server, ServeError> {
        auth::check_address(options.addr, options.token.as_deref())?;
        // What a daemon killed before left in the temp dir goes first.
        crate::runner::process::tmp::remove_stale_in_temp_dir();
        let routes = Routes::load(home, config, options.token).await?;
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| ServeError::Bind { addr: options.addr, source })?;
        let watcher = if options.watch { Some(watch::start(routes.state.clone())?) } else { None };
        Ok(Server { routes, listener, watcher })
    }

    /// The bound address (the real port when `:0` was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then stops accepting, lets requests
    /// under way finish and stops as [`Routes::stop`] does (the `after_turn`
    /// calls under way finish, bounded; journaled ones not started yet stay
    /// for the next start).
    ///
    /// # Errors
    /// The watcher could not start, or the listener failed.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
        let _watcher = self.watcher;
        // Long-lived answers (the log stream) end as the shutdown begins, so
        // the graceful wait is only for requests under way.
        let state = self.routes.state.clone();
        let shutdown = async move {
            shutdown.await;
            state.stopping.send_replace(true);
        };
        conn::serve(self.listener, self.routes.router(), &self.routes.state.config.server, shutdown).await;
        self.routes.stop().await;
        tracing::info!(target: LOG_TARGET, "stopped");
        Ok(())
    }
}

/// The daemon without a socket: the loaded engines, the agent loop's timers
/// and the routes over them. [`Server`] serves these on a port; a test can
/// call the [`Router`] in-process (`tower::ServiceExt::oneshot`).
pub struct Routes {
    state: Arc<AppState>,
    /// Trigger watcher, schedules and heartbeats of the agent loop.
    timers: crate::agent::timers::Timers,
    /// Applies what other instances on the store changed (PostgreSQL).
    follower: Option<crate::app::follow::Follower>,
    /// The health sampler and the turn recorder.
    tasks: Tasks,
}

/// Background tasks of the routes, stopped when dropped.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Routes {
    /// Loads the catalog of `home` (every plugin once), builds the stack and
    /// the agent loop from it, starts the plugins that register at run time,
    /// bootstraps the stack, opens the after_turn journal (replaying what a
    /// killed daemon left) and starts the timers. Load warnings are logged.
    /// `token` guards the mutating routes.
    ///
    /// # Errors
    /// The memory database or the agent loop's state cannot be opened, or
    /// bootstrap fails.
    pub async fn load(home: Home, config: HostConfig, token: Option<String>) -> Result<Routes, ServeError> {
        // Every plugin loaded once (and pip run, when the operator asked) on
        // the blocking pool; the stack and the agent loop share the loads.
        // The change feed's last id is read before anything is loaded, so a
        // change committed while loading is applied after.
        let (loader_home, loader_config) = (home.clone(), config.clone());
        let (feed, catalog, mut engine, agent, warnings) = tokio::task::spawn_blocking(move || {
            let feed = crate::host::store::open_feed(&loader_home)
                .and_then(|f| f.map(|f| f.head().map(|seen| (f, seen))).transpose())
                .map_err(|e| ServeError::Agent(crate::host::services::ServiceError::service(e.to_string())))?;
            let cx = LoadContext { home: &loader_home, config: &loader_config, host_env: &LoadContext::process_env };
            let catalog = Catalog::load(&cx, &Options::start(&loader_config));
            let mut warnings = catalog.warnings();
            let (engine, w) = crate::app::stack::build(&catalog, &cx)?;
            warnings.extend(w);
            let (agent, w) =
                crate::app::agent_loop::build(&catalog, &cx, engine.metrics().clone()).map_err(ServeError::Agent)?;
            warnings.extend(w);
            Ok::<_, ServeError>((feed, catalog, engine, agent, warnings))
        })
        .await
        .map_err(|e| ServeError::Io(std::io::Error::other(format!("loading the plugins failed: {e}"))))??;
        for w in warnings {
            tracing::warn!("{w}");
        }
        // Plugins that register at run time (FaustBot's) start now.
        for w in agent.start().await {
            tracing::warn!("{w}");
        }
        // What failed to start is an error in the catalog too.
        catalog.sync(&engine, &agent);
        let engine_config = &config.context_engine;
        let bootstrap = BootstrapRequest {
            context_window_tokens: engine_config.context_window_tokens,
            stable_prefix_mode: engine_config.stable_prefix_mode,
            max_recall_results: engine_config.max_recall_results as u64,
            extra: Default::default(),
        };
        engine.bootstrap(&bootstrap).await?;
        // after_turn goes through the journal from here on; what a daemon or
        // sidecar killed before left there runs now (after the bootstrap, so
        // with its env_overrides).
        let journal = {
            let (home, engine_config) = (home.clone(), config.context_engine.clone());
            tokio::task::spawn_blocking(move || crate::engine::durable::open_journal(&home, &engine_config))
                .await
                .map_err(|e| ServeError::Io(std::io::Error::other(e)))??
        };
        engine.attach_journal(journal);
        let timers = crate::agent::timers::Timers::start(&agent, crate::agent::timers::TICK);
        let health = Arc::new(health::Health::default());
        let sampler = health::start(engine.metrics().clone(), health.clone());
        let (turns, recorder) =
            turns::TurnLog::start(engine.default_engine().clone(), config.context_engine.context_window_tokens);
        let state = Arc::new(AppState {
            health,
            turns,
            stopping: tokio::sync::watch::Sender::new(false),
            limits: limits::RequestLimits::new(&config.server),
            home,
            config,
            engine,
            catalog,
            agent,
            token,
            reload_lock: tokio::sync::Mutex::new(()),
            feed: feed.as_ref().map(|(f, _)| f.clone()),
        });
        let follower = feed.map(|(f, seen)| feed::follow(&state, f, seen));
        Ok(Routes { state, timers, follower, tasks: Tasks(vec![sampler, recorder]) })
    }

    /// Every route of the daemon, over these engines.
    pub fn router(&self) -> Router {
        router(self.state.clone())
    }

    /// Closes the after_turn journal (journaled calls not started yet stay
    /// for the next start), waits (bounded) for the `after_turn` calls under
    /// way, stops the timers, then the plugins' persistent workers.
    pub async fn stop(self) {
        self.state.stopping.send_replace(true);
        drop(self.tasks);
        drop(self.follower);
        self.state.engine.close_journal();
        if tokio::time::timeout(SETTLE_TIMEOUT, self.state.engine.settle()).await.is_err() {
            tracing::warn!(
                "shutdown: after_turn calls still pending after {}s were abandoned",
                SETTLE_TIMEOUT.as_secs()
            );
        }
        // Schedule leases given back: another instance takes them over now.
        let given = self.timers.release().await;
        if !given.is_empty() {
            tracing::info!(target: LOG_TARGET, "schedule leases given back for other instances: {}", given.join(", "));
        }
        drop(self.timers);
        // Persistent workers stop gracefully (stdin closed, then killed).
        self.state.engine.shutdown().await;
        self.state.agent.shutdown().await;
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Anyone who can reach the port.
    Open,
    /// A bearer token when one is set (mutating routes, and reads that show
    /// config values or run plugin code).
    Token,
}

/// The daemon's routes as they are added: the open ones, the guarded ones,
/// and every path, which a path no route has is compared with.
struct RouteTable {
    open: Router<Arc<AppState>>,
    guarded: Router<Arc<AppState>>,
    paths: Vec<&'static str>,
}

impl RouteTable {
    fn route(mut self, path: &'static str, handlers: MethodRouter<Arc<AppState>>, guard: Guard) -> Self {
        if !self.paths.contains(&path) {
            self.paths.push(path);
        }
        match guard {
            Guard::Open => self.open = self.open.route(path, handlers),
            Guard::Token => self.guarded = self.guarded.route(path, handlers),
        }
        self
    }
}

/// Every route of the daemon: the one list the router is built from.
fn route_table() -> RouteTable {
    RouteTable { open: Router::new(), guarded: Router::new(), paths: Vec::new() }
        .route("/api/plugins", get(plugins::list), Guard::Open)
        .route("/api/context-engine/metrics", get(plugins::engine_metrics), Guard::Open)
        .route("/api/tools", get(agent_loop::tools), Guard::Open)
        .route("/api/triggers", get(agent_loop::list_triggers), Guard::Open)
        .route("/api/triggers/fired", get(agent_loop::fired), Guard::Open)
        .route("/api/triggers/{id}", get(agent_loop::get_trigger), Guard::Open)
        .route("/api/agent/plugins", get(agent_loop::plugins), Guard::Open)
        .route("/faust/admin/plugins/assets", get(agent_loop::assets), Guard::Open)
        .route("/faust/plugins/{id}/frontend/{*path}", get(agent_loop::frontend), Guard::Open)
        .route("/metrics", get(prometheus::metrics), Guard::Open)
        .route("/healthz", get(healthz), Guard::Open)
        .route("/api/health/series", get(health::series), Guard::Open)
        .route("/api/agents", get(turns::agents), Guard::Open)
        // The dashboard: fixed files that carry no data (the page reads the API).
        .route("/", get(dashboard::index), Guard::Open)
        .route("/dashboard/{*path}", get(dashboard::asset), Guard::Open)
        .route("/api/plugins/scaffold", post(plugins::scaffold), Guard::Token)
        .route("/api/plugins/{name}/reload", post(plugins::reload), Guard::Token)
        .route("/api/plugins/{name}/test-hook", post(plugins::test_hook), Guard::Token)
        .route("/api/plugins/{name}/enable", post(plugin_admin::enable), Guard::Token)
        .route("/api/plugins/{name}/disable", post(plugin_admin::disable), Guard::Token)
        .route("/api/plugins/{name}/grants", put(plugin_admin::put_grants), Guard::Token)
        .route("/api/agents/{agent_id}/{hook}", post(agents::call), Guard::Token)
        .route("/api/agents/{agent_id}/messages", post(agent_loop::message), Guard::Token)
        .route("/api/agents/{agent_id}/tools/{name}", post(agent_loop::call_tool), Guard::Token)
        .route("/api/agent-hooks/{hook}", post(agent_loop::chain), Guard::Token)
        .route("/api/plugins/{name}/config", get(agent_loop::get_config).put(agent_loop::put_config), Guard::Token)
        // Reads that show config values (often API keys) or run plugin code.
        .route("/api/vfs", get(agent_loop::vfs), Guard::Token)
        .route("/api/agent/health", get(agent_loop::health), Guard::Token)
        .route("/faust/admin/plugins", get(faust_admin::list), Guard::Token)
        .route("/api/triggers", post(agent_loop::create_trigger), Guard::Token)
        .route("/api/triggers/{id}", patch(agent_loop::patch_trigger).delete(agent_loop::delete_trigger), Guard::Token)
        .route("/api/events/{name}", post(agent_loop::event), Guard::Token)
        .route("/faust/plugins/{id}/communicate", post(agent_loop::communicate), Guard::Token)
        .route("/faust/admin/plugins/{id}/enable", post(faust_admin::enable), Guard::Token)
        .route("/faust/admin/plugins/{id}/disable", post(faust_admin::disable), Guard::Token)
        // Plugin output, turns (recalled memories) and the memory itself.
        .route("/api/logs", get(logs::poll), Guard::Token)
        .route("/api/logs/stream", get(logs::stream), Guard::Token)
        .route("/api/turns", get(turns::turns), Guard::Token)
        .route("/api/memory/{agent}", get(memory::search), Guard::Token)
        .route("/api/memory/{agent}/{id}", delete(memory::delete), Guard::Token)
        // Starts processes (runtime probes) and loads every plugin.
        .route("/api/plugins/doctor", get(plugins::doctor), Guard::Token)
}

fn router(state: Arc<AppState>) -> Router {
    let table = route_table();
    let paths: Arc<[&'static str]> = table.paths.into();
    let guarded = table
        .guarded
        // The token first: an unauthenticated body is never read.
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::guard))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));
    table
        .open
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::guard))
        .merge(guarded)
        .fallback(move |uri: axum::http::Uri| async move { not_found(&uri, &paths) })
        .layer(axum::extract::DefaultBodyLimit::max(state.limits.max_body()))
        .layer(axum::middleware::from_fn(access::log))
        .with_state(state)
}

/// `GET /healthz`: 200 `{"status":"ok","plugins"}`; 503
/// `{"status":"degraded","plugins","refused":[…]}` while a plugin is
/// refused here (its files are not the fleet's version): a load balancer
/// then sends the calls to instances that serve them all.
async fn healthz(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> body::JsonReply {
    let plugins = state.engine.layer_names();
    let refused = state.catalog.refused();
    if refused.is_empty() {
        return body::JsonReply::ok(serde_json::json!({"status": "ok", "plugins": plugins}));
    }
    let refused: Vec<serde_json::Value> = refused.iter().map(|r| r.describe()).collect();
    body::JsonReply::with_status(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        serde_json::json!({"status": "degraded", "plugins": plugins, "refused": refused}),
    )
}

/// A path no route has: a 404 naming the nearest route, if one is near.
fn not_found(uri: &axum::http::Uri, routes: &[&str]) -> body::JsonReply {
    let path = uri.path();
    let hint = crate::hint::did_you_mean(path, nearest_routes(path, routes).iter().map(String::as_str));
    body::JsonReply::error(axum::http::StatusCode::NOT_FOUND, format!("no route for {path}{hint}"))
}

/// The route paths as they would read for `path`: a template with as many
/// segments gets `path`'s own segments for its parameters (so
/// `/api/plugins/x/relaod` is compared with `/api/plugins/x/reload`).
fn nearest_routes(path: &str, routes: &[&str]) -> Vec<String> {
    let given: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut out: Vec<String> = Vec::new();
    for template in routes {
        let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
        let filled = if parts.len() == given.len() || parts.last().is_some_and(|p| p.starts_with("{*")) {
            let mut filled = String::new();
            for (i, part) in parts.iter().enumerate() {
                let own = if part.starts_with("{*") {
                    given.get(i..).map(|rest| rest.join("/"))
                } else if part.starts_with('{') {
                    given.get(i).map(|s| (*s).to_owned())
                } else {
                    Some((*part).to_owned())
                };
                filled.push('/');
                filled.push_str(own.as_deref().unwrap_or(part));
            }
            filled
        } else {
            (*template).to_owned()
        };
        if !out.contains(&filled) {
            out.push(filled);
        }
    }
    out
}
