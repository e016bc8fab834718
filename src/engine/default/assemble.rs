//! The built-in `assemble`: fit a history into the context window.
//!
//! Rules: the system prompt always counts against the window; pinned
//! messages and the newest user message are always kept; otherwise the
//! newest messages are kept and the oldest dropped; a `tool_use` and the
//! `tool_result`s answering it are kept or dropped together.

use std::collections::HashMap;

use super::tokenizer::TokenCounter;
use crate::protocol::{Block, Content, Message, Role};

/// Groups of message indices that must be kept or dropped together: a
/// message with `tool_use` blocks, the messages holding their results, and
/// everything in between. Returned as sorted, disjoint, inclusive ranges
/// covering every index.
pub fn units(messages: &[Message]) -> Vec<(usize, usize)> {
    let mut use_at: HashMap<&str, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        for b in blocks(m) {
            if let Block::ToolUse(u) = b {
                use_at.insert(u.id.as_str(), i);
            }
        }
    }
    // end[i] = the furthest index i must stay with.
    let mut end: Vec<usize> = (0..messages.len()).collect();
    for (j, m) in messages.iter().enumerate() {
        for b in blocks(m) {
            if let Block::ToolResult(r) = b
                && let Some(&i) = use_at.get(r.tool_use_id.as_str())
                && i < j
            {
                end[i] = end[i].max(j);
            }
        }
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start < messages.len() {
        let mut stop = end[start];
        let mut k = start;
        while k <= stop {
            stop = stop.max(end[k]);
            k += 1;
        }
        out.push((start, stop));
        start = stop + 1;
    }
    out
}

/// The index of the newest message the *user* wrote: role `user`, and not
/// only tool results (which travel as user messages in a tool loop).
pub fn newest_user_turn(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(|m| {
        let only_results = !blocks(m).is_empty() && blocks(m).iter().all(|b| matches!(b, Block::ToolResult(_)));
        m.role == Role::User && !only_results
    })
}

fn blocks(m: &Message) -> &[Block] {
    match &m.content {
        Content::Blocks(b) => b,
        Content::Text(_) => &[],
    }
}

/// Why the built-in assemble left a group of messages out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Going from the newest, the first group that did not fit: it takes
    /// `needed` tokens and `left` were left.
    DidNotFit { needed: usize, left: usize },
    /// Older than a group that did not fit: the window keeps no gaps.
    OlderThanTheCut,
}

/// A group of messages (see [`units`]) the built-in assemble left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedUnit {
    /// Inclusive indices into the history.
    pub first: usize,
    pub last: usize,
    pub tokens: usize,
    pub reason: DropReason,
}

/// What the built-in assemble keeps of a history, and why it drops the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Indices of the kept messages, in order.
    pub kept: Vec<usize>,
    /// Dropped groups, oldest first.
    pub dropped: Vec<DroppedUnit>,
    /// Tokens of the system prompt and the kept messages.
    pub tokens: usize,
}

/// Decides what fits in `window` tokens (after `system_prompt`), per the rules above.
pub fn plan(system_prompt: &str, messages: &[Message], window: usize, counter: &TokenCounter) -> Plan {
    let units = units(messages);
    let newest_user = newest_user_turn(messages);
    let cost = |&(a, b): &(usize, usize)| -> usize { messages[a..=b].iter().map(|m| counter.message(m)).sum() };
    let must_keep = |&(a, b): &(usize, usize)| {
        messages[a..=b].iter().any(|m| m.pinned) || newest_user.is_some_and(|n| (a..=b).contains(&n))
    };
    let mut keep: Vec<Option<DropReason>> = vec![Some(DropReason::OlderThanTheCut); units.len()];
    let mut used = counter.text(system_prompt);
    for (k, unit) in units.iter().enumerate() {
        if must_keep(unit) {
            keep[k] = None;
            used += cost(unit);
        }
    }
    // Newest first; the first unit that does not fit ends the history.
    for (k, unit) in units.iter().enumerate().rev() {
        if keep[k].is_none() {
            continue;
        }
        let c = cost(unit);
        if used + c > window {
            keep[k] = Some(DropReason::DidNotFit { needed: c, left: window.saturating_sub(used) });
            break;
        }
        used += c;
        keep[k] = None;
    }
    let mut plan = Plan { kept: Vec::new(), dropped: Vec::new(), tokens: used };
    for (&(a, b), reason) in units.iter().zip(keep) {
        match reason {
            None => plan.kept.extend(a..=b),
            Some(reason) => plan.dropped.push(DroppedUnit { first: a, last: b, tokens: cost(&(a, b)), reason }),
        }
    }
    plan
}

