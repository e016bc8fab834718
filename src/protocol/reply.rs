//! One reply type per hook, read leniently from whatever JSON a plugin answered.
//!
//! Plugins in the wild answer loosely (extra keys, a missing `type`, memories
//! given as bare strings). Each `from_value` takes exactly what spec section 3
//! says is *used* from a reply and ignores the rest; what it cannot use it
//! reports as a [`ReplyError`] so the engine can fall back, never guess.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::Message;
use super::request::json_kind;

/// A reply that does not carry what its hook needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplyError {
    #[error("the reply must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("the reply's `{field}` is invalid: {reason}")]
    InvalidField { field: &'static str, reason: String },
}

fn object(value: &Value) -> Result<&Map<String, Value>, ReplyError> {
    value.as_object().ok_or(ReplyError::NotAnObject { found: json_kind(value) })
}

fn messages_field(map: &Map<String, Value>, field: &'static str) -> Result<Option<Vec<Message>>, ReplyError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Vec::<Message>::deserialize(v)
            .map(Some)
            .map_err(|e| ReplyError::InvalidField { field, reason: e.to_string() }),
    }
}

/// A memory a plugin recalled (`ingest`) or asked to store (`after_turn`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// `memories[]` entries with a non-empty string `content`; everything else is
/// skipped, as LibreFang does. Non-string tags are dropped.
fn memories(map: &Map<String, Value>) -> Vec<Memory> {
    let Some(Value::Array(items)) = map.get("memories") else { return Vec::new() };
    items
        .iter()
        .filter_map(|item| {
            let content = item.get("content")?.as_str()?;
            if content.trim().is_empty() {
                return None;
            }
            let tags = item
                .get("tags")
                .and_then(Value::as_array)
                .map(|t| t.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            Some(Memory { content: content.to_owned(), tags })
        })
        .collect()
}

/// `bootstrap`: environment overrides for the plugin's later calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BootstrapReply {
    /// String values only; numbers and booleans are written as their JSON text.
    pub env_overrides: BTreeMap<String, String>,
}

impl BootstrapReply {
    pub fn from_value(value: &Value) -> Result<Self, ReplyError> {
        let map = object(value)?;
        let env_overrides = match map.get("env_overrides") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(o)) => o
                .iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some((k.clone(), s.clone())),
                    Value::Number(_) | Value::Bool(_) => Some((k.clone(), v.to_string())),
                    _ => None,
                })
                .collect(),
            Some(other) => {
                return Err(ReplyError::InvalidField {
                    field: "env_overrides",
                    reason: format!("expected an object, found {}", json_kind(other)),
                });
            }
        };
        Ok(BootstrapReply { env_overrides })
    }
}

/// `ingest`: recalled memories.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngestReply {
    pub memories: Vec<Memory>,
}

impl IngestReply {
    pub fn from_value(value: &Value) -> Result<Self, ReplyError> {
        Ok(IngestReply { memories: memories(object(value)?) })
    }
}

/// `assemble`: the messages the model should see. Empty means "no opinion".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssembleReply {
    pub messages: Vec<Message>,
}

impl AssembleReply {
    pub fn from_value(value: &Value) -> Result<Self, ReplyError> {
        Ok(AssembleReply { messages: messages_field(object(value)?, "messages")?.unwrap_or_default() })
    }
}

/// `compact`: compacted messages, or a request for the host to summarise.
#[derive(Debug, Clone, PartialEq)]
pub enum CompactReply {
    Messages { messages: Vec<Message>, summary: Option<String> },
    RequestLlmSummary(LlmSummaryRequest),
}

/// A plugin's `request_llm_summary` directive.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LlmSummaryRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default)]
    pub summarize: Vec<Message>,
    #[serde(default)]
    pub keep: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl CompactReply {
    pub fn from_value(value: &Value) -> Result<Self, ReplyError> {
        let map = object(value)?;
        if let Some(directive) = map.get("request_llm_summary").filter(|v| !v.is_null()) {
            return LlmSummaryRequest::deserialize(directive)
                .map(CompactReply::RequestLlmSummary)
                .map_err(|e| ReplyError::InvalidField { field: "request_llm_summary", reason: e.to_string() });
        }
        let summary = map.get("summary").and_then(Value::as_str).map(str::to_owned);
        let messages = messages_field(map, "messages")?.unwrap_or_default();
        Ok(CompactReply::Messages { messages, summary })
    }
}

