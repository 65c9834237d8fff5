//! Test packets: the frames come from `weir_core::wire` (every length and
//! checksum computed from scratch); the few kinds it does not model (ARP,
//! ICMP, another IP protocol) are built with etherparse here, and so is the
//! independent checksum verifier for frames the program rewrote.
//!
//! Nothing here runs or imitates the BPF program: an expected output is a
//! second frame built from the rewritten addresses, never a patched input.

use std::net::IpAddr;

use etherparse::{Ipv4Header, Ipv6Header, PacketBuilder, TcpHeader, UdpHeader};
// Each test binary uses its own subset.
#[allow(unused_imports)]
pub use weir_core::wire::{
    ipv6_with_exts, raw_frame, Frame, TcpFlags, ETHERTYPE_IPV4 as ETH_P_IP,
    ETHERTYPE_IPV6 as ETH_P_IPV6, ETH_HLEN, L4,
};

/// An ARP request (who-has `target` tell `sender`).
pub fn arp_request(src_mac: [u8; 6], sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut b = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    b.extend_from_slice(&src_mac);
    b.extend_from_slice(&sender);
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(&target);
    raw_frame(src_mac, [0xff; 6], 0x0806, &b)
}

/// ICMP (v4) or ICMPv6 echo request.
pub fn icmp_echo(src_mac: [u8; 6], dst_mac: [u8; 6], src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(src_mac, dst_mac);
    let mut out = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth
            .ipv4(s.octets(), d.octets(), 64)
            .icmpv4_echo_request(7, 1)
            .write(&mut out, b"ping")
            .unwrap(),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth
            .ipv6(s.octets(), d.octets(), 64)
            .icmpv6_echo_request(7, 1)
            .write(&mut out, b"ping")
            .unwrap(),
        _ => panic!("mixed families"),
    }
    out
}

/// An IPv4 datagram of another protocol (GRE, 47) with a valid header.
pub fn ipv4_other_proto(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let body = [0u8; 16];
    let mut h = Ipv4Header::new(body.len() as u16, 64, etherparse::IpNumber(47), src, dst).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut ip = h.to_bytes().to_vec();
    ip.extend_from_slice(&body);
    raw_frame(src_mac, dst_mac, ETH_P_IP, &ip)
}

/// Recomputes every checksum of a TCP/UDP frame from scratch (etherparse)
/// and compares it with the one in the frame. IPv6 extension headers are
/// not walked: the frame must carry TCP/UDP right after the fixed header.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    if frame.len() < ETH_HLEN {
        return Err("shorter than Ethernet".into());
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let ip = &frame[ETH_HLEN..];
    match ethertype {
        ETH_P_IP => {
            let (h, rest) = Ipv4Header::from_slice(ip).map_err(|e| format!("ipv4: {e}"))?;
            if h.header_checksum != h.calc_header_checksum() {
                return Err(format!(
                    "IPv4 header checksum {:#06x}, recomputed {:#06x}",
                    h.header_checksum,
                    h.calc_header_checksum()
                ));
            }
            let l4_len = usize::from(h.total_len) - h.header_len();
            let l4 = rest.get(..l4_len).ok_or("datagram longer than frame")?;
            match h.protocol.0 {
                6 => {
                    let (t, payload) = TcpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let want = t.calc_checksum_ipv4(&h, payload).unwrap();
                    check("TCP", t.checksum, want)
                }
                17 => {
                    let (u, payload) = UdpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    if u.checksum == 0 {
                        return Ok(()); // no checksum (RFC 768)
                    }
                    let payload = &payload[..usize::from(u.length) - 8];
                    let want = u.calc_checksum_ipv4(&h, payload).unwrap();
                    check("UDP", u.checksum, want)
                }
                p => Err(format!("not TCP/UDP: {p}")),
            }
        }
        ETH_P_IPV6 => {
            let (h, rest) = Ipv6Header::from_slice(ip).map_err(|e| format!("ipv6: {e}"))?;
            let l4 = rest
                .get(..usize::from(h.payload_length))
                .ok_or("datagram longer than frame")?;
            match h.next_header.0 {
                6 => {
                    let (t, payload) = TcpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let want = t.calc_checksum_ipv6(&h, payload).unwrap();
                    check("TCP", t.checksum, want)
                }
                17 => {
                    let (u, payload) = UdpHeader::from_slice(l4).map_err(|e| format!("{e}"))?;
                    let payload = &payload[..usize::from(u.length) - 8];
                    let want = u.calc_checksum_ipv6(&h, payload).unwrap();
                    check("UDP", u.checksum, want)
                }
                p => Err(format!("not TCP/UDP: {p}")),
            }
        }
        t => Err(format!("not IP: ethertype {t:#06x}")),
    }
}

fn check(what: &str, have: u16, want: u16) -> Result<(), String> {
    if have == want {
        Ok(())
    } else {
        Err(format!(
            "{what} checksum {have:#06x}, recomputed {want:#06x}"
        ))
    }
}

/// A readable diff of two frames for assertion messages.
pub fn diff(have: &[u8], want: &[u8]) -> String {
    let mut s = format!("lengths: have {} want {}\n", have.len(), want.len());
    for i in 0..have.len().max(want.len()) {
        let (a, b) = (have.get(i), want.get(i));
        if a != b {
            s.push_str(&format!("  byte {i}: have {a:02x?} want {b:02x?}\n"));
        }
    }
    s
}
