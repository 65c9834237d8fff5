//! IPv4 (20 bytes, no options, "don't fragment") and IPv6 (fixed header)
//! headers, and the pseudo-header sum TCP and UDP checksums start from.

use std::net::IpAddr;

use crate::csum::{checksum, sum_be16};

pub const IPV4_HLEN: usize = 20;
pub const IPV6_HLEN: usize = 40;
pub const IPPROTO_IPIP: u8 = 4;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_IPV6: u8 = 41;

const IPV4_DF: u16 = 0x4000;

/// An IP header; the family is the addresses'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRepr {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The protocol (IPv4) or next header (IPv6).
    pub protocol: u8,
    /// Bytes after this header.
    pub payload_len: usize,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 identification; ignored for IPv6.
    pub ident: u16,
    /// IPv6 flow label (20 bits); ignored for IPv4.
    pub flow_label: u32,
}

impl IpRepr {
    /// A header with TTL 64, identification 0 and flow label 0.
    pub fn new(src: IpAddr, dst: IpAddr, protocol: u8, payload_len: usize) -> IpRepr {
        IpRepr {
            src,
            dst,
            protocol,
            payload_len,
            ttl: 64,
            ident: 0,
            flow_label: 0,
        }
    }

    /// Bytes of the header.
    pub fn header_len(&self) -> usize {
        match self.src {
            IpAddr::V4(_) => IPV4_HLEN,
            IpAddr::V6(_) => IPV6_HLEN,
        }
    }

    /// The Ethernet type of the family.
    pub fn ethertype(&self) -> u16 {
        match self.src {
            IpAddr::V4(_) => super::ETHERTYPE_IPV4,
            IpAddr::V6(_) => super::ETHERTYPE_IPV6,
        }
    }

    /// Appends the header (with its checksum, for IPv4) to `out`.
    ///
    /// Panics if the addresses are of different families or the payload
    /// does not fit the length field: both are mistakes of the caller.
    pub fn emit(&self, out: &mut Vec<u8>) {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let start = out.len();
                out.extend_from_slice(&[0x45, 0]);
                out.extend_from_slice(&self.length_field(IPV4_HLEN).to_be_bytes());
                out.extend_from_slice(&self.ident.to_be_bytes());
                out.extend_from_slice(&IPV4_DF.to_be_bytes());
                out.extend_from_slice(&[self.ttl, self.protocol, 0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let sum = checksum(&out[start..], 0);
                out[start + 10..start + 12].copy_from_slice(&sum.to_be_bytes());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&((6 << 28) | (self.flow_label & 0xfffff)).to_be_bytes());
                out.extend_from_slice(&self.length_field(0).to_be_bytes());
                out.extend_from_slice(&[self.protocol, self.ttl]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (s, d) => panic!("an IP header from {s} to {d}: the addresses' families differ"),
        }
    }

    fn length_field(&self, header_len: usize) -> u16 {
        u16::try_from(header_len + self.payload_len).unwrap_or_else(|_| {
            panic!("{} payload bytes do not fit an IP header", self.payload_len)
        })
    }

    /// The partial sum of the pseudo-header of an upper-layer packet of
    /// `protocol` and `len` bytes (RFC 793, RFC 8200 section 8.1).
    pub fn pseudo_header_sum(&self, protocol: u8, len: usize) -> u32 {
        let addrs = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => sum_be16(&d.octets(), sum_be16(&s.octets(), 0)),
            (IpAddr::V6(s), IpAddr::V6(d)) => sum_be16(&d.octets(), sum_be16(&s.octets(), 0)),
            (s, d) => panic!("a pseudo-header from {s} to {d}: the addresses' families differ"),
        };
        addrs + u32::from(protocol) + len as u32
    }
}

/// Recomputes the checksum of the IPv4 header at the start of `packet`
/// (its length from the IHL field), for headers a test edited by hand.
pub fn refresh_ipv4_checksum(packet: &mut [u8]) {
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    packet[10..12].copy_from_slice(&[0, 0]);
    let sum = checksum(&packet[..ihl], 0);
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_matches_hand_checked_bytes() {
        // 192.0.2.1 -> 10.0.0.110, TCP, 20 payload bytes; checksum by hand:
        // 4500+0028+0000+4000+4006+c000+0201+0a00+006e = 0x1_919d -> 919e -> !6e61.
        let mut out = Vec::new();
        IpRepr::new(
            "192.0.2.1".parse().unwrap(),
            "10.0.0.110".parse().unwrap(),
            6,
            20,
        )
        .emit(&mut out);
        assert_eq!(
            out,
            [0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0x6e, 0x61, 192, 0, 2, 1, 10, 0, 0, 110]
        );
        assert_eq!(checksum(&out, 0), 0, "a correct header sums to zero");
    }

    #[test]
    fn ipv6_header_carries_flow_label_and_payload_length() {
        let mut ip = IpRepr::new(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            17,
            12,
        );
        ip.flow_label = 0xabcde;
        let mut out = Vec::new();
        ip.emit(&mut out);
        assert_eq!(&out[..8], &[0x60, 0x0a, 0xbc, 0xde, 0, 12, 17, 64]);
        assert_eq!(out.len(), IPV6_HLEN);
        assert_eq!(out[23], 1);
        assert_eq!(out[39], 2);
    }

    #[test]
    fn refresh_restores_an_edited_header() {
        let mut out = Vec::new();
        IpRepr::new(
            "192.0.2.1".parse().unwrap(),
            "10.0.0.110".parse().unwrap(),
            6,
            20,
        )
        .emit(&mut out);
        let want = out.clone();
        out[8] = 1;
        refresh_ipv4_checksum(&mut out);
        assert_ne!(&out[10..12], &want[10..12]);
        out[8] = 64;
        refresh_ipv4_checksum(&mut out);
        assert_eq!(out, want);
    }

    #[test]
    #[should_panic(expected = "families differ")]
    fn mixed_families_are_refused() {
        IpRepr::new(
            "192.0.2.1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            6,
            0,
        )
        .emit(&mut Vec::new());
    }
}
