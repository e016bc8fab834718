//! Loading a FaustBot plugin: the manifest `faust::generate` made from its
//! plugin.json becomes a jsonrpc worker whose main is the shim, narrowed by
//! the operator's grant like any other plugin. Runs none of its code.

use std::path::Path;

use super::{HostFiles, LoadContext, LoadError, LoadedPlugin, Venv};
use crate::faust::{GenerateError, generate};
use crate::protocol::HookName;

/// Loads the FaustBot plugin in `dir` (without running any of its code).
///
/// # Errors
/// A bad plugin.json (naming file, key and reason), a shim that cannot be
/// written, or what loading a script plugin can fail with.
pub fn load(dir: &Path, cx: &LoadContext<'_>) -> Result<LoadedPlugin, LoadError> {
    let generated = generate(dir, cx).map_err(|e| match e {
        GenerateError::PluginJson(e) => LoadError::PluginJson(e),
        GenerateError::Manifest(e) => LoadError::Manifest(e),
        GenerateError::Shim(e) => LoadError::Shim(e),
    })?;
    let pj = generated.plugin_json;
    let mut warnings = generated.warnings;
    let loaded = super::granted(generated.loaded, cx);
    let host_files = HostFiles { launcher_args: generated.launcher_args, readable: generated.readable };
    let (runner, w) = super::script_runner_with(loaded, cx, Venv::OfPlugin, &host_files)?;
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
