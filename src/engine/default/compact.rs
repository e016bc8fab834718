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

/// One line per message: its role and the start of its text. Same input,
/// same summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalSummarizer;

/// Characters kept of each message by [`LocalSummarizer`].
const LINE_CHARS: usize = 160;

impl Summarizer for LocalSummarizer {
    fn summarize<'a>(&'a self, request: SummaryRequest<'a>) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let budget_chars = request.max_tokens.map_or(usize::MAX, |t| (t as usize).saturating_mul(4));
            let mut out = format!("{} earlier messages:", request.messages.len());
            for m in request.messages {
                let text = m.text_content();
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if text.is_empty() {
                    continue;
                }
                let mut line: String = text.chars().take(LINE_CHARS).collect();
                if line.len() < text.len() {
                    line.push('…');
                }
                let line = format!("\n- {}: {line}", m.role.as_str());
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

/// Which messages to summarise: oldest units first, skipping pinned ones and
/// the newest user message, until the rest fits `target` tokens. Returns the
/// indices to replace, in order (possibly empty).
pub fn choose(messages: &[Message], target: usize, counter: &TokenCounter) -> Vec<usize> {
    let newest_user = super::assemble::newest_user_turn(messages);
    let mut remaining = counter.messages(messages);
    let mut chosen = Vec::new();
    for (a, b) in units(messages) {
        if remaining <= target {
            break;
        }
        let protected = messages[a..=b].iter().any(|m| m.pinned || m.role == Role::System)
            || newest_user.is_some_and(|n| (a..=b).contains(&n));
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
