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
use crate::session::{RunSettings, Turn, TurnReport, parse_transcript};

/// Drive a transcript through the configured engine and show what the model
/// would see on every turn.
///
/// The engine is `[context_engine]` of the config file: the built-in engine
/// under `plugin` or `plugin_stack`. A transcript is JSONL, one turn per line:
/// {"agent_id"?, "peer_id"?, "user", "assistant", "tools"?: [{"name", "input", "result"?, "is_error"?}]}.
/// Plugins with agent-loop hooks take part: message_received on each user
/// message, tool_call_pre/post around each tool (a block denies the call), a
/// plugin's registered tool is called when the line gives no `result`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost run --transcript chat.jsonl
  ctxhost run --transcript chat.jsonl --json | jq '.memories'
  ctxhost --config stack.toml run --transcript chat.jsonl")]
pub struct RunArgs {
    /// The transcript (JSONL, one turn per line)
    #[arg(long, value_name = "FILE")]
    transcript: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

/// Run a bundled conversation through a bundled stack of example plugins.
///
/// Uses a throw-away home, so nothing of yours is read or written: the
/// python and bash memory examples over the built-in engine, five turns
/// about a garden (and a weather tool).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  ctxhost demo\n  ctxhost demo --json")]
pub struct DemoArgs {
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct OutputArgs {
    /// One JSON object per turn, then `{"metrics": …}`
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

pub fn exec(args: RunArgs, home: &Home) -> CliResult {
    let text = std::fs::read_to_string(&args.transcript)
        .map_err(|source| ReadError { path: args.transcript.clone(), source })?;
    let turns = parse_transcript(&text)?;
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    drive(home, &config, &turns, &args.output)
}

/// The bundled demo: plugins and transcript are compiled into the binary.
const DEMO_FILES: &[(&str, &str)] = &[
    ("plugins/python-memory/plugin.toml", include_str!("../../guest-examples/python-memory/plugin.toml")),
    ("plugins/python-memory/hooks/memory.py", include_str!("../../guest-examples/python-memory/hooks/memory.py")),
    ("plugins/bash-memory/plugin.toml", include_str!("../../guest-examples/bash-memory/plugin.toml")),
    ("plugins/bash-memory/hooks/memory.sh", include_str!("../../guest-examples/bash-memory/hooks/memory.sh")),
    (
        "config.toml",
        "[context_engine]\nplugin_stack = [\"python-memory\", \"bash-memory\"]\ncontext_window_tokens = 2000\n",
    ),
];
const DEMO_TRANSCRIPT: &str = include_str!("../../guest-examples/demo/transcript.jsonl");

pub fn demo(args: DemoArgs) -> CliResult {
    let root = tempfile::Builder::new().prefix("ctxhost-demo-").tempdir()?;
    for (rel, content) in DEMO_FILES {
        Home::write_atomic(&root.path().join(rel), content.as_bytes())?;
    }
    let home = Home::at(root.path());
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    let turns = parse_transcript(DEMO_TRANSCRIPT)?;
    if !args.output.json {
        println!("ctxhost demo: {} turns through [python-memory, bash-memory] over the built-in engine", turns.len());
        println!("(throw-away home: {})\n", root.path().display());
    }
    drive(&home, &config, &turns, &args.output)
}

fn drive(home: &Home, config: &HostConfig, turns: &[Turn], output: &OutputArgs) -> CliResult {
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
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if let Some(agent) = &agent {
        // Plugins that register at run time (FaustBot's) start now.
        show_warnings(&runtime.block_on(agent.start()));
    }
    let mut out = std::io::stdout().lock();
    let progress = !output.json && turns.len() > 20 && std::io::stderr().is_terminal();
    let mut write_error = None;
    runtime.block_on(crate::session::run(&engine, agent.as_deref(), turns, &settings, |report| {
        let written = if output.json { write_json(&mut out, report) } else { write_text(&mut out, report) };
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

fn write_json(out: &mut impl Write, r: &TurnReport) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, r)?;
    writeln!(out)
}

fn write_text(out: &mut impl Write, r: &TurnReport) -> std::io::Result<()> {
    writeln!(out, "Turn {} (agent {}, {:.1} ms)", r.turn, r.agent_id, r.elapsed_ms)?;
    if let Some(b) = &r.dropped {
        writeln!(out, "  message dropped by plugin '{}': {}", b.plugin, b.reason)?;
        return writeln!(out);
    }
    if r.memories.is_empty() {
        writeln!(out, "  memories: none")?;
    } else {
        writeln!(out, "  memories:")?;
        for m in &r.memories {
            writeln!(out, "    [{}] {}", m.source, one_line(&m.content, 100))?;
        }
    }
    writeln!(out, "  model sees: {} messages, {} tokens", r.assembled.len(), r.assembled_tokens)?;
    for m in &r.assembled {
        writeln!(out, "    {:<9} {}", m.role.as_str(), one_line(&describe(m), 90))?;
    }
    for t in &r.tool_results {
        writeln!(out, "  tool result: {}", one_line(t, 90))?;
    }
    if r.compacted {
        writeln!(out, "  history compacted")?;
    }
    writeln!(out)
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

/// A message as one readable line: its text, or what its blocks are.
fn describe(m: &crate::protocol::Message) -> String {
    use crate::protocol::{Block, Content};
    let text = m.text_content();
    if !text.is_empty() {
        return text;
    }
    match &m.content {
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|b| match b {
                Block::ToolUse(u) => format!("[tool_use {} {}]", u.name, u.input),
                Block::ToolResult(r) => format!("[tool_result {}]", r.content),
                other => format!("[{}]", other.type_name()),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Content::Text(_) => String::new(),
    }
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
