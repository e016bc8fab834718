//! A python plugin's own virtual environment: `<home>/venvs/<name>`, built
//! from its requirements by `ctxhost plugin install` / `ctxhost plugin deps`,
//! and the interpreter its hooks then run on.
//!
//! `<home>/venvs/<name>` is a symlink to the real environment
//! `<home>/venvs/.<name>-<random>`. A new environment is built whole at its
//! final real path (a venv cannot be moved: pip writes absolute paths into
//! its scripts), then the link is replaced by a rename — so a hook starting
//! meanwhile runs on the old environment or the new one, never on half of
//! one. The environment lives outside the plugin's data dir, so a hook cannot
//! rewrite the interpreter it runs on.
//!
//! `python -m venv` and pip run the plugin's choice of packages, so they run
//! as the plugin would: confined by the script sandbox with the plugin's
//! filesystem rules (its grant) plus its new environment and its own pip
//! cache (`<home>/cache/pip/<name>`), with the network, an environment of
//! the host's locale, proxy and `PIP_*` variables only, in isolated mode
//! (`-I`) from a working directory the plugin cannot write — no interpreter
//! started here imports anything from the plugin's directory. Only wheels are
//! installed (`--only-binary=:all:`) unless the operator allowed source
//! builds for the plugin (`Grant::source_builds`), and requirement lines are
//! package specifiers only ([`check_requirements`]), handed to pip from a
//! copy the plugin cannot change.
//!
//! This module runs `python -m venv` and `pip` and nothing else; which python
//! builds the environment is the caller's (the launcher the runtime resolves).

use std::ffi::OsString;
use std::io::{Read, Seek};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::home::Home;
use crate::host::LoadContext;
use crate::host::grants::Grant;
use crate::runner::process::sandbox::{Confinement, Inputs};

/// `python -m venv` takes seconds; past this it is stuck.
const VENV_TIMEOUT: Duration = Duration::from_secs(300);
/// pip may download and build for a long time, but not forever.
const PIP_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How much of a failed command's output is shown.
const SHOWN_LINES: usize = 60;

/// The host variables pip sees (everything else is cleared: a build must
/// not read the operator's tokens from the environment).
const PIP_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "PIP_CLIENT_CERT",
    "PIP_CONFIG_FILE",
    "PIP_PROXY",
    "PIP_TIMEOUT",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_RETRIES",
    "PIP_PREFER_BINARY",
    "PIP_PROGRESS_BAR",
    "PIP_NO_CACHE_DIR",
    "PIP_KEYRING_PROVIDER",
];

/// Host variables naming files pip reads (made readable under the sandbox).
const PIP_FILE_VARS: &[&str] =
    &["PIP_CONFIG_FILE", "PIP_CERT", "PIP_CLIENT_CERT", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"];

/// What pip takes as a local archive rather than a package name.
const ARCHIVE_SUFFIXES: &[&str] =
    &[".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma"];

/// Why an environment could not be built.
impl VenvError {
    /// `map_err` for a failed file operation on `path`.
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VenvError {
        let path = path.to_owned();
        move |source| VenvError::Io { action, path, source }
    }
}

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
    /// A requirement line that is not a package specifier.
    #[error(
        "`{}` line {line}: `{text}` is not a package specifier ({reason}); only names with versions, extras and \
         markers (`name[extra]>=1.0; python_version >= \"3.9\"`) are installed — no pip options, URLs, archives \
         or local paths",
        file.display()
    )]
    Requirement { file: PathBuf, line: usize, text: String, reason: &'static str },
    /// pip cannot be confined as the operator requires (`[sandbox] require`).
    #[error("cannot confine pip for plugin '{plugin}': {reason}")]
    Sandbox { plugin: String, reason: String },
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

/// Checks every line of a requirements file: blank lines, comments and
/// package specifiers only — a name (which must not look like an archive),
/// optional `[extras]`, version clauses, an optional `; marker` and
/// `--hash=` options. Refused: any other pip option (`-r`, `-e`,
/// `--index-url`, `--global-option`, …, also after a marker, where pip still
/// reads them), URLs and `name @ url`, paths (`./x`, `/x`, `~/x`), archives
/// (`x-1.0.tar.gz`, which pip takes as a local file), `$` (pip expands
/// `${VAR}`) and line continuations.
///
/// # Errors
/// The first line that is not one, naming file, line and reason.
pub fn check_requirements(file: &Path, text: &str) -> Result<(), VenvError> {
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if let Err(reason) = check_line(line) {
            return Err(VenvError::Requirement { file: file.to_owned(), line: i + 1, text: line.to_owned(), reason });
        }
    }
    Ok(())
}

