//! Between the wire types of [`crate::protocol`] and the WIT types of the
//! component world. Opaque JSON (tool input, unknown fields) travels as text.
//!
//! A reply is converted under a [`Budget`]: each list item and each string is
//! counted before its host object is built, and the call fails with
//! [`ReplyTooLarge`] naming the limit once the reply would pass it. (Lifting
//! the reply out of the guest is bounded before that by the store's hostcall
//! fuel, [`REPLY_BYTES`].) This module never keeps or logs a reply.

use serde_json::{Map, Value};

use super::bindings::ctxhost::plugin::types as wit;
use crate::protocol as wire;

/// The most bytes of text one component reply may carry into the host (and
/// the hostcall fuel its lifting may use: list items count at their host size).
pub const REPLY_BYTES: usize = 16 * 1024 * 1024;

/// The most list items (memories, tags, messages, blocks) one component
/// reply may carry into the host.
pub const REPLY_ITEMS: usize = 100_000;

/// The most bytes of an agent-loop reply (JSON text, parsed into host
/// objects): a script plugin's stdout cap.
pub const AGENT_REPLY_BYTES: usize = crate::runner::process::DEFAULT_OUTPUT_CAP;

/// A component reply the host refused to take in whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyTooLarge {
    #[error(
        "its `{hook}` reply holds more than {limit} items (memories, tags, messages and blocks); \
         a reply may hold at most {limit} items"
    )]
    Items { hook: &'static str, limit: usize },
    #[error("its `{hook}` reply holds more than {limit} bytes of text; a reply may hold at most {limit} bytes")]
    Bytes { hook: &'static str, limit: usize },
    #[error(
        "its `{hook}` call would pass more than {limit} bytes into the host at once (its reply, or one host \
         call's arguments; list items count at their host size); at most {limit} bytes may pass"
    )]
    Lifted { hook: &'static str, limit: usize },
}

/// What is left of one reply's [`REPLY_ITEMS`] and [`REPLY_BYTES`].
#[derive(Debug)]
pub struct Budget {
    hook: &'static str,
    items: usize,
    bytes: usize,
}

impl Budget {
    pub fn new(hook: &'static str) -> Budget {
        Budget { hook, items: REPLY_ITEMS, bytes: REPLY_BYTES }
    }

    /// Takes `n` list items.
    fn items(&mut self, n: usize) -> Result<(), ReplyTooLarge> {
        self.items = self.items.checked_sub(n).ok_or(ReplyTooLarge::Items { hook: self.hook, limit: REPLY_ITEMS })?;
        Ok(())
    }

    /// Takes the bytes of `text`.
    fn text(&mut self, text: &str) -> Result<(), ReplyTooLarge> {
        self.bytes =
            self.bytes.checked_sub(text.len()).ok_or(ReplyTooLarge::Bytes { hook: self.hook, limit: REPLY_BYTES })?;
        Ok(())
    }

    fn texts<'a>(&mut self, texts: impl IntoIterator<Item = &'a str>) -> Result<(), ReplyTooLarge> {
        texts.into_iter().try_for_each(|t| self.text(t))
    }
}

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

