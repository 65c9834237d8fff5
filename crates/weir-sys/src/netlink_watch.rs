//! Changes of the kernel's links, addresses, routes and neighbours: a
//! NETLINK_ROUTE socket subscribed to their multicast groups. A message is
//! only a wake-up; what changed is asked again (`route_to`, `neighbour_mac`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Messages [`RouteWatch::wait`] reads at most per wake-up.
const MAX_READS: usize = 1024;

/// A subscription to route, neighbour, address and link changes.
pub struct RouteWatch {
    fd: OwnedFd,
}

impl RouteWatch {
    /// Subscribes in this thread's network namespace.
    pub fn new() -> io::Result<RouteWatch> {
        // SAFETY: plain socket(2); a non-negative fd is ours to own.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zero is a valid start.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = (libc::RTMGRP_LINK
            | libc::RTMGRP_NEIGH
            | libc::RTMGRP_IPV4_IFADDR
            | libc::RTMGRP_IPV6_IFADDR
            | libc::RTMGRP_IPV4_ROUTE
            | libc::RTMGRP_IPV6_ROUTE) as u32;
        // SAFETY: sa is a valid sockaddr_nl of the length given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RouteWatch { fd })
    }

    /// Waits up to `timeout` for a change; true if there was one. Reads
    /// every message already queued, so a burst of changes is one wake-up.
    /// A lost message (the socket's buffer overran) counts as a change.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        if !crate::socket::wait_readable(&self.fd, timeout)? {
            return Ok(false);
        }
        let mut buf = [0u8; 8192];
        // Bounded: under a storm of changes the caller asks again anyway.
        for _ in 0..MAX_READS {
            // SAFETY: buf is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => break,
                Some(libc::ENOBUFS) | Some(libc::EINTR) => continue,
                _ => return Err(e),
            }
        }
        Ok(true)
    }
}
