//! Fields a hand-written request has that its hook's request does not
//! ([`HookName::request_fields`], the one list of them), so that `ctxhost
//! hook` can warn about a misspelt one (`tool_name` for `tool_call_pre`).
//!
//! Never decides what a field means: the request types do.

use super::hook::HookName;

/// The top-level keys of `request` that `hook`'s request does not have
/// (`type` is always known), in the request's order.
pub fn unknown_fields(hook: HookName, request: &serde_json::Value) -> Vec<&str> {
    let known = hook.request_fields();
    match request.as_object() {
        Some(map) => map.keys().map(String::as_str).filter(|k| *k != "type" && !known.contains(k)).collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named_in_order() {
        let request = json!({"type": "tool_call_pre", "tool_name": "x", "args": {}, "zeta": 1});
        assert_eq!(unknown_fields(HookName::ToolCallPre, &request), ["tool_name", "zeta"]);
        assert!(unknown_fields(HookName::Ingest, &json!({"message": "m", "agent_id": "a"})).is_empty());
        assert_eq!(unknown_fields(HookName::Heartbeat, &json!({"x": 1})), ["x"]);
    }
}
