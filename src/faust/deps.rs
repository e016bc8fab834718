//! A FaustBot plugin's Python dependencies, installed into its own virtual
//! environment (`<home>/venvs/<id>`) *before* its module is first imported —
//! FaustBot installs them after the import, so a plugin importing one at
//! module level fails its first load.
//!
//! Where they come from: the plugin's `requirements.txt`, else the list
//! literal its `register_pip_deps` returns, read statically with Python's
//! `ast` (the shim's `deps.py`; nothing of the plugin runs). pip uses the
//! machine's index settings (`pip.conf`, `PIP_INDEX_URL`, `PIP_FIND_LINKS`,
//! `PIP_NO_INDEX` for a local wheel dir). A stamp of the requirements text
//! (`<home>/faust/requirements/<id>.sha256`) skips the build when nothing
//! changed. Runs pip and python; never the plugin.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{PluginJson, shim};
use crate::plugin::LoadContext;
use crate::registry::venv;

/// `<home>/faust/requirements/`.
fn requirements_dir(cx: &LoadContext<'_>) -> PathBuf {
    cx.home.root().join("faust").join("requirements")
}

/// The list `register_pip_deps` returns in `entry`, read statically: `None`
/// when there is no such function or its return is not a literal list.
///
/// # Errors
/// python3 cannot run the reader, or it prints something that is not its
/// JSON answer.
fn static_deps(python: &Path, shim_dir: &Path, entry: &Path) -> Result<Option<Vec<String>>, String> {
    let mut cmd = std::process::Command::new(python);
    cmd.arg(shim_dir.join(shim::DEPS)).arg(entry).env_remove("PYTHONPATH");
    let out = crate::runner::process::probe::run(&mut cmd, Duration::from_secs(20))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let value: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "the dependency reader answered {:?}: {e}; stderr: {}",
            text.trim(),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(value
        .get("deps")
        .and_then(|d| d.as_array())
        .map(|items| items.iter().filter_map(|d| d.as_str()).map(str::to_owned).collect::<Vec<_>>()))
}

/// Requirement lines pip would take as options or local paths are refused:
/// pip runs outside the sandbox, automatically, so a plugin directory dropped
/// in must not be able to point it at another index, another file or code in
/// a local source tree (`setup.py`). Package specifiers only.
///
/// # Errors
/// The first such line, named.
fn check_requirements(file: &Path, text: &str) -> Result<(), String> {
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let local = l.starts_with('.') || l.starts_with('/') || l.starts_with('~') || l.contains("file:");
        if l.starts_with('-') || local || l.contains("://") {
            return Err(format!(
                "{} line {}: `{l}` is not a package specifier; only names with versions (`name>=1.0`) are \
                 installed for a FaustBot plugin (no pip options, URLs or local paths)",
                file.display(),
                i + 1
            ));
        }
    }
    Ok(())
}

/// Makes sure the dependencies of the FaustBot plugin in `dir` are in its
/// virtual environment, building (or rebuilding) it when they changed.
/// Returns whether the plugin declares its dependencies (requirements.txt,
/// or a `register_pip_deps` list readable without running it).
///
/// # Errors
/// No python3, or the environment cannot be built (pip's message).
pub fn prepare(dir: &Path, cx: &LoadContext<'_>) -> Result<bool, String> {
    let (pj, _) = PluginJson::load(dir).map_err(|e| e.to_string())?;
    let path = (cx.host_env)("PATH");
    let python = crate::runner::process::find_on_path("python3", path.as_deref())
        .ok_or("python3 is not on PATH; FaustBot plugins need it (e.g. `apt-get install python3 python3-venv`)")?;
    let given = dir.join("requirements.txt");
    let (file, text) = if given.is_file() {
        let text = std::fs::read_to_string(&given).map_err(|e| format!("cannot read {}: {e}", given.display()))?;
        (given, text)
    } else {
        let shim_dir = shim::install(cx.home)?;
        match static_deps(&python, &shim_dir, &dir.join(&pj.entry))? {
            None => return Ok(false),
            Some(deps) if deps.is_empty() => return Ok(true),
            Some(deps) => {
                if let Some(bad) = deps.iter().find(|d| d.contains(['\n', '\r'])) {
                    return Err(format!("register_pip_deps lists {bad:?}, which spans lines"));
                }
                let file = requirements_dir(cx).join(format!("{}.txt", pj.id));
                let text = deps.join("\n") + "\n";
                crate::home::Home::write_atomic(&file, text.as_bytes())
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
                (file, text)
            }
        }
    };
    check_requirements(&file, &text)?;
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Ok(true);
    }
    let stamp_file = requirements_dir(cx).join(format!("{}.sha256", pj.id));
    let stamp = hex::encode(Sha256::digest(text.as_bytes()));
    let ready = matches!(venv::find(cx.home, &pj.id), venv::Found::Ready(_));
    if ready && std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(true);
    }
    tracing::info!(plugin = %pj.id, "installing the plugin's dependencies into its virtual environment");
    let built = venv::build(cx.home, &pj.id, &python, dir, &file).map_err(|e| e.to_string())?;
    if let Some(summary) = &built.pip_summary {
        tracing::info!(plugin = %pj.id, "{summary}");
    }
    built.activate(cx.home, &pj.id).map_err(|e| e.to_string())?;
    crate::home::Home::write_atomic(&stamp_file, stamp.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", stamp_file.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_package_specifiers_are_installed() {
        let f = Path::new("requirements.txt");
        assert!(check_requirements(f, "# deps\nrequests>=2\nfoo[bar]==1.0 ; python_version>'3'\n\n").is_ok());
        for bad in [
            "--extra-index-url http://x",
            "-r other.txt",
            "./pkg",
            "../x",
            "/abs/pkg",
            "git+https://h/r",
            "pkg @ file:///x",
        ] {
            let err = check_requirements(f, &format!("ok\n{bad}\n")).unwrap_err();
            assert!(err.contains("line 2") && err.contains("not a package specifier"), "{bad}: {err}");
        }
    }
}
