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
//! - `GET /metrics` (Prometheus text, [`prometheus`]) and `GET /healthz`.
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

mod agent_loop;
mod agents;
mod auth;
mod body;
mod conn;
mod faust_admin;
mod limits;
mod plugins;
mod prometheus;
mod reload;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, patch, post};

use crate::app::catalog::{Catalog, Options};
use crate::config::HostConfig;
use crate::engine::ContextEngine;
use crate::engine::stack::StackEngine;
use crate::home::Home;
use crate::host::LoadContext;
use crate::protocol::BootstrapRequest;

pub use auth::AddressPolicyError;

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
}

impl AppState {
    fn load_context(&self) -> LoadContext<'_> {
        LoadContext { home: &self.home, config: &self.config, host_env: &LoadContext::process_env }
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
        conn::serve(self.listener, self.routes.router(), &self.routes.state.config.server, shutdown).await;
        self.routes.stop().await;
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
        let (loader_home, loader_config) = (home.clone(), config.clone());
        let (catalog, mut engine, agent, warnings) = tokio::task::spawn_blocking(move || {
            let cx = LoadContext { home: &loader_home, config: &loader_config, host_env: &LoadContext::process_env };
            let catalog = Catalog::load(&cx, &Options::start(&loader_config));
            let mut warnings = catalog.warnings();
            let (engine, w) = crate::app::stack::build(&catalog, &cx)?;
            warnings.extend(w);
            let (agent, w) =
                crate::app::agent_loop::build(&catalog, &cx, engine.metrics().clone()).map_err(ServeError::Agent)?;
            warnings.extend(w);
            Ok::<_, ServeError>((catalog, engine, agent, warnings))
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
        let state = Arc::new(AppState {
            limits: limits::RequestLimits::new(&config.server),
            home,
            config,
            engine,
            catalog,
            agent,
            token,
            reload_lock: tokio::sync::Mutex::new(()),
        });
        Ok(Routes { state, timers })
    }

    /// Every route of the daemon, over these engines.
    pub fn router(&self) -> Router {
        router(self.state.clone())
    }

    /// Closes the after_turn journal (journaled calls not started yet stay
    /// for the next start), waits (bounded) for the `after_turn` calls under
    /// way, stops the timers, then the plugins' persistent workers.
    pub async fn stop(self) {
        self.state.engine.close_journal();
        if tokio::time::timeout(SETTLE_TIMEOUT, self.state.engine.settle()).await.is_err() {
            tracing::warn!(
                "shutdown: after_turn calls still pending after {}s were abandoned",
                SETTLE_TIMEOUT.as_secs()
            );
        }
        drop(self.timers);
        // Persistent workers stop gracefully (stdin closed, then killed).
        self.state.engine.shutdown().await;
        self.state.agent.shutdown().await;
    }
}

fn router(state: Arc<AppState>) -> Router {
    let mutating = Router::new()
        .route("/api/plugins/scaffold", post(plugins::scaffold))
        .route("/api/plugins/{name}/reload", post(plugins::reload))
        .route("/api/plugins/{name}/test-hook", post(plugins::test_hook))
        .route("/api/agents/{agent_id}/{hook}", post(agents::call))
        .route("/api/agents/{agent_id}/messages", post(agent_loop::message))
        .route("/api/agents/{agent_id}/tools/{name}", post(agent_loop::call_tool))
        .route("/api/agent-hooks/{hook}", post(agent_loop::chain))
        .route("/api/plugins/{name}/config", get(agent_loop::get_config).put(agent_loop::put_config))
        // Reads that show config values (often API keys) or run plugin code.
        .route("/api/vfs", get(agent_loop::vfs))
        .route("/api/agent/health", get(agent_loop::health))
        .route("/faust/admin/plugins", get(faust_admin::list))
        .route("/api/triggers", post(agent_loop::create_trigger))
        .route("/api/triggers/{id}", patch(agent_loop::patch_trigger).delete(agent_loop::delete_trigger))
        .route("/api/events/{name}", post(agent_loop::event))
        .route("/faust/plugins/{id}/communicate", post(agent_loop::communicate))
        .route("/faust/admin/plugins/{id}/enable", post(faust_admin::enable))
        .route("/faust/admin/plugins/{id}/disable", post(faust_admin::disable))
        // Starts processes (runtime probes) and loads every plugin.
        .route("/api/plugins/doctor", get(plugins::doctor))
        // The token first: an unauthenticated body is never read.
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::guard))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .route("/api/plugins", get(plugins::list))
        .route("/api/context-engine/metrics", get(plugins::engine_metrics))
        .route("/api/tools", get(agent_loop::tools))
        .route("/api/triggers", get(agent_loop::list_triggers))
        .route("/api/triggers/fired", get(agent_loop::fired))
        .route("/api/triggers/{id}", get(agent_loop::get_trigger))
        .route("/api/agent/plugins", get(agent_loop::plugins))
        .route("/faust/admin/plugins/assets", get(agent_loop::assets))
        .route("/faust/plugins/{id}/frontend/{*path}", get(agent_loop::frontend))
        .route("/metrics", get(prometheus::metrics))
        .route("/healthz", get(healthz))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::guard))
        .merge(mutating)
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(state.limits.max_body()))
        .with_state(state)
}

async fn healthz(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> body::JsonReply {
    body::JsonReply::ok(serde_json::json!({"status": "ok", "plugins": state.engine.layer_names()}))
}

async fn not_found(uri: axum::http::Uri) -> body::JsonReply {
    body::JsonReply::error(axum::http::StatusCode::NOT_FOUND, format!("no route for {}", uri.path()))
}
