//! The sidecar's framing: newline-delimited JSON, requests
//! `{"id":N,"method":M,"params":{…}}`, replies `{"id":N,"ok":…}` or
//! `{"id":N,"error":"…"}`.
//!
//! Owns reading one bounded line, telling a request from a line that is not
//! one, and writing a reply line LibreFang's transport can take. It never
//! knows what a method does.

use std::io::{self, BufRead};

use serde_json::{Map, Value, json};

/// A request line longer than this is not parsed (its id is still read, so
/// the caller gets an error instead of a timeout).
pub const MAX_REQUEST_LINE: usize = 64 * 1024 * 1024;

/// A reply line (newline included) must stay under this: LibreFang's
/// transport dies on longer lines.
pub const MAX_REPLY_LINE: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept to find its id.
const PREFIX: usize = 256;

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum Line {
    Full(Vec<u8>),
    /// Longer than the cap: its first bytes, and its whole length.
    Oversized {
        prefix: Vec<u8>,
        len: usize,
    },
}

/// Reads up to the next `\n` (or EOF), keeping at most `cap` bytes.
/// `Ok(None)` at EOF.
pub fn read_line(reader: &mut impl BufRead, cap: usize) -> io::Result<Option<Line>> {
    let mut buf = Vec::new();
    let (mut len, mut any, mut over) = (0usize, false, false);
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let (chunk, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        len += chunk.len();
        if !over && buf.len() + chunk.len() > cap {
            over = true;
            buf.truncate(PREFIX);
        }
        if over {
            let room = PREFIX.saturating_sub(buf.len());
            buf.extend_from_slice(&chunk[..room.min(chunk.len())]);
        } else {
            buf.extend_from_slice(chunk);
        }
        reader.consume(used);
        if done {
            break;
        }
    }
    Ok(Some(if over { Line::Oversized { prefix: buf, len } } else { Line::Full(buf) }))
}

/// What a line turned out to be.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// Not a request; answered with an error when its id could be read.
    Invalid {
        id: Option<Value>,
        reason: String,
    },
    Blank,
}

/// Parses one line as a request.
pub fn parse(line: &Line) -> Incoming {
    let bytes = match line {
        Line::Oversized { prefix, len } => {
            return Incoming::Invalid {
                id: scan_id(prefix),
                reason: format!("request line of {len} bytes is over the {MAX_REQUEST_LINE}-byte limit"),
            };
        }
        Line::Full(b) => b,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Blank;
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Incoming::Invalid { id: scan_id(bytes), reason: format!("request is not JSON: {e}") },
    };
    let Value::Object(mut map) = value else {
        return Incoming::Invalid { id: None, reason: "request is not a JSON object".into() };
    };
    let id = map.remove("id");
    let Some(id) = id.filter(|v| !v.is_null()) else {
        return Incoming::Invalid { id: None, reason: "request has no `id`".into() };
    };
    let method = match map.remove("method") {
        Some(Value::String(m)) => m,
        Some(other) => {
            return Incoming::Invalid { id: Some(id), reason: format!("`method` must be a string, got {other}") };
        }
        None => return Incoming::Invalid { id: Some(id), reason: "request has no `method`".into() },
    };
    let params = match map.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(other) => {
            return Incoming::Invalid { id: Some(id), reason: format!("`params` must be an object, got {other}") };
        }
    };
    Incoming::Request { id, method, params }
}

/// The numeric id at the start of a line that did not parse
/// (`{"id": 42, …`), so its sender gets an error rather than a timeout.
fn scan_id(bytes: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(PREFIX)]);
    let rest = text.trim_start().strip_prefix('{')?.trim_start().strip_prefix("\"id\"")?;
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<u64>().ok().map(Value::from)
}

/// The reply line for `id` (no trailing newline). A reply that would pass
/// [`MAX_REPLY_LINE`] becomes an error saying so.
pub fn reply(id: &Value, result: Result<Value, String>) -> String {
    let value = match result {
        Ok(ok) => json!({"id": id, "ok": ok}),
        Err(e) => json!({"id": id, "error": e}),
    };
    let line = value.to_string();
    if line.len() < MAX_REPLY_LINE {
        return line;
    }
    json!({"id": id, "error": format!(
        "the reply is {} bytes, over the {MAX_REPLY_LINE}-byte line LibreFang's transport accepts; \
         a plugin returned too much (lower max_recall_results or the plugin's output)",
        line.len()
    )})
    .to_string()
}

