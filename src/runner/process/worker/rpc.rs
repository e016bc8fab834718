//! The `jsonrpc` worker protocol's messages (`agent-hooks.md`, "How script
//! plugins reach the services"), as pure functions: what one line from a
//! worker is, and the lines the host writes.
//!
//! A worker's line is one of: the response to a call (`id` with `result` or
//! `error`), a request of its own (`method` and `id`: a service call the host
//! answers), a notification (`method`, no `id`: answered by nothing), or
//! junk — not JSON, not an object, or no `"jsonrpc": "2.0"` — which the
//! caller logs and skips. The host's lines are compact JSON (serde_json never
//! writes a raw newline inside one) ending in one `\n`.
//!
//! Never reads, writes or runs anything.

use serde::Serialize;
use serde_json::Value;

use super::line::preview;

/// What a worker's line is.
#[derive(Debug, PartialEq)]
pub(super) enum Incoming {
    /// A response: its `id`, and the `result` or the `error`.
    Response { id: Value, outcome: Result<Value, RpcError> },
    /// A call of the worker's own, answered under its `id`.
    Request { id: Value, method: String, params: Value },
    /// A call nobody answers (`log`).
    Notification { method: String, params: Value },
    /// Not a JSON-RPC 2.0 message: why, and the line's start.
    Junk { why: &'static str, preview: String },
}

/// The `error` of a response.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RpcError {
    pub code: i64,
    pub message: String,
}

/// Reads one line a worker wrote.
pub(super) fn classify(line: &[u8]) -> Incoming {
    let junk = |why| Incoming::Junk { why, preview: preview(line) };
    let Ok(value) = serde_json::from_slice::<Value>(line) else { return junk("not JSON") };
    let Value::Object(mut m) = value else { return junk("not a JSON object") };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return junk("no \"jsonrpc\": \"2.0\"");
    }
    match m.remove("method") {
        Some(Value::String(method)) => {
            let params = m.remove("params").unwrap_or(Value::Null);
            match m.remove("id") {
                Some(id) => Incoming::Request { id, method, params },
                None => Incoming::Notification { method, params },
            }
        }
        Some(_) => junk("`method` is not a string"),
        None => {
            let Some(id) = m.remove("id") else { return junk("neither `method` nor `id`") };
            if let Some(error) = m.remove("error") {
                return Incoming::Response { id, outcome: Err(read_error(error)) };
            }
            match m.remove("result") {
                Some(result) => Incoming::Response { id, outcome: Ok(result) },
                None => junk("a response with neither `result` nor `error`"),
            }
        }
    }
}

