//! Per-call cgroups: a hook process joins a fresh cgroup before it execs (it
//! writes `0` to the `cgroup.procs` files the parent opened), which carries
//! the memory and process-count limits, and at the end of the call every
//! process in it is killed — also those that left the process group with
//! `setsid` — and the cgroup removed.
//!
//! Cgroups are made below ctxhost's own cgroup of each hierarchy: a cgroup v2
//! one (always, when writable: `cgroup.kill`; limits only when ctxhost's
//! cgroup already delegates the `memory`/`pids` controllers — this module
//! never enables controllers or moves ctxhost itself), else the v1 `memory`
//! and `pids` hierarchies. Never touches a cgroup it did not make.

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::probe::join_cgroup;

/// Where per-call cgroups can be made (probed once).
#[derive(Debug, Clone, Default)]
pub struct Bases {
    /// ctxhost's own cgroup v2 directory, when a child can be made there.
    pub v2: Option<PathBuf>,
    /// The v2 cgroup's children get the memory controller.
    pub v2_memory: bool,
    /// The v2 cgroup's children get the pids controller.
    pub v2_pids: bool,
    /// ctxhost's own cgroup in the v1 memory hierarchy, when writable.
    pub v1_memory: Option<PathBuf>,
    /// ctxhost's own cgroup in the v1 pids hierarchy, when writable.
    pub v1_pids: Option<PathBuf>,
}

impl Bases {
    /// Whether calls get a v2 cgroup. Joining one costs about half a
    /// millisecond here (a v2 migration waits for an RCU grace period; v1
    /// joins take ~20 µs), so v2 is used only when it carries a limit or
    /// nothing else can hold the call's processes for the final kill.
    pub fn use_v2(&self) -> bool {
        self.v2.is_some() && (self.v2_memory || self.v2_pids || (self.v1_pids.is_none() && self.v1_memory.is_none()))
    }

    /// Reads the mounts and ctxhost's cgroups, and keeps the directories
    /// where a child cgroup can really be made.
    pub fn probe(mountinfo: &Path, proc_cgroup: &Path) -> Bases {
        let mounts = std::fs::read_to_string(mountinfo).unwrap_or_default();
        let own = std::fs::read_to_string(proc_cgroup).unwrap_or_default();
        let mut bases = Bases::default();
        for line in mounts.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(mount), Some(fstype), Some(opts)) =
                (left.get(3), left.get(4), right.first(), right.get(2))
            else {
                continue;
            };
            let mount = Path::new(mount);
            match *fstype {
                "cgroup2" if bases.v2.is_none() => {
                    let dir = own_cgroup(&own, |c| c.is_empty(), true).and_then(|p| under_root(&p, root));
                    bases.v2 = dir.map(|d| join_cgroup(mount, &d)).filter(|d| can_make_child(d));
                }
                "cgroup" => {
                    for (controller, slot) in [("memory", &mut bases.v1_memory), ("pids", &mut bases.v1_pids)] {
                        if slot.is_none() && opts.split(',').any(|o| o == controller) {
                            let dir = own_cgroup(&own, |c| c.split(',').any(|x| x == controller), false)
                                .and_then(|p| under_root(&p, root));
                            *slot = dir.map(|d| join_cgroup(mount, &d)).filter(|d| can_make_child(d));
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(v2) = &bases.v2 {
            let enabled = std::fs::read_to_string(v2.join("cgroup.subtree_control")).unwrap_or_default();
            bases.v2_memory = enabled.split_whitespace().any(|c| c == "memory");
            bases.v2_pids = enabled.split_whitespace().any(|c| c == "pids");
        }
        bases
    }
}

/// ctxhost's cgroup path in the hierarchy whose controller list matches.
fn own_cgroup(proc_cgroup: &str, matches: impl Fn(&str) -> bool, v2: bool) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        ((id == "0") == v2 && matches(controllers)).then(|| path.to_owned())
    })
}

/// A cgroup path relative to the mount's root (a bind mount of a sub-tree).
fn under_root(path: &str, root: &str) -> Option<String> {
    if root == "/" {
        return Some(path.to_owned());
    }
    path.strip_prefix(root).map(str::to_owned)
}

/// Whether a child cgroup can be made (and removed) in `dir`.
fn can_make_child(dir: &Path) -> bool {
    let probe = dir.join(format!("ctxhost-probe-{}", std::process::id()));
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let procs_writable = OpenOptions::new().write(true).open(probe.join("cgroup.procs")).is_ok();
    let _ = std::fs::remove_dir(&probe);
    procs_writable
}

/// The limits a per-call cgroup carries.
#[derive(Debug, Clone, Copy)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    pub max_processes: Option<u64>,
}

/// One call's cgroups (one per hierarchy used).
#[derive(Debug)]
pub struct CallCgroup {
    /// The directories made, v2 first.
    dirs: Vec<PathBuf>,
    /// The v2 directory, when one was made (it has `cgroup.kill`).
    v2: Option<PathBuf>,
}

