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
pub fn redact(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for p in PATTERNS {
            if let Some(after) = rest.strip_prefix(p.prefix) {
                let len = after.find(|c: char| !is_token_char(c)).unwrap_or(after.len());
                let starts_word = out.chars().last().is_none_or(|c| !is_token_char(c));
                if len >= p.min && starts_word {
                    out.push_str("[REDACTED]");
                    count += 1;
                    rest = &after[len..];
                    continue 'scan;
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
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
