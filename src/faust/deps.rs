//! A FaustBot plugin's Python dependencies, installed into its own virtual
//! environment (`<home>/venvs/<id>`) *before* its module is first imported —
//! FaustBot installs them after the import, so a plugin importing one at
//! module level fails its first load.
//!
//! Where they come from: the plugin's `requirements.txt`, else the list
//! literal its `register_pip_deps` returns, read statically with Python's
//! `ast` (the shim's `deps.py`, run in isolated mode from the shim's own
//! directory; nothing of the plugin runs). They are installed only when the
//! operator says so: `ctxhost plugin deps <id>`, or at start / reload with
//! `[faustbot] install_deps_at_start = true` — never because a file appeared
//! in a plugin's directory. Otherwise a plugin whose dependencies are missing
//! or changed fails to start with an error naming the command. The install
//! itself is `registry::venv::build`: confined as the plugin, wheels only
//! unless the plugin's grant allows source builds. A stamp of the
//! requirements text (`<home>/faust/requirements/<id>.sha256`) tells whether
//! the environment is up to date. Runs pip and python; never the plugin.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{PLUGIN_JSON, PluginJson, PluginJsonError, shim};
use crate::host::LoadContext;
use crate::host::grants::{self, Grant};
use crate::manifest::{Manifest, ManifestError};
use crate::runner::process::Launcher;
use crate::runner::process::venv::{self, VenvError};

/// Whether [`prepare`] may build the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// Never: missing or changed dependencies are an error naming
    /// `ctxhost plugin deps <id>`.
    Never,
    /// When the environment is missing or its requirements changed.
    IfNeeded,
    /// Always (a rebuild: `ctxhost plugin deps <id> --force`).
    Always,
}

impl Install {
    /// What a start or reload may do: `[faustbot] install_deps_at_start`.
    pub fn at_start(config: &crate::config::HostConfig) -> Install {
        if config.faustbot.install_deps_at_start { Install::IfNeeded } else { Install::Never }
    }
}

/// What [`prepare`] found and did.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The plugin declares its dependencies (requirements.txt, or a
    /// `register_pip_deps` list readable without running it).
    pub declared: bool,
    /// Where they were read from, when there are any.
    pub file: Option<PathBuf>,
    /// The plugin's environment, when it needs one (ready now).
    pub venv: Option<PathBuf>,
    /// Built now: pip's closing line (`Successfully installed …`) if any.
    pub installed: Option<Option<String>>,
}

