//! The runtime and plugin report of spec section 4 (`ctxhost doctor`, `GET
//! /api/plugins/doctor`). Field names are LibreFang's; ctxhost adds `error`
//! and `missing_binaries` to plugin entries so a broken one says why.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::manifest::{MANIFEST_FILE, Manifest, Runtime};
use crate::runner::process::{find_on_path, launcher::is_executable, runtime_info};

/// How long one `--version` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub runtimes: Vec<RuntimeStatus>,
    pub plugins: Vec<PluginStatus>,
}

impl DoctorReport {
    /// Every plugin loads and has its runtime.
    pub fn healthy(&self) -> bool {
        self.plugins.iter().all(|p| p.hooks_valid && p.runtime_available && p.missing_binaries.is_empty())
    }
}

/// Probes every built-in runtime (in parallel) and checks every plugin in `plugins_dir`.
pub fn report(plugins_dir: &Path, host_env: &dyn Fn(&str) -> Option<OsString>) -> DoctorReport {
    let path = host_env("PATH");
    let runtimes: Vec<RuntimeStatus> = std::thread::scope(|s| {
        let probes: Vec<_> =
            Runtime::BUILT_IN.iter().map(|rt| s.spawn(|| probe_runtime(rt, path.as_deref()))).collect();
        probes.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let plugins =
        plugin_dirs(plugins_dir).iter().map(|dir| check_plugin(dir, &runtimes, path.as_deref(), host_env)).collect();
    DoctorReport { runtimes, plugins }
}

/// Directories under `plugins_dir` that hold a plugin.toml, sorted by name.
pub fn plugin_dirs(plugins_dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(plugins_dir) else { return Vec::new() };
    let mut dirs: Vec<_> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join(MANIFEST_FILE).is_file()).collect();
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
    cmd.args(args).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    if let Some(home) = std::env::var_os("HOME") {
        cmd.env("HOME", home);
    }
    let mut child = cmd.spawn().ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let first_line =
        |bytes: &[u8]| String::from_utf8_lossy(bytes).lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned);
    first_line(&out.stdout).or_else(|| first_line(&out.stderr))
}

fn check_plugin(
    dir: &Path,
    runtimes: &[RuntimeStatus],
    path: Option<&std::ffi::OsStr>,
    host_env: &dyn Fn(&str) -> Option<OsString>,
) -> PluginStatus {
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let lookup = |v: &str| host_env(v).map(|s| s.to_string_lossy().into_owned());
    match Manifest::load_with_env(dir, &lookup) {
        Ok(loaded) => {
            let m = loaded.manifest;
            let runtime = &m.settings.runtime;
            let info = runtime_info(runtime);
            let runtime_available = match runtime {
                Runtime::Custom(p) => is_executable(p),
                rt => runtimes.iter().any(|s| s.runtime == rt.label() && s.available),
            };
            let mut install_hint = info.install_hint.to_owned();
            let mut missing_binaries = Vec::new();
            for req in &m.requires {
                if find_on_path(&req.binary, path).is_none() {
                    missing_binaries.push(req.binary.clone());
                    if let Some(hint) = &req.install_hint {
                        install_hint.push_str(&format!("; {}: {hint}", req.binary));
                    }
                }
            }
            PluginStatus {
                name: m.name,
                runtime: runtime.label(),
                runtime_available,
                hooks_valid: true,
                install_hint,
                error: None,
                missing_binaries,
            }
        }
        Err(e) => PluginStatus {
            name: dir_name,
            runtime: "unknown".into(),
            runtime_available: false,
            hooks_valid: false,
            install_hint: String::new(),
            error: Some(e.to_string()),
            missing_binaries: Vec::new(),
        },
    }
}