/// The line without a pip comment (`#` at the start or after whitespace).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

fn check_line(line: &str) -> Result<(), &'static str> {
    if line.contains('\\') {
        return Err("a backslash or line continuation");
    }
    if line.contains('$') {
        return Err("`$`: pip would expand environment variables");
    }
    if line.contains("://") || line.to_ascii_lowercase().contains("file:") {
        return Err("a URL");
    }
    if line.contains('@') {
        return Err("a direct reference `name @ url`");
    }
    if line.contains('/') || line.starts_with('.') || line.starts_with('~') {
        return Err("a path");
    }
    let mut kept = Vec::new();
    for token in line.split_whitespace() {
        if token.starts_with("--hash=") {
            continue;
        }
        if token.starts_with('-') {
            return Err("a pip option");
        }
        kept.push(token);
    }
    let kept = kept.join(" ");
    let spec = kept.split_once(';').map_or(kept.as_str(), |(spec, _marker)| spec).trim();
    let name_len =
        spec.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(spec.len());
    let (name, mut rest) = spec.split_at(name_len);
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err("no package name");
    }
    let lower = name.to_ascii_lowercase();
    if ARCHIVE_SUFFIXES.iter().any(|s| lower.ends_with(s)) {
        return Err("an archive file name, which pip installs as a local file");
    }
    rest = rest.trim_start();
    if let Some(extras) = rest.strip_prefix('[') {
        let Some((inside, after)) = extras.split_once(']') else { return Err("unclosed extras") };
        if !inside.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ',' | ' ')) {
            return Err("bad extras");
        }
        rest = after;
    }
    let version_char = |c: char| c.is_ascii_alphanumeric() || " \t<>=!~.,*+-_()".contains(c);
    if !rest.chars().all(version_char) {
        return Err("not a version clause");
    }
    Ok(())
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
            // Also what a confined build left unwritable.
            crate::runner::process::remove_tree(&real);
        }
    }
}

/// A directory removed when dropped, also parts pip's build made unwritable.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::runner::process::remove_tree(&self.0);
    }
}

/// What to install into a plugin's new environment, and with what privileges.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The plugin's name.
    pub name: &'a str,
    /// The python the environment is made from.
    pub base_python: &'a Path,
    /// The plugin's directory (relative grant paths are relative to it).
    pub plugin_dir: &'a Path,
    /// Where the requirements were read from (named in errors).
    pub requirements_file: &'a Path,
    /// The requirements' text: checked, then handed to pip from a copy.
    pub requirements: &'a str,
    /// The plugin's privileges: pip gets its filesystem rules, plus the
    /// network, its new environment and its pip cache; `source_builds` lets
    /// pip build source distributions (confined all the same).
    pub grant: &'a Grant,
}

/// `<home>/cache/pip/<name>`: plugin `name`'s own pip cache (one cache per
/// plugin, so a build one plugin was allowed cannot plant a wheel another
/// plugin's install would pick up).
pub fn pip_cache_dir(home: &Home, name: &str) -> PathBuf {
    home.cache_dir().join("pip").join(name)
}

