//! The fork server's wire: unix `SOCK_SEQPACKET` messages of one JSON
//! object, with file descriptors passed alongside (`SCM_RIGHTS`). Pure
//! socket calls on fds the caller owns; never blocks (the sockets are
//! non-blocking), never interprets the JSON beyond its framing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// At most this many fds travel with one message.
const MAX_FDS: usize = 4;

/// The largest message either side sends (a call's environment included).
pub(super) const MAX_MESSAGE: usize = 1 << 20;

/// A connected pair of close-on-exec `SOCK_SEQPACKET` sockets: (the host's
/// end, non-blocking; the server's end, blocking).
pub(super) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair(2) writes two fds into the array on success.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just returned by socketpair and are owned by
    // nobody else; fcntl only changes the host end's status flags.
    unsafe {
        let pair = (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]));
        let flags = libc::fcntl(fds[0], libc::F_GETFL);
        if flags < 0 || libc::fcntl(fds[0], libc::F_SETFL, flags | libc::O_NONBLOCK) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(pair)
    }
}

/// Sends `bytes` as one message with `fds` attached.
///
/// # Errors
/// The socket's (`EAGAIN` when the peer's queue is full, `EPIPE` or
/// `ECONNRESET` when the peer is gone).
pub(super) fn send(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many fds for one message"));
    }
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // u64 alignment, room for MAX_FDS ints.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: the control buffer is `space` bytes or more (8 u64 = 64
        // bytes ≥ CMSG_SPACE(16)), so the first header and its data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), fds.len());
        }
    }
    // SAFETY: msg points at live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::other("the message was cut"));
    }
    Ok(())
}

/// One received message: its bytes (empty at end of stream) and the fds that
/// came with it, owned now.
pub(super) struct Received {
    pub bytes: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Receives one message without waiting (`WouldBlock` when none is queued).
/// Fds beyond what fits are closed by the kernel (`MSG_CTRUNC`).
pub(super) fn recv(socket: &impl AsRawFd) -> io::Result<Received> {
    let mut bytes = vec![0u8; 64 * 1024];
    let mut iov = libc::iovec { iov_base: bytes.as_mut_ptr().cast(), iov_len: bytes.len() };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: msg points at live buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`
    // (bounded by msg_controllen); each SCM_RIGHTS fd is new and ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    bytes.truncate(n as usize);
    Ok(Received { bytes, fds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_its_fds() {
        let (a, b) = socket_pair().unwrap();
        let (r, w) = crate::runner::process::pipe().unwrap();
        send(a.as_raw_fd(), b"{\"x\":1}", &[w.as_raw_fd()]).unwrap();
        drop(w);
        let got = recv(&b).unwrap();
        assert_eq!(got.bytes, b"{\"x\":1}");
        assert_eq!(got.fds.len(), 1);
        // The received fd is the pipe's write end: what goes in comes out.
        // SAFETY: write on an fd we own.
        let n = unsafe { libc::write(got.fds[0].as_raw_fd(), b"hi".as_ptr().cast(), 2) };
        assert_eq!(n, 2);
        let mut buf = [0u8; 2];
        // SAFETY: read into a local buffer.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), 2) };
        assert_eq!((n, &buf), (2, b"hi"));
        drop(a);
        assert!(recv(&b).unwrap().bytes.is_empty(), "end of stream once the peer is gone");
    }
}
