//! `plugin.toml` → [`Manifest`]: parsed once, checked once, trusted after.
//!
//! Loading follows the "loose then checked" pattern: the TOML is walked key by
//! key (so every error can name its key and every unread key is reported),
//! then turned into a `Manifest` whose hook paths are canonical and confined
//! to the plugin directory. This module reads files but never runs anything.
//!
//! The plugin's identity is its **directory name**, as in LibreFang (config
//! file, data dir and logs are keyed by it); the `name` key must obey the same
//! rule, and a mismatch is warned about.

mod agent;
pub mod beneath;
mod config;
mod error;
mod reader;
mod runtime;
mod sandbox;
pub mod schema;
mod settings;

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use agent::{AGENT_KEYS, AgentDecl, Frontend, ScheduleSpec, ToolSpec};
pub use config::{CONFIG_FIELDS, ConfigField, ConfigType, resolve as resolve_config};
pub use error::{HookPathError, ManifestError, ManifestErrorKind};
pub use reader::LIBREFANG_ONLY;
pub use runtime::Runtime;
pub use sandbox::{DIR_FIELDS, DirGrant, DirMode, SANDBOX_KEYS, Sandbox};
pub use settings::{CIRCUIT_BREAKER_FIELDS, CircuitBreaker, ExecSettings, FailurePolicy, SETTING_KEYS, WorkerProtocol};

use crate::protocol::HookName;
use reader::Reader;

/// The manifest file name inside a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.toml";

/// The top-level keys of plugin.toml besides the execution settings
/// ([`SETTING_KEYS`], accepted at the top level too); anything else is warned
/// about and kept in [`Manifest::unknown`].
pub const TOP_KEYS: &[&str] = &[
    "name",
    "version",
    "description",
    "author",
    "requirements",
    "librefang_min_version",
    "env",
    "config",
    "requires",
    "i18n",
    "plugin_depends",
    "integrity",
    "hooks",
    "component",
    "sandbox",
    "priority",
    "tools",
    "schedules",
    "agent_config",
    "prompt_suffix",
    "frontend",
    "heartbeat_secs",
];

/// A checked plugin manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The plugin directory, canonical.
    pub dir: PathBuf,
    /// The plugin's identity: its directory name.
    pub name: String,
    /// The `name` key as written.
    pub declared_name: String,
    pub version: String,
    pub description: Option<String>,
    pub author: Option<String>,
    /// Dependencies file, relative to the plugin dir (python: `requirements.txt`).
    pub requirements: Option<String>,
    pub librefang_min_version: Option<String>,
    /// `[env]`, with `${VAR}` values already expanded.
    pub env: BTreeMap<String, String>,
    pub config: BTreeMap<String, ConfigField>,
    pub requires: Vec<Requirement>,
    pub i18n: BTreeMap<String, I18n>,
    pub plugin_depends: Vec<String>,
    pub integrity: BTreeMap<String, String>,
    /// Hook scripts, canonical and inside `dir`.
    pub hooks: BTreeMap<HookName, HookScript>,
    /// `component = "<file>.wasm"`: a component plugin (runtime `wasm`).
    pub component: Option<HookScript>,
    /// `[sandbox]`: the limits and grants of a component plugin.
    pub sandbox: Sandbox,
    pub settings: ExecSettings,
    /// Agent-loop declarations: priority, tools, schedules, config schema, …
    pub agent: AgentDecl,
    /// Keys this version does not know, kept as written.
    pub unknown: toml::Table,
}

/// A hook script: the path as written and where it resolved at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookScript {
    pub raw: String,
    pub path: PathBuf,
}

/// The fields of a `[[requires]]` entry.
pub const REQUIRES_FIELDS: &[&str] = &["binary", "install_hint"];

/// The fields of an `[i18n.<lang>]` entry.
pub const I18N_FIELDS: &[&str] = &["name", "description"];

/// A `[[requires]]` entry: a binary the plugin needs on PATH.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Requirement {
    pub binary: String,
    #[serde(default)]
    pub install_hint: Option<String>,
}

/// An `[i18n.<lang>]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct I18n {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// A loaded manifest and the warnings its loading produced.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub manifest: Manifest,
    pub warnings: Vec<String>,
}

