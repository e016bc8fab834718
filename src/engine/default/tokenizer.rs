//! Counting tokens: a small [`Tokenizer`] trait, the `o200k_base` encoding
//! behind it, and a per-message count cache so a long history is not
//! re-tokenised on every turn.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::protocol::{Block, Content, Message};

/// Counts tokens in text.
pub trait Tokenizer: Send + Sync {
    fn count(&self, text: &str) -> usize;

    /// Whether [`Tokenizer::count`] can answer without first loading
    /// something slow.
    fn is_ready(&self) -> bool {
        true
    }

    /// Blocks until [`Tokenizer::is_ready`] (called off the async threads).
    fn wait_ready(&self) {}
}

/// OpenAI's `o200k_base` encoding (tiktoken). Building the encoder takes
/// 0.1–0.2 s optimised (0.5 s and more unoptimised, seconds on a slow
/// machine): it is built once per process, on a thread of its own as soon as
/// a command that will count starts or an engine that counts with it is made
/// ([`O200k::preload`]), so the first turn does not pay for it; a count that
/// must still wait longer than [`SLOW_LOAD`] says so on the
/// `ctxhost::progress` log target.
#[derive(Debug, Default, Clone, Copy)]
pub struct O200k;

static O200K: Preload<Option<tiktoken_rs::CoreBPE>> = Preload::new("the tokenizer (o200k_base)", || {
    // The encoder data ships inside the crate; should it ever fail to load
    // (or panic), counts fall back to the usual 4-bytes-per-token estimate.
    std::panic::catch_unwind(tiktoken_rs::o200k_base).ok().and_then(Result::ok)
});

/// A wait for something slow to load longer than this is announced.
pub const SLOW_LOAD: Duration = Duration::from_millis(300);

impl O200k {
    /// Starts building the encoder on a thread of its own, once per process.
    pub fn preload() {
        O200K.start();
    }
}

impl Tokenizer for O200k {
    fn count(&self, text: &str) -> usize {
        match O200K.get() {
            Some(bpe) => bpe.encode_ordinary(text).len(),
            None => text.len().div_ceil(4),
        }
    }

    fn is_ready(&self) -> bool {
        O200K.is_ready()
    }

    fn wait_ready(&self) {
        O200K.wait(SLOW_LOAD);
    }
}

/// A value built once per process, preferably ahead of time on a thread of
/// its own; whoever needs it first waits for that thread (or builds it, when
/// no thread could be started).
pub(crate) struct Preload<T: 'static> {
    what: &'static str,
    build: fn() -> T,
    value: OnceLock<T>,
    /// Whether a builder thread was started.
    thread: OnceLock<bool>,
    /// Signalled when `value` is set.
    built: (Mutex<()>, Condvar),
}

impl<T: Send + Sync + 'static> Preload<T> {
    pub(crate) const fn new(what: &'static str, build: fn() -> T) -> Self {
        Preload {
            what,
            build,
            value: OnceLock::new(),
            thread: OnceLock::new(),
            built: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Starts building on a thread of its own (the first call only).
    pub(crate) fn start(&'static self) {
        self.thread.get_or_init(|| {
            std::thread::Builder::new()
                .name("ctxhost-preload".into())
                .spawn(move || {
                    self.get();
                })
                .is_ok()
        });
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.value.get().is_some()
    }

    /// The value, built now by this thread when nobody else is building it
    /// (else this waits for the builder).
    pub(crate) fn get(&self) -> &T {
        if let Some(v) = self.value.get() {
            return v;
        }
        let value = self.value.get_or_init(|| {
            let started = Instant::now();
            let value = (self.build)();
            tracing::debug!("{} built in {:.0} ms", self.what, started.elapsed().as_secs_f64() * 1e3);
            value
        });
        // A waiter checks `value` under this lock, so the notification cannot
        // fall between its check and its wait.
        drop(self.built.0.lock().unwrap_or_else(|p| p.into_inner()));
        self.built.1.notify_all();
        value
    }

    /// Blocks until the value is built (starting the builder if needed);
    /// after `slow`, says on `ctxhost::progress` what it waits for. Returns
    /// whether it did. Never call it on the async threads.
    pub(crate) fn wait(&'static self, slow: Duration) -> bool {
        if self.is_ready() {
            return false;
        }
        self.start();
        if self.thread.get() != Some(&true) {
            self.get();
            return false;
        }
        let guard = self.built.0.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, waited) =
            self.built.1.wait_timeout_while(guard, slow, |_| !self.is_ready()).unwrap_or_else(|p| p.into_inner());
        if !waited.timed_out() {
            return false;
        }
        tracing::info!(target: "ctxhost::progress", "loading {}…", self.what);
        drop(self.built.1.wait_while(guard, |_| !self.is_ready()).unwrap_or_else(|p| p.into_inner()));
        true
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

    /// Whether counting can start without waiting for the tokenizer to load.
    pub fn is_ready(&self) -> bool {
        self.tokenizer.is_ready()
    }

    /// Blocks until the tokenizer is loaded (call it off the async threads).
    pub fn wait_ready(&self) {
        self.tokenizer.wait_ready();
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
    fn a_slow_preload_is_announced_and_a_quick_one_is_not() {
        static SLOW: Preload<u32> = Preload::new("slow", || {
            std::thread::sleep(Duration::from_millis(600));
            7
        });
        static QUICK: Preload<u32> = Preload::new("quick", || 8);
        let started = Instant::now();
        assert!(!SLOW.is_ready());
        assert!(SLOW.wait(Duration::from_millis(100)), "a wait past the threshold is announced");
        assert!(started.elapsed() >= Duration::from_millis(600), "it waited for the value");
        assert_eq!(*SLOW.get(), 7);
        assert!(!SLOW.wait(Duration::from_millis(100)), "once built nothing waits");
        QUICK.start();
        assert!(!QUICK.wait(Duration::from_secs(30)), "a build within the threshold is not announced");
        assert_eq!(*QUICK.get(), 8);
    }

    #[test]
    fn o200k_counts_real_tokens_once_preloaded() {
        O200k::preload();
        O200k.wait_ready();
        assert!(O200k.is_ready());
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
