//! `component = "<file>.wasm"` and `[sandbox]`: what a component plugin may
//! use. Nothing is granted unless declared: no directory, no environment
//! variable, no network (there is no way to declare one).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// How a granted directory may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirMode {
    #[default]
    Ro,
    Rw,
}

/// `dirs = [{ host, guest, mode }]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// Absolute (a relative `host` is taken from the plugin dir).
    pub host: PathBuf,
    /// Where the guest sees it, e.g. `/data`.
    pub guest: String,
    pub mode: DirMode,
}

/// The `[sandbox]` table, with defaults: fuel 1e9 per call, the hook timeout
/// as deadline, 64 MiB of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub fuel: u64,
    /// `None`: the hook timeout.
    pub timeout_ms: Option<u64>,
    pub memory_mb: u64,
    pub dirs: Vec<DirGrant>,
    pub env: BTreeMap<String, String>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox { fuel: 1_000_000_000, timeout_ms: None, memory_mb: 64, dirs: Vec::new(), env: BTreeMap::new() }
    }
}

/// The keys of `[sandbox]`.
pub const SANDBOX_KEYS: &[&str] = &["fuel", "timeout_ms", "memory_mb", "dirs", "env"];

/// The fields of one `[sandbox] dirs` entry.
pub const DIR_FIELDS: &[&str] = &["host", "guest", "mode"];

#[derive(Debug, Deserialize)]
pub(super) struct RawDir {
    pub host: String,
    pub guest: String,
    #[serde(default)]
    pub mode: DirMode,
}
