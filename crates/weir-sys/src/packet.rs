//! Packet sockets (AF_PACKET): whole frames in and out of one interface,
//! for frames no other socket API sends or receives (truncated, bad
//! headers, fragments; a backend's reply seen on the client's link).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Every protocol (ETH_P_ALL), in network order where the kernel wants it.
const ETH_P_ALL: u16 = 0x0003;

/// A classic BPF instruction of a socket filter.
pub use libc::sock_filter as SockFilter;

/// A raw packet socket of the caller's network namespace.
pub struct PacketSocket {
    fd: OwnedFd,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A `sockaddr_ll` for interface `ifindex`.
fn link_address(ifindex: u32) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex as i32;
    sll
}

impl PacketSocket {
    /// A socket for frames of every protocol, bound to no interface yet.
    pub fn open() -> io::Result<PacketSocket> {
        // SAFETY: plain socket(2); the fd is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(PacketSocket { fd })
    }

    /// Receives the frames of interface `ifindex` only.
    pub fn bind(&self, ifindex: u32) -> io::Result<()> {
        let sll = link_address(ifindex);
        // SAFETY: a sockaddr_ll that outlives the call, with its size.
        check(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        })
    }

    /// Lets through only the frames classic BPF program `prog` keeps.
    pub fn attach_filter(&self, prog: &[SockFilter]) -> io::Result<()> {
        let len = u16::try_from(prog.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
        let fprog = libc::sock_fprog {
            len,
            // The kernel copies the program and never writes through this.
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: a sock_fprog pointing at `prog`, both alive for the call.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as u32,
            )
        })
    }

    /// A receive gives up after `timeout` (SO_RCVTIMEO).
    pub fn set_receive_timeout(&self, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        // SAFETY: a timeval that outlives the call, with its size.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        })
    }

    /// Receives one frame into `buf`; its length (cut to `buf`'s).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: recv into a buffer we own, of the length given.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Sends one whole frame out of interface `ifindex` to `dst_mac`.
    pub fn send_to(&self, frame: &[u8], ifindex: u32, dst_mac: [u8; 6]) -> io::Result<()> {
        let mut to = link_address(ifindex);
        to.sll_protocol = 0;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&dst_mac);
        // SAFETY: sendto with a live buffer and a sized address.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&to as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
