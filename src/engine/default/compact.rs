//! The built-in `compact`: at high pressure, replace the oldest unpinned
//! turns by one summary message written by a [`Summarizer`].
//!
//! The summarizer is a trait so an embedder can plug in an LLM; the built-in
//! [`LocalSummarizer`] is deterministic and local (no model, no network). A
//! plugin's `request_llm_summary` directive is served by the same trait.

use super::assemble::units;
use super::tokenizer::TokenCounter;
use crate::protocol::{Message, Role};
use crate::runner::BoxFuture;

/// The prefix of every summary message the host writes.
pub const SUMMARY_PREFIX: &str = "[Context compaction summary]";

/// Compaction starts at this share of the window.
pub const COMPACT_AT: f64 = 0.8;

/// After compaction the history aims at this share of the window.
pub const COMPACT_TARGET: f64 = 0.5;

/// What to summarise.
#[derive(Debug, Clone)]
pub struct SummaryRequest<'a> {
    /// Instructions (a plugin's `prompt`); `None` for the host's own compaction.
    pub prompt: Option<&'a str>,
    pub messages: &'a [Message],
    /// Upper bound on the summary's length in tokens, when given.
    pub max_tokens: Option<u64>,
}

/// Writes summaries of message runs.
pub trait Summarizer: Send + Sync {
    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> BoxFuture<'a, Result<String, String>>;
}

/// One line per message: its role and the start of its text; an earlier
/// summary among the messages contributes its own lines (a summary of a
/// summary stays flat). Same input, same summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalSummarizer;

/// Characters kept of each message by [`LocalSummarizer`], at most; with a
/// `max_tokens`, fewer so every message gets a line, down to [`MIN_LINE_CHARS`].
const LINE_CHARS: usize = 160;
const MIN_LINE_CHARS: usize = 24;

impl Summarizer for LocalSummarizer {
    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let budget_chars = request.max_tokens.map_or(usize::MAX, |t| (t as usize).saturating_mul(4));
            // Every message a line: the budget shared out ("\n- assistant: " is 14).
            let line_chars =
                (budget_chars / request.messages.len().max(1)).saturating_sub(14).clamp(MIN_LINE_CHARS, LINE_CHARS);
            let mut count = 0;
            let mut lines = Vec::new();
            for m in request.messages {
                let text = line_text(m);
                if let Some(earlier) = text.strip_prefix(SUMMARY_PREFIX) {
                    let mut rest = earlier.lines();
                    let header = rest.next().unwrap_or("");
                    count += header.split_whitespace().next().and_then(|n| n.parse::<usize>().ok()).unwrap_or(1);
                    lines.extend(rest.filter(|l| l.starts_with("- ") && *l != "- …").map(|l| format!("\n{l}")));
                    continue;
                }
                count += 1;
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if text.is_empty() {
                    continue;
                }
                let mut line: String = text.chars().take(line_chars).collect();
                if line.len() < text.len() {
                    line.push('…');
                }
                lines.push(format!("\n- {}: {line}", m.role.as_str()));
            }
            let mut out = format!("{count} earlier messages:");
            for line in lines {
                if out.len() + line.len() > budget_chars {
                    out.push_str("\n- …");
                    break;
                }
                out.push_str(&line);
            }
            Ok(out)
        })
    }
}

/// A message's text for a summary line: its text, and its tool calls and
/// results named.
fn line_text(m: &Message) -> String {
    use crate::protocol::{Block, Content};
    match &m.content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.text.clone()),
                Block::ToolUse(u) => Some(format!("[called {}]", u.name)),
                Block::ToolResult(r) => {
                    Some(format!("[{} result] {}", r.tool_name.as_deref().unwrap_or("tool"), r.content))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The outcome of a compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    pub messages: Vec<Message>,
    pub summary: Option<String>,
}

/// The message that replaces summarised history: always marked with
/// [`SUMMARY_PREFIX`], whatever the summarizer wrote.
pub fn summary_message(summary: &str) -> Message {
    let text =
        if summary.starts_with(SUMMARY_PREFIX) { summary.to_owned() } else { format!("{SUMMARY_PREFIX} {summary}") };
    Message::text(Role::User, text)
}

/// Which messages to summarise: oldest units first, skipping pinned ones,
/// until the rest fits `target` tokens. The newest user message and what
/// follows it (the exchange under way, its tool calls included) are never
/// summarised, so the summary only ever stands for what came before them.
/// Returns the indices to replace, in order (possibly empty).
pub fn choose(messages: &[Message], target: usize, counter: &TokenCounter) -> Vec<usize> {
    let newest_user = super::assemble::newest_user_turn(messages);
    let mut remaining = counter.messages(messages);
    let mut chosen = Vec::new();
    for (a, b) in units(messages) {
        if remaining <= target || newest_user.is_some_and(|n| n <= b) {
            break;
        }
        let protected = messages[a..=b].iter().any(|m| m.pinned || m.role == Role::System);
        if protected {
            continue;
        }
        remaining -= messages[a..=b].iter().map(|m| counter.message(m)).sum::<usize>();
        chosen.extend(a..=b);
    }
    chosen
}

