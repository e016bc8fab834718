//! The reply shapes LibreFang's sidecar client parses, built from the
//! engine's typed results: `MemoryFragment`s for `ingest`, its `Message` and
//! `RecoveryStage` for `assemble`.
//!
//! LibreFang discards a whole reply when one field does not parse, silently
//! falling back to its built-in engine, so this module writes exactly what its
//! serde types require (`librefang-types` `memory.rs`, `message.rs`, `tool.rs`;
//! `librefang-runtime` `context_overflow.rs`) and drops or fixes anything they
//! would refuse. It never calls the engine and never does I/O.

use serde_json::{Value, json};

use super::ids;
use crate::engine::Recalled;
use crate::protocol::{Block, Content, Message, Role};

/// LibreFang's `ToolExecutionStatus` spellings (snake_case; `completed` is its default).
const TOOL_STATUSES: [&str; 7] =
    ["completed", "error", "waiting_approval", "denied", "expired", "modify_and_retry", "skipped"];

/// Block types LibreFang's `ContentBlock` parses by field; a block of one of
/// these types that ctxhost could not read would fail LibreFang too.
const KNOWN_BLOCK_TYPES: [&str; 6] = ["text", "image", "image_file", "tool_use", "tool_result", "thinking"];

/// The agent id LibreFang's `AgentId` (a UUID) accepts: the id itself when it
/// is a UUID, else a stable UUID derived from it.
pub fn agent_uuid(agent_id: &str) -> String {
    ids::parse_uuid(agent_id).unwrap_or_else(|| ids::derive_uuid("ctxhost-agent", &[agent_id]))
}

/// One recalled memory as LibreFang's `MemoryFragment`.
///
/// The built-in engine's memories (what the user said in earlier turns) are
/// `conversation` in scope `episodic`, as LibreFang's own per-turn memories;
/// a plugin's are `system` in scope `hook`, as LibreFang's scriptable engine
/// writes hook memories. `metadata.source_plugin` names where it came from
/// (the first recaller) and `metadata.sources` every recaller of that content
/// (the engine merges duplicates). The id is stable for (agent, first source,
/// content); times are `now` (ctxhost keeps no access times).
pub fn fragment(recalled: &Recalled, agent: &str, now: &str) -> Value {
    let from_default = recalled.source == "default";
    let (source, scope) = if from_default { ("conversation", "episodic") } else { ("system", "hook") };
    json!({
        "id": ids::derive_uuid("ctxhost-memory", &[agent, &recalled.source, &recalled.content]),
        "agent_id": agent,
        "content": recalled.content,
        "embedding": null,
        "metadata": {"source_plugin": recalled.source, "sources": recalled.sources, "engine": "ctxhost"},
        "source": source,
        "confidence": 1.0,
        "created_at": now,
        "accessed_at": now,
        "access_count": 0,
        "scope": scope,
    })
}

/// The messages as LibreFang's `Message` reads them. Returns the messages and
/// what had to change, one line each, for the log.
///
/// - a role other than `system`/`user`/`assistant` cannot be parsed: the
///   message is dropped;
/// - a block of a type LibreFang parses by field that ctxhost could not read
///   (so it is malformed) is dropped; blocks of types LibreFang does not know
///   stay (it reads them as `Unknown`);
/// - `tool_result` always carries `is_error` (ctxhost always writes it), and a
///   `status` outside LibreFang's `ToolExecutionStatus` becomes `error` or
///   `completed` after `is_error`;
/// - a `timestamp` that is not an RFC 3339 string (or null) is removed.
pub fn to_librefang(messages: Vec<Message>) -> (Vec<Message>, Vec<String>) {
    let mut notes = Vec::new();
    let out = messages
        .into_iter()
        .filter_map(|mut m| {
            if let Role::Other(role) = &m.role {
                notes.push(format!("dropped a message with role `{role}` (LibreFang has system, user, assistant)"));
                return None;
            }
            if let Some(ts) = &m.timestamp
                && !(ts.is_null() || ts.as_str().is_some_and(ids::is_rfc3339))
            {
                notes.push(format!("removed a timestamp that is not RFC 3339: {ts}"));
                m.timestamp = None;
            }
            if let Content::Blocks(blocks) = &mut m.content {
                blocks.retain_mut(|b| match b {
                    Block::Unknown(map) => {
                        let tag = map.get("type").and_then(Value::as_str).unwrap_or("");
                        let keep = !KNOWN_BLOCK_TYPES.contains(&tag);
                        if !keep {
                            notes.push(format!("dropped a malformed `{tag}` block"));
                        }
                        keep
                    }
                    Block::ToolResult(r) => {
                        if r.status.as_deref().is_some_and(|s| !TOOL_STATUSES.contains(&s)) {
                            let fixed = if r.is_error { "error" } else { "completed" };
                            notes.push(format!(
                                "tool_result status `{}` is not one of LibreFang's; wrote `{fixed}`",
                                r.status.as_deref().unwrap_or_default()
                            ));
                            r.status = Some(fixed.to_owned());
                        }
                        true
                    }
                    _ => true,
                });
            }
            Some(m)
        })
        .collect();
    (out, notes)
}

