//! `ctxhost serve`: run the engine as an HTTP daemon.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;

use super::{CliResult, show_warnings};
use crate::config::HostConfig;
use crate::home::Home;
use crate::server::{ServeOptions, Server};

const DEFAULT_ADDR: &str = "127.0.0.1:4545";

/// Serve the context engine over HTTP: LibreFang's plugin routes, an agent
/// API for agents in any language, Prometheus metrics.
///
/// Loads config.toml and the plugin stack, runs bootstrap, then serves until
/// SIGINT/SIGTERM (after_turn calls under way get up to 30 s to finish; journaled
/// ones not started yet run at the next start).
/// Prints `listening on http://ADDR` on stdout once ready, then the
/// dashboard's address (`dashboard: http://ADDR/`).
#[derive(Debug, Args)]
#[command(after_help = "\
Routes:
  POST /api/agents/{agent_id}/{hook}     the engine's answer for one hook of a turn
  GET  /api/plugins                      plugins of the plugins dir (read now)
  POST /api/plugins/scaffold             {\"name\",\"description\"?,\"runtime\"?}
  GET  /api/plugins/doctor               runtimes and plugin health
  POST /api/plugins/{name}/reload        reload one plugin (in-flight calls finish on the old one)
  POST /api/plugins/{name}/test-hook     {\"hook\",\"input\"}: run one hook of one plugin
  GET  /api/context-engine/metrics       per-hook counters (204 without plugins)
  GET  /api/health/series, /api/logs, /api/turns, /api/memory/{agent}   what the dashboard shows
  GET  /metrics, GET /healthz
POST routes and doctor need `Authorization: Bearer <token>` when a token is set.
Every route, its body and answers: docs/reference/routes.md in the ctxhost repository.
Connection, time and body limits: `[server]` in config.toml (docs/reference/config.md).

Examples:
  ctxhost serve
  ctxhost serve --watch --addr 127.0.0.1:0
  CTXHOST_TOKEN=s3cret ctxhost serve --addr 0.0.0.0:4545
  ctxhost serve --token-file /etc/ctxhost/token --addr 0.0.0.0:4545
  curl -s localhost:4545/api/agents/a1/ingest -d '{\"message\":\"what grows in my garden?\"}'")]
pub struct ServeArgs {
    /// Address to listen on [default: `[server] addr` of config.toml, else 127.0.0.1:4545]
    #[arg(long, value_name = "ADDR")]
    addr: Option<SocketAddr>,
    /// Bearer token for the POST routes (required to listen beyond loopback) [default: `[server] token`].
    /// A command line is visible to every local user (`ps`, /proc/PID/cmdline): prefer --token-file
    /// or CTXHOST_TOKEN
    #[arg(long, env = "CTXHOST_TOKEN", hide_env_values = true, value_name = "TOKEN", conflicts_with = "token_file")]
    token: Option<String>,
    /// Read the bearer token from this file (its first line; the file should be readable by you only)
    #[arg(long, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Reload a stack plugin when its plugin.toml, a hook script or its component changes
    #[arg(long)]
    watch: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid `[server] addr` in `{file}`: {value:?} is not an address like 127.0.0.1:4545")]
struct BadAddr {
    file: String,
    value: String,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read the token file `{file}`: {reason}")]
struct BadTokenFile {
    file: String,
    reason: String,
}

/// The first line of `file`, trimmed; an empty one is an error.
fn read_token_file(file: &std::path::Path) -> Result<String, BadTokenFile> {
    let bad = |reason: String| BadTokenFile { file: file.display().to_string(), reason };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(bad("its first line is empty".into()));
    }
    Ok(token)
}

pub fn exec(args: ServeArgs, home: &Home) -> CliResult {
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    let addr = match (args.addr, config.server.addr.as_deref()) {
        (Some(addr), _) => addr,
        (None, Some(text)) => text
            .parse()
            .map_err(|_| BadAddr { file: home.config_file().display().to_string(), value: text.to_owned() })?,
        (None, None) => DEFAULT_ADDR.parse()?,
    };
    let from_file = match &args.token_file {
        Some(file) => Some(read_token_file(file)?),
        None => None,
    };
    let token = from_file.or(args.token).or_else(|| config.server.token.clone()).filter(|t| !t.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        // Handlers first: a SIGTERM that follows the address line must stop
        // the daemon gracefully, never kill it.
        let stop = super::interrupted();
        let server = Server::bind(home.clone(), config, ServeOptions { addr, token, watch: args.watch }).await?;
        let bound = server.local_addr()?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{bound}")?;
        writeln!(out, "dashboard: http://{bound}/")?;
        out.flush()?;
        drop(out);
        server
            .run(async {
                let signal = stop.await;
                tracing::info!(
                    target: crate::server::LOG_TARGET,
                    "{signal}: shutting down (requests under way finish; after_turn calls get up to 30 s)"
                );
            })
            .await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
