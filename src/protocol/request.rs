//! One request type per hook (spec section 3), and [`HookRequest`], their union
//! tagged by `type` exactly as the wire has it.
//!
//! Every request keeps unknown fields in `extra`, so a request built by an
//! embedder or typed in by hand reaches the plugin with nothing dropped.
//! Deserialisation is lenient about missing fields (they take their defaults)
//! so that `ctxhost hook` accepts a hand-written partial request.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Tagged;
use super::hook::HookName;
use super::message::Message;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BootstrapRequest {
    pub context_window_tokens: u64,
    pub stable_prefix_mode: bool,
    pub max_recall_results: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IngestRequest {
    pub agent_id: String,
    pub message: String,
    /// Always written, as `null` when absent.
    pub peer_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AssembleRequest {
    pub agent_id: String,
    pub system_prompt: String,
    pub messages: Vec<Message>,
    pub context_window_tokens: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactRequest {
    pub agent_id: String,
    pub messages: Vec<Message>,
    pub model: String,
    pub context_window_tokens: u64,
    pub token_pressure: TokenPressure,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How full the context window is; `recommendation` follows from `pressure`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenPressure {
    pub used_tokens: u64,
    pub max_tokens: u64,
    pub pressure: f64,
    pub recommendation: Recommendation,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TokenPressure {
    /// Pressure `used / max` and its recommendation; a zero `max` counts as full.
    pub fn new(used_tokens: u64, max_tokens: u64) -> Self {
        let pressure = if max_tokens == 0 { 1.0 } else { used_tokens as f64 / max_tokens as f64 };
        TokenPressure {
            used_tokens,
            max_tokens,
            pressure,
            recommendation: Recommendation::for_pressure(pressure),
            extra: Map::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recommendation {
    #[default]
    Light,
    Moderate,
    Aggressive,
    Critical,
}

impl Recommendation {
    /// `critical` (>= 0.9), `aggressive` (>= 0.8), `moderate` (>= 0.6), else `light`.
    pub fn for_pressure(pressure: f64) -> Self {
        if pressure >= 0.9 {
            Recommendation::Critical
        } else if pressure >= 0.8 {
            Recommendation::Aggressive
        } else if pressure >= 0.6 {
            Recommendation::Moderate
        } else {
            Recommendation::Light
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AfterTurnRequest {
    pub agent_id: String,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The documented request and LibreFang's running code name these fields
/// differently, so the union is sent: `args` == `input`, `result` == `content`.
/// Build it with [`TransformToolResultRequest::new`] to keep the pairs equal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TransformToolResultRequest {
    pub agent_id: String,
    pub tool_name: String,
    pub tool_use_id: String,
    pub args: Value,
    pub input: Value,
    pub result: String,
    pub content: String,
    pub is_error: bool,
    pub status: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for TransformToolResultRequest {
    fn default() -> Self {
        TransformToolResultRequest {
            agent_id: String::new(),
            tool_name: String::new(),
            tool_use_id: String::new(),
            args: Value::Object(Map::new()),
            input: Value::Object(Map::new()),
            result: String::new(),
            content: String::new(),
            is_error: false,
            status: "completed".into(),
            extra: Map::new(),
        }
    }
}

impl TransformToolResultRequest {
    pub fn new(
        agent_id: impl Into<String>,
        tool_name: impl Into<String>,
        tool_use_id: impl Into<String>,
        args: Value,
        result: impl Into<String>,
        is_error: bool,
    ) -> Self {
        let result = result.into();
        TransformToolResultRequest {
            agent_id: agent_id.into(),
            tool_name: tool_name.into(),
            tool_use_id: tool_use_id.into(),
            input: args.clone(),
            args,
            content: result.clone(),
            result,
            is_error,
            ..Default::default()
        }
    }

    /// Makes each alias pair equal when only one side was given (a hand-written
    /// request may carry `args` but not `input`, or `content` but not `result`).
    pub fn fill_aliases(&mut self) {
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
        if empty(&self.input) && !empty(&self.args) {
            self.input = self.args.clone();
        } else if empty(&self.args) && !empty(&self.input) {
            self.args = self.input.clone();
        }
        if self.result.is_empty() {
            self.result = self.content.clone();
        } else if self.content.is_empty() {
            self.content = self.result.clone();
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentRequest {
    pub parent_id: String,
    pub child_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `on_event`: `{"event": {"name", "payload", "source_plugin"}}` — the one
/// request LibreFang sends without a `type` key, so it is written without one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OnEventRequest {
    pub event: PluginEvent,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An event one plugin emitted for the others of its stack.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PluginEvent {
    pub name: String,
    pub payload: Value,
    pub source_plugin: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Any hook request. On the wire each is tagged by `type` (written first),
/// except `on_event`; build one from JSON with [`HookRequest::from_json`].
#[derive(Debug, Clone, PartialEq)]
pub enum HookRequest {
    Bootstrap(BootstrapRequest),
    Ingest(IngestRequest),
    Assemble(AssembleRequest),
    Compact(CompactRequest),
    AfterTurn(AfterTurnRequest),
    TransformToolResult(TransformToolResultRequest),
    PrepareSubagent(SubagentRequest),
    MergeSubagent(SubagentRequest),
    OnEvent(OnEventRequest),
    /// Any agent-loop hook of `agent-hooks.md`.
    Agent(AgentRequest),
}

/// The request of an agent-loop hook: its fields as the spec's table names
/// them (`name`, `args`, `agent_id`, …), kept as one JSON object because the
/// engine passes them through and chains rewrite them. On the wire it is
/// `{"type": <hook>, …fields}`, like every other request.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRequest {
    pub hook: HookName,
    pub fields: Map<String, Value>,
}

impl AgentRequest {
    pub fn new(hook: HookName, fields: Map<String, Value>) -> Self {
        AgentRequest { hook, fields }
    }
}

impl Serialize for HookRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tag = self.hook().as_str();
        match self {
            HookRequest::Bootstrap(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::Ingest(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::Assemble(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::Compact(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::AfterTurn(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::TransformToolResult(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::PrepareSubagent(r) | HookRequest::MergeSubagent(r) => Tagged { tag, inner: r }.serialize(s),
            HookRequest::OnEvent(r) => r.serialize(s),
            HookRequest::Agent(r) => Tagged { tag, inner: &r.fields }.serialize(s),
        }
    }
}

/// A request that does not fit its hook.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the request must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("the request's `type` is {found} but the hook is `{hook}`")]
    TypeMismatch { hook: HookName, found: String },
    #[error("invalid `{hook}` request: {source}")]
    Invalid {
        hook: HookName,
        #[source]
        source: serde_json::Error,
    },
}

impl HookRequest {
    pub fn hook(&self) -> HookName {
        match self {
            HookRequest::Bootstrap(_) => HookName::Bootstrap,
            HookRequest::Ingest(_) => HookName::Ingest,
            HookRequest::Assemble(_) => HookName::Assemble,
            HookRequest::Compact(_) => HookName::Compact,
            HookRequest::AfterTurn(_) => HookName::AfterTurn,
            HookRequest::TransformToolResult(_) => HookName::TransformToolResult,
            HookRequest::PrepareSubagent(_) => HookName::PrepareSubagent,
            HookRequest::MergeSubagent(_) => HookName::MergeSubagent,
            HookRequest::OnEvent(_) => HookName::OnEvent,
            HookRequest::Agent(r) => r.hook,
        }
    }

    /// The agent the call is for (`LIBREFANG_AGENT_ID`), if the hook has one.
    pub fn agent_id(&self) -> Option<&str> {
        match self {
            HookRequest::Ingest(r) => Some(&r.agent_id),
            HookRequest::Assemble(r) => Some(&r.agent_id),
            HookRequest::Compact(r) => Some(&r.agent_id),
            HookRequest::AfterTurn(r) => Some(&r.agent_id),
            HookRequest::TransformToolResult(r) => Some(&r.agent_id),
            HookRequest::Agent(r) => r.fields.get("agent_id").and_then(Value::as_str),
            HookRequest::Bootstrap(_)
            | HookRequest::PrepareSubagent(_)
            | HookRequest::MergeSubagent(_)
            | HookRequest::OnEvent(_) => None,
        }
    }

    /// The user message of the call (`LIBREFANG_MESSAGE`), if the hook has one.
    pub fn message(&self) -> Option<&str> {
        match self {
            HookRequest::Ingest(r) => Some(&r.message),
            _ => None,
        }
    }

    /// Types a JSON request for `hook`. A missing `type` is filled in (except
    /// for `on_event`, which has none on the wire); a different one is refused.
    pub fn from_json(hook: HookName, mut value: Value) -> Result<Self, RequestError> {
        let Value::Object(map) = &mut value else {
            return Err(RequestError::NotAnObject { found: json_kind(&value) });
        };
        match map.remove("type") {
            None => {}
            Some(Value::String(t)) if t == hook.as_str() => {}
            Some(other) => return Err(RequestError::TypeMismatch { hook, found: other.to_string() }),
        }
        let invalid = |source| RequestError::Invalid { hook, source };
        Ok(match hook {
            HookName::Bootstrap => HookRequest::Bootstrap(serde_json::from_value(value).map_err(invalid)?),
            HookName::Ingest => HookRequest::Ingest(serde_json::from_value(value).map_err(invalid)?),
            HookName::Assemble => HookRequest::Assemble(serde_json::from_value(value).map_err(invalid)?),
            HookName::Compact => {
                // A hand-written request may give only the token counts:
                // derive what it leaves out, as the host would have sent it.
                let given = |k: &str| value.get("token_pressure").and_then(|t| t.get(k)).is_some();
                let (has_pressure, has_recommendation) = (given("pressure"), given("recommendation"));
                let mut r: CompactRequest = serde_json::from_value(value).map_err(invalid)?;
                let p = &mut r.token_pressure;
                if !has_pressure && p.max_tokens > 0 {
                    p.pressure = p.used_tokens as f64 / p.max_tokens as f64;
                }
                if !has_recommendation {
                    p.recommendation = Recommendation::for_pressure(p.pressure);
                }
                HookRequest::Compact(r)
            }
            HookName::AfterTurn => HookRequest::AfterTurn(serde_json::from_value(value).map_err(invalid)?),
            HookName::TransformToolResult => {
                let mut r: TransformToolResultRequest = serde_json::from_value(value).map_err(invalid)?;
                r.fill_aliases();
                HookRequest::TransformToolResult(r)
            }
            HookName::PrepareSubagent => HookRequest::PrepareSubagent(serde_json::from_value(value).map_err(invalid)?),
            HookName::MergeSubagent => HookRequest::MergeSubagent(serde_json::from_value(value).map_err(invalid)?),
            HookName::OnEvent => HookRequest::OnEvent(serde_json::from_value(value).map_err(invalid)?),
            agent => HookRequest::Agent(AgentRequest::new(agent, serde_json::from_value(value).map_err(invalid)?)),
        })
    }

    /// The request as one JSON line with its trailing `\n`: what a script reads.
    pub fn to_json_line(&self) -> Vec<u8> {
        // Serialising these types cannot fail: every map key is a string and
        // every value is plain data.
        let mut line = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        line
    }
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(req: &HookRequest) -> String {
        serde_json::to_string(req).unwrap()
    }

    #[test]
    fn keys_match_the_spec_byte_for_byte() {
        let cases = [
            (
                HookRequest::Bootstrap(BootstrapRequest {
                    context_window_tokens: 8000,
                    stable_prefix_mode: false,
                    max_recall_results: 5,
                    extra: Map::new(),
                }),
                r#"{"type":"bootstrap","context_window_tokens":8000,"stable_prefix_mode":false,"max_recall_results":5}"#,
            ),
            (
                HookRequest::Ingest(IngestRequest { agent_id: "a".into(), message: "m".into(), ..Default::default() }),
                r#"{"type":"ingest","agent_id":"a","message":"m","peer_id":null}"#,
            ),
            (
                HookRequest::Assemble(AssembleRequest {
                    agent_id: "a".into(),
                    system_prompt: "s".into(),
                    messages: vec![Message::text("user".into(), "hi")],
                    context_window_tokens: 100,
                    extra: Map::new(),
                }),
                r#"{"type":"assemble","agent_id":"a","system_prompt":"s","messages":[{"role":"user","content":"hi","pinned":false}],"context_window_tokens":100}"#,
            ),
            (
                HookRequest::Compact(CompactRequest {
                    agent_id: "a".into(),
                    messages: vec![],
                    model: "m".into(),
                    context_window_tokens: 100,
                    token_pressure: TokenPressure::new(85, 100),
                    extra: Map::new(),
                }),
                r#"{"type":"compact","agent_id":"a","messages":[],"model":"m","context_window_tokens":100,"token_pressure":{"used_tokens":85,"max_tokens":100,"pressure":0.85,"recommendation":"aggressive"}}"#,
            ),
            (
                HookRequest::AfterTurn(AfterTurnRequest { agent_id: "a".into(), messages: vec![], extra: Map::new() }),
                r#"{"type":"after_turn","agent_id":"a","messages":[]}"#,
            ),
            (
                HookRequest::TransformToolResult(TransformToolResultRequest::new(
                    "a",
                    "grep",
                    "t1",
                    json!({"q":"x"}),
                    "out",
                    false,
                )),
                r#"{"type":"transform_tool_result","agent_id":"a","tool_name":"grep","tool_use_id":"t1","args":{"q":"x"},"input":{"q":"x"},"result":"out","content":"out","is_error":false,"status":"completed"}"#,
            ),
            (
                HookRequest::PrepareSubagent(SubagentRequest {
                    parent_id: "p".into(),
                    child_id: "c".into(),
                    extra: Map::new(),
                }),
                r#"{"type":"prepare_subagent","parent_id":"p","child_id":"c"}"#,
            ),
            (
                HookRequest::MergeSubagent(SubagentRequest {
                    parent_id: "p".into(),
                    child_id: "c".into(),
                    extra: Map::new(),
                }),
                r#"{"type":"merge_subagent","parent_id":"p","child_id":"c"}"#,
            ),
        ];
        for (req, expected) in cases {
            assert_eq!(wire(&req), expected);
            let value: Value = serde_json::from_str(expected).unwrap();
            let back = HookRequest::from_json(req.hook(), value).unwrap();
            assert_eq!(back, req, "{expected}");
        }
    }

    #[test]
    fn every_context_request_writes_exactly_the_fields_its_hook_lists() {
        for hook in HookName::CONTEXT {
            let req = HookRequest::from_json(hook, json!({})).unwrap();
            let Value::Object(wire) = serde_json::to_value(&req).unwrap() else { panic!("{hook}: not an object") };
            let sent: Vec<&str> = wire.keys().map(String::as_str).filter(|k| *k != "type").collect();
            assert_eq!(sent, hook.request_fields(), "{hook}");
        }
    }

    #[test]
    fn recommendation_thresholds() {
        let r = |p| Recommendation::for_pressure(p);
        assert_eq!(r(0.95), Recommendation::Critical);
        assert_eq!(r(0.9), Recommendation::Critical);
        assert_eq!(r(0.8), Recommendation::Aggressive);
        assert_eq!(r(0.6), Recommendation::Moderate);
        assert_eq!(r(0.59), Recommendation::Light);
    }

    #[test]
    fn from_json_fills_type_first_and_keeps_unknown_fields() {
        let req = HookRequest::from_json(HookName::Ingest, json!({"message":"hi","x_custom":[1]})).unwrap();
        assert_eq!(wire(&req), r#"{"type":"ingest","agent_id":"","message":"hi","peer_id":null,"x_custom":[1]}"#);
        assert_eq!(req.message(), Some("hi"));
        assert_eq!(req.agent_id(), Some(""));
    }

    #[test]
    fn from_json_rejects_a_mismatched_type() {
        let err = HookRequest::from_json(HookName::Ingest, json!({"type":"compact"})).unwrap_err();
        assert_eq!(err.to_string(), r#"the request's `type` is "compact" but the hook is `ingest`"#);
        let err = HookRequest::from_json(HookName::Ingest, json!([1])).unwrap_err();
        assert_eq!(err.to_string(), "the request must be a JSON object, not an array");
        let err = HookRequest::from_json(HookName::Ingest, json!({"message": 5})).unwrap_err();
        assert!(err.to_string().starts_with("invalid `ingest` request: invalid type: integer `5`"), "{err}");
    }

    #[test]
    fn compact_pressure_is_derived_when_left_out_and_extra_keys_survive() {
        let req = HookRequest::from_json(
            HookName::Compact,
            json!({"token_pressure": {"used_tokens": 95, "max_tokens": 100, "source": "x"}}),
        )
        .unwrap();
        let HookRequest::Compact(r) = &req else { panic!() };
        assert_eq!((r.token_pressure.pressure, r.token_pressure.recommendation), (0.95, Recommendation::Critical));
        assert!(wire(&req).contains(r#""recommendation":"critical","source":"x"}"#), "{}", wire(&req));
        let req = HookRequest::from_json(
            HookName::Compact,
            json!({"token_pressure": {"pressure": 0.7, "recommendation": "light"}}),
        )
        .unwrap();
        let HookRequest::Compact(r) = &req else { panic!() };
        assert_eq!(r.token_pressure.recommendation, Recommendation::Light, "what is given is kept");
    }

    #[test]
    fn transform_aliases_are_filled_from_either_side() {
        let req = HookRequest::from_json(
            HookName::TransformToolResult,
            json!({"tool_name":"t","args":{"a":1},"content":"c"}),
        )
        .unwrap();
        let HookRequest::TransformToolResult(r) = req else { panic!() };
        assert_eq!(r.input, json!({"a":1}));
        assert_eq!(r.result, "c");
        assert_eq!(r.status, "completed");
    }

    #[test]
    fn agent_requests_carry_their_fields_behind_the_type() {
        let req = HookRequest::from_json(
            HookName::ToolCallPre,
            json!({"type":"tool_call_pre","name":"shell_exec","args":{"command":"ls"},"agent_id":"a1"}),
        )
        .unwrap();
        assert_eq!(req.hook(), HookName::ToolCallPre);
        assert_eq!(req.agent_id(), Some("a1"));
        assert_eq!(
            wire(&req),
            r#"{"type":"tool_call_pre","agent_id":"a1","name":"shell_exec","args":{"command":"ls"}}"#,
            "the type first, then the fields (in key order)"
        );
        let err = HookRequest::from_json(HookName::Heartbeat, json!({"type":"ingest"})).unwrap_err();
        assert!(err.to_string().contains("but the hook is `heartbeat`"), "{err}");
    }

    #[test]
    fn on_event_has_no_type_on_the_wire() {
        let req = HookRequest::from_json(
            HookName::OnEvent,
            json!({"type":"on_event","event":{"name":"n","payload":{"k":1},"source_plugin":"p"}}),
        )
        .unwrap();
        assert_eq!(wire(&req), r#"{"event":{"name":"n","payload":{"k":1},"source_plugin":"p"}}"#);
        assert_eq!(req.agent_id(), None);
    }
}