/// Why a FaustBot plugin's dependencies are not in place.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DepsError {
    #[error(transparent)]
    PluginJson(#[from] PluginJsonError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// No python to read or install the dependencies with.
    #[error("no python for plugin '{id}': {reason}")]
    NoPython { id: String, reason: String },
    /// The static reader of `register_pip_deps` failed.
    #[error("cannot read the dependencies of `{}`: {reason}", entry.display())]
    Reader { entry: PathBuf, reason: String },
    #[error("`{}`: register_pip_deps lists {item:?}, which spans lines", entry.display())]
    MultiLine { entry: PathBuf, item: String },
    /// Missing or changed, and this start may not install them.
    #[error(
        "{state} (`{}`): run `ctxhost plugin deps {id}` to install them (or let starts install them: \
         `install_deps_at_start = true` under `[faustbot]` in config.toml)",
        file.display()
    )]
    NotInstalled { id: String, file: PathBuf, state: &'static str },
    #[error(transparent)]
    Venv(#[from] VenvError),
}

/// `<home>/faust/requirements/`.
fn requirements_dir(cx: &LoadContext<'_>) -> PathBuf {
    cx.home.root().join("faust").join("requirements")
}

/// The python the plugin's worker runs on without a venv (the runtime's
/// launcher, version-manager shims seen through) and the generated manifest.
fn base_python(pj: &PluginJson, dir: &Path, cx: &LoadContext<'_>) -> Result<PathBuf, DepsError> {
    let access = |plugin: &str, var: &str| cx.env_access(plugin, var);
    let table = super::generated_manifest(pj, cx);
    let loaded = Manifest::from_generated(&dir.join(PLUGIN_JSON), dir, &pj.id, &table, &access)?;
    match crate::runner::process::system_launcher(&loaded.manifest, cx) {
        Launcher::Program { program, .. } => Ok(program),
        Launcher::Missing { launcher, reason } => Err(DepsError::NoPython {
            id: pj.id.clone(),
            reason: format!("`{launcher}` not found ({reason}); e.g. `apt-get install python3 python3-venv`"),
        }),
        other => Err(DepsError::NoPython { id: pj.id.clone(), reason: format!("unexpected launcher {other:?}") }),
    }
}

/// The list `register_pip_deps` returns in `entry`, read statically: `None`
/// when there is no such function or its return is not a literal list.
/// The reader runs in isolated mode (`-I`: no `PYTHON*` variables, no user
/// site, not the working directory on `sys.path`) from the shim's directory,
/// with an empty environment.
///
/// # Errors
/// python cannot run the reader, or it prints something that is not its
/// JSON answer.
fn static_deps(python: &Path, shim_dir: &Path, entry: &Path) -> Result<Option<Vec<String>>, DepsError> {
    let fail = |reason: String| DepsError::Reader { entry: entry.to_owned(), reason };
    let mut cmd = std::process::Command::new(python);
    cmd.arg("-I").arg(shim_dir.join(shim::DEPS)).arg(entry).env_clear().current_dir(shim_dir);
    let out = crate::runner::process::probe::run(&mut cmd, Duration::from_secs(20)).map_err(fail)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let value: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        fail(format!(
            "the dependency reader answered {:?}: {e}; stderr: {}",
            text.trim(),
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok(value
        .get("deps")
        .and_then(|d| d.as_array())
        .map(|items| items.iter().filter_map(|d| d.as_str()).map(str::to_owned).collect::<Vec<_>>()))
}

/// The grant pip runs with: the plugin's (none recorded: no privileges; an
/// unreadable grants file: none either, with a warning).
fn grant_of(cx: &LoadContext<'_>, id: &str) -> Grant {
    match grants::get(cx.home, id) {
        Ok(grant) => grant.unwrap_or_default(),
        Err(e) => {
            tracing::warn!("{e}; pip runs for plugin '{id}' with no privileges");
            Grant::default()
        }
    }
}

/// Makes sure the dependencies of the FaustBot plugin in `dir` are in its
/// virtual environment: with `install` [`Install::Never`] only checks, else
/// builds (or rebuilds) the environment as `install` says.
///
/// # Errors
/// A bad plugin.json, no python, a requirement line that is not a package
/// specifier, dependencies missing or changed under [`Install::Never`], or an
/// environment that cannot be built (pip's message).
pub fn prepare(dir: &Path, cx: &LoadContext<'_>, install: Install) -> Result<Prepared, DepsError> {
    let (pj, _) = PluginJson::load(dir)?;
    let given = dir.join("requirements.txt");
    let mut python = None;
    let (file, text) = if given.is_file() {
        let text = std::fs::read_to_string(&given).map_err(VenvError::io("read", &given))?;
        (given, text)
    } else {
        let program = base_python(&pj, dir, cx)?;
        let shim_dir =
            shim::install(cx.home).map_err(|reason| DepsError::Reader { entry: dir.join(&pj.entry), reason })?;
        let entry = dir.join(&pj.entry);
        let deps = static_deps(&program, &shim_dir, &entry)?;
        python = Some(program);
        match deps {
            None => return Ok(Prepared::default()),
            Some(deps) if deps.is_empty() => return Ok(Prepared { declared: true, ..Prepared::default() }),
            Some(deps) => {
                if let Some(bad) = deps.iter().find(|d| d.contains(['\n', '\r'])) {
                    return Err(DepsError::MultiLine { entry, item: bad.clone() });
                }
                let file = requirements_dir(cx).join(format!("{}.txt", pj.id));
                let text = deps.join("\n") + "\n";
                crate::home::Home::write_atomic(&file, text.as_bytes()).map_err(VenvError::io("write", &file))?;
                (file, text)
            }
        }
    };
    // Checked before anything else: a bad line is named even when nothing would be installed.
    venv::check_requirements(&file, &text)?;
    let mut prepared = Prepared { declared: true, file: Some(file.clone()), ..Prepared::default() };
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Ok(prepared);
    }
    let stamp_file = requirements_dir(cx).join(format!("{}.sha256", pj.id));
    let stamp = hex::encode(Sha256::digest(text.as_bytes()));
    let ready = match venv::find(cx.home, &pj.id) {
        venv::Found::Ready(dir) => Some(dir),
        _ => None,
    };
    let current = std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str());
    match (install, &ready) {
        (Install::Never | Install::IfNeeded, Some(venv)) if current => {
            prepared.venv = Some(venv.clone());
            return Ok(prepared);
        }
        (Install::Never, _) => {
            let state = if ready.is_some() { "changed since they were installed" } else { "not installed" };
            return Err(DepsError::NotInstalled { id: pj.id.clone(), file, state });
        }
        _ => {}
    }
    let python = match python {
        Some(p) => p,
        None => base_python(&pj, dir, cx)?,
    };
    tracing::info!(plugin = %pj.id, "installing the plugin's dependencies into its virtual environment");
    let grant = grant_of(cx, &pj.id);
    let request = venv::Request {
        name: &pj.id,
        base_python: &python,
        plugin_dir: dir,
        requirements_file: &file,
        requirements: &text,
        grant: &grant,
    };
    let built = venv::build(cx, &request)?;
    let summary = built.pip_summary.clone();
    if let Some(summary) = &summary {
        tracing::info!(plugin = %pj.id, "{summary}");
    }
    prepared.venv = Some(built.activate(cx.home, &pj.id)?);
    crate::home::Home::write_atomic(&stamp_file, stamp.as_bytes()).map_err(VenvError::io("write", &stamp_file))?;
    prepared.installed = Some(summary);
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_package_specifiers_are_installed() {
        let f = Path::new("requirements.txt");
        assert!(
            venv::check_requirements(
                f,
                "# deps\nrequests>=2\nfoo[bar]==1.0 ; python_version>'3'\nx==1 --hash=sha256:ab  # pinned\n\n"
            )
            .is_ok()
        );
        for bad in [
            "--extra-index-url http://x",
            "-r other.txt",
            "./pkg",
            "../x",
            "/abs/pkg",
            "~/pkg",
            "git+https://h/r",
            "pkg @ file:///x",
            "file:x",
            "x-1.0.tar.gz",
            "x-1.0-py3-none-any.whl",
            "X.ZIP",
            "x; python_version>'3' --index-url=http://evil",
            "x --global-option=--evil",
            "x==${VERSION}",
            "x \\",
        ] {
            let err = venv::check_requirements(f, &format!("ok\n{bad}\n")).unwrap_err().to_string();
            assert!(err.contains("line 2") && err.contains("is not a package specifier"), "{bad}: {err}");
        }
    }
}
