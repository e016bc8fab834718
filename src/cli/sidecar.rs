//! `ctxhost sidecar`: LibreFang's sidecar context engine on stdin/stdout.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::{CliResult, show_warnings};
use crate::app::catalog::{Catalog, Options};
use crate::config::HostConfig;
use crate::home::Home;
use crate::host::LoadContext;
use crate::sidecar::{self, SidecarOptions};

/// Serve LibreFang's sidecar context-engine protocol on stdin/stdout.
///
/// LibreFang starts this command itself and sends one JSON request per line
/// (`bootstrap`, `ingest`, `assemble`, `after_turn`); each gets one reply line.
/// The engine is the one `ctxhost run` uses: the built-in memory under the
/// plugin stack of `config.toml`. Logs go to stderr only. The command ends when
/// stdin closes (or on SIGTERM/SIGINT), after answering every request read
/// and letting the `after_turn` plugin calls under way finish (bounded by
/// --settle-timeout-secs). A turn is answered once its plugin calls are in
/// the journal (`<home>/state.db`): calls cut short, by this timeout or by a
/// SIGKILL, run at the next start.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  # LibreFang's config.toml: hand its context engine to ctxhost
  [context_engine]
  engine = \"sidecar\"

  [context_engine.sidecar]
  command = \"ctxhost\"
  args = [\"sidecar\", \"--home\", \"/home/me/.ctxhost\"]
  request_timeout_secs = 30

  # By hand: one request per line in, one reply per line out
  echo '{\"id\":1,\"method\":\"ingest\",\"params\":{\"agent_id\":\"a1\",\"user_message\":\"hi\",\"peer_id\":null}}' \\
    | ctxhost sidecar")]
pub struct SidecarArgs {
    /// After stdin closes, how long pending after_turn plugin calls may still run
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    settle_timeout_secs: u64,
    /// How long an ingest waits for the same agent's previous after_turn plugin calls,
    /// so what one turn taught is recalled on the next
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    ingest_wait_ms: u64,
}

pub fn exec(args: SidecarArgs, home: &Home) -> CliResult {
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    // What a sidecar or daemon killed before left in the temp dir goes first.
    crate::runner::process::tmp::remove_stale_in_temp_dir();
    // The runtime first: a memory in PostgreSQL ([store] url) opens on it.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // On a shared store, the change feed's last id before anything is
    // loaded: what changes meanwhile is applied after.
    let feed = crate::host::store::open_feed(home)?.map(|f| f.head().map(|seen| (f, seen))).transpose()?;
    let catalog = Catalog::load(&cx, &Options::stack(&config));
    let (mut engine, mut warnings) = {
        let _current = runtime.enter();
        crate::app::stack::build(&catalog, &cx)?
    };
    warnings.extend(catalog.warnings());
    show_warnings(&warnings);
    let plugins = Arc::new(sidecar::fleet::Plugins::new(catalog, home.clone(), config.clone()));
    let journal = crate::engine::durable::open_journal(home, &config.context_engine)?;
    tracing::info!(plugins = ?engine.layer_names(), "ctxhost sidecar ready");
    let options = SidecarOptions {
        ingest_wait: Duration::from_millis(args.ingest_wait_ms),
        settle_timeout: Duration::from_secs(args.settle_timeout_secs),
    };
    let input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
    let report = runtime.block_on(async {
        // after_turn goes through the journal; what a sidecar LibreFang
        // killed before left there runs now.
        engine.attach_journal(journal);
        let signal = super::interrupted();
        let stop = async move {
            signal.await;
        };
        let engine = Arc::new(engine);
        // What other instances on the store change reaches this stack too.
        let _follower = feed.map(|(f, seen)| sidecar::fleet::follow(engine.clone(), plugins.clone(), f, seen));
        sidecar::serve(engine, Some(plugins), input, std::io::stdout(), options, stop).await
    });
    tracing::info!(
        requests = report.requests,
        invalid_lines = report.invalid_lines,
        "ctxhost sidecar: input closed; exiting"
    );
    // Work cut off by the settle timeout is stopped here (its hooks' process
    // groups are killed as their calls drop).
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(ExitCode::SUCCESS)
}
