//! Driving a whole conversation through an engine: what `ctxhost run` and
//! `ctxhost demo` do, turn by turn, so the effect of a stack is visible.
//!
//! A transcript is JSONL, one turn per line:
//! `{"agent_id"?, "peer_id"?, "user": s, "assistant_before_tools"?: s, "tools"?: [{"name", "input", "result"?, "is_error"?}], "assistant": s}`.
//! For each turn, in the order a real agent loop goes: message_received
//! (agent loop) → ingest → the system prompt (recalled memories and plugins'
//! prompt suffixes added) → compact when the window is filling → assemble →
//! the model's first call; with tools,
//! the model answers with `assistant_before_tools` and one `tool_use` block
//! per tool, each tool runs (tool_call_pre / the plugin's tool /
//! tool_call_post in the agent loop) and its result goes through
//! transform_tool_result, then assemble again → the model's second call,
//! whose answer is `assistant` → after_turn. When the history with the new
//! user message reaches 80 % of the window it is compacted before the first
//! model call of the turn; bootstrap once at the start. Each model call
//! reports the window, its tokens against the budget and, when messages were
//! left out, which ones and why. A turn's after_turn calls finish before the
//! next turn's ingest (a real user is slower than a hook), so runs are
//! repeatable. Never prints: the caller renders the reports.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::engine::{AgentEngine, Blocked, ToolOutcome};
use crate::engine::default::assemble::{DropReason, plan};
use crate::engine::default::compact::COMPACT_AT;
use crate::engine::default::tokenizer::TokenCounter;
use crate::engine::stack::StackEngine;
use crate::engine::{ContextEngine, EngineError, Recalled};
use crate::protocol::{
    AfterTurnRequest, AssembleRequest, Block, BootstrapRequest, CompactRequest, Content, IngestRequest, Message, Role,
    TextBlock, TokenPressure, ToolResultBlock, ToolUseBlock, TransformToolResultRequest,
};

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub peer_id: Option<String>,
    pub user: String,
    /// The model's final answer of the turn.
    pub assistant: String,
    /// What the model says along with its tool calls ("Let me check."),
    /// before the results come back.
    #[serde(default)]
    pub assistant_before_tools: Option<String>,
    #[serde(default)]
    pub tools: Vec<ToolCall>,
}

/// A tool the assistant called during a turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    /// What the tool returned. Left out for a tool a plugin registered: the
    /// plugin is called for it (through the agent engine).
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub is_error: bool,
}

/// A transcript line that is not a turn.
#[derive(Debug, thiserror::Error)]
#[error("transcript line {line}: {reason}")]
pub struct TranscriptError {
    pub line: usize,
    pub reason: String,
}

/// Parses JSONL; blank lines are skipped; errors name the line.
pub fn parse_transcript(text: &str) -> Result<Vec<Turn>, TranscriptError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| TranscriptError { line: i + 1, reason: e.to_string() }))
        .collect()
}

/// What happened in one turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    pub turn: usize,
    pub agent_id: String,
    /// The user's message as the engine got it (after message_received).
    pub user: String,
    /// Recalled memories, one per content, naming every recaller.
    pub memories: Vec<Recalled>,
    /// The system prompt exactly as the model gets it.
    pub system_prompt: String,
    /// The messages the model sees at its last call of the turn (the system
    /// prompt first).
    pub assembled: Vec<Message>,
    pub assembled_tokens: usize,
    /// Every call of the model in the turn, in order.
    pub calls: Vec<ModelCall>,
    /// Each tool the model called: what it returned and what the model saw.
    pub tools: Vec<ToolReport>,
    /// Each tool's result as the model sees it (as in `tools[].shown`).
    pub tool_results: Vec<String>,
    /// A plugin dropped the user's message at `message_received`: the turn
    /// was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Blocked>,
    pub compacted: bool,
    /// The compaction before the turn's first model call, when the history
    /// with the new user message reached 80 % of the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    pub elapsed_ms: f64,
}

/// One call of the model: what it sees and what it answers.
#[derive(Debug, Clone, Serialize)]
pub struct ModelCall {
    /// The window after the system prompt.
    pub messages: Vec<Message>,
    /// Tokens of the system prompt and the window.
    pub tokens: usize,
    /// The budget of the window (`context_window_tokens`).
    pub budget: u64,
    /// Messages of the history the model does not see, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trim: Option<Trim>,
    /// The model's answer (the transcript's): text, and tool_use blocks
    /// when it calls tools.
    pub reply: Message,
}

/// How a window was cut to its budget.
#[derive(Debug, Clone, Serialize)]
pub struct Trim {
    /// The system prompt and the whole history.
    pub tokens_before: usize,
    /// The system prompt and the window.
    pub tokens_after: usize,
    /// `built-in` (the engine's own assemble) or `plugin` (a layer's).
    pub by: String,
    /// What was left out, oldest first.
    pub dropped: Vec<DroppedMessage>,
}