/// The strings of `block`.
fn block_texts(block: &wit::Block) -> Vec<&str> {
    match block {
        wit::Block::Text(t) | wit::Block::Thinking(t) | wit::Block::Unknown(t) => vec![t],
        wit::Block::Image(i) => vec![&i.media_type, &i.data],
        wit::Block::ImageFile(i) => vec![&i.media_type, &i.path],
        wit::Block::ToolUse(u) => vec![&u.id, &u.name, &u.input],
        wit::Block::ToolResult(r) => {
            let mut texts = vec![r.tool_use_id.as_str(), &r.content];
            texts.extend(r.tool_name.as_deref());
            texts.extend(r.status.as_deref());
            texts
        }
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

/// Counts the blocks and strings of `m` against `budget` (the message itself
/// is counted with its list).
fn count_message(m: &wit::Message, budget: &mut Budget) -> Result<(), ReplyTooLarge> {
    if let wit::Role::Other(role) = &m.role {
        budget.text(role)?;
    }
    budget.texts(m.extra.as_deref())?;
    match &m.content {
        wit::Content::Text(t) => budget.text(t),
        wit::Content::Blocks(bs) => {
            budget.items(bs.len())?;
            bs.iter().try_for_each(|b| budget.texts(block_texts(b)))
        }
    }
}

fn message_from_wit(m: wit::Message) -> wire::Message {
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

/// `ms` as wire messages, each counted against `budget` before it is built.
///
/// # Errors
/// The reply would pass the budget.
pub fn messages_from_wit(ms: Vec<wit::Message>, budget: &mut Budget) -> Result<Vec<wire::Message>, ReplyTooLarge> {
    budget.items(ms.len())?;
    ms.iter().try_for_each(|m| count_message(m, budget))?;
    Ok(ms.into_iter().map(message_from_wit).collect())
}

pub fn recommendation_to_wit(r: wire::Recommendation) -> wit::Recommendation {
    match r {
        wire::Recommendation::Light => wit::Recommendation::Light,
        wire::Recommendation::Moderate => wit::Recommendation::Moderate,
        wire::Recommendation::Aggressive => wit::Recommendation::Aggressive,
        wire::Recommendation::Critical => wit::Recommendation::Critical,
    }
}

/// `memories` as JSON items, counted against `budget` before any is built.
fn memory_items(memories: Vec<wit::Memory>, budget: &mut Budget) -> Result<Vec<Value>, ReplyTooLarge> {
    budget.items(memories.len())?;
    for m in &memories {
        budget.items(m.tags.len())?;
        budget.text(&m.content)?;
        budget.texts(m.tags.iter().map(String::as_str))?;
    }
    Ok(memories
        .into_iter()
        .map(|m| {
            if m.tags.is_empty() {
                serde_json::json!({"content": m.content})
            } else {
                serde_json::json!({"content": m.content, "tags": m.tags})
            }
        })
        .collect())
}

/// An ingest answer as the JSON a script plugin prints (LibreFang's shape).
///
/// # Errors
/// The reply would pass [`REPLY_ITEMS`] or [`REPLY_BYTES`].
pub fn ingest_json(memories: Vec<wit::Memory>) -> Result<Value, ReplyTooLarge> {
    let items = memory_items(memories, &mut Budget::new("ingest"))?;
    Ok(serde_json::json!({"type": "ingest_result", "memories": items}))
}

/// An after_turn answer as a script plugin prints it: `{"type":"ok"}`, with
/// `memories` when there are any to store.
///
/// # Errors
/// The reply would pass [`REPLY_ITEMS`] or [`REPLY_BYTES`].
pub fn after_turn_json(memories: Vec<wit::Memory>) -> Result<Value, ReplyTooLarge> {
    if memories.is_empty() {
        Ok(serde_json::json!({"type": "ok"}))
    } else {
        let items = memory_items(memories, &mut Budget::new("after_turn"))?;
        Ok(serde_json::json!({"type": "ok", "memories": items}))
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
        let back = messages_from_wit(messages_to_wit(&messages), &mut Budget::new("assemble")).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }

    #[test]
    fn a_reply_past_the_budget_is_refused_naming_the_limit() {
        let message = |text: String| wit::Message {
            role: wit::Role::User,
            content: wit::Content::Blocks(vec![wit::Block::Text(text)]),
            pinned: false,
            extra: None,
        };
        // Messages and blocks count alike: half the items as messages is all.
        let half: Vec<_> = (0..REPLY_ITEMS / 2).map(|_| message(String::new())).collect();
        assert_eq!(messages_from_wit(half.clone(), &mut Budget::new("assemble")).unwrap().len(), REPLY_ITEMS / 2);
        let mut over = half;
        over.push(message(String::new()));
        let err = messages_from_wit(over, &mut Budget::new("assemble")).unwrap_err();
        assert_eq!(err, ReplyTooLarge::Items { hook: "assemble", limit: REPLY_ITEMS });
        assert!(err.to_string().contains("`assemble` reply") && err.to_string().contains("at most 100000 items"));

        let err = messages_from_wit(vec![message("x".repeat(REPLY_BYTES + 1))], &mut Budget::new("compact"));
        assert_eq!(err.unwrap_err(), ReplyTooLarge::Bytes { hook: "compact", limit: REPLY_BYTES });
        let tags = vec![wit::Memory { content: String::new(), tags: vec![String::new(); REPLY_ITEMS] }];
        assert!(matches!(ingest_json(tags), Err(ReplyTooLarge::Items { hook: "ingest", .. })));
    }
}