/// Keeps what fits in `window` tokens (after `system_prompt`), per the rules above.
pub fn fit(system_prompt: &str, messages: &[Message], window: usize, counter: &TokenCounter) -> Vec<Message> {
    plan(system_prompt, messages, window, counter).kept.into_iter().map(|i| messages[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::default::tokenizer::{MESSAGE_OVERHEAD, Words};
    use serde_json::json;

    fn counter() -> TokenCounter {
        TokenCounter::new(Box::new(Words), 1000)
    }

    fn msg(role: &str, words: usize, tag: &str) -> Message {
        Message::text(Role::from(role), format!("{tag} {}", "w ".repeat(words.saturating_sub(1))).trim_end().to_owned())
    }

    fn tags(ms: &[Message]) -> Vec<String> {
        ms.iter().map(|m| m.text_content().split_whitespace().next().unwrap_or("").to_owned()).collect()
    }

    fn m(v: serde_json::Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    /// u1 a1 u2 a2 u3, 10 tokens of text each, and what one costs.
    fn five_turns() -> (usize, Vec<Message>) {
        let history = ["u1", "a1", "u2", "a2", "u3"]
            .iter()
            .map(|tag| msg(if tag.starts_with('u') { "user" } else { "assistant" }, 10, tag))
            .collect();
        (10 + MESSAGE_OVERHEAD, history)
    }

    #[test]
    fn drops_oldest_first() {
        let (each, history) = five_turns();
        let out = fit("", &history, 3 * each, &counter());
        assert_eq!(tags(&out), ["u2", "a2", "u3"]);
        let out = fit("", &history, 100 * each, &counter());
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn the_plan_says_why_each_group_was_dropped() {
        let (each, history) = five_turns();
        let p = plan("", &history, 3 * each + 4, &counter());
        assert_eq!(p.kept, [2, 3, 4]);
        assert_eq!(p.tokens, 3 * each);
        assert_eq!(
            p.dropped,
            [
                DroppedUnit { first: 0, last: 0, tokens: each, reason: DropReason::OlderThanTheCut },
                DroppedUnit {
                    first: 1,
                    last: 1,
                    tokens: each,
                    reason: DropReason::DidNotFit { needed: each, left: 4 }
                },
            ]
        );
        assert!(plan("", &history, 100 * each, &counter()).dropped.is_empty());
    }

    #[test]
    fn system_prompt_counts_and_newest_user_and_pinned_always_stay() {
        let mut pinned = msg("user", 10, "pin");
        pinned.pinned = true;
        let history = vec![pinned, msg("assistant", 10, "a1"), msg("user", 10, "u2"), msg("assistant", 10, "a2")];
        // Window far too small: only the mandatory ones remain.
        let out = fit("s s s s s", &history, 5, &counter());
        assert_eq!(tags(&out), ["pin", "u2"]);
    }

    #[test]
    fn a_gap_ends_the_history() {
        let each = 10 + MESSAGE_OVERHEAD;
        let history =
            vec![msg("user", 1, "u1"), msg("assistant", 40, "big"), msg("user", 10, "u2"), msg("assistant", 10, "a2")];
        // u1 would fit after `big` is dropped, but keeping it would make a hole.
        let out = fit("", &history, 2 * each + 5, &counter());
        assert_eq!(tags(&out), ["u2", "a2"]);
    }

    #[test]
    fn tool_use_and_result_stay_together() {
        let history = vec![
            msg("user", 10, "u1"),
            m(
                json!({"role":"assistant","content":[{"type":"text","text":"call"},{"type":"tool_use","id":"t1","name":"grep","input":{}}]}),
            ),
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r r r r r r r r r r r r r r r r r r r r","is_error":false}]}),
            ),
            msg("assistant", 2, "a2"),
            msg("user", 2, "u3"),
        ];
        assert_eq!(units(&history), [(0, 0), (1, 2), (3, 3), (4, 4)]);
        let small = 2 * (2 + MESSAGE_OVERHEAD) + 5;
        let out = fit("", &history, small, &counter());
        assert_eq!(tags(&out), ["a2", "u3"], "the pair is dropped whole");
        let out = fit("", &history, small + 35, &counter());
        assert_eq!(out.len(), 4, "the pair is kept whole");
    }

    #[test]
    fn the_question_survives_a_tool_loop() {
        let history = vec![
            msg("user", 5, "question"),
            m(json!({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"x","input":{}}]})),
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r r r r r r r r r r r r r r r r r r r r r r r r r r r r r r","is_error":false}]}),
            ),
            m(json!({"role":"assistant","content":[{"type":"tool_use","id":"b","name":"x","input":{}}]})),
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"small","is_error":false}]}),
            ),
        ];
        assert_eq!(newest_user_turn(&history), Some(0));
        let out = fit("", &history, 30, &counter());
        assert_eq!(tags(&out)[0], "question", "{out:?}");
    }

    #[test]
    fn interleaved_tool_pairs_merge_into_one_unit() {
        let history = vec![
            m(json!({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"x","input":{}}]})),
            m(json!({"role":"assistant","content":[{"type":"tool_use","id":"b","name":"x","input":{}}]})),
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"","is_error":false}]}),
            ),
            m(
                json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"","is_error":false}]}),
            ),
            msg("user", 1, "u"),
        ];
        assert_eq!(units(&history), [(0, 3), (4, 4)]);
    }
}