/// A message of the history the model does not see.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedMessage {
    /// Its place in the history given to assemble, from 1.
    pub position: usize,
    pub tokens: usize,
    pub reason: String,
    pub message: Message,
}

/// One tool call of a turn.
#[derive(Debug, Clone, Serialize)]
pub struct ToolReport {
    pub name: String,
    pub input: Value,
    /// What the tool returned (after the agent loop's tool_call_post).
    pub result: String,
    /// What the model sees: the result after transform_tool_result.
    pub shown: String,
    pub is_error: bool,
}

/// A compaction of the history before a turn's model call.
#[derive(Debug, Clone, Serialize)]
pub struct Compaction {
    /// History tokens when it started (at least `threshold`).
    pub tokens_before: usize,
    pub tokens_after: usize,
    /// 80 % of the window.
    pub threshold: usize,
    pub messages_before: usize,
    pub messages_after: usize,
    /// The summary message's text, when messages were summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub system_prompt: String,
    pub context_window_tokens: u64,
    pub default_agent: String,
}

/// Tokens a history may reach before it is compacted.
pub fn compaction_threshold(window: u64) -> usize {
    (COMPACT_AT * window as f64) as usize
}

/// Runs `turns` through `engine`, calling `on_turn` after each.
///
/// # Errors
/// An engine error (a plugin with the `abort` policy, the memory store).
pub async fn run(
    engine: &StackEngine,
    agent: Option<&AgentEngine>,
    turns: &[Turn],
    settings: &RunSettings,
    mut on_turn: impl FnMut(&TurnReport),
) -> Result<(), EngineError> {
    let defaults = engine.default_engine().settings().clone();
    engine
        .bootstrap(&BootstrapRequest {
            context_window_tokens: settings.context_window_tokens,
            stable_prefix_mode: defaults.stable_prefix_mode,
            max_recall_results: defaults.max_recall_results as u64,
            ..Default::default()
        })
        .await?;
    let counter = engine.default_engine().counter();
    let window = settings.context_window_tokens;
    let mut histories: std::collections::HashMap<String, Vec<Message>> = Default::default();
    let loop_engine = agent;
    for (i, t) in turns.iter().enumerate() {
        let started = Instant::now();
        let agent = t.agent_id.clone().unwrap_or_else(|| settings.default_agent.clone());
        let history = histories.entry(agent.clone()).or_default();
        let mut report = TurnReport {
            turn: i + 1,
            agent_id: agent.clone(),
            user: t.user.clone(),
            memories: Vec::new(),
            system_prompt: String::new(),
            assembled: Vec::new(),
            assembled_tokens: 0,
            calls: Vec::new(),
            tools: Vec::new(),
            tool_results: Vec::new(),
            dropped: None,
            compacted: false,
            compaction: None,
            elapsed_ms: 0.0,
        };
        if let Some(a) = loop_engine {
            match a.message_received(&agent, &t.user, "user", serde_json::json!(history)).await {
                Ok(text) => report.user = text,
                Err(blocked) => {
                    report.dropped = Some(blocked);
                    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
                    on_turn(&report);
                    continue;
                }
            }
        }
        let user = report.user.clone();
        report.memories = engine
            .ingest(&IngestRequest {
                agent_id: agent.clone(),
                message: user.clone(),
                peer_id: t.peer_id.clone(),
                ..Default::default()
            })
            .await?;
        let mut system_prompt = settings.system_prompt.clone();
        if !report.memories.is_empty() {
            system_prompt.push_str("\n\nRelevant memories:");
            for m in &report.memories {
                system_prompt.push_str(&format!("\n- {}", m.content));
            }
        }
        if let Some(a) = loop_engine {
            system_prompt = a.with_prompt_suffixes(&system_prompt);
        }
        report.system_prompt = system_prompt;
        history.push(Message::text(Role::User, user.clone()));
        // The window is filling: compact before the model is called (the
        // newest user message, this one, always stays).
        let used = counter.messages(history);
        let threshold = compaction_threshold(window);
        if window > 0 && used >= threshold {
            let out = engine
                .compact(&CompactRequest {
                    agent_id: agent.clone(),
                    messages: history.clone(),
                    model: "ctxhost-run".into(),
                    context_window_tokens: window,
                    token_pressure: TokenPressure::new(used as u64, window),
                    ..Default::default()
                })
                .await?;
            report.compacted = out.messages != *history;
            report.compaction = Some(Compaction {
                tokens_before: used,
                tokens_after: counter.messages(&out.messages),
                threshold,
                messages_before: history.len(),
                messages_after: out.messages.len(),
                summary: out.summary,
            });
            *history = out.messages;
        }
        // The turn, for after_turn, starts with the user message just
        // pushed: the last one (a compaction keeps the newest user message).
        let first_of_turn = history.len().saturating_sub(1);
        let call = Call { engine, counter, agent: &agent, system_prompt: &report.system_prompt, window };
        if !t.tools.is_empty() {
            let reply = tool_uses(i + 1, t);
            report.calls.push(call.make(history, reply.clone()).await?);
            history.push(reply);
            let mut results = Vec::new();
            for (k, tool) in t.tools.iter().enumerate() {
                let id = tool_id(i + 1, k + 1);
                let (output, is_error) = run_tool(loop_engine, &agent, tool).await;
                let shown = engine
                    .transform_tool_result(&TransformToolResultRequest::new(
                        agent.clone(),
                        tool.name.clone(),
                        id.clone(),
                        tool.input.clone(),
                        output.clone(),
                        is_error,
                    ))
                    .await?;
                results.push(tool_result(&id, tool, &shown, is_error));
                report.tool_results.push(shown.clone());
                report.tools.push(ToolReport {
                    name: tool.name.clone(),
                    input: tool.input.clone(),
                    result: output,
                    shown,
                    is_error,
                });
            }
            history.push(Message { content: Content::Blocks(results), ..Message::text(Role::User, "") });
        }
        let answer = Message::text(Role::Assistant, t.assistant.clone());
        report.calls.push(call.make(history, answer.clone()).await?);
        history.push(answer);
        if let Some(last) = report.calls.last() {
            report.assembled = std::iter::once(Message::text(Role::System, report.system_prompt.clone()))
                .chain(last.messages.iter().cloned())
                .collect();
            report.assembled_tokens = last.tokens;
        }
        engine
            .after_turn(&AfterTurnRequest {
                agent_id: agent.clone(),
                messages: history[first_of_turn..].to_vec(),
                extra: t.peer_id.iter().map(|p| ("peer_id".to_owned(), Value::String(p.clone()))).collect(),
            })
            .await?;
        engine.settle().await;
        report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        on_turn(&report);
    }
    Ok(())
}

