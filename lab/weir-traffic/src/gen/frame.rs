//! The generator's template frame: Ethernet, IPv4 or IPv6, TCP or UDP and a
//! zero payload, with every checksum computed from scratch. weir_gen varies
//! the source address and port of copies of it.

use std::net::IpAddr;

use weir_core::csum::{checksum, sum_be16};

/// Ethernet header bytes (no VLAN tag).
pub const ETH_LEN: usize = 14;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
pub const TCP_LEN: usize = 20;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const TTL: u8 = 64;
/// The TCP sequence number of every generated segment (the acknowledgment
/// number too, when ACK is set).
pub const TCP_SEQ: u32 = 1;
const TCP_WINDOW: u16 = 65535;
/// IPv4 "don't fragment".
const IP_DF: u16 = 0x4000;

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
            L4::Udp => UDP_LEN,
            L4::Tcp { .. } => TCP_LEN,
        }
    }

    fn proto(self) -> u8 {
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
    match addr {
        IpAddr::V4(_) => IPV4_LEN,
        IpAddr::V6(_) => IPV6_LEN,
    }
}

/// Builds the frame. The addresses must be of one family (checked by the
/// caller); the payload is zeros.
pub fn build(spec: &FrameSpec) -> Vec<u8> {
    let l4_len = spec.l4.header_len() + spec.payload_len;
    let mut f = Vec::with_capacity(ETH_LEN + ip_header_len(spec.src) + l4_len);
    f.extend_from_slice(&spec.dst_mac);
    f.extend_from_slice(&spec.src_mac);
    let pseudo = match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&ETH_P_IP.to_be_bytes());
            let ip_start = f.len();
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&((IPV4_LEN + l4_len) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]); // identification
            f.extend_from_slice(&IP_DF.to_be_bytes());
            f.extend_from_slice(&[TTL, spec.l4.proto(), 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
            let sum = checksum(&f[ip_start..], 0);
            f[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
            let pseudo = sum_be16(&s.octets(), 0);
            let pseudo = sum_be16(&d.octets(), pseudo);
            pseudo + u32::from(spec.l4.proto()) + l4_len as u32
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4_len as u16).to_be_bytes());
            f.extend_from_slice(&[spec.l4.proto(), TTL]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
            let pseudo = sum_be16(&s.octets(), 0);
            let pseudo = sum_be16(&d.octets(), pseudo);
            pseudo + u32::from(spec.l4.proto()) + l4_len as u32
        }
        _ => panic!(
            "frame::build: {} and {} are of different families",
            spec.src, spec.dst
        ),
    };
    let l4_start = f.len();
    f.extend_from_slice(&spec.sport.to_be_bytes());
    f.extend_from_slice(&spec.dport.to_be_bytes());
    let csum_at = match spec.l4 {
        L4::Udp => {
            f.extend_from_slice(&(l4_len as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            l4_start + 6
        }
        L4::Tcp { flags } => {
            let ack = if flags & 0x10 != 0 { TCP_SEQ } else { 0 };
            f.extend_from_slice(&TCP_SEQ.to_be_bytes());
            f.extend_from_slice(&ack.to_be_bytes());
            f.extend_from_slice(&[5 << 4, flags]);
            f.extend_from_slice(&TCP_WINDOW.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
            l4_start + 16
        }
    };
    f.resize(l4_start + l4_len, 0);
    let mut sum = checksum(&f[l4_start..], pseudo);
    // A computed UDP checksum of 0 is sent as 0xffff (0 means "none").
    if sum == 0 && spec.l4 == L4::Udp {
        sum = 0xffff;
    }
    f[csum_at..csum_at + 2].copy_from_slice(&sum.to_be_bytes());
    f
}
