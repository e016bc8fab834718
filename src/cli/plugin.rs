//! `ctxhost plugin list | install | deps | remove | enable | disable | grant | adopt`: the
//! plugins dir and the operator's records about it (`crate::app::registry`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{CliResult, show_warnings};
use crate::app::catalog::{Catalog, Options, State};
use crate::app::install;
use crate::app::registry;
use crate::config::HostConfig;
use crate::home::Home;
use crate::host::LoadContext;
use crate::host::{grants, state};

/// Manage the plugins of the plugins dir.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost plugin list
  ctxhost plugin install ./my-plugin
  ctxhost plugin install ./build/memory --name memory --force
  ctxhost plugin deps rss-watcher
  ctxhost plugin disable memory
  ctxhost plugin grant memory
  ctxhost plugin adopt memory
  ctxhost plugin remove memory --purge")]
pub struct PluginArgs {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    List(ListArgs),
    Install(InstallArgs),
    Deps(DepsArgs),
    Remove(RemoveArgs),
    /// Turn a disabled plugin back on (kept in <home>/state.db)
    #[command(after_help = "Examples:\n  ctxhost plugin enable memory")]
    Enable(NameArg),
    /// Turn a plugin off: it stays installed but is left out of the stack
    #[command(after_help = "Examples:\n  ctxhost plugin disable memory\n  ctxhost plugin list    # ENABLED shows `no`")]
    Disable(NameArg),
    /// Record what the plugin's manifest asks for now as its grant
    ///
    /// The grant (allow_network, allow_filesystem, readable_paths,
    /// writable_paths in <home>/grants.toml) is what a plugin runs with: a
    /// manifest asking for more gets a warning and no more. Prints what changed.
    /// A FaustBot plugin (plugin.json) asks for nothing itself: give it the
    /// network or the filesystem with the flags.
    ///
    /// A `${VAR}` in a plugin's `[env]` reads the host's VAR only when the
    /// operator allowed it: `allowed_env_vars` in config.toml (every plugin)
    /// or `--env VAR` here (this plugin); otherwise it is empty. Variables
    /// granted earlier are kept; `--revoke-env VAR` takes one back.
    /// --source-builds lets pip build the plugin's dependencies from source
    /// distributions (their build code runs, confined as the plugin is); by
    /// default only wheels install.
    #[command(
        after_help = "Examples:\n  ctxhost plugin grant memory\n  ctxhost plugin grant rss-watcher --network\n  \
                            ctxhost plugin grant search --env SEARCH_API_KEY --env SEARCH_REGION\n  \
                            ctxhost plugin grant search --revoke-env SEARCH_REGION\n  \
                            ctxhost plugin grant rss-watcher --source-builds && ctxhost plugin deps rss-watcher"
    )]
    Grant(GrantArgs),
    /// Record this home's files of a plugin as the version every instance runs
    ///
    /// Instances sharing a store (`[store] url`) run one version of each
    /// plugin: its content hash (every file of its directory but hidden ones
    /// and __pycache__; a wasm plugin's manifest and modules), recorded by
    /// the first instance that started with it. An instance whose files hash
    /// otherwise refuses the plugin's calls (`doctor` and `plugin list` say
    /// so). After deploying new files, adopt them here once; running
    /// instances on the store are told and re-check their own files within
    /// a second or two (each resumes or refuses the plugin). `plugin install` adopts
    /// what it installs. On a home's own store the record just follows its
    /// files.
    #[command(after_help = "Examples:\n  ctxhost plugin adopt memory")]
    Adopt(NameArg),
}

/// List every plugin of the plugins dir: version, runtime, hooks, enabled, error.
///
/// Each enabled plugin is loaded as a start would load it and checked as
/// `ctxhost doctor` checks it (its runtime, its dependencies, a FaustBot
/// plugin's module imported in its sandbox), so an error shown here is the
/// one a start or a call would meet.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost plugin list
  ctxhost plugin list --json | jq '.[] | select(.error)'")]
struct ListArgs {
    /// Print `[{\"name\",\"version\",\"runtime\",\"hooks\":[…],\"enabled\",\"error\"?,\"state\",\"kind\",…}]` (the shape of GET /api/plugins)
    #[arg(long)]
    json: bool,
}

