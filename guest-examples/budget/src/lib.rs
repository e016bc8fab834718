//! An assemble plugin: fits the history into the context window by a cheap
//! token estimate (4 bytes a token, plus 4 a message), keeping pinned
//! messages and the newest user message, dropping the oldest first.
//!
//! It shows the shape of an assemble hook; the host's built-in assemble does
//! the same with real `o200k_base` counts and keeps tool calls with their
//! results.

use ctxhost_sdk::{AssembleRequest, Block, Content, Hook, HookError, Message, Plugin, Role};

struct Budget;

fn estimate(m: &Message) -> u64 {
    let bytes: usize = match &m.content {
        Content::Text(t) => t.len(),
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) | Block::Thinking(t) | Block::Unknown(t) => t.len(),
                Block::ToolUse(u) => u.name.len() + u.input.len(),
                Block::ToolResult(r) => r.content.len(),
                Block::Image(_) | Block::ImageFile(_) => 340,
            })
            .sum(),
    };
    4 + bytes.div_ceil(4) as u64
}

impl Plugin for Budget {
    const NAME: &'static str = "budget";
    const HOOKS: &'static [Hook] = &[Hook::Assemble];

    fn assemble(request: AssembleRequest) -> Result<Vec<Message>, HookError> {
        let messages = request.messages;
        let newest_user = messages.iter().rposition(|m| matches!(m.role, Role::User));
        let mut keep = vec![false; messages.len()];
        let mut used = (request.system_prompt.len() as u64).div_ceil(4);
        for (i, m) in messages.iter().enumerate() {
            if m.pinned || Some(i) == newest_user {
                keep[i] = true;
                used += estimate(m);
            }
        }
        for i in (0..messages.len()).rev() {
            if keep[i] {
                continue;
            }
            let cost = estimate(&messages[i]);
            if used + cost > request.context_window_tokens {
                break;
            }
            used += cost;
            keep[i] = true;
        }
        Ok(messages.into_iter().zip(keep).filter(|(_, k)| *k).map(|(m, _)| m).collect())
    }
}

ctxhost_sdk::export_plugin!(Budget);
