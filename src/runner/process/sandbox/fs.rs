//! Filesystem confinement with Landlock (spec section 6): which roots a hook
//! may read and write, decided once per plugin ([`FsPolicy::build`]), and the
//! ruleset of one process ([`FsPolicy::ruleset`]: built in the parent with
//! path fds, so the child only calls `landlock_restrict_self`).
//!
//! Landlock only allows, it cannot carve a hole out of an allowed tree, so
//! no allowed root may be `$HOME` or one of its ancestors: such a root is
//! refused with a warning, and the rest of `$HOME` stays out of reach.
//!
//! `/proc` and `/sys` are readable whole: a rule on `/proc/self` taken in the
//! parent would name the parent, and runtimes read `/proc/self/*`,
//! `/proc/meminfo`, `/sys/devices/system/cpu`, the cgroup files. Landlock
//! does not cover path walks, `stat`, or connecting to a named UNIX socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::identity;
use ::landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError,
    Scope,
};

/// The Landlock ABI whose rights ctxhost handles (older kernels get what they
/// support: best effort).
const TARGET_ABI: ABI = ABI::V6;

/// Readable system roots (those that exist).
const SYSTEM_READ: &[&str] =
    &["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/var/lib/gems"];

/// Device files a hook may read.
const DEVICES_READ: &[&str] = &["/dev/urandom", "/dev/random", "/dev/zero", "/dev/full"];

/// Device files a hook may write.
const DEVICES_WRITE: &[&str] = &["/dev/null"];

/// Everything the policy is made from (all privileges already the effective ones).
pub struct FsInputs<'a> {
    pub plugin: &'a str,
    pub plugin_dir: &'a Path,
    pub data_dir: &'a Path,
    /// The hook's `HOME`.
    pub user_home: Option<&'a Path>,
    /// The launcher program (its installation prefix becomes readable).
    pub launcher: Option<&'a Path>,
    /// A python plugin's virtual environment.
    pub venv: Option<&'a Path>,
    /// Directories named by the runtime's passthrough path variables
    /// (`PYTHONPATH`, `NODE_PATH`, …).
    pub path_vars: Vec<PathBuf>,
    pub readable_paths: &'a [PathBuf],
    pub writable_paths: &'a [PathBuf],
    /// As root: the uid/gid hooks run as; the plugin's own dirs (its
    /// directory, data dir, LibreFang store) are given to it.
    pub hook_id: Option<u32>,
}

/// An `O_PATH` fd of `path`, not following a symlink in its last part.
pub fn open_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?
        .into())
}

/// One allowed root, pinned at load: the rule of every later process is
/// made from this fd, never from the path again, so a root replaced by a
/// symlink after load (`state` → `/`) still means the directory that was
/// checked. A named grant whose path no longer leads to it is left out.
#[derive(Debug, Clone)]
pub struct Root {
    pub path: PathBuf,
    fd: Arc<OwnedFd>,
    /// Named by the manifest (a grant): re-checked before each process.
    named: bool,
    dev: u64,
    ino: u64,
}

impl Root {
    /// Opens `canonical` without following a symlink in its last part and
    /// checks the fd is that path.
    fn pin(canonical: &Path, named: bool) -> io::Result<Root> {
        let fd = open_path(canonical)?;
        let at = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if at != canonical {
            return Err(io::Error::other(format!("`{}` changed while it was checked", canonical.display())));
        }
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        Ok(Root { path: canonical.to_owned(), fd: Arc::new(fd), named, dev: meta.dev(), ino: meta.ino() })
    }

    /// The pinned fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the path still leads to the pinned directory.
    fn unchanged(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }
}

/// The roots of one plugin, canonical, existing and pinned.
#[derive(Debug, Clone, Default)]
pub struct FsPolicy {
    pub read: Vec<Root>,
    pub write: Vec<Root>,
    plugin: String,
}

