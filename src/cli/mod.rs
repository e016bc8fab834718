//! The command line: one file per subcommand, each filling options and
//! calling the library. Errors print as `error: …` with their causes, and the
//! exit code is 1; a closed stdout is a quiet success.

mod doctor;
mod hook;
mod new;
mod plugin;
mod run;
mod serve;
mod sidecar;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::home::{Home, HomeOverrides};

/// ctxhost — a plugin host for LLM-agent context engines.
///
/// Runs LibreFang-compatible context-engine plugins (python, node, go, ruby,
/// bash, lua, php, native, …) at the hooks of an agent's turn.
#[derive(Debug, Parser)]
#[command(
    name = "ctxhost",
    version,
    propagate_version = true,
    after_help = "\
Examples:
  echo '{\"agent_id\":\"a1\",\"message\":\"hello\"}' | ctxhost hook ./my-plugin ingest
  ctxhost doctor --json
  ctxhost serve --watch                      # HTTP daemon on 127.0.0.1:4545
  ctxhost new my-notes --runtime node        # a plugin that works as generated
  ctxhost plugin install ./my-plugin

Files: home `~/.ctxhost` (--home, CTXHOST_HOME), plugins `<home>/plugins`
(--plugins-dir, CTXHOST_PLUGINS_DIR), config `<home>/config.toml` (--config).
Guides and reference: docs/README.md in the ctxhost repository."
)]
pub struct Cli {
    /// ctxhost's home directory [default: $CTXHOST_HOME or ~/.ctxhost]
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Where plugins are looked up by name [default: $CTXHOST_PLUGINS_DIR or <home>/plugins]
    #[arg(long, global = true, value_name = "DIR")]
    plugins_dir: Option<PathBuf>,
    /// The config file [default: <home>/config.toml]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG wins when set
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Hook(hook::HookArgs),
    Doctor(doctor::DoctorArgs),
    Run(run::RunArgs),
    Demo(run::DemoArgs),
    Serve(serve::ServeArgs),
    Sidecar(sidecar::SidecarArgs),
    New(new::NewArgs),
    Plugin(plugin::PluginArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // Whatever descriptors ctxhost inherited (a parent that forgot
    // close-on-exec) must not reach the processes it starts: hooks, pip,
    // version probes. Before any fd of ctxhost's own exists, every fd above
    // 2 is inherited.
    crate::runner::process::sandbox::mark_inherited_fds_close_on_exec();
    let cli = Cli::parse();
    // A single hook run shows the plugin's stderr; whole runs keep it for -v.
    let plugin_stderr = matches!(cli.command, Command::Hook(_));
    let daemon = matches!(cli.command, Command::Serve(_));
    init_logging(cli.verbose, plugin_stderr, daemon);
    if matches!(cli.command, Command::Run(_) | Command::Demo(_) | Command::Serve(_) | Command::Sidecar(_)) {
        // The built-in engine counts tokens from its first assemble: its
        // encoder is built while the config and the plugins load.
        crate::engine::default::tokenizer::O200k::preload();
    }
    // What later commands need to find this home again (`ctxhost new`'s next steps).
    let given = new::Given { home: cli.home.clone(), config: cli.config.clone() };
    let home =
        Home::resolve(HomeOverrides { home: cli.home, plugins_dir: cli.plugins_dir, config: cli.config }, &|v| {
            std::env::var(v).ok()
        });
    let result = match cli.command {
        Command::Hook(args) => hook::exec(args, &home),
        Command::Doctor(args) => doctor::exec(args, &home),
        Command::Run(args) => run::exec(args, &home),
        Command::Demo(args) => run::demo(args),
        Command::Serve(args) => serve::exec(args, &home),
        Command::Sidecar(args) => sidecar::exec(args, &home),
        Command::New(args) => new::exec(args, &home, &given),
        Command::Plugin(args) => plugin::exec(args, &home),
    };
    match result {
        Ok(code) => code,
        Err(err) if is_broken_pipe(err.as_ref()) => ExitCode::SUCCESS,
        Err(err) => {
            let message = err.to_string();
            eprintln!("error: {message}");
            // Many errors already quote their cause; show only what is new.
            let mut source = err.source();
            while let Some(cause) = source {
                let text = cause.to_string();
                if !message.contains(&text) {
                    eprintln!("\nCaused by:\n  {text}");
                }
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// A command's failure; its Display is the whole first line.
pub(crate) type CliResult = Result<ExitCode, Box<dyn std::error::Error>>;

fn is_broken_pipe(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Logs go to stderr: host messages from `warn` up, progress on something
/// slow (target `ctxhost::progress`: "loading the tokenizer…"), for `hook`
/// also the plugin's stderr (target `plugin_stderr`) and a component's log
/// (`plugin_log`), for `serve` one line per request and the shutdown
/// (`ctxhost::daemon`); `-v` shows every info line everywhere.
fn init_logging(verbose: u8, plugin_stderr: bool, daemon: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::new(spec),
        _ => EnvFilter::new(match verbose {
            0 if plugin_stderr => "warn,ctxhost::progress=info,plugin_stderr=info,plugin_log=info",
            0 if daemon => "warn,ctxhost::progress=info,ctxhost::daemon=info",
            0 => "warn,ctxhost::progress=info",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let printer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_filter(filter);
    // The daemon also keeps plugin output for `GET /api/logs`, whatever
    // the printer shows.
    let capture = daemon.then(crate::server::capture_layer);
    tracing_subscriber::registry().with(printer).with(capture).init();
}

/// Shows load warnings (bad but usable manifest keys, config, …).
pub(crate) fn show_warnings(warnings: &[String]) {
    for w in warnings {
        tracing::warn!("{w}");
    }
}

/// Resolves on the first SIGINT or SIGTERM, naming it (commands that run
/// until stopped, and `hook`, which must kill its hook's group on either).
/// The handlers are installed when this is *called* (inside a runtime), not
/// when the future is first polled: a daemon calls it before it says it is
/// ready, so a SIGTERM right after can never take the default action.
pub(crate) fn interrupted() -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    async move {
        let (Ok(mut int), Ok(mut term)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
}
