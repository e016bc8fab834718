//! A python plugin's own virtual environment: `<home>/venvs/<name>`, built
//! from its `requirements.txt` by `ctxhost plugin install`, and the
//! interpreter its hooks then run on.
//!
//! `<home>/venvs/<name>` is a symlink to the real environment
//! `<home>/venvs/.<name>-<random>`. A new environment is built whole at its
//! final real path (a venv cannot be moved: pip writes absolute paths into
//! its scripts), then the link is replaced by a rename — so a hook starting
//! meanwhile runs on the old environment or the new one, never on half of
//! one. The environment lives outside the plugin's data dir, so a hook cannot
//! rewrite the interpreter it runs on.
//!
//! This module runs `python -m venv` and `pip` and nothing else; which python
//! builds the environment is the caller's (the launcher the runtime resolves).

use std::io::{Read, Seek};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::home::Home;

/// `python -m venv` takes seconds; past this it is stuck.
const VENV_TIMEOUT: Duration = Duration::from_secs(300);
/// pip may download and build for a long time, but not forever.
const PIP_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How much of a failed command's output is shown.
const SHOWN_LINES: usize = 60;

/// Why an environment could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VenvError {
    #[error("failed to {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A command failed; its output (the end of it) and a hint are shown.
    #[error("`{command}` failed ({status}){}{}", indent_output(output), hint.as_ref().map(|h| format!("\n  hint: {h}")).unwrap_or_default())]
    Command { command: String, status: String, output: String, hint: Option<String> },
}

fn indent_output(output: &str) -> String {
    if output.trim().is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = output.trim_end().lines().collect();
    let skipped = lines.len().saturating_sub(SHOWN_LINES);
    let mut text = String::from("; its output");
    if skipped > 0 {
        text.push_str(&format!(" (last {SHOWN_LINES} lines)"));
    }
    text.push(':');
    for line in &lines[skipped..] {
        text.push_str("\n  | ");
        text.push_str(line);
    }
    text
}

/// What [`find`] saw at `<home>/venvs/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No environment: the hooks run on the runtime's launcher.
    None,
    /// A usable environment (its `bin/python` exists).
    Ready(PathBuf),
    /// Something is there but has no working `bin/python` (its base python
    /// was removed, or a build was interrupted).
    Broken(PathBuf),
}

/// The environment of plugin `name`, if it has one.
pub fn find(home: &Home, name: &str) -> Found {
    let dir = home.venv_dir(name);
    if std::fs::symlink_metadata(&dir).is_err() {
        return Found::None;
    }
    // `metadata` follows links: a venv python is a link to its base python.
    if std::fs::metadata(python(&dir)).is_ok_and(|m| m.is_file()) { Found::Ready(dir) } else { Found::Broken(dir) }
}

/// `<venv>/bin/python`.
pub fn python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// A built environment, not yet in use; [`Built::activate`] puts it in place.
/// Dropping it unused removes it.
#[derive(Debug)]
pub struct Built {
    real: Option<PathBuf>,
    /// pip's closing line (`Successfully installed …`), when it printed one.
    pub pip_summary: Option<String>,
}

impl Drop for Built {
    fn drop(&mut self) {
        if let Some(real) = self.real.take() {
            let _ = std::fs::remove_dir_all(real);
        }
    }
}

/// Builds a fresh environment for plugin `name` with `base_python`, and
/// installs `requirements` (relative to `plugin_dir`) into it with pip, run
/// from `plugin_dir` so relative paths in the file work. pip gets the host's environment, so the
/// machine's index configuration (`pip.conf`, `PIP_INDEX_URL`,
/// `PIP_FIND_LINKS`, `PIP_NO_INDEX`, …) applies.
///
/// # Errors
/// A directory cannot be created, or `python -m venv` or pip fails (the
/// error carries the end of its output).
pub fn build(
    home: &Home,
    name: &str,
    base_python: &Path,
    plugin_dir: &Path,
    requirements: &Path,
) -> Result<Built, VenvError> {
    let link = home.venv_dir(name);
    let parent = link.parent().unwrap_or(home.root()).to_owned();
    Home::ensure_dir(&parent).map_err(|source| VenvError::Io { action: "create", path: parent.clone(), source })?;
    let real = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .tempdir_in(&parent)
        .map_err(|source| VenvError::Io { action: "create a directory in", path: parent.clone(), source })?
        .keep();
    let mut built = Built { real: Some(real.clone()), pip_summary: None };

    let mut venv = Command::new(base_python);
    venv.arg("-m").arg("venv").arg(&real).current_dir(plugin_dir).env_remove("PYTHONHOME").env_remove("PYTHONPATH");
    run(&mut venv, VENV_TIMEOUT, |output| {
        (output.contains("ensurepip") || output.contains("No module named venv")).then(|| {
            "this python has no working `venv` module; on Debian/Ubuntu: `apt-get install python3-venv`".to_owned()
        })
    })?;

    let mut pip = Command::new(python(&real));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "-r"])
        .arg(requirements)
        .current_dir(plugin_dir)
        // The environment's own python decides where packages go.
        .env_remove("PYTHONHOME")
        .env_remove("PYTHONPATH")
        .env_remove("PIP_USER")
        .env_remove("PIP_TARGET")
        .env_remove("PIP_PREFIX");
    let output = run(&mut pip, PIP_TIMEOUT, |output| {
        output.contains("No matching distribution").then(|| {
            "pip uses this machine's index settings (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS); check them".to_owned()
        })
    })?;
    built.pip_summary =
        output.lines().rev().map(str::trim).find(|l| l.starts_with("Successfully installed")).map(str::to_owned);
    Ok(built)
}

