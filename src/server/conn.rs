//! The daemon's connections: the accept loop and HTTP/1.1 on each accepted
//! socket (hyper, serving the axum router).
//!
//! Owns how long and how many connections stay open:
//! - at most `[server] max_connections` at once; one more is answered a
//!   minimal `503` and closed (a bounded number of refusals at a time; past
//!   that, closed unanswered);
//! - a connection must complete a request head within `header_timeout_secs`
//!   of opening or of its previous response (hyper's header read timer runs
//!   whenever a connection waits for a head), so neither a slow header nor an
//!   idle keep-alive connection holds a slot longer than that;
//! - an accept error (`EMFILE` when descriptors run out) backs off instead of
//!   spinning;
//! - shutdown stops accepting, closes idle connections and gives requests
//!   under way up to `request_timeout_secs` (their own bound) to finish.
//!
//! It must never wait on a client without a bound, nor let one client's
//! connections starve the accept loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::config::ServerConfig;

/// At most this many refused connections are being answered at once.
const REFUSALS_AT_ONCE: usize = 64;

/// A refused connection gets this long to take its 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Accept errors other than a vanished peer wait this long before the next accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS)));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(limits.header_timeout_secs)).keep_alive(true);
    let mut last_warning: Option<Instant> = None;
    let mut last_refusal_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
                        if last_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                            tracing::warn!("accepting a connection failed: {e} (retrying)");
                            last_warning = Some(Instant::now());
                        }
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if last_refusal_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                tracing::warn!(
                    "{} connections are open (`[server] max_connections`): refusing new ones with 503",
                    limits.max_connections
                );
                last_refusal_warning = Some(Instant::now());
            }
            if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(refusal);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that goes away mid-request is its own business.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    let bound = Duration::from_secs(limits.request_timeout_secs) + Duration::from_secs(1);
    if tokio::time::timeout(bound, graceful.shutdown()).await.is_err() {
        tracing::warn!("shutdown: connections still open after {}s were dropped", bound.as_secs());
    }
}

/// The connection limit is reached: a minimal 503, then close — bounded in time.
async fn refuse(mut stream: TcpStream) {
    const BODY: &str = "{\"error\":\"too many open connections (`[server] max_connections`); retry later\"}";
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent until it closes, so closing does not
        // reset the connection before the client read the reply.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Errors about one connection that vanished before it was accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}
