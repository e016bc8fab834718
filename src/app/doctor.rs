//! The runtime and plugin report of spec section 4 (`ctxhost doctor`, `GET
//! /api/plugins/doctor`). Field names are LibreFang's; ctxhost adds `error`
//! and `missing_binaries` to plugin entries so a broken one says why.
//!
//! The runtime probes (one `--version` process per runtime) are cached per
//! process for [`PROBE_TTL`]: the HTTP route must not let a request flood
//! start processes. Plugins are loaded afresh on every report.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::manifest::Runtime;
use crate::plugin::{LoadContext, load_plugin, load_script_plugin};
use crate::runner::process::{Launcher, find_on_path, probe, runtime_info};

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

#[derive(Debug, Clone, Serialize)]
pub struct PluginStatus {
    pub name: String,
    pub runtime: String,
    pub runtime_available: bool,
    pub hooks_valid: bool,
    pub install_hint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_binaries: Vec<String>,
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
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub runtimes: Vec<RuntimeStatus>,
    pub plugins: Vec<PluginStatus>,
    pub sandbox: SandboxStatus,
}

impl DoctorReport {
    /// Every plugin loads and has its runtime.
    pub fn healthy(&self) -> bool {
        self.plugins.iter().all(|p| p.hooks_valid && p.runtime_available && p.missing_binaries.is_empty())
    }
}

/// Probes every built-in runtime (in parallel) and loads every plugin in the
/// plugins dir exactly as `ctxhost hook` would (same config, environment and
/// launcher resolution), so the report cannot disagree with a real call.
pub fn report(cx: &LoadContext<'_>) -> DoctorReport {
    let path = (cx.host_env)("PATH");
    let runtimes = runtimes(path.as_deref());
    let plugins = plugin_dirs(cx.home.plugins_dir()).iter().map(|dir| check_plugin(dir, cx)).collect();
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

fn check_plugin(dir: &Path, cx: &LoadContext<'_>) -> PluginStatus {
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let broken = |runtime: String, error: String| PluginStatus {
        name: dir_name.clone(),
        runtime,
        runtime_available: false,
        hooks_valid: false,
        install_hint: String::new(),
        error: Some(error),
        missing_binaries: Vec::new(),
    };
    if crate::faust::is_faust_plugin(dir) {
        // A FaustBot plugin: python running ctxhost's shim.
        let info = runtime_info(&Runtime::Python);
        return match load_plugin(dir, cx) {
            Ok(p) => {
                let ready = p.runner.ready();
                PluginStatus {
                    name: p.name,
                    runtime: "python".into(),
                    runtime_available: ready.is_ok(),
                    hooks_valid: true,
                    install_hint: info.install_hint.to_owned(),
                    error: ready.err(),
                    missing_binaries: Vec::new(),
                }
            }
            Err(e) => broken("python".into(), e.to_string()),
        };
    }
    // One manifest read to pick the loader; each plugin is loaded once, as a
    // call would load it (a component: compile, link, describe).
    let lookup = |v: &str| (cx.host_env)(v).map(|s| s.to_string_lossy().into_owned());
    let runtime = match crate::manifest::Manifest::load_with_env(dir, &lookup) {
        Ok(loaded) => loaded.manifest.settings.runtime,
        Err(e) => return broken("unknown".into(), e.to_string()),
    };
    if runtime == Runtime::Wasm {
        return match load_plugin(dir, cx) {
            Ok(p) => PluginStatus {
                name: p.name,
                runtime: "wasm".into(),
                runtime_available: true,
                hooks_valid: true,
                install_hint: runtime_info(&Runtime::Wasm).install_hint.to_owned(),
                error: None,
                missing_binaries: Vec::new(),
            },
            Err(e) => PluginStatus { runtime_available: true, ..broken("wasm".into(), e.to_string()) },
        };
    }
    let (runner, _warnings) = match load_script_plugin(dir, cx) {
        Ok(loaded) => loaded,
        Err(e) => return broken(runtime.label(), e.to_string()),
    };
    let plugin = runner.plugin();
    let m = &plugin.manifest;
    let info = runtime_info(&m.settings.runtime);
    let runtime_available = !matches!(plugin.launcher, Launcher::Missing { .. });
    // Every hook must turn into a command line (a native script must be
    // executable or have a `#!` line, the launcher must exist).
    let hook_error = crate::runner::Runner::ready(&runner).err();
    let path = (cx.host_env)("PATH");
    let mut install_hint = info.install_hint.to_owned();
    let mut missing_binaries = Vec::new();
    for req in &m.requires {
        if find_on_path(&req.binary, path.as_deref()).is_none() {
            missing_binaries.push(req.binary.clone());
            if let Some(hint) = &req.install_hint {
                install_hint.push_str(&format!("; {}: {hint}", req.binary));
            }
        }
    }
    PluginStatus {
        name: m.name.clone(),
        runtime: m.settings.runtime.label(),
        runtime_available,
        hooks_valid: hook_error.is_none() || !runtime_available,
        install_hint,
        error: if runtime_available { hook_error } else { None },
        missing_binaries,
    }
}
