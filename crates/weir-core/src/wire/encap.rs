//! IP-in-IP (IPIP, IPv6 in IPv4/IPv6) and GUE (RFC draft, variant 1: the
//! inner IP packet right after a UDP header) encapsulation.

use super::ip::{IpRepr, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_UDP};
use super::udp::UdpRepr;

/// The largest outer IP datagram sent unless configured otherwise: an
/// Ethernet MTU.
pub const DEFAULT_MTU: u32 = 1500;

/// How the inner packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// Right after the outer IP header (protocol 4 or 41 by the inner
    /// packet's version).
    Ipip,
    /// In a UDP datagram with these ports and no checksum.
    Gue { sport: u16, dport: u16 },
}

/// Appends `inner` (an IP packet, from its version nibble on) behind an
/// outer IP header `outer` (its protocol and payload length are set here)
/// to `out`.
pub fn encapsulate(mut outer: IpRepr, encap: Encap, inner: &[u8], out: &mut Vec<u8>) {
    let inner_protocol = match inner.first().map(|b| b >> 4) {
        Some(4) => IPPROTO_IPIP,
        Some(6) => IPPROTO_IPV6,
        v => panic!("encapsulate: the inner packet is not IPv4 or IPv6 (version {v:?})"),
    };
    match encap {
        Encap::Ipip => {
            outer.protocol = inner_protocol;
            outer.payload_len = inner.len();
            outer.emit(out);
            out.extend_from_slice(inner);
        }
        Encap::Gue { sport, dport } => {
            outer.protocol = IPPROTO_UDP;
            outer.payload_len = super::UDP_HLEN + inner.len();
            outer.emit(out);
            let udp = UdpRepr {
                sport,
                dport,
                checksum: false,
            };
            udp.emit(&outer, inner, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outer_header(src: &str, dst: &str) -> IpRepr {
        IpRepr::new(src.parse().unwrap(), dst.parse().unwrap(), 0, 0)
    }

    const INNER_V4: [u8; 4] = [0x45, 1, 2, 3];

    #[test]
    fn ipip_takes_the_inner_version_as_protocol() {
        let mut out = Vec::new();
        let outer = outer_header("172.16.0.1", "10.0.0.2");
        encapsulate(outer, Encap::Ipip, &INNER_V4, &mut out);
        assert_eq!(&out[2..4], &[0, 24], "total length");
        assert_eq!(out[9], IPPROTO_IPIP);
        assert_eq!(&out[20..], &INNER_V4);

        let mut out = Vec::new();
        let outer = outer_header("fd00::1", "fd00::2");
        encapsulate(outer, Encap::Ipip, &[0x60, 0, 0, 0], &mut out);
        assert_eq!(&out[4..7], &[0, 4, IPPROTO_IPV6]);
    }

    #[test]
    fn gue_puts_a_udp_header_without_checksum_in_between() {
        let mut out = Vec::new();
        let outer = outer_header("fd00::1", "fd00::2");
        let gue = Encap::Gue {
            sport: 0xc123,
            dport: 6080,
        };
        encapsulate(outer, gue, &INNER_V4, &mut out);
        assert_eq!(
            &out[4..7],
            &[0, 12, IPPROTO_UDP],
            "payload length, next header"
        );
        assert_eq!(&out[40..48], &[0xc1, 0x23, 0x17, 0xc0, 0, 12, 0, 0]);
        assert_eq!(&out[48..], &INNER_V4);
    }
}
