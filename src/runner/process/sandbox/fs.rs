//! Filesystem confinement with Landlock (spec section 6): which roots a hook
//! may read and write, decided once per plugin ([`FsPolicy::build`]), and the
//! ruleset of one process ([`FsPolicy::ruleset`]: built in the parent with
//! path fds, so the child only calls `landlock_restrict_self`).
//!
//! Landlock only allows, it cannot carve a hole out of an allowed tree, so
//! no allowed root may be `$HOME` or one of its ancestors: such a root is
//! refused with a warning, and the rest of `$HOME` stays out of reach. The
//! same holds for the hook's own `HOME` (the hook home, which holds every
//! plugin's LibreFang store).
//!
//! The plugin's own directories that may not exist yet — its data dir, its
//! LibreFang store `<hook home>/.librefang/plugins/<name>/` and the shared
//! `<hook home>/.librefang/logs/` — are made at its **first process**, not
//! at load (a plugin that never runs leaves nothing behind): the parent is
//! made and pinned at load, and the child is made and opened beneath that
//! fd (`mkdirat`, `openat(O_NOFOLLOW)`) at the first process, never looked
//! up by path again. As root they (and the plugin dir) are given to the
//! hook uid then, through those fds.
//!
//! `/proc` and `/sys` are readable whole: a rule on `/proc/self` taken in the
//! parent would name the parent, and runtimes read `/proc/self/*`,
//! `/proc/meminfo`, `/sys/devices/system/cpu`, the cgroup files. Landlock
//! does not cover path walks, `stat`, or connecting to a named UNIX socket.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

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
    /// The real `HOME` of the user ctxhost runs as: neither it nor a parent
    /// of it is ever a root.
    pub user_home: Option<&'a Path>,
    /// The hook's `HOME`, where LibreFang's layout lives
    /// (`.librefang/plugins/<name>/`, `.librefang/logs/`); `None`: no
    /// LibreFang dirs (an installer).
    pub hook_home: Option<&'a Path>,
    /// The home whose own `.librefang/plugins/<name>/` is looked at when the
    /// plugin's store is first made, to warn that state from before lies
    /// there (`None`: never, e.g. in a throw-away home).
    pub earlier_home: Option<&'a Path>,
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
    /// directory, data dir, LibreFang store) are given to it at its first
    /// process.
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

    /// Makes the directory `name` beneath the pinned `parent` (an existing
    /// one is kept) and pins it: `mkdirat` and `openat(O_NOFOLLOW)` on the
    /// parent's fd, so nothing swapped in along the path since load is
    /// followed, and a symlink in its place is refused.
    /// Also says whether it was made now.
    fn make_beneath(parent: &Root, name: &std::ffi::OsStr, mode: libc::mode_t) -> io::Result<(Root, bool)> {
        let c_name = CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: mkdirat relative to a live fd with a NUL-terminated name.
        let made = unsafe { libc::mkdirat(parent.fd().as_raw_fd(), c_name.as_ptr(), mode) } == 0;
        if !made {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        // SAFETY: openat relative to a live fd; the fd is owned below.
        let fd = unsafe {
            libc::openat(
                parent.fd().as_raw_fd(),
                c_name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `stat` is plain integers: all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a local (an O_PATH fd is enough).
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let root =
            Root { path: parent.path.join(name), fd: Arc::new(fd), named: false, dev: st.st_dev, ino: st.st_ino };
        Ok((root, made))
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

/// The roots of one plugin, canonical, existing and pinned; its own dirs
/// made at the first process ([`FsPolicy::own_dirs`]).
#[derive(Debug, Default)]
pub struct FsPolicy {
    pub read: Vec<Root>,
    pub write: Vec<Root>,
    plugin: String,
    /// Writable dirs made at the first process, beneath parents pinned at load.
    lazy: Vec<Lazy>,
    /// As root: the uid/gid the plugin's own dirs are given to.
    hook_id: Option<u32>,
    /// Roots pinned at load that are the plugin's own (its directory),
    /// given to the hook uid with the lazy ones.
    give: Vec<Root>,
    /// The lazy dirs once made (those that could be).
    made: OnceLock<Vec<Root>>,
}

/// A writable dir of the plugin made at its first process.
#[derive(Debug)]
struct Lazy {
    /// Its parent, made and pinned at load.
    parent: Root,
    name: OsString,
    /// Shared by every plugin (LibreFang's logs dir): sticky and writable by
    /// every hook uid as root, like /tmp; else the plugin's own (given to its uid).
    shared: bool,
    /// Where this dir lived for hooks that had the user's own `HOME` (an
    /// older ctxhost, LibreFang): named in a warning when it holds state and
    /// the new dir is made empty.
    earlier: Option<PathBuf>,
}

impl FsPolicy {
    /// The plugin's roots. Makes (and pins) only the shared parents of its
    /// own dirs — `<home>/data/`, `<hook home>/.librefang/plugins/`,
    /// `<hook home>/.librefang/` — never a dir of the plugin: those are made
    /// at its first process ([`FsPolicy::own_dirs`]). Returns the policy and
    /// a warning per refused root.
    pub fn build(i: &FsInputs<'_>) -> (FsPolicy, Vec<String>) {
        let canonical_or = |h: &Path| std::fs::canonicalize(h).unwrap_or_else(|_| h.to_owned());
        let home = i.user_home.map(canonical_or);
        let hook_home = i.hook_home.map(canonical_or);
        // No root may open the user's whole home; no granted root the hooks'
        // whole home (every plugin's LibreFang store). The manual hooks of
        // the config file have its directory — often ctxhost's home — as
        // their own: the operator's.
        let too_wide = |p: &Path, named: bool| {
            p == Path::new("/")
                || home.as_ref().is_some_and(|h| h.starts_with(p))
                || (named && hook_home.as_ref().is_some_and(|h| h.starts_with(p)))
        };
        let mut warnings = Vec::new();
        let mut policy = FsPolicy { plugin: i.plugin.to_owned(), hook_id: i.hook_id, ..FsPolicy::default() };
        let plugin_dir = canonical_or(i.plugin_dir);
        let resolve = |p: &Path| if p.is_relative() { plugin_dir.join(p) } else { p.to_owned() };

        let mut lazy: Vec<(PathBuf, bool, Option<PathBuf>)> = vec![(i.data_dir.to_owned(), false, None)];
        if let Some(given) = i.hook_home {
            let librefang = given.join(".librefang");
            let earlier = i
                .earlier_home
                .map(canonical_or)
                .filter(|h| Some(h) != hook_home.as_ref())
                .map(|h| h.join(".librefang/plugins").join(i.plugin));
            lazy.push((librefang.join("plugins").join(i.plugin), false, earlier));
            lazy.push((librefang.join("logs"), true, None));
        }
        for (dir, shared, earlier) in lazy {
            let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else { continue };
            // The parent is ctxhost's (shared by every plugin): made now.
            let pinned = std::fs::create_dir_all(parent).and_then(|()| {
                let canonical = std::fs::canonicalize(parent)?;
                if too_wide(&canonical.join(name), true) {
                    return Err(io::Error::other("it would open a home directory whole"));
                }
                Root::pin(&canonical, false)
            });
            match pinned {
                Ok(parent) => policy.lazy.push(Lazy { parent, name: name.to_owned(), shared, earlier }),
                Err(e) => warnings.push(format!(
                    "plugin '{}': the writable dir `{}` is left out: {e}",
                    i.plugin,
                    dir.display()
                )),
            }
        }
        if i.hook_id.is_some() {
            // The venv is ctxhost's own (built by root, 0700 while staged):
            // the hook's uid must read it.
            if let Some(venv) = i.venv {
                open_for_reading(venv);
            }
        }
        let mut write: Vec<(PathBuf, bool)> = vec![(i.plugin_dir.to_owned(), false)];
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
                if too_wide(&canonical, named) {
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
        policy.give = policy.write.iter().filter(|r| r.path == plugin_dir).cloned().collect();
        (policy, warnings)
    }

    /// The plugin's own dirs, made (and pinned) at the first call, the
    /// same ones ever after: its data dir, its LibreFang store, the shared
    /// logs dir; as root, they and the plugin's dir are given to its hook
    /// uid (the logs dir made sticky and writable by all, like /tmp). A dir
    /// that cannot be made is left out with a warning. Blocks (a first
    /// call as root walks the trees it gives).
    pub fn own_dirs(&self) -> &[Root] {
        self.made.get_or_init(|| {
            let mut made = Vec::new();
            for lazy in &self.lazy {
                let mode = if lazy.shared && self.hook_id.is_some() { 0o1777 } else { 0o755 };
                match Root::make_beneath(&lazy.parent, &lazy.name, mode) {
                    Ok((root, made_now)) => {
                        if let Some(earlier) = lazy.earlier.as_ref().filter(|e| made_now && holds_anything(e)) {
                            tracing::warn!(
                                "plugin '{}': its hooks now keep LibreFang state in `{}` (their HOME is inside \
                                 ctxhost's home), but `{}` holds state from before: move it there, or set \
                                 `[sandbox] hook_home = \"~\"` in config.toml to share your home's",
                                self.plugin,
                                root.path.display(),
                                earlier.display()
                            );
                        }
                        if lazy.shared && self.hook_id.is_some() {
                            // mkdirat's mode passed through the umask.
                            let _ = std::fs::set_permissions(
                                format!("/proc/self/fd/{}", root.fd().as_raw_fd()),
                                std::fs::Permissions::from_mode(0o1777),
                            );
                        }
                        made.push((root, lazy.shared));
                    }
                    Err(e) => tracing::warn!(
                        "plugin '{}': cannot make its directory `{}` ({e}); its hooks cannot write there",
                        self.plugin,
                        lazy.parent.path.join(&lazy.name).display()
                    ),
                }
            }
            if let Some(id) = self.hook_id {
                let own = self.give.iter().chain(made.iter().filter(|(_, shared)| !shared).map(|(r, _)| r));
                for root in own {
                    if let Err(e) = identity::give_tree_at(root.fd(), id, id) {
                        tracing::warn!(
                            "plugin '{}': cannot give `{}` to the hook uid {id}: {e}; its hooks may not write there",
                            self.plugin,
                            root.path.display()
                        );
                    }
                }
            }
            made.into_iter().map(|(root, _)| root).collect()
        })
    }

    /// Whether [`FsPolicy::own_dirs`] has made them already.
    pub fn own_dirs_made(&self) -> bool {
        self.made.get().is_some()
    }

    /// Every root, readable and writable (the plugin's own dirs made first).
    pub fn roots(&self) -> impl Iterator<Item = &Root> {
        self.read.iter().chain(&self.write).chain(self.own_dirs())
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
        let rules =
            self.read.iter().map(|r| (r, read)).chain(self.write.iter().chain(self.own_dirs()).map(|r| (r, write)));
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

/// Whether `dir` is a directory with at least one entry: an empty one (as
/// earlier versions made for every plugin they loaded) holds no state.
fn holds_anything(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_its_parents_are_refused_and_the_launcher_prefix_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home/u");
        let hook_home = root.path().join("ctx/hook-home");
        let plugin_dir = root.path().join("plugins/p");
        let bin = home.join(".pyenv/versions/3.12.1/bin");
        for d in [&home, &plugin_dir, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(bin.join("python3.12"), "").unwrap();
        let readable = vec![home.clone(), root.path().join("home"), home.join(".pyenv"), root.path().join("ctx")];
        let (policy, warnings) = FsPolicy::build(&FsInputs {
            plugin: "p",
            plugin_dir: &plugin_dir,
            data_dir: &root.path().join("ctx/data/p"),
            user_home: Some(&home),
            hook_home: Some(&hook_home),
            earlier_home: Some(&home),
            launcher: Some(&bin.join("python3.12")),
            venv: None,
            path_vars: Vec::new(),
            readable_paths: &readable,
            writable_paths: &[PathBuf::from("/")],
            hook_id: None,
        });
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        let read: Vec<&Path> = policy.read.iter().map(|r| r.path.as_path()).collect();
        assert!(read.contains(&canon(&home.join(".pyenv")).as_path()));
        assert!(read.contains(&canon(&home.join(".pyenv/versions/3.12.1")).as_path()), "{read:?}");
        // Nothing of the plugin's own is made at load; nothing in the user's home.
        assert!(!root.path().join("ctx/data/p").exists());
        assert!(!hook_home.join(".librefang/plugins/p").exists());
        assert!(!hook_home.join(".librefang/logs").exists());
        assert!(!home.join(".librefang").exists());
        assert!(!policy.own_dirs_made());

        let own: Vec<PathBuf> = policy.own_dirs().iter().map(|r| r.path.clone()).collect();
        assert!(policy.own_dirs_made());
        let all: Vec<&Path> = policy.roots().map(|r| r.path.as_path()).collect();
        assert!(!all.iter().any(|p| canon(&home).starts_with(p) || canon(&hook_home).starts_with(p)), "{all:?}");
        for dir in
            [root.path().join("ctx/data/p"), hook_home.join(".librefang/plugins/p"), hook_home.join(".librefang/logs")]
        {
            assert!(dir.is_dir(), "{}", dir.display());
            assert!(own.contains(&canon(&dir)), "{own:?}");
            assert!(all.contains(&canon(&dir).as_path()));
        }
        assert!(!home.join(".librefang").exists());
    }

    #[test]
    fn an_own_dir_swapped_for_a_symlink_before_its_first_call_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let plugin_dir = root.path().join("plugins/p");
        let outside = root.path().join("outside");
        for d in [&plugin_dir, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        let data = root.path().join("ctx/data/p");
        let (policy, _) = FsPolicy::build(&FsInputs {
            plugin: "p",
            plugin_dir: &plugin_dir,
            data_dir: &data,
            user_home: None,
            hook_home: None,
            earlier_home: None,
            launcher: None,
            venv: None,
            path_vars: Vec::new(),
            readable_paths: &[],
            writable_paths: &[],
            hook_id: None,
        });
        // Between load and the first call, the data dir becomes a link out.
        std::os::unix::fs::symlink(&outside, &data).unwrap();
        let own: Vec<&Path> = policy.own_dirs().iter().map(|r| r.path.as_path()).collect();
        assert!(own.is_empty(), "{own:?}");
        assert!(!policy.roots().any(|r| r.path.starts_with(std::fs::canonicalize(&outside).unwrap())));
    }
}