/// Checks a plugin name: ASCII letters, digits, `-` and `_` only.
pub fn validate_name(name: &str) -> Result<(), String> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        Ok(())
    } else {
        Err(format!("Invalid plugin name '{name}': must contain only ASCII letters, digits, hyphens, and underscores"))
    }
}

/// A name a process environment can hold: not empty, no `=`, no NUL.
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// Resolves a hook script path against the (canonical) plugin dir: no `..`
/// component, exists, is a file, and stays inside the dir after following
/// symlinks. The runner calls this again before every call.
pub fn check_hook_path(dir: &Path, raw: &str) -> Result<PathBuf, HookPathError> {
    let given = Path::new(raw);
    if given.components().any(|c| c == Component::ParentDir) {
        return Err(HookPathError::Traversal(given.to_owned()));
    }
    let full = dir.join(given);
    if !full.exists() {
        return Err(HookPathError::NotFound(full));
    }
    let canonical = full.canonicalize().map_err(|source| HookPathError::Unresolvable { path: full, source })?;
    if !canonical.starts_with(dir) {
        return Err(HookPathError::Escapes { path: canonical, dir: dir.to_owned() });
    }
    if !canonical.is_file() {
        return Err(HookPathError::NotFound(canonical));
    }
    Ok(canonical)
}

impl Manifest {
    /// Loads `<dir>/plugin.toml`, reading `${VAR}` values of `[env]` from the
    /// host environment.
    ///
    /// # Errors
    /// A [`ManifestError`] naming the file, the key and the reason.
    pub fn load(dir: &Path) -> Result<Loaded, ManifestError> {
        Self::load_with_env(dir, &|var| std::env::var(var).ok())
    }

