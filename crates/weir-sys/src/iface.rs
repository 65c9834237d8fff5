//! Network interfaces: index, name, MAC address and queues, asked of the kernel so
//! the answer is for the caller's network namespace (sysfs shows the
//! namespace it was mounted in).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The index of interface `name`; `None` if there is none of that name here.
pub fn ifindex(name: &str) -> io::Result<Option<u32>> {
    let cname = c_name(name)?;
    // SAFETY: cname is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    Ok((index != 0).then_some(index))
}

/// The name of interface `index`; `None` if there is none of that index here.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf holds IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success if_indextoname wrote a NUL-terminated name into buf.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// Every interface of this network namespace: (index, name).
pub fn interfaces() -> io::Result<Vec<(u32, String)>> {
    // SAFETY: if_nameindex returns an array ended by a zero entry, or null.
    let all = unsafe { libc::if_nameindex() };
    if all.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = all;
    // SAFETY: p walks the array up to its zero entry; each if_name is a
    // NUL-terminated string in it; the array is freed once, after the walk.
    unsafe {
        while (*p).if_index != 0 {
            let name = CStr::from_ptr((*p).if_name).to_string_lossy().into_owned();
            out.push(((*p).if_index, name));
            p = p.add(1);
        }
        libc::if_freenameindex(all);
    }
    Ok(out)
}

/// The MAC address of interface `name`.
pub fn mac_address(name: &str) -> io::Result<[u8; 6]> {
    c_name(name)?;
    let fd = control_socket()?;
    // SAFETY: ifreq is plain data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: fd is open, req is a valid ifreq with a NUL-terminated name
    // (c_name checked it is shorter than ifr_name).
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// ETHTOOL_GCHANNELS from linux/ethtool.h (the libc crate lacks it).
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// struct ethtool_channels from linux/ethtool.h.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The queues of interface `name` in the larger direction (ETHTOOL_GCHANNELS:
/// RX or TX queues plus combined ones). Drivers without channels say
/// EOPNOTSUPP.
pub fn queue_count(name: &str) -> io::Result<u32> {
    c_name(name)?;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: ifreq is plain data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast();
    let fd = control_socket()?;
    // SAFETY: fd is open; req names the interface (NUL-terminated, checked
    // by c_name) and points at a channels struct that outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let rx = channels.rx_count + channels.combined_count;
    let tx = channels.tx_count + channels.combined_count;
    Ok(rx.max(tx))
}

/// A datagram socket to send interface ioctls on.
pub(crate) fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn c_name(name: &str) -> io::Result<CString> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{name:?} is longer than an interface name can be ({} bytes)",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?}: interface names cannot contain NUL"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_both_ways_and_nonsense_is_not() {
        let lo = ifindex("lo").unwrap().expect("every namespace has lo");
        assert_eq!(ifname(lo).as_deref(), Some("lo"));
        assert_eq!(mac_address("lo").unwrap(), [0; 6]);
        // Loopback has no channels to report.
        assert!(queue_count("lo").is_err());
        assert!(interfaces().unwrap().contains(&(lo, "lo".to_string())));
        assert_eq!(ifindex("weir-no-such").unwrap(), None);
        assert_eq!(ifname(u32::MAX), None);
        assert!(ifindex("a-name-far-too-long-for-linux").is_err());
        assert!(ifindex("a\0b").is_err());
    }
}
