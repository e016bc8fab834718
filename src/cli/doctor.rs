//! `ctxhost doctor`: which runtimes are installed and which plugins load.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::CliResult;
use crate::app::catalog::State;
use crate::app::doctor::{self, DoctorReport};
use crate::config::HostConfig;
use crate::home::Home;
use crate::host::LoadContext;

/// Report the runtimes this machine has and the state of every plugin.
///
/// Exits 1 when a plugin would not run — it fails to load, lacks its runtime,
/// a required binary or its dependencies, a hook key is misspelt, or a
/// FaustBot plugin's module does not import (checked by importing it in its
/// sandbox) — so it can gate a deployment. A disabled plugin is fine.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost doctor
  ctxhost doctor --json | jq '.plugins[] | select(.state == \"error\")'
  ctxhost doctor --json | jq .sandbox")]
pub struct DoctorArgs {
    /// Print the report as JSON (`{\"runtimes\":[…],\"plugins\":[…],\"sandbox\":{…}}`, LibreFang's shape plus `sandbox`)
    #[arg(long)]
    json: bool,
}

pub fn exec(args: DoctorArgs, home: &Home) -> CliResult {
    // The sandbox line is probed live, never read from the probe cache, and
    // refreshes it for later `ctxhost hook` runs.
    if !home.is_throw_away() {
        use crate::runner::process::sandbox::{probe, probe_cache};
        probe::use_cache(probe_cache::path_in(&home.cache_dir()), false);
    }
    let (config, warnings) = HostConfig::load(home.config_file())?;
    super::show_warnings(&warnings);
    let report = doctor::report(&LoadContext { home, config: &config, host_env: &LoadContext::process_env });
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write_text(&mut out, &report, home)?;
    }
    out.flush()?;
    Ok(if report.healthy() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn write_text(out: &mut impl Write, report: &DoctorReport, home: &Home) -> std::io::Result<()> {
    writeln!(out, "Runtimes")?;
    for r in &report.runtimes {
        let mark = if r.available { "ok " } else { "-- " };
        let detail = match (&r.launcher, &r.version) {
            (Some(l), Some(v)) => format!("{l}  ({v})"),
            (Some(l), None) => format!("{l}  (no version: {})", r.install_hint),
            (None, _) if r.available => "built in".to_owned(),
            (None, _) => format!("not found. {}", r.install_hint),
        };
        writeln!(out, "  {mark} {:<7} {detail}", r.runtime)?;
    }
    let sandbox = &report.sandbox;
    let state = if sandbox.full {
        "full".to_owned()
    } else if sandbox.required {
        format!(
            "partial, and config.toml requires it whole: script hooks will not run (missing {})",
            sandbox.missing.join(", ")
        )
    } else {
        format!("partial (missing {})", sandbox.missing.join(", "))
    };
    writeln!(out, "\nsandbox: {}  [{state}]", sandbox.summary)?;
    writeln!(out, "\nPlugins in {}", home.plugins_dir().display())?;
    if report.plugins.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for p in &report.plugins {
        let state = match (p.state, &p.error) {
            (State::Error, Some(e)) if !p.runtime_available => format!("error: {e}. {}", p.install_hint),
            (State::Error, Some(e)) => format!("error: {e}"),
            (State::Error, None) => "error".to_owned(),
            (State::Disabled, _) => "disabled".to_owned(),
            (State::Loaded, _) => "ok".to_owned(),
        };
        writeln!(out, "  {:<20} {:<7} {state}", p.name, p.runtime)?;
        if let (State::Loaded, Some(f)) = (p.state, &p.forkserver) {
            let how = match &f.why_not {
                None => "its hooks run through a fork server".to_owned(),
                Some(why) => format!("no fork server: {why}"),
            };
            writeln!(out, "  {:<20} {:<7} {how}", "", "")?;
        }
        for w in &p.warnings {
            writeln!(out, "  {:<20} {:<7} warning: {w}", "", "")?;
        }
    }
    Ok(())
}
