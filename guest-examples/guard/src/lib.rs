//! The guard plugin as a component (world `agent-plugin`); the same
//! behaviour is written as a python worker and a node script, and one shared
//! test set runs all three.
//!
//! - `tool_call_pre` `{"name", "args", "agent_id"}`: a `shell_exec` call whose
//!   `args.command` contains the configured `BLOCK_PATTERN` (read from the
//!   config service on every call; default `rm -rf`) is blocked with
//!   ``guard: refusing a command containing `<pattern>` ``; anything else passes.
//! - `memory_write_pre` `{"content", "metadata"}`: every email address
//!   (the regex `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`, leftmost
//!   first, greedy) becomes `[email]` and the content is replaced; content
//!   without one passes.
//!
//! Build: `cargo build --release --target wasm32-wasip2` in `guest-examples/`,
//! then copy `target/wasm32-wasip2/release/guard.wasm` next to `plugin.toml`.

use ctxhost_sdk::{AgentPlugin, Hook, HookError, Plugin, Value, decision, json, services};

struct Guard;

/// The pattern when the config has none.
const DEFAULT_PATTERN: &str = "rm -rf";

impl Plugin for Guard {
    const NAME: &'static str = "guard";
    const HOOKS: &'static [Hook] = &[];
}

impl AgentPlugin for Guard {
    const AGENT_HOOKS: &'static [&'static str] = &["tool_call_pre", "memory_write_pre"];

    fn describe_agent() -> Value {
        json!({
            "config": [
                {"key": "BLOCK_PATTERN", "type": "str", "label": "Blocked pattern", "default": DEFAULT_PATTERN},
            ],
        })
    }

    fn handle(hook: &str, request: Value) -> Result<Value, HookError> {
        match hook {
            "tool_call_pre" => Ok(tool_call_pre(&request)),
            "memory_write_pre" => Ok(memory_write_pre(&request)),
            _ => Err(HookError::NotImplemented),
        }
    }
}

fn tool_call_pre(request: &Value) -> Value {
    if request["name"].as_str() != Some("shell_exec") {
        return decision::pass();
    }
    let Some(command) = request["args"]["command"].as_str() else { return decision::pass() };
    let configured = services::config_get("BLOCK_PATTERN").ok();
    let pattern = configured.as_ref().and_then(Value::as_str).unwrap_or(DEFAULT_PATTERN);
    if command.contains(pattern) {
        decision::block(format!("guard: refusing a command containing `{pattern}`"))
    } else {
        decision::pass()
    }
}

fn memory_write_pre(request: &Value) -> Value {
    let Some(content) = request["content"].as_str() else { return decision::pass() };
    let (redacted, count) = redact_emails(content);
    if count == 0 { decision::pass() } else { decision::replace(redacted) }
}

fn is_local(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-')
}

fn is_domain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')
}

/// Where an email starting at `i` ends, as the regex
/// `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}` matches it there (greedy
/// with backtracking: the domain's last dot followed by two or more letters),
/// and where the local run starting at `i` stops.
fn email_at(b: &[u8], i: usize) -> (Option<usize>, usize) {
    let mut at = i;
    while at < b.len() && is_local(b[at]) {
        at += 1;
    }
    if at == i || at == b.len() || b[at] != b'@' {
        return (None, at);
    }
    let start = at + 1;
    let mut end = start;
    while end < b.len() && is_domain(b[end]) {
        end += 1;
    }
    // The greedy `[A-Za-z0-9.-]+` gives back from the right: the last dot
    // (with at least one domain character before it) that two letters follow.
    for dot in (start + 1..end).rev() {
        if b[dot] != b'.' {
            continue;
        }
        let mut tld = dot + 1;
        while tld < b.len() && b[tld].is_ascii_alphabetic() {
            tld += 1;
        }
        if tld - (dot + 1) >= 2 {
            return (Some(tld), at);
        }
    }
    (None, at)
}

/// `text` with every email replaced by `[email]`, and how many there were.
pub fn redact_emails(text: &str) -> (String, usize) {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied, mut count) = (0, 0, 0);
    while i < b.len() {
        match email_at(b, i) {
            (Some(end), _) => {
                out.push_str(&text[copied..i]);
                out.push_str("[email]");
                count += 1;
                i = end;
                copied = end;
            }
            // Every start inside the same local run fails the same way.
            (None, stop) => i = stop.max(i + 1),
        }
    }
    out.push_str(&text[copied..]);
    (out, count)
}

ctxhost_sdk::export_agent_plugin!(Guard);

#[cfg(test)]
mod tests {
    use super::redact_emails;

    #[test]
    fn emails_as_the_regex_finds_them() {
        let cases = [
            ("mail bob@example.com now", "mail [email] now", 1),
            ("a.b+c@sub.example.co.uk, x_y%z-1@h-1.io.", "[email], [email].", 2),
            ("a@b@c.com", "a@[email]", 1),
            ("user@localhost and @x.com and u@.com", "user@localhost and @x.com and u@.com", 0),
            ("u@a.b.c1 u@a.bc.d", "u@a.b.c1 [email].d", 1),
            ("x@y.comé", "[email]é", 1),
            ("é@x.io, ü x@y.z9", "é@x.io, ü x@y.z9", 0),
            ("first@one.org;second@two.net", "[email];[email]", 2),
        ];
        for (text, want, n) in cases {
            assert_eq!(redact_emails(text), (want.to_owned(), n), "{text}");
        }
    }
}
