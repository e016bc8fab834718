//! Installing a plugin directory into the plugins dir, and removing one.
//!
//! Install copies the source into a hidden staging dir inside the plugins
//! dir, checks the **copy** (so what is installed is what was checked: the
//! manifest loads, every `[[requires]]` binary is on PATH, every
//! `[integrity]` hash matches), builds a python plugin's virtual environment,
//! records its grant, and only then puts it in place with one rename — with
//! `--force`, an atomic exchange with the old version. A failure at any step
//! before that leaves the plugins dir as it was.

use std::path::{Path, PathBuf};

use super::registry::{RegistryError, raw_facts};
use crate::home::Home;
use crate::host::LoadContext;
use crate::host::grants::{self, Grant};
use crate::host::state;
use crate::manifest::{self, MANIFEST_FILE, Manifest, ManifestErrorKind, Runtime};
use crate::runner::process::venv;
use crate::runner::process::{Launcher, find_on_path};

/// What to install.
#[derive(Debug, Clone)]
pub struct InstallOptions<'a> {
    /// A plugin directory.
    pub source: &'a Path,
    /// The name to install it as (default: the source directory's name).
    pub name: Option<&'a str>,
    /// Replace an installed plugin of that name.
    pub force: bool,
    /// Let pip build the plugin's dependencies from source distributions
    /// (recorded in its grant; a reinstall keeps an earlier opt-in).
    pub source_builds: bool,
}

/// What an install did.
#[derive(Debug)]
pub struct Installed {
    pub name: String,
    pub dir: PathBuf,
    pub version: String,
    pub runtime: String,
    pub hooks: Vec<String>,
    /// The version it replaced (`--force`), `""` when that one had none.
    pub replaced: Option<String>,
    /// The plugin's virtual environment and pip's summary line.
    pub venv: Option<(PathBuf, Option<String>)>,
    /// A virtual environment of the replaced version that the new one does not use.
    pub removed_venv: Option<PathBuf>,
    pub grant: Grant,
    /// The grant recorded before, when there was one.
    pub grant_before: Option<Grant>,
    pub enabled: bool,
    pub warnings: Vec<String>,
}

