//! Loading a plugin directory into something that can run hooks.
//!
//! This is where a checked [`Manifest`] meets the host: the operator's grant
//! narrows the privileges the manifest asks for (spec section 6, see
//! [`crate::host::grants`]; the first load records them), the operator's
//! config overrides are resolved and written for `LIBREFANG_PLUGIN_CONFIG`,
//! the environment plan is fixed, and the launcher is resolved — a python
//! plugin with a virtual environment (`<home>/venvs/<name>`) runs on that
//! environment's python — all once, so a call pays none of it.

use std::path::{Path, PathBuf};

pub use crate::host::LoadContext;

mod faust;
use crate::home::Home;
use crate::manifest::{self, Manifest, ManifestError, Runtime};
use crate::runner::process::env_plan;
use crate::runner::process::{self, ProcessPlugin, ProcessRunner};

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
    #[error("plugin '{0}' uses runtime `wasm`: it is not a script plugin (load it with `load_plugin`)")]
    NotAScript(String),
    #[error(transparent)]
    Component(#[from] crate::runner::HookError),
    #[error(transparent)]
    Sandbox(#[from] process::sandbox::SandboxError),
    #[error(transparent)]
    PluginJson(#[from] crate::faust::PluginJsonError),
    #[error("the FaustBot shim: {0}")]
    Shim(String),
}

/// Loads a script plugin: manifest, config file, environment plan, launcher.
/// Returns the runner and the warnings loading produced.
///
/// # Errors
/// A bad manifest (naming file, key and reason), an unwritable config file,
/// or a runtime this build cannot run.
pub fn load_script_plugin(dir: &Path, cx: &LoadContext<'_>) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let loaded = granted(Manifest::load_with_access(dir, &|plugin, var| cx.env_access(plugin, var))?, cx);
    script_runner(loaded, cx, Venv::OfPlugin)
}

/// Applies the operator's grant to a plugin's settings: afterwards
/// `allow_network`, `allow_filesystem`, `readable_paths` and `writable_paths`
/// are the effective privileges, the only ones anything may act on.
pub(crate) fn granted(mut loaded: manifest::Loaded, cx: &LoadContext<'_>) -> manifest::Loaded {
    let warnings = crate::host::grants::enforce(cx.home, &loaded.manifest.name, &mut loaded.manifest.settings);
    loaded.warnings.extend(warnings);
    loaded
}

/// Whether a script plugin may run on its own virtual environment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Venv {
    /// A plugin: its venv when it has one (python only).
    OfPlugin,
    /// Manual hooks of the config file: none.
    No,
}

/// LibreFang's manual hooks (`[context_engine.hooks]` of the config file) as
/// a script plugin named `hooks`, paths relative to the config file.
///
/// # Errors
/// As for [`load_script_plugin`].
pub fn load_manual_hooks(hooks: &toml::Table, cx: &LoadContext<'_>) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    // The config file is the operator's own: its settings are the grant.
    script_runner(Manifest::from_manual_hooks(cx.home.config_file(), "hooks", hooks, &lookup)?, cx, Venv::No)
}

/// Files of the host a script plugin's hooks run with: arguments put before
/// the hook script on the launcher's command line (the FaustBot shim's
/// worker) and directories they must be able to read under the sandbox.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostFiles {
    pub launcher_args: Vec<std::ffi::OsString>,
    pub readable: Vec<PathBuf>,
}

fn script_runner(
    loaded: manifest::Loaded,
    cx: &LoadContext<'_>,
    venv: Venv,
) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    script_runner_with(loaded, cx, venv, &HostFiles::default())
}

