//! Raw frames out of an interface through a packet socket (AF_PACKET), for
//! frames no socket API would send (truncated, bad headers, fragments).

use anyhow::{Context, Result};

/// A packet socket that sends out of one interface to one MAC.
pub struct PacketSocket {
    sock: weir_sys::PacketSocket,
    ifindex: u32,
    dst_mac: [u8; 6],
}

impl PacketSocket {
    /// A socket sending out of interface `ifindex` (of the caller's
    /// network namespace) to `dst_mac`.
    pub fn open(ifindex: u32, dst_mac: [u8; 6]) -> Result<PacketSocket> {
        let sock = weir_sys::PacketSocket::open().context("packet socket")?;
        Ok(PacketSocket {
            sock,
            ifindex,
            dst_mac,
        })
    }

    /// Sends one whole frame.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        self.sock
            .send_to(frame, self.ifindex, self.dst_mac)
            .context("sending a frame")
    }
}
