//! Between the wire types of [`crate::protocol`] and the WIT types of the
//! component world. Opaque JSON (tool input, unknown fields) travels as text.

use serde_json::{Map, Value};

use super::bindings::ctxhost::plugin::types as wit;
use crate::protocol as wire;

pub fn role_to_wit(role: &wire::Role) -> wit::Role {
    match role {
        wire::Role::System => wit::Role::System,
        wire::Role::User => wit::Role::User,
        wire::Role::Assistant => wit::Role::Assistant,
        wire::Role::Other(s) => wit::Role::Other(s.clone()),
    }
}

pub fn role_from_wit(role: wit::Role) -> wire::Role {
    match role {
        wit::Role::System => wire::Role::System,
        wit::Role::User => wire::Role::User,
        wit::Role::Assistant => wire::Role::Assistant,
        wit::Role::Other(s) => wire::Role::from(s.as_str()),
    }
}

fn block_to_wit(block: &wire::Block) -> wit::Block {
    match block {
        wire::Block::Text(b) if b.extra.is_empty() => wit::Block::Text(b.text.clone()),
        wire::Block::Image(b) if b.extra.is_empty() => {
            wit::Block::Image(wit::Image { media_type: b.media_type.clone(), data: b.data.clone() })
        }
        wire::Block::ImageFile(b) if b.extra.is_empty() => {
            wit::Block::ImageFile(wit::ImageFile { media_type: b.media_type.clone(), path: b.path.clone() })
        }
        wire::Block::ToolUse(b) if b.extra.is_empty() => {
            wit::Block::ToolUse(wit::ToolUse { id: b.id.clone(), name: b.name.clone(), input: b.input.to_string() })
        }
        wire::Block::ToolResult(b) if b.extra.is_empty() => wit::Block::ToolResult(wit::ToolResult {
            tool_use_id: b.tool_use_id.clone(),
            tool_name: b.tool_name.clone(),
            content: b.content.clone(),
            is_error: b.is_error,
            status: b.status.clone(),
        }),
        wire::Block::Thinking(b) if b.extra.is_empty() => wit::Block::Thinking(b.thinking.clone()),
        // Unknown blocks, and known ones with fields the WIT cannot carry,
        // travel whole as JSON so nothing is lost.
        other => wit::Block::Unknown(serde_json::to_string(other).unwrap_or_default()),
    }
}

fn block_from_wit(block: wit::Block) -> wire::Block {
    let json = match block {
        wit::Block::Unknown(text) => return serde_json::from_str(&text).unwrap_or_else(|_| unknown_text(text)),
        wit::Block::Text(text) => serde_json::json!({"type": "text", "text": text}),
        wit::Block::Image(i) => serde_json::json!({"type": "image", "media_type": i.media_type, "data": i.data}),
        wit::Block::ImageFile(i) => {
            serde_json::json!({"type": "image_file", "media_type": i.media_type, "path": i.path})
        }
        wit::Block::ToolUse(u) => {
            let input: Value = serde_json::from_str(&u.input).unwrap_or(Value::String(u.input));
            serde_json::json!({"type": "tool_use", "id": u.id, "name": u.name, "input": input})
        }
        wit::Block::ToolResult(r) => {
            let mut v = serde_json::json!({"type": "tool_result", "tool_use_id": r.tool_use_id, "content": r.content, "is_error": r.is_error});
            if let Some(n) = r.tool_name {
                v["tool_name"] = Value::String(n);
            }
            if let Some(s) = r.status {
                v["status"] = Value::String(s);
            }
            v
        }
        wit::Block::Thinking(t) => serde_json::json!({"type": "thinking", "thinking": t}),
    };
    serde_json::from_value(json.clone()).unwrap_or_else(|_| unknown_text(json.to_string()))
}

/// A block the guest sent as unparsable JSON: kept as text.
fn unknown_text(text: String) -> wire::Block {
    let mut map = Map::new();
    map.insert("type".into(), Value::String("unknown".into()));
    map.insert("text".into(), Value::String(text));
    wire::Block::Unknown(map)
}

pub fn message_to_wit(m: &wire::Message) -> wit::Message {
    let content = match &m.content {
        wire::Content::Text(t) => wit::Content::Text(t.clone()),
        wire::Content::Blocks(bs) => wit::Content::Blocks(bs.iter().map(block_to_wit).collect()),
    };
    let mut extra = m.extra.clone();
    if let Some(ts) = &m.timestamp {
        extra.insert("timestamp".into(), ts.clone());
    }
    let extra = (!extra.is_empty()).then(|| Value::Object(extra).to_string());
    wit::Message { role: role_to_wit(&m.role), content, pinned: m.pinned, extra }
}

pub fn message_from_wit(m: wit::Message) -> wire::Message {
    let content = match m.content {
        wit::Content::Text(t) => wire::Content::Text(t),
        wit::Content::Blocks(bs) => wire::Content::Blocks(bs.into_iter().map(block_from_wit).collect()),
    };
    let mut extra = m
        .extra
        .and_then(|e| serde_json::from_str::<Value>(&e).ok())
        .and_then(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    let timestamp = extra.remove("timestamp");
    wire::Message { role: role_from_wit(m.role), content, pinned: m.pinned, timestamp, extra }
}

pub fn messages_to_wit(ms: &[wire::Message]) -> Vec<wit::Message> {
    ms.iter().map(message_to_wit).collect()
}

pub fn messages_from_wit(ms: Vec<wit::Message>) -> Vec<wire::Message> {
    ms.into_iter().map(message_from_wit).collect()
}

pub fn recommendation_to_wit(r: wire::Recommendation) -> wit::Recommendation {
    match r {
        wire::Recommendation::Light => wit::Recommendation::Light,
        wire::Recommendation::Moderate => wit::Recommendation::Moderate,
        wire::Recommendation::Aggressive => wit::Recommendation::Aggressive,
        wire::Recommendation::Critical => wit::Recommendation::Critical,
    }
}

fn memory_items(memories: Vec<wit::Memory>) -> Vec<Value> {
    memories
        .into_iter()
        .map(|m| {
            if m.tags.is_empty() {
                serde_json::json!({"content": m.content})
            } else {
                serde_json::json!({"content": m.content, "tags": m.tags})
            }
        })
        .collect()
}

/// An ingest answer as the JSON a script plugin prints (LibreFang's shape).
pub fn ingest_json(memories: Vec<wit::Memory>) -> Value {
    serde_json::json!({"type": "ingest_result", "memories": memory_items(memories)})
}

/// An after_turn answer as a script plugin prints it: `{"type":"ok"}`, with
/// `memories` when there are any to store.
pub fn after_turn_json(memories: Vec<wit::Memory>) -> Value {
    if memories.is_empty() {
        serde_json::json!({"type": "ok"})
    } else {
        serde_json::json!({"type": "ok", "memories": memory_items(memories)})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_wit_without_loss() {
        let json = serde_json::json!([
            {"role": "user", "content": "hi", "pinned": true, "timestamp": "2026-01-01T00:00:00Z"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "a"},
                {"type": "tool_use", "id": "t", "name": "n", "input": {"q": [1, 2]}},
                {"type": "audio", "data": "zz"},
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}
            ], "pinned": false, "x-trace": 7},
            {"role": "critic", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok", "is_error": false}], "pinned": false}
        ]);
        let messages: Vec<wire::Message> = serde_json::from_value(json.clone()).unwrap();
        let back = messages_from_wit(messages_to_wit(&messages));
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }
}
