//! `ctxhost hook <PLUGIN> <HOOK>`: run one hook of one plugin, no fallback.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{CliResult, show_warnings};
use crate::config::HostConfig;
use crate::home::Home;
use crate::manifest::validate_name;
use crate::plugin::{LoadContext, load_plugin};
use crate::protocol::{HookName, HookRequest};
use crate::runner::CallOptions;

/// Run one hook of one plugin and print its reply.
///
/// The request JSON is read from stdin (or --input FILE); `type` is filled in
/// when missing. A field the hook's request does not have is warned about
/// (with the nearest known field) and sent as given. The reply is printed as one JSON line on stdout (exit 0); any
/// failure is printed on stderr (exit 1). There is no fallback: this runs
/// exactly the plugin's script, as the engine would.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  echo '{\"agent_id\":\"a1\",\"message\":\"my garden\"}' | ctxhost hook guest-examples/python-memory ingest
  ctxhost hook my-plugin after_turn --input turn.json --timeout-secs 5
  ctxhost hook my-plugin bootstrap < /dev/null     # an empty request is `{}`")]
pub struct HookArgs {
    /// A plugin directory, or the name of a plugin in the plugins dir
    plugin: String,
    /// The hook: bootstrap, ingest, assemble, compact, after_turn,
    /// transform_tool_result, prepare_subagent, merge_subagent, on_event, or
    /// an agent-loop hook (tool_call_pre, message_received, call_tool, …)
    hook: String,
    /// Read the request from FILE instead of stdin
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Override the plugin's hook_timeout_secs (bootstrap still gets twice this)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
enum HookCliError {
    #[error("{0}")]
    Usage(String),
    #[error("failed to read the request from `{}`: {source}", path.display())]
    Input { path: PathBuf, source: std::io::Error },
    #[error("the request is not valid JSON: {0}")]
    Json(serde_json::Error),
    #[error(transparent)]
    Hook(#[from] crate::runner::HookError),
    #[error("interrupted by {0}; the hook and everything it started were killed")]
    Interrupted(&'static str),
}

pub fn exec(args: HookArgs, home: &Home) -> CliResult {
    let hook: HookName = args.hook.parse().map_err(|e: crate::protocol::UnknownHook| {
        let hint = crate::hint::did_you_mean(&args.hook, HookName::ALL.iter().map(|h| h.as_str()));
        HookCliError::Usage(format!("{e}{hint}"))
    })?;
    let dir = plugin_dir(&args.plugin, home)?;
    let request = read_request(args.input.as_deref())?;
    warn_unknown_fields(hook, &request);
    let request = HookRequest::from_json(hook, request)?;

    // One call per process: what would go to the blocking pool is done on
    // the spot (a pool thread would cost ~1 ms and be waited for at exit).
    crate::runner::process::one_call_per_process();
    // One call per process: what the last run's sandbox probe found is
    // taken from the home's cache instead of forking for it again (only
    // features it claims; see sandbox::probe_cache).
    if !home.is_throw_away() {
        use crate::runner::process::sandbox::{probe, probe_cache};
        probe::use_cache(probe_cache::path_in(&home.cache_dir()), true);
    }
    let (mut config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    // One call per process: a fork server would only add its own start to
    // the call's (issue 18), so the hook is spawned as it always was.
    config.runner.python_forkserver = false;
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    // What an interrupted call or daemon left in the temp dir goes first.
    crate::runner::process::tmp::remove_stale_in_temp_dir();
    let plugin = load_plugin(&dir, &cx)?;
    show_warnings(&plugin.warnings);
    // Host services for workers and components that call them; without an
    // engine, `config_changed` and `trigger_append` are not run here. A
    // one-shot script never calls them: its store stays closed (opening it
    // is ~0.7 ms of a hook's start).
    let _services = if plugin.runner.calls_services() {
        let shared = crate::host::services::SharedServices::open(home)
            .map_err(|e| HookCliError::Usage(format!("host services in {}: {e}", home.state_db().display())))?;
        crate::plugin::attach_services(&plugin, &shared, home)
            .map_err(|e| HookCliError::Usage(format!("host services of '{}': {e}", plugin.name)))?;
        Some(shared)
    } else {
        None
    };
    let runner = plugin.runner;

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let options = CallOptions { timeout_secs: args.timeout_secs };
    // The hook runs in its own process group, so a terminal's Ctrl-C does not
    // reach it: on SIGINT/SIGTERM drop the call, whose guard kills the group.
    let reply = runtime.block_on(async {
        let reply = tokio::select! {
            reply = runner.call(&request, &options) => reply.map_err(Into::into),
            signal = super::interrupted() => Err(HookCliError::Interrupted(signal)),
        };
        // A persistent worker stops here, so its last stderr lines are shown.
        runner.shutdown().await;
        reply
    })?;

    let mut line = serde_json::to_vec(&reply)?;
    line.push(b'\n');
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&line)?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A field the hook's request does not have is sent as given, but it is
/// most likely a misspelling (`tool_name` for `tool_call_pre`'s `name`):
/// each gets a warning naming the nearest field and the hook's fields.
fn warn_unknown_fields(hook: HookName, request: &serde_json::Value) {
    let known = hook.request_fields();
    for field in crate::protocol::unknown_fields(hook, request) {
        let hint = crate::hint::did_you_mean(field, known.iter().copied());
        let fields = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        tracing::warn!(
            "a `{hook}` request has no field `{field}`{hint} (its fields: {fields}); it is sent to the plugin as given",
            hook = hook.as_str()
        );
    }
}

/// A path to a directory, or a plugin name under the plugins dir.
fn plugin_dir(arg: &str, home: &Home) -> Result<PathBuf, HookCliError> {
    let as_path = Path::new(arg);
    if as_path.is_dir() {
        return Ok(as_path.to_owned());
    }
    if validate_name(arg).is_ok() {
        let dir = home.plugins_dir().join(arg);
        if dir.is_dir() {
            return Ok(dir);
        }
        let names: Vec<String> = crate::app::doctor::plugin_dirs(home.plugins_dir())
            .iter()
            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let hint = crate::hint::did_you_mean(arg, names.iter().map(String::as_str));
        return Err(HookCliError::Usage(format!(
            "no plugin `{arg}`: it is not a directory, and `{}` has no plugin of that name{hint}",
            home.plugins_dir().display()
        )));
    }
    Err(HookCliError::Usage(format!("no plugin directory at `{arg}`")))
}

/// The request JSON from FILE or stdin; blank input (or a terminal) is `{}`.
fn read_request(input: Option<&Path>) -> Result<serde_json::Value, HookCliError> {
    let text = match input {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|source| HookCliError::Input { path: path.to_owned(), source })?
        }
        None if std::io::stdin().is_terminal() => String::new(),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| HookCliError::Input { path: "<stdin>".into(), source })?;
            text
        }
    };
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    serde_json::from_str(&text).map_err(HookCliError::Json)
}
