//! Why a hook call failed. Texts follow LibreFang's where it has one, so
//! operators moving over recognise them.

use std::path::PathBuf;

use crate::manifest::HookPathError;
use crate::protocol::{HookName, NoOutput};

/// A failed hook call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    #[error("plugin '{plugin}' has no `{hook}` hook (it declares: {declared})")]
    NotDeclared { plugin: String, hook: HookName, declared: String },
    #[error(transparent)]
    Path(#[from] HookPathError),
    /// No usable launcher or executable for the script.
    #[error("{0}")]
    Launch(String),
    #[error("Failed to spawn hook: cannot run `{}`: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("IO error: {0}")]
    Io(#[from] std::io::Error),
    #[error("Hook timed out after {secs}s")]
    Timeout { secs: u64 },
    #[error("Hook {stream} exceeded the {} KiB output cap; the hook was killed", cap / 1024)]
    OutputCap { stream: &'static str, cap: usize },
    #[error("Hook exited with {label}{}", stderr_suffix(stderr))]
    Exit { label: String, code: Option<i32>, stderr: String },
    #[error(transparent)]
    NoOutput(#[from] NoOutput),
    #[error("{0}")]
    Unsupported(String),
    /// A persistent worker broke the line protocol or keeps failing.
    #[error("persistent worker: {0}")]
    Worker(String),
    /// A component plugin could not load or its call trapped.
    #[error("component plugin {0}")]
    Component(String),
    /// A component's reply (or one host call's arguments) was more than the
    /// host takes in.
    #[error("component plugin {0}")]
    ComponentReply(#[from] crate::runner::wasm::ReplyTooLarge),
}

impl HookError {
    /// `plugin` was asked for `hook` but declares only `declared`.
    pub fn not_declared(plugin: &str, hook: HookName, declared: impl IntoIterator<Item = HookName>) -> Self {
        let declared: Vec<&str> = declared.into_iter().map(HookName::as_str).collect();
        HookError::NotDeclared {
            plugin: plugin.to_owned(),
            hook,
            declared: if declared.is_empty() { "none".into() } else { declared.join(", ") },
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() { " (stderr was empty)".to_owned() } else { format!("\nstderr: {stderr}") }
}
