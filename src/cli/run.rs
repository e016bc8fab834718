//! `ctxhost run` and `ctxhost demo`: a whole conversation through the engine.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{CliResult, show_warnings};
use crate::app::catalog::{Catalog, Options};
use crate::config::HostConfig;
use crate::engine::stack::StackEngine;
use crate::home::Home;
use crate::host::LoadContext;
use crate::session::{RunSettings, Turn, TurnReport, compaction_threshold, describe, parse_transcript};

/// Drive a transcript through the configured engine and show what the model
/// would see on every call.
///
/// The engine is `[context_engine]` of the config file: the built-in engine
/// under `plugin` or `plugin_stack`. A transcript is JSONL, one turn per line:
/// {"agent_id"?, "peer_id"?, "user", "assistant_before_tools"?, "tools"?: [{"name", "input", "result"?, "is_error"?}], "assistant"}.
/// With tools, the model's first answer is `assistant_before_tools` and a
/// tool_use per tool; the results come back (through transform_tool_result)
/// and its second answer is `assistant`. Plugins with agent-loop hooks take
/// part: message_received on each user message, tool_call_pre/post around
/// each tool (a block denies the call), a plugin's registered tool is called
/// when the line gives no `result`.
///
/// The built-in memory is a throw-away one (removed at the end), so the same
/// transcript gives the same report every time, unless `--memory FILE` or
/// `[memory] path` in the config names one to keep.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost run --transcript chat.jsonl
  ctxhost run --transcript chat.jsonl --json | jq -c 'select(.turn) | .memories'
  ctxhost run --transcript chat.jsonl --memory chat-memory.db   # a second run recalls the first
  ctxhost --config stack.toml run --transcript chat.jsonl")]
pub struct RunArgs {
    /// The transcript (JSONL, one turn per line)
    #[arg(long, value_name = "FILE")]
    transcript: PathBuf,
    /// Keep the built-in memory in FILE (created when missing) instead of a
    /// throw-away one; wins over `[memory] path` of the config
    #[arg(long, value_name = "FILE")]
    memory: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

/// Run a bundled conversation through a bundled stack of example plugins.
///
/// Uses a throw-away home, so nothing of yours is read or written: the
/// python and bash memory examples and a tool-result shortener over the
/// built-in engine, five turns about a garden (and a weather tool), in a
/// window small enough to show trimming and compaction.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  ctxhost demo\n  ctxhost demo --json")]
pub struct DemoArgs {
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct OutputArgs {
    /// One JSON object for the run (`{"run": …}`), one per turn, then `{"metrics": …}`
    #[arg(long)]
    json: bool,
    /// The system prompt of every turn
    #[arg(long, value_name = "TEXT", default_value = "You are a helpful assistant.")]
    system_prompt: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed to read the transcript `{}`: {source}", path.display())]
struct ReadError {
    path: PathBuf,
    source: std::io::Error,
}

/// Which built-in memory a run uses, for its report.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum MemoryUsed {
    /// A fresh database removed at the end.
    ThrowAway,
    /// A database that stays: `from` is `--memory` or `config`.
    File { path: PathBuf, from: &'static str },
}

impl std::fmt::Display for MemoryUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryUsed::ThrowAway => write!(f, "throw-away (removed at the end; --memory FILE keeps one)"),
            MemoryUsed::File { path, from: "config" } => write!(f, "{} ([memory] path of the config)", path.display()),
            MemoryUsed::File { path, from } => write!(f, "{} ({from})", path.display()),
        }
    }
}

