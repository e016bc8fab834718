//! The guest SDK for ctxhost component plugins.
//!
//! Implement [`Plugin`] — only the hooks you need; every other hook answers
//! [`HookError::NotImplemented`], which the host treats as "no opinion",
//! never as a failure — and export it with [`export_plugin!`]:
//!
//! ```ignore
//! struct Shout;
//!
//! impl ctxhost_sdk::Plugin for Shout {
//!     const NAME: &'static str = "shout";
//!     const HOOKS: &'static [ctxhost_sdk::Hook] = &[ctxhost_sdk::Hook::TransformToolResult];
//!
//!     fn transform_tool_result(r: ctxhost_sdk::TransformRequest) -> Result<Option<String>, ctxhost_sdk::HookError> {
//!         Ok(Some(r.result.to_uppercase()))
//!     }
//! }
//!
//! ctxhost_sdk::export_plugin!(Shout);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component.

#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // generated code
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "context-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_context_plugin",
    });
}

pub use bindings::ctxhost::plugin::host;
pub use bindings::ctxhost::plugin::types::{
    AfterTurnRequest, AssembleRequest, Block, BootstrapRequest, CompactReply, CompactRequest, Compacted, Content,
    Description, Hook, HookError, Image, ImageFile, IngestRequest, Memory, Message, Recommendation, Role,
    SubagentRequest, SummaryRequest, TokenPressure, ToolResult, ToolUse, TransformRequest,
};

/// A component plugin. Override the hooks you implement and list them in
/// [`Plugin::HOOKS`]; the host calls no others.
pub trait Plugin {
    /// The plugin's name, reported by `describe`.
    const NAME: &'static str;
    /// The hooks this plugin implements.
    const HOOKS: &'static [Hook];

    fn bootstrap(_request: BootstrapRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
    fn ingest(_request: IngestRequest) -> Result<Vec<Memory>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn assemble(_request: AssembleRequest) -> Result<Vec<Message>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn compact(_request: CompactRequest) -> Result<CompactReply, HookError> {
        Err(HookError::NotImplemented)
    }
    fn after_turn(_request: AfterTurnRequest) -> Result<Vec<Memory>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn transform_tool_result(_request: TransformRequest) -> Result<Option<String>, HookError> {
        Err(HookError::NotImplemented)
    }
    fn prepare_subagent(_request: SubagentRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
    fn merge_subagent(_request: SubagentRequest) -> Result<(), HookError> {
        Err(HookError::NotImplemented)
    }
}

/// The text of a message: its string content, or its text blocks joined by `\n`.
pub fn text_of(message: &Message) -> String {
    match &message.content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Exports a [`Plugin`] as the component's implementation of the world.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ident) => {
        impl $crate::bindings::Guest for $plugin {
            fn describe() -> $crate::Description {
                $crate::Description {
                    name: <$plugin as $crate::Plugin>::NAME.into(),
                    hooks: <$plugin as $crate::Plugin>::HOOKS.to_vec(),
                }
            }
            fn bootstrap(r: $crate::BootstrapRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::bootstrap(r)
            }
            fn ingest(r: $crate::IngestRequest) -> Result<Vec<$crate::Memory>, $crate::HookError> {
                <$plugin as $crate::Plugin>::ingest(r)
            }
            fn assemble(r: $crate::AssembleRequest) -> Result<Vec<$crate::Message>, $crate::HookError> {
                <$plugin as $crate::Plugin>::assemble(r)
            }
            fn compact(r: $crate::CompactRequest) -> Result<$crate::CompactReply, $crate::HookError> {
                <$plugin as $crate::Plugin>::compact(r)
            }
            fn after_turn(r: $crate::AfterTurnRequest) -> Result<Vec<$crate::Memory>, $crate::HookError> {
                <$plugin as $crate::Plugin>::after_turn(r)
            }
            fn transform_tool_result(r: $crate::TransformRequest) -> Result<Option<String>, $crate::HookError> {
                <$plugin as $crate::Plugin>::transform_tool_result(r)
            }
            fn prepare_subagent(r: $crate::SubagentRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::prepare_subagent(r)
            }
            fn merge_subagent(r: $crate::SubagentRequest) -> Result<(), $crate::HookError> {
                <$plugin as $crate::Plugin>::merge_subagent(r)
            }
        }
        $crate::bindings::__export_context_plugin!($plugin with_types_in $crate::bindings);
    };
}
