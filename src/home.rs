//! ctxhost's own files (spec section 12): where the home, the plugins dir, the
//! config file and each plugin's data dir are, and how flags and variables
//! override them. This module computes paths; it creates directories only
//! when asked to ([`Home::ensure_dir`]).

use std::path::{Path, PathBuf};

/// Resolved locations of ctxhost's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
    plugins_dir: PathBuf,
    config_file: PathBuf,
    /// Made for one command and removed after it (`ctxhost demo`): nothing
    /// in it is upgraded from, so nothing is said about earlier state.
    throw_away: bool,
}

/// Overrides given on the command line (they win over the variables).
#[derive(Debug, Clone, Default)]
pub struct HomeOverrides {
    pub home: Option<PathBuf>,
    pub plugins_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

impl Home {
    /// Resolves the locations:
    /// - home: `--home`, else `CTXHOST_HOME`, else `~/.ctxhost`
    /// - plugins dir: `--plugins-dir`, else `CTXHOST_PLUGINS_DIR`, else `<home>/plugins`
    /// - config: `--config`, else `<home>/config.toml`
    pub fn resolve(overrides: HomeOverrides, env: &dyn Fn(&str) -> Option<String>) -> Home {
        let non_empty = |var: &str| env(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        let root = overrides.home.or_else(|| non_empty("CTXHOST_HOME")).unwrap_or_else(|| {
            // Never a shared directory such as /tmp: another user could plant
            // plugins or a launcher cache there. Without HOME, ask the user
            // database; without that, the current directory.
            let user_home = non_empty("HOME")
                .or_else(passwd_home)
                .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")));
            user_home.join(".ctxhost")
        });
        let plugins_dir =
            overrides.plugins_dir.or_else(|| non_empty("CTXHOST_PLUGINS_DIR")).unwrap_or_else(|| root.join("plugins"));
        let config_file = overrides.config.unwrap_or_else(|| root.join("config.toml"));
        // Absolute once, here: hooks, pip and the shim run with other working
        // directories, so a relative `--home .` must not mean something else
        // there. (Lexical only: no link is resolved.)
        let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        Home {
            root: absolute(root),
            plugins_dir: absolute(plugins_dir),
            config_file: absolute(config_file),
            throw_away: false,
        }
    }

    /// A home rooted at `root` with every default below it (tests, embedders).
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home::resolve(HomeOverrides { home: Some(root.into()), ..Default::default() }, &|_| None)
    }

    /// A home at `root` that lives for one command (the demo's).
    pub fn throw_away(root: impl Into<PathBuf>) -> Home {
        Home { throw_away: true, ..Home::at(root) }
    }

    /// Whether this home lives for one command only.
    pub fn is_throw_away(&self) -> bool {
        self.throw_away
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn plugins_dir(&self) -> &Path {
        &self.plugins_dir
    }

    pub fn config_file(&self) -> &Path {
        &self.config_file
    }

    /// `<home>/data/<plugin>`: state that belongs to one plugin.
    pub fn data_dir(&self, plugin: &str) -> PathBuf {
        self.root.join("data").join(plugin)
    }

    /// `<home>/hook-home`: the `HOME` hooks see by default (`[sandbox]
    /// hook_home` may name another). It keeps LibreFang's layout —
    /// `.librefang/plugins/<name>/` per plugin, the shared `.librefang/logs/`
    /// — so LibreFang plugins find their state where they keep it, while
    /// nothing a hook writes lands in the user's own home.
    pub fn hook_home(&self) -> PathBuf {
        self.root.join("hook-home")
    }

    /// `<home>/agent`: where the agent-loop host services kept their state
    /// (vfs, triggers, per-plugin config and storage) as JSON files, before
    /// the state store ([`Home::state_db`]) imported them once.
    pub fn agent_dir(&self) -> PathBuf {
        self.root.join("agent")
    }

    /// `<home>/grants.toml`: the privileges the operator granted each plugin
    /// (spec section 6). Read from here, never from a plugin's own manifest.
    pub fn grants_file(&self) -> PathBuf {
        self.root.join("grants.toml")
    }

    /// `<home>/plugins-state.toml`: which plugins were disabled, before the
    /// state store (imported from there once, then renamed aside).
    pub fn state_file(&self) -> PathBuf {
        self.root.join("plugins-state.toml")
    }

    /// `<home>/state.db`: the state store (`host::store`) — vfs, triggers,
    /// plugin storage and config values, enable state, the after_turn
    /// journal. One SQLite file in WAL mode.
    pub fn state_db(&self) -> PathBuf {
        self.root.join("state.db")
    }

    /// `<home>/venvs/<plugin>`: a python plugin's own virtual environment,
    /// outside its data dir so a hook cannot rewrite the interpreter it runs on.
    pub fn venv_dir(&self, plugin: &str) -> PathBuf {
        self.root.join("venvs").join(plugin)
    }

    /// `<home>/cache`: derived data that may be deleted at any time.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Replaces `path` with `bytes` atomically (a temporary file in the same
    /// directory, renamed over it): a concurrent reader — a hook reading its
    /// config, another ctxhost reading the cache — sees the old or the new
    /// file whole, never half of one. Creates the directory when missing.
    pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(bytes)?;
        // A replaced file keeps its owner and mode (a plugin's config view
        // belongs to the plugin's hook uid when ctxhost runs as root).
        if let Ok(old) = std::fs::symlink_metadata(path)
            && old.is_file()
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let _ = std::os::unix::fs::fchown(tmp.as_file(), Some(old.uid()), Some(old.gid()));
            let _ = tmp.as_file().set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777));
        }
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Creates `dir` (and parents) with a message naming it on failure.
    pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("failed to create `{}`: {e}", dir.display())))
    }
}

