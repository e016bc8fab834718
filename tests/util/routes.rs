//! `ctxhost serve`'s routes in-process: the daemon's `Router`, loaded from a
//! home as `ctxhost serve` loads it (`server::Routes`: engines, agent loop,
//! timers), called with `tower::ServiceExt::oneshot` — no process, no socket.
//! For tests of what a handler answers; the end-to-end tests (signals,
//! `--watch`, connections, the token over the wire, a client in another
//! language) keep the real daemon (`http::Daemon`).

use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::http::{Client, Response};

/// The daemon's routes over `home`, on a runtime of their own; stopped as
/// `ctxhost serve` stops (pending after_turn calls settle, workers stop)
/// by [`InProcess::stop`] or when dropped.
pub struct InProcess {
    runtime: Option<tokio::runtime::Runtime>,
    routes: Option<ctxhost::server::Routes>,
    router: axum::Router,
}

impl InProcess {
    /// The routes over `home` (its config.toml read as the CLI reads it), no token.
    pub fn start(home: &Path) -> InProcess {
        InProcess::with_token(home, None)
    }

    /// The routes over `home`, the mutating ones guarded by `token`.
    pub fn with_token(home: &Path, token: Option<&str>) -> InProcess {
        let home = ctxhost::home::Home::at(home);
        let (config, _warnings) = ctxhost::config::HostConfig::load(home.config_file())
            .unwrap_or_else(|e| panic!("{}: {e}", home.config_file().display()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let routes = runtime
            .block_on(ctxhost::server::Routes::load(home, config, token.map(str::to_owned)))
            .unwrap_or_else(|e| panic!("the routes did not load: {e}"));
        let router = routes.router();
        InProcess { runtime: Some(runtime), routes: Some(routes), router }
    }

    /// Stops as `ctxhost serve` does on SIGTERM, after its connections closed.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let Some(runtime) = self.runtime.take() else { return };
        if let Some(routes) = self.routes.take() {
            runtime.block_on(routes.stop());
        }
        {
            // The engines go with the last router, inside the runtime their tasks ran on.
            let _inside = runtime.enter();
            drop(std::mem::replace(&mut self.router, axum::Router::new()));
        }
        runtime.shutdown_timeout(Duration::from_secs(10));
    }
}

impl Client for InProcess {
    /// One request, with the headers `http::request` sends.
    fn request(&self, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Response {
        let mut builder = Request::builder().method(method).uri(path).header("host", "in-process");
        let body = body.unwrap_or("");
        if method != "GET" {
            builder = builder.header("content-type", "application/json").header("content-length", body.len());
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let request = builder.body(Body::from(body.to_owned())).expect("a valid request");
        let runtime = self.runtime.as_ref().expect("running");
        runtime.block_on(async {
            let response = self.router.clone().oneshot(request).await.unwrap_or_else(|e| match e {});
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("the whole body");
            Response { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
        })
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.shut_down();
    }
}
