//! A TUN device that exists exactly as long as the processes holding it
//! open: not persistent, multi-queue so that a successor can hold it too
//! before its predecessor lets go. Whatever depends on the device (a BGP
//! speaker's static routes through it) goes when the last holder dies,
//! however it dies.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

/// TUNSETIFF from linux/if_tun.h: _IOW('T', 202, int).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;

/// One queue of the TUN device; the device goes when the last is dropped.
#[derive(Debug)]
pub struct TunAnchor {
    _queue: File,
    pub name: String,
}

impl TunAnchor {
    /// Creates TUN device `name` (or attaches to it, when another process
    /// holds it already) and brings it up.
    pub fn hold(name: &str) -> io::Result<TunAnchor> {
        crate::iface::c_name(name)?;
        let queue = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("opening /dev/net/tun: {e}")))?;
        // SAFETY: ifreq is plain data; zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE;
        // SAFETY: queue is an open /dev/net/tun; req is a valid ifreq whose
        // name is NUL-terminated (c_name checked its length).
        if unsafe { libc::ioctl(queue.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let ctl = crate::iface::control_socket()?;
        // SAFETY: ctl is open; req still names the device.
        if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFFLAGS filled ifru_flags.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: as above; SIOCSIFFLAGS reads the name and the flags.
        if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TunAnchor {
            _queue: queue,
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root and a network namespace of its own.
    #[test]
    fn the_device_lives_while_any_holder_does() {
        if crate::process::euid() != 0 || crate::namespaces::unshare_netns().is_err() {
            eprintln!("skipped: needs root to make a network namespace");
            return;
        }
        let first = TunAnchor::hold("weir-anchor-t").unwrap();
        assert!(crate::ifindex("weir-anchor-t").unwrap().is_some());
        let second = TunAnchor::hold("weir-anchor-t").unwrap();
        drop(first);
        assert!(crate::ifindex("weir-anchor-t").unwrap().is_some());
        drop(second);
        assert!(crate::ifindex("weir-anchor-t").unwrap().is_none());
    }
}
