//! The interface a socket binds to: its index and how many queues it has,
//! asked of the kernel with ioctls so the answer is for the caller's network
//! namespace (sysfs shows the namespace it was mounted in).

use std::io;

use crate::error::{Error, Result};

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub name: String,
    pub index: u32,
}

impl Interface {
    /// Looks the interface up in the calling thread's network namespace.
    pub fn by_name(name: &str) -> Result<Interface> {
        let missing = || Error::NoInterface(name.to_string());
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(missing());
        }
        let index = weir_sys::ifindex(name).ok().flatten().ok_or_else(missing)?;
        Ok(Interface {
            name: name.to_string(),
            index,
        })
    }

    /// Refuses a queue id the kernel would refuse at bind time: AF_XDP binds
    /// to any queue below the larger of the RX and TX queue counts. A driver
    /// that does not report its channels leaves the check to bind.
    pub fn check_queue(&self, queue: u32) -> Result<()> {
        match self.queue_count() {
            Ok(queues) if queue >= queues => Err(Error::NoQueue {
                iface: self.name.clone(),
                queue,
                queues,
            }),
            _ => Ok(()),
        }
    }

    /// Queues the kernel accepts an AF_XDP socket on (ETHTOOL_GCHANNELS).
    fn queue_count(&self) -> io::Result<u32> {
        let mut channels = EthtoolChannels {
            cmd: ETHTOOL_GCHANNELS,
            ..Default::default()
        };
        // SAFETY: ifreq is plain data; zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(self.name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast();
        // SAFETY: plain socket(2); closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is open; req names the interface and points at a
        // channels struct that outlives the call.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) };
        let err = io::Error::last_os_error();
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        if rc < 0 {
            return Err(err);
        }
        let rx = channels.rx_count + channels.combined_count;
        let tx = channels.tx_count + channels.combined_count;
        Ok(rx.max(tx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_impossible_names_are_missing_interfaces() {
        for name in ["weir-nope0", "", "a-name-far-too-long-for-linux", "nul\0x"] {
            let err = Interface::by_name(name).unwrap_err();
            assert!(matches!(err, Error::NoInterface(_)), "{name:?}: {err}");
            assert!(err.to_string().contains("ip link"), "{err}");
        }
    }

    #[test]
    fn loopback_is_found() {
        let lo = Interface::by_name("lo").unwrap();
        assert_eq!(lo.index, 1);
    }
}
