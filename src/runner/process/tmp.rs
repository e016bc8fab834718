//! The temporary directories hooks get as `TMPDIR` (one per one-shot call,
//! one per persistent worker), named so a later start can tell which
//! process made them: `ctxhost-<plugin>-<pid>.<random>` and
//! `ctxhost-<plugin>-worker-<pid>.<random>` (a plugin name never holds a
//! `.`). A process removes its own when a call or worker ends; what a
//! killed daemon left behind is removed by [`remove_stale`] at the next start.
//!
//! Never removes a directory of a process that is alive (or may be: a pid
//! that cannot be checked), of another user, or anything that is not a
//! real directory — symlinks are never followed.

use std::path::{Path, PathBuf};

/// The name prefix of a temporary directory this process makes for
/// `plugin` (`worker`: a persistent worker's).
pub(crate) fn prefix(plugin: &str, worker: bool) -> String {
    let kind = if worker { "worker-" } else { "" };
    format!("ctxhost-{plugin}-{kind}{}.", std::process::id())
}

/// The pid that made a directory named `name`, if it is one of ours.
fn owner(name: &str) -> Option<libc::pid_t> {
    let rest = name.strip_prefix("ctxhost-")?;
    let (head, random) = rest.split_once('.')?;
    if random.is_empty() || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let (plugin, pid) = head.rsplit_once('-')?;
    if plugin.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&p: &libc::pid_t| p > 0)
}

/// Whether no process has pid `pid` (`kill(pid, 0)` says `ESRCH`).
fn dead(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Removes the hook temporary directories in `dir` (normally
/// `std::env::temp_dir()`) left by ctxhost processes that no longer run:
/// only names of the pattern above, owned by this user (or, as root, by a
/// hook uid), real directories,
/// whose pid is dead and not this process's. Returns what was removed.
pub fn remove_stale(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else { continue };
        if u32::try_from(pid).ok() == Some(std::process::id()) || !dead(pid) {
            continue;
        }
        let path = entry.path();
        // lstat: a symlink is never followed (nor removed).
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        // As root the directory was given to the plugin's hook uid.
        let hook_uid = me == 0
            && (super::sandbox::identity::HOOK_UID_BASE
                ..super::sandbox::identity::HOOK_UID_BASE + super::sandbox::identity::HOOK_UID_SPAN)
                .contains(&meta.uid());
        if !meta.file_type().is_dir() || (meta.uid() != me && !hook_uid) {
            continue;
        }
        super::remove_tree(&path);
        if !path.exists() {
            removed.push(path);
        }
    }
    removed
}

/// [`remove_stale`] on the system temporary directory, logged.
pub fn remove_stale_in_temp_dir() {
    let dir = std::env::temp_dir();
    let removed = remove_stale(&dir);
    if !removed.is_empty() {
        tracing::info!(
            "removed {} temporary directories of hooks left by ctxhost processes that were killed (in `{}`)",
            removed.len(),
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_tell_their_maker() {
        assert_eq!(owner("ctxhost-memory-worker-1234.AbC123"), Some(1234));
        assert_eq!(owner("ctxhost-a-9-8.x1"), Some(8));
        assert_eq!(owner("ctxhost-demo-AbC123"), None);
        assert_eq!(owner("ctxhost-memory-AbC123"), None);
        assert_eq!(owner("ctxhost-memory-12x.AbC"), None);
        assert_eq!(owner("ctxhost--12.AbC"), None);
        assert_eq!(owner("other-memory-12.AbC"), None);
        let p = prefix("memory", true);
        assert_eq!(owner(&format!("{p}AbC123")), Some(std::process::id() as libc::pid_t));
    }
}
