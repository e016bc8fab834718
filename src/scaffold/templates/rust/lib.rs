//! A starting point for a ctxhost component plugin (Rust → wasm32-wasip2).
//!
//! Implement only the hooks you need on the `Plugin` trait (from the `ctxhost-sdk`
//! crate in `sdk/`, generated from `wit/ctxhost.wit`) and list them in `HOOKS`;
//! every other hook answers "not implemented", which the host treats as "no opinion".
//!
//! - after_turn: stores the text of every user message as a note, in the plugin's
//!   host storage (kept by ctxhost under `<home>/data/<plugin>/`).
//! - ingest: recalls the 3 most recent notes of the same agent, newest first.
//!
//! Build: `cargo build --release` (`.cargo/config.toml` selects `wasm32-wasip2`);
//! plugin.toml's `component` points at the `.wasm` that command writes.

use ctxhost_sdk::{AfterTurnRequest, Hook, HookError, IngestRequest, Memory, Plugin, Role, host, text_of};

const MAX_RECALL: u64 = 3;

struct Notes;

/// Storage keys: `<agent>/count` holds how many notes the agent has, `<agent>/<i>` each note.
fn count_key(agent: &str) -> String {
    format!("{agent}/count")
}

fn note_key(agent: &str, i: u64) -> String {
    format!("{agent}/{i}")
}

fn count(agent: &str) -> u64 {
    host::storage_get(&count_key(agent)).and_then(|v| String::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

impl Plugin for Notes {
    const NAME: &'static str = "{{name}}";
    const HOOKS: &'static [Hook] = &[Hook::Ingest, Hook::AfterTurn];

    fn ingest(request: IngestRequest) -> Result<Vec<Memory>, HookError> {
        let agent = &request.agent_id;
        let n = count(agent);
        let memories: Vec<Memory> = (n.saturating_sub(MAX_RECALL)..n)
            .rev() // newest first
            .filter_map(|i| host::storage_get(&note_key(agent, i)))
            .map(|bytes| Memory { content: String::from_utf8_lossy(&bytes).into_owned(), tags: Vec::new() })
            .collect();
        host::log(host::Level::Info, &format!("ingest: {} note(s) for agent {agent}", memories.len()));
        Ok(memories)
    }

    fn after_turn(request: AfterTurnRequest) -> Result<Vec<Memory>, HookError> {
        let agent = &request.agent_id;
        let mut n = count(agent);
        for message in request.messages.iter().filter(|m| matches!(m.role, Role::User)) {
            let text = text_of(message);
            if text.trim().is_empty() {
                continue;
            }
            host::storage_set(&note_key(agent, n), text.as_bytes()).map_err(HookError::Failed)?;
            n += 1;
        }
        host::storage_set(&count_key(agent), n.to_string().as_bytes()).map_err(HookError::Failed)?;
        // Memories returned here go to the host's own memory; this template keeps its own.
        Ok(Vec::new())
    }
}

ctxhost_sdk::export_plugin!(Notes);
