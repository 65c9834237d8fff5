//! The fixture's frames, every one built with `weir_core::wire` (lengths
//! and checksums computed from scratch): a client's segment or datagram,
//! what it looks like forwarded to a DIP, a DIP's reply before and after
//! reverse nat, and the kinds the load balancer does not balance.

use std::net::IpAddr;

use weir_core::csum::checksum;
pub use weir_core::wire::{ipv6_with_exts, Frame, TcpFlags, L4};
use weir_core::wire::{raw_frame, IpRepr, ETHERTYPE_ARP};

use crate::fixture::{dip_mac, ip, Dip, CLIENT_MAC, LB_IF_MAC, VIP_MAC};

pub const SYN: TcpFlags = TcpFlags::SYN;
pub const ACK: TcpFlags = TcpFlags::ACK;
pub const SYN_ACK: TcpFlags = TcpFlags::SYN_ACK;
pub const PSH_ACK: TcpFlags = TcpFlags::PSH_ACK;
pub const FIN_ACK: TcpFlags = TcpFlags::FIN_ACK;
pub const RST: TcpFlags = TcpFlags::RST;

/// The payload of a DIP's reply.
pub const REPLY_PAYLOAD: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nweir";

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_GRE: u8 = 47;
const IPPROTO_ICMPV6: u8 = 58;

/// A frame as it arrives from the client (L2: client to the VIP's MAC).
pub fn client(f: Frame) -> Frame {
    f.macs(CLIENT_MAC, VIP_MAC)
}

/// A client's TCP segment as it arrives at the load balancer.
pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: TcpFlags) -> Frame {
    client(Frame::tcp(ip(src), sport, ip(dst), dport, flags))
}

/// A client's UDP datagram as it arrives at the load balancer.
pub fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Frame {
    client(Frame::udp(ip(src), sport, ip(dst), dport))
}

/// `f` with other TCP flags.
pub fn with_flags(f: &Frame, flags: TcpFlags) -> Frame {
    Frame {
        l4: L4::Tcp(flags),
        ..f.clone()
    }
}

/// Whether `f` is a connection's first segment (SYN without ACK).
pub fn is_syn(f: &Frame) -> bool {
    matches!(f.l4, L4::Tcp(fl) if fl.syn && !fl.ack)
}

/// A client frame after nat forwarding to `dip`.
pub fn nat_out(f: &Frame, dip: &Dip) -> Frame {
    f.clone()
        .macs(LB_IF_MAC, dip_mac(dip.id))
        .with_dst(dip.addr, dip.port_for(f.dport))
}

/// A client frame after dsr forwarding to `dip`: only L2 changes.
pub fn dsr_out(f: &Frame, dip: &Dip) -> Frame {
    f.clone().macs(LB_IF_MAC, dip_mac(dip.id))
}

/// The DIP's reply to client frame `f` (nat), as it arrives from the DIP.
pub fn reply(f: &Frame, dip: &Dip, l4: L4) -> Frame {
    let mut r = f
        .clone()
        .macs(dip_mac(dip.id), LB_IF_MAC)
        .with_src(dip.addr, dip.port_for(f.dport))
        .with_dst(f.src, f.sport);
    r.l4 = l4;
    r.payload = REPLY_PAYLOAD.to_vec();
    r
}

/// The reply after reverse nat: from the VIP `client` addressed, to the
/// client, L2 learned from the client's frame.
pub fn reply_out(r: &Frame, client: &Frame) -> Frame {
    r.clone()
        .macs(VIP_MAC, CLIENT_MAC)
        .with_src(client.dst, client.dport)
}

/// An ARP request (who-has `target` tell `sender`), broadcast.
pub fn arp_request(src_mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    // Ethernet, IPv4, 6-byte and 4-byte addresses, request.
    let mut b = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    b.extend_from_slice(&src_mac);
    b.extend_from_slice(&sender);
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(&target);
    raw_frame(src_mac, [0xff; 6], ETHERTYPE_ARP, &b)
}

