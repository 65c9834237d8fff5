//! QUIC packets built by hand from RFC 9000 (v1) and RFC 9369 (v2): the
//! invariant header fields the load balancer reads (first octet, version,
//! connection IDs), then a plausible rest (token and length fields, a
//! packet number, an opaque payload). Nothing is encrypted: the load
//! balancer never reads past the destination connection ID.

pub use weir_core::quic_lb::{QUIC_V1, QUIC_V2};

/// Long-header packet types (RFC 9000 17.2; RFC 9369 encodes them as
/// (v1 type + 1) % 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongType {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

impl LongType {
    fn bits(self, version: u32) -> u8 {
        let v1 = match self {
            LongType::Initial => 0,
            LongType::ZeroRtt => 1,
            LongType::Handshake => 2,
            LongType::Retry => 3,
        };
        if version == QUIC_V2 {
            (v1 + 1) % 4
        } else {
            v1
        }
    }
}

/// A long-header packet of `version` with these connection IDs.
pub fn long_header(kind: LongType, version: u32, dcid: &[u8], scid: &[u8]) -> Vec<u8> {
    // Header form 1, fixed bit 1, type, reserved 0, packet number length 1.
    let mut p = vec![0xc0 | kind.bits(version) << 4];
    p.extend_from_slice(&version.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend_from_slice(dcid);
    p.push(scid.len() as u8);
    p.extend_from_slice(scid);
    if kind == LongType::Initial {
        p.push(0); // token length (varint 0)
    }
    let body = [0x5a; 24];
    // Length: packet number (2 octets) + payload, as a 2-octet varint.
    let len = 2 + body.len() as u16;
    p.extend_from_slice(&(0x4000 | len).to_be_bytes());
    p.extend_from_slice(&[0x00, 0x01]);
    p.extend_from_slice(&body);
    p
}

/// A short-header (1-RTT) packet to `dcid`.
pub fn short_header(dcid: &[u8]) -> Vec<u8> {
    // Header form 0, fixed bit 1, spin 0, key phase 0, packet number length 2.
    let mut p = vec![0x41];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0x00, 0x2a]);
    p.extend_from_slice(&[0xa5; 32]);
    p
}

/// A version negotiation packet (version 0) listing `versions`.
pub fn version_negotiation(dcid: &[u8], scid: &[u8], versions: &[u32]) -> Vec<u8> {
    let mut p = vec![0x80 | 0x3f];
    p.extend_from_slice(&0u32.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend_from_slice(dcid);
    p.push(scid.len() as u8);
    p.extend_from_slice(scid);
    for v in versions {
        p.extend_from_slice(&v.to_be_bytes());
    }
    p
}
