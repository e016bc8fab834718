//! What a hook running as its own uid ([`super::identity`]) can walk to.
//!
//! As root, the plugin's roots often sit below a directory only root may
//! enter: the runtime in `/root/.pyenv`, the ctxhost home in `/root`, a
//! 0700 temporary directory. The hook's uid could not reach them, and
//! making those directories searchable would change the operator's
//! machine. Instead, in the hook's own mount namespace (made for its pid
//! namespace anyway), each such directory is covered by an empty tmpfs and
//! the plugin's roots below it are attached again at their own paths: the
//! hook sees the same paths, and nothing else of the covered directory
//! (not even the names in `/root`).
//!
//! The roots are taken from the pinned fds of the Landlock policy
//! (`open_tree` on the fd, never a path lookup), so a root swapped for a
//! symlink after load attaches the directory that was checked. Cloning the
//! trees happens in the host's mount namespace, before `unshare`; covering
//! and attaching after it, in the hook. Raw syscalls only in the child.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::identity;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// One root to attach again below a cover.
#[derive(Debug, Clone)]
struct Keep {
    /// The pinned O_PATH fd of the root (owned by the policy).
    fd: RawFd,
    path: CString,
    dir: bool,
}

/// The covers and roots of one process, prepared in the parent.
#[derive(Debug, Default)]
pub struct View {
    /// Fds this view owns (a per-call root), closed with it.
    held: Vec<std::os::fd::OwnedFd>,
    covers: Vec<CString>,
    /// Directories to make inside the covers, parents first.
    mkdirs: Vec<CString>,
    keeps: Vec<Keep>,
    /// The detached trees, cloned in the child before `unshare`.
    trees: Vec<RawFd>,
}

/// A root the hook must reach: its canonical path and the fd pinning it.
pub struct Root<'a> {
    pub path: &'a Path,
    pub fd: RawFd,
}

