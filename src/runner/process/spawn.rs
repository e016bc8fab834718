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
use super::sandbox::shared::SharedKeeper;
use super::sandbox::{ChildSteps, Cleanup, Confinement};
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

/// A one-shot call's process: spawned through `Command`, or the trusted
/// hook's keeper started sharing ctxhost's memory ([`SharedKeeper`]).
pub enum CallProcess {
    Spawned(Spawned),
    Shared { keeper: SharedKeeper, cleanup: Cleanup },
}

/// Starts the process: cleared environment, `cwd`, its own process group
/// (its pid is the group id), all three standard streams piped, killed if
/// the handle is dropped, confined as the plugin's [`Confinement`] says.
///
/// # Errors
/// [`HookError::Spawn`] naming the program, also when the confinement
/// cannot be set up (a hook never runs less confined than decided).
pub fn spawn(spec: SpawnSpec<'_>) -> Result<Spawned, HookError> {
    let (steps, cleanup) = prepare(&spec)?;
    let child = command(spec, steps)?;
    Ok(Spawned { child, cleanup })
}

/// [`spawn`] for a one-shot call, which starts the trusted hook's keeper
/// without a fork of ctxhost ([`SharedKeeper`]) where it can. (The
/// persistent worker and the fork server start once per plugin: they keep
/// the fork.)
///
/// # Errors
/// As [`spawn`].
pub fn spawn_call(spec: SpawnSpec<'_>) -> Result<CallProcess, HookError> {
    let (steps, cleanup) = prepare(&spec)?;
    let shared = steps.as_ref().is_some_and(ChildSteps::shares_memory)
        && spec.stdin.is_none()
        && super::sandbox::shared::available();
    match steps {
        Some(steps) if shared => {
            let keeper = SharedKeeper::start(steps, spec.cwd).map_err(|source| spawn_error(&spec, source))?;
            Ok(CallProcess::Shared { keeper, cleanup })
        }
        steps => Ok(CallProcess::Spawned(Spawned { child: command(spec, steps)?, cleanup })),
    }
}

fn spawn_error(spec: &SpawnSpec<'_>, source: std::io::Error) -> HookError {
    HookError::Spawn { program: spec.command.program.clone(), source: spec.confinement.start_failed(source) }
}

/// The plugin's confinement prepared for this process.
fn prepare(spec: &SpawnSpec<'_>) -> Result<(Option<ChildSteps>, Cleanup), HookError> {
    let mut prepared = spec
        .confinement
        .prepare(spec.tmpdir)
        .map_err(|source| HookError::Spawn { program: spec.command.program.clone(), source })?;
    if let Some(steps) = &mut prepared.0 {
        steps.set_exec(Path::new(&spec.command.program), &spec.command.args, &spec.env);
    }
    Ok(prepared)
}

/// Spawns through `Command`, the steps run between fork and exec.
fn command(mut spec: SpawnSpec<'_>, steps: Option<ChildSteps>) -> Result<tokio::process::Child, HookError> {
    let mut cmd = tokio::process::Command::new(&spec.command.program);
    cmd.args(&spec.command.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.cwd)
        .process_group(0)
        .stdin(match spec.stdin.take() {
            Some(fd) => Stdio::from(fd),
            None => Stdio::piped(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(mut steps) = steps {
        // SAFETY: `apply` only makes syscalls on fds and buffers prepared
        // above (no allocation on success, no locks), as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || steps.apply());
        }
    }
    cmd.spawn().map_err(|e| spawn_error(&spec, e))
}