/// The error reply of a call of `hook` refused because a stack plugin is
/// refused on this instance: `error` (what LibreFang logs) and the
/// refusal's fields (`kind` `plugin_version_mismatch`, both hashes, `fix`).
pub fn refused(id: &Value, refusal: &crate::app::catalog::fleet::Refusal, hook: &str) -> String {
    let mut value = refusal.describe();
    value["id"] = id.clone();
    value["hook"] = json!(hook);
    value["error"] = json!(refusal.refused_call(hook));
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<Line> {
        let mut r = io::BufReader::with_capacity(4, input);
        std::iter::from_fn(|| read_line(&mut r, cap).unwrap()).collect()
    }

    #[test]
    fn lines_are_split_bounded_and_the_last_needs_no_newline() {
        assert_eq!(
            lines(b"ab\n\ncd", 100),
            [Line::Full(b"ab".to_vec()), Line::Full(Vec::new()), Line::Full(b"cd".to_vec())]
        );
        assert_eq!(lines(b"", 100), []);
        let long = [b"{\"id\":9,".as_slice(), &[b'x'; 500], b"\nok\n"].concat();
        let got = lines(&long, 100);
        let Line::Oversized { prefix, len } = &got[0] else { panic!("{got:?}") };
        assert_eq!(*len, 508);
        assert_eq!(prefix.len(), PREFIX);
        assert!(prefix.starts_with(b"{\"id\":9,"));
        assert_eq!(got[1], Line::Full(b"ok".to_vec()));
    }

    #[test]
    fn requests_and_what_is_not_one() {
        let p = |s: &str| parse(&Line::Full(s.as_bytes().to_vec()));
        assert_eq!(
            p(r#"{"id":1,"method":"bootstrap","params":{"context_window_tokens":8}}"#),
            Incoming::Request { id: json!(1), method: "bootstrap".into(), params: json!({"context_window_tokens":8}) }
        );
        assert_eq!(
            p(r#"{"id":2,"method":"x"}"#),
            Incoming::Request { id: json!(2), method: "x".into(), params: json!({}) }
        );
        assert_eq!(p("  "), Incoming::Blank);
        assert!(matches!(p("not json"), Incoming::Invalid { id: None, .. }));
        assert!(matches!(p(r#"{"id": 8, "method":"ingest""#), Incoming::Invalid { id: Some(v), .. } if v == json!(8)));
        assert!(matches!(p(r#"[1,2]"#), Incoming::Invalid { id: None, .. }));
        assert!(matches!(p(r#"{"method":"ingest"}"#), Incoming::Invalid { id: None, .. }));
        assert!(matches!(p(r#"{"id":3,"params":{}}"#), Incoming::Invalid { id: Some(_), .. }));
        assert!(matches!(p(r#"{"id":4,"method":"a","params":[1]}"#), Incoming::Invalid { id: Some(_), .. }));
        let over = parse(&Line::Oversized { prefix: b"{ \"id\" : 77 , \"method\"".to_vec(), len: 1 << 30 });
        assert!(
            matches!(over, Incoming::Invalid { id: Some(v), ref reason } if v == json!(77) && reason.contains("limit"))
        );
    }

    #[test]
    fn replies_are_one_line_and_never_too_long() {
        assert_eq!(reply(&json!(3), Ok(json!({"a":1}))), r#"{"id":3,"ok":{"a":1}}"#);
        assert_eq!(reply(&json!(4), Err("no\nway".into())), r#"{"id":4,"error":"no\nway"}"#);
        let huge = reply(&json!(5), Ok(json!("x".repeat(MAX_REPLY_LINE))));
        assert!(huge.len() < 1000);
        assert!(huge.starts_with(r#"{"id":5,"error":"the reply is "#), "{huge}");
    }
}
