//! `Message` and its content blocks: the conversation shape every runtime sees.
//!
//! The serde shape is the wire shape of spec section 3 ("Message"), key for key.
//! Two rules shape this module:
//!
//! - **Nothing is lost.** Unknown fields on a message or a block are kept in an
//!   `extra` map and written back in place; a block whose `type` is unknown (or
//!   whose known fields do not parse) is kept whole as [`Block::Unknown`].
//!   LibreFang collapses such blocks to `Unknown` and drops their data; we do not.
//! - **Plain text stays a string.** A message whose content is plain text is
//!   serialised with `content` as a JSON string, because registry plugins call
//!   `.strip()` on it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::Tagged;

/// Who said a message. Unknown roles are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A role this version does not know; written back unchanged.
    Other(String),
}

impl Role {
    pub fn as_str(&self) -> &str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Other(s) => s,
        }
    }
}

impl From<&str> for Role {
    fn from(s: &str) -> Self {
        match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => Role::Other(other.to_owned()),
        }
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(Role::from(s.as_ref()))
    }
}

/// One conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Content,
    /// Pinned messages are never trimmed by the host's defaults.
    #[serde(default)]
    pub pinned: bool,
    /// `None` when absent; an explicit `null` is kept as `Some(Value::Null)`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    /// Fields this version does not know, kept for the round trip.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// A message with plain-text content.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message { role, content: Content::Text(text.into()), pinned: false, timestamp: None, extra: Map::new() }
    }

    /// The message's text: the string content, or its text blocks joined by `\n`.
    pub fn text_content(&self) -> String {
        match &self.content {
            Content::Text(t) => t.clone(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A message body: plain text or a list of blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

/// A content block, tagged by `type` on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(TextBlock),
    Image(ImageBlock),
    ImageFile(ImageFileBlock),
    ToolUse(ToolUseBlock),
    ToolResult(ToolResultBlock),
    Thinking(ThinkingBlock),
    /// A block of a type this version does not know, or a known type whose
    /// fields did not parse: kept whole, `type` included.
    Unknown(Map<String, Value>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    pub text: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    pub media_type: String,
    pub data: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageFileBlock {
    pub media_type: String,
    pub path: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUseBlock {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub input: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    pub tool_use_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    pub content: String,
    #[serde(default)]
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThinkingBlock {
    pub thinking: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Block {
    /// The wire `type` tag of this block.
    pub fn type_name(&self) -> &str {
        match self {
            Block::Text(_) => "text",
            Block::Image(_) => "image",
            Block::ImageFile(_) => "image_file",
            Block::ToolUse(_) => "tool_use",
            Block::ToolResult(_) => "tool_result",
            Block::Thinking(_) => "thinking",
            Block::Unknown(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

impl Serialize for Block {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn tagged<S: Serializer, T: Serialize>(s: S, tag: &'static str, inner: &T) -> Result<S::Ok, S::Error> {
            Tagged { tag, inner }.serialize(s)
        }
        match self {
            Block::Text(b) => tagged(s, "text", b),
            Block::Image(b) => tagged(s, "image", b),
            Block::ImageFile(b) => tagged(s, "image_file", b),
            Block::ToolUse(b) => tagged(s, "tool_use", b),
            Block::ToolResult(b) => tagged(s, "tool_result", b),
            Block::Thinking(b) => tagged(s, "thinking", b),
            Block::Unknown(map) => map.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        let Some(tag) = map.get("type").and_then(Value::as_str) else {
            return Err(D::Error::custom("content block has no string `type` field"));
        };
        let known = match tag {
            "text" => body(&map).map(Block::Text),
            "image" => body(&map).map(Block::Image),
            "image_file" => body(&map).map(Block::ImageFile),
            "tool_use" => body(&map).map(Block::ToolUse),
            "tool_result" => body(&map).map(Block::ToolResult),
            "thinking" => body(&map).map(Block::Thinking),
            _ => None,
        };
        Ok(known.unwrap_or(Block::Unknown(map)))
    }
}

/// A field that is present, even as `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Parses a known block body (the map without its `type`), or `None` when its
/// fields do not fit; the caller then keeps the block as `Unknown`.
fn body<T: serde::de::DeserializeOwned>(map: &Map<String, Value>) -> Option<T> {
    let mut fields = map.clone();
    fields.remove("type");
    serde_json::from_value(Value::Object(fields)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &str) -> String {
        let msg: Message = serde_json::from_str(json).unwrap();
        serde_json::to_string(&msg).unwrap()
    }

    #[test]
    fn plain_text_content_stays_a_string() {
        let out = round_trip(r#"{"role":"user","content":"hi","pinned":false}"#);
        assert_eq!(out, r#"{"role":"user","content":"hi","pinned":false}"#);
    }

    #[test]
    fn pinned_defaults_to_false_and_is_written() {
        let msg: Message = serde_json::from_str(r#"{"role":"system","content":"s"}"#).unwrap();
        assert!(!msg.pinned);
        assert_eq!(serde_json::to_string(&msg).unwrap(), r#"{"role":"system","content":"s","pinned":false}"#);
    }

    #[test]
    fn every_known_block_round_trips_byte_for_byte() {
        let json = concat!(
            r#"{"role":"assistant","content":["#,
            r#"{"type":"text","text":"a"},"#,
            r#"{"type":"image","media_type":"image/png","data":"AAA="},"#,
            r#"{"type":"image_file","media_type":"image/png","path":"/x.png"},"#,
            r#"{"type":"tool_use","id":"t1","name":"grep","input":{"q":"x"}},"#,
            r#"{"type":"tool_result","tool_use_id":"t1","tool_name":"grep","content":"ok","is_error":false,"status":"completed"},"#,
            r#"{"type":"thinking","thinking":"hmm"}"#,
            r#"],"pinned":true,"timestamp":"2026-01-01T00:00:00Z"}"#
        );
        assert_eq!(round_trip(json), json);
        let msg: Message = serde_json::from_str(json).unwrap();
        let Content::Blocks(blocks) = &msg.content else { panic!("blocks expected") };
        let names: Vec<_> = blocks.iter().map(Block::type_name).collect();
        assert_eq!(names, ["text", "image", "image_file", "tool_use", "tool_result", "thinking"]);
        assert!(blocks.iter().all(|b| !matches!(b, Block::Unknown(_))));
    }

    #[test]
    fn unknown_blocks_and_fields_survive() {
        let json = concat!(
            r#"{"role":"critic","content":["#,
            r#"{"type":"audio","data":"zz","nested":{"a":[1,2.5,null]}},"#,
            r#"{"type":"text","text":"t","cache_control":{"type":"ephemeral"}},"#,
            r#"{"type":"tool_use","id":"broken-no-name"}"#,
            r#"],"pinned":false,"x-trace":"abc","meta":{"k":1}}"#
        );
        assert_eq!(round_trip(json), json);
        let msg: Message = serde_json::from_str(json).unwrap();
        assert_eq!(msg.role, Role::Other("critic".into()));
        let Content::Blocks(blocks) = &msg.content else { panic!("blocks expected") };
        assert!(matches!(blocks[0], Block::Unknown(_)));
        assert!(matches!(blocks[1], Block::Text(_)));
        // A known type whose fields do not fit is kept whole rather than failing.
        assert!(matches!(blocks[2], Block::Unknown(_)));
    }

    #[test]
    fn an_explicit_null_timestamp_survives() {
        let json = r#"{"role":"user","content":"x","pinned":false,"timestamp":null}"#;
        assert_eq!(round_trip(json), json);
    }

    #[test]
    fn block_without_type_is_an_error() {
        let err = serde_json::from_str::<Message>(r#"{"role":"user","content":[{"text":"x"}]}"#);
        assert!(err.is_err());
    }

    #[test]
    fn text_content_joins_text_blocks() {
        let msg: Message = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"no"},{"type":"text","text":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(msg.text_content(), "a\nb");
    }
}
