//! A whole test or template frame: Ethernet II + IPv4/IPv6 + TCP/UDP +
//! payload, with the fixed field values every test shares (TTL 64,
//! sequence 0x10000001, acknowledgment 0x20000002 when ACK is set,
//! window 64240), and the variants tests need besides (IPv6 extension
//! headers, raw Ethernet).

use std::net::IpAddr;

use super::ethernet::{EthernetRepr, ETHERTYPE_IPV6, ETH_HLEN};
use super::ip::{IpRepr, IPPROTO_TCP, IPPROTO_UDP};
use super::tcp::{TcpFlags, TcpRepr, TCP_HLEN};
use super::udp::{UdpRepr, UDP_HLEN};
use crate::flow::{FlowTuple, Proto};

/// The transport part of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp(TcpFlags),
    /// `zero_csum`: an IPv4 datagram without checksum (field 0).
    Udp {
        zero_csum: bool,
    },
}

/// A TCP or UDP frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub l4: L4,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn tcp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, flags: TcpFlags) -> Frame {
        Frame {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src,
            dst,
            sport,
            dport,
            l4: L4::Tcp(flags),
            payload: Vec::new(),
        }
    }

    pub fn udp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Frame {
        Frame {
            l4: L4::Udp { zero_csum: false },
            payload: b"weir-udp-payload".to_vec(),
            ..Frame::tcp(src, sport, dst, dport, TcpFlags::default())
        }
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Frame {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Frame {
        self.payload = p.to_vec();
        self
    }

    pub fn zero_udp_csum(mut self) -> Frame {
        self.l4 = L4::Udp { zero_csum: true };
        self
    }

    /// The same frame with the destination address and port replaced.
    pub fn with_dst(mut self, addr: IpAddr, port: u16) -> Frame {
        self.dst = addr;
        self.dport = port;
        self
    }

    /// The same frame with the source address and port replaced.
    pub fn with_src(mut self, addr: IpAddr, port: u16) -> Frame {
        self.src = addr;
        self.sport = port;
        self
    }

    pub fn proto(&self) -> Proto {
        match self.l4 {
            L4::Tcp(_) => Proto::Tcp,
            L4::Udp { .. } => Proto::Udp,
        }
    }

    /// The 5-tuple as the data plane keys it.
    pub fn tuple(&self) -> FlowTuple {
        FlowTuple {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto(),
        }
    }

    /// Offset of the L4 header in the frame.
    pub fn l4_off(&self) -> usize {
        ETH_HLEN + self.ip(0, 0).header_len()
    }

    /// The frame's bytes. Panics on mixed address families or a UDP
    /// datagram without checksum over IPv6: both are test mistakes.
    pub fn bytes(&self) -> Vec<u8> {
        let (protocol, l4_len) = self.l4_header();
        let ip = self.ip(protocol, l4_len);
        let mut out = Vec::with_capacity(ETH_HLEN + ip.header_len() + l4_len);
        self.ethernet(ip.ethertype()).emit(&mut out);
        ip.emit(&mut out);
        self.emit_l4(&ip, &mut out);
        out
    }

    fn ethernet(&self, ethertype: u16) -> EthernetRepr {
        EthernetRepr {
            src: self.src_mac,
            dst: self.dst_mac,
            ethertype,
        }
    }

    fn ip(&self, protocol: u8, payload_len: usize) -> IpRepr {
        IpRepr::new(self.src, self.dst, protocol, payload_len)
    }

    fn l4_header(&self) -> (u8, usize) {
        match self.l4 {
            L4::Tcp(_) => (IPPROTO_TCP, TCP_HLEN + self.payload.len()),
            L4::Udp { .. } => (IPPROTO_UDP, UDP_HLEN + self.payload.len()),
        }
    }

    fn emit_l4(&self, ip: &IpRepr, out: &mut Vec<u8>) {
        match self.l4 {
            L4::Tcp(flags) => TcpRepr {
                sport: self.sport,
                dport: self.dport,
                seq: 0x1000_0001,
                ack: if flags.ack { 0x2000_0002 } else { 0 },
                flags,
                window: 64240,
            }
            .emit(ip, &self.payload, out),
            L4::Udp { zero_csum } => {
                assert!(
                    !(zero_csum && self.src.is_ipv6()),
                    "IPv6 UDP must carry a checksum"
                );
                UdpRepr {
                    sport: self.sport,
                    dport: self.dport,
                    checksum: !zero_csum,
                }
                .emit(ip, &self.payload, out)
            }
        }
    }
}

/// `frame` as IPv6 with its TCP/UDP header follows extension headers: `exts`
/// is a list of (header type, body of 6 + 8n bytes); the last one's next
/// header is the frame's transport.
pub fn ipv6_with_exts(frame: &Frame, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    assert!(frame.src.is_ipv6(), "extension headers need IPv6 addresses");
    let (l4_protocol, l4_len) = frame.l4_header();
    let mut ext_bytes = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        assert_eq!(
            (body.len() + 2) % 8,
            0,
            "extension header body of 6 + 8n bytes"
        );
        ext_bytes.push(exts.get(i + 1).map_or(l4_protocol, |(t, _)| *t));
        ext_bytes.push(((body.len() + 2) / 8 - 1) as u8);
        ext_bytes.extend_from_slice(body);
    }
    let first = exts.first().map_or(l4_protocol, |(t, _)| *t);
    let mut out = Vec::new();
    frame.ethernet(ETHERTYPE_IPV6).emit(&mut out);
    frame.ip(first, ext_bytes.len() + l4_len).emit(&mut out);
    out.extend_from_slice(&ext_bytes);
    // The checksum's pseudo-header names the transport, not the first
    // extension header.
    frame.emit_l4(&frame.ip(l4_protocol, l4_len), &mut out);
    out
}

