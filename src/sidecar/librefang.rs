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
/// writes hook memories. `metadata.source_plugin` names where it came from.
/// The id is stable for (agent, source, content); times are `now` (ctxhost
/// keeps no access times).
pub fn fragment(recalled: &Recalled, agent: &str, now: &str) -> Value {
    let from_default = recalled.source == "default";
    let (source, scope) = if from_default { ("conversation", "episodic") } else { ("system", "hook") };
    json!({
        "id": ids::derive_uuid("ctxhost-memory", &[agent, &recalled.source, &recalled.content]),
        "agent_id": agent,
        "content": recalled.content,
        "embedding": null,
        "metadata": {"source_plugin": recalled.source, "engine": "ctxhost"},
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
/// Returns the window and how many messages were dropped here.
pub fn start_with_user(messages: Vec<Message>, removed_before: usize) -> (Vec<Message>, usize) {
    if messages.is_empty() || is_user_turn(&messages[0]) {
        return (messages, 0);
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
    if out.first().is_none_or(|m| !is_user_turn(m)) {
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
    (out, dropped)
}

/// LibreFang's `RecoveryStage` (externally tagged): `"None"`, or
/// `{"AutoCompaction":{"removed":N}}` when the window lost messages.
pub fn recovery(removed: usize) -> Value {
    if removed == 0 { Value::String("None".into()) } else { json!({"AutoCompaction": {"removed": removed}}) }
}

/// The `assemble` reply: the engine's window, made LibreFang-readable and
/// starting with a user message, and the recovery stage for what was removed
/// from the `given` messages.
pub fn assemble_reply(given: usize, assembled: Vec<Message>) -> (Value, Vec<String>) {
    let (messages, mut notes) = to_librefang(assembled);
    let removed = given.saturating_sub(messages.len());
    let (messages, dropped) = start_with_user(messages, removed);
    if dropped > 0 {
        notes.push(format!("dropped {dropped} leading messages so the window starts with a user message"));
    }
    let kept = messages.iter().filter(|m| !is_note(m)).count();
    let value = json!({"messages": messages, "recovery": recovery(given.saturating_sub(kept))});
    (value, notes)
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
        let f = fragment(&Recalled { content: "likes jazz".into(), source: "prefs".into() }, &agent, &now);
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
        let d = fragment(&Recalled { content: "I like jazz".into(), source: "default".into() }, &agent, &now);
        assert_eq!((d["source"].as_str(), d["scope"].as_str()), (Some("conversation"), Some("episodic")));
        assert!(MEMORY_SOURCES.contains(&d["source"].as_str().unwrap()));
        // Stable per (agent, source, content).
        assert_eq!(
            d["id"],
            fragment(&Recalled { content: "I like jazz".into(), source: "default".into() }, &agent, "x")["id"]
        );
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
        let (out, dropped) = start_with_user(window, 0);
        assert_eq!(dropped, 2);
        assert_eq!(out[0].text_content(), "q1");

        // A pinned assistant message stays; a note goes before it.
        let window = vec![
            msg(json!({"role":"assistant","content":"rules","pinned":true})),
            msg(json!({"role":"user","content":"q"})),
        ];
        let (out, dropped) = start_with_user(window, 3);
        assert_eq!(dropped, 0);
        assert_eq!(roles(&out), ["user", "assistant", "user"]);
        assert!(out[0].text_content().starts_with("[System: 3 earlier messages were removed"));

        // Nothing the user wrote at all: the note alone leads.
        let (out, _) = start_with_user(vec![msg(tool_result)], 0);
        assert_eq!(roles(&out), ["user"]);
        assert!(is_note(&out[0]));
        assert_eq!(start_with_user(Vec::new(), 0).0.len(), 0);
    }

    #[test]
    fn recovery_uses_librefang_enum_spelling() {
        assert_eq!(recovery(0), json!("None"));
        assert_eq!(recovery(4), json!({"AutoCompaction": {"removed": 4}}));
        let given = 5;
        let window = vec![
            msg(json!({"role":"assistant","content":"a1"})),
            msg(json!({"role":"user","content":"q2"})),
            msg(json!({"role":"assistant","content":"a2"})),
        ];
        let (reply, _) = assemble_reply(given, window);
        assert_eq!(reply["recovery"], json!({"AutoCompaction": {"removed": 3}}));
        assert_eq!(reply["messages"][0]["role"], "user");
        let (reply, notes) = assemble_reply(1, vec![msg(json!({"role":"user","content":"q"}))]);
        assert_eq!(reply["recovery"], "None");
        assert!(notes.is_empty());
    }
}
