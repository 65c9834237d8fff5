//! Next hops of DIPs, resolved in the control plane: the egress interface and
//! the MACs a frame to a DIP leaves with, from the kernel's route and
//! neighbour tables (over netlink, `weir_sys`), not per packet. `weir
//! serve` writes them into the DIPs' slots (`weir_dip.nh`); the software tier
//! hands them to its workers. [`Watch`] says when those tables change, so a
//! resolved next hop is refreshed on a change, not polled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, Result};
use weir_abi::weir_next_hop;

/// Where a frame to one DIP goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    pub ifindex: u32,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
}

impl NextHop {
    /// As the data plane holds it in a DIP's slot.
    pub fn abi(&self) -> weir_next_hop {
        weir_next_hop {
            ifindex: self.ifindex,
            dmac: self.dst_mac,
            smac: self.src_mac,
        }
    }
}

/// Resolves `addr` with the kernel's tables, in this process's network
/// namespace; `ifaces` maps interface names weir is attached to (and may send
/// by) to their index and MAC. `None`: no usable neighbour entry (none yet,
/// or one that failed), or the route leaves by an interface weir does not
/// hold.
pub fn resolve(addr: IpAddr, ifaces: &HashMap<String, (u32, [u8; 6])>) -> Result<Option<NextHop>> {
    let Some(route) = weir_sys::route_to(addr)
        .with_context(|| format!("asking the kernel for the route to {addr} (netlink)"))?
    else {
        return Ok(None);
    };
    let Some(&(ifindex, src_mac)) = ifaces.values().find(|(i, _)| *i == route.oif) else {
        return Ok(None);
    };
    let via = route.gateway.unwrap_or(addr);
    let Some(dst_mac) = weir_sys::neighbour_mac(via, ifindex)
        .with_context(|| format!("asking the kernel for the neighbour {via} (netlink)"))?
    else {
        return Ok(None);
    };
    Ok(Some(NextHop {
        ifindex,
        src_mac,
        dst_mac,
    }))
}

/// Messages [`Watch::wait`] reads at most per wake-up.
const MAX_READS: usize = 1024;

/// Changes of the kernel's links, addresses, routes and neighbours: a
/// NETLINK_ROUTE socket subscribed to their multicast groups. A message is
/// only a wake-up; what changed is read again with [`resolve`].
pub struct Watch {
    fd: OwnedFd,
}

impl Watch {
    /// Subscribes in this thread's network namespace.
    pub fn new() -> Result<Watch> {
        // SAFETY: plain syscalls; a non-negative fd is ours to own.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("opening a netlink socket");
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
            return Err(std::io::Error::last_os_error())
                .context("subscribing to route and neighbour changes (netlink)");
        }
        Ok(Watch { fd })
    }

    /// Waits up to `timeout` for a change; true if there was one. Reads
    /// every message already queued, so a burst of changes is one wake-up.
    /// A lost message (the socket's buffer overran) counts as a change.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e).context("waiting for netlink changes");
        }
        if rc == 0 {
            return Ok(false);
        }
        let mut buf = [0u8; 8192];
        // Bounded: under a storm of changes the caller re-resolves anyway.
        for _ in 0..MAX_READS {
            // SAFETY: buf is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => break,
                Some(libc::ENOBUFS) | Some(libc::EINTR) => continue,
                _ => return Err(e).context("reading netlink changes"),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_address_leaves_by_no_held_interface() {
        let ifaces = HashMap::from([("wc0".to_string(), (9, [2; 6]))]);
        assert_eq!(
            resolve("127.0.0.1".parse().unwrap(), &ifaces).unwrap(),
            None
        );
    }

    #[test]
    fn the_slot_holds_the_macs_the_right_way_round() {
        let nh = NextHop {
            ifindex: 3,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
        };
        let a = nh.abi();
        assert_eq!((a.ifindex, a.smac, a.dmac), (3, nh.src_mac, nh.dst_mac));
    }
}