/// Builds a fresh environment for plugin `req.name` with `req.base_python`
/// and installs the requirements into it with pip, both confined as the
/// plugin is (see the module doc). pip gets the host's index settings
/// (`/etc/pip.conf`, the user's pip.conf, `PIP_INDEX_URL`, `PIP_FIND_LINKS`,
/// `PIP_NO_INDEX`, …); a `PIP_FIND_LINKS` directory is readable under the
/// sandbox.
///
/// # Errors
/// A requirement line that is not a package specifier, a directory that
/// cannot be created, a sandbox that cannot be applied, or `python -m venv`
/// or pip failing (the error carries the end of its output and, for a
/// package without a wheel, the opt-in that allows building it).
pub fn build(cx: &LoadContext<'_>, req: &Request<'_>) -> Result<Built, VenvError> {
    check_requirements(req.requirements_file, req.requirements)?;
    let home = cx.home;
    let name = req.name;
    let link = home.venv_dir(name);
    let parent = link.parent().unwrap_or(home.root()).to_owned();
    let io = VenvError::io;
    Home::ensure_dir(&parent).map_err(io("create", &parent))?;
    let real = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .tempdir_in(&parent)
        .map_err(io("create a directory in", &parent))?
        .keep();
    let mut built = Built { real: Some(real.clone()), pip_summary: None };

    // The working directory: made here, holding the checked copy of the
    // requirements and pip's TMPDIR (the one place under it pip may write).
    let cache_root = home.cache_dir();
    Home::ensure_dir(&cache_root).map_err(io("create", &cache_root))?;
    let work = Scratch(
        tempfile::Builder::new()
            .prefix("pip-run-")
            .tempdir_in(&cache_root)
            .map_err(io("create a directory in", &cache_root))?
            .keep(),
    );
    let requirements = work.0.join("requirements.txt");
    std::fs::write(&requirements, req.requirements).map_err(io("write", &requirements))?;
    let tmp = work.0.as_path().join("tmp");
    std::fs::create_dir(&tmp).map_err(io("create", &tmp))?;
    let cache = pip_cache_dir(home, name);
    Home::ensure_dir(&cache).map_err(io("create", &cache))?;

    let env = pip_env(cx, &tmp, &cache);
    let confinement = confinement(cx, req, &real, work.0.as_path(), &cache, &env)?;

    let mut venv = Command::new(req.base_python);
    venv.args(["-I", "-m", "venv"]).arg(&real);
    let shown = format!("{} -I -m venv {}", req.base_python.display(), real.display());
    run(&mut venv, &shown, work.0.as_path(), &env, &confinement, &tmp, VENV_TIMEOUT, |output| {
        (output.contains("ensurepip") || output.contains("No module named venv")).then(|| {
            "this python has no working `venv` module; on Debian/Ubuntu: `apt-get install python3-venv`".to_owned()
        })
    })?;

    let only_binary = !req.grant.source_builds;
    let mut pip = Command::new(python(&real));
    pip.args(["-I", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]);
    if only_binary {
        pip.arg("--only-binary=:all:");
    }
    pip.arg("-r").arg(&requirements);
    let shown = format!(
        "{} -I -m pip install{} -r {}",
        python(&link).display(),
        if only_binary { " --only-binary=:all:" } else { "" },
        req.requirements_file.display()
    );
    let output = run(&mut pip, &shown, work.0.as_path(), &env, &confinement, &tmp, PIP_TIMEOUT, |output| {
        pip_hint(output, name, only_binary)
    })?;
    built.pip_summary =
        output.lines().rev().map(str::trim).find(|l| l.starts_with("Successfully installed")).map(str::to_owned);
    Ok(built)
}

/// The hint for a failed pip run: a package pip found nothing installable
/// for may exist only as a source distribution (named, with the opt-in).
fn pip_hint(output: &str, plugin: &str, only_binary: bool) -> Option<String> {
    const NOT_FOUND: &str = "No matching distribution found for ";
    let line = output.lines().find_map(|l| l.split_once(NOT_FOUND).map(|(_, rest)| rest.trim()))?;
    let package: String =
        line.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')).collect();
    let index = "pip uses this machine's index settings (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS); check them";
    if !only_binary {
        return Some(index.to_owned());
    }
    Some(format!(
        "no wheel of `{package}` was found, and only wheels are installed: if `{package}` exists only as a source \
         distribution, allow building it with `ctxhost plugin grant {plugin} --source-builds` (its build code then \
         runs confined, as the plugin does); otherwise {index}"
    ))
}

/// pip's environment: the host's [`PIP_ENV`] variables, pip's cache and
/// TMPDIR; a relative `PIP_FIND_LINKS` entry made absolute (pip runs from
/// another directory).
fn pip_env(cx: &LoadContext<'_>, tmp: &Path, cache: &Path) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        PIP_ENV.iter().filter_map(|k| (cx.host_env)(k).map(|v| (OsString::from(k), v))).collect();
    let cwd = std::env::current_dir().ok();
    for (key, value) in &mut env {
        if key == "PIP_FIND_LINKS" {
            let entries: Vec<String> = value
                .to_string_lossy()
                .split_whitespace()
                .map(|e| match (&cwd, e.contains(':') || e.starts_with('/')) {
                    (Some(cwd), false) => cwd.join(e).to_string_lossy().into_owned(),
                    _ => e.to_owned(),
                })
                .collect();
            *value = entries.join(" ").into();
        }
    }
    env.push(("PIP_CACHE_DIR".into(), cache.into()));
    env.push(("TMPDIR".into(), tmp.into()));
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    env
}

