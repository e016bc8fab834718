//! Loading a plugin directory into something that can run hooks.
//!
//! This is where a checked [`Manifest`] meets the host: the operator's config
//! overrides are resolved and written for `LIBREFANG_PLUGIN_CONFIG`, the
//! environment plan is fixed, and the launcher is resolved — all once, so a
//! call pays none of it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::HostConfig;
use crate::home::Home;
use crate::manifest::{self, Manifest, ManifestError, Runtime};
use crate::runner::process::{self, EnvInputs, EnvPlan, ProcessPlugin, ProcessRunner};

/// A plugin that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("failed to write the plugin config `{}`: {source}", path.display())]
    ConfigFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("plugin '{0}' uses runtime `wasm`, which this build cannot run yet")]
    WasmUnsupported(String),
}

/// What loading needs from the host.
pub struct LoadContext<'a> {
    pub home: &'a Home,
    pub config: &'a HostConfig,
    /// The host environment (read for PATH, HOME, passthrough and `${VAR}`).
    pub host_env: &'a dyn Fn(&str) -> Option<OsString>,
}

impl LoadContext<'_> {
    /// The real process environment.
    pub fn process_env(name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

/// Loads a script plugin: manifest, config file, environment plan, launcher.
/// Returns the runner and the warnings loading produced.
///
/// # Errors
/// A bad manifest (naming file, key and reason), an unwritable config file,
/// or a runtime this build cannot run.
pub fn load_script_plugin(dir: &Path, cx: &LoadContext<'_>) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    script_runner(Manifest::load_with_env(dir, &lookup)?, cx)
}

/// LibreFang's manual hooks (`[context_engine.hooks]` of the config file) as
/// a script plugin named `hooks`, paths relative to the config file.
///
/// # Errors
/// As for [`load_script_plugin`].
pub fn load_manual_hooks(hooks: &toml::Table, cx: &LoadContext<'_>) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    script_runner(Manifest::from_manual_hooks(cx.home.config_file(), "hooks", hooks, &lookup)?, cx)
}

fn script_runner(loaded: manifest::Loaded, cx: &LoadContext<'_>) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let manifest::Loaded { manifest, mut warnings } = loaded;
    if manifest.settings.runtime == Runtime::Wasm {
        return Err(LoadError::WasmUnsupported(manifest.name));
    }
    let config_file = write_config(&manifest, cx, &mut warnings)?;
    let info = process::runtime_info(&manifest.settings.runtime);
    let env = EnvPlan::new(EnvInputs {
        manifest: &manifest,
        passthrough: info.passthrough,
        allowed_env_vars: &cx.config.allowed_env_vars,
        config_file: config_file.as_deref(),
        host: cx.host_env,
    });
    let launcher =
        process::resolve_launcher(&manifest.settings.runtime, &manifest.dir, env.base(), &cx.home.cache_dir());
    Ok((ProcessRunner::new(ProcessPlugin { manifest, launcher, env }), warnings))
}

/// `[config.*]` defaults merged with `[plugin_config.<name>]` from config.toml,
/// written as JSON to `<home>/data/<name>/config.json`. No `[config]`, no file.
fn write_config(
    manifest: &Manifest,
    cx: &LoadContext<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<PathBuf>, LoadError> {
    let overrides = cx.config.plugin_config.get(&manifest.name);
    if manifest.config.is_empty() {
        if overrides.is_some() {
            warnings.push(format!(
                "config.toml has [plugin_config.{}] but the plugin declares no [config]; it is ignored",
                manifest.name
            ));
        }
        return Ok(None);
    }
    let (resolved, config_warnings) =
        manifest::resolve_config(&manifest.config, &overrides.cloned().unwrap_or_default());
    warnings.extend(config_warnings);
    let path = cx.home.data_dir(&manifest.name).join("config.json");
    let text = serde_json::to_string_pretty(&resolved).unwrap_or_else(|_| "{}".into());
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        Home::write_atomic(&path, text.as_bytes())
            .map_err(|source| LoadError::ConfigFile { path: path.clone(), source })?;
    }
    Ok(Some(path))
}