/// What one model call needs.
struct Call<'a> {
    engine: &'a StackEngine,
    counter: &'a TokenCounter,
    agent: &'a str,
    system_prompt: &'a str,
    window: u64,
}

impl Call<'_> {
    /// The window's budget: the run's, or (0) the built-in engine's default.
    fn budget(&self) -> u64 {
        match self.window {
            0 => self.engine.default_engine().settings().context_window_tokens,
            w => w,
        }
    }

    /// Assembles `history` for a model call that answers `reply`, and says
    /// what was left out and why.
    async fn make(&self, history: &[Message], reply: Message) -> Result<ModelCall, EngineError> {
        let messages = self
            .engine
            .assemble(&AssembleRequest {
                agent_id: self.agent.to_owned(),
                system_prompt: self.system_prompt.to_owned(),
                messages: history.to_vec(),
                context_window_tokens: self.window,
                ..Default::default()
            })
            .await?;
        let tokens = self.counter.text(self.system_prompt) + self.counter.messages(&messages);
        let trim = self.trim(history, &messages, tokens);
        Ok(ModelCall { messages, tokens, budget: self.budget(), trim, reply })
    }

    /// The messages of `history` missing from `window`, with why: the built-in
    /// assemble's reasons when its plan is what the engine returned, else a
    /// plugin chose.
    fn trim(&self, history: &[Message], window: &[Message], tokens_after: usize) -> Option<Trim> {
        let budget = usize::try_from(self.budget()).unwrap_or(usize::MAX);
        let builtin = plan(self.system_prompt, history, budget, self.counter);
        let tokens_before = self.counter.text(self.system_prompt) + self.counter.messages(history);
        let same =
            builtin.kept.len() == window.len() && builtin.kept.iter().zip(window).all(|(&i, m)| history[i] == *m);
        let dropped: Vec<DroppedMessage> = if same {
            builtin
                .dropped
                .iter()
                .flat_map(|unit| {
                    let mut reason = match unit.reason {
                        DropReason::DidNotFit { needed, left } => {
                            format!("did not fit ({needed} tokens, {left} left)")
                        }
                        DropReason::OlderThanTheCut => "older than one that did not fit".to_owned(),
                    };
                    if unit.last > unit.first {
                        reason.push_str(", with its tool call or results");
                    }
                    (unit.first..=unit.last).map(move |i| (i, reason.clone()))
                })
                .map(|(i, reason)| DroppedMessage {
                    position: i + 1,
                    tokens: self.counter.message(&history[i]),
                    reason,
                    message: history[i].clone(),
                })
                .collect()
        } else {
            // Messages of the history the window does not hold, matched in order.
            let mut rest = window.iter().peekable();
            history
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    let seen = rest.peek().is_some_and(|w| *w == *m);
                    if seen {
                        rest.next();
                    }
                    !seen
                })
                .map(|(i, m)| DroppedMessage {
                    position: i + 1,
                    tokens: self.counter.message(m),
                    reason: "left out by a plugin's assemble".to_owned(),
                    message: m.clone(),
                })
                .collect()
        };
        (!dropped.is_empty()).then(|| Trim {
            tokens_before,
            tokens_after,
            by: if same { "built-in" } else { "plugin" }.to_owned(),
            dropped,
        })
    }
}