/// True when the user wrote `m`: role `user`, and not only tool results.
fn is_user_turn(m: &Message) -> bool {
    m.role == Role::User
        && match &m.content {
            Content::Text(_) => true,
            Content::Blocks(b) => b.is_empty() || !b.iter().all(|b| matches!(b, Block::ToolResult(_))),
        }
}

/// Makes the window start with a message the user wrote.
///
/// Leading messages that are not (assistant turns, tool results whose call
/// was trimmed away, system notes) are dropped unless pinned. When a pinned
/// one still leads, or nothing is left, a user note saying how many messages
/// were removed goes first — as LibreFang's own overflow recovery does.
pub fn start_with_user(messages: Vec<Message>, removed_before: usize) -> Started {
    if messages.is_empty() || is_user_turn(&messages[0]) {
        return Started { messages, dropped: 0, noted: false };
    }
    let lead = messages.iter().take_while(|m| !is_user_turn(m)).count();
    let mut dropped = 0;
    let mut out = Vec::with_capacity(messages.len() + 1);
    for (i, m) in messages.into_iter().enumerate() {
        if i < lead && !m.pinned {
            dropped += 1;
        } else {
            out.push(m);
        }
    }
    let noted = out.first().is_none_or(|m| !is_user_turn(m));
    if noted {
        let removed = removed_before + dropped;
        let text = if removed > 0 {
            format!(
                "[System: {removed} earlier messages were removed to fit the context window. \
                 The conversation continues from here.]"
            )
        } else {
            "[System: the conversation continues from here.]".to_owned()
        };
        out.insert(0, Message::text(Role::User, text));
    }
    Started { messages: out, dropped, noted }
}

/// A window made to start with the user ([`start_with_user`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub messages: Vec<Message>,
    /// Leading messages dropped here.
    pub dropped: usize,
    /// A note had to go first (nothing the user wrote led what was left).
    pub noted: bool,
}

/// What happened to the window, as LibreFang's `RecoveryStage` names it.
///
/// LibreFang's own overflow recovery goes through these stages in order and
/// reports the last it reached; ctxhost reports the furthest one that says
/// what its engine did to the messages it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Every message given is in the window, none shortened.
    None,
    /// The oldest messages were dropped so the rest fits: the normal trim.
    AutoCompaction { removed: usize },
    /// Messages were dropped and nothing the user wrote was left in front, so
    /// a note saying how many were removed leads the window (the marker of
    /// LibreFang's aggressive stage).
    OverflowCompaction { removed: usize },
    /// Tool results came back shorter than they were given (an assembling
    /// plugin cut them), whether or not messages were dropped too.
    ToolResultTruncation { truncated: usize },
    /// The window is still over its budget: what must stay (pinned messages,
    /// the newest user message) does not fit. LibreFang tells the user to
    /// reset or compact.
    FinalError,
}

impl Recovery {
    /// The serde spelling of LibreFang's `RecoveryStage` (externally tagged).
    pub fn to_value(self) -> Value {
        match self {
            Recovery::None => json!("None"),
            Recovery::AutoCompaction { removed } => json!({"AutoCompaction": {"removed": removed}}),
            Recovery::OverflowCompaction { removed } => json!({"OverflowCompaction": {"removed": removed}}),
            Recovery::ToolResultTruncation { truncated } => json!({"ToolResultTruncation": {"truncated": truncated}}),
            Recovery::FinalError => json!("FinalError"),
        }
    }
}