/// An `error` member as given; a malformed one still means the call failed.
fn read_error(error: Value) -> RpcError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = match error.get("message").and_then(Value::as_str) {
        Some(m) => m.to_owned(),
        None => format!("(a malformed error: {error})"),
    };
    RpcError { code, message }
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}\n`;
/// `params` is the request line as a one-shot script reads it (compact JSON
/// the host serialised itself; its trailing newline is dropped), spliced in
/// as is so it is never parsed again.
pub(super) fn request_line(id: u64, method: &str, params: &[u8]) -> Vec<u8> {
    let params = params.trim_ascii();
    let params: &[u8] = if params.is_empty() { b"null" } else { params };
    let method = serde_json::to_string(method).unwrap_or_else(|_| "\"\"".into());
    let mut line = Vec::with_capacity(params.len() + method.len() + 48);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    line.extend_from_slice(id.to_string().as_bytes());
    line.extend_from_slice(b",\"method\":");
    line.extend_from_slice(method.as_bytes());
    line.extend_from_slice(b",\"params\":");
    line.extend_from_slice(params);
    line.extend_from_slice(b"}\n");
    line
}

/// The answer to a worker's request `id`.
pub(super) fn result_line(id: &Value, result: &Value) -> Vec<u8> {
    #[derive(Serialize)]
    struct Answer<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a Value,
    }
    line(&Answer { jsonrpc: "2.0", id, result })
}

/// The refusal of a worker's request `id`.
pub(super) fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Error<'a> {
        code: i64,
        message: &'a str,
    }
    #[derive(Serialize)]
    struct Refusal<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        error: Error<'a>,
    }
    line(&Refusal { jsonrpc: "2.0", id, error: Error { code, message } })
}

/// Compact JSON and one `\n`. Serialising these cannot fail (string keys,
/// plain values); the fallback keeps the line well formed regardless.
fn line<T: Serialize>(value: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(value).unwrap_or_else(|_| b"{\"jsonrpc\":\"2.0\",\"id\":null}".to_vec());
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn junk(line: &str) -> &'static str {
        match classify(line.as_bytes()) {
            Incoming::Junk { why, .. } => why,
            other => panic!("{line} read as {other:?}"),
        }
    }

    #[test]
    fn responses_requests_and_notifications() {
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":3,"result":{"action":"pass"}}"#),
            Incoming::Response { id: json!(3), outcome: Ok(json!({"action": "pass"})) }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":3,"result":null}"#),
            Incoming::Response { id: json!(3), outcome: Ok(Value::Null) },
            "a null result is a result"
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"boom"}}"#),
            Incoming::Response { id: json!(4), outcome: Err(RpcError { code: -32000, message: "boom".into() }) }
        );
        let Incoming::Response { outcome: Err(e), .. } = classify(br#"{"jsonrpc":"2.0","id":4,"error":"bad"}"#) else {
            panic!()
        };
        assert!(e.message.contains("malformed") && e.message.contains("bad"), "{e:?}");
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":"w1","method":"config.get","params":{"key":"K"}}"#),
            Incoming::Request { id: json!("w1"), method: "config.get".into(), params: json!({"key": "K"}) }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","method":"log","params":{"message":"hi"}}"#),
            Incoming::Notification { method: "log".into(), params: json!({"message": "hi"}) }
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":"w2","method":"config.list"}"#),
            Incoming::Request { id: json!("w2"), method: "config.list".into(), params: Value::Null }
        );
    }

    #[test]
    fn anything_else_is_junk() {
        assert_eq!(junk("debug: starting"), "not JSON");
        assert_eq!(junk("[1,2]"), "not a JSON object");
        assert_eq!(junk(r#"{"id":1,"result":{}}"#), "no \"jsonrpc\": \"2.0\"");
        assert_eq!(junk(r#"{"jsonrpc":"1.0","id":1,"result":{}}"#), "no \"jsonrpc\": \"2.0\"");
        assert_eq!(junk(r#"{"jsonrpc":"2.0","method":7,"id":1}"#), "`method` is not a string");
        assert_eq!(junk(r#"{"jsonrpc":"2.0"}"#), "neither `method` nor `id`");
        assert_eq!(junk(r#"{"jsonrpc":"2.0","id":1}"#), "a response with neither `result` nor `error`");
    }

    #[test]
    fn host_lines_are_one_compact_line_each() {
        let params = br#"{"type":"tool_call_pre","name":"x","args":{"command":"a\nb"}}"#;
        let line = request_line(7, "hook/tool_call_pre", &[&params[..], b"\n"].concat());
        let text = std::str::from_utf8(&line).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with('\n'));
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 7, "method": "hook/tool_call_pre",
                   "params": {"type": "tool_call_pre", "name": "x", "args": {"command": "a\nb"}}})
        );
        assert!(text.starts_with(r#"{"jsonrpc":"2.0","id":7,"method":"hook/tool_call_pre","params":{"type""#));

        let ok = result_line(&json!("w1"), &json!({"text": "line\nbreak"}));
        assert_eq!(ok, b"{\"jsonrpc\":\"2.0\",\"id\":\"w1\",\"result\":{\"text\":\"line\\nbreak\"}}\n");
        let err = error_line(&json!(2), -32601, "no service method `x`");
        assert_eq!(
            serde_json::from_slice::<Value>(&err).unwrap(),
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "no service method `x`"}})
        );
    }
}
