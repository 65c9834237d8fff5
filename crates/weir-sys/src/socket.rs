//! Socket calls the standard library leaves out: waiting for input with a
//! timeout, peeking whether a peer has gone, a forced receive buffer,
//! integer socket options, and the empty send and receive that wake an
//! AF_XDP socket's kernel side.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::ptr;
use std::time::Duration;

/// Sets socket option `name` of `level` to a C int. A descriptor that is
/// not an open socket is an error, never undefined behaviour.
pub fn set_int_option(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the value is a c_int of the size passed and outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads socket option `name` of `level`, a 32-bit unsigned value.
pub fn u32_option(fd: RawFd, level: i32, name: i32) -> io::Result<u32> {
    let mut value = 0u32;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: value and len are ours and valid for writes of their sizes.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut u32).cast(), &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A zero-length sendto() with no address and `flags`: what wakes an
/// AF_XDP socket's transmit side.
pub fn send_empty(fd: RawFd, flags: i32) -> io::Result<()> {
    // SAFETY: a zero-length send reads no buffer and no address.
    let rc = unsafe { libc::sendto(fd, ptr::null(), 0, flags, ptr::null(), 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A zero-length recvfrom() with no address and `flags`: what wakes an
/// AF_XDP socket's receive side.
pub fn recv_empty(fd: RawFd, flags: i32) -> io::Result<()> {
    // SAFETY: a zero-length receive writes no buffer and no address.
    let rc = unsafe {
        libc::recvfrom(
            fd,
            ptr::null_mut(),
            0,
            flags,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Waits up to `timeout` for `fd` to have input (or a hang-up); true if it
/// does. An interrupted wait counts as none.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the length given.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(false),
            _ => Err(e),
        };
    }
    Ok(rc > 0)
}

/// True when the peer of `s` closed or reset the connection, without
/// taking any data it sent from the queue.
pub fn peer_gone(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a 1-byte buffer we own; MSG_PEEK leaves the data queued.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => !matches!(
            io::Error::last_os_error().kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    }
}

/// Sets `socket`'s receive buffer to `bytes`: past net.core.rmem_max with
/// CAP_NET_ADMIN (SO_RCVBUFFORCE), else up to it (SO_RCVBUF).
pub fn set_receive_buffer(socket: impl AsFd, bytes: u32) -> io::Result<()> {
    let fd = socket.as_fd().as_raw_fd();
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |name| {
        // SAFETY: setsockopt on an open socket with a c_int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) == 0 || set(libc::SO_RCVBUF) == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, UdpSocket};

    #[test]
    fn input_wakes_a_wait_and_a_closed_peer_is_seen_gone() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert!(!wait_readable(&s, Duration::from_millis(10)).unwrap());
        assert!(!peer_gone(&s));
        c.write_all(b"x").unwrap();
        assert!(wait_readable(&s, Duration::from_secs(5)).unwrap());
        assert!(!peer_gone(&s), "queued data is not a close");
        drop(c);
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut &s, &mut b).unwrap();
        assert!(wait_readable(&s, Duration::from_secs(5)).unwrap());
        assert!(peer_gone(&s));
    }

    #[test]
    fn a_receive_buffer_is_set() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_receive_buffer(&u, 1 << 20).unwrap();
    }
}