/// An Ethernet frame of any type: the header, then `body`.
pub fn raw_frame(src_mac: [u8; 6], dst_mac: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ETH_HLEN + body.len());
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype,
    }
    .emit(&mut out);
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csum::checksum;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_syn_matches_hand_checked_bytes() {
        let f = Frame::tcp(ip("10.0.0.1"), 1024, ip("10.0.0.2"), 80, TcpFlags::SYN)
            .macs([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b = f.bytes();
        let mut want = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        // IPv4: 4500 0028 0000 4000 4006 csum 0a00 0001 0a00 0002; the sum
        // 4500+0028+4000+4006+0a00+0001+0a00+0002 = 0xd931 -> 0x26ce.
        want.extend_from_slice(&[
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0x26, 0xce, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        // TCP: pseudo 0a00+0001+0a00+0002+0006+0014 = 0x141d; header
        // 0400+0050+1000+0001+0000+0000+5002+faf0 = 0x1_5f43; 0x141d+0x1_5f43
        // = 0x1_7360 -> 0x7361 -> 0x8c9e.
        want.extend_from_slice(&[
            4, 0, 0, 80, 0x10, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xfa, 0xf0, 0x8c, 0x9e, 0, 0,
        ]);
        assert_eq!(b, want);
        assert_eq!(f.l4_off(), 34);
    }

    #[test]
    fn ipv6_udp_checksum_covers_the_pseudo_header() {
        let f = Frame::udp(ip("2001:db8::1"), 5000, ip("2001:db8::2"), 53);
        let b = f.bytes();
        assert_eq!(b.len(), 14 + 40 + 8 + f.payload.len());
        assert_eq!(f.l4_off(), 54);
        let ip = IpRepr::new(f.src, f.dst, IPPROTO_UDP, b.len() - 54);
        let pseudo = ip.pseudo_header_sum(IPPROTO_UDP, b.len() - 54);
        assert_eq!(
            checksum(&b[54..], pseudo),
            0,
            "a correct datagram sums to zero"
        );
    }

    #[test]
    fn extension_headers_chain_to_the_transport() {
        let f = Frame::tcp(ip("2001:db8::1"), 1, ip("2001:db8::2"), 2, TcpFlags::ACK);
        let plain = f.bytes();
        let b = ipv6_with_exts(&f, &[(0, vec![0; 6]), (60, vec![0; 14])]);
        assert_eq!(b[20], 0, "first next header: hop-by-hop");
        assert_eq!(
            &b[54..56],
            &[60, 0],
            "hop-by-hop -> destination options, 8 bytes"
        );
        assert_eq!(
            &b[62..64],
            &[IPPROTO_TCP, 1],
            "destination options -> TCP, 16 bytes"
        );
        assert_eq!(&b[78..], &plain[54..], "the same TCP segment and checksum");
    }

    #[test]
    fn zero_udp_checksum_is_zero() {
        let f = Frame::udp(ip("10.0.0.1"), 1, ip("10.0.0.2"), 2).zero_udp_csum();
        assert_eq!(&f.bytes()[40..42], &[0, 0]);
    }
}
