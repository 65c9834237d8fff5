//! The generator's template frame: Ethernet, IPv4 or IPv6, TCP or UDP and a
//! zero payload, with every checksum computed from scratch. weir_gen varies
//! the source address and port of copies of it.

use std::net::IpAddr;

use weir_core::wire::{
    EthernetRepr, IpRepr, TcpFlags, TcpRepr, UdpRepr, ETH_HLEN, IPPROTO_TCP, IPPROTO_UDP, TCP_HLEN,
    UDP_HLEN,
};

/// The TCP sequence number of every generated segment (the acknowledgment
/// number too, when ACK is set).
pub const TCP_SEQ: u32 = 1;
const TCP_WINDOW: u16 = 65535;

/// The transport header of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Udp,
    /// TCP with these flags (the byte after the data offset: FIN = 0x01,
    /// SYN = 0x02, RST = 0x04, PSH = 0x08, ACK = 0x10).
    Tcp {
        flags: u8,
    },
}

impl L4 {
    pub fn header_len(self) -> usize {
        match self {
            L4::Udp => UDP_HLEN,
            L4::Tcp { .. } => TCP_HLEN,
        }
    }

    fn protocol(self) -> u8 {
        match self {
            L4::Udp => IPPROTO_UDP,
            L4::Tcp { .. } => IPPROTO_TCP,
        }
    }
}

/// What one frame carries.
#[derive(Debug, Clone, Copy)]
pub struct FrameSpec {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Source and destination addresses, of one family.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub l4: L4,
    pub payload_len: usize,
}

/// Bytes of the IP header of an address's family.
pub fn ip_header_len(addr: IpAddr) -> usize {
    IpRepr::new(addr, addr, 0, 0).header_len()
}

/// Builds the frame. The addresses must be of one family (checked by the
/// caller); the payload is zeros.
pub fn build(spec: &FrameSpec) -> Vec<u8> {
    let l4_len = spec.l4.header_len() + spec.payload_len;
    let ip = IpRepr::new(spec.src, spec.dst, spec.l4.protocol(), l4_len);
    let mut f = Vec::with_capacity(ETH_HLEN + ip.header_len() + l4_len);
    EthernetRepr {
        src: spec.src_mac,
        dst: spec.dst_mac,
        ethertype: ip.ethertype(),
    }
    .emit(&mut f);
    ip.emit(&mut f);
    let payload = vec![0; spec.payload_len];
    match spec.l4 {
        L4::Udp => UdpRepr {
            sport: spec.sport,
            dport: spec.dport,
            checksum: true,
        }
        .emit(&ip, &payload, &mut f),
        L4::Tcp { flags } => {
            let flags = TcpFlags::from_bits(flags);
            TcpRepr {
                sport: spec.sport,
                dport: spec.dport,
                seq: TCP_SEQ,
                ack: if flags.ack { TCP_SEQ } else { 0 },
                flags,
                window: TCP_WINDOW,
            }
            .emit(&ip, &payload, &mut f)
        }
    }
    f
}
