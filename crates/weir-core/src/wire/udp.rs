//! UDP header.

use super::ip::{IpRepr, IPPROTO_UDP};
use crate::csum::checksum;

/// Bytes of a UDP header.
pub const UDP_HLEN: usize = 8;

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub sport: u16,
    pub dport: u16,
    /// False: the checksum field is 0, "none" (IPv4 only, RFC 768; tunnels
    /// such as GUE send it so over IPv6 too, RFC 6935).
    pub checksum: bool,
}

impl UdpRepr {
    /// Appends the header and `payload` to `out`, with the checksum over
    /// `ip`'s pseudo-header when `checksum` is set.
    pub fn emit(&self, ip: &IpRepr, payload: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        let len = UDP_HLEN + payload.len();
        let len16 = u16::try_from(len).unwrap_or_else(|_| {
            panic!("{} payload bytes do not fit a UDP datagram", payload.len())
        });
        out.extend_from_slice(&self.sport.to_be_bytes());
        out.extend_from_slice(&self.dport.to_be_bytes());
        out.extend_from_slice(&len16.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(payload);
        if self.checksum {
            let sum = checksum(&out[start..], ip.pseudo_header_sum(IPPROTO_UDP, len));
            // A computed 0 is sent as all ones: 0 means "no checksum".
            let sum = if sum == 0 { 0xffff } else { sum };
            out[start + 6..start + 8].copy_from_slice(&sum.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(len: usize) -> IpRepr {
        IpRepr::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            IPPROTO_UDP,
            len,
        )
    }

    #[test]
    fn datagram_matches_hand_checked_bytes() {
        let udp = UdpRepr {
            sport: 53,
            dport: 1024,
            checksum: true,
        };
        let mut out = Vec::new();
        udp.emit(&ip(10), b"ab", &mut out);
        // Pseudo 0a00+0001+0a00+0002+0011+000a = 0x141e; header
        // 0035+0400+000a = 0x043f; payload 6162: 0x141e+0x043f+0x6162 = 0x79bf
        // -> checksum 0x8640.
        assert_eq!(out, [0, 53, 4, 0, 0, 10, 0x86, 0x40, b'a', b'b']);
    }

    #[test]
    fn without_checksum_the_field_stays_zero() {
        let udp = UdpRepr {
            sport: 53,
            dport: 1024,
            checksum: false,
        };
        let mut out = Vec::new();
        udp.emit(&ip(10), b"ab", &mut out);
        assert_eq!(&out[6..8], &[0, 0]);
    }

    #[test]
    fn a_checksum_that_computes_to_zero_is_sent_as_all_ones() {
        // Pick the payload word that makes the one's-complement sum 0xffff.
        let udp = UdpRepr {
            sport: 53,
            dport: 1024,
            checksum: true,
        };
        let mut probe = Vec::new();
        udp.emit(&ip(10), &[0, 0], &mut probe);
        // With the checksum itself as payload the sum is all ones.
        let word = [probe[6], probe[7]];
        let mut out = Vec::new();
        udp.emit(&ip(10), &word, &mut out);
        assert_eq!(&out[6..8], &[0xff, 0xff]);
    }
}
