//! Files a plugin controls, read by the host on the plugin's behalf, never
//! from outside the plugin's directory.
//!
//! A plugin author owns everything below its directory, symlinks included: a
//! `plugin.toml`, `frontend/` or `impl.py` may be a link to `/etc/shadow` or
//! to another plugin's files. [`Root`] holds the plugin directory open and
//! resolves a relative path beneath it one component at a time (`openat`
//! with `O_NOFOLLOW` at every step — what openat2's `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` means, on every kernel): a symlink anywhere below the
//! root, `..`, or an absolute path is refused, and only a regular file is
//! read (a FIFO or a device is refused before it can block or answer), up to
//! a size cap. [`read_no_symlinks`] does the same walk from `/` for a path
//! the host already made canonical (a checked hook path or component), so a
//! link swapped in after the check is not followed.
//!
//! This module owns only the opening and reading. It must never follow a
//! symlink below the root it was given, and never put a file's bytes into an
//! error: an error names the path and the reason only.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Plugin manifests (`plugin.toml`, `plugin.json`) are read up to this size.
pub const MANIFEST_LIMIT: u64 = 4 * 1024 * 1024;

/// A path that was not read, and why.
#[derive(Debug, thiserror::Error)]
#[error("`{}`: {reason}", path.display())]
pub struct BeneathError {
    /// The path as the host would have read it (root joined with the relative path).
    pub path: PathBuf,
    #[source]
    pub reason: Refusal,
}

/// Why a path beneath a plugin directory was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    #[error("it does not exist")]
    NotFound,
    #[error(
        "`{0}` is a symbolic link; ctxhost reads a plugin's files only beneath its directory and never through a link"
    )]
    Symlink(String),
    #[error("`..` or an absolute path leaves the plugin directory")]
    Traversal,
    #[error("`{0}` is not a directory")]
    NotADirectory(String),
    #[error("it is not a regular file")]
    NotAFile,
    #[error("it is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("cannot read it: {0}")]
    Io(#[source] std::io::Error),
}

impl Refusal {
    /// The file was simply not there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refusal::NotFound)
    }
}

