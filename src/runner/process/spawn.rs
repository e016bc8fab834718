//! How a hook process is started — the one place for one-shot calls and
//! persistent workers alike, so both get exactly the same cleared
//! environment, working directory, own process group and sandbox (the
//! plugin's [`Confinement`], prepared per process: cgroup made, Landlock
//! ruleset built; the child only runs syscalls before exec).
//!
//! This module builds the command; it never waits for, reads from or kills
//! the process (that is the caller's: `oneshot`, the worker pool).

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use super::launcher::CommandLine;
use super::sandbox::{Cleanup, Confinement};
use crate::runner::HookError;

/// What a hook process is started with.
pub struct SpawnSpec<'a> {
    pub command: &'a CommandLine,
    pub cwd: &'a Path,
    /// The whole environment (spec section 6 order); nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// The plugin's confinement (spec section 6).
    pub confinement: &'a Confinement,
    /// The per-call (or per-worker) TMPDIR, writable under confinement.
    pub tmpdir: Option<&'a Path>,
    /// Fd 0 of the process instead of a pipe (the fork server's control
    /// socket); `Spawned::child.stdin` is then `None`.
    pub stdin: Option<std::os::fd::OwnedFd>,
}

/// A started hook process and what must be cleaned up when it is gone.
pub struct Spawned {
    pub child: tokio::process::Child,
    /// Keep it until the process (and its group) is finished with.
    pub cleanup: Cleanup,
}

/// Starts the process: cleared environment, `cwd`, its own process group
/// (its pid is the group id), all three standard streams piped, killed if
/// the handle is dropped, confined as the plugin's [`Confinement`] says.
///
/// # Errors
/// [`HookError::Spawn`] naming the program, also when the confinement
/// cannot be set up (a hook never runs less confined than decided).
pub fn spawn(spec: SpawnSpec<'_>) -> Result<Spawned, HookError> {
    let mut cmd = tokio::process::Command::new(&spec.command.program);
    cmd.args(&spec.command.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.cwd)
        .process_group(0)
        .stdin(match spec.stdin {
            Some(fd) => Stdio::from(fd),
            None => Stdio::piped(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let spawn_error = |source| HookError::Spawn { program: spec.command.program.clone(), source };
    let (steps, cleanup) = spec.confinement.prepare(spec.tmpdir).map_err(spawn_error)?;
    if let Some(mut steps) = steps {
        steps.set_exec(std::path::Path::new(&spec.command.program), &spec.command.args, &spec.env);
        // SAFETY: `apply` only makes syscalls on fds and buffers prepared
        // above (no allocation on success, no locks), as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || steps.apply());
        }
    }
    let child = cmd.spawn().map_err(|e| spawn_error(spec.confinement.start_failed(e)))?;
    Ok(Spawned { child, cleanup })
}