/// Compacts when `used / window` is at least [`COMPACT_AT`]: the chosen
/// messages are replaced, where the first of them stood, by one user message
/// holding the summary. Below the threshold, the messages come back unchanged.
pub async fn compact(
    messages: &[Message],
    window: usize,
    counter: &TokenCounter,
    summarizer: &dyn Summarizer,
) -> Result<Compacted, String> {
    let used = counter.messages(messages);
    if window == 0 || (used as f64) < COMPACT_AT * window as f64 {
        return Ok(Compacted { messages: messages.to_vec(), summary: None });
    }
    let target = (COMPACT_TARGET * window as f64) as usize;
    let chosen = choose(messages, target, counter);
    let Some(&first) = chosen.first() else {
        return Ok(Compacted { messages: messages.to_vec(), summary: None });
    };
    let summarized: Vec<Message> = chosen.iter().map(|&i| messages[i].clone()).collect();
    let max_tokens = Some((window / 10).max(64) as u64);
    let summary = summarizer.summarize(SummaryRequest { prompt: None, messages: &summarized, max_tokens }).await?;
    let summary_message = summary_message(&summary);
    let summary = summary_message.text_content();
    let mut out = Vec::with_capacity(messages.len() - chosen.len() + 1);
    for (i, m) in messages.iter().enumerate() {
        if i == first {
            out.push(summary_message.clone());
        }
        if chosen.binary_search(&i).is_err() {
            out.push(m.clone());
        }
    }
    Ok(Compacted { messages: out, summary: Some(summary) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::default::tokenizer::Words;

    fn history() -> Vec<Message> {
        let mut v = Vec::new();
        for i in 0..10 {
            let mut u = Message::text(Role::User, format!("question {i} {}", "w ".repeat(20)));
            u.pinned = i == 2;
            v.push(u);
            v.push(Message::text(Role::Assistant, format!("answer {i} {}", "w ".repeat(20))));
        }
        v
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn a_summary_of_a_summary_stays_flat() {
        let earlier = summary_message("3 earlier messages:\n- user: a\n- assistant: b\n- …");
        let messages = [earlier, Message::text(Role::User, "c")];
        let request = SummaryRequest { prompt: None, messages: &messages, max_tokens: None };
        let out = block_on(LocalSummarizer.summarize(request)).unwrap();
        assert_eq!(out, "4 earlier messages:\n- user: a\n- assistant: b\n- user: c");
    }

    #[test]
    fn the_exchange_under_way_is_never_summarised() {
        let counter = TokenCounter::new(Box::new(Words), 1000);
        let mut h = history();
        h.truncate(18);
        h.push(Message::text(Role::User, format!("question 9 {}", "w ".repeat(20))));
        let call: Message = serde_json::from_value(serde_json::json!({"role":"assistant","content":[
            {"type":"tool_use","id":"t","name":"x","input":{}}]}))
        .unwrap();
        let result: Message = serde_json::from_value(serde_json::json!({"role":"user","content":[
            {"type":"tool_result","tool_use_id":"t","content":"r","is_error":false}]}))
        .unwrap();
        h.extend([call, result]);
        // A target nothing reaches: everything before the question goes.
        let chosen = choose(&h, 0, &counter);
        assert_eq!(
            chosen,
            (0..18).filter(|&i| i != 4).collect::<Vec<_>>(),
            "all before the question but pinned question 2"
        );
    }

    #[test]
    fn below_the_threshold_nothing_changes() {
        let counter = TokenCounter::new(Box::new(Words), 1000);
        let h = history();
        let used = counter.messages(&h);
        let out = block_on(compact(&h, used * 2, &counter, &LocalSummarizer)).unwrap();
        assert_eq!((out.messages, out.summary), (h, None));
    }

    #[test]
    fn at_high_pressure_the_oldest_unpinned_turns_become_one_summary() {
        let counter = TokenCounter::new(Box::new(Words), 1000);
        let h = history();
        let used = counter.messages(&h);
        let window = used + used / 10; // ~91 % pressure
        let out = block_on(compact(&h, window, &counter, &LocalSummarizer)).unwrap();
        let summary = out.summary.unwrap();
        assert!(summary.starts_with("[Context compaction summary] "), "{summary}");
        assert!(summary.contains("\n- user: question 0 w w"), "{summary}");
        assert_eq!(
            out.messages[0].text_content(),
            summary,
            "the summary stands where the first summarised message was"
        );
        assert!(out.messages.iter().any(|m| m.pinned && m.text_content().starts_with("question 2")), "pinned kept");
        assert!(out.messages.last().unwrap().text_content().starts_with("answer 9"));
        assert!(counter.messages(&out.messages) <= window / 2 + 200, "now well under the window");
        // Deterministic.
        let again = block_on(compact(&h, window, &counter, &LocalSummarizer)).unwrap();
        assert_eq!(again.messages, out.messages);
    }
}