/// Install a plugin directory into the plugins dir.
///
/// Checks the copy first: the manifest loads, every `[[requires]]` binary is
/// on PATH, every `[integrity]` hash matches. A python plugin with a
/// requirements.txt gets its own virtual environment (<home>/venvs/<name>,
/// built with pip and the machine's index settings) that its hooks run in;
/// pip runs confined as the plugin's hooks are (plus the network) and
/// installs wheels only, unless --source-builds.
/// Records the privileges the manifest asks for as the plugin's grant. The
/// plugin is put in place with one rename; nothing changes when a check fails.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost plugin install ./my-plugin
  ctxhost plugin install ./my-plugin --force          # replace the installed version
  PIP_INDEX_URL=https://pypi.example/simple ctxhost plugin install ./py-plugin
  ctxhost plugin install ./py-plugin --source-builds   # a dependency has no wheel")]
struct InstallArgs {
    /// The plugin directory (holding plugin.toml)
    path: PathBuf,
    /// Replace an installed plugin of the same name
    #[arg(long)]
    force: bool,
    /// Install under this name [default: the directory's name]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Let pip build dependencies that have no wheel from source (their build
    /// code runs, confined); recorded in the plugin's grant
    #[arg(long)]
    source_builds: bool,
}

/// Install an installed plugin's python dependencies into its virtual environment.
///
/// A FaustBot plugin (plugin.json): its requirements.txt, else the list its
/// `register_pip_deps` returns (read without running the plugin), into
/// <home>/venvs/<id> — skipped when that environment is up to date, unless
/// --force. A python plugin.toml plugin: its requirements file, rebuilt.
/// This is how a FaustBot plugin's dependencies get installed: a start or
/// reload installs nothing unless config.toml has `[faustbot]
/// install_deps_at_start = true`. pip runs confined as the plugin's hooks
/// are (its grant, plus the network, its venv and pip cache) and installs
/// wheels only, unless `ctxhost plugin grant <id> --source-builds`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost plugin deps rss-watcher
  ctxhost plugin deps rss-watcher --force        # rebuild the environment
  PIP_NO_INDEX=1 PIP_FIND_LINKS=/srv/wheels ctxhost plugin deps rss-watcher
  ctxhost plugin deps rss-watcher --json")]
struct DepsArgs {
    /// The plugin's name
    name: String,
    /// Rebuild the environment even when it is up to date
    #[arg(long)]
    force: bool,
    /// Print `{\"name\",\"kind\",\"file\",\"venv\",\"installed\",\"pip\"}`
    #[arg(long)]
    json: bool,
}

/// Remove an installed plugin: its directory, virtual environment and grant.
///
/// Its data dir (<home>/data/<name>) is kept unless --purge.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost plugin remove memory
  ctxhost plugin remove memory --purge    # its data dir too")]
struct RemoveArgs {
    /// The plugin's name
    name: String,
    /// Also delete the plugin's data dir
    #[arg(long)]
    purge: bool,
}

/// One installed plugin.
#[derive(Debug, Args)]
struct NameArg {
    /// The plugin's name
    name: String,
}

#[derive(Debug, Args)]
struct GrantArgs {
    /// The plugin's name
    name: String,
    /// Also allow the network (even when the manifest does not ask for it)
    #[arg(long)]
    network: bool,
    /// Also allow the whole filesystem (even when the manifest does not ask for it)
    #[arg(long)]
    filesystem: bool,
    /// Let `${VAR}` in the plugin's [env] read this host variable (repeatable)
    #[arg(long = "env", value_name = "VAR")]
    env: Vec<String>,
    /// Take back a host variable granted with --env (repeatable)
    #[arg(long = "revoke-env", value_name = "VAR")]
    revoke_env: Vec<String>,
    /// Let pip build this plugin's dependencies from source distributions
    /// (running their build code, confined); kept until --no-source-builds
    #[arg(long, conflicts_with = "no_source_builds")]
    source_builds: bool,
    /// Wheels only again (the default)
    #[arg(long)]
    no_source_builds: bool,
}

