//! The interface a socket binds to: its index and how many queues it has,
//! asked of the kernel (`weir_sys`) so the answer is for the caller's
//! network namespace.

use std::io;

use crate::error::{Error, Result};

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
        weir_sys::queue_count(&self.name)
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
