//! The `line` protocol's reading rule, as a pure function over the bytes a
//! worker wrote so far (spec section 7: one JSON line out, at most 4 MiB).
//!
//! The rule, for the bytes that follow a request:
//! - blank lines (only whitespace) are skipped;
//! - the first non-blank line is the reply: it must parse as JSON (any
//!   value); anything else is garbage and the worker is replaced;
//! - a line (or an unfinished one) over the cap is too long, seen as soon as
//!   the cap is passed, without waiting for its end;
//! - at end of file, an unfinished last line counts as a line (a one-shot
//!   script that prints without a newline and exits still answers).
//!
//! The `jsonrpc` protocol reads every line the same way ([`Cursor::next_line`]:
//! blank lines skipped, the cap on every line, the unfinished last line at end
//! of file) and decides what each one is itself (`rpc.rs`).
//!
//! Never reads, writes or kills anything.

use serde_json::Value;

/// Bytes of a garbage line kept for the error message.
const PREVIEW: usize = 200;

/// What the buffer holds so far.
#[derive(Debug, PartialEq)]
pub(super) enum Scan {
    /// A reply; its line (and the blank lines before it) left the buffer.
    Reply(Value),
    /// The first non-blank line is not JSON (its start, lossily decoded).
    Garbage(String),
    /// A line longer than the cap.
    TooLong,
    /// No whole line yet.
    NeedMore,
}

/// Where a search for the line's end left off, so a long line is not
/// rescanned from its start for every chunk.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    scanned: usize,
}

/// The next line of a worker's output, whatever it holds (the `jsonrpc`
/// protocol reads every line; the `line` protocol only the first).
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// A non-blank line, without its `\n`; it (and the blank lines before
    /// it) left the buffer.
    Line(Vec<u8>),
    /// A line longer than the cap.
    TooLong,
    /// No whole line yet.
    NeedMore,
}

impl Cursor {
    /// Scans `buf` for the reply. At `eof` an unfinished last line counts.
    pub(super) fn scan(&mut self, buf: &mut Vec<u8>, cap: usize, eof: bool) -> Scan {
        match self.next_line(buf, cap, eof) {
            Next::Line(line) => match serde_json::from_slice::<Value>(&line) {
                Ok(value) => Scan::Reply(value),
                Err(_) => Scan::Garbage(preview(&line)),
            },
            Next::TooLong => Scan::TooLong,
            Next::NeedMore => Scan::NeedMore,
        }
    }

    /// Takes the next non-blank line out of `buf`. Blank lines are skipped;
    /// a line over `cap` is seen as soon as the cap is passed; at `eof` an
    /// unfinished last line counts.
    pub(super) fn next_line(&mut self, buf: &mut Vec<u8>, cap: usize, eof: bool) -> Next {
        loop {
            let newline = buf.get(self.scanned..).and_then(|rest| rest.iter().position(|&b| b == b'\n'));
            let end = match newline {
                Some(offset) => self.scanned + offset,
                None if eof && !buf.is_empty() => buf.len(),
                None => {
                    self.scanned = buf.len();
                    return if buf.len() > cap { Next::TooLong } else { Next::NeedMore };
                }
            };
            self.scanned = 0;
            if end > cap {
                return Next::TooLong;
            }
            if buf[..end].trim_ascii().is_empty() {
                buf.drain(..(end + 1).min(buf.len()));
                continue;
            }
            let mut line: Vec<u8> = buf.drain(..(end + 1).min(buf.len())).collect();
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            return Next::Line(line);
        }
    }
}

/// Whether `buf` holds anything but whitespace.
pub(super) fn has_text(buf: &[u8]) -> bool {
    !buf.trim_ascii().is_empty()
}

/// The start of a line for an error message.
pub(super) fn preview(line: &[u8]) -> String {
    let cut = &line[..line.len().min(PREVIEW)];
    let mut text = String::from_utf8_lossy(cut).trim().to_owned();
    if line.len() > PREVIEW {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scan(bytes: &[u8], cap: usize, eof: bool) -> (Scan, Vec<u8>) {
        let mut buf = bytes.to_vec();
        let s = Cursor::default().scan(&mut buf, cap, eof);
        (s, buf)
    }

    #[test]
    fn the_first_non_blank_line_is_the_reply_and_the_rest_stays() {
        assert_eq!(scan(b"\n  \r\n{\"a\":1}\r\nnext", 100, false), (Scan::Reply(json!({"a": 1})), b"next".to_vec()));
        assert_eq!(scan(b"42\n", 100, false).0, Scan::Reply(json!(42)), "any JSON value");
        assert_eq!(scan(b"{\"a\":", 100, false).0, Scan::NeedMore);
        assert_eq!(scan(b"\n\n", 100, false), (Scan::NeedMore, Vec::new()));
    }

    #[test]
    fn a_non_json_line_is_garbage_even_before_a_json_one() {
        assert_eq!(scan(b"debug: hi\n{}\n", 100, false), (Scan::Garbage("debug: hi".into()), b"{}\n".to_vec()));
        let (s, _) = scan(&[b'x'; 300].iter().copied().chain(*b"\n").collect::<Vec<_>>(), 1000, false);
        assert_eq!(s, Scan::Garbage(format!("{}…", "x".repeat(PREVIEW))));
    }

    #[test]
    fn too_long_is_seen_before_the_line_ends() {
        assert_eq!(scan(&[b' '; 11], 10, false).0, Scan::TooLong);
        assert_eq!(scan(b"\"0123456789\"\n", 10, false).0, Scan::TooLong);
        assert_eq!(scan(b"\"01234567\"\n", 10, false).0, Scan::Reply(json!("01234567")), "exactly the cap is fine");
    }

    #[test]
    fn at_eof_an_unfinished_line_counts() {
        assert_eq!(scan(b"{\"a\":1}", 100, true).0, Scan::Reply(json!({"a": 1})));
        assert_eq!(scan(b"{\"a\":", 100, true).0, Scan::Garbage("{\"a\":".into()));
        assert_eq!(scan(b"", 100, true).0, Scan::NeedMore);
    }

    #[test]
    fn next_line_takes_every_line_in_turn() {
        let mut cursor = Cursor::default();
        let mut buf = b"\n junk\n{\"a\":1}\r\n\nlast".to_vec();
        assert_eq!(cursor.next_line(&mut buf, 100, false), Next::Line(b" junk".to_vec()));
        assert_eq!(cursor.next_line(&mut buf, 100, false), Next::Line(b"{\"a\":1}\r".to_vec()));
        assert_eq!(cursor.next_line(&mut buf, 100, false), Next::NeedMore);
        assert_eq!(cursor.next_line(&mut buf, 100, true), Next::Line(b"last".to_vec()));
        assert!(buf.is_empty());
        assert_eq!(cursor.next_line(&mut buf, 100, true), Next::NeedMore);
        let mut long = vec![b'x'; 11];
        assert_eq!(Cursor::default().next_line(&mut long, 10, false), Next::TooLong, "the cap holds for every line");
    }

    #[test]
    fn the_cursor_resumes_a_long_line() {
        let mut cursor = Cursor::default();
        let mut buf = b"[1,".to_vec();
        assert_eq!(cursor.scan(&mut buf, 100, false), Scan::NeedMore);
        buf.extend_from_slice(b"2]\n");
        assert_eq!(cursor.scan(&mut buf, 100, false), Scan::Reply(json!([1, 2])));
        assert!(buf.is_empty());
        assert!(!has_text(b" \n\t") && has_text(b" x"));
    }
}
