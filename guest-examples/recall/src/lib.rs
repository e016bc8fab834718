//! The memory plugin of `guest-examples/*-memory`, as a component: the same
//! behaviour, byte for byte, so one test set checks both kinds.
//!
//! State lives in `/data/memory.jsonl`, where `/data` is a directory its
//! plugin.toml grants read-write (`[sandbox] dirs = [{ host = ".", guest =
//! "/data", mode = "rw" }]`); the component can touch nothing else.
//!
//! - after_turn: every user message with text is appended as a note.
//! - ingest: notes of the same agent sharing a word of 4+ ASCII letters or
//!   digits, newest first, at most 3, each once.

use std::io::Write;

use ctxhost_sdk::{AfterTurnRequest, Hook, HookError, IngestRequest, Memory, Plugin, Role, host, text_of};

const MEMORY_FILE: &str = "/data/memory.jsonl";
const MAX_RECALL: usize = 3;

struct Recall;

fn words(message: &str) -> Vec<String> {
    message.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| w.len() >= 4).map(str::to_ascii_lowercase).collect()
}

fn notes() -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(MEMORY_FILE) else { return Vec::new() };
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| Some((v.get("agent_id")?.as_str()?.to_owned(), v.get("content")?.as_str()?.to_owned())))
        .collect()
}

fn failed(e: impl std::fmt::Display) -> HookError {
    HookError::Failed(e.to_string())
}

impl Plugin for Recall {
    const NAME: &'static str = "recall";
    const HOOKS: &'static [Hook] = &[Hook::Ingest, Hook::AfterTurn];

    fn ingest(request: IngestRequest) -> Result<Vec<Memory>, HookError> {
        let words = words(&request.message);
        let mut found: Vec<String> = Vec::new();
        if !words.is_empty() {
            for (agent, content) in notes().into_iter().rev() {
                if agent != request.agent_id || found.contains(&content) {
                    continue;
                }
                let haystack = content.to_ascii_lowercase();
                if words.iter().any(|w| haystack.contains(w.as_str())) {
                    found.push(content);
                    if found.len() == MAX_RECALL {
                        break;
                    }
                }
            }
        }
        host::log(host::Level::Info, &format!("ingest: {} memories for agent {}", found.len(), request.agent_id));
        Ok(found.into_iter().map(|content| Memory { content, tags: Vec::new() }).collect())
    }

    fn after_turn(request: AfterTurnRequest) -> Result<Vec<Memory>, HookError> {
        let mut lines = String::new();
        let mut stored = 0;
        for m in &request.messages {
            if !matches!(m.role, Role::User) {
                continue;
            }
            let text = text_of(m);
            if text.trim_matches([' ', '\t', '\r', '\n']).is_empty() {
                continue;
            }
            let note = serde_json::json!({"agent_id": request.agent_id, "content": text});
            lines.push_str(&note.to_string());
            lines.push('\n');
            stored += 1;
        }
        if !lines.is_empty() {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(MEMORY_FILE).map_err(failed)?;
            file.write_all(lines.as_bytes()).map_err(failed)?;
        }
        host::log(host::Level::Info, &format!("after_turn: stored {stored} note(s) for agent {}", request.agent_id));
        Ok(Vec::new())
    }
}

ctxhost_sdk::export_plugin!(Recall);
