//! How a hook process is started — the one place for one-shot calls and
//! persistent workers alike, so both get exactly the same cleared
//! environment, working directory, own process group and (later) sandbox.
//!
//! This module builds the command; it never waits for, reads from or kills
//! the process (that is the caller's: `oneshot`, the worker pool).

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use super::launcher::CommandLine;
use crate::runner::HookError;

/// What a hook process is started with.
pub struct SpawnSpec<'a> {
    pub command: &'a CommandLine,
    pub cwd: &'a Path,
    /// The whole environment (spec section 6 order); nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
}

/// Starts the process: cleared environment, `cwd`, its own process group
/// (its pid is the group id), all three standard streams piped, killed if
/// the handle is dropped.
///
/// # Errors
/// [`HookError::Spawn`] naming the program.
pub fn spawn(spec: SpawnSpec<'_>) -> Result<tokio::process::Child, HookError> {
    let mut cmd = tokio::process::Command::new(&spec.command.program);
    cmd.args(&spec.command.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn().map_err(|source| HookError::Spawn { program: spec.command.program.clone(), source })
}
