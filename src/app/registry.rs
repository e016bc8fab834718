//! The operator's records about installed plugins: what is in the plugins
//! dir ([`installed`], [`plugin_dir`]), which plugins are turned on
//! ([`is_enabled`], from the operator's record in `host::state`), a plugin's
//! name → directory with a did-you-mean, and the errors of managing them
//! ([`RegistryError`]). What each plugin *is* — loaded, its status — is the
//! catalog's (`app::catalog`).
//!
//! Everything here is read from disk on every call — a plugin installed a
//! second ago is listed — and every record file is replaced atomically. This
//! module never loads a plugin or runs a hook.

use std::path::{Path, PathBuf};

use crate::home::Home;
use crate::manifest::{MANIFEST_FILE, ManifestError};

pub use crate::host::filestore::StoreError;
use crate::host::state;

/// A plugin-management operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("no plugin `{name}` in `{}`{hint}", dir.display())]
    UnknownPlugin { name: String, dir: PathBuf, hint: String },
    #[error("{0}")]
    InvalidName(String),
    #[error(
        "`{}` is a FaustBot plugin (plugin.json): `plugin install` takes plugin.toml plugins; copy the directory \
         into the plugins dir instead, then install its dependencies with `ctxhost plugin deps <id>`",
        .0.display()
    )]
    FaustBot(PathBuf),
    #[error("`{}` is not a plugin directory: it has no {MANIFEST_FILE}", .0.display())]
    NotAPlugin(PathBuf),
    #[error("plugin `{name}` is already installed at `{}`\n  hint: pass --force to replace it", dir.display())]
    Exists { name: String, dir: PathBuf },
    #[error("cannot install `{}`: it holds the plugins dir `{}`", source_dir.display(), plugins_dir.display())]
    HoldsPluginsDir { source_dir: PathBuf, plugins_dir: PathBuf },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("plugin `{name}` needs {} not found on PATH{}", list_binaries(missing), binary_hints(missing))]
    MissingBinaries { name: String, missing: Vec<crate::manifest::Requirement> },
    #[error("plugin `{name}` has `{requirements}` but no python to build its virtual environment with: {reason}")]
    NoPython { name: String, requirements: String, reason: String },
    #[error("failed to build the virtual environment of plugin `{name}`: {source}")]
    Venv {
        name: String,
        #[source]
        source: crate::runner::process::venv::VenvError,
    },
    /// A FaustBot plugin's dependencies could not be installed.
    #[error("the dependencies of plugin `{name}`: {source}")]
    Deps {
        name: String,
        #[source]
        source: Box<crate::faust::deps::DepsError>,
    },
    /// The plugin does not load; `reason` names the source's files.
    #[error("plugin `{name}` does not load: {reason}")]
    Load { name: String, reason: String },
    #[error("failed to {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state store failed.
    #[error(transparent)]
    StateStore(#[from] crate::host::store::StoreError),
    /// Its content hash could not be computed (`app::catalog::content`).
    #[error("plugin `{name}`: its content hash: {source}")]
    Content {
        name: String,
        #[source]
        source: crate::app::catalog::content::ContentError,
    },
}

fn list_binaries(missing: &[crate::manifest::Requirement]) -> String {
    let names: Vec<String> = missing.iter().map(|r| format!("`{}`", r.binary)).collect();
    format!("{} {}", if names.len() == 1 { "a binary" } else { "binaries" }, names.join(", "))
}

fn binary_hints(missing: &[crate::manifest::Requirement]) -> String {
    missing
        .iter()
        .map(|r| match &r.install_hint {
            Some(hint) => format!("\n  hint: {}: {hint}", r.binary),
            None => format!("\n  hint: install `{}` and make sure it is on PATH", r.binary),
        })
        .collect()
}

impl RegistryError {
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError {
        let path = path.to_owned();
        move |source| RegistryError::Io { action, path, source }
    }
}

/// Whether `name` is enabled: what the operator said (`ctxhost plugin
/// enable|disable`), else its manifest's default (a plugin.json may say
/// `"enabled": false`; everything else is on). Failing closed: with an
/// unreadable state file no plugin is enabled (with a warning) — what the
/// operator turned off must never come back on.
pub fn is_enabled(home: &Home, name: &str) -> bool {
    match state::choice(home, name) {
        Ok(Some(choice)) => choice,
        Ok(None) => default_enabled(home, name),
        Err(e) => {
            tracing::warn!("{e}; plugin '{name}' counts as disabled until the file is fixed");
            false
        }
    }
}

/// A plugin's own default: a plugin.json's `enabled`, else on.
fn default_enabled(home: &Home, name: &str) -> bool {
    let dir = home.plugins_dir().join(name);
    if !crate::faust::is_faust_plugin(&dir) {
        return true;
    }
    crate::faust::manifest::read_plugin_json(&dir)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("enabled").and_then(serde_json::Value::as_bool))
        .unwrap_or(true)
}

/// `version` and the runtime label as far as the manifest can be read at
/// all (for a plugin that fails to load): `""` and `"unknown"` when it cannot.
pub(crate) fn raw_facts(dir: &Path) -> (String, String) {
    let peek = super::catalog::Peek::read(dir);
    (peek.version, peek.runtime_label)
}

/// Names of the entries of the plugins dir that are directories (links
/// followed), sorted; hidden ones (ctxhost's own staging dirs) are left out.
pub fn installed(home: &Home) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(home.plugins_dir()) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// The directory of installed plugin `name`, or an error with the nearest
/// installed name.
///
/// # Errors
/// `name` is not a valid plugin name, or no such plugin is installed.
pub fn plugin_dir(home: &Home, name: &str) -> Result<PathBuf, RegistryError> {
    crate::manifest::validate_name(name).map_err(RegistryError::InvalidName)?;
    let dir = home.plugins_dir().join(name);
    if std::fs::symlink_metadata(&dir).is_ok() {
        return Ok(dir);
    }
    let names = installed(home);
    let hint = crate::hint::did_you_mean(name, names.iter().map(String::as_str));
    Err(RegistryError::UnknownPlugin { name: name.to_owned(), dir: home.plugins_dir().to_owned(), hint })
}