/// Installs `opts.source` into the plugins dir.
///
/// # Errors
/// The source is not a plugin dir, the name is invalid or taken (without
/// `force`), the manifest does not load, a required binary is missing, the
/// virtual environment cannot be built, or a file operation fails.
pub fn install(opts: &InstallOptions<'_>, cx: &LoadContext<'_>) -> Result<Installed, RegistryError> {
    let home = cx.home;
    let source = opts.source;
    if crate::faust::is_faust_plugin(source) {
        return Err(RegistryError::FaustBot(source.to_owned()));
    }
    if !source.join(MANIFEST_FILE).is_file() {
        if !source.is_dir() {
            return Err(RegistryError::Io {
                action: "read",
                path: source.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            });
        }
        return Err(RegistryError::NotAPlugin(source.to_owned()));
    }
    let real_source = source.canonicalize().map_err(RegistryError::io("read", source))?;
    let name = match opts.name {
        Some(name) => name.to_owned(),
        None => real_source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    manifest::validate_name(&name).map_err(|m| {
        let hint =
            if opts.name.is_none() { "\n  hint: pass --name <NAME> to install it under another name" } else { "" };
        RegistryError::InvalidName(format!("{m}{hint}"))
    })?;

    let plugins = home.plugins_dir();
    Home::ensure_dir(plugins).map_err(RegistryError::io("create", plugins))?;
    let real_plugins = plugins.canonicalize().map_err(RegistryError::io("read", plugins))?;
    if real_plugins.starts_with(&real_source) {
        return Err(RegistryError::HoldsPluginsDir { source_dir: source.to_owned(), plugins_dir: plugins.to_owned() });
    }
    let target = plugins.join(&name);
    let existing = std::fs::symlink_metadata(&target).is_ok();
    if existing && !opts.force {
        return Err(RegistryError::Exists { name, dir: target });
    }

    // Removed on every path out (with the old version after an exchange).
    let staging = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(plugins)
        .map_err(RegistryError::io("create a staging directory in", plugins))?;
    let staged = staging.path().join(&name);
    copy_tree(&real_source, &staged)?;
    let manifest::Loaded { manifest, mut warnings } = load_staged(&staged, staging.path(), source, cx)?;
    check_requires(&name, &manifest, cx)?;

    let mut hooks: Vec<String> = manifest.hooks.keys().map(|h| h.as_str().to_owned()).collect();
    if manifest.settings.runtime == Runtime::Wasm {
        // Compiled and asked for its hooks now, so a broken component is
        // refused before it replaces anything. (Loading records a grant when
        // there is none; a refused plugin must not leave one behind.)
        let had_grant = grants::get(home, &name)?.is_some();
        let loaded = crate::plugin::load_plugin(&staged, cx).map_err(|e| {
            if !had_grant {
                let _ = grants::remove(home, &name);
            }
            let real_staged = staged.canonicalize().unwrap_or_else(|_| staged.clone());
            let mut reason = e.to_string();
            for copy in [&real_staged, &staged] {
                reason = reason.replace(&copy.display().to_string(), &source.display().to_string());
            }
            RegistryError::Load { name: name.clone(), reason }
        })?;
        hooks = loaded.hooks.iter().map(|h| h.as_str().to_owned()).collect();
    }
    let mut grant = Grant::requested(&manifest.settings);
    grant.source_builds = opts.source_builds || grants::get(home, &name)?.is_some_and(|g| g.source_builds);
    let built = build_venv(&name, &manifest, &staged, &grant, cx, &mut warnings)?;

    let replaced = existing.then(|| raw_facts(&target).0);
    // Recorded before the plugin appears, so a load racing the rename finds
    // the grant install decided; put back if the plugin never appears.
    let grant_before = grants::set(home, &name, grant.clone())?;
    if let Err(e) = put_in_place(&staged, &target, existing, &name) {
        let _ = match grant_before.clone() {
            Some(before) => grants::set(home, &name, before).map(|_| ()),
            None => grants::remove(home, &name).map(|_| ()),
        };
        return Err(e);
    }
    drop(staging);
    // Installing is the operator's deliberate step: these files are now the
    // version every instance on the store runs.
    if let Err(e) = super::catalog::adopt(cx, &name) {
        warnings.push(format!(
            "its version could not be recorded in the store ({e}); `ctxhost plugin adopt {name}` records it"
        ));
    }

    let (venv, removed_venv) = match built {
        Some(built) => {
            let summary = built.pip_summary.clone();
            let dir =
                built.activate(home, &name).map_err(|source| RegistryError::Venv { name: name.clone(), source })?;
            (Some((dir, summary)), None)
        }
        None => (None, venv::remove(home, &name).map_err(|source| RegistryError::Venv { name: name.clone(), source })?),
    };
    Ok(Installed {
        enabled: super::registry::is_enabled(home, &name),
        name,
        dir: target,
        version: manifest.version,
        runtime: manifest.settings.runtime.label(),
        hooks,
        replaced,
        venv,
        removed_venv,
        grant,
        grant_before,
        warnings,
    })
}

/// Copies a directory tree: files with their permissions, symlinks as links
/// (a hook link escaping the plugin is refused by the manifest check), and
/// nothing else (sockets, fifos).
fn copy_tree(from: &Path, to: &Path) -> Result<(), RegistryError> {
    std::fs::create_dir(to).map_err(RegistryError::io("create", to))?;
    let entries = std::fs::read_dir(from).map_err(RegistryError::io("read", from))?;
    for entry in entries {
        let entry = entry.map_err(RegistryError::io("read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(RegistryError::io("read", &src))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let link = std::fs::read_link(&src).map_err(RegistryError::io("read", &src))?;
            std::os::unix::fs::symlink(link, &dst).map_err(RegistryError::io("copy", &src))?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).map_err(RegistryError::io("copy", &src))?;
        }
    }
    let perms = std::fs::metadata(from).map_err(RegistryError::io("read", from))?.permissions();
    std::fs::set_permissions(to, perms).map_err(RegistryError::io("copy", from))?;
    Ok(())
}

/// Loads the staged copy's manifest. `plugin_depends` is checked against the
/// real plugins dir (the copy's siblings are links to the installed plugins
/// it names), and errors name the source's files, not the copy's.
fn load_staged(
    staged: &Path,
    staging: &Path,
    source: &Path,
    cx: &LoadContext<'_>,
) -> Result<manifest::Loaded, RegistryError> {
    let depends = std::fs::read_to_string(staged.join(MANIFEST_FILE))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .and_then(|t| t.get("plugin_depends").and_then(|d| d.as_array()).cloned())
        .unwrap_or_default();
    for dep in depends.iter().filter_map(|d| d.as_str()) {
        let installed = cx.home.plugins_dir().join(dep);
        if manifest::validate_name(dep).is_ok() && installed.join(MANIFEST_FILE).is_file() {
            let _ = std::os::unix::fs::symlink(&installed, staging.join(dep));
        }
    }
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    Manifest::load_with_env(staged, &lookup).map_err(|mut e| {
        let real_staged = staged.canonicalize().unwrap_or_else(|_| staged.to_owned());
        let relocate = |p: &mut PathBuf| {
            for from in [staged, real_staged.as_path()] {
                if let Ok(rest) = p.strip_prefix(from) {
                    *p = source.join(rest);
                    return;
                }
            }
        };
        relocate(&mut e.file);
        if let ManifestErrorKind::HookPath(h) = &mut e.kind {
            match h {
                manifest::HookPathError::Traversal(p) | manifest::HookPathError::NotFound(p) => relocate(p),
                manifest::HookPathError::Unresolvable { path, .. } => relocate(path),
                manifest::HookPathError::Escapes { path, dir } => {
                    relocate(path);
                    relocate(dir);
                }
            }
        }
        RegistryError::Manifest(e)
    })
}

/// Every `[[requires]]` binary must be on the host's PATH.
fn check_requires(name: &str, manifest: &Manifest, cx: &LoadContext<'_>) -> Result<(), RegistryError> {
    let path = (cx.host_env)("PATH");
    let missing: Vec<_> =
        manifest.requires.iter().filter(|r| find_on_path(&r.binary, path.as_deref()).is_none()).cloned().collect();
    if missing.is_empty() { Ok(()) } else { Err(RegistryError::MissingBinaries { name: name.to_owned(), missing }) }
}

/// A python plugin with a requirements file (`requirements = …`, else
/// `requirements.txt`) gets a fresh virtual environment, built with the
/// python its hooks would otherwise run on, pip confined by `grant`
/// (`venv::build`).
pub(crate) fn build_venv(
    name: &str,
    manifest: &Manifest,
    dir: &Path,
    grant: &Grant,
    cx: &LoadContext<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<venv::Built>, RegistryError> {
    let file = manifest.requirements.as_deref().unwrap_or("requirements.txt");
    let requirements = dir.join(file);
    if !requirements.is_file() {
        return Ok(None);
    }
    if manifest.settings.runtime != Runtime::Python {
        if manifest.requirements.is_some() {
            warnings.push(format!(
                "key `requirements`: only python plugins get their requirements installed; `{file}` is left alone"
            ));
        }
        return Ok(None);
    }
    let python = match crate::runner::process::system_launcher(manifest, cx) {
        Launcher::Program { program, .. } => program,
        Launcher::Missing { launcher, reason } => {
            return Err(RegistryError::NoPython {
                name: name.to_owned(),
                requirements: file.to_owned(),
                reason: format!("`{launcher}` not found ({reason})"),
            });
        }
        other => {
            return Err(RegistryError::NoPython {
                name: name.to_owned(),
                requirements: file.to_owned(),
                reason: format!("unexpected launcher {other:?}"),
            });
        }
    };
    let text = std::fs::read_to_string(&requirements).map_err(RegistryError::io("read", &requirements))?;
    let request = venv::Request {
        name,
        base_python: &python,
        plugin_dir: dir,
        requirements_file: Path::new(file),
        requirements: &text,
        grant,
    };
    venv::build(cx, &request).map(Some).map_err(|source| RegistryError::Venv { name: name.to_owned(), source })
}

/// What `ctxhost plugin deps` did.
#[derive(Debug, serde::Serialize)]
pub struct Deps {
    pub name: String,
    /// `faustbot` (plugin.json) or the plugin.toml runtime.
    pub kind: String,
    /// Where the dependencies are declared (none: the plugin declares none).
    pub file: Option<PathBuf>,
    /// The plugin's virtual environment, when it has one.
    pub venv: Option<PathBuf>,
    /// Whether an environment was built now (otherwise it was up to date).
    pub installed: bool,
    /// pip's closing line (`Successfully installed …`).
    pub pip: Option<String>,
}

/// Installs the dependencies of installed plugin `name` into its virtual
/// environment, confined as `venv::build` does: a FaustBot plugin's
/// requirements.txt or `register_pip_deps` list (rebuilt when changed, or
/// always with `force`), a python plugin.toml plugin's requirements file
/// (always rebuilt). The one way a FaustBot plugin's dependencies get
/// installed unless `[faustbot] install_deps_at_start` is on.
///
/// # Errors
/// No such plugin, a manifest that does not load, a bad requirement line,
/// or an environment that cannot be built.
pub fn deps(cx: &LoadContext<'_>, name: &str, force: bool) -> Result<Deps, RegistryError> {
    let home = cx.home;
    let dir = super::registry::plugin_dir(home, name)?;
    if crate::faust::is_faust_plugin(&dir) {
        use crate::faust::deps::Install;
        let install = if force { Install::Always } else { Install::IfNeeded };
        let prepared = crate::faust::deps::prepare(&dir, cx, install)
            .map_err(|source| RegistryError::Deps { name: name.to_owned(), source: Box::new(source) })?;
        return Ok(Deps {
            name: name.to_owned(),
            kind: "faustbot".to_owned(),
            file: prepared.file,
            venv: prepared.venv,
            installed: prepared.installed.is_some(),
            pip: prepared.installed.flatten(),
        });
    }
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    let manifest::Loaded { manifest, mut warnings } = Manifest::load_with_env(&dir, &lookup)?;
    let grant = match grants::get(home, name)? {
        Some(grant) => grant,
        None => Grant::requested(&manifest.settings),
    };
    let built = build_venv(name, &manifest, &dir, &grant, cx, &mut warnings)?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let file = manifest.requirements.as_deref().unwrap_or("requirements.txt");
    let file = (manifest.settings.runtime == Runtime::Python && dir.join(file).is_file()).then(|| dir.join(file));
    let mut report = Deps {
        name: name.to_owned(),
        kind: manifest.settings.runtime.label(),
        file,
        venv: None,
        installed: false,
        pip: None,
    };
    if let Some(built) = built {
        report.pip = built.pip_summary.clone();
        report.venv =
            Some(built.activate(home, name).map_err(|source| RegistryError::Venv { name: name.to_owned(), source })?);
        report.installed = true;
    }
    Ok(report)
}

/// Moves the staged copy to `target`: a plain rename that never replaces
/// anything, or with `existing` an atomic exchange (the old version lands in
/// the staging dir and goes with it).
fn put_in_place(staged: &Path, target: &Path, existing: bool, name: &str) -> Result<(), RegistryError> {
    let renamed = if existing {
        crate::home::rename_exchange(staged, target)
    } else {
        crate::home::rename_noreplace(staged, target)
    };
    match renamed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(RegistryError::Exists { name: name.to_owned(), dir: target.to_owned() })
        }
        // A filesystem without RENAME_EXCHANGE: two renames.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            if existing {
                let aside = staged.with_file_name(format!(".old-{name}"));
                std::fs::rename(target, &aside).map_err(RegistryError::io("move aside", target))?;
                if let Err(e) = std::fs::rename(staged, target) {
                    let _ = std::fs::rename(&aside, target);
                    return Err(RegistryError::Io { action: "install into", path: target.to_owned(), source: e });
                }
                Ok(())
            } else {
                // rename_noreplace has its own fallback; this cannot happen.
                Err(RegistryError::Io { action: "install into", path: target.to_owned(), source: e })
            }
        }
        Err(source) => Err(RegistryError::Io { action: "install into", path: target.to_owned(), source }),
    }
}

