//! The turn log: what the engine did on each agent's recent turns through
//! the agent API (`POST /api/agents/{agent_id}/{hook}`) — the memories
//! recalled and who recalled them, the assembled window with token counts
//! and what was trimmed, compactions with their summary, tool results before
//! and after the transform, and every plugin's (and the built-in engine's)
//! part with its time and outcome — served by `GET /api/turns` and `GET
//! /api/agents`.
//!
//! A turn starts at an `ingest` (or at the first call after the last turn
//! ended) and ends at `after_turn`. Bounded: [`MAX_AGENTS`] agents (the one
//! least recently seen goes), [`MAX_TURNS`] turns each, every text cut at
//! [`MAX_TEXT`] bytes and every list capped. Never slows a hook: the
//! handler hands the finished call to a recorder over a bounded channel
//! (full: the event is dropped and counted, never waited for); the recorder
//! counts tokens off the async threads and takes the log's lock only to
//! insert.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::body::JsonReply;
use crate::engine::default::tokenizer::TokenCounter;
use crate::metrics::CallRecord;
use crate::protocol::{HookRequest, Message};

/// Agents the log keeps.
pub const MAX_AGENTS: usize = 64;
/// Turns kept per agent.
pub const MAX_TURNS: usize = 16;
/// A text (memory, tool result, summary, message) is cut here.
const MAX_TEXT: usize = 1024;
/// A message preview in the window.
const PREVIEW: usize = 120;
const MAX_MEMORIES: usize = 20;
const MAX_WINDOW_MESSAGES: usize = 100;
const MAX_TRIMMED: usize = 50;
const MAX_COMPACTIONS: usize = 4;
const MAX_TOOL_RESULTS: usize = 8;
const MAX_HOOK_CALLS: usize = 64;
/// Calls waiting for the recorder.
const QUEUE: usize = 64;

/// One agent-API call, as the handler hands it over.
pub(crate) struct TurnEvent {
    pub agent: String,
    pub request: HookRequest,
    pub reply: Value,
    pub calls: Vec<CallRecord>,
}

#[derive(Debug, Clone, Serialize)]
struct MessageView {
    role: Value,
    tokens: usize,
    preview: String,
}

#[derive(Debug, Clone, Serialize)]
struct Window {
    window_tokens: u64,
    messages_in: usize,
    messages_out: usize,
    tokens_in: usize,
    tokens_out: usize,
    system_prompt_tokens: usize,
    trimmed: Vec<MessageView>,
    messages: Vec<MessageView>,
}

#[derive(Debug, Clone, Serialize)]
struct Compaction {
    messages_in: usize,
    messages_out: usize,
    tokens_in: usize,
    tokens_out: usize,
    summary: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
struct ToolResult {
    tool_name: String,
    before: String,
    after: String,
}

#[derive(Debug, Clone, Serialize)]
struct Turn {
    turn: u64,
    started_ms: u64,
    ended_ms: Option<u64>,
    message: Option<String>,
    memories: Vec<Value>,
    window: Option<Window>,
    compactions: Vec<Compaction>,
    tool_results: Vec<ToolResult>,
    hooks: Vec<CallRecord>,
    /// A list hit its cap.
    truncated: bool,
    #[serde(skip)]
    ingested: bool,
}

impl Turn {
    fn new(turn: u64, now: u64) -> Turn {
        Turn {
            turn,
            started_ms: now,
            ended_ms: None,
            message: None,
            memories: Vec::new(),
            window: None,
            compactions: Vec::new(),
            tool_results: Vec::new(),
            hooks: Vec::new(),
            truncated: false,
            ingested: false,
        }
    }
}

#[derive(Default)]
struct AgentLog {
    turns: VecDeque<Turn>,
    next: u64,
    last_ms: u64,
}

/// Every agent's recent turns.
pub(crate) struct TurnLog {
    agents: Mutex<BTreeMap<String, AgentLog>>,
    queue: tokio::sync::mpsc::Sender<TurnEvent>,
    /// Calls not recorded because the recorder was behind.
    dropped: AtomicU64,
}

impl TurnLog {
    /// The log and the recorder that fills it (counting tokens with `counter`).
    /// `window` is the configured context window (what an assemble without one gets).
    pub(crate) fn start(
        engine: crate::engine::default::DefaultEngine,
        window: u64,
    ) -> (Arc<TurnLog>, tokio::task::JoinHandle<()>) {
        let (queue, mut rx) = tokio::sync::mpsc::channel::<TurnEvent>(QUEUE);
        let log = Arc::new(TurnLog { agents: Mutex::new(BTreeMap::new()), queue, dropped: AtomicU64::new(0) });
        let weak = Arc::downgrade(&log);
        let task = tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let engine = engine.clone();
                let Ok(update) = tokio::task::spawn_blocking(move || Update::of(event, engine.counter(), window)).await
                else {
                    continue;
                };
                let Some(log) = weak.upgrade() else { return };
                log.apply(update, now_ms());
            }
        });
        (log, task)
    }

    /// A slot for one event, or `None` (counted) when the recorder is behind.
    pub(crate) fn slot(&self) -> Option<tokio::sync::mpsc::Permit<'_, TurnEvent>> {
        match self.queue.try_reserve() {
            Ok(permit) => Some(permit),
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn apply(&self, update: Update, now: u64) {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        if !agents.contains_key(&update.agent) && agents.len() >= MAX_AGENTS {
            // The agent seen least recently makes room.
            if let Some(oldest) = agents.iter().min_by_key(|(_, a)| a.last_ms).map(|(k, _)| k.clone()) {
                agents.remove(&oldest);
            }
        }
        let log = agents.entry(update.agent.clone()).or_default();
        log.last_ms = now;
        let starts = match log.turns.back() {
            None => true,
            Some(t) => t.ended_ms.is_some() || (update.starts_turn && t.ingested),
        };
        if starts {
            log.next += 1;
            if log.turns.len() == MAX_TURNS {
                log.turns.pop_front();
            }
            log.turns.push_back(Turn::new(log.next, now));
        }
        let Some(turn) = log.turns.back_mut() else { return };
        update.change.apply(turn, now);
        let room = MAX_HOOK_CALLS.saturating_sub(turn.hooks.len());
        turn.truncated |= update.calls.len() > room;
        turn.hooks.extend(update.calls.into_iter().take(room));
    }
}