pub fn exec(args: RunArgs, home: &Home) -> CliResult {
    let text = std::fs::read_to_string(&args.transcript)
        .map_err(|source| ReadError { path: args.transcript.clone(), source })?;
    let turns = parse_transcript(&text)?;
    let (mut config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    // Kept alive until the run ends; removed on drop.
    let mut throw_away = None;
    let memory = match (args.memory, &config.memory.path) {
        (Some(path), _) => MemoryUsed::File { path, from: "--memory" },
        (None, Some(path)) => MemoryUsed::File { path: path.clone(), from: "config" },
        (None, None) => MemoryUsed::ThrowAway,
    };
    config.memory.path = Some(match &memory {
        MemoryUsed::File { path, .. } => path.clone(),
        MemoryUsed::ThrowAway => {
            let dir = tempfile::Builder::new().prefix("ctxhost-run-memory-").tempdir()?;
            let path = dir.path().join("memory.db");
            throw_away = Some(dir);
            path
        }
    });
    let title = format!("ctxhost run: {} turns from {}", turns.len(), args.transcript.display());
    let result = drive(home, &config, &turns, &args.output, &Header { title, memory, home: None });
    drop(throw_away);
    result
}

/// The bundled demo: plugins and transcript are compiled into the binary.
const DEMO_FILES: &[(&str, &str)] = &[
    ("plugins/python-memory/plugin.toml", include_str!("../../guest-examples/python-memory/plugin.toml")),
    ("plugins/python-memory/hooks/memory.py", include_str!("../../guest-examples/python-memory/hooks/memory.py")),
    ("plugins/bash-memory/plugin.toml", include_str!("../../guest-examples/bash-memory/plugin.toml")),
    ("plugins/bash-memory/hooks/memory.sh", include_str!("../../guest-examples/bash-memory/hooks/memory.sh")),
    ("plugins/shorten-results/plugin.toml", include_str!("../../guest-examples/demo/shorten-results/plugin.toml")),
    (
        "plugins/shorten-results/hooks/shorten.py",
        include_str!("../../guest-examples/demo/shorten-results/hooks/shorten.py"),
    ),
    ("config.toml", include_str!("../../guest-examples/demo/config.toml")),
];
const DEMO_TRANSCRIPT: &str = include_str!("../../guest-examples/demo/transcript.jsonl");

pub fn demo(args: DemoArgs) -> CliResult {
    let root = tempfile::Builder::new().prefix("ctxhost-demo-").tempdir()?;
    for (rel, content) in DEMO_FILES {
        Home::write_atomic(&root.path().join(rel), content.as_bytes())?;
    }
    let home = Home::throw_away(root.path());
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    let turns = parse_transcript(DEMO_TRANSCRIPT)?;
    let header = Header {
        title: format!("ctxhost demo: {} turns", turns.len()),
        memory: MemoryUsed::ThrowAway,
        home: Some(root.path().to_owned()),
    };
    drive(&home, &config, &turns, &args.output, &header)
}

/// What the first lines of a report say.
struct Header {
    title: String,
    memory: MemoryUsed,
    /// A throw-away home (the demo's).
    home: Option<PathBuf>,
}

fn drive(home: &Home, config: &HostConfig, turns: &[Turn], output: &OutputArgs, header: &Header) -> CliResult {
    let cx = LoadContext { home, config, host_env: &LoadContext::process_env };
    // What an interrupted run or daemon left in the temp dir goes first.
    crate::runner::process::tmp::remove_stale_in_temp_dir();
    // Every plugin loaded once; the stack and the agent loop share the loads.
    let catalog = Catalog::load(&cx, &Options::start(config));
    show_warnings(&catalog.warnings());
    let (engine, warnings) = crate::app::stack::build(&catalog, &cx)?;
    show_warnings(&warnings);
    // The agent loop: plugins with agent hooks (tool_call_pre, …) take part
    // in every turn; none installed, none asked.
    let (agent, warnings) = crate::app::agent_loop::build(&catalog, &cx, engine.metrics().clone())
        .map_err(|e| format!("agent-loop host services: {e}"))?;
    show_warnings(&warnings);
    let agent = (!agent.plugins().is_empty()).then_some(agent);
    let settings = RunSettings {
        system_prompt: output.system_prompt.clone(),
        context_window_tokens: config.context_engine.context_window_tokens,
        default_agent: "agent".into(),
    };
    let mut out = std::io::stdout().lock();
    write_header(&mut out, header, &engine, settings.context_window_tokens, output.json)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if let Some(agent) = &agent {
        // Plugins that register at run time (FaustBot's) start now.
        show_warnings(&runtime.block_on(agent.start()));
    }
    let progress = !output.json && turns.len() > 20 && std::io::stderr().is_terminal();
    let mut write_error = None;
    let mut shown_prompt = None;
    runtime.block_on(crate::session::run(&engine, agent.as_deref(), turns, &settings, |report| {
        let written =
            if output.json { write_json(&mut out, report) } else { write_text(&mut out, report, &mut shown_prompt) };
        if let Err(e) = written {
            write_error.get_or_insert(e);
        }
        if progress {
            eprint!("\r{}/{} turns", report.turn, turns.len());
        }
    }))?;
    if progress {
        eprintln!();
    }
    if let Some(agent) = &agent {
        // plugin_unloaded for FaustBot plugins; workers stop gracefully.
        runtime.block_on(agent.shutdown());
    }
    if let Some(e) = write_error {
        return Err(e.into());
    }
    write_metrics(&mut out, &engine, output.json)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The engine, the window and the memory of the run.
fn write_header(
    out: &mut impl Write,
    header: &Header,
    engine: &StackEngine,
    window: u64,
    json: bool,
) -> std::io::Result<()> {
    let stack = engine.layer_names();
    let threshold = compaction_threshold(window);
    if json {
        let v = serde_json::json!({"run": {
            "stack": stack,
            "context_window_tokens": window,
            "compact_at_tokens": threshold,
            "memory": header.memory,
        }});
        serde_json::to_writer(&mut *out, &v)?;
        return writeln!(out);
    }
    let layers = if stack.is_empty() { "no plugins".to_owned() } else { format!("[{}]", stack.join(", ")) };
    writeln!(out, "{} through {layers} over the built-in engine", header.title)?;
    writeln!(out, "window {window} tokens, compaction when the history reaches {threshold} (80 %)")?;
    writeln!(out, "memory: {}", header.memory)?;
    if let Some(home) = &header.home {
        writeln!(out, "home: {} (throw-away)", home.display())?;
    }
    writeln!(out)
}

fn write_json(out: &mut impl Write, r: &TurnReport) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, r)?;
    writeln!(out)
}

