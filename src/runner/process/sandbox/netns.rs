//! Namespaces entered by the hook process between fork and exec: a fresh
//! network namespace (only its own loopback, brought up) when the network is
//! denied, and — when ctxhost is not root — a user namespace that maps the
//! user to itself, which lets an unprivileged process make the network
//! namespace and counts its processes apart from the user's others.
//!
//! As root, a plugin's calls share one network namespace made once, at its
//! second call ([`SharedNetns`]), and entered with `setns`: making a
//! namespace costs 0.5-1 ms per call here, entering one a few microseconds.
//! (The first call makes its own: sharing takes a thread, which a process
//! that makes one call, `ctxhost hook`, would pay for nothing.) Calls of one
//! plugin can then reach each other's loopback listeners; other plugins and
//! the host cannot. Without root a call makes its own (a user namespace
//! cannot be made from the threaded host, so there is nothing to share).
//!
//! Everything here that runs in the child is raw syscalls on buffers the
//! parent prepared: no allocation, no locks.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use std::io;

/// A network namespace (its loopback up) kept alive by an open fd.
#[derive(Debug)]
pub struct SharedNetns(OwnedFd);

impl SharedNetns {
    /// Makes one: a short-lived thread leaves the host's namespace (network
    /// namespaces are per thread), brings `lo` up and opens its namespace.
    /// Needs CAP_SYS_ADMIN (root).
    ///
    /// # Errors
    /// The namespace could not be made or opened.
    pub fn create() -> io::Result<SharedNetns> {
        let made = std::thread::spawn(|| -> io::Result<OwnedFd> {
            // SAFETY: unshare changes only this thread, which ends below.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: socket + ioctl + close on this thread's namespace.
            unsafe { loopback_up() };
            // SAFETY: a fixed NUL-terminated path; the fd is owned below.
            let fd = unsafe { libc::open(c"/proc/thread-self/ns/net".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just opened and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))??;
        Ok(SharedNetns(made))
    }
}

/// The namespaces of one process, prepared in the parent.
#[derive(Debug)]
pub struct Namespaces {
    flags: libc::c_int,
    /// `"<uid> <uid> 1\n"` and `"<gid> <gid> 1\n"` when a user namespace is made.
    maps: Option<([u8; 32], usize, [u8; 32], usize)>,
    loopback: bool,
    /// Enter this network namespace (`setns`) instead of making one.
    join: Option<RawFd>,
}

impl Namespaces {
    /// `net`: a fresh network namespace; `user`: a user namespace (not
    /// root); `pid`: a pid namespace (the process then starts the
    /// namespace's init, which makes its own mount namespace: see `pidns`).
    pub fn new(net: bool, user: bool, pid: bool) -> Option<Namespaces> {
        let mut flags = 0;
        if net {
            flags |= libc::CLONE_NEWNET;
        }
        if user {
            flags |= libc::CLONE_NEWUSER;
        }
        if pid {
            flags |= libc::CLONE_NEWPID;
        }
        if flags == 0 {
            return None;
        }
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let maps = user.then(|| {
            let (u, ul) = id_line(uid);
            let (g, gl) = id_line(gid);
            (u, ul, g, gl)
        });
        Some(Namespaces { flags, maps, loopback: net, join: None })
    }

    /// Entering `shared` (which the caller keeps open until the process
    /// has exec'd), and a fresh pid namespace when `pid`.
    pub fn join(shared: &SharedNetns, pid: bool) -> Namespaces {
        let flags = if pid { libc::CLONE_NEWPID } else { 0 };
        Namespaces { flags, maps: None, loopback: false, join: Some(shared.0.as_raw_fd()) }
    }

    /// Whether a pid namespace is made (the caller must then fork once more).
    pub fn new_pid(&self) -> bool {
        self.flags & libc::CLONE_NEWPID != 0
    }

    /// Enters the namespaces. Runs in the forked child.
    ///
    /// # Safety
    /// Only between fork and exec.
    pub unsafe fn enter(&self) -> io::Result<()> {
        if let Some(fd) = self.join {
            // SAFETY: setns on an fd the parent opened; changes only this process.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if self.flags == 0 {
            return Ok(());
        }
        // SAFETY: unshare changes only this (single-threaded, forked) process.
        if unsafe { libc::unshare(self.flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some((u, ul, g, gl)) = &self.maps {
            // SAFETY: fixed NUL-terminated paths and buffers owned by self.
            unsafe {
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &u[..*ul])?;
                write_file(c"/proc/self/gid_map", &g[..*gl])?;
            }
        }
        if self.loopback {
            // Best effort: a hook that serves itself on 127.0.0.1 needs it.
            // SAFETY: as above.
            unsafe { loopback_up() };
        }
        Ok(())
    }
}

/// `"<id> <id> 1\n"` in a fixed buffer.
fn id_line(id: u32) -> ([u8; 32], usize) {
    let mut buf = [0u8; 32];
    let text = format!("{id} {id} 1\n");
    let n = text.len().min(buf.len());
    buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    (buf, n)
}

/// open + write + close.
///
/// # Safety
/// Async-signal-safe syscalls only; fine between fork and exec.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: a valid C string path; the fd is closed on every path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 || n as usize != bytes.len() {
            return Err(err);
        }
    }
    Ok(())
}

/// Sets `lo` up in the current network namespace.
///
/// # Safety
/// Async-signal-safe syscalls only.
unsafe fn loopback_up() {
    const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
    const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
    // SAFETY: a zeroed ifreq is valid; the name fits; the socket is closed.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(sock, SIOCGIFFLAGS as _, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            libc::ioctl(sock, SIOCSIFFLAGS as _, &req);
        }
        libc::close(sock);
    }
}
