//! Checks of frames the code under test left: every checksum recomputed by
//! a second implementation (etherparse), and a byte diff for messages.

use etherparse::{Ipv4Header, Ipv6Header, TcpHeader, UdpHeader};
use weir_core::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HLEN};

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
        ETHERTYPE_IPV4 => {
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
        ETHERTYPE_IPV6 => {
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
