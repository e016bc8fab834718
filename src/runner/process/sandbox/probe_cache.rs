//! The sandbox probe's findings kept between processes: a one-shot
//! `ctxhost hook` would otherwise fork three throw-away children per run to
//! learn what the last run already learnt (a user namespace, a network
//! namespace, a pid namespace with its own `/proc` can be made), and each
//! pays for the namespace's making and teardown.
//!
//! The file (`<home>/cache/sandbox-features.json`, written by ctxhost only,
//! atomically) is keyed by what decides those answers: the kernel (release
//! and build), the effective uid, this binary (version, size, mtime), the
//! user-namespace sysctls, this process's own namespaces and seccomp mode. A
//! file for another key is ignored and rewritten.
//!
//! **Only in the fail-closed direction.** The file is never trusted to say
//! a feature is *missing* (a forged "no network namespace" would run hooks
//! on the host's network): it holds only [`Claims`] of features that are
//! there, whatever is not claimed is probed live, and a claim that is
//! false makes the hook's start fail (the namespace cannot be made) rather
//! than run it with less — `spawn` then removes the file
//! ([`distrust`]), so the next process probes again. Cheap checks (the
//! Landlock ABI, root, the cgroup hierarchies, seccomp) are never cached.
//!
//! This module reads and writes that one file; it never probes and never
//! decides what a hook gets.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The largest cache file read (a bigger one is not ours).
const MAX_BYTES: u64 = 16 * 1024;

/// What a file of this name holds.
const FORMAT: u32 = 1;

/// The features a cache may claim (every other feature is probed live).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claims {
    pub userns: bool,
    pub netns: bool,
    pub pidns: bool,
}

impl Claims {
    /// Nothing claimed: everything is probed.
    pub fn none() -> Claims {
        Claims::default()
    }

