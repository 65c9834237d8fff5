//! Raw frames out of an interface through a packet socket (AF_PACKET), for
//! frames no socket API would send (truncated, bad headers, fragments).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Result};

const ETH_P_ALL: u16 = 0x0003;

/// A packet socket that sends out of one interface to one MAC.
pub struct PacketSocket {
    sock: OwnedFd,
    to: libc::sockaddr_ll,
}

impl PacketSocket {
    /// A socket sending out of interface `ifindex` (of the caller's
    /// network namespace) to `dst_mac`.
    pub fn open(ifindex: u32, dst_mac: [u8; 6]) -> Result<PacketSocket> {
        // SAFETY: plain socket(2); the fd is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if fd < 0 {
            bail!("packet socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_ll is valid; the fields are set below.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_ifindex = ifindex as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&dst_mac);
        Ok(PacketSocket { sock, to })
    }

    /// Sends one whole frame.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        // SAFETY: sendto with a live buffer and a sized address.
        let n = unsafe {
            libc::sendto(
                self.sock.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&self.to as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            bail!("sending a frame: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }
}