pub(crate) fn script_runner_with(
    loaded: manifest::Loaded,
    cx: &LoadContext<'_>,
    venv: Venv,
    host_files: &HostFiles,
) -> Result<(ProcessRunner, Vec<String>), LoadError> {
    let manifest::Loaded { manifest, mut warnings } = loaded;
    if manifest.settings.runtime == Runtime::Wasm {
        return Err(LoadError::NotAScript(manifest.name));
    }
    let config_file = write_config(&manifest, cx, &mut warnings)?;
    let venv = match venv {
        Venv::OfPlugin if manifest.settings.runtime == Runtime::Python => plugin_venv(&manifest, cx, &mut warnings),
        _ => None,
    };
    let data_dir = cx.home.data_dir(&manifest.name);
    let caches = (!manifest.settings.allow_filesystem).then_some(data_dir.as_path());
    let env = env_plan(&manifest, cx, config_file.as_deref(), venv.as_deref(), caches);
    let mut launcher = match &venv {
        Some(venv) => {
            let args = process::runtime_info(&Runtime::Python).args.iter().map(std::ffi::OsString::from).collect();
            process::Launcher::Program { program: crate::runner::process::venv::python(venv), args }
        }
        None => process::resolve_launcher(
            &manifest.settings.runtime,
            &manifest.dir,
            env.base(),
            cx.user_home().as_deref(),
            &cx.home.cache_dir(),
        ),
    };
    if let process::Launcher::Program { args, .. } = &mut launcher {
        args.extend(host_files.launcher_args.iter().cloned());
    }
    let (confinement, sandbox_warnings) =
        confinement(&manifest, cx, &launcher, venv.as_deref(), &data_dir, &host_files.readable)?;
    warnings.extend(sandbox_warnings);
    // One-shot Python hooks through a fork server, unless the plugin or the
    // operator says otherwise (workers and other runtimes never).
    let forkserver = process::forkserver_decision(&manifest.settings, cx.config).is_some_and(|d| d.is_ok());
    Ok((ProcessRunner::new(ProcessPlugin { manifest, launcher, env, confinement, forkserver }), warnings))
}

/// The plugin's sandbox, from its effective privileges (after the grant) and
/// what the hook will run: its launcher, virtual environment, the user's and
/// the hook's HOME and the host's passthrough path variables (not the manifest's `[env]`, which
/// the plugin itself could widen).
fn confinement(
    manifest: &Manifest,
    cx: &LoadContext<'_>,
    launcher: &process::Launcher,
    venv: Option<&Path>,
    data_dir: &Path,
    host_readable: &[PathBuf],
) -> Result<(process::sandbox::Confinement, Vec<String>), LoadError> {
    // From the host's environment, never the plugin's `[env]`: a manifest
    // the plugin can rewrite must not be able to make paths readable.
    let var = |name: &str| (cx.host_env)(name);
    let path_vars = ["PYTHONPATH", "NODE_PATH", "RUBYLIB", "GEM_HOME", "GEM_PATH", "VIRTUAL_ENV"]
        .iter()
        .filter_map(|name| var(name))
        .flat_map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .filter(|p| p.is_absolute())
        .chain(host_readable.iter().cloned())
        .collect();
    let (user_home, hook_home) = (cx.user_home(), cx.hook_home());
    // Shared by every plugin (what is made for one plugin waits for its
    // first call): a HOME that exists, for plugins the sandbox does not
    // confine too.
    if let Err(e) = Home::ensure_dir(&hook_home) {
        tracing::warn!("the hooks' HOME: {e}");
    }
    let program = match launcher {
        process::Launcher::Program { program, .. } => Some(program.as_path()),
        _ => None,
    };
    Ok(process::sandbox::Confinement::for_plugin(process::sandbox::Inputs {
        plugin: &manifest.name,
        settings: &manifest.settings,
        plugin_dir: &manifest.dir,
        data_dir,
        user_home: user_home.as_deref(),
        hook_home: Some(&hook_home),
        earlier_home: user_home.as_deref().filter(|_| !cx.home.is_throw_away()),
        launcher: program,
        venv,
        path_vars,
        max_processes: cx.config.sandbox.max_processes,
        require: cx.config.sandbox.require,
        installer: false,
    })?)
}

/// The virtual environment a python plugin's hooks run in, if it has one.
fn plugin_venv(manifest: &Manifest, cx: &LoadContext<'_>, warnings: &mut Vec<String>) -> Option<PathBuf> {
    use crate::runner::process::venv::{Found, find};
    match find(cx.home, &manifest.name) {
        Found::Ready(dir) => Some(dir),
        Found::None => None,
        Found::Broken(dir) => {
            warnings.push(format!(
                "the virtual environment `{}` of plugin '{}' has no working bin/python; its hooks run on the \
                 system python. Rebuild it with `ctxhost plugin install --force <source>`",
                dir.display(),
                manifest.name
            ));
            None
        }
    }
}

