//! The daemon's request log: one line per request on the `ctxhost::daemon`
//! log target, shown at the default log level of `ctxhost serve` —
//! `GET /api/plugins 200 1.2 ms`.
//!
//! A line holds the method, the path (never the query string, which may
//! carry a secret), the status and the time to the response head. It must
//! never log a header (the bearer token), a body, or a query.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The log target of the daemon's request and lifecycle lines.
pub const TARGET: &str = "ctxhost::daemon";

/// The middleware: times the request and logs its line.
pub(crate) async fn log(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    tracing::info!(target: TARGET, "{method} {path} {} {ms:.1} ms", response.status().as_u16());
    response
}