fn tool_id(turn: usize, k: usize) -> String {
    format!("turn{turn}-tool{k}")
}

/// The model's answer that calls the turn's tools: its text, then one
/// `tool_use` block per tool, in one message.
fn tool_uses(turn: usize, t: &Turn) -> Message {
    let mut blocks = Vec::new();
    if let Some(text) = t.assistant_before_tools.as_ref().filter(|s| !s.is_empty()) {
        blocks.push(Block::Text(TextBlock { text: text.clone(), extra: Default::default() }));
    }
    for (k, tool) in t.tools.iter().enumerate() {
        blocks.push(tool_use(&tool_id(turn, k + 1), tool));
    }
    Message { content: Content::Blocks(blocks), ..Message::text(Role::Assistant, "") }
}

/// A message as one readable line: its text, and what its other blocks are.
pub fn describe(m: &Message) -> String {
    match &m.content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => t.text.clone(),
                Block::ToolUse(u) => format!("[tool_use {} {}]", u.name, u.input),
                Block::ToolResult(r) => match &r.tool_name {
                    Some(name) => format!("[tool_result {name}] {}", r.content),
                    None => format!("[tool_result] {}", r.content),
                },
                other => format!("[{}]", other.type_name()),
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn tool_use(id: &str, tool: &ToolCall) -> Block {
    Block::ToolUse(ToolUseBlock {
        id: id.to_owned(),
        name: tool.name.clone(),
        input: tool.input.clone(),
        extra: Default::default(),
    })
}

/// A tool call of the transcript through the agent loop: `tool_call_pre`
/// (a block denies it, and the model sees the reason), the plugin's tool
/// when the transcript gives no result and a plugin registered the tool,
/// then `tool_call_post`. Without an agent engine, the transcript's result.
async fn run_tool(agent_engine: Option<&AgentEngine>, agent: &str, tool: &ToolCall) -> (String, bool) {
    let text = |v: Value| match v {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let Some(a) = agent_engine else { return (tool.result.clone().unwrap_or_default(), tool.is_error) };
    let registered = a.tools().iter().any(|(_, t)| t.name == tool.name);
    if tool.result.is_none() && registered {
        return match a.call_tool(agent, &tool.name, tool.input.clone()).await {
            Ok(ToolOutcome::Result { result, is_error }) => (text(result), is_error),
            Ok(ToolOutcome::Blocked(b)) => (denied(&b), true),
            Err(e) => (e.to_string(), true),
        };
    }
    let args = match a.tool_call_pre(agent, &tool.name, tool.input.clone()).await {
        Ok(args) => args,
        Err(b) => return (denied(&b), true),
    };
    let result = Value::String(tool.result.clone().unwrap_or_default());
    (text(a.tool_call_post(agent, &tool.name, &args, result, tool.is_error).await), tool.is_error)
}

/// What the model is told when a plugin denies a tool call.
fn denied(b: &Blocked) -> String {
    format!("tool call denied by plugin '{}': {}", b.plugin, b.reason)
}

fn tool_result(id: &str, tool: &ToolCall, shown: &str, is_error: bool) -> Block {
    Block::ToolResult(ToolResultBlock {
        tool_use_id: id.to_owned(),
        tool_name: Some(tool.name.clone()),
        content: shown.to_owned(),
        is_error,
        status: Some(if is_error { "error" } else { "completed" }.to_owned()),
        extra: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_errors_name_the_line() {
        let turns = parse_transcript("{\"user\":\"a\",\"assistant\":\"b\"}\n\n{\"user\":\"c\"}\n").unwrap_err();
        assert_eq!(turns.line, 3);
        assert!(turns.to_string().starts_with("transcript line 3: missing field `assistant`"), "{turns}");
        let ok = parse_transcript("{\"user\":\"a\",\"assistant\":\"b\",\"tools\":[{\"name\":\"t\",\"result\":\"r\"}]}")
            .unwrap();
        assert_eq!(ok[0].tools[0].name, "t");
        assert_eq!(ok[0].tools[0].result.as_deref(), Some("r"));
    }
}
