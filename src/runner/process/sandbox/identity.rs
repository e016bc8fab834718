//! Who a hook runs as. When ctxhost runs as root, a hook never does: each
//! plugin gets its own unprivileged uid and gid ([`hook_id`]), so the
//! kernel's owner checks stop what Landlock cannot see (chmod of a root file
//! the hook can read, reading a 0600 root file in `/etc`), and hooks of two
//! plugins cannot signal or trace each other. Not root, hooks run as the
//! daemon's user (no other uid is available without privileges).
//!
//! The directories a hook writes must then belong to its uid: the host
//! gives them ([`give_tree`]) — never following a symlink, walking with
//! `openat(O_NOFOLLOW)` so a hook swapping a directory for a link mid-walk
//! cannot point the chown elsewhere, and leaving alone files with more than
//! one name (a hard link to a file outside). This module changes ownership
//! only of directories the caller names as the plugin's own.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// First uid of the range hooks run in (just above systemd's container range).
pub const HOOK_UID_BASE: u32 = 0x7000_0000;

/// Size of that range.
pub const HOOK_UID_SPAN: u32 = 0x0100_0000;

/// The uid (and gid, the same number) a plugin's hooks run as when ctxhost
/// is root: derived from the plugin's name, stable across restarts.
pub fn hook_id(plugin: &str) -> u32 {
    let digest = Sha256::digest(plugin.as_bytes());
    let n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    HOOK_UID_BASE + n % HOOK_UID_SPAN
}

/// Whether `uid`/`gid` may search (walk through) a directory with this metadata.
pub fn can_search(meta: &std::fs::Metadata, uid: u32, gid: u32) -> bool {
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o100 != 0
    } else if meta.gid() == gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// Gives `dir` and everything beneath it to `uid:gid`, when `dir` is not
/// already theirs. Symlinks are changed themselves (`AT_SYMLINK_NOFOLLOW`),
/// never followed; other file systems (mount points) are not entered.
///
/// # Errors
/// `dir` cannot be opened as a directory (a symlink is refused) or changed.
pub fn give_tree(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string; the fd is owned below.
    let fd =
        unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("`{}`: {e}", dir.display())));
    }
    // SAFETY: just opened, owned by nobody else.
    give_opened(&unsafe { OwnedFd::from_raw_fd(fd) }, uid, gid)
}

/// [`give_tree`] of the directory `pinned` refers to (an `O_PATH` fd is
/// enough): no path is looked up again, so a directory pinned when it was
/// made is the one given, whatever was renamed since.
///
/// # Errors
/// `pinned` is not a directory, or it cannot be changed.
pub fn give_tree_at(pinned: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: openat of "." relative to a live fd; the fd is owned below.
    let fd = unsafe {
        libc::openat(pinned.as_raw_fd(), c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    give_opened(&unsafe { OwnedFd::from_raw_fd(fd) }, uid, gid)
}

/// Gives the open directory `fd` and its tree, unless it is theirs already.
fn give_opened(fd: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: `stat` is plain integers: all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a local.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_uid == uid && st.st_gid == gid {
        return Ok(());
    }
    give_children(fd, st.st_dev, uid, gid, 0)?;
    // SAFETY: fchown on an fd we own.
    if unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Deeper than this, a tree is not walked (a hook's own nesting bomb).
const MAX_DEPTH: usize = 64;

fn give_children(dir: &OwnedFd, dev: u64, uid: u32, gid: u32, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    // Read the names through a duplicate: fdopendir takes ownership.
    // SAFETY: dup of an fd we own.
    let dup = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a directory fd we own; closedir closes it.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        // SAFETY: still ours when fdopendir failed.
        unsafe { libc::close(dup) };
        return Err(io::Error::last_os_error());
    }
    let mut names: Vec<(CString, bool)> = Vec::new();
    loop {
        // SAFETY: a valid DIR stream; the entry is copied before the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        // SAFETY: as above.
        let is_dir = unsafe { (*entry).d_type } == libc::DT_DIR;
        names.push((name.to_owned(), is_dir));
    }
    // SAFETY: the stream from fdopendir.
    unsafe { libc::closedir(stream) };
    for (name, is_dir) in names {
        if is_dir {
            // SAFETY: openat relative to our fd; O_NOFOLLOW refuses a link swapped in.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: just opened.
                let child = unsafe { OwnedFd::from_raw_fd(fd) };
                // SAFETY: `stat` is plain integers: all zeroes is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: fstat into a local.
                if unsafe { libc::fstat(child.as_raw_fd(), &mut st) } == 0 && st.st_dev == dev {
                    give_children(&child, dev, uid, gid, depth + 1)?;
                    // SAFETY: fchown on an fd we own.
                    unsafe { libc::fchown(child.as_raw_fd(), uid, gid) };
                }
                continue;
            }
        }
        // A file with other names elsewhere is not given away: a hook that
        // once ran as root could have hard-linked `/etc/shadow` in here.
        // SAFETY: `stat` is plain integers: all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat into a local, relative to our fd, never following a link.
        if unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0
            || ((st.st_mode & libc::S_IFMT) != libc::S_IFDIR && st.st_nlink > 1)
        {
            continue;
        }
        // SAFETY: fchownat relative to our fd, never following a link.
        unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_ids_are_stable_and_in_range() {
        let a = hook_id("memory");
        assert_eq!(a, hook_id("memory"));
        assert_ne!(a, hook_id("memory2"));
        assert!((HOOK_UID_BASE..HOOK_UID_BASE + HOOK_UID_SPAN).contains(&a));
    }
}
