//! The wire protocol: messages, one request and one reply type per hook, and
//! the rule for reading a script's stdout.
//!
//! This is the only module that knows JSON key spellings. Everything above the
//! runners works on these typed values; runners serialise at the boundary.
//! Unknown fields and block types always survive a parse → serialise round trip.

mod fields;
mod hook;
mod message;
mod reply;
mod request;
mod stdout;

pub use fields::unknown_fields;
pub use hook::{HookName, UnknownHook};
pub use message::{
    Block, Content, ImageBlock, ImageFileBlock, Message, Role, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock,
};
pub use reply::{
    AfterTurnReply, AssembleReply, BootstrapReply, CompactReply, IngestReply, LlmSummaryRequest, Memory, ReplyError,
    TransformReply,
};
pub(crate) use request::json_kind;
pub use request::{
    AfterTurnRequest, AgentRequest, AssembleRequest, BootstrapRequest, CompactRequest, HookRequest, IngestRequest,
    OnEventRequest, PluginEvent, Recommendation, RequestError, SubagentRequest, TokenPressure,
    TransformToolResultRequest,
};
pub use stdout::{NoOutput, parse_stdout};

/// Serialises `inner` with a leading `"type": tag` key: the wire puts the tag
/// first for blocks and requests alike.
#[derive(serde::Serialize)]
struct Tagged<'a, T> {
    #[serde(rename = "type")]
    tag: &'static str,
    #[serde(flatten)]
    inner: &'a T,
}