/// What a removal did.
#[derive(Debug)]
pub struct Removed {
    pub dir: PathBuf,
    pub venv: Option<PathBuf>,
    pub grant: bool,
    /// The data dir, and whether it was removed (`--purge`) or kept.
    pub data: Option<(PathBuf, bool)>,
}

/// Removes installed plugin `name`: its directory, its virtual environment,
/// its grant and its disabled mark; its data dir only with `purge`.
///
/// # Errors
/// No such plugin, or something cannot be removed.
pub fn remove(home: &Home, name: &str, purge: bool) -> Result<Removed, RegistryError> {
    let dir = super::registry::plugin_dir(home, name)?;
    let meta = std::fs::symlink_metadata(&dir).map_err(RegistryError::io("read", &dir))?;
    if meta.is_dir() {
        // Out of the plugins dir in one rename, then deleted: a concurrent
        // load sees the whole plugin or none of it.
        let aside = home.plugins_dir().join(format!(".remove-{name}-{}", std::process::id()));
        std::fs::rename(&dir, &aside).map_err(RegistryError::io("remove", &dir))?;
        std::fs::remove_dir_all(&aside).map_err(RegistryError::io("remove", &aside))?;
    } else {
        std::fs::remove_file(&dir).map_err(RegistryError::io("remove", &dir))?;
    }
    let venv = venv::remove(home, name).map_err(|source| RegistryError::Venv { name: name.to_owned(), source })?;
    // Its pip cache (derived data) goes with it.
    let cache = venv::pip_cache_dir(home, name);
    if cache.exists() {
        crate::runner::process::remove_tree(&cache);
    }
    let grant = grants::remove(home, name)?;
    state::set_enabled(home, name, true)?;
    let data_dir = home.data_dir(name);
    let data = if data_dir.exists() {
        if purge {
            std::fs::remove_dir_all(&data_dir).map_err(RegistryError::io("remove", &data_dir))?;
        }
        Some((data_dir, purge))
    } else {
        None
    };
    Ok(Removed { dir, venv, grant, data })
}