/// The sandbox of `python -m venv` and pip for plugin `req.name`: its grant's
/// filesystem rules, writable `real` (the new environment) and `cache`,
/// readable `work`, the `PIP_FIND_LINKS` directories, the files pip's
/// variables name and the user's pip.conf; the network allowed.
fn confinement(
    cx: &LoadContext<'_>,
    req: &Request<'_>,
    real: &Path,
    work: &Path,
    cache: &Path,
    env: &[(OsString, OsString)],
) -> Result<Confinement, VenvError> {
    let resolve = |p: &PathBuf| if p.is_relative() { req.plugin_dir.join(p) } else { p.clone() };
    let settings = crate::manifest::ExecSettings {
        allow_network: true,
        allow_filesystem: req.grant.allow_filesystem,
        readable_paths: req.grant.readable_paths.iter().map(resolve).collect(),
        writable_paths: req.grant.writable_paths.iter().map(resolve).collect(),
        ..Default::default()
    };
    let var = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let mut readable = vec![work.to_owned()];
    if let Some(links) = var("PIP_FIND_LINKS") {
        for entry in links.to_string_lossy().split_whitespace() {
            let path = entry.strip_prefix("file://").unwrap_or(entry);
            if path.starts_with('/') {
                readable.push(PathBuf::from(path));
            }
        }
    }
    readable.extend(PIP_FILE_VARS.iter().filter_map(|k| var(k)).map(PathBuf::from).filter(|p| p.is_absolute()));
    let home = (cx.host_env)("HOME").map(PathBuf::from);
    if let Some(home) = &home {
        let config = (cx.host_env)("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config"));
        readable.push(config.join("pip/pip.conf"));
        readable.push(home.join(".pip/pip.conf"));
    }
    let (confinement, warnings) = Confinement::for_plugin(Inputs {
        plugin: req.name,
        settings: &settings,
        plugin_dir: real,
        data_dir: cache,
        user_home: home.as_deref(),
        // pip needs no LibreFang dirs (and gets the user's HOME for pip.conf).
        hook_home: None,
        earlier_home: None,
        launcher: Some(req.base_python),
        venv: None,
        path_vars: readable,
        max_processes: cx.config.sandbox.max_processes,
        require: cx.config.sandbox.require,
        installer: true,
    })
    .map_err(|e| VenvError::Sandbox { plugin: req.name.to_owned(), reason: e.to_string() })?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    if !confinement.confines_filesystem() && !req.grant.allow_filesystem {
        tracing::warn!(
            plugin = %req.name,
            "this machine cannot confine the filesystem (no Landlock): pip runs unconfined"
        );
    }
    Ok(confinement)
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
/// is kept) from `cwd` with exactly `env`, confined, in its own process
/// group for at most `timeout`, killing the group at the end. Returns the
/// output; a failure carries the output and the hint `hint_for` finds in it.
#[allow(clippy::too_many_arguments)]
fn run(
    cmd: &mut Command,
    shown: &str,
    cwd: &Path,
    env: &[(OsString, OsString)],
    confinement: &Confinement,
    tmp: &Path,
    timeout: Duration,
    hint_for: impl Fn(&str) -> Option<String>,
) -> Result<String, VenvError> {
    let program = PathBuf::from(cmd.get_program());
    let io = |source| VenvError::Io { action: "run", path: program.clone(), source };
    let mut log = tempfile::tempfile().map_err(io)?;
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().map_err(io)?))
        .stderr(Stdio::from(log.try_clone().map_err(io)?));
    // Kept until the process group is gone.
    let (steps, _cleanup) = confinement.prepare(Some(tmp)).map_err(io)?;
    if let Some(mut steps) = steps {
        // SAFETY: `apply` only makes syscalls on fds and buffers prepared
        // above (no allocation on success, no locks), as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || steps.apply());
        }
    }
    let mut child = cmd.spawn().map_err(io)?;
    let status = crate::runner::process::probe::wait_then_kill_group(&mut child, timeout, Duration::from_millis(20))
        .map_err(io)?;
    let mut output = String::new();
    let _ = log.rewind();
    let _ = log.read_to_string(&mut output);
    let Some(status) = status else {
        return Err(VenvError::Command {
            command: shown.to_owned(),
            status: format!("did not finish within {} s, killed", timeout.as_secs()),
            hint: hint_for(&output),
            output,
        });
    };
    if !status.success() {
        return Err(VenvError::Command {
            command: shown.to_owned(),
            status: crate::runner::process::exit_label(status),
            hint: hint_for(&output),
            output,
        });
    }
    Ok(output)
}