/// `[config.*]` defaults merged with `[plugin_config.<name>]` from config.toml,
/// and the current values of `[agent_config]` (the agent config service's),
/// written as JSON to `<home>/data/<name>/config.json`: the file one-shot
/// hooks find in `LIBREFANG_PLUGIN_CONFIG`. Neither table, no file.
fn write_config(
    manifest: &Manifest,
    cx: &LoadContext<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<PathBuf>, LoadError> {
    let overrides = cx.config.plugin_config.get(&manifest.name);
    if manifest.config.is_empty() && manifest.agent.config.is_empty() {
        if overrides.is_some() {
            warnings.push(format!(
                "config.toml has [plugin_config.{}] but the plugin declares no [config]; it is ignored",
                manifest.name
            ));
        }
        return Ok(None);
    }
    let mut resolved = resolved_config(manifest, cx, warnings);
    if !manifest.agent.config.is_empty() {
        let stored = crate::host::store::open(cx.home)
            .and_then(|store| crate::host::store::migrate::plugin(cx.home, &*store, &manifest.name).map(|_| store))
            .map_err(crate::host::config::PluginConfigError::from)
            .and_then(|store| {
                crate::host::config::PluginConfig::open(store, &manifest.name, manifest.agent.config.clone())
            });
        match stored {
            Ok(config) => resolved.extend(config.values()),
            Err(e) => warnings.push(format!("[agent_config]: {e}; the hooks see the defaults")),
        }
    }
    let path = config_view_file(cx.home, &manifest.name);
    let text = serde_json::to_string_pretty(&resolved).unwrap_or_else(|_| "{}".into());
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        Home::write_atomic(&path, text.as_bytes())
            .map_err(|source| LoadError::ConfigFile { path: path.clone(), source })?;
    }
    Ok(Some(path))
}

/// `<home>/data/<name>/config.json`: the config file of one-shot hooks.
pub fn config_view_file(home: &Home, plugin: &str) -> PathBuf {
    home.data_dir(plugin).join("config.json")
}

/// Any plugin, ready for the engine: script or component.
pub struct LoadedPlugin {
    /// The plugin's identity (its directory name).
    pub name: String,
    /// `version` of its manifest.
    pub version: String,
    pub runner: std::sync::Arc<dyn crate::runner::Runner>,
    pub settings: crate::manifest::ExecSettings,
    /// The hooks it takes part in: `[hooks]` for scripts, `describe()` for components.
    pub hooks: std::collections::BTreeSet<crate::protocol::HookName>,
    /// Agent-loop declarations: the manifest's for scripts, `describe-agent`
    /// for components.
    pub agent: crate::manifest::AgentDecl,
    /// A FaustBot plugin's plugin.json (its permissions and priority).
    pub faust: Option<std::sync::Arc<crate::faust::PluginJson>>,
    pub warnings: Vec<String>,
}

/// Loads the plugin in `dir`, whatever its kind: a component plugin when
/// plugin.toml says `runtime = "wasm"` and `component = "<file>.wasm"`, else a
/// script plugin.
///
/// # Errors
/// As [`load_script_plugin`]; for a component also a compile, link or
/// `describe` failure.
pub fn load_plugin(dir: &Path, cx: &LoadContext<'_>) -> Result<LoadedPlugin, LoadError> {
    if crate::faust::is_faust_plugin(dir) {
        return faust::load(dir, cx);
    }
    let loaded = granted(Manifest::load_with_access(dir, &|plugin, var| cx.env_access(plugin, var))?, cx);
    match loaded.manifest.component.clone() {
        Some(component) => {
            let manifest::Loaded { manifest, mut warnings } = loaded;
            let config = resolved_config(&manifest, cx, &mut warnings);
            let runner = crate::runner::wasm::component::ComponentRunner::load(
                &manifest.name,
                &component.path,
                wasm_limits(&manifest, &mut warnings),
                config,
                cx.home.data_dir(&manifest.name),
                Some(&cx.home.cache_dir().join("components")),
            )?;
            let hooks = runner.hooks().clone();
            let agent = runner.agent_decl().cloned().unwrap_or_else(|| manifest.agent.clone());
            Ok(LoadedPlugin {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                runner: std::sync::Arc::new(crate::runner::wasm::component::ComponentHandle(std::sync::Arc::new(
                    runner,
                ))),
                agent,
                faust: None,
                settings: manifest.settings,
                hooks,
                warnings,
            })
        }
        None if loaded.manifest.settings.runtime == Runtime::Wasm => {
            // LibreFang's per-hook core modules (spec section 11).
            let manifest::Loaded { manifest, mut warnings } = loaded;
            let paths = manifest.hooks.iter().map(|(h, s)| (*h, s.path.as_path())).collect();
            let runner = crate::runner::wasm::core_module::CoreModuleRunner::load(
                &manifest.name,
                &paths,
                wasm_limits(&manifest, &mut warnings),
            )?;
            Ok(LoadedPlugin {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                settings: manifest.settings.clone(),
                hooks: runner.hooks().collect(),
                agent: manifest.agent.clone(),
                faust: None,
                runner: std::sync::Arc::new(crate::runner::wasm::core_module::CoreModuleHandle(std::sync::Arc::new(
                    runner,
                ))),
                warnings,
            })
        }
        None => {
            let (runner, warnings) = script_runner(loaded, cx, Venv::OfPlugin)?;
            Ok(LoadedPlugin::script(runner, warnings))
        }
    }
}

