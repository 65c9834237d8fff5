//! TCP header (20 bytes, no options) and its flags.

use super::ip::{IpRepr, IPPROTO_TCP};
use crate::csum::checksum;

/// Bytes of a TCP header without options.
pub const TCP_HLEN: usize = 20;

/// The flags of a segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpFlags {
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
}

impl TcpFlags {
    pub const SYN: TcpFlags = TcpFlags::from_bits(0x02);
    pub const SYN_ACK: TcpFlags = TcpFlags::from_bits(0x12);
    pub const ACK: TcpFlags = TcpFlags::from_bits(0x10);
    pub const PSH_ACK: TcpFlags = TcpFlags::from_bits(0x18);
    pub const FIN_ACK: TcpFlags = TcpFlags::from_bits(0x11);
    pub const RST: TcpFlags = TcpFlags::from_bits(0x04);

    /// The flags of header byte 13 (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08,
    /// ACK 0x10); the others are not modelled.
    pub const fn from_bits(bits: u8) -> TcpFlags {
        TcpFlags {
            fin: bits & 0x01 != 0,
            syn: bits & 0x02 != 0,
            rst: bits & 0x04 != 0,
            psh: bits & 0x08 != 0,
            ack: bits & 0x10 != 0,
        }
    }

    /// Header byte 13.
    pub const fn bits(self) -> u8 {
        (self.fin as u8)
            | (self.syn as u8) << 1
            | (self.rst as u8) << 2
            | (self.psh as u8) << 3
            | (self.ack as u8) << 4
    }
}

/// A TCP header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    /// The acknowledgment number, sent as is (RFC 9293 lets it be anything
    /// without ACK).
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
}

impl TcpRepr {
    /// Appends the header and `payload` to `out`, with the checksum over
    /// `ip`'s pseudo-header.
    pub fn emit(&self, ip: &IpRepr, payload: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.sport.to_be_bytes());
        out.extend_from_slice(&self.dport.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.ack.to_be_bytes());
        out.extend_from_slice(&[5 << 4, self.flags.bits()]);
        out.extend_from_slice(&self.window.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
        out.extend_from_slice(payload);
        let pseudo = ip.pseudo_header_sum(IPPROTO_TCP, TCP_HLEN + payload.len());
        let sum = checksum(&out[start..], pseudo);
        out[start + 16..start + 18].copy_from_slice(&sum.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_through_their_bits() {
        for bits in 0..0x20u8 {
            assert_eq!(TcpFlags::from_bits(bits).bits(), bits);
        }
        assert_eq!(
            TcpFlags::SYN_ACK,
            TcpFlags {
                syn: true,
                ack: true,
                ..TcpFlags::default()
            }
        );
    }

    #[test]
    fn segment_matches_hand_checked_bytes() {
        let ip = IpRepr::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            IPPROTO_TCP,
            22,
        );
        let tcp = TcpRepr {
            sport: 1024,
            dport: 80,
            seq: 1,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 0xffff,
        };
        let mut out = Vec::new();
        tcp.emit(&ip, b"hi", &mut out);
        // Pseudo-header 0a00+0001+0a00+0002+0006+0016 = 0x141f; header
        // 0400+0050+0000+0001+0000+0000+5002+ffff = 0x1_5452; payload 6869.
        // 0x141f+0x1_5452+0x6869 = 0x1_d0da -> d0db -> checksum !d0db = 2f24.
        assert_eq!(
            out,
            [
                0x04, 0x00, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0x2f, 0x24,
                0, 0, b'h', b'i'
            ]
        );
    }
}
