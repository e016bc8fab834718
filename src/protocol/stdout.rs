//! The stdout reading rule of spec section 5.7, as one pure function.
//!
//! Scripts print log lines, progress and sometimes several JSON documents;
//! the reply is the *last* line that parses as JSON. This must stay a pure
//! function of the bytes so every runner (one-shot, worker) reads alike.

use serde_json::Value;

/// The hook exited 0 but printed nothing but white space.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Hook produced no output")]
pub struct NoOutput;

/// Reads a hook's reply from its complete stdout.
///
/// - Lines are scanned from the last to the first, skipping blank ones; the
///   first that parses as JSON (any value) is the reply.
/// - If none parses, the reply is `{"text": <all lines joined by "\n">}`.
/// - Bytes that are not UTF-8 are replaced by U+FFFD, never rejected.
///
/// # Errors
/// [`NoOutput`] when stdout is empty or only white space.
pub fn parse_stdout(stdout: &[u8]) -> Result<Value, NoOutput> {
    let text = String::from_utf8_lossy(stdout);
    if text.trim().is_empty() {
        return Err(NoOutput);
    }
    let reply = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .find_map(|line| serde_json::from_str::<Value>(line).ok());
    Ok(reply.unwrap_or_else(|| {
        let joined = text.lines().collect::<Vec<_>>().join("\n");
        serde_json::json!({ "text": joined })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_lines_before_the_json() {
        let out = b"starting up\n[info] loaded 3 notes\n{\"memories\":[]}\n";
        assert_eq!(parse_stdout(out), Ok(json!({"memories": []})));
    }

    #[test]
    fn last_json_line_wins() {
        let out = b"{\"n\":1}\n{\"n\":2}\n\n  \n";
        assert_eq!(parse_stdout(out), Ok(json!({"n": 2})));
    }

    #[test]
    fn a_trailing_log_line_after_the_json_is_skipped() {
        let out = b"{\"n\":1}\ndone.\n";
        assert_eq!(parse_stdout(out), Ok(json!({"n": 1})));
    }

    #[test]
    fn any_json_value_counts() {
        assert_eq!(parse_stdout(b"log\n42\n"), Ok(json!(42)));
        assert_eq!(parse_stdout(b"\"just a string\"\n"), Ok(json!("just a string")));
    }

    #[test]
    fn non_json_becomes_text() {
        let out = b"hello\r\nworld\n";
        assert_eq!(parse_stdout(out), Ok(json!({"text": "hello\nworld"})));
    }

    #[test]
    fn blank_is_an_error() {
        assert_eq!(parse_stdout(b""), Err(NoOutput));
        assert_eq!(parse_stdout(b"  \n\n\t\n"), Err(NoOutput));
        assert_eq!(NoOutput.to_string(), "Hook produced no output");
    }

    #[test]
    fn non_utf8_bytes_are_replaced_not_rejected() {
        let out = b"\xff\xfe garbage\n{\"ok\":\"caf\xc3\xa9\"}\n";
        assert_eq!(parse_stdout(out), Ok(json!({"ok": "café"})));
        let out = b"bad \xff byte\n";
        assert_eq!(parse_stdout(out), Ok(json!({"text": "bad \u{fffd} byte"})));
    }

    #[test]
    fn a_900_kib_single_line_reply() {
        let big = "x".repeat(900 * 1024);
        let out = format!("noise\n{{\"content\":\"{big}\"}}\n");
        let reply = parse_stdout(out.as_bytes()).unwrap();
        assert_eq!(reply["content"].as_str().map(str::len), Some(900 * 1024));
    }
}
