//! A redaction plugin: `transform_tool_result` replaces API keys and tokens in
//! tool output with `[REDACTED]` before the model sees them. Pure computation:
//! it needs no directory, no environment and no host service.
//!
//! Build: `cargo build --release --target wasm32-wasip2` in `guest-examples/`,
//! then point a plugin.toml at `target/wasm32-wasip2/release/redact.wasm`.

use ctxhost_sdk::{Hook, HookError, Plugin, TransformRequest};

struct Redact;

/// A secret shape: a literal prefix, then at least `min` token characters.
struct Pattern {
    prefix: &'static str,
    min: usize,
}

const PATTERNS: &[Pattern] = &[
    Pattern { prefix: "sk-", min: 20 },         // OpenAI-style keys
    Pattern { prefix: "sk_live_", min: 16 },    // Stripe
    Pattern { prefix: "ghp_", min: 30 },        // GitHub personal tokens
    Pattern { prefix: "github_pat_", min: 30 }, // GitHub fine-grained tokens
    Pattern { prefix: "xoxb-", min: 10 },       // Slack bot tokens
    Pattern { prefix: "xoxp-", min: 10 },       // Slack user tokens
    Pattern { prefix: "AKIA", min: 16 },        // AWS access key ids
    Pattern { prefix: "Bearer ", min: 16 },     // HTTP bearer tokens
];

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `text` with every secret replaced by `[REDACTED]`, and how many there were.
///
/// One pass over the bytes; a pattern is only tried where its first byte
/// stands at the start of a word.
pub fn redact(text: &str) -> (String, usize) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut copied = 0; // bytes of `text` already in `out`
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !is_token_char(bytes[i - 1] as char);
        let mut matched = None;
        if at_word_start && matches!(bytes[i], b's' | b'g' | b'x' | b'A' | b'B') {
            for p in PATTERNS {
                if let Some(after) = text[i..].strip_prefix(p.prefix) {
                    let len = after.find(|c: char| !is_token_char(c)).unwrap_or(after.len());
                    if len >= p.min {
                        matched = Some(p.prefix.len() + len);
                        break;
                    }
                }
            }
        }
        match matched {
            Some(len) => {
                out.push_str(&text[copied..i]);
                out.push_str("[REDACTED]");
                count += 1;
                i += len;
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    (out, count)
}

impl Plugin for Redact {
    const NAME: &'static str = "redact";
    const HOOKS: &'static [Hook] = &[Hook::TransformToolResult];

    fn transform_tool_result(request: TransformRequest) -> Result<Option<String>, HookError> {
        let (text, count) = redact(&request.result);
        Ok((count > 0).then_some(text))
    }
}

ctxhost_sdk::export_plugin!(Redact);
