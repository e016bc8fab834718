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
//! - [`load`]: the plugin as a [`LoadedPlugin`]: a generated manifest (the
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

use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::plugin::{HostFiles, LoadContext, LoadError, LoadedPlugin, Venv};
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
    let grant = crate::registry::grants::get(cx.home, &pj.id).ok().flatten().unwrap_or_default();
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

/// Loads the FaustBot plugin in `dir` (without running any of its code).
///
/// # Errors
/// A bad plugin.json (naming file, key and reason), a shim that cannot be
/// written, or what loading a script plugin can fail with.
pub fn load(dir: &Path, cx: &LoadContext<'_>) -> Result<LoadedPlugin, LoadError> {
    let (pj, mut warnings) = PluginJson::load(dir)?;
    let shim_dir = shim::install(cx.home).map_err(LoadError::Shim)?;
    let table = generated_manifest(&pj, cx);
    let access = |plugin: &str, var: &str| cx.env_access(plugin, var);
    let loaded = Manifest::from_generated(&dir.join(PLUGIN_JSON), dir, &pj.id, &table, &access)?;
    let loaded = crate::plugin::granted(loaded, cx);
    // Isolated mode: no `PYTHON*` variable, no user site; the worker puts
    // the shim, then the plugin dir, on `sys.path` itself.
    let host_files = HostFiles {
        launcher_args: vec!["-I".into(), shim_dir.join(shim::WORKER).into_os_string()],
        readable: vec![shim_dir],
    };
    let (runner, w) = crate::plugin::script_runner_with(loaded, cx, Venv::OfPlugin, &host_files)?;
    warnings.extend(w);
    let mut plugin = LoadedPlugin::script(runner, warnings);
    // Until its `register` answers, the plugin takes part in no chain (its
    // worker is busy starting it; a chain waiting on it could deadlock with
    // a service call of its own startup). The answer says which hooks it has.
    plugin.hooks = [HookName::Register, HookName::Unload].into_iter().collect();
    plugin.agent.priority = Some(pj.priority);
    plugin.faust = Some(std::sync::Arc::new(pj));
    Ok(plugin)
}
