//! The addresses of this network namespace's interfaces, by interface
//! name (getifaddrs).

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every interface of this network namespace with each of its IPv4 and
/// IPv6 addresses; an interface without any appears once with `addr`
/// `None`, so a caller can tell "no address" from "no interface".
pub fn interface_addrs() -> io::Result<Vec<(String, Option<IpAddr>)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list that is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, freed only below.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string in the same list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push((name, address(ifa)));
    }
    // SAFETY: head came from getifaddrs and nothing points into it any more.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn address(ifa: &libc::ifaddrs) -> Option<IpAddr> {
    if ifa.ifa_addr.is_null() {
        return None;
    }
    // SAFETY: a non-null ifa_addr points at a sockaddr whose family says
    // which sockaddr_* it is.
    unsafe {
        match i32::from((*ifa.ifa_addr).sa_family) {
            libc::AF_INET => {
                let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(sa.sin_addr.s_addr.to_ne_bytes())))
            }
            libc::AF_INET6 => {
                let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_address() {
        let all = interface_addrs().unwrap();
        assert!(all
            .iter()
            .any(|(n, a)| n == "lo" && *a == Some(IpAddr::V4(Ipv4Addr::LOCALHOST))));
    }
}