    /// [`Manifest::load`] with an explicit environment lookup: every
    /// `${VAR}` the lookup answers is expanded.
    pub fn load_with_env(dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ManifestError> {
        Self::load_with_access(dir, &|_, var| EnvAccess::Allowed(env(var)))
    }

    /// [`Manifest::load`] where the caller decides, per plugin and variable,
    /// whether `${VAR}` may read the host's value ([`EnvAccess`]); a denied
    /// variable expands to empty, with a warning naming it.
    pub fn load_with_access(dir: &Path, env: &EnvSource<'_>) -> Result<Loaded, ManifestError> {
        let file = dir.join(MANIFEST_FILE);
        let fail = |key: Option<&str>, kind| ManifestError::new(&file, key, kind);
        let canonical = dir.canonicalize().map_err(|e| fail(None, ManifestErrorKind::Read(e)))?;
        // Beneath the plugin dir and never through a link: a plugin.toml that
        // is a link (to /etc/shadow, to another plugin's manifest) is refused
        // before a byte of it is read, so no error can show its content.
        let text = beneath::Root::open(&canonical)
            .and_then(|root| root.read_to_string(Path::new(MANIFEST_FILE), beneath::MANIFEST_LIMIT))
            .map_err(|e| fail(None, ManifestErrorKind::Refused(e.reason)))?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| fail(None, ManifestErrorKind::Syntax(e.to_string().trim_end().to_owned())))?;
        // The name of the directory as given (a symlinked plugin dir is known
        // by the link's name); `.` and the like fall back to the real name.
        let name = dir
            .file_name()
            .filter(|n| *n != "." && *n != "..")
            .or_else(|| canonical.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        validate_name(&name).map_err(|m| fail(None, ManifestErrorKind::Invalid(format!("directory name: {m}"))))?;
        Self::from_table(&file, canonical, name, &table, env)
    }

    /// A manifest for LibreFang's manual hooks: `[context_engine.hooks]` of
    /// `config_file`, paths relative to the config file's directory, known as
    /// `name`.
    ///
    /// # Errors
    /// As for [`Manifest::load`], naming the config file.
    pub fn from_manual_hooks(
        config_file: &Path,
        name: &str,
        hooks: &toml::Table,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Loaded, ManifestError> {
        let base = config_file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir = base.canonicalize().map_err(|e| ManifestError::new(config_file, None, ManifestErrorKind::Read(e)))?;
        let mut table = toml::Table::new();
        table.insert("name".into(), toml::Value::String(name.into()));
        table.insert("version".into(), toml::Value::String("0.0.0".into()));
        table.insert("hooks".into(), toml::Value::Table(hooks.clone()));
        Self::from_table(config_file, dir, name.to_owned(), &table, &|_, var| EnvAccess::Allowed(env(var)))
    }

    /// A manifest ctxhost made itself for the plugin in `dir` (a FaustBot
    /// plugin's, from its plugin.json): the same checks, errors naming `file`.
    ///
    /// # Errors
    /// As for [`Manifest::load`].
    pub fn from_generated(
        file: &Path,
        dir: &Path,
        name: &str,
        table: &toml::Table,
        env: &EnvSource<'_>,
    ) -> Result<Loaded, ManifestError> {
        let canonical = dir.canonicalize().map_err(|e| ManifestError::new(file, None, ManifestErrorKind::Read(e)))?;
        Self::from_table(file, canonical, name.to_owned(), table, env)
    }

    /// The checks shared by every source of a manifest.
    fn from_table(
        file: &Path,
        dir: PathBuf,
        name: String,
        table: &toml::Table,
        env: &EnvSource<'_>,
    ) -> Result<Loaded, ManifestError> {
        let fail = |key: Option<&str>, kind| ManifestError::new(file, key, kind);
        let mut r = Reader::new(file, table)?;
        let declared_name: String = r.required("name")?;
        validate_name(&declared_name).map_err(|m| r.error("name", ManifestErrorKind::Invalid(m)))?;
        if name != declared_name {
            r.warn(format!(
                "`name` is '{declared_name}' but the directory is '{name}'; the plugin is known as '{name}' \
                 (its directory name), as in LibreFang"
            ));
        }
        let version: String = r.required("version")?;
        let description = r.top("description")?;
        let author = r.top("author")?;
        let requirements: Option<String> = r.top("requirements")?;
        if let Some(req) = &requirements
            && !dir.join(req).is_file()
        {
            r.warn(format!("key `requirements`: '{req}' does not exist in the plugin directory"));
        }
        let librefang_min_version = r.top("librefang_min_version")?;
        let raw_env: BTreeMap<String, String> = r.top("env")?.unwrap_or_default();
        if let Some(bad) = raw_env.keys().find(|k| !valid_env_name(k)) {
            return Err(r.error(
                &format!("env.{bad}"),
                ManifestErrorKind::Invalid("not a valid environment variable name (empty, or holds `=` or NUL)".into()),
            ));
        }
        let env = expand_env(&name, raw_env, env, &mut r.warnings);

        let raw_config: toml::Table = r.top("config")?.unwrap_or_default();
        let mut config = BTreeMap::new();
        for (key, value) in raw_config {
            let field: ConfigField = r.known_fields(&format!("config.{key}"), value, CONFIG_FIELDS)?;
            if let Some(default) = &field.default
                && !field.kind.accepts(default)
            {
                r.warn(format!("key `config.{key}`: the default {default} is not a {}", field.kind.as_str()));
            }
            config.insert(key, field);
        }
        let raw_requires: Vec<toml::Value> = r.top("requires")?.unwrap_or_default();
        let mut requires = Vec::with_capacity(raw_requires.len());
        for (i, value) in raw_requires.into_iter().enumerate() {
            requires.push(r.known_fields(&format!("requires[{i}]"), value, REQUIRES_FIELDS)?);
        }
        let raw_i18n: toml::Table = r.top("i18n")?.unwrap_or_default();
        let mut i18n = BTreeMap::new();
        for (lang, value) in raw_i18n {
            i18n.insert(lang.clone(), r.known_fields(&format!("i18n.{lang}"), value, I18N_FIELDS)?);
        }
        let plugin_depends: Vec<String> = r.top("plugin_depends")?.unwrap_or_default();
        for dep in &plugin_depends {
            validate_name(dep).map_err(|m| r.error("plugin_depends", ManifestErrorKind::Invalid(m)))?;
        }
        let integrity: BTreeMap<String, String> = r.top("integrity")?.unwrap_or_default();

        let mut hooks = BTreeMap::new();
        for hook in HookName::ALL {
            if let Some(raw) = r.hooks_entry::<String>(hook.as_str())? {
                let path = check_hook_path(&dir, &raw)
                    .map_err(|e| r.error(&format!("hooks.{}", hook.as_str()), ManifestErrorKind::HookPath(e)))?;
                hooks.insert(hook, HookScript { raw, path });
            }
        }
        let settings = ExecSettings::read(&mut r)?;
        let component = match r.top::<String>("component")? {
            Some(raw) => {
                let path =
                    check_hook_path(&dir, &raw).map_err(|e| r.error("component", ManifestErrorKind::HookPath(e)))?;
                Some(HookScript { raw, path })
            }
            None => None,
        };
        let sandbox = read_sandbox(&mut r, &dir)?;
        let agent = AgentDecl::read(&mut r)?;
        if component.is_some() && settings.runtime != Runtime::Wasm {
            return Err(r.error(
                "component",
                ManifestErrorKind::Invalid(format!(
                    "a component plugin needs `runtime = \"wasm\"` (it is `{}`)",
                    settings.runtime
                )),
            ));
        }
        let hooks_known: Vec<&str> =
            HookName::ALL.iter().map(|h| h.as_str()).chain(SETTING_KEYS.iter().copied()).collect();
        let top_known: Vec<&str> = TOP_KEYS.iter().chain(SETTING_KEYS).copied().collect();
        let (unknown, mut warnings) = r.finish(&top_known, &hooks_known);
        if let Some(toml::Value::Table(unknown_hooks)) = unknown.get("hooks")
            && let Some((key, hook)) = unknown_hooks.keys().find_map(|k| misspelt_hook(k, &hooks_known).map(|h| (k, h)))
        {
            let kind = ManifestErrorKind::MisspeltHook { key: key.clone(), hook: hook.to_owned() };
            return Err(fail(Some(&format!("hooks.{key}")), kind));
        }

        check_integrity(&dir, &integrity).map_err(|(key, kind)| fail(Some(&key), kind))?;
        for dep in &plugin_depends {
            let installed = dir.parent().is_some_and(|root| root.join(dep).join(MANIFEST_FILE).is_file());
            if !installed {
                return Err(fail(Some("plugin_depends"), ManifestErrorKind::MissingDependency(dep.clone())));
            }
        }
        if hooks.is_empty() && component.is_none() {
            warnings.push("the plugin declares no hooks in [hooks]".to_owned());
        }

        let manifest = Manifest {
            dir,
            name,
            declared_name,
            version,
            description,
            author,
            requirements,
            librefang_min_version,
            env,
            config,
            requires,
            i18n,
            plugin_depends,
            integrity,
            hooks,
            component,
            sandbox,
            settings,
            agent,
            unknown,
        };
        Ok(Loaded { manifest, warnings })
    }

    /// The script for `hook`, if the plugin declares it.
    pub fn hook(&self, hook: HookName) -> Option<&HookScript> {
        self.hooks.get(&hook)
    }
}

/// `[sandbox]`: limits and grants, with defaults.
/// The hook an unknown `[hooks]` key most likely meant, when the nearest
/// known key (hooks and settings alike) is a hook name within "did you mean"
/// distance: `ingset` → `ingest`. A key nearer a setting (`hook_timeout`) or
/// near nothing stays an ignored key with a warning.
fn misspelt_hook<'a>(key: &str, hooks_known: &[&'a str]) -> Option<&'a str> {
    if reader::LIBREFANG_ONLY.contains(&key) {
        return None;
    }
    let nearest = crate::hint::closest(key, hooks_known.iter().copied())?;
    HookName::ALL.iter().any(|h| h.as_str() == nearest).then_some(nearest)
}