/// `rename(2)` that fails with `AlreadyExists` instead of replacing `to`
/// (which plain rename does when `to` is an empty directory): how a staged
/// plugin directory appears whole, or not at all.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    match renameat2(from, to, libc::RENAME_NOREPLACE) {
        // A file system without RENAME_NOREPLACE: check, then rename.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            if to.symlink_metadata().is_ok() {
                Err(std::io::Error::from_raw_os_error(libc::EEXIST))
            } else {
                std::fs::rename(from, to)
            }
        }
        other => other,
    }
}

/// Swaps `from` and `to` atomically (`RENAME_EXCHANGE`); both must exist.
/// A file system without it answers `EINVAL`, which the caller handles.
pub fn rename_exchange(from: &Path, to: &Path) -> std::io::Result<()> {
    renameat2(from, to, libc::RENAME_EXCHANGE)
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path holds a NUL byte"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: both are NUL-terminated paths that live across the call.
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), flags) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The current user's home directory from the user database.
fn passwd_home() -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids); it is
    // only read after getpwuid_r fills it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pwd` and `buf` (its length is passed)
    // and sets `result` to `&pwd` on success, or null.
    let rc = unsafe { libc::getpwuid_r(libc::getuid(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: on success pw_dir points to a NUL-terminated string inside `buf`.
    let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
    dir.is_absolute().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_home_is_made_absolute_once() {
        let home = Home::resolve(
            HomeOverrides {
                home: Some("rel-home".into()),
                plugins_dir: Some("rel-plugins".into()),
                ..Default::default()
            },
            &|_| None,
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(home.root(), cwd.join("rel-home"));
        assert_eq!(home.plugins_dir(), cwd.join("rel-plugins"));
        assert_eq!(home.config_file(), cwd.join("rel-home/config.toml"));
    }

    #[test]
    fn flags_beat_variables_beat_defaults() {
        let env = |v: &str| match v {
            "HOME" => Some("/u".to_owned()),
            "CTXHOST_HOME" => Some("/envhome".to_owned()),
            "CTXHOST_PLUGINS_DIR" => Some("/envplugins".to_owned()),
            _ => None,
        };
        let h = Home::resolve(HomeOverrides::default(), &env);
        assert_eq!(h.root(), Path::new("/envhome"));
        assert_eq!(h.plugins_dir(), Path::new("/envplugins"));
        assert_eq!(h.config_file(), Path::new("/envhome/config.toml"));

        let h = Home::resolve(
            HomeOverrides { home: Some("/flag".into()), plugins_dir: None, config: Some("/c.toml".into()) },
            &|v| (v == "HOME").then(|| "/u".to_owned()),
        );
        assert_eq!(h.root(), Path::new("/flag"));
        assert_eq!(h.plugins_dir(), Path::new("/flag/plugins"));
        assert_eq!(h.config_file(), Path::new("/c.toml"));
        assert_eq!(h.data_dir("p"), Path::new("/flag/data/p"));
        assert_eq!(h.hook_home(), Path::new("/flag/hook-home"));

        let h = Home::resolve(HomeOverrides::default(), &|v| (v == "HOME").then(|| "/u".to_owned()));
        assert_eq!(h.root(), Path::new("/u/.ctxhost"));

        // No HOME: the user database, never the shared temp dir.
        let h = Home::resolve(HomeOverrides::default(), &|_| None);
        assert!(!h.root().starts_with(std::env::temp_dir()), "{}", h.root().display());
        assert_eq!(h.root().file_name().unwrap(), ".ctxhost");
    }
}
