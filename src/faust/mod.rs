//! FaustBot plugins, unmodified: a directory with `plugin.json` and an
//! `impl.py` written against `faust_backend.plugin_system` runs as a
//! persistent python JSON-RPC worker whose main is ctxhost's shim.
//!
//! - [`manifest`]: plugin.json → [`PluginJson`].
//! - [`shim`]: the Python package `faust_backend` and the worker main,
//!   compiled into the binary and written to `<home>/faust/shim-<hash>/` at
//!   run time (no pip): the plugin imports the shim's `plugin_system`, and
//!   every `ctx.*` call travels to the host's services.
//! - [`deps`]: the plugin's dependencies into its own virtual environment
//!   *before* the module is first imported (from `requirements.txt`, else
//!   from a static read of the list `register_pip_deps` returns), when the
//!   operator asks (`ctxhost plugin deps <id>`, or installs at start turned on).
//! - [`generate`]: the plugin as the loader (`plugin`) takes it: a generated manifest (the
//!   worker settings, every hook the shim maps, pointed at the entry file),
//!   the shim's worker on the launcher's command line, the shim readable
//!   under the sandbox. What the plugin registers (tools, schedules,
//!   frontend, prompt suffix, config) is only known once its module ran:
//!   the agent engine asks at start through the `register` hook.
//!
//! A plugin directory with both manifests is a plugin.toml plugin.

pub mod deps;
pub mod manifest;
pub mod shim;

use std::path::Path;

pub use manifest::{PLUGIN_JSON, PluginJson, PluginJsonError};

use crate::host::LoadContext;
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::protocol::HookName;

/// Whether `dir` holds a FaustBot plugin: a plugin.json and no plugin.toml.
pub fn is_faust_plugin(dir: &Path) -> bool {
    dir.join(PLUGIN_JSON).is_file() && !dir.join(MANIFEST_FILE).is_file()
}

/// Whether `dir` holds a plugin of either kind.
pub fn is_plugin_dir(dir: &Path) -> bool {
    dir.join(MANIFEST_FILE).is_file() || dir.join(PLUGIN_JSON).is_file()
}

/// The hooks the shim serves for every FaustBot plugin — every agent-loop
/// hook; the plugin's `register` reply narrows them to what it implements.
pub const SHIM_HOOKS: &[HookName] = &HookName::AGENT;

/// The manifest ctxhost runs a FaustBot plugin with. plugin.json asks for no
/// privileges, so the generated manifest asks for exactly what the operator
/// granted (`ctxhost plugin grant <id> --network`); none by default.
fn generated_manifest(pj: &PluginJson, cx: &LoadContext<'_>) -> toml::Table {
    let s = |v: &str| toml::Value::String(v.to_owned());
    let mut hooks = toml::Table::new();
    hooks.insert("runtime".into(), s("python"));
    hooks.insert("persistent_subprocess".into(), toml::Value::Boolean(true));
    hooks.insert("worker_protocol".into(), s("jsonrpc"));
    // A FaustBot plugin keeps state in memory between calls (FaustBot never
    // restarts it), so its worker is not stopped for being idle (a day).
    hooks.insert("worker_idle_secs".into(), toml::Value::Integer(86_400));
    let grant = crate::host::grants::get(cx.home, &pj.id).ok().flatten().unwrap_or_default();
    let paths = |ps: &[std::path::PathBuf]| {
        toml::Value::Array(ps.iter().map(|p| toml::Value::String(p.to_string_lossy().into_owned())).collect())
    };
    hooks.insert("allow_network".into(), toml::Value::Boolean(grant.allow_network));
    hooks.insert("allow_filesystem".into(), toml::Value::Boolean(grant.allow_filesystem));
    hooks.insert("readable_paths".into(), paths(&grant.readable_paths));
    hooks.insert("writable_paths".into(), paths(&grant.writable_paths));
    for hook in SHIM_HOOKS {
        hooks.insert(hook.as_str().into(), s(&pj.entry));
    }
    let mut env = toml::Table::new();
    env.insert("CTXHOST_FAUST_PLUGIN_ID".into(), s(&pj.id));
    // A JSON object is never a whole `${VAR}` value, so `[env]` expansion leaves it alone.
    env.insert("CTXHOST_FAUST_MANIFEST".into(), s(&pj.to_json().to_string()));
    env.insert("CTXHOST_FAUST_DATA_DIR".into(), s(&cx.home.data_dir(&pj.id).to_string_lossy()));
    let mut table = toml::Table::new();
    table.insert("name".into(), s(&pj.id));
    table.insert("version".into(), s(&pj.version));
    if !pj.description.is_empty() {
        table.insert("description".into(), s(&pj.description));
    }
    table.insert("hooks".into(), toml::Value::Table(hooks));
    table.insert("env".into(), toml::Value::Table(env));
    table
}

/// A FaustBot plugin as the plugin loader takes it: its plugin.json, the
/// manifest generated from it (checked, not yet narrowed by the grant), and
/// what the shim adds to the worker's command line and readable files.
pub struct Generated {
    pub plugin_json: PluginJson,
    pub loaded: crate::manifest::Loaded,
    /// Arguments before the entry file: python's isolated mode and the
    /// shim's worker main.
    pub launcher_args: Vec<std::ffi::OsString>,
    /// Host files the hook must be able to read under the sandbox (the shim).
    pub readable: Vec<std::path::PathBuf>,
    pub warnings: Vec<String>,
}

/// Why a FaustBot plugin's manifest could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    PluginJson(#[from] PluginJsonError),
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    #[error("the FaustBot shim: {0}")]
    Shim(String),
}

/// Reads the FaustBot plugin in `dir` into a generated manifest (without
/// running any of its code) and writes the shim it will run under.
///
/// # Errors
/// A bad plugin.json (naming file, key and reason) or a shim that cannot be
/// written.
pub fn generate(dir: &Path, cx: &LoadContext<'_>) -> Result<Generated, GenerateError> {
    let (plugin_json, warnings) = PluginJson::load(dir)?;
    let shim_dir = shim::install(cx.home).map_err(GenerateError::Shim)?;
    let table = generated_manifest(&plugin_json, cx);
    let access = |plugin: &str, var: &str| cx.env_access(plugin, var);
    let loaded = Manifest::from_generated(&dir.join(PLUGIN_JSON), dir, &plugin_json.id, &table, &access)?;
    // Isolated mode: no `PYTHON*` variable, no user site; the worker puts
    // the shim, then the plugin dir, on `sys.path` itself.
    Ok(Generated {
        plugin_json,
        loaded,
        launcher_args: vec!["-I".into(), shim_dir.join(shim::WORKER).into_os_string()],
        readable: vec![shim_dir],
        warnings,
    })
}