    fn names(self) -> Vec<String> {
        let mut names = Vec::new();
        for (claimed, name) in [(self.userns, "userns"), (self.netns, "netns"), (self.pidns, "pidns")] {
            if claimed {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// Unknown names are ignored (a newer or forged file claims nothing by them).
    fn from_names(names: &[String]) -> Claims {
        let has = |n: &str| names.iter().any(|x| x == n);
        Claims { userns: has("userns"), netns: has("netns"), pidns: has("pidns") }
    }
}

/// What decides the probe's answers on this machine, for this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// `uname -r` and `uname -v` (the release and its build).
    pub kernel: String,
    pub euid: u32,
    /// This binary: version, size and modification time.
    pub binary: String,
    /// The user-namespace sysctls that exist, `name=value`.
    pub sysctls: String,
    /// This process's own user, mount, pid and network namespaces.
    pub namespaces: String,
    /// This process's seccomp mode (a container's filter may refuse `unshare`).
    pub seccomp: i32,
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    format: u32,
    key: Key,
    /// Features found present, by name.
    claims: Vec<String>,
}

/// Sysctls that decide whether namespaces can be made.
const SYSCTLS: &[&str] = &[
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];

impl Key {
    /// This process's key (a few syscalls and small reads).
    pub fn of_this_process() -> Key {
        // SAFETY: uname fills the zeroed struct; geteuid and prctl
        // (PR_GET_SECCOMP only reads) have no preconditions.
        let (uts, euid, seccomp) = unsafe {
            let mut uts: libc::utsname = std::mem::zeroed();
            let ok = libc::uname(&mut uts) == 0;
            (ok.then_some(uts), libc::geteuid(), libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0))
        };
        let field = |f: &[libc::c_char]| {
            let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let kernel = uts.map(|u| format!("{} {}", field(&u.release), field(&u.version))).unwrap_or_default();
        let binary = {
            use std::os::unix::fs::MetadataExt;
            let meta = std::env::current_exe().and_then(std::fs::metadata);
            match meta {
                Ok(m) => format!("{} {} {}.{}", env!("CARGO_PKG_VERSION"), m.size(), m.mtime(), m.mtime_nsec()),
                Err(_) => format!("{} ?", env!("CARGO_PKG_VERSION")),
            }
        };
        let sysctls = SYSCTLS
            .iter()
            .filter_map(|p| {
                std::fs::read_to_string(p).ok().map(|v| format!("{}={}", p.rsplit('/').next().unwrap_or(p), v.trim()))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let namespaces = ["user", "mnt", "pid", "net"]
            .iter()
            .map(|ns| {
                std::fs::read_link(format!("/proc/self/ns/{ns}")).map(|l| l.display().to_string()).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(" ");
        Key { kernel, euid, binary, sysctls, namespaces, seccomp }
    }
}

/// The claims of the file at `path` for `key`; `None` when it is missing,
/// unreadable, too big, malformed or for another key.
pub fn read(path: &Path, key: &Key) -> Option<Claims> {
    let Ok(file) = std::fs::File::open(path) else { return None };
    let mut text = String::new();
    use std::io::Read;
    if file.take(MAX_BYTES + 1).read_to_string(&mut text).is_err() || text.len() as u64 > MAX_BYTES {
        tracing::debug!("sandbox probe cache `{}` is unreadable or too big: probing", path.display());
        return None;
    }
    match serde_json::from_str::<File>(&text) {
        Ok(f) if f.format == FORMAT && &f.key == key => Some(Claims::from_names(&f.claims)),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!("sandbox probe cache `{}` is malformed ({e}): probing", path.display());
            None
        }
    }
}

/// Writes `claims` for `key` to `path` (best effort: a cache that cannot
/// be written only costs the next process a probe).
pub fn write(path: &Path, key: &Key, claims: Claims) {
    let file = File { format: FORMAT, key: key.clone(), claims: claims.names() };
    let Ok(mut bytes) = serde_json::to_vec_pretty(&file) else { return };
    bytes.push(b'\n');
    if let Err(e) = crate::home::Home::write_atomic(path, &bytes) {
        tracing::debug!("cannot write the sandbox probe cache `{}`: {e}", path.display());
    }
}

/// Where the cache of a home lives.
pub fn path_in(cache_dir: &Path) -> PathBuf {
    cache_dir.join("sandbox-features.json")
}

/// Removes the cache (a claim it made did not hold): the next process
/// probes everything again.
pub fn distrust(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove the stale sandbox probe cache `{}`: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_file_for_this_key_claims_anything() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        let key = Key::of_this_process();
        assert!(!key.kernel.is_empty() && !key.namespaces.is_empty(), "{key:?}");
        assert_eq!(read(&path, &key), None, "no file");

        let all = Claims { userns: true, netns: true, pidns: true };
        write(&path, &key, all);
        assert_eq!(read(&path, &key), Some(all));
        write(&path, &key, Claims::none());
        assert_eq!(read(&path, &key), Some(Claims::none()), "a file for this key claiming nothing");
        write(&path, &key, all);

        let other = Key { kernel: "6.0.0 other build".into(), ..key.clone() };
        assert_eq!(read(&path, &other), None, "another kernel's file");
        let other = Key { euid: key.euid.wrapping_add(1), ..key.clone() };
        assert_eq!(read(&path, &other), None, "another user's file");

        std::fs::write(&path, "{ not json").unwrap();
        assert_eq!(read(&path, &key), None);
        std::fs::write(&path, vec![b' '; MAX_BYTES as usize + 10]).unwrap();
        assert_eq!(read(&path, &key), None);

        // Unknown and repeated names claim nothing more.
        let text = serde_json::json!({"format": FORMAT, "key": key, "claims": ["netns", "landlock", "root", "netns"]});
        std::fs::write(&path, text.to_string()).unwrap();
        assert_eq!(read(&path, &key), Some(Claims { netns: true, ..Claims::none() }));

        distrust(&path);
        assert!(!path.exists());
        distrust(&path);
    }
}