pub fn exec(args: PluginArgs, home: &Home) -> CliResult {
    let mut out = std::io::stdout().lock();
    match args.command {
        PluginCommand::List(a) => list(a, home, &mut out)?,
        PluginCommand::Install(a) => install(a, home, &mut out)?,
        PluginCommand::Deps(a) => deps(&a, home, &mut out)?,
        PluginCommand::Remove(a) => remove(a, home, &mut out)?,
        PluginCommand::Enable(a) => enable(&a.name, true, home, &mut out)?,
        PluginCommand::Disable(a) => enable(&a.name, false, home, &mut out)?,
        PluginCommand::Grant(a) => grant(&a, home, &mut out)?,
        PluginCommand::Adopt(a) => adopt(&a.name, home, &mut out)?,
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

type Outcome = Result<(), Box<dyn std::error::Error>>;

fn load_config(home: &Home) -> Result<HostConfig, Box<dyn std::error::Error>> {
    let (config, warnings) = HostConfig::load(home.config_file())?;
    show_warnings(&warnings);
    Ok(config)
}

fn list(args: ListArgs, home: &Home, out: &mut impl Write) -> Outcome {
    let config = load_config(home)?;
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    let plugins = Catalog::load(&cx, &Options::check()).statuses();
    let state_error =
        state::disabled(home).err().map(|e| format!("{e}; every plugin counts as disabled until it is fixed"));
    if let Some(e) = &state_error
        && args.json
    {
        show_warnings(std::slice::from_ref(e));
    }
    if args.json {
        serde_json::to_writer(&mut *out, &plugins)?;
        writeln!(out)?;
        return Ok(());
    }
    if let Some(e) = &state_error {
        writeln!(out, "error: {e}")?;
    }
    if plugins.is_empty() {
        writeln!(out, "no plugins in `{}`", home.plugins_dir().display())?;
        return Ok(());
    }
    let width = plugins.iter().map(|p| p.name.len()).max().unwrap_or(4).max(4);
    writeln!(out, "{:<width$}  {:<10} {:<8} {:<8} HOOKS", "NAME", "VERSION", "RUNTIME", "ENABLED")?;
    for p in &plugins {
        let enabled = if p.enabled { "yes" } else { "no" };
        let hooks = match (&p.error, p.state) {
            (Some(e), State::Error) => format!("error: {e}"),
            _ if p.hooks.is_empty() => "(none)".to_owned(),
            _ => p.hooks.join(", "),
        };
        writeln!(out, "{:<width$}  {:<10} {:<8} {:<8} {hooks}", p.name, p.version, p.runtime, enabled)?;
        for w in &p.warnings {
            writeln!(out, "{:<width$}  warning: {w}", "")?;
        }
        if let Ok(Some(grant)) = grants::get(home, &p.name)
            && !grant.env.is_empty()
        {
            writeln!(out, "{:<width$}  host variables granted: {}", "", grant.env.join(", "))?;
        }
    }
    Ok(())
}

fn install(args: InstallArgs, home: &Home, out: &mut impl Write) -> Outcome {
    let config = load_config(home)?;
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    let opts = install::InstallOptions {
        source: &args.path,
        name: args.name.as_deref(),
        force: args.force,
        source_builds: args.source_builds,
    };
    let done = install::install(&opts, &cx)?;
    show_warnings(&done.warnings);
    writeln!(out, "Installed {} {} ({}) in `{}`", done.name, done.version, done.runtime, done.dir.display())?;
    match done.replaced.as_deref() {
        Some("") => writeln!(out, "  replaced the previous version")?,
        Some(old) => writeln!(out, "  replaced version {old}")?,
        None => {}
    }
    let hooks = if done.hooks.is_empty() { "(none)".to_owned() } else { done.hooks.join(", ") };
    writeln!(out, "  hooks: {hooks}")?;
    if let Some((venv, summary)) = &done.venv {
        writeln!(out, "  virtual environment: `{}`", venv.display())?;
        if let Some(summary) = summary {
            writeln!(out, "  pip: {summary}")?;
        }
    }
    if let Some(old) = &done.removed_venv {
        writeln!(out, "  removed the old virtual environment `{}` (no requirements now)", old.display())?;
    }
    writeln!(out, "  grant: {}", done.grant.summary())?;
    if let Some(before) = &done.grant_before {
        for change in done.grant.changes_from(before) {
            writeln!(out, "    {change}")?;
        }
    }
    if !done.enabled {
        writeln!(out, "  disabled (turn it on with `ctxhost plugin enable {}`)", done.name)?;
    }
    Ok(())
}

fn adopt(name: &str, home: &Home, out: &mut impl Write) -> Outcome {
    let config = load_config(home)?;
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    let done = crate::app::catalog::adopt(&cx, name)?;
    writeln!(
        out,
        "Recorded {} {} ({}) as the version every instance runs",
        done.name, done.version, done.content_hash
    )?;
    if let Some(old) = &done.replaced {
        writeln!(out, "  in place of {old}")?;
    }
    if done.shared {
        writeln!(
            out,
            "  running instances on the store re-check their files of {} now: those that match run it, the others refuse it",
            done.name
        )?;
    }
    Ok(())
}

fn deps(args: &DepsArgs, home: &Home, out: &mut impl Write) -> Outcome {
    let config = load_config(home)?;
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    let done = install::deps(&cx, &args.name, args.force)?;
    if args.json {
        serde_json::to_writer(&mut *out, &done)?;
        writeln!(out)?;
        return Ok(());
    }
    let Some(file) = &done.file else {
        writeln!(out, "{} declares no python dependencies", done.name)?;
        return Ok(());
    };
    match (&done.venv, done.installed) {
        (Some(venv), true) => {
            writeln!(out, "Installed the dependencies of {} into `{}`", done.name, venv.display())?;
            writeln!(out, "  from `{}`", file.display())?;
            if let Some(pip) = &done.pip {
                writeln!(out, "  pip: {pip}")?;
            }
        }
        (Some(venv), false) => writeln!(
            out,
            "The dependencies of {} are up to date in `{}` (--force rebuilds it)",
            done.name,
            venv.display()
        )?,
        (None, _) => writeln!(out, "{} lists no packages in `{}`: nothing to install", done.name, file.display())?,
    }
    Ok(())
}

fn remove(args: RemoveArgs, home: &Home, out: &mut impl Write) -> Outcome {
    let done = install::remove(home, &args.name, args.purge)?;
    writeln!(out, "Removed plugin {}", args.name)?;
    writeln!(out, "  removed `{}`", done.dir.display())?;
    if let Some(venv) = &done.venv {
        writeln!(out, "  removed its virtual environment `{}`", venv.display())?;
    }
    if done.grant {
        writeln!(out, "  removed its grant from {}", grants::location(home))?;
    }
    match &done.data {
        Some((dir, true)) => writeln!(out, "  removed its data dir `{}`", dir.display())?,
        Some((dir, false)) => writeln!(out, "  kept its data dir `{}` (--purge removes it)", dir.display())?,
        None => {}
    }
    Ok(())
}

fn enable(name: &str, on: bool, home: &Home, out: &mut impl Write) -> Outcome {
    registry::plugin_dir(home, name)?;
    let changed = state::set_enabled(home, name, on)?;
    let word = if on { "enabled" } else { "disabled" };
    if !changed {
        writeln!(out, "{name} is already {word}")?;
    } else if on {
        writeln!(out, "Enabled {name}")?;
    } else {
        writeln!(out, "Disabled {name} (it stays installed; `ctxhost plugin enable {name}` turns it back on)")?;
    }
    Ok(())
}

fn grant(args: &GrantArgs, home: &Home, out: &mut impl Write) -> Outcome {
    let name = args.name.as_str();
    let change = crate::app::grant::GrantChange {
        network: args.network,
        filesystem: args.filesystem,
        add_env: args.env.clone(),
        revoke_env: args.revoke_env.clone(),
        source_builds: if args.no_source_builds {
            Some(false)
        } else if args.source_builds {
            Some(true)
        } else {
            None
        },
        dry_run: false,
    };
    let done = crate::app::grant::grant(home, name, &change).map_err(|e| match e {
        crate::app::grant::GrantError::BadEnv(bad) => {
            format!("--env {bad:?}: not a valid environment variable name (empty, or holds `=` or NUL)").into()
        }
        e => Box::<dyn std::error::Error>::from(e),
    })?;
    match &done.before {
        Some(_) if done.changes.is_empty() => {
            writeln!(out, "The grant of {name} is unchanged: {}", done.summary)?;
        }
        Some(_) => {
            writeln!(out, "Updated the grant of {name} in {}:", done.location)?;
            for change in &done.changes {
                writeln!(out, "  {change}")?;
            }
        }
        None => {
            writeln!(out, "Recorded the grant of {name} in {}: {}", done.location, done.summary)?;
        }
    }
    Ok(())
}