/// The `cgroup.procs` files the child writes `0` to, opened by the parent.
pub type JoinFds = Vec<OwnedFd>;

impl CallCgroup {
    /// Makes the call's cgroups with `limits`, and opens their `cgroup.procs`.
    ///
    /// # Errors
    /// A cgroup that cannot be made or limited (what was made is removed).
    pub fn create(bases: &Bases, limits: CgroupLimits) -> std::io::Result<(CallCgroup, JoinFds)> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!("ctxhost-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let mut made = CallCgroup { dirs: Vec::new(), v2: None };
        let mut fds = Vec::new();
        let context =
            |what: &Path, e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", what.display()));
        let mut make = |base: &Path, settings: &[(&str, String)], made: &mut CallCgroup| -> std::io::Result<PathBuf> {
            let dir = base.join(&name);
            std::fs::create_dir(&dir).map_err(|e| context(&dir, e))?;
            made.dirs.push(dir.clone());
            for (file, value) in settings {
                let path = dir.join(file);
                std::fs::write(&path, value).map_err(|e| context(&path, e))?;
            }
            let procs = dir.join("cgroup.procs");
            fds.push(OpenOptions::new().write(true).open(&procs).map_err(|e| context(&procs, e))?.into());
            Ok(dir)
        };
        let memory = limits.memory_bytes.map(|b| b.to_string());
        let pids = limits.max_processes.map(|n| n.to_string());
        if let Some(v2) = bases.v2.as_ref().filter(|_| bases.use_v2()) {
            let mut settings = Vec::new();
            if let (true, Some(m)) = (bases.v2_memory, &memory) {
                settings.push(("memory.max", m.clone()));
                settings.push(("memory.oom.group", "1".into()));
            }
            if let (true, Some(p)) = (bases.v2_pids, &pids) {
                settings.push(("pids.max", p.clone()));
            }
            let dir = make(v2, &settings, &mut made)?;
            if bases.v2_memory && memory.is_some() {
                // No swapping around the limit; absent without swap accounting.
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            }
            made.v2 = Some(dir);
        }
        if let (false, Some(base), Some(m)) = (bases.v2_memory, &bases.v1_memory, &memory) {
            let dir = make(base, &[("memory.limit_in_bytes", m.clone())], &mut made)?;
            // Memory + swap at the same bound (absent without swap accounting).
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), m);
        }
        if let (false, Some(base)) = (bases.v2_pids, &bases.v1_pids) {
            let settings: Vec<(&str, String)> = pids.iter().map(|p| ("pids.max", p.clone())).collect();
            make(base, &settings, &mut made)?;
        }
        Ok((made, fds))
    }

    /// Kills every process in the cgroups, right away (cheap; no waiting).
    pub fn kill_now(&self) {
        if let Some(v2) = &self.v2
            && std::fs::write(v2.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for dir in &self.dirs {
            kill_listed(dir);
        }
    }

    /// Kills until the cgroups are empty, then removes them (bounded: a
    /// cgroup still busy after a few seconds is left behind with a warning).
    pub fn kill_and_remove(mut self) {
        let dirs = std::mem::take(&mut self.dirs);
        let give_up = Instant::now() + Duration::from_secs(5);
        for dir in dirs.iter().rev() {
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() > give_up => {
                        tracing::warn!("could not remove the hook's cgroup `{}`: {e}", dir.display());
                        break;
                    }
                    Err(_) => {
                        if self.v2.as_deref() == Some(dir.as_path()) {
                            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                        } else {
                            kill_listed(dir);
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
    }
}

impl Drop for CallCgroup {
    /// Cgroups still held here were never used (creation failed part-way):
    /// they are empty, so removing them does not wait.
    fn drop(&mut self) {
        for dir in self.dirs.drain(..).rev() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// SIGKILLs every process listed in `dir/cgroup.procs`, until it lists none
/// (a forking process is caught in a later round; bounded).
fn kill_listed(dir: &Path) {
    for _ in 0..64 {
        let Ok(list) = std::fs::read_to_string(dir.join("cgroup.procs")) else { return };
        let pids: Vec<libc::pid_t> = list.lines().filter_map(|l| l.trim().parse().ok()).filter(|&p| p > 1).collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on a pid listed in the call's own cgroup a moment
            // ago; ESRCH is fine.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroups_are_read_per_hierarchy() {
        let text = "9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/u\n";
        assert_eq!(own_cgroup(text, |c| c.is_empty(), true).as_deref(), Some("/u"));
        assert_eq!(own_cgroup(text, |c| c == "pids", false).as_deref(), Some("/a"));
        assert_eq!(own_cgroup(text, |c| c == "memory", false).as_deref(), Some("/process_api/x"));
        assert_eq!(under_root("/process_api/x", "/process_api").as_deref(), Some("/x"));
        assert_eq!(under_root("/other", "/process_api"), None);
    }
}