impl FsPolicy {
    /// The plugin's roots. Creates the LibreFang-layout dirs
    /// (`~/.librefang/plugins/<name>/`, `~/.librefang/logs/`) and the data
    /// dir when missing; as root, gives the plugin's own writable dirs to
    /// its hook uid. Returns the policy and a warning per refused root.
    pub fn build(i: &FsInputs<'_>) -> (FsPolicy, Vec<String>) {
        let home = i.user_home.map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.to_owned()));
        let mut warnings = Vec::new();
        let mut policy = FsPolicy { plugin: i.plugin.to_owned(), ..FsPolicy::default() };
        let plugin_dir = std::fs::canonicalize(i.plugin_dir).unwrap_or_else(|_| i.plugin_dir.to_owned());
        let resolve = |p: &Path| if p.is_relative() { plugin_dir.join(p) } else { p.to_owned() };

        let _ = std::fs::create_dir_all(i.data_dir);
        // Dirs that are the plugin's own, given to its uid as root.
        let mut own: Vec<PathBuf> = vec![i.data_dir.to_owned(), i.plugin_dir.to_owned()];
        let mut write: Vec<(PathBuf, bool)> = vec![(i.plugin_dir.to_owned(), false), (i.data_dir.to_owned(), false)];
        if let Some(home) = i.user_home {
            let store = home.join(".librefang/plugins").join(i.plugin);
            let logs = home.join(".librefang/logs");
            // Created on demand; a HOME that cannot hold them just leaves them out.
            if std::fs::create_dir_all(&store).is_ok() {
                own.push(store.clone());
                write.push((store, false));
            }
            if std::fs::create_dir_all(&logs).is_ok() {
                if i.hook_id.is_some() {
                    // Shared by every plugin's uid: like /tmp (sticky).
                    let _ = std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o1777));
                }
                write.push((logs, false));
            }
        }
        if let Some(id) = i.hook_id {
            for dir in &own {
                if let Err(e) = identity::give_tree(dir, id, id) {
                    warnings.push(format!(
                        "plugin '{}': cannot give `{}` to the hook uid {id}: {e}; its hooks may not write there",
                        i.plugin,
                        dir.display()
                    ));
                }
            }
        }
        if i.hook_id.is_some() {
            // The venv is ctxhost's own (built by root, 0700 while staged):
            // the hook's uid must read it.
            if let Some(venv) = i.venv {
                open_for_reading(venv);
            }
        }
        write.extend(i.writable_paths.iter().map(|p| (resolve(p), true)));
        write.extend(DEVICES_WRITE.iter().map(|p| (PathBuf::from(p), false)));

        let mut read: Vec<(PathBuf, bool)> =
            SYSTEM_READ.iter().chain(DEVICES_READ).map(|p| (p.into(), false)).collect();
        read.extend(launcher_roots(i.launcher, home.as_deref()).into_iter().map(|p| (p, false)));
        read.extend(i.venv.map(|v| (v.to_owned(), false)));
        read.extend(i.path_vars.iter().map(|p| (p.clone(), false)));
        read.extend(i.readable_paths.iter().map(|p| (resolve(p), true)));

        for (list, out, what) in [(write, &mut policy.write, "writable"), (read, &mut policy.read, "readable")] {
            for (path, named) in list {
                let Ok(canonical) = std::fs::canonicalize(&path) else {
                    if named {
                        tracing::debug!("{what} path `{}` of plugin '{}' does not exist", path.display(), i.plugin);
                    }
                    continue;
                };
                if home.as_deref().is_some_and(|h| h.starts_with(&canonical)) || canonical == Path::new("/") {
                    warnings.push(format!(
                        "plugin '{}': the {what} path `{}` is not allowed: it is the home directory or one of \
                         its parents, which would open all of it (~/.ssh, ~/.aws, …). Name a directory inside it",
                        i.plugin,
                        path.display()
                    ));
                    continue;
                }
                // A granted path means the directory itself: one that is (or
                // passes through) a symlink is refused, not followed — the
                // plugin could have swapped it in (`state` -> `/`).
                let written: PathBuf = path.components().collect();
                if named && written != canonical {
                    warnings.push(format!(
                        "plugin '{}': the {what} path `{}` is refused: it is or passes through a symlink (it \
                         leads to `{}`); grant the directory itself",
                        i.plugin,
                        path.display(),
                        canonical.display()
                    ));
                    continue;
                }
                if out.iter().any(|r| r.path == canonical) {
                    continue;
                }
                match Root::pin(&canonical, named) {
                    Ok(root) => out.push(root),
                    Err(e) => warnings.push(format!(
                        "plugin '{}': the {what} path `{}` is left out: {e}",
                        i.plugin,
                        path.display()
                    )),
                }
            }
        }
        (policy, warnings)
    }

    /// Every root, readable and writable.
    pub fn roots(&self) -> impl Iterator<Item = &Root> {
        self.read.iter().chain(&self.write)
    }

    /// A ruleset for one process: the plugin's roots plus its `tmpdir`
    /// (writable). The child enforces it with [`RulesetCreated::restrict_self`].
    /// A granted root whose path was swapped since load is left out (and
    /// warned about): the grant meant the directory that was checked.
    ///
    /// # Errors
    /// Landlock refusing the ruleset or a rule.
    pub fn ruleset(&self, tmpdir: Option<&Path>) -> Result<RulesetCreated, RulesetError> {
        let all = AccessFs::from_all(TARGET_ABI);
        let read = AccessFs::from_read(TARGET_ABI);
        // Writable, but no device nodes: a block device of the host's disk
        // made in the data dir would read around every rule.
        let write = all & !(AccessFs::MakeBlock | AccessFs::MakeChar);
        let mut ruleset = Ruleset::default().handle_access(all)?.scope(Scope::from_all(TARGET_ABI))?.create()?;
        let rules = self.read.iter().map(|r| (r, read)).chain(self.write.iter().map(|r| (r, write)));
        for (root, access) in rules {
            if root.named && !root.unchanged() {
                tracing::warn!(
                    "plugin '{}': the granted path `{}` was replaced since it was checked; it is refused \
                     (run `ctxhost plugin grant {}` after checking it)",
                    self.plugin,
                    root.path.display(),
                    self.plugin
                );
                continue;
            }
            ruleset = ruleset.add_rule(PathBeneath::new(root.fd(), access))?;
        }
        if let Some(tmp) = tmpdir
            && let Ok(fd) = PathFd::new(tmp)
        {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, write))?;
        }
        Ok(ruleset)
    }
}