/// The `assemble` reply and what went into it.
#[derive(Debug, Clone)]
pub struct AssembleOutcome {
    /// `{"messages": [...], "recovery": ...}`.
    pub value: Value,
    pub recovery: Recovery,
    /// Messages or blocks LibreFang could not have read, fixed or dropped (one line each).
    pub fixes: Vec<String>,
    /// Leading messages dropped so the window starts with the user.
    pub leading_dropped: usize,
    /// What the final window takes, by the caller's count.
    pub tokens: usize,
}

/// The `assemble` reply: the engine's window, made LibreFang-readable and
/// starting with a user message, and the recovery stage for what happened to
/// the `given` messages. `tokens` counts what a final window takes (system
/// prompt included), to be within `budget`.
pub fn assemble_reply(
    given: &[Message],
    assembled: Vec<Message>,
    tokens: impl Fn(&[Message]) -> usize,
    budget: usize,
) -> AssembleOutcome {
    let (messages, fixes) = to_librefang(assembled);
    let removed = given.len().saturating_sub(messages.len());
    let started = start_with_user(messages, removed);
    let messages = started.messages;
    let kept = messages.iter().filter(|m| !is_note(m)).count();
    let removed = given.len().saturating_sub(kept);
    let truncated = truncated_tool_results(given, &messages);
    let used = tokens(&messages);
    let recovery = if used > budget {
        Recovery::FinalError
    } else if truncated > 0 {
        Recovery::ToolResultTruncation { truncated }
    } else if removed > 0 && started.noted {
        Recovery::OverflowCompaction { removed }
    } else if removed > 0 {
        Recovery::AutoCompaction { removed }
    } else {
        Recovery::None
    };
    let value = json!({"messages": messages, "recovery": recovery.to_value()});
    AssembleOutcome { value, recovery, fixes, leading_dropped: started.dropped, tokens: used }
}

fn tool_results(messages: &[Message]) -> impl Iterator<Item = &crate::protocol::ToolResultBlock> {
    messages
        .iter()
        .flat_map(|m| match &m.content {
            Content::Blocks(blocks) => blocks.as_slice(),
            Content::Text(_) => &[],
        })
        .filter_map(|b| match b {
            Block::ToolResult(r) => Some(r),
            _ => None,
        })
}

/// How many tool results of `window` are shorter than the one with the same
/// `tool_use_id` in `given`.
fn truncated_tool_results(given: &[Message], window: &[Message]) -> usize {
    let mut before: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for r in tool_results(given) {
        before.entry(r.tool_use_id.as_str()).or_insert_with(|| r.content.chars().count());
    }
    tool_results(window)
        .filter(|r| before.get(r.tool_use_id.as_str()).is_some_and(|&n| r.content.chars().count() < n))
        .count()
}

