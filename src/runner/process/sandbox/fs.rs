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

use std::path::{Path, PathBuf};

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
}

/// The roots of one plugin, canonical and existing.
#[derive(Debug, Clone, Default)]
pub struct FsPolicy {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

impl FsPolicy {
    /// The plugin's roots. Creates the LibreFang-layout dirs
    /// (`~/.librefang/plugins/<name>/`, `~/.librefang/logs/`) and the data
    /// dir when missing. Returns the policy and a warning per refused root.
    pub fn build(i: &FsInputs<'_>) -> (FsPolicy, Vec<String>) {
        let home = i.user_home.map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.to_owned()));
        let mut warnings = Vec::new();
        let mut policy = FsPolicy::default();
        let resolve = |p: &Path| if p.is_relative() { i.plugin_dir.join(p) } else { p.to_owned() };

        let _ = std::fs::create_dir_all(i.data_dir);
        let mut write: Vec<(PathBuf, bool)> = vec![(i.plugin_dir.to_owned(), true), (i.data_dir.to_owned(), true)];
        if let Some(home) = i.user_home {
            for dir in [home.join(".librefang/plugins").join(i.plugin), home.join(".librefang/logs")] {
                // Created on demand; a HOME that cannot hold them just leaves them out.
                if std::fs::create_dir_all(&dir).is_ok() {
                    write.push((dir, true));
                }
            }
        }
        write.extend(i.writable_paths.iter().map(|p| (resolve(p), true)));
        write.extend(DEVICES_WRITE.iter().map(|p| (PathBuf::from(p), false)));

        let mut read: Vec<(PathBuf, bool)> =
            SYSTEM_READ.iter().chain(DEVICES_READ).map(|p| (p.into(), false)).collect();
        read.extend(launcher_roots(i.launcher, home.as_deref()).into_iter().map(|p| (p, false)));
        read.extend(i.venv.map(|v| (v.to_owned(), true)));
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
                if !out.contains(&canonical) {
                    out.push(canonical);
                }
            }
        }
        (policy, warnings)
    }

    /// A ruleset for one process: the plugin's roots plus its `tmpdir`
    /// (writable). The child enforces it with [`RulesetCreated::restrict_self`].
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
        let mut rules: Vec<(&Path, _)> = self.read.iter().map(|p| (p.as_path(), read)).collect();
        rules.extend(self.write.iter().map(|p| (p.as_path(), write)));
        rules.extend(tmpdir.map(|p| (p, write)));
        for (path, access) in rules {
            // A root that vanished since load is simply not allowed.
            if let Ok(fd) = PathFd::new(path) {
                ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        Ok(ruleset)
    }
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
        });
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        assert!(policy.read.contains(&canon(&home.join(".pyenv"))));
        assert!(policy.read.contains(&canon(&home.join(".pyenv/versions/3.12.1"))), "{:?}", policy.read);
        assert!(!policy.read.iter().chain(&policy.write).any(|p| canon(&home).starts_with(p)));
        assert!(policy.write.contains(&canon(&home.join(".librefang/plugins/p"))));
        assert!(policy.write.contains(&canon(&home.join(".librefang/logs"))));
        assert!(policy.write.contains(&canon(&root.path().join("data/p"))));
    }
}