fn read_sandbox(r: &mut Reader<'_>, dir: &Path) -> Result<Sandbox, ManifestError> {
    let mut sandbox = Sandbox::default();
    let Some(table) = r.top::<toml::Value>("sandbox")? else { return Ok(sandbox) };
    let table: toml::Table = r.known_fields("sandbox", table, SANDBOX_KEYS)?;
    let get = |r: &mut Reader<'_>, key: &str| -> Result<Option<u64>, ManifestError> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if *n > 0 => Ok(Some(*n as u64)),
            Some(toml::Value::Float(f)) if *f >= 1.0 => Ok(Some(*f as u64)),
            Some(other) => Err(r.error(
                &format!("sandbox.{key}"),
                ManifestErrorKind::Invalid(format!("expected a positive number, found {other}")),
            )),
        }
    };
    if let Some(fuel) = get(r, "fuel")? {
        sandbox.fuel = fuel;
    }
    sandbox.timeout_ms = get(r, "timeout_ms")?;
    if let Some(mb) = get(r, "memory_mb")? {
        sandbox.memory_mb = mb;
    }
    if let Some(dirs) = table.get("dirs") {
        let toml::Value::Array(entries) = dirs else {
            return Err(r.error(
                "sandbox.dirs",
                ManifestErrorKind::Invalid(format!("expected an array of tables, found {}", dirs.type_str())),
            ));
        };
        for (i, entry) in entries.iter().enumerate() {
            let d: sandbox::RawDir = r.known_fields(&format!("sandbox.dirs[{i}]"), entry.clone(), DIR_FIELDS)?;
            let host = dir.join(&d.host);
            let host = host.canonicalize().map_err(|e| {
                r.error("sandbox.dirs", ManifestErrorKind::Invalid(format!("host dir `{}`: {e}", host.display())))
            })?;
            if !host.is_dir() {
                return Err(r.error(
                    "sandbox.dirs",
                    ManifestErrorKind::Invalid(format!("host `{}` is not a directory", host.display())),
                ));
            }
            if !d.guest.starts_with('/') {
                return Err(r.error(
                    "sandbox.dirs",
                    ManifestErrorKind::Invalid(format!("guest path `{}` must be absolute", d.guest)),
                ));
            }
            sandbox.dirs.push(DirGrant { host, guest: d.guest, mode: d.mode });
        }
    }
    if let Some(env) = table.get("env") {
        sandbox.env = env.clone().try_into().map_err(|e: toml::de::Error| {
            r.error("sandbox.env", ManifestErrorKind::Invalid(e.message().trim_end().to_owned()))
        })?;
    }
    Ok(sandbox)
}

