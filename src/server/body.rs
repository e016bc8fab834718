//! Request bodies and JSON replies: every body is parsed here so that a bad
//! one is a 400 saying what is wrong (axum's own extractor answers 415/422
//! with plain text), and every reply, error or not, is a JSON object.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::runner::ErrorKind;

/// The one mapping from why a plugin call failed to the status of a route
/// that reports it. The plugin is the upstream and ctxhost the gateway: a
/// plugin that misbehaved is a 502, one too slow a 504, one that cannot run
/// now a 503, a hook it does not have a 404; the host's own failure is a 500.
pub(crate) fn hook_failure_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotDeclared => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::OutOfFuel
        | ErrorKind::MemoryLimit
        | ErrorKind::GuestPanic
        | ErrorKind::Crashed
        | ErrorKind::Failed
        | ErrorKind::BadReply => StatusCode::BAD_GATEWAY,
        ErrorKind::Host => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A status and a JSON value (and, for a 503 that will pass, when to retry).
#[derive(Debug)]
pub(crate) struct JsonReply {
    pub status: StatusCode,
    pub body: Value,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u32>,
}

/// The `Retry-After` of a refused call: the operator's reload or adopt
/// reaches every instance within about two seconds.
pub(crate) const REFUSED_RETRY_AFTER_SECS: u32 = 5;

impl JsonReply {
    pub fn ok(body: Value) -> Self {
        JsonReply { status: StatusCode::OK, body, retry_after: None }
    }

    pub fn with_status(status: StatusCode, body: Value) -> Self {
        JsonReply { status, body, retry_after: None }
    }

    /// `{"error": message}`.
    pub fn error(status: StatusCode, message: impl Into<String>) -> Self {
        JsonReply { status, body: json!({ "error": message.into() }), retry_after: None }
    }

    /// A FaustBot-route error: `{"detail": …}` as FastAPI writes it, and
    /// `error` as every other ctxhost route does.
    pub fn detail(status: StatusCode, message: String) -> Self {
        JsonReply { status, body: json!({"detail": message, "error": message}), retry_after: None }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        JsonReply::error(StatusCode::BAD_REQUEST, message)
    }

    /// A plugin call that failed: `{"error", "kind", "plugin", "hook"}` with
    /// the status of its kind ([`hook_failure_status`]).
    /// A call of `hook` refused because `refusal`'s plugin takes part in it
    /// and is not the fleet's version here: 503 with `Retry-After`.
    pub fn refused(refusal: &crate::app::catalog::fleet::Refusal, hook: &str) -> Self {
        let mut body = refusal.describe();
        body["hook"] = json!(hook);
        body["error"] = json!(refusal.refused_call(hook));
        JsonReply { status: StatusCode::SERVICE_UNAVAILABLE, body, retry_after: Some(REFUSED_RETRY_AFTER_SECS) }
    }

    pub fn hook_failure(kind: ErrorKind, message: String, plugin: &str, hook: &str) -> Self {
        JsonReply::with_status(
            hook_failure_status(kind),
            json!({"error": message, "kind": kind.as_str(), "plugin": plugin, "hook": hook}),
        )
    }
}

impl IntoResponse for JsonReply {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        response
    }
}

/// The body as a JSON object; an empty body is `{}`.
///
/// # Errors
/// A 400 naming the JSON error and its position, or saying which type of
/// value came instead of an object.
pub(crate) fn object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, JsonReply> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => {
            Err(JsonReply::bad_request(format!("the request body must be a JSON object, not {}", type_name(&other))))
        }
        Err(e) => Err(JsonReply::bad_request(format!("the request body is not valid JSON: {e}"))),
    }
}

/// `"a string"`, `"an array"`, … for messages.
pub(crate) use crate::protocol::json_kind as type_name;

/// An optional string field of a body; a value of another type is a 400.
pub(crate) fn optional_str<'a>(
    body: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, JsonReply> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(JsonReply::bad_request(format!("`{key}` must be a string, not {}", type_name(other)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        assert!(object(b"").unwrap().is_empty());
        assert!(object(b"  \n").unwrap().is_empty());
        assert_eq!(object(br#"{"a":1}"#).unwrap()["a"], 1);
        let e = object(b"[1]").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.body["error"], "the request body must be a JSON object, not an array");
        let e = object(b"{\"a\":").unwrap_err();
        assert!(e.body["error"].as_str().unwrap().starts_with("the request body is not valid JSON: EOF"), "{e:?}");
        let body = object(br#"{"n":1,"s":"x"}"#).unwrap();
        assert_eq!(optional_str(&body, "s").unwrap(), Some("x"));
        assert_eq!(optional_str(&body, "missing").unwrap(), None);
        assert_eq!(optional_str(&body, "n").unwrap_err().body["error"], "`n` must be a string, not a number");
    }
}
