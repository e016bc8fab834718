//! Manifest errors: every one names the file, the key (when there is one) and the reason.

use std::path::{Path, PathBuf};

/// Why a plugin.toml was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestErrorKind {
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    /// Not read: a link, `..`, not a regular file, too large, missing (see [`super::beneath`]).
    #[error("{0}")]
    Refused(#[source] super::beneath::Refusal),
    /// TOML syntax; the message carries the line and column.
    #[error("{0}")]
    Syntax(String),
    #[error("missing required key")]
    Missing,
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    HookPath(#[from] HookPathError),
    #[error(
        "integrity check failed for '{path}' (expected {expected}, got {actual}). The hook file may have been tampered with."
    )]
    Integrity { path: String, expected: String, actual: String },
    #[error("requires plugin '{0}' but it is not installed. Install it first.")]
    MissingDependency(String),
    /// An unknown `[hooks]` key within "did you mean" distance of a hook
    /// name: the hook it meant would silently never be called.
    #[error("`{key}` is not a hook, so the hook it names would never be called; did you mean `{hook}`?")]
    MisspeltHook { key: String, hook: String },
}

/// A refused plugin.toml.
#[derive(Debug, thiserror::Error)]
#[error("invalid plugin manifest `{}`{}: {kind}", file.display(), key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default())]
pub struct ManifestError {
    pub file: PathBuf,
    pub key: Option<String>,
    #[source]
    pub kind: ManifestErrorKind,
}

impl ManifestError {
    pub fn new(file: &Path, key: Option<&str>, kind: ManifestErrorKind) -> Self {
        ManifestError { file: file.to_owned(), key: key.map(str::to_owned), kind }
    }
}

/// A hook script path that may not be run. The texts are LibreFang's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookPathError {
    #[error("Path traversal denied: {}", .0.display())]
    Traversal(PathBuf),
    #[error("Script not found: {}", .0.display())]
    NotFound(PathBuf),
    #[error("Cannot resolve hook path '{}': {source}", path.display())]
    Unresolvable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("Hook script '{}' escapes plugin directory '{}'", path.display(), dir.display())]
    Escapes { path: PathBuf, dir: PathBuf },
}
