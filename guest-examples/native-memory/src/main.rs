//! native-memory: a minimal context-engine memory plugin as a native binary (Rust + `serde_json`).
//!
//! Shows: one executable serving two hooks by dispatching on the request's "type".
//! - `after_turn` stores every user message of the turn as a note in `./memory.jsonl`
//! - `ingest` recalls up to 3 notes of the same agent that share a word with the message
//!
//! The host runs `bin/native-memory` directly (runtime = "native") with cwd = the plugin dir,
//! writes one JSON request line on stdin and reads one JSON reply line from stdout. stderr is
//! for logs.
//!
//! Build, then try it by hand from the plugin dir:
//! ```sh
//! cargo build --release && mkdir -p bin && cp target/release/native-memory bin/
//! bin/native-memory < ../requests/after_turn.json
//! echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | bin/native-memory
//! ```

use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, ErrorKind, Write};
use std::process::ExitCode;

use serde_json::{json, Value};

const MEMORY_FILE: &str = "memory.jsonl";
const MAX_RECALL: usize = 3;

type Result<T> = std::result::Result<T, String>;

/// A message's text: the string itself, or its text blocks joined with newlines.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Handles an `after_turn` request; returns the reply line.
fn after_turn(req: &Value, agent_id: &str) -> Result<String> {
    let mut lines = String::new();
    let mut stored = 0;
    for msg in req["messages"].as_array().into_iter().flatten() {
        if msg["role"] != "user" {
            continue;
        }
        let text = text_of(&msg["content"]);
        if text.trim_matches([' ', '\t', '\r', '\n']).is_empty() {
            continue;
        }
        // The note line keeps its key order and `": "` separators (`json!` would sort keys).
        let _ = writeln!(lines, r#"{{"agent_id": {}, "content": {}}}"#, Value::from(agent_id), Value::from(text));
        stored += 1;
    }
    if stored > 0 {
        // One O_APPEND write per call, so concurrent hooks do not interleave lines.
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(MEMORY_FILE)
            .map_err(|e| format!("cannot open {MEMORY_FILE}: {e}"))?;
        file.write_all(lines.as_bytes()).map_err(|e| format!("cannot write {MEMORY_FILE}: {e}"))?;
    }
    eprintln!("after_turn: stored {stored} note(s) for agent {agent_id}");
    Ok(r#"{"type":"ok"}"#.to_owned())
}

/// Notes as `(agent_id, content)`, oldest first; blank or damaged lines are skipped.
fn load_notes() -> Result<Vec<(String, String)>> {
    let data = match fs::read_to_string(MEMORY_FILE) {
        Ok(data) => data,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {MEMORY_FILE}: {e}")),
    };
    Ok(data
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|note| {
            let agent_id = note["agent_id"].as_str()?.to_owned();
            let content = note["content"].as_str()?.to_owned();
            Some((agent_id, content))
        })
        .collect())
}

/// Handles an `ingest` request; returns the reply line.
fn ingest(req: &Value, agent_id: &str) -> Result<String> {
    let message = req["message"].as_str().unwrap_or("");
    let mut words: Vec<String> = message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() >= 4)
        .map(str::to_ascii_lowercase)
        .collect();
    words.sort();
    words.dedup();
    let mut found: Vec<String> = Vec::new();
    if !words.is_empty() {
        // Newest first.
        for (note_agent, content) in load_notes()?.into_iter().rev() {
            if found.len() == MAX_RECALL {
                break;
            }
            if note_agent != agent_id || found.contains(&content) {
                continue;
            }
            let haystack = content.to_ascii_lowercase();
            if words.iter().any(|w| haystack.contains(w.as_str())) {
                found.push(content);
            }
        }
    }
    eprintln!("ingest: {} memories for agent {agent_id}", found.len());
    let memories: Vec<Value> = found.into_iter().map(|c| json!({"content": c})).collect();
    // Written by hand so that "type" comes first, as in the other examples (serde_json's
    // Value sorts object keys).
    Ok(format!(r#"{{"type":"ingest_result","memories":{}}}"#, Value::from(memories)))
}

/// Reads the request line and returns the reply line.
fn run() -> Result<String> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line).map_err(|e| format!("cannot read stdin: {e}"))?;
    if line.trim().is_empty() {
        return Err("empty request on stdin".into());
    }
    let req: Value = serde_json::from_str(&line).map_err(|e| format!("request is not valid JSON: {e}"))?;
    if !req.is_object() {
        return Err("request is not a JSON object".into());
    }
    let agent_id = req["agent_id"].as_str().unwrap_or("");
    match req["type"].as_str() {
        Some("after_turn") => after_turn(&req, agent_id),
        Some("ingest") => ingest(&req, agent_id),
        _ => Err(format!("unsupported request type {}", req["type"])),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(reply) => {
            println!("{reply}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("memory: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