/// A directory held open; paths are resolved beneath it without following links.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    /// Opens `dir` itself (its own path is the operator's: a symlinked plugin
    /// directory is followed); everything below it is resolved by [`Root`].
    ///
    /// # Errors
    /// `dir` does not exist or is not a directory.
    pub fn open(dir: &Path) -> Result<Root, BeneathError> {
        let fail = |reason| BeneathError { path: dir.to_owned(), reason };
        let c = cstring(dir.as_os_str()).map_err(|e| fail(Refusal::Io(e)))?;
        // SAFETY: a valid NUL-terminated path; the fd returned is owned below.
        let fd = retry(|| unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })
            .map_err(|e| fail(io_refusal(e)))?;
        Ok(Root { fd, path: dir.to_owned() })
    }

    /// The directory as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `rel` beneath this one, as a new root.
    ///
    /// # Errors
    /// As for [`Root::open_file`], or the last component is not a directory.
    pub fn sub_dir(&self, rel: &Path) -> Result<Root, BeneathError> {
        let path = self.path.join(rel);
        let fail = |reason| BeneathError { path: path.clone(), reason };
        let (parent, last) = self.walk(rel).map_err(fail)?;
        let Some(last) = last else {
            let fd = parent.as_fd().try_clone_to_owned().map_err(|e| fail(Refusal::Io(e)))?;
            return Ok(Root { fd, path });
        };
        let fd = step(parent.as_fd(), &last).map_err(fail)?;
        Ok(Root { fd, path })
    }

    /// Opens the regular file `rel` beneath this directory for reading.
    ///
    /// # Errors
    /// `..`/absolute, a symlink on the way or at the end, a missing file, or
    /// something other than a regular file.
    pub fn open_file(&self, rel: &Path) -> Result<File, BeneathError> {
        let path = self.path.join(rel);
        let fail = |reason| BeneathError { path: path.clone(), reason };
        let (parent, last) = self.walk(rel).map_err(fail)?;
        let Some(last) = last else { return Err(fail(Refusal::NotAFile)) };
        let c = cstring(&last).map_err(|e| fail(Refusal::Io(e)))?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: a valid dir fd and NUL-terminated name; the fd is owned below.
        let fd = retry(|| unsafe { libc::openat(parent.as_fd().as_raw_fd(), c.as_ptr(), flags) })
            .map_err(|e| fail(link_or(parent.as_fd(), &last, e)))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| fail(Refusal::Io(e)))?;
        if !meta.file_type().is_file() {
            return Err(fail(Refusal::NotAFile));
        }
        Ok(file)
    }

    /// The bytes of the regular file `rel`, at most `limit` of them.
    ///
    /// # Errors
    /// As for [`Root::open_file`], or the file is larger than `limit`.
    pub fn read(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, BeneathError> {
        let file = self.open_file(rel)?;
        read_capped(file, limit).map_err(|reason| BeneathError { path: self.path.join(rel), reason })
    }

    /// [`Root::read`] as UTF-8 text.
    ///
    /// # Errors
    /// As for [`Root::read`], or the bytes are not UTF-8 (the error holds none of them).
    pub fn read_to_string(&self, rel: &Path, limit: u64) -> Result<String, BeneathError> {
        let bytes = self.read(rel, limit)?;
        String::from_utf8(bytes).map_err(|_| BeneathError { path: self.path.join(rel), reason: Refusal::NotText })
    }

    /// Whether `rel` is a regular file reachable beneath this directory.
    pub fn is_file(&self, rel: &Path) -> bool {
        self.open_file(rel).is_ok()
    }

    /// The entries of this directory (not `.` and `..`), each with its type
    /// as the directory says it (a symlink is a [`EntryKind::Symlink`],
    /// never followed), in no particular order.
    ///
    /// # Errors
    /// The directory cannot be opened for reading or read.
    pub fn list(&self) -> Result<Vec<(std::ffi::OsString, EntryKind)>, BeneathError> {
        let fail = |reason| BeneathError { path: self.path.clone(), reason };
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid dir fd and a NUL-terminated name; the fd is owned below.
        let fd = retry(|| unsafe { libc::openat(self.fd.as_raw_fd(), c".".as_ptr(), flags) })
            .map_err(|e| fail(io_refusal(e)))?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: `raw` is an open directory fd that fdopendir takes over
        // (closed by closedir below, or here when fdopendir fails).
        let dir = unsafe { libc::fdopendir(raw) };
        if dir.is_null() {
            let e = std::io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(fail(Refusal::Io(e)));
        }
        let mut out = Vec::new();
        let mut failure = None;
        loop {
            // SAFETY: errno is thread-local; cleared to tell the end from an error.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `dir` is a valid DIR stream until closedir below.
            let entry = unsafe { libc::readdir(dir) };
            if entry.is_null() {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error().unwrap_or(0) != 0 {
                    failure = Some(e);
                }
                break;
            }
            // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let name = OsStr::from_bytes(name.to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            out.push(name.to_owned());
        }
        // SAFETY: `dir` came from fdopendir and is closed once.
        unsafe { libc::closedir(dir) };
        if let Some(e) = failure {
            return Err(fail(Refusal::Io(e)));
        }
        out.into_iter()
            .map(|name| {
                let kind = entry_kind(self.fd.as_fd(), &name)
                    .map_err(|e| BeneathError { path: self.path.join(&name), reason: io_refusal(e) })?;
                Ok((name, kind))
            })
            .collect()
    }

    /// The target of the symbolic link `rel` (read, never followed).
    ///
    /// # Errors
    /// `..`/absolute, a symlink on the way, or `rel` is not a link.
    pub fn read_link(&self, rel: &Path) -> Result<PathBuf, BeneathError> {
        let path = self.path.join(rel);
        let fail = |reason| BeneathError { path: path.clone(), reason };
        let (parent, last) = self.walk(rel).map_err(fail)?;
        let Some(last) = last else { return Err(fail(Refusal::NotAFile)) };
        let c = cstring(&last).map_err(|e| fail(Refusal::Io(e)))?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: a valid dir fd, a NUL-terminated name and a buffer of the given length.
        let n = unsafe { libc::readlinkat(parent.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(fail(io_refusal(std::io::Error::last_os_error())));
        }
        buf.truncate(n as usize);
        Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
    }

    /// The parent directory of `rel`'s last component, opened without
    /// following links, and that last component (`None` for `.` or empty).
    fn walk(&self, rel: &Path) -> Result<(OwnedFd, Option<std::ffi::OsString>), Refusal> {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n.to_owned()),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => return Err(Refusal::Traversal),
            }
        }
        let mut dir = self.fd.as_fd().try_clone_to_owned().map_err(Refusal::Io)?;
        let last = names.pop();
        for name in &names {
            dir = step(dir.as_fd(), name)?;
        }
        Ok((dir, last))
    }
}

/// What a directory entry is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file; `executable` when its owner may execute it.
    File {
        executable: bool,
    },
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