/// An ICMP (v4) or ICMPv6 echo request (identifier 7, sequence 1, "ping").
pub fn icmp_echo(src_mac: [u8; 6], dst_mac: [u8; 6], src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let (protocol, echo_request) = if src.is_ipv4() {
        (IPPROTO_ICMP, 8)
    } else {
        (IPPROTO_ICMPV6, 128)
    };
    let mut icmp = vec![echo_request, 0, 0, 0, 0, 7, 0, 1];
    icmp.extend_from_slice(b"ping");
    let ip = IpRepr::new(src, dst, protocol, icmp.len());
    // ICMPv6's checksum covers the pseudo-header, ICMP's does not.
    let initial = if src.is_ipv4() {
        0
    } else {
        ip.pseudo_header_sum(protocol, icmp.len())
    };
    let sum = checksum(&icmp, initial);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut body = Vec::new();
    ip.emit(&mut body);
    body.extend_from_slice(&icmp);
    raw_frame(src_mac, dst_mac, ip.ethertype(), &body)
}

/// An IPv4 datagram of another protocol (GRE, 47, 16 zero bytes) with a
/// valid header.
pub fn ipv4_other_proto(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let payload = [0u8; 16];
    let ip = IpRepr::new(src.into(), dst.into(), IPPROTO_GRE, payload.len());
    let mut body = Vec::new();
    ip.emit(&mut body);
    body.extend_from_slice(&payload);
    raw_frame(src_mac, dst_mac, ip.ethertype(), &body)
}

/// Hop-by-hop, then destination options and routing headers by turns: `n`
/// extension headers of 8 bytes each, for [`ipv6_with_exts`].
pub fn ext_chain(n: usize) -> Vec<(u8, Vec<u8>)> {
    let padn = || vec![1, 4, 0, 0, 0, 0];
    (0..n)
        .map(|i| match i {
            0 => (0u8, padn()),
            i if i % 2 == 1 => (60, padn()),
            _ => (43, vec![0, 0, 0, 0, 0, 0]),
        })
        .collect()
}

/// A fragment header (offset 0, more fragments), for [`ipv6_with_exts`].
pub fn fragment_ext() -> (u8, Vec<u8>) {
    (44, vec![0, 1, 0, 0, 0x56, 0x78])
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    /// The same echo request from etherparse, a second implementation.
    fn etherparse_echo(src: IpAddr, dst: IpAddr) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(CLIENT_MAC, VIP_MAC);
        let mut out = Vec::new();
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth
                .ipv4(s.octets(), d.octets(), 64)
                .icmpv4_echo_request(7, 1)
                .write(&mut out, b"ping"),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth
                .ipv6(s.octets(), d.octets(), 64)
                .icmpv6_echo_request(7, 1)
                .write(&mut out, b"ping"),
            _ => panic!("mixed families"),
        }
        .unwrap();
        out
    }

    #[test]
    fn icmp_echo_matches_a_second_implementation() {
        for (s, d) in [
            ("192.0.2.1", "10.0.0.100"),
            ("2001:db8:c::1", "2001:db8::100"),
        ] {
            let have = icmp_echo(CLIENT_MAC, VIP_MAC, ip(s), ip(d));
            assert_eq!(have, etherparse_echo(ip(s), ip(d)), "{s} -> {d}");
        }
    }

    #[test]
    fn nat_out_and_reply_out_mirror_each_other() {
        let d = Dip {
            id: 3,
            addr: ip("10.1.0.3"),
            port: 0,
        };
        let c = tcp("192.0.2.1", 40001, "10.0.0.100", 80, SYN);
        let fwd = nat_out(&c, &d);
        assert_eq!((fwd.dst, fwd.dport), (d.addr, 80), "port 0 keeps the VIP's");
        let r = reply(&c, &d, L4::Tcp(SYN_ACK));
        assert_eq!(
            (r.src, r.sport, r.dst, r.dport),
            (d.addr, 80, c.src, c.sport)
        );
        let back = reply_out(&r, &c);
        assert_eq!((back.src, back.sport), (c.dst, c.dport));
        assert_eq!((back.src_mac, back.dst_mac), (VIP_MAC, CLIENT_MAC));
    }
}
