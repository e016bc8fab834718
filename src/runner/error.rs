//! Why a hook call failed: [`HookError`], one type for every runner (one-shot
//! scripts, persistent workers, components, core modules), and its
//! [`ErrorKind`], the word every caller can decide on (an HTTP status, a
//! retry, a metric) without reading the text. Texts follow LibreFang's where
//! the spec gives one (`Hook timed out after <n>s`, `Hook produced no
//! output`, exit labels), so operators moving over recognise them; the
//! others say what happened and which limit or setting it was.
//!
//! Owns the error type and the kind of each variant. Never names the plugin
//! twice: the callers that show an error (routes, the engine's failures, the
//! agent engine, logs) carry the plugin and the hook beside it.

use std::path::PathBuf;

use crate::manifest::HookPathError;
use crate::protocol::{HookName, NoOutput};

/// What kind of failure a [`HookError`] is: the same word for every runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The plugin has no such hook (undeclared, or not one its kind runs).
    NotDeclared,
    /// The plugin cannot run now: no launcher, its script or grant missing,
    /// the spawn refused, its code not loadable, a worker in a crash loop,
    /// or the engine's circuit breaker open.
    Unavailable,
    /// Past its deadline (`hook_timeout_secs`, a component's deadline).
    Timeout,
    /// A wasm plugin used up its fuel (`[sandbox] fuel`).
    OutOfFuel,
    /// A wasm plugin went over its memory limit (`[sandbox] memory_mb`).
    MemoryLimit,
    /// A wasm guest panicked.
    GuestPanic,
    /// The plugin died: killed by a signal, a trap other than the above, a
    /// worker gone without a reply.
    Crashed,
    /// The plugin said it failed: a non-zero exit code, a component's
    /// `failed`, a worker's JSON-RPC error answer.
    Failed,
    /// The plugin answered, but not with a usable reply: nothing, too much,
    /// not JSON, not what the hook takes.
    BadReply,
    /// The host itself failed (I/O, a thread, the wasm engine).
    Host,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::NotDeclared,
        ErrorKind::Unavailable,
        ErrorKind::Timeout,
        ErrorKind::OutOfFuel,
        ErrorKind::MemoryLimit,
        ErrorKind::GuestPanic,
        ErrorKind::Crashed,
        ErrorKind::Failed,
        ErrorKind::BadReply,
        ErrorKind::Host,
    ];

    /// The kind's name in JSON bodies and logs (`out_of_fuel`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotDeclared => "not_declared",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::OutOfFuel => "out_of_fuel",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::GuestPanic => "guest_panic",
            ErrorKind::Crashed => "crashed",
            ErrorKind::Failed => "failed",
            ErrorKind::BadReply => "bad_reply",
            ErrorKind::Host => "host",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed hook call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    #[error("plugin '{plugin}' has no `{hook}` hook (it declares: {declared})")]
    NotDeclared { plugin: String, hook: HookName, declared: String },
    /// The hook is not one this kind of plugin runs (a context-only component
    /// asked for an agent-loop hook).
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Path(#[from] HookPathError),
    /// The plugin cannot start: no usable launcher or executable for a
    /// script, a component's granted dir that cannot be opened.
    #[error("{0}")]
    Launch(String),
    #[error("Failed to spawn hook: cannot run `{}`: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A wasm plugin's code that cannot be loaded: not a component, does not
    /// compile, imports what the host does not provide, describes itself
    /// wrongly. `what` is `component` or `module`.
    #[error("{what} `{}`: {reason}", path.display())]
    Load { what: &'static str, path: PathBuf, reason: String },
    #[error("IO error: {0}")]
    Io(#[from] std::io::Error),
    /// The host's own failure other than I/O (the wasm engine, a thread).
    #[error("{0}")]
    Host(String),
    #[error("Hook timed out after {secs}s")]
    Timeout { secs: u64 },
    /// A wasm call past its deadline (milliseconds, as `[sandbox]` gives it).
    #[error("Hook timed out after {ms} ms")]
    Deadline { ms: u64 },
    #[error("out of fuel after {used} units (`[sandbox] fuel`)")]
    OutOfFuel { used: u64 },
    #[error("memory limit of {mb} MiB exceeded (`[sandbox] memory_mb`)")]
    MemoryLimit { mb: u64 },
    /// A guest panic, told by the last lines of its stderr.
    #[error("guest panic: {message}")]
    GuestPanic { message: String },
    /// Any other trap, by its own name (and the guest's last stderr).
    #[error("{0}")]
    Trap(String),
    #[error("Hook exited with {label}{}", stderr_suffix(stderr))]
    Exit { label: String, code: Option<i32>, stderr: String },
    /// The plugin reported a failure (a component's `failed`, a worker's
    /// JSON-RPC error answer), in its words.
    #[error("{0}")]
    Failed(String),
    #[error("Hook {stream} exceeded the {} KiB output cap; the hook was killed", cap / 1024)]
    OutputCap { stream: &'static str, cap: usize },
    #[error(transparent)]
    NoOutput(#[from] NoOutput),
    /// A reply the host cannot use (not JSON where JSON is the contract).
    #[error("{0}")]
    BadReply(String),
    /// A component's reply (or one host call's arguments) was more than the
    /// host takes in.
    #[error(transparent)]
    ReplyTooLarge(#[from] crate::runner::wasm::ReplyTooLarge),
    /// A persistent worker broke the line protocol.
    #[error("persistent worker: {0}")]
    Worker(String),
    /// A persistent worker keeps failing and is not restarted for a while.
    #[error("{0}")]
    CrashLoop(String),
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

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            HookError::NotDeclared { .. } | HookError::Unsupported(_) => ErrorKind::NotDeclared,
            HookError::Path(_)
            | HookError::Launch(_)
            | HookError::Spawn { .. }
            | HookError::Load { .. }
            | HookError::CrashLoop(_) => ErrorKind::Unavailable,
            HookError::Io(_) | HookError::Host(_) => ErrorKind::Host,
            HookError::Timeout { .. } | HookError::Deadline { .. } => ErrorKind::Timeout,
            HookError::OutOfFuel { .. } => ErrorKind::OutOfFuel,
            HookError::MemoryLimit { .. } => ErrorKind::MemoryLimit,
            HookError::GuestPanic { .. } => ErrorKind::GuestPanic,
            HookError::Trap(_) => ErrorKind::Crashed,
            // A code is the process's own verdict; no code, a signal or a
            // worker gone without one.
            HookError::Exit { code: Some(_), .. } => ErrorKind::Failed,
            HookError::Exit { code: None, .. } => ErrorKind::Crashed,
            HookError::Failed(_) => ErrorKind::Failed,
            HookError::OutputCap { .. }
            | HookError::NoOutput(_)
            | HookError::BadReply(_)
            | HookError::ReplyTooLarge(_)
            | HookError::Worker(_) => ErrorKind::BadReply,
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() { " (stderr was empty)".to_owned() } else { format!("\nstderr: {stderr}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_names() {
        let names: std::collections::BTreeSet<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn an_exit_code_is_a_failure_and_a_signal_a_crash() {
        let exit = |code| HookError::Exit { label: "x".into(), code, stderr: String::new() };
        assert_eq!(exit(Some(3)).kind(), ErrorKind::Failed);
        assert_eq!(exit(None).kind(), ErrorKind::Crashed);
    }

    #[test]
    fn librefang_texts_are_kept() {
        assert_eq!(HookError::Timeout { secs: 5 }.to_string(), "Hook timed out after 5s");
        assert_eq!(HookError::from(NoOutput).to_string(), "Hook produced no output");
        assert_eq!(HookError::Timeout { secs: 5 }.kind(), ErrorKind::Timeout);
        assert_eq!(HookError::from(NoOutput).kind(), ErrorKind::BadReply);
    }
}