impl View {
    /// The covers `uid`/`gid` need to reach every root. Empty when every
    /// root is reachable as it is.
    pub fn plan(roots: &[Root<'_>], uid: u32, gid: u32) -> View {
        // (cover, root) for every root below a directory the uid cannot search.
        let mut blocked: Vec<(PathBuf, &Root<'_>)> = Vec::new();
        for root in roots {
            if let Some(cover) = first_blocking(root.path, uid, gid) {
                blocked.push((cover, root));
            }
        }
        if blocked.is_empty() {
            return View::default();
        }
        let mut covers: Vec<PathBuf> = blocked.iter().map(|(c, _)| c.clone()).collect();
        covers.sort();
        covers.dedup();
        // A root inside another kept root comes along with it.
        blocked.sort_by(|a, b| a.1.path.cmp(b.1.path));
        let mut kept: Vec<&Root<'_>> = Vec::new();
        for (_, root) in &blocked {
            if !kept.iter().any(|k| root.path.starts_with(k.path)) {
                kept.push(root);
            }
        }
        let mut mkdirs: Vec<PathBuf> = Vec::new();
        let mut keeps = Vec::new();
        for root in kept {
            let dir = std::fs::metadata(root.path).map(|m| m.is_dir()).unwrap_or(false);
            let Some(cover) = covers.iter().find(|c| root.path.starts_with(c)) else { continue };
            // Every directory from below the cover down to the root (the
            // root itself too when it is a directory: its mount point).
            let mut p = root.path.to_owned();
            let mut chain = Vec::new();
            if !dir {
                p.pop();
            }
            while p != *cover && p.starts_with(cover) {
                chain.push(p.clone());
                p.pop();
            }
            chain.reverse();
            for d in chain {
                if !mkdirs.contains(&d) {
                    mkdirs.push(d);
                }
            }
            if let Ok(path) = cstring(root.path) {
                keeps.push(Keep { fd: root.fd, path, dir });
            }
        }
        let trees = vec![-1; keeps.len()];
        View {
            held: Vec::new(),
            covers: covers.iter().filter_map(|c| cstring(c).ok()).collect(),
            mkdirs: mkdirs.iter().filter_map(|d| cstring(d).ok()).collect(),
            keeps,
            trees,
        }
    }

    /// Keeps `fd` open as long as the view (a root it attaches).
    pub fn hold(&mut self, fd: std::os::fd::OwnedFd) {
        self.held.push(fd);
    }

    /// The detached trees cloned in the child (kept open until attached).
    pub fn tree_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.trees.iter().copied().filter(|&fd| fd >= 0)
    }

    /// Nothing to cover.
    pub fn is_empty(&self) -> bool {
        self.covers.is_empty()
    }

    /// In the child, still in the host's mount namespace: clones each root
    /// as a detached tree.
    ///
    /// # Safety
    /// Between fork and exec.
    pub unsafe fn clone_trees(&mut self) -> io::Result<()> {
        for (keep, tree) in self.keeps.iter().zip(self.trees.iter_mut()) {
            // SAFETY: open_tree on a pinned fd with an empty path.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    keep.fd,
                    c"".as_ptr(),
                    libc::AT_EMPTY_PATH as libc::c_uint
                        | OPEN_TREE_CLONE
                        | AT_RECURSIVE
                        | libc::O_CLOEXEC as libc::c_uint,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            *tree = fd as RawFd;
        }
        Ok(())
    }

    /// In the hook's mount namespace: covers, directories, trees attached.
    ///
    /// # Safety
    /// Between fork and exec, after [`View::clone_trees`] and `unshare(CLONE_NEWNS)`.
    pub unsafe fn apply(&self) -> io::Result<()> {
        // SAFETY: mount/mkdir/open/move_mount with prepared C strings and fds.
        unsafe {
            for cover in &self.covers {
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    cover.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"mode=0755,size=64k,nr_inodes=4096".as_ptr().cast(),
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            for dir in &self.mkdirs {
                if libc::mkdir(dir.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                    return Err(io::Error::last_os_error());
                }
            }
            for (keep, &tree) in self.keeps.iter().zip(&self.trees) {
                if !keep.dir {
                    let fd = libc::open(keep.path.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
                if libc::syscall(
                    libc::SYS_move_mount,
                    tree,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    keep.path.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

impl Clone for View {
    /// A template's copy for one process (held fds stay with the template).
    fn clone(&self) -> View {
        View {
            held: Vec::new(),
            covers: self.covers.clone(),
            mkdirs: self.mkdirs.clone(),
            keeps: self.keeps.clone(),
            trees: vec![-1; self.keeps.len()],
        }
    }
}

/// Whether `uid`/`gid` cannot walk down to `path`.
pub fn blocked(path: &Path, uid: u32, gid: u32) -> bool {
    first_blocking(path, uid, gid).is_some()
}

/// The topmost ancestor of `path` that `uid`/`gid` cannot search.
fn first_blocking(path: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    let mut walked = PathBuf::from("/");
    for part in path.components().skip(1) {
        match std::fs::metadata(&walked) {
            Ok(m) if !identity::can_search(&m, uid, gid) => return Some(walked),
            _ => {}
        }
        walked.push(part);
    }
    None
}

fn cstring(p: &Path) -> Result<CString, std::ffi::NulError> {
    CString::new(p.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn roots_below_a_closed_directory_are_covered_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let closed = tmp.path().join("closed");
        let a = closed.join("x/a");
        let b = closed.join("x/a/b");
        let c = closed.join("y/c");
        for d in [&a, &b, &c] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let roots = [Root { path: &a, fd: 1 }, Root { path: &b, fd: 2 }, Root { path: &c, fd: 3 }];
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let view = View::plan(&roots, me + 12345, me + 12345);
        assert_eq!(view.covers, [cstring(&closed).unwrap()]);
        let kept: Vec<_> = view.keeps.iter().map(|k| k.fd).collect();
        assert_eq!(kept, [1, 3], "b comes along with a");
        assert_eq!(
            view.mkdirs,
            [closed.join("x"), a.clone(), closed.join("y"), c.clone()].map(|p| cstring(&p).unwrap())
        );
        assert!(View::plan(&roots, me, me).is_empty(), "the owner walks through");
    }
}