fn entry_kind(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<EntryKind> {
    let c = cstring(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid dir fd, NUL-terminated name and a buffer of the right type.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat filled `st` when it returned 0.
    let mode = unsafe { st.assume_init() }.st_mode;
    Ok(match mode & libc::S_IFMT {
        libc::S_IFREG => EntryKind::File { executable: mode & libc::S_IXUSR != 0 },
        libc::S_IFDIR => EntryKind::Dir,
        libc::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Other,
    })
}

/// Reads the regular file at the absolute path `path` — one the host made
/// canonical earlier — resolving it from `/` without following any symlink,
/// so a component replaced by a link since is refused. At most `limit` bytes.
///
/// # Errors
/// A relative path, a symlink on the way, a missing or non-regular file, or
/// more than `limit` bytes.
pub fn read_no_symlinks(path: &Path, limit: u64) -> Result<Vec<u8>, BeneathError> {
    let Ok(rel) = path.strip_prefix("/") else {
        return Err(BeneathError { path: path.to_owned(), reason: Refusal::Traversal });
    };
    let root = Root::open(Path::new("/"))?;
    root.read(rel, limit).map_err(|e| BeneathError { path: path.to_owned(), reason: e.reason })
}

/// One directory step beneath `dir`, never through a link.
fn step(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Refusal> {
    let c = cstring(name).map_err(Refusal::Io)?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid dir fd and NUL-terminated name; the fd is owned by the caller.
    retry(|| unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) }).map_err(|e| match link_or(dir, name, e) {
        Refusal::Io(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            Refusal::NotADirectory(name.to_string_lossy().into_owned())
        }
        other => other,
    })
}

/// `Symlink` when `name` in `dir` is a link (what `O_NOFOLLOW` refused),
/// else the refusal for `e`.
fn link_or(dir: BorrowedFd<'_>, name: &OsStr, e: std::io::Error) -> Refusal {
    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) && is_link(dir, name) {
        return Refusal::Symlink(name.to_string_lossy().into_owned());
    }
    io_refusal(e)
}

fn io_refusal(e: std::io::Error) -> Refusal {
    if e.kind() == std::io::ErrorKind::NotFound { Refusal::NotFound } else { Refusal::Io(e) }
}

fn is_link(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    let Ok(c) = cstring(name) else { return false };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid dir fd, NUL-terminated name and a buffer of the right type.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    // SAFETY: fstatat filled `st` when it returned 0.
    rc == 0 && (unsafe { st.assume_init() }.st_mode & libc::S_IFMT) == libc::S_IFLNK
}

fn read_capped(file: File, limit: u64) -> Result<Vec<u8>, Refusal> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(Refusal::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Refusal::TooLarge { limit });
    }
    Ok(bytes)
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path holds a NUL byte"))
}

/// Runs an fd-returning call again on `EINTR`; takes ownership of the fd.
fn retry(mut call: impl FnMut() -> libc::c_int) -> std::io::Result<OwnedFd> {
    loop {
        let fd = call();
        if fd >= 0 {
            // SAFETY: the call just returned this fd, and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn reads_only_beneath_without_links() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret line\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("front/sub")).unwrap();
        std::fs::write(d.join("front/sub/a.js"), "ok").unwrap();
        std::fs::write(d.join("plain"), "plain").unwrap();
        symlink(outside.path().join("secret"), d.join("link_out")).unwrap();
        symlink(d.join("plain"), d.join("link_in")).unwrap();
        symlink(outside.path(), d.join("dir_out")).unwrap();
        std::fs::create_dir(d.join("fifo_dir")).unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo_dir/f").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let root = Root::open(d).unwrap();
        assert_eq!(root.read(Path::new("front/sub/a.js"), 10).unwrap(), b"ok");
        assert_eq!(root.read_to_string(Path::new("./plain"), 10).unwrap(), "plain");
        let refused = |rel: &str| root.read(Path::new(rel), 100).unwrap_err();
        for rel in ["link_out", "link_in", "dir_out/secret", "../x", "/etc/passwd", "front/../plain", "fifo_dir/f"] {
            let e = refused(rel);
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        assert!(matches!(refused("link_out").reason, Refusal::Symlink(ref n) if n == "link_out"));
        assert!(matches!(refused("dir_out/secret").reason, Refusal::Symlink(ref n) if n == "dir_out"));
        assert!(matches!(refused("../x").reason, Refusal::Traversal));
        assert!(matches!(refused("fifo_dir/f").reason, Refusal::NotAFile));
        assert!(matches!(refused("missing").reason, Refusal::NotFound));
        assert!(matches!(refused("plain/x").reason, Refusal::NotADirectory(_)));
        assert!(matches!(root.read(Path::new("plain"), 2).unwrap_err().reason, Refusal::TooLarge { limit: 2 }));
        assert!(root.sub_dir(Path::new("dir_out")).is_err());
        let front = root.sub_dir(Path::new("front")).unwrap();
        assert!(front.is_file(Path::new("sub/a.js")));
        assert!(front.read(Path::new("../plain"), 10).is_err());

        let canonical = d.canonicalize().unwrap();
        assert_eq!(read_no_symlinks(&canonical.join("plain"), 10).unwrap(), b"plain");
        assert!(read_no_symlinks(&canonical.join("link_in"), 10).is_err());
        assert!(read_no_symlinks(Path::new("relative"), 10).is_err());
    }
}