/// What one event changes in its turn, computed off the lock.
struct Update {
    agent: String,
    starts_turn: bool,
    calls: Vec<CallRecord>,
    change: Change,
}

enum Change {
    Ingest { message: String, memories: Vec<Value>, truncated: bool },
    Assemble(Window, bool),
    Compact(Compaction),
    Tool(ToolResult),
    End,
    Other,
}

impl Change {
    fn apply(self, turn: &mut Turn, now: u64) {
        match self {
            Change::Ingest { message, memories, truncated } => {
                turn.ingested = true;
                turn.message = Some(message);
                turn.memories = memories;
                turn.truncated |= truncated;
            }
            Change::Assemble(window, truncated) => {
                turn.window = Some(window);
                turn.truncated |= truncated;
            }
            Change::Compact(c) if turn.compactions.len() < MAX_COMPACTIONS => turn.compactions.push(c),
            Change::Tool(t) if turn.tool_results.len() < MAX_TOOL_RESULTS => turn.tool_results.push(t),
            Change::Compact(_) | Change::Tool(_) => turn.truncated = true,
            Change::End => turn.ended_ms = Some(now),
            Change::Other => {}
        }
    }
}

impl Update {
    fn of(event: TurnEvent, counter: &TokenCounter, configured_window: u64) -> Update {
        let TurnEvent { agent, request, reply, calls } = event;
        let starts_turn = matches!(request, HookRequest::Ingest(_));
        let change = match request {
            HookRequest::Ingest(r) => {
                let all = reply.get("memories").and_then(Value::as_array).cloned().unwrap_or_default();
                let truncated = all.len() > MAX_MEMORIES;
                let memories = all
                    .into_iter()
                    .take(MAX_MEMORIES)
                    .map(|mut m| {
                        if let Some(c) = m.get("content").and_then(Value::as_str) {
                            m["content"] = json!(cut(c, MAX_TEXT));
                        }
                        m
                    })
                    .collect();
                Change::Ingest { message: cut(&r.message, MAX_TEXT), memories, truncated }
            }
            HookRequest::Assemble(r) => {
                let out: Vec<Message> =
                    reply.get("messages").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default();
                let prompt = reply.get("system_prompt").and_then(Value::as_str).unwrap_or(&r.system_prompt);
                let kept: HashSet<String> = out.iter().filter_map(|m| serde_json::to_string(m).ok()).collect();
                let trimmed_all: Vec<&Message> =
                    r.messages.iter().filter(|m| serde_json::to_string(m).is_ok_and(|s| !kept.contains(&s))).collect();
                let truncated = trimmed_all.len() > MAX_TRIMMED || out.len() > MAX_WINDOW_MESSAGES;
                let view = |m: &Message| MessageView {
                    role: serde_json::to_value(&m.role).unwrap_or(Value::Null),
                    tokens: counter.message(m),
                    preview: cut(&m.text_content(), PREVIEW),
                };
                let window = Window {
                    window_tokens: if r.context_window_tokens == 0 {
                        configured_window
                    } else {
                        r.context_window_tokens
                    },
                    messages_in: r.messages.len(),
                    messages_out: out.len(),
                    tokens_in: counter.messages(&r.messages),
                    tokens_out: counter.messages(&out),
                    system_prompt_tokens: counter.text(prompt),
                    trimmed: trimmed_all.into_iter().take(MAX_TRIMMED).map(view).collect(),
                    messages: out.iter().take(MAX_WINDOW_MESSAGES).map(view).collect(),
                };
                Change::Assemble(window, truncated)
            }
            HookRequest::Compact(r) => {
                let out: Vec<Message> =
                    reply.get("messages").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default();
                Change::Compact(Compaction {
                    messages_in: r.messages.len(),
                    messages_out: out.len(),
                    tokens_in: counter.messages(&r.messages),
                    tokens_out: counter.messages(&out),
                    summary: reply.get("summary").and_then(Value::as_str).map(|s| cut(s, MAX_TEXT)),
                })
            }
            HookRequest::TransformToolResult(r) => {
                let before = if r.content.is_empty() { &r.result } else { &r.content };
                Change::Tool(ToolResult {
                    tool_name: r.tool_name.clone(),
                    before: cut(before, MAX_TEXT),
                    after: cut(reply.get("content").and_then(Value::as_str).unwrap_or_default(), MAX_TEXT),
                })
            }
            HookRequest::AfterTurn(_) => Change::End,
            _ => Change::Other,
        };
        Update { agent, starts_turn, calls, change }
    }
}

