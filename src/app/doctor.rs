//! The runtime and plugin report of spec section 4 (`ctxhost doctor`, `GET
//! /api/plugins/doctor`). Field names are LibreFang's; a plugin entry is the
//! catalog's status record (`app::catalog::PluginStatus`: LibreFang's fields
//! plus `state`, `error`, `warnings`, …), so the report cannot disagree with
//! `plugin list` or the daemon's routes. A plugin in state `error` makes the
//! report unhealthy.
//!
//! The runtime probes (one `--version` process per runtime) are cached per
//! process for [`PROBE_TTL`]: the HTTP route must not let a request flood
//! start processes. The command line's report loads a fresh catalog with
//! every check ([`report`]); the daemon's reports its own ([`report_of`]).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::catalog::{Catalog, Options, PluginStatus, State};
use crate::manifest::Runtime;
use crate::plugin::LoadContext;
use crate::runner::process::{find_on_path, probe, runtime_info};

/// How long one `--version` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the runtime probes' answers are reused (per process): a flood of
/// doctor requests starts each runtime's probe at most once per this time.
pub const PROBE_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize)]
pub struct RuntimeStatus {
    pub runtime: String,
    /// The launcher found on PATH (absolute); `null` for native and wasm.
    pub launcher: Option<String>,
    pub available: bool,
    pub version: Option<String>,
    pub install_hint: String,
}

/// What the script sandbox can apply on this machine (spec section 6).
#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    /// `landlock abi 7, netns yes, memory limit cgroup v1, …`.
    pub summary: String,
    /// Every part of the policy applies.
    pub full: bool,
    /// The parts that do not.
    pub missing: Vec<String>,
    /// `[sandbox] require` of config.toml.
    pub required: bool,
    #[serde(flatten)]
    pub features: crate::runner::process::sandbox::Features,
    #[serde(flatten)]
    pub limits: crate::runner::process::sandbox::probe::Limits,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub runtimes: Vec<RuntimeStatus>,
    pub plugins: Vec<PluginStatus>,
    pub sandbox: SandboxStatus,
}

impl DoctorReport {
    /// No plugin is in state `error` (a disabled one is fine).
    pub fn healthy(&self) -> bool {
        self.plugins.iter().all(|p| p.state != State::Error)
    }
}

/// Probes every built-in runtime (in parallel) and loads a catalog of the
/// home with every check (dependencies checked, FaustBot modules imported
/// in their sandbox), through the same path a start takes, so the report
/// cannot disagree with a start or a call.
pub fn report(cx: &LoadContext<'_>) -> DoctorReport {
    let catalog = Catalog::load(cx, &Options::check());
    report_of(catalog.all_statuses(), cx)
}

/// The report over `plugins` (a catalog's statuses) with the runtimes and
/// the sandbox of this machine.
pub fn report_of(plugins: Vec<PluginStatus>, cx: &LoadContext<'_>) -> DoctorReport {
    let path = (cx.host_env)("PATH");
    let runtimes = runtimes(path.as_deref());
    DoctorReport { runtimes, plugins, sandbox: sandbox_status(cx) }
}

/// Every built-in runtime's status, probed in parallel — or the answer of a
/// probe of the same `PATH` less than [`PROBE_TTL`] ago. Concurrent callers
/// wait for one probe run instead of starting their own.
fn runtimes(path: Option<&std::ffi::OsStr>) -> Vec<RuntimeStatus> {
    type Cached = Option<(Instant, Option<std::ffi::OsString>, Vec<RuntimeStatus>)>;
    static CACHE: Mutex<Cached> = Mutex::new(None);
    // A probe that panicked leaves nothing half-written worth refusing.
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, cached_path, statuses)) = cache.as_ref()
        && at.elapsed() < PROBE_TTL
        && cached_path.as_deref() == path
    {
        return statuses.clone();
    }
    let statuses: Vec<RuntimeStatus> = std::thread::scope(|s| {
        let probes: Vec<_> = Runtime::BUILT_IN.iter().map(|rt| s.spawn(|| probe_runtime(rt, path))).collect();
        probes.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    *cache = Some((Instant::now(), path.map(ToOwned::to_owned), statuses.clone()));
    statuses
}

/// The sandbox features of this machine, as hooks started by this process get them.
pub fn sandbox_status(cx: &LoadContext<'_>) -> SandboxStatus {
    let features = crate::runner::process::sandbox::features().clone();
    SandboxStatus {
        summary: features.summary(),
        full: features.full(),
        missing: features.missing().into_iter().map(str::to_owned).collect(),
        required: cx.config.sandbox.require,
        limits: features.limits().clone(),
        features,
    }
}

/// Directories under `plugins_dir` that hold a plugin.toml or a plugin.json, sorted by name.
pub fn plugin_dirs(plugins_dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(plugins_dir) else { return Vec::new() };
    let mut dirs: Vec<_> = entries
        .filter_map(Result::ok)
        // Dot-named entries are staging dirs of `ctxhost new` / `plugin install`.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| crate::faust::is_plugin_dir(p))
        .collect();
    dirs.sort();
    dirs
}

fn probe_runtime(runtime: &Runtime, path: Option<&std::ffi::OsStr>) -> RuntimeStatus {
    let info = runtime_info(runtime);
    let mut status = RuntimeStatus {
        runtime: runtime.label(),
        launcher: None,
        available: info.programs.is_empty(),
        version: None,
        install_hint: info.install_hint.to_owned(),
    };
    let Some(program) = info.programs.iter().find_map(|p| find_on_path(p, path)) else { return status };
    status.launcher = Some(program.display().to_string());
    if let Some(version) = version_of(&program, info.version_args, path) {
        status.available = true;
        status.version = Some(version);
    }
    status
}

/// First non-empty line of stdout (or of stderr when stdout is empty) of a
/// successful version probe, bounded by [`PROBE_TIMEOUT`].
fn version_of(program: &Path, args: &[&str], path: Option<&std::ffi::OsStr>) -> Option<String> {
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear();
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    let out = probe::run(&mut cmd, PROBE_TIMEOUT).ok()?;
    if !out.status.success() {
        return None;
    }
    let first_line =
        |bytes: &[u8]| String::from_utf8_lossy(bytes).lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned);
    first_line(&out.stdout).or_else(|| first_line(&out.stderr))
}