/// Whether a `${VAR}` of a plugin's `[env]` may read the host's `VAR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvAccess {
    /// It may: the host's value, if set.
    Allowed(Option<String>),
    /// The operator did not allow it: it expands to empty, with a warning.
    Denied,
}

/// Answers, for a plugin (its name) and a host variable, what `${VAR}` in
/// its `[env]` expands to.
pub type EnvSource<'a> = dyn Fn(&str, &str) -> EnvAccess + 'a;

/// `[env]`: a value that is exactly `${VAR}` becomes the host's `VAR` when
/// `source` allows it (empty, with a warning, when unset or not allowed);
/// anything else passes through literally.
fn expand_env(
    plugin: &str,
    raw: BTreeMap<String, String>,
    source: &EnvSource<'_>,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, String> {
    raw.into_iter()
        .map(|(key, value)| {
            let var = value
                .strip_prefix("${")
                .and_then(|v| v.strip_suffix('}'))
                .filter(|v| v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            let value = match var {
                Some(var) if !var.is_empty() => match source(plugin, var) {
                    EnvAccess::Allowed(Some(value)) => value,
                    EnvAccess::Allowed(None) => {
                        warnings.push(format!(
                            "key `env.{key}`: host variable `{var}` is not set; the hook gets an empty value"
                        ));
                        String::new()
                    }
                    EnvAccess::Denied => {
                        warnings.push(format!(
                            "key `env.{key}`: plugin '{plugin}' may not read host variable `{var}`; the hook gets \
                             an empty value. Allow it for this plugin with `ctxhost plugin grant {plugin} --env \
                             {var}`, or for every plugin with `allowed_env_vars = [\"{var}\"]` in config.toml"
                        ));
                        String::new()
                    }
                },
                _ => value,
            };
            (key, value)
        })
        .collect()
}

/// `[integrity]`: each listed file (inside the plugin dir) must hash to its
/// lowercase hex SHA-256.
fn check_integrity(dir: &Path, entries: &BTreeMap<String, String>) -> Result<(), (String, ManifestErrorKind)> {
    for (rel, expected) in entries {
        let key = format!("integrity.\"{rel}\"");
        let path = check_hook_path(dir, rel).map_err(|e| (key.clone(), ManifestErrorKind::HookPath(e)))?;
        // The checked path, read without following a link swapped in since.
        let bytes = beneath::read_no_symlinks(&path, u64::MAX)
            .map_err(|e| (key.clone(), ManifestErrorKind::Refused(e.reason)))?;
        let actual = hex::encode(Sha256::digest(&bytes));
        if !actual.eq_ignore_ascii_case(expected.trim()) {
            return Err((key, ManifestErrorKind::Integrity { path: rel.clone(), expected: expected.clone(), actual }));
        }
    }
    Ok(())
}
