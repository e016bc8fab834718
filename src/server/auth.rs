//! Who may call the mutating routes: a bearer token (spec section 12), and
//! the rule that a daemon reachable from other machines must have one —
//! test-hook and the agent API run plugin code.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::body::JsonReply;

/// Binding beyond loopback without a token.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to listen on {0} without a token: that address is reachable from other machines, and \
     test-hook and the agent API run plugin code\n  hint: set a token with --token, CTXHOST_TOKEN or \
     `[server] token` in config.toml, or bind 127.0.0.1"
)]
pub struct AddressPolicyError(pub SocketAddr);

/// Loopback addresses need no token; anything else does.
pub(crate) fn check_address(addr: SocketAddr, token: Option<&str>) -> Result<(), AddressPolicyError> {
    if addr.ip().is_loopback() || token.is_some_and(|t| !t.is_empty()) { Ok(()) } else { Err(AddressPolicyError(addr)) }
}

/// Lets the request through when no token is set or it carries
/// `Authorization: Bearer <token>`; else 401.
pub(crate) async fn require_token(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = state.token.as_deref().filter(|t| !t.is_empty()) else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => unauthorized("the bearer token is wrong"),
        None => unauthorized("this route needs `Authorization: Bearer <token>`"),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = JsonReply::error(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Compares without stopping at the first difference, so timing does not
/// tell how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_policy() {
        let lo: SocketAddr = "127.0.0.1:4545".parse().unwrap();
        let lo6: SocketAddr = "[::1]:4545".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:4545".parse().unwrap();
        assert!(check_address(lo, None).is_ok());
        assert!(check_address(lo6, None).is_ok());
        assert!(check_address(any, Some("s3cret")).is_ok());
        let err = check_address(any, None).unwrap_err().to_string();
        assert!(err.starts_with("refusing to listen on 0.0.0.0:4545 without a token"), "{err}");
        assert!(check_address(any, Some("")).is_err(), "an empty token is no token");
    }

    #[test]
    fn comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