/// `after_turn`: optional memories to store in the default memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AfterTurnReply {
    pub memories: Vec<Memory>,
}

impl AfterTurnReply {
    pub fn from_value(value: &Value) -> Result<Self, ReplyError> {
        Ok(AfterTurnReply { memories: memories(object(value)?) })
    }
}

/// `transform_tool_result`: a rewrite of the model-visible result, or no change.
#[derive(Debug, Clone, PartialEq)]
pub enum TransformReply {
    Rewrite(String),
    NoChange,
}

impl TransformReply {
    /// `{"content":s}`, `{"result":s}` and `{"type":"transformed","result":s}`
    /// rewrite; `{}`, `{"type":"skip"}` and anything else mean no change.
    pub fn from_value(value: &Value) -> Self {
        let Some(map) = value.as_object() else { return TransformReply::NoChange };
        if map.get("type").and_then(Value::as_str) == Some("skip") {
            return TransformReply::NoChange;
        }
        let text = map.get("content").or_else(|| map.get("result")).and_then(Value::as_str);
        match text {
            Some(t) => TransformReply::Rewrite(t.to_owned()),
            None => TransformReply::NoChange,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ingest_keeps_only_non_empty_string_contents() {
        let reply = IngestReply::from_value(&json!({
            "type": "ingest_result",
            "memories": [{"content": "a", "tags": ["x", 1]}, {"content": ""}, {"content": "  "}, {"content": 3}, "bare", {"content": "b"}]
        }))
        .unwrap();
        assert_eq!(
            reply.memories,
            vec![Memory { content: "a".into(), tags: vec!["x".into()] }, Memory { content: "b".into(), tags: vec![] }]
        );
        assert!(IngestReply::from_value(&json!({})).unwrap().memories.is_empty());
        assert_eq!(IngestReply::from_value(&json!("x")).unwrap_err(), ReplyError::NotAnObject { found: "a string" });
    }

    #[test]
    fn bootstrap_env_overrides() {
        let reply =
            BootstrapReply::from_value(&json!({"env_overrides": {"A": "1", "B": 2, "C": true, "D": [1]}})).unwrap();
        let pairs: Vec<_> = reply.env_overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(pairs, ["A=1", "B=2", "C=true"]);
        assert!(BootstrapReply::from_value(&json!({"env_overrides": "x"})).is_err());
        assert!(BootstrapReply::from_value(&json!({"type": "ok"})).unwrap().env_overrides.is_empty());
    }

    #[test]
    fn compact_messages_or_directive() {
        let reply =
            CompactReply::from_value(&json!({"messages": [{"role":"user","content":"x"}], "summary": "s"})).unwrap();
        assert!(
            matches!(reply, CompactReply::Messages { ref messages, summary: Some(ref s) } if messages.len() == 1 && s == "s")
        );
        let reply = CompactReply::from_value(&json!({"request_llm_summary": {"summarize": [{"role":"user","content":"x"}], "keep": [], "max_tokens": 50}})).unwrap();
        let CompactReply::RequestLlmSummary(d) = reply else { panic!("directive expected") };
        assert_eq!((d.summarize.len(), d.max_tokens, d.prompt), (1, Some(50), None));
        let err = CompactReply::from_value(&json!({"messages": "nope"})).unwrap_err();
        assert!(matches!(err, ReplyError::InvalidField { field: "messages", .. }));
    }

    #[test]
    fn transform_reply_forms() {
        let r = TransformReply::from_value;
        assert_eq!(r(&json!({"content": "a"})), TransformReply::Rewrite("a".into()));
        assert_eq!(r(&json!({"result": "b"})), TransformReply::Rewrite("b".into()));
        assert_eq!(r(&json!({"type": "transformed", "result": "c"})), TransformReply::Rewrite("c".into()));
        assert_eq!(r(&json!({})), TransformReply::NoChange);
        assert_eq!(r(&json!({"type": "skip", "result": "x"})), TransformReply::NoChange);
        assert_eq!(r(&json!({"text": "free text"})), TransformReply::NoChange);
        assert_eq!(r(&json!([1])), TransformReply::NoChange);
    }

    #[test]
    fn after_turn_memories_and_assemble_messages() {
        let r = AfterTurnReply::from_value(&json!({"type":"ok","memories":[{"content":"m","tags":["t"]}]})).unwrap();
        assert_eq!(r.memories.len(), 1);
        let a = AssembleReply::from_value(&json!({"messages": []})).unwrap();
        assert!(a.messages.is_empty());
    }
}