fn is_note(m: &Message) -> bool {
    matches!(&m.content, Content::Text(t) if m.role == Role::User && t.starts_with("[System: ") && t.ends_with("from here.]"))
        && m.timestamp.is_none()
        && m.extra.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LibreFang's `MemorySource` spellings (`#[serde(rename_all = "snake_case")]`).
    const MEMORY_SOURCES: [&str; 6] =
        ["conversation", "document", "observation", "inference", "user_provided", "system"];

    fn msg(v: Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    fn roles(ms: &[Message]) -> Vec<&str> {
        ms.iter().map(|m| m.role.as_str()).collect()
    }

    #[test]
    fn fragments_carry_every_field_librefang_requires() {
        let agent = agent_uuid("6f9619ff-8b86-d011-b42d-00c04fc964ff");
        let now = ids::rfc3339(std::time::SystemTime::now());
        let f = fragment(&Recalled::new("likes jazz", "prefs"), &agent, &now);
        let keys: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "agent_id",
                "content",
                "embedding",
                "metadata",
                "source",
                "confidence",
                "created_at",
                "accessed_at",
                "access_count",
                "scope"
            ]
        );
        assert_eq!(f["agent_id"], "6f9619ff-8b86-d011-b42d-00c04fc964ff");
        assert!(ids::parse_uuid(f["id"].as_str().unwrap()).is_some());
        assert_eq!(f["source"], "system");
        assert_eq!(f["scope"], "hook");
        assert_eq!(f["metadata"]["source_plugin"], "prefs");
        assert!(ids::is_rfc3339(f["created_at"].as_str().unwrap()));
        let d = fragment(&Recalled::new("I like jazz", "default"), &agent, &now);
        assert_eq!((d["source"].as_str(), d["scope"].as_str()), (Some("conversation"), Some("episodic")));
        assert!(MEMORY_SOURCES.contains(&d["source"].as_str().unwrap()));
        // Stable per (agent, source, content).
        assert_eq!(d["id"], fragment(&Recalled::new("I like jazz", "default"), &agent, "x")["id"]);
        assert_ne!(d["id"], f["id"]);
    }

    #[test]
    fn agent_ids_that_are_not_uuids_map_to_stable_uuids() {
        let a = agent_uuid("agent-7");
        assert_eq!(a, agent_uuid("agent-7"));
        assert_ne!(a, agent_uuid("agent-8"));
        assert!(ids::parse_uuid(&a).is_some());
    }

    #[test]
    fn messages_librefang_cannot_read_are_fixed_or_dropped() {
        let (out, notes) = to_librefang(vec![
            msg(json!({"role":"critic","content":"no such role"})),
            msg(json!({"role":"user","content":"hi","timestamp":1714000000})),
            msg(json!({"role":"user","content":"ok","timestamp":"2026-01-01T00:00:00Z"})),
            msg(json!({"role":"assistant","content":[
                {"type":"tool_use","id":"t1"},
                {"type":"audio","data":"zz"},
                {"type":"tool_use","id":"t2","name":"grep","input":{}}
            ]})),
            msg(json!({"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t2","content":"found"},
                {"type":"tool_result","tool_use_id":"t2","content":"x","is_error":true,"status":"failed"}
            ]})),
        ]);
        assert_eq!(roles(&out), ["user", "user", "assistant", "user"]);
        assert_eq!(notes.len(), 4, "{notes:?}");
        let v = serde_json::to_value(&out).unwrap();
        assert!(v[0].get("timestamp").is_none());
        assert_eq!(v[1]["timestamp"], "2026-01-01T00:00:00Z");
        let blocks = v[2]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 2, "the malformed tool_use is gone, the unknown type stays: {blocks:?}");
        assert_eq!(blocks[0]["type"], "audio");
        let results = v[3]["content"].as_array().unwrap();
        assert_eq!(results[0]["is_error"], false, "is_error is always written");
        assert_eq!(results[1]["status"], "error");
    }

    #[test]
    fn the_window_starts_with_what_the_user_wrote() {
        let tool_result = json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"gone","content":"r","is_error":false}]});
        let window = vec![
            msg(json!({"role":"assistant","content":"a0"})),
            msg(tool_result.clone()),
            msg(json!({"role":"user","content":"q1"})),
            msg(json!({"role":"assistant","content":"a1"})),
        ];
        let started = start_with_user(window, 0);
        assert_eq!((started.dropped, started.noted), (2, false));
        assert_eq!(started.messages[0].text_content(), "q1");

        // A pinned assistant message stays; a note goes before it.
        let window = vec![
            msg(json!({"role":"assistant","content":"rules","pinned":true})),
            msg(json!({"role":"user","content":"q"})),
        ];
        let started = start_with_user(window, 3);
        assert_eq!((started.dropped, started.noted), (0, true));
        let out = started.messages;
        assert_eq!(roles(&out), ["user", "assistant", "user"]);
        assert!(out[0].text_content().starts_with("[System: 3 earlier messages were removed"));

        // Nothing the user wrote at all: the note alone leads.
        let out = start_with_user(vec![msg(tool_result)], 0).messages;
        assert_eq!(roles(&out), ["user"]);
        assert!(is_note(&out[0]));
        assert_eq!(start_with_user(Vec::new(), 0).messages.len(), 0);
    }

    fn text(role: &str, t: &str) -> Message {
        msg(json!({"role": role, "content": t}))
    }

    fn tool_pair(id: &str, result: &str) -> [Message; 2] {
        [
            msg(json!({"role":"assistant","content":[{"type":"tool_use","id":id,"name":"search","input":{}}]})),
            msg(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":result,"is_error":false}]}),
            ),
        ]
    }

    /// Every window fits: one token per message, a budget of 100.
    fn reply(given: &[Message], assembled: Vec<Message>) -> AssembleOutcome {
        assemble_reply(given, assembled, <[Message]>::len, 100)
    }

    #[test]
    fn recovery_uses_librefang_enum_spelling() {
        assert_eq!(Recovery::None.to_value(), json!("None"));
        assert_eq!(Recovery::AutoCompaction { removed: 4 }.to_value(), json!({"AutoCompaction": {"removed": 4}}));
        assert_eq!(
            Recovery::OverflowCompaction { removed: 2 }.to_value(),
            json!({"OverflowCompaction": {"removed": 2}})
        );
        assert_eq!(
            Recovery::ToolResultTruncation { truncated: 1 }.to_value(),
            json!({"ToolResultTruncation": {"truncated": 1}})
        );
        assert_eq!(Recovery::FinalError.to_value(), json!("FinalError"));
    }

    #[test]
    fn an_untouched_window_is_none() {
        let given = vec![text("user", "q"), text("assistant", "a"), text("user", "q2")];
        let out = reply(&given, given.clone());
        assert_eq!(out.recovery, Recovery::None);
        assert_eq!(out.value["recovery"], "None");
        assert!(out.fixes.is_empty() && out.leading_dropped == 0);
    }

    #[test]
    fn the_oldest_messages_dropped_is_auto_compaction_counting_the_leading_ones_too() {
        let given = vec![
            text("user", "q1"),
            text("assistant", "a1"),
            text("user", "q2"),
            text("assistant", "a2"),
            text("user", "q3"),
        ];
        // The engine kept the last three; the first of them is the assistant's.
        let out = reply(&given, given[2..].to_vec());
        assert_eq!(out.recovery, Recovery::AutoCompaction { removed: 2 });
        let out = reply(&given, given[3..].to_vec());
        assert_eq!(out.leading_dropped, 1, "a2 cannot lead");
        assert_eq!(out.recovery, Recovery::AutoCompaction { removed: 4 });
        assert_eq!(out.value["messages"][0]["content"], "q3");
    }

    #[test]
    fn dropped_messages_with_a_note_in_front_is_overflow_compaction() {
        let mut rules = text("assistant", "rules");
        rules.pinned = true;
        let given = vec![rules.clone(), text("user", "q1"), text("assistant", "a1"), text("user", "q2")];
        // The window kept the pinned rules and a1 (a plugin's assemble): a1
        // cannot lead, and the rules are not the user's, so a note goes first.
        let out = reply(&given, vec![rules.clone(), text("assistant", "a1")]);
        assert_eq!(out.recovery, Recovery::OverflowCompaction { removed: 3 });
        assert!(is_note(&msg(out.value["messages"][0].clone())));
        // A note but nothing removed is no recovery at all.
        let out = reply(&[rules.clone()], vec![rules]);
        assert_eq!(out.recovery, Recovery::None);
    }

    #[test]
    fn shortened_tool_results_are_tool_result_truncation() {
        let [call, result] = tool_pair("t1", "a long tool result with many words");
        let given = vec![text("user", "q"), call.clone(), result, text("user", "q2")];
        let [_, short] = tool_pair("t1", "a long…");
        let out = reply(&given, vec![text("user", "q"), call.clone(), short.clone(), text("user", "q2")]);
        assert_eq!(out.recovery, Recovery::ToolResultTruncation { truncated: 1 });
        // Also when messages were dropped besides: the further stage is named.
        let mut longer = vec![text("user", "q0"), text("assistant", "a0")];
        longer.extend(given.iter().cloned());
        let out = reply(&longer, vec![text("user", "q"), call, short, text("user", "q2")]);
        assert_eq!(out.recovery, Recovery::ToolResultTruncation { truncated: 1 });
        // A result of the same length is not truncated.
        let out = reply(&given, given.clone());
        assert_eq!(out.recovery, Recovery::None);
    }

    #[test]
    fn a_window_still_over_its_budget_is_final_error() {
        let given = vec![text("user", "a question far too long for the window")];
        let out = assemble_reply(&given, given.clone(), |_| 101, 100);
        assert_eq!(out.recovery, Recovery::FinalError);
        assert_eq!(out.value["recovery"], "FinalError");
        assert_eq!(out.tokens, 101);
        let out = assemble_reply(&given, given.clone(), |_| 100, 100);
        assert_eq!(out.recovery, Recovery::None, "exactly the budget fits");
    }

    #[test]
    fn what_librefang_could_not_read_is_a_fix_and_a_leading_drop_is_not() {
        let given = vec![text("assistant", "hello"), text("critic", "no such role"), text("user", "q")];
        let out = reply(&given, given.clone());
        assert_eq!(out.fixes.len(), 1, "{:?}", out.fixes);
        assert!(out.fixes[0].contains("role `critic`"));
        assert_eq!(out.leading_dropped, 1);
        assert_eq!(out.recovery, Recovery::AutoCompaction { removed: 2 });
    }
}
