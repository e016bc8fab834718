//! Namespaces entered by the hook process between fork and exec: a fresh
//! network namespace (only its own loopback, brought up) when the network is
//! denied, and — when ctxhost is not root — a user namespace that maps the
//! user to itself, which lets an unprivileged process make the network
//! namespace and counts its processes apart from the user's others.
//!
//! Everything here that runs in the child is raw syscalls on buffers the
//! parent prepared: no allocation, no locks.

use std::io;

/// The namespaces of one process, prepared in the parent.
#[derive(Debug)]
pub struct Namespaces {
    flags: libc::c_int,
    /// `"<uid> <uid> 1\n"` and `"<gid> <gid> 1\n"` when a user namespace is made.
    maps: Option<([u8; 32], usize, [u8; 32], usize)>,
    loopback: bool,
}

impl Namespaces {
    /// `net`: a fresh network namespace; `user`: a user namespace (not root).
    pub fn new(net: bool, user: bool) -> Option<Namespaces> {
        let mut flags = 0;
        if net {
            flags |= libc::CLONE_NEWNET;
        }
        if user {
            flags |= libc::CLONE_NEWUSER;
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
        Some(Namespaces { flags, maps, loopback: net })
    }

    /// Enters the namespaces. Runs in the forked child.
    ///
    /// # Safety
    /// Only between fork and exec.
    pub unsafe fn enter(&self) -> io::Result<()> {
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
