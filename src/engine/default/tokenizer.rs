//! Counting tokens: a small [`Tokenizer`] trait, the `o200k_base` encoding
//! behind it, and a per-message count cache so a long history is not
//! re-tokenised on every turn.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

use crate::protocol::{Block, Content, Message};

/// Counts tokens in text.
pub trait Tokenizer: Send + Sync {
    fn count(&self, text: &str) -> usize;
}

/// OpenAI's `o200k_base` encoding (tiktoken). Building the encoder takes a
/// while, so it is built once per process, on first use.
#[derive(Debug, Default, Clone, Copy)]
pub struct O200k;

impl Tokenizer for O200k {
    fn count(&self, text: &str) -> usize {
        static BPE: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
        match BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()) {
            Some(bpe) => bpe.encode_ordinary(text).len(),
            // The encoder data ships inside the crate; should it ever fail to
            // load, fall back to the usual 4-bytes-per-token estimate.
            None => text.len().div_ceil(4),
        }
    }
}

/// Tokens a message costs beyond its text (role and framing), as in OpenAI's
/// chat format.
pub const MESSAGE_OVERHEAD: usize = 4;

/// What an image block is counted as (a low-detail image).
pub const IMAGE_TOKENS: usize = 85;

/// Per-message token counts, remembered by a hash of the message, so each
/// message of a growing history is tokenised once.
pub struct TokenCounter {
    tokenizer: Box<dyn Tokenizer>,
    cache: Mutex<HashMap<u64, usize>>,
    capacity: usize,
}

impl TokenCounter {
    /// A counter remembering up to `capacity` messages (it starts over when full).
    pub fn new(tokenizer: Box<dyn Tokenizer>, capacity: usize) -> Self {
        TokenCounter { tokenizer, cache: Mutex::new(HashMap::new()), capacity }
    }

    /// Tokens in plain text (not cached).
    pub fn text(&self, text: &str) -> usize {
        self.tokenizer.count(text)
    }

    /// Tokens of one message, from the cache when seen before.
    pub fn message(&self, message: &Message) -> usize {
        let key = message_key(message);
        if let Some(n) = self.cache.lock().ok().and_then(|c| c.get(&key).copied()) {
            return n;
        }
        let n = MESSAGE_OVERHEAD + self.content(&message.content);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= self.capacity {
                cache.clear();
            }
            cache.insert(key, n);
        }
        n
    }

    /// Tokens of a list of messages.
    pub fn messages(&self, messages: &[Message]) -> usize {
        messages.iter().map(|m| self.message(m)).sum()
    }

    fn content(&self, content: &Content) -> usize {
        match content {
            Content::Text(t) => self.text(t),
            Content::Blocks(blocks) => blocks.iter().map(|b| self.block(b)).sum(),
        }
    }

    fn block(&self, block: &Block) -> usize {
        match block {
            Block::Text(b) => self.text(&b.text),
            Block::Thinking(b) => self.text(&b.thinking),
            Block::ToolUse(b) => self.text(&b.name) + self.text(&b.input.to_string()),
            Block::ToolResult(b) => self.text(&b.content),
            Block::Image(_) | Block::ImageFile(_) => IMAGE_TOKENS,
            Block::Unknown(map) => self.text(&serde_json::Value::Object(map.clone()).to_string()),
        }
    }
}

/// A test tokenizer: one token per whitespace-separated word.
#[cfg(test)]
pub(crate) struct Words;

#[cfg(test)]
impl Tokenizer for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

/// A 64-bit identity of a message's role and content (not its pin or time).
fn message_key(message: &Message) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    message.role.as_str().hash(&mut h);
    match &message.content {
        Content::Text(t) => {
            0u8.hash(&mut h);
            t.hash(&mut h);
        }
        Content::Blocks(blocks) => {
            1u8.hash(&mut h);
            for b in blocks {
                match b {
                    Block::Text(t) => ("t", &t.text).hash(&mut h),
                    Block::Thinking(t) => ("k", &t.thinking).hash(&mut h),
                    Block::ToolResult(r) => ("r", &r.tool_use_id, &r.content).hash(&mut h),
                    other => serde_json::to_string(other).unwrap_or_default().hash(&mut h),
                }
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Role;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(Arc<AtomicUsize>);
    impl Tokenizer for Counting {
        fn count(&self, text: &str) -> usize {
            self.0.fetch_add(1, Ordering::SeqCst);
            text.split_whitespace().count()
        }
    }

    #[test]
    fn o200k_counts_real_tokens() {
        assert_eq!(O200k.count("hello world"), 2);
        assert_eq!(O200k.count(""), 0);
    }

    #[test]
    fn messages_are_tokenised_once() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = TokenCounter::new(Box::new(Counting(calls.clone())), 100);
        let m = Message::text(Role::User, "one two three");
        assert_eq!(counter.message(&m), 3 + MESSAGE_OVERHEAD);
        assert_eq!(counter.message(&m.clone()), 3 + MESSAGE_OVERHEAD);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let other = Message::text(Role::Assistant, "one two three");
        counter.message(&other);
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the role is part of the identity");
    }
}