/// Where the text of a labelled line starts.
const COL: usize = 13;
/// Where the text of a line under a label starts (the same column).
const INDENT: &str = "               ";

/// One turn as it happened: the user's message, what was recalled, the
/// compaction with its summary, each model call (the last one's window in
/// full, with what was trimmed and why), each tool's result before and
/// after transform_tool_result, and the answers. The system prompt is
/// printed whole, and again only when it changes.
fn write_text(out: &mut impl Write, r: &TurnReport, shown_prompt: &mut Option<String>) -> std::io::Result<()> {
    writeln!(out, "Turn {} (agent {}, {:.1} ms)", r.turn, r.agent_id, r.elapsed_ms)?;
    writeln!(out, "  {:<COL$}{}", "user:", one_line(&r.user, 84))?;
    if let Some(b) = &r.dropped {
        writeln!(out, "  message dropped by plugin '{}': {}", b.plugin, b.reason)?;
        return writeln!(out);
    }
    if r.memories.is_empty() {
        writeln!(out, "  {:<COL$}none", "memories:")?;
    }
    for (k, m) in r.memories.iter().enumerate() {
        let label = if k == 0 { "memories:" } else { "" };
        writeln!(out, "  {label:<COL$}\"{}\" from {}", one_line(&m.content, 40), m.sources.join(", "))?;
    }
    if let Some(c) = &r.compaction {
        writeln!(
            out,
            "  {:<COL$}the history reached {} tokens (80 % of the window is {}):",
            "compacted:", c.tokens_before, c.threshold
        )?;
        match &c.summary {
            Some(summary) => {
                writeln!(
                    out,
                    "  {:<COL$}{} messages became {} ({} tokens); the first is this summary:",
                    "", c.messages_before, c.messages_after, c.tokens_after
                )?;
                for line in summary.lines() {
                    // Long lines go on under their start.
                    for (i, part) in wrap(line, 84).iter().enumerate() {
                        writeln!(out, "{INDENT}{}{part}", if i == 0 { "" } else { "  " })?;
                    }
                }
            }
            None => writeln!(out, "  {:<COL$}nothing could be summarised", "")?,
        }
    }
    let mut tools = r.tools.iter();
    for (k, call) in r.calls.iter().enumerate() {
        let last = k + 1 == r.calls.len();
        writeln!(
            out,
            "  model call {}: system prompt + {}, {} of {} tokens",
            k + 1,
            plural(call.messages.len(), "message"),
            call.tokens,
            call.budget
        )?;
        if let Some(t) = &call.trim {
            let by = if t.by == "built-in" { "the built-in assemble" } else { "a plugin's assemble" };
            writeln!(
                out,
                "    trimmed: the history takes {} tokens, over the {}; {by} left out:",
                t.tokens_before, call.budget
            )?;
            for d in &t.dropped {
                writeln!(
                    out,
                    "      #{} {} ({} tokens) \"{}\": {}",
                    d.position,
                    d.message.role.as_str(),
                    d.tokens,
                    one_line(&describe(&d.message), 24),
                    d.reason
                )?;
            }
        }
        if last {
            if shown_prompt.as_deref() == Some(r.system_prompt.as_str()) {
                writeln!(out, "    {:<9} (the system prompt as before)", "system")?;
            } else {
                for (i, line) in r.system_prompt.lines().enumerate() {
                    let text = format!("    {:<9} {line}", if i == 0 { "system" } else { "" });
                    writeln!(out, "{}", text.trim_end())?;
                }
                *shown_prompt = Some(r.system_prompt.clone());
            }
            for m in &call.messages {
                writeln!(out, "    {:<9} {}", m.role.as_str(), one_line(&describe(m), 80))?;
            }
        }
        writeln!(out, "  {:<COL$}{}", "assistant:", one_line(&describe(&call.reply), 82))?;
        if !last {
            for t in tools.by_ref() {
                write_tool(out, t)?;
            }
        }
    }
    writeln!(out)
}

