//! What one request may cost: its body's size, the bodies of all requests
//! together, and its time.
//!
//! Every routed request passes [`guard`] (after the token check where a route
//! has one): a body declared or grown past `[server] max_body_bytes` is a
//! 413; its bytes are taken from one budget shared by all requests
//! (`max_body_bytes_in_flight`) as they arrive and held until the reply is
//! made, and a body that does not fit is a 503 — so memory for bodies is
//! bounded however many clients send at once, and a slow sender holds only
//! what it really sent. Reading the body and answering must finish within
//! `request_timeout_secs`, else 503.
//!
//! This module must never wait for budget (a full budget is answered at
//! once) nor buffer a byte it has not accounted for.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::AppState;
use super::body::JsonReply;
use crate::config::ServerConfig;

/// The per-request limits and the shared body budget.
#[derive(Debug)]
pub(crate) struct RequestLimits {
    max_body: u64,
    in_flight: u64,
    budget: Arc<Semaphore>,
    timeout: Duration,
}

impl RequestLimits {
    pub fn new(config: &ServerConfig) -> Self {
        let in_flight = config.max_body_bytes_in_flight.min(Semaphore::MAX_PERMITS as u64);
        RequestLimits {
            max_body: config.max_body_bytes,
            in_flight,
            budget: Arc::new(Semaphore::new(in_flight as usize)),
            timeout: Duration::from_secs(config.request_timeout_secs),
        }
    }

    /// The per-request body cap (for axum's own extractor limit).
    pub fn max_body(&self) -> usize {
        usize::try_from(self.max_body).unwrap_or(usize::MAX)
    }
}

/// The middleware: body within its cap and the shared budget, reply in time.
pub(crate) async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limits = &state.limits;
    match tokio::time::timeout(limits.timeout, buffer_and_run(limits, request, next)).await {
        Ok(response) => response,
        Err(_) => JsonReply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request took longer than {}s (`[server] request_timeout_secs`) and was abandoned",
                limits.timeout.as_secs()
            ),
        )
        .into_response(),
    }
}

async fn buffer_and_run(limits: &RequestLimits, request: Request, next: Next) -> Response {
    let (parts, mut body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared {
        if n > limits.max_body {
            return too_large(limits);
        }
        if n > limits.budget.available_permits() as u64 {
            return budget_exhausted(limits);
        }
    }
    let mut held: Option<OwnedSemaphorePermit> = None;
    // Capacity only: pages are touched (and counted) as bytes arrive.
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0).min(limits.max_body) as usize);
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return JsonReply::bad_request(format!("reading the request body failed: {e}")).into_response(),
        };
        let Ok(data) = frame.into_data() else { continue };
        if (bytes.len() + data.len()) as u64 > limits.max_body {
            return too_large(limits);
        }
        let Ok(n) = u32::try_from(data.len()) else { return too_large(limits) };
        let Ok(permit) = limits.budget.clone().try_acquire_many_owned(n) else { return budget_exhausted(limits) };
        match &mut held {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        bytes.extend_from_slice(&data);
    }
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    // The body (and what the handler made of it) is gone once the reply is made.
    drop(held);
    response
}

fn too_large(limits: &RequestLimits) -> Response {
    JsonReply::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {} bytes (`[server] max_body_bytes`)", limits.max_body),
    )
    .into_response()
}

fn budget_exhausted(limits: &RequestLimits) -> Response {
    let mut response = JsonReply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "too many request bodies in memory at once (`[server] max_body_bytes_in_flight` = {} bytes); retry later",
            limits.in_flight
        ),
    )
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    response
}