/// `text` cut at `max` bytes (a char boundary), with `…`.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `GET /api/agents`: the agents with a turn log, most recent first.
pub(crate) async fn agents(State(state): State<Arc<AppState>>) -> JsonReply {
    let mut list: Vec<(String, usize, u64)> = {
        let agents = state.turns.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.iter().map(|(id, a)| (id.clone(), a.turns.len(), a.last_ms)).collect()
    };
    list.sort_by_key(|a| std::cmp::Reverse(a.2));
    let agents: Vec<Value> =
        list.into_iter().map(|(id, turns, last)| json!({"agent_id": id, "turns": turns, "last_ms": last})).collect();
    JsonReply::ok(json!({"agents": agents}))
}

#[derive(Debug, Deserialize)]
pub(crate) struct TurnsQuery {
    agent: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/turns?agent=&limit=`: that agent's turns, newest first.
pub(crate) async fn turns(State(state): State<Arc<AppState>>, Query(q): Query<TurnsQuery>) -> JsonReply {
    let Some(agent) = q.agent.filter(|a| !a.is_empty()) else {
        return JsonReply::bad_request("`agent` is required (`GET /api/agents` lists the agents with turns)");
    };
    let limit = q.limit.unwrap_or(10).clamp(1, MAX_TURNS);
    let turns: Vec<Turn> = {
        let agents = state.turns.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.get(&agent).map(|a| a.turns.iter().rev().take(limit).cloned().collect()).unwrap_or_default()
    };
    let dropped = state.turns.dropped.load(Ordering::Relaxed);
    JsonReply::ok(json!({"agent_id": agent, "dropped": dropped, "turns": turns}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> TurnLog {
        let (queue, _rx) = tokio::sync::mpsc::channel(1);
        TurnLog { agents: Mutex::new(BTreeMap::new()), queue, dropped: AtomicU64::new(0) }
    }

    fn update(agent: &str, starts_turn: bool, change: Change) -> Update {
        Update { agent: agent.into(), starts_turn, calls: Vec::new(), change }
    }

    fn ingest(message: &str) -> Change {
        Change::Ingest { message: message.into(), memories: vec![json!({"content": "m"})], truncated: false }
    }

    #[test]
    fn turns_start_at_ingest_end_at_after_turn_and_are_bounded() {
        let log = log();
        log.apply(update("a", true, ingest("one")), 1);
        log.apply(update("a", false, Change::Other), 2);
        log.apply(update("a", false, Change::End), 3);
        log.apply(update("a", false, Change::Other), 4);
        log.apply(update("a", true, ingest("two")), 5);
        {
            let agents = log.agents.lock().unwrap();
            let turns: Vec<(u64, Option<&str>, Option<u64>)> =
                agents["a"].turns.iter().map(|t| (t.turn, t.message.as_deref(), t.ended_ms)).collect();
            // The call after the end opened turn 3; its ingest belongs to it.
            assert_eq!(turns[0], (1, Some("one"), Some(3)));
            assert_eq!(turns[1], (2, Some("two"), None), "an ingest into a turn with no ingest yet stays in it");
        }
        for i in 0..MAX_TURNS * 2 {
            log.apply(update("a", true, ingest(&format!("t{i}"))), 10 + i as u64);
        }
        for i in 0..MAX_AGENTS + 3 {
            log.apply(update(&format!("agent{i}"), true, ingest("x")), 100 + i as u64);
        }
        let agents = log.agents.lock().unwrap();
        assert_eq!(agents.len(), MAX_AGENTS);
        assert!(!agents.contains_key("a"), "the agent seen least recently went first");
    }

    #[tokio::test]
    async fn a_full_recorder_drops_and_counts_never_waits() {
        let (queue, _rx) = tokio::sync::mpsc::channel(1);
        let log = TurnLog { agents: Mutex::new(BTreeMap::new()), queue, dropped: AtomicU64::new(0) };
        let held = log.slot();
        assert!(held.is_some());
        assert!(log.slot().is_none(), "full: no slot, at once");
        assert!(log.slot().is_none());
        assert_eq!(log.dropped.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h…");
        assert_eq!(cut("short", 10), "short");
    }
}