/// A tool's result as it came back and, as `tool result:`, as the model sees
/// it after transform_tool_result.
fn write_tool(out: &mut impl Write, t: &crate::session::ToolReport) -> std::io::Result<()> {
    let error = if t.is_error { " (an error)" } else { "" };
    let changed = t.shown != t.result;
    if changed {
        let lines = t.result.lines().count();
        writeln!(
            out,
            "  {:<COL$}{} {} returned {} in {}{error}:",
            "tool:",
            t.name,
            t.input,
            plural(t.result.chars().count(), "character"),
            plural(lines, "line")
        )?;
        for line in wrap(t.result.lines().next().unwrap_or(""), 80) {
            writeln!(out, "{INDENT}{line}")?;
        }
        if lines > 1 {
            writeln!(out, "{INDENT}… and {} more", plural(lines - 1, "line"))?;
        }
    } else {
        writeln!(out, "  {:<COL$}{} {}{error} (result unchanged by transform_tool_result)", "tool:", t.name, t.input)?;
    }
    for (i, line) in t.shown.lines().flat_map(|l| wrap(l, 80)).enumerate() {
        let label = if i == 0 { "tool result:" } else { "" };
        writeln!(out, "  {label:<COL$}{line}")?;
    }
    if changed {
        writeln!(
            out,
            "{INDENT}(after transform_tool_result: {} of {} characters)",
            t.shown.chars().count(),
            t.result.chars().count()
        )?;
    }
    Ok(())
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    if text.chars().count() <= width {
        return vec![text.to_owned()];
    }
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

fn write_metrics(out: &mut impl Write, engine: &StackEngine, json: bool) -> std::io::Result<()> {
    let metrics = engine.metrics();
    if json {
        let v = serde_json::json!({"metrics": {"plugins": metrics.by_plugin(), "hooks": metrics.flat()}});
        serde_json::to_writer(&mut *out, &v)?;
        return writeln!(out);
    }
    writeln!(out, "Metrics (latency percentiles over the last {} calls of each hook)", crate::metrics::WINDOW)?;
    writeln!(
        out,
        "  {:<16} {:<22} {:>5} {:>5} {:>6} {:>9} {:>8} {:>8}",
        "plugin", "hook", "calls", "ok", "failed", "fallbacks", "p50 ms", "p99 ms"
    )?;
    for (plugin, hooks) in metrics.by_plugin() {
        for (hook, m) in hooks {
            writeln!(
                out,
                "  {plugin:<16} {hook:<22} {:>5} {:>5} {:>6} {:>9} {:>8.1} {:>8.1}",
                m.calls, m.successes, m.failures, m.fallbacks, m.p50_ms, m.p99_ms
            )?;
        }
    }
    Ok(())
}

/// The first line of `text`, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut s: String = line.chars().take(max).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}
