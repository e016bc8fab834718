//! Driving a whole conversation through an engine: what `ctxhost run` and
//! `ctxhost demo` do, turn by turn, so the effect of a stack is visible.
//!
//! A transcript is JSONL, one turn per line:
//! `{"agent_id"?, "peer_id"?, "user": s, "assistant": s, "tools"?: [{"name", "input", "result", "is_error"?}]}`.
//! For each turn: message_received (agent loop) → ingest → assemble
//! (recalled memories and plugins' prompt suffixes in the system prompt) →
//! per tool tool_call_pre / the plugin's tool / tool_call_post (agent loop)
//! then transform_tool_result → after_turn, and compact when
//! the history passes 80 % of the window; bootstrap once at the start. A
//! turn's after_turn calls finish before the next turn's ingest (a real user
//! is slower than a hook), so runs are repeatable.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::engine::{AgentEngine, Blocked, ToolOutcome};
use crate::engine::default::compact::COMPACT_AT;
use crate::engine::stack::StackEngine;
use crate::engine::{ContextEngine, EngineError, Recalled};
use crate::protocol::{
    AfterTurnRequest, AssembleRequest, Block, BootstrapRequest, CompactRequest, Content, IngestRequest, Message, Role,
    TokenPressure, ToolResultBlock, ToolUseBlock, TransformToolResultRequest,
};

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub peer_id: Option<String>,
    pub user: String,
    pub assistant: String,
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
    pub memories: Vec<Recalled>,
    /// The messages the model would see (the system prompt first).
    pub assembled: Vec<Message>,
    pub assembled_tokens: usize,
    /// Each tool's result as the model sees it.
    pub tool_results: Vec<String>,
    /// A plugin dropped the user's message at `message_received`: the turn
    /// was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Blocked>,
    pub compacted: bool,
    pub elapsed_ms: f64,
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub system_prompt: String,
    pub context_window_tokens: u64,
    pub default_agent: String,
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
        let user = match loop_engine {
            Some(a) => match a.message_received(&agent, &t.user, "user", serde_json::json!(history)).await {
                Ok(text) => text,
                Err(blocked) => {
                    on_turn(&TurnReport {
                        turn: i + 1,
                        agent_id: agent,
                        memories: Vec::new(),
                        assembled: Vec::new(),
                        assembled_tokens: 0,
                        tool_results: Vec::new(),
                        dropped: Some(blocked),
                        compacted: false,
                        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                    });
                    continue;
                }
            },
            None => t.user.clone(),
        };
        let memories = engine
            .ingest(&IngestRequest {
                agent_id: agent.clone(),
                message: user.clone(),
                peer_id: t.peer_id.clone(),
                ..Default::default()
            })
            .await?;
        let mut system_prompt = settings.system_prompt.clone();
        if !memories.is_empty() {
            system_prompt.push_str("\n\nRelevant memories:");
            for m in &memories {
                system_prompt.push_str(&format!("\n- {}", m.content));
            }
        }
        if let Some(a) = loop_engine {
            system_prompt = a.with_prompt_suffixes(&system_prompt);
        }
        let first_of_turn = history.len();
        history.push(Message::text(Role::User, user.clone()));
        let assembled = engine
            .assemble(&AssembleRequest {
                agent_id: agent.clone(),
                system_prompt: system_prompt.clone(),
                messages: history.clone(),
                context_window_tokens: window,
                ..Default::default()
            })
            .await?;
        let assembled_tokens = counter.text(&system_prompt) + counter.messages(&assembled);
        let mut tool_results = Vec::new();
        for (k, tool) in t.tools.iter().enumerate() {
            let id = format!("turn{}-tool{}", i + 1, k + 1);
            let (output, is_error) = run_tool(loop_engine, &agent, tool).await;
            let shown = engine
                .transform_tool_result(&TransformToolResultRequest::new(
                    agent.clone(),
                    tool.name.clone(),
                    id.clone(),
                    tool.input.clone(),
                    output,
                    is_error,
                ))
                .await?;
            history.push(tool_use(&id, tool));
            history.push(tool_result(&id, tool, &shown, is_error));
            tool_results.push(shown);
        }
        history.push(Message::text(Role::Assistant, t.assistant.clone()));
        engine
            .after_turn(&AfterTurnRequest {
                agent_id: agent.clone(),
                messages: history[first_of_turn..].to_vec(),
                extra: t.peer_id.iter().map(|p| ("peer_id".to_owned(), Value::String(p.clone()))).collect(),
            })
            .await?;
        engine.settle().await;
        let used = counter.messages(history) as u64;
        let mut compacted = false;
        if window > 0 && used as f64 >= COMPACT_AT * window as f64 {
            let out = engine
                .compact(&CompactRequest {
                    agent_id: agent.clone(),
                    messages: history.clone(),
                    model: "ctxhost-run".into(),
                    context_window_tokens: window,
                    token_pressure: TokenPressure::new(used, window),
                    ..Default::default()
                })
                .await?;
            compacted = out.messages != *history;
            *history = out.messages;
        }
        let mut shown = vec![Message::text(Role::System, system_prompt)];
        shown.extend(assembled);
        on_turn(&TurnReport {
            turn: i + 1,
            agent_id: agent,
            memories,
            assembled: shown,
            assembled_tokens,
            tool_results,
            dropped: None,
            compacted,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        });
    }
    Ok(())
}

fn tool_use(id: &str, tool: &ToolCall) -> Message {
    let block = Block::ToolUse(ToolUseBlock {
        id: id.to_owned(),
        name: tool.name.clone(),
        input: tool.input.clone(),
        extra: Default::default(),
    });
    Message { content: Content::Blocks(vec![block]), ..Message::text(Role::Assistant, "") }
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

fn tool_result(id: &str, tool: &ToolCall, shown: &str, is_error: bool) -> Message {
    let block = Block::ToolResult(ToolResultBlock {
        tool_use_id: id.to_owned(),
        tool_name: Some(tool.name.clone()),
        content: shown.to_owned(),
        is_error,
        status: Some(if is_error { "error" } else { "completed" }.to_owned()),
        extra: Default::default(),
    });
    Message { content: Content::Blocks(vec![block]), ..Message::text(Role::User, "") }
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