impl LoadedPlugin {
    /// A script plugin, taking part in the hooks its `[hooks]` names.
    pub fn script(runner: ProcessRunner, warnings: Vec<String>) -> Self {
        let manifest = &runner.plugin().manifest;
        LoadedPlugin {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            settings: manifest.settings.clone(),
            hooks: manifest.hooks.keys().copied().collect(),
            agent: manifest.agent.clone(),
            faust: None,
            runner: std::sync::Arc::new(runner),
            warnings,
        }
    }
}

/// The limits of a wasm plugin (component or core modules) from `[sandbox]`;
/// the deadline defaults to the hook timeout. Core modules have no WASI, so
/// they use no `dirs` or `env`.
///
/// A `[sandbox] dirs` entry outside the plugin's own directory is a
/// privilege like `readable_paths`: kept only when the effective (granted)
/// `readable_paths` — or `writable_paths` for `rw` — name it too, so a
/// component rewriting its plugin.toml (`host = "/"`) gets nothing new.
fn wasm_limits(manifest: &Manifest, warnings: &mut Vec<String>) -> crate::runner::wasm::component::Limits {
    let sandbox = &manifest.sandbox;
    let own = std::fs::canonicalize(&manifest.dir).unwrap_or_else(|_| manifest.dir.clone());
    let granted = |list: &[PathBuf], host: &Path| {
        list.iter().any(|p| std::fs::canonicalize(own.join(p)).is_ok_and(|c| c == host))
    };
    let dirs = sandbox
        .dirs
        .iter()
        .filter(|d| {
            let s = &manifest.settings;
            let ok = d.host.starts_with(&own)
                || s.allow_filesystem
                || match d.mode {
                    crate::manifest::DirMode::Ro => {
                        granted(&s.readable_paths, &d.host) || granted(&s.writable_paths, &d.host)
                    }
                    crate::manifest::DirMode::Rw => granted(&s.writable_paths, &d.host),
                };
            if !ok {
                warnings.push(format!(
                    "plugin '{}': `[sandbox] dirs` host `{}` is outside the plugin's directory and not granted; \
                     it is left out (list it in `{}` and run `ctxhost plugin grant {}`)",
                    manifest.name,
                    d.host.display(),
                    if d.mode == crate::manifest::DirMode::Rw { "writable_paths" } else { "readable_paths" },
                    manifest.name
                ));
            }
            ok
        })
        .cloned()
        .collect();
    crate::runner::wasm::component::Limits {
        fuel: sandbox.fuel,
        timeout_ms: sandbox.timeout_ms.unwrap_or(manifest.settings.hook_timeout_secs.saturating_mul(1000)),
        memory_mb: sandbox.memory_mb,
        dirs,
        env: sandbox.env.clone(),
    }
}

/// `[config.*]` defaults merged with the operator's overrides, as a map.
fn resolved_config(
    manifest: &Manifest,
    cx: &LoadContext<'_>,
    warnings: &mut Vec<String>,
) -> serde_json::Map<String, serde_json::Value> {
    let overrides = cx.config.plugin_config.get(&manifest.name).cloned().unwrap_or_default();
    let (resolved, w) = manifest::resolve_config(&manifest.config, &overrides);
    warnings.extend(w);
    resolved
}

/// Opens `plugin`'s services on `shared` and attaches them to its runner:
/// what every host of agent-loop plugins (engine, `ctxhost hook`) does after
/// loading one.
///
/// # Errors
/// The plugin's stored config cannot be read, or an old state file of its
/// own cannot be imported (named; it is left as it was).
pub fn attach_services(
    plugin: &LoadedPlugin,
    shared: &std::sync::Arc<crate::host::services::SharedServices>,
    home: &crate::home::Home,
) -> Result<std::sync::Arc<crate::host::services::PluginServices>, crate::host::services::ServiceError> {
    // Its own old state files, left by an older ctxhost (or written by hand).
    crate::host::store::migrate::plugin(home, &**shared.store(), &plugin.name)
        .map_err(|e| crate::host::services::ServiceError::service(e.to_string()))?;
    let view = crate::host::services::ConfigView::existing(config_view_file(home, &plugin.name));
    let s = std::sync::Arc::new(crate::host::services::PluginServices::open(
        shared.clone(),
        &plugin.name,
        plugin.agent.config.clone(),
        view,
    )?);
    plugin.runner.attach_services(s.clone());
    Ok(s)
}