impl Built {
    /// Makes this the environment of plugin `name` (replacing the link with
    /// a rename) and removes the one it replaces.
    ///
    /// # Errors
    /// The link cannot be made or renamed into place; the old environment
    /// then stays in use.
    pub fn activate(mut self, home: &Home, name: &str) -> Result<PathBuf, VenvError> {
        let link = home.venv_dir(name);
        let Some(real) = self.real.clone() else { return Ok(link) };
        let parent = link.parent().unwrap_or(home.root()).to_owned();
        let target = real.file_name().map(PathBuf::from).unwrap_or_else(|| real.clone());
        let old = previous_target(&link);
        let tmp_link = parent.join(format!(".{name}.link-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&target, &tmp_link).map_err(|source| VenvError::Io {
            action: "create the link",
            path: tmp_link.clone(),
            source,
        })?;
        // A real directory at the link's place (made by hand, or by an older
        // ctxhost) is moved aside first: a rename cannot replace it.
        let moved_aside = if std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) {
            let aside = parent.join(format!(".{name}-old-{}", std::process::id()));
            std::fs::rename(&link, &aside).map_err(|source| VenvError::Io {
                action: "move aside",
                path: link.clone(),
                source,
            })?;
            Some(aside)
        } else {
            None
        };
        if let Err(source) = std::fs::rename(&tmp_link, &link) {
            let _ = std::fs::remove_file(&tmp_link);
            if let Some(aside) = &moved_aside {
                let _ = std::fs::rename(aside, &link);
            }
            return Err(VenvError::Io { action: "put in place", path: link, source });
        }
        self.real = None;
        for old in old.into_iter().chain(moved_aside) {
            if old != real {
                let _ = std::fs::remove_dir_all(old);
            }
        }
        Ok(link)
    }
}

/// The real directory a venv link points to (inside the venvs dir).
fn previous_target(link: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(link).ok()?;
    let parent = link.parent()?;
    let full = parent.join(target);
    // Only ever delete what this module made: a sibling of the link.
    (full.parent() == Some(parent) && full.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .then_some(full)
}

/// Removes the environment of plugin `name` (the link and what it points
/// to); returns its path when there was one.
///
/// # Errors
/// Something is there and cannot be removed.
pub fn remove(home: &Home, name: &str) -> Result<Option<PathBuf>, VenvError> {
    let link = home.venv_dir(name);
    let Ok(meta) = std::fs::symlink_metadata(&link) else { return Ok(None) };
    let io = |source| VenvError::Io { action: "remove", path: link.clone(), source };
    if meta.is_symlink() {
        let target = previous_target(&link);
        std::fs::remove_file(&link).map_err(io)?;
        if let Some(target) = target {
            std::fs::remove_dir_all(&target).map_err(|source| VenvError::Io {
                action: "remove",
                path: target.clone(),
                source,
            })?;
        }
    } else if meta.is_dir() {
        std::fs::remove_dir_all(&link).map_err(io)?;
    } else {
        std::fs::remove_file(&link).map_err(io)?;
    }
    Ok(Some(link))
}

/// Runs `cmd` (stdin closed, stdout and stderr into one file so their order
/// is kept) in its own process group for at most `timeout`, killing the
/// group at the end. Returns the output; a failure carries the output and
/// the hint `hint_for` finds in it.
fn run(cmd: &mut Command, timeout: Duration, hint_for: impl Fn(&str) -> Option<String>) -> Result<String, VenvError> {
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let program = PathBuf::from(cmd.get_program());
    let io = |source| VenvError::Io { action: "run", path: program.clone(), source };
    let mut log = tempfile::tempfile().map_err(io)?;
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().map_err(io)?))
        .stderr(Stdio::from(log.try_clone().map_err(io)?))
        .spawn()
        .map_err(io)?;
    let status = crate::runner::process::probe::wait_then_kill_group(&mut child, timeout, Duration::from_millis(20))
        .map_err(io)?;
    let mut output = String::new();
    let _ = log.rewind();
    let _ = log.read_to_string(&mut output);
    let Some(status) = status else {
        return Err(VenvError::Command {
            command: shown,
            status: format!("did not finish within {} s, killed", timeout.as_secs()),
            hint: hint_for(&output),
            output,
        });
    };
    if !status.success() {
        return Err(VenvError::Command {
            command: shown,
            status: crate::runner::process::exit_label(status),
            hint: hint_for(&output),
            output,
        });
    }
    Ok(output)
}