/// Makes a directory ctxhost made for a plugin (its venv, the FaustBot shim)
/// readable by other uids when it is owned by this process's user.
fn open_for_reading(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else { return };
    // SAFETY: geteuid has no preconditions.
    if meta.is_dir() && meta.uid() == unsafe { libc::geteuid() } && meta.mode() & 0o005 != 0o005 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode((meta.mode() & 0o7777) | 0o755));
    }
}

/// The read rights of this kernel's Landlock, as raw bits (for a rule the
/// child adds on its own `/proc`).
pub fn read_bits() -> u64 {
    let abi = ABI::from(super::features().landlock_abi.min(6));
    (AccessFs::from_read(TARGET_ABI) & AccessFs::from_all(abi)).bits()
}

/// The launcher's installation prefix (`<prefix>/bin/<program>` → `<prefix>`)
/// and python's per-user site-packages. A prefix that is `$HOME` or above it
/// shrinks to the program's own directory.
fn launcher_roots(launcher: Option<&Path>, home: Option<&Path>) -> Vec<PathBuf> {
    let Some(program) = launcher.and_then(|l| std::fs::canonicalize(l).ok()) else { return Vec::new() };
    let Some(dir) = program.parent() else { return Vec::new() };
    let too_wide = |p: &Path| p == Path::new("/") || home.is_some_and(|h| h.starts_with(p));
    let prefix = match dir.file_name() {
        Some(name) if name == "bin" => dir.parent().unwrap_or(dir),
        _ => dir,
    };
    let mut roots = vec![if !too_wide(prefix) {
        prefix.to_owned()
    } else if !too_wide(dir) {
        dir.to_owned()
    } else {
        program.clone()
    }];
    let name = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let (Some(home), true) = (home, name.starts_with("python3.")) {
        roots.push(home.join(".local/lib").join(&name).join("site-packages"));
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_its_parents_are_refused_and_the_launcher_prefix_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home/u");
        let plugin_dir = root.path().join("plugins/p");
        let bin = home.join(".pyenv/versions/3.12.1/bin");
        for d in [&home, &plugin_dir, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(bin.join("python3.12"), "").unwrap();
        let readable = vec![home.clone(), root.path().join("home"), home.join(".pyenv")];
        let (policy, warnings) = FsPolicy::build(&FsInputs {
            plugin: "p",
            plugin_dir: &plugin_dir,
            data_dir: &root.path().join("data/p"),
            user_home: Some(&home),
            launcher: Some(&bin.join("python3.12")),
            venv: None,
            path_vars: Vec::new(),
            readable_paths: &readable,
            writable_paths: &[PathBuf::from("/")],
            hook_id: None,
        });
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        let read: Vec<&Path> = policy.read.iter().map(|r| r.path.as_path()).collect();
        let write: Vec<&Path> = policy.write.iter().map(|r| r.path.as_path()).collect();
        assert!(read.contains(&canon(&home.join(".pyenv")).as_path()));
        assert!(read.contains(&canon(&home.join(".pyenv/versions/3.12.1")).as_path()), "{read:?}");
        assert!(!read.iter().chain(&write).any(|p| canon(&home).starts_with(p)));
        assert!(write.contains(&canon(&home.join(".librefang/plugins/p")).as_path()));
        assert!(write.contains(&canon(&home.join(".librefang/logs")).as_path()));
        assert!(write.contains(&canon(&root.path().join("data/p")).as_path()));
    }
}
