//! QUIC connection IDs that carry a server ID, as the plaintext algorithm
//! of the QUIC-LB draft (draft-ietf-quic-load-balancers) lays them out:
//! the first octet's top three bits are the config rotation codepoint, the
//! next `server_id_len` octets the server ID, the rest a nonce. The XDP
//! tier decodes the same layout (bpf/lib/quic.h); backends encode it.
//! [`classify`] is the sans-IO statement of which datagrams the XDP tier
//! routes by that ID; its tests hold the program to it packet by packet.
//! [`handshake_id`] and [`opens_new_connection`] state how it tells a new
//! connection's Initial on a reused client address and port from a
//! retransmitted one.

use crate::flow_hash::murmur3_32;
use weir_abi::{WEIR_QUIC_CID_MAX, WEIR_QUIC_CONFIG_ID_MAX, WEIR_QUIC_SID_MAX};

/// The longest server ID (octets).
pub const SERVER_ID_MAX: usize = WEIR_QUIC_SID_MAX as usize;
/// The highest routable config rotation codepoint (7 marks unroutable CIDs).
pub const CONFIG_ID_MAX: u8 = WEIR_QUIC_CONFIG_ID_MAX as u8;
/// QUIC v1's longest connection ID.
pub const CID_MAX: usize = WEIR_QUIC_CID_MAX as usize;

/// A QUIC VIP's connection ID layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CidLayout {
    /// Config rotation codepoint, 0..=CONFIG_ID_MAX.
    pub config_id: u8,
    /// Server ID octets, 1..=SERVER_ID_MAX.
    pub server_id_len: u8,
}

impl CidLayout {
    /// A connection ID carrying `server_id` followed by `nonce`; the first
    /// octet's low five bits describe the CID's length minus one (QUIC-LB's
    /// optional length self-description). Panics when `server_id` is not
    /// `server_id_len` octets or the CID would exceed CID_MAX.
    pub fn encode(&self, server_id: &[u8], nonce: &[u8]) -> Vec<u8> {
        assert_eq!(server_id.len(), usize::from(self.server_id_len));
        let len = 1 + server_id.len() + nonce.len();
        assert!(
            len <= CID_MAX,
            "a {len}-octet connection ID exceeds QUIC's {CID_MAX}"
        );
        let mut cid = Vec::with_capacity(len);
        cid.push(self.config_id << 5 | ((len - 1) as u8 & 0x1f));
        cid.extend_from_slice(server_id);
        cid.extend_from_slice(nonce);
        cid
    }

    /// The server ID `dcid` carries, or None when it is too short or of
    /// another config rotation.
    pub fn server_id<'a>(&self, dcid: &'a [u8]) -> Option<&'a [u8]> {
        let end = 1 + usize::from(self.server_id_len);
        if dcid.len() < end || dcid[0] >> 5 != self.config_id {
            return None;
        }
        Some(&dcid[1..end])
    }
}

/// QUIC version 1 (RFC 9000).
pub const QUIC_V1: u32 = 0x0000_0001;
/// QUIC version 2 (RFC 9369), whose long-header packet types are permuted.
pub const QUIC_V2: u32 = 0x6b33_43cf;

/// What a QUIC VIP's datagram says about the server that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified<'a> {
    /// The destination connection ID carries this server ID in the VIP's
    /// layout. `server_chosen` is true when a server issued the ID (a short
    /// header, or a Handshake or Retry of QUIC v1 or v2), so an ID that no
    /// DIP owns names a server that is gone; a client's Initial or 0-RTT,
    /// or a long header of another version, may carry one it made up.
    ServerId { id: &'a [u8], server_chosen: bool },
    /// No routable ID: empty, truncated or malformed headers, version
    /// negotiation, a DCID too short for the layout or of another config
    /// rotation. Such a datagram goes by the 5-tuple connection table.
    Unroutable,
}

/// Classifies a UDP payload sent to a QUIC VIP with `layout`, by the
/// version-independent invariants (RFC 8999) and the long-header types of
/// QUIC v1 and v2.
pub fn classify<'a>(layout: &CidLayout, payload: &'a [u8]) -> Classified<'a> {
    let Some(&first) = payload.first() else {
        return Classified::Unroutable;
    };
    let (dcid, server_chosen) = if first & 0x80 == 0 {
        // A short header's DCID runs to where only the connection knows.
        (&payload[1..], true)
    } else {
        let Some(head) = payload.get(..6) else {
            return Classified::Unroutable;
        };
        let version = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = usize::from(head[5]);
        if version == 0 || len > CID_MAX {
            return Classified::Unroutable;
        }
        let Some(dcid) = payload.get(6..6 + len) else {
            return Classified::Unroutable;
        };
        let kind = (first >> 4) & 3;
        let from_client = match version {
            QUIC_V1 => kind <= 1,
            QUIC_V2 => kind == 1 || kind == 2,
            // An unknown version's types mean nothing here: its ID may be
            // the client's own, so an unowned one is not a gone server's.
            _ => true,
        };
        (dcid, !from_client)
    };
    match layout.server_id(dcid) {
        Some(id) => Classified::ServerId { id, server_chosen },
        None => Classified::Unroutable,
    }
}

/// The DCID a client chose for its handshake, when `payload` is an Initial
/// or 0-RTT packet of QUIC v1 or v2 (every retransmission of the client's
/// first flight carries the same; after the server's first Initial the
/// client uses the server's connection IDs instead). None for anything
/// else, a DCID past the datagram or one longer than CID_MAX included.
pub fn client_dcid(payload: &[u8]) -> Option<&[u8]> {
    let head = payload.get(..6)?;
    if head[0] & 0x80 == 0 {
        return None;
    }
    let version = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let kind = (head[0] >> 4) & 3;
    let opens = match version {
        QUIC_V1 => kind <= 1,
        QUIC_V2 => kind == 1 || kind == 2,
        _ => false,
    };
    let len = usize::from(head[5]);
    if !opens || len > CID_MAX {
        return None;
    }
    payload.get(6..6 + len)
}

/// The handshake a client's Initial or 0-RTT `payload` belongs to, as the
/// XDP tier keeps it in the 5-tuple entry the packet opens
/// (`weir_conn.quic_handshake`, bpf/lib/quic.h): Murmur3-32 with the flow
/// hash's `seed` over the five little-endian words of its DCID zero-padded
/// to 20 octets, then the DCID's length; the low 24 bits, 0 taken as 1.
/// 0 when the payload opens no handshake ([`client_dcid`]).
pub fn handshake_id(payload: &[u8], seed: u32) -> u32 {
    let Some(dcid) = client_dcid(payload) else {
        return 0;
    };
    let mut padded = [0u8; CID_MAX];
    padded[..dcid.len()].copy_from_slice(dcid);
    match murmur3_32(&padded, seed, dcid.len() as u32) & 0xff_ffff {
        0 => 1,
        id => id,
    }
}

/// The handshake kept in a 5-tuple entry's `quic_handshake` octets.
pub fn entry_handshake(octets: [u8; 3]) -> u32 {
    u32::from_le_bytes([octets[0], octets[1], octets[2], 0])
}

/// Whether a datagram the 5-tuple table routes (no live DIP owns a server
/// ID in its DCID), sent from a client address and port whose live entry
/// was opened by handshake `entry` (0: none, an entry a packet routed by
/// its ID wrote), is a new connection that reuses them: a client's Initial
/// or 0-RTT of another handshake. The XDP tier then drops the entry and
/// dispatches the datagram by the current table, as it does a SYN on a
/// reused TCP tuple; a retransmission of the same handshake, and anything
/// that opens none (short headers, Handshake packets, non-QUIC), keeps the
/// entry's DIP.
pub fn opens_new_connection(payload: &[u8], seed: u32, entry: u32) -> bool {
    let id = handshake_id(payload, seed);
    id != 0 && id != entry
}

/// Parses a server ID written in hex (`"0a1b"`, optionally `0x`-prefixed)
/// of exactly `len` octets.
pub fn parse_server_id(text: &str, len: usize) -> Result<Vec<u8>, String> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    if !digits.is_ascii() {
        return Err(format!("server ID {text:?} is not hex (digits 0-9, a-f)"));
    }
    if digits.len() != 2 * len {
        return Err(format!(
            "server ID {text:?} has {} hex digits, but the VIP's server_id_len = {len} needs {}",
            digits.len(),
            2 * len
        ));
    }
    (0..len)
        .map(|i| {
            u8::from_str_radix(&digits[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("server ID {text:?} is not hex (digits 0-9, a-f)"))
        })
        .collect()
}

/// A server ID as the configuration writes it.
pub fn format_server_id(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cid_carries_its_config_and_server_id_and_gives_them_back() {
        let l = CidLayout {
            config_id: 2,
            server_id_len: 3,
        };
        let cid = l.encode(&[0xaa, 0xbb, 0xcc], &[1, 2, 3, 4]);
        assert_eq!(cid, [0x40 | 7, 0xaa, 0xbb, 0xcc, 1, 2, 3, 4]);
        assert_eq!(l.server_id(&cid), Some(&[0xaa, 0xbb, 0xcc][..]));
        // Another config rotation, or too short: no server ID.
        let other = CidLayout { config_id: 3, ..l };
        assert_eq!(other.server_id(&cid), None);
        assert_eq!(l.server_id(&cid[..3]), None);
    }

    #[test]
    fn server_ids_are_hex_of_the_configured_length() {
        assert_eq!(parse_server_id("0a1B", 2), Ok(vec![0x0a, 0x1b]));
        assert_eq!(parse_server_id("0x0a1b", 2), Ok(vec![0x0a, 0x1b]));
        assert!(parse_server_id("0a1b", 3).unwrap_err().contains("needs 6"));
        assert!(parse_server_id("0g", 1).unwrap_err().contains("not hex"));
        assert!(parse_server_id("aéb", 2).unwrap_err().contains("not hex"));
        assert_eq!(format_server_id(&[0x0a, 0x1b]), "0a1b");
    }

    const LAYOUT: CidLayout = CidLayout {
        config_id: 1,
        server_id_len: 2,
    };

    fn long(first: u8, version: u32, dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![first];
        p.extend_from_slice(&version.to_be_bytes());
        p.push(dcid.len() as u8);
        p.extend_from_slice(dcid);
        p.extend_from_slice(&[0; 8]);
        p
    }

    #[test]
    fn short_headers_and_server_issued_long_headers_carry_server_chosen_ids() {
        let cid = LAYOUT.encode(&[0xab, 0xcd], &[9; 5]);
        let id = &[0xab, 0xcd][..];
        let mut short = vec![0x40];
        short.extend_from_slice(&cid);
        assert_eq!(
            classify(&LAYOUT, &short),
            Classified::ServerId {
                id,
                server_chosen: true
            }
        );
        // v1: Initial 0, 0-RTT 1, Handshake 2, Retry 3; v2 permutes them
        // (Retry 0, Initial 1, 0-RTT 2, Handshake 3).
        for (version, kind, from_client) in [
            (QUIC_V1, 0, true),
            (QUIC_V1, 1, true),
            (QUIC_V1, 2, false),
            (QUIC_V2, 1, true),
            (QUIC_V2, 2, true),
            (QUIC_V2, 3, false),
            (0x1a2a_3a4a, 2, true),
        ] {
            let p = long(0xc0 | kind << 4, version, &cid);
            assert_eq!(
                classify(&LAYOUT, &p),
                Classified::ServerId {
                    id,
                    server_chosen: !from_client
                },
                "version {version:#x} type {kind}"
            );
        }
    }

    #[test]
    fn a_clients_initial_and_0rtt_open_a_handshake_that_a_new_dcid_replaces() {
        let seed = crate::flow_hash::DEFAULT_SEED;
        let dcid = [0x5a; 8];
        let opening = [
            long(0xc0, QUIC_V1, &dcid), // v1 Initial
            long(0xd0, QUIC_V1, &dcid), // v1 0-RTT
            long(0xd0, QUIC_V2, &dcid), // v2 Initial
            long(0xe0, QUIC_V2, &dcid), // v2 0-RTT
        ];
        let id = handshake_id(&opening[0], seed);
        assert_ne!(id, 0);
        assert!(id < 1 << 24, "24 bits: {id:#x}");
        for p in &opening {
            assert_eq!(client_dcid(p), Some(&dcid[..]));
            assert_eq!(handshake_id(p, seed), id, "one handshake, one DCID");
            assert!(!opens_new_connection(p, seed, id), "a retransmission");
            assert!(opens_new_connection(p, seed, 0), "an entry of no handshake");
        }
        // Another DCID, a longer one zero-padded, another seed: another id.
        let other = long(0xc0, QUIC_V1, &[0x5b; 8]);
        assert!(opens_new_connection(&other, seed, id));
        let padded = long(
            0xc0,
            QUIC_V1,
            &[0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0],
        );
        assert_ne!(handshake_id(&padded, seed), id);
        assert_ne!(handshake_id(&opening[0], seed ^ 1), id);
        // Nothing else opens one: short headers, Handshake and Retry
        // packets, other versions, version negotiation, truncated DCIDs.
        let mut short = vec![0x40];
        short.extend_from_slice(&dcid);
        let full = long(0xc0, QUIC_V1, &dcid);
        for (what, p) in [
            ("short header", short),
            ("v1 Handshake", long(0xe0, QUIC_V1, &dcid)),
            ("v1 Retry", long(0xf0, QUIC_V1, &dcid)),
            ("v2 Handshake", long(0xf0, QUIC_V2, &dcid)),
            ("unknown version", long(0xc0, 0x1a2a_3a4a, &dcid)),
            ("version negotiation", long(0xc0, 0, &dcid)),
            ("DCID cut short", full[..10].to_vec()),
            ("a 21-octet DCID", long(0xc0, QUIC_V1, &[1; 21])),
        ] {
            assert_eq!(client_dcid(&p), None, "{what}");
            assert_eq!(handshake_id(&p, seed), 0, "{what}");
            assert!(!opens_new_connection(&p, seed, id), "{what}");
        }
        assert_eq!(entry_handshake([0x12, 0x34, 0x56]), 0x56_3412);
    }

    #[test]
    fn what_carries_no_routable_id_is_left_to_the_connection_table() {
        let cid = LAYOUT.encode(&[0xab, 0xcd], &[9; 5]);
        let other_rotation = CidLayout {
            config_id: 2,
            ..LAYOUT
        }
        .encode(&[0xab, 0xcd], &[9; 5]);
        let full = long(0xc0, QUIC_V1, &cid);
        for (what, p) in [
            ("empty", vec![]),
            (
                "a long header cut before its DCID length",
                full[..5].to_vec(),
            ),
            ("a long header cut inside its DCID", full[..8].to_vec()),
            ("version negotiation", long(0xc0, 0, &cid)),
            ("a 21-octet DCID", long(0xc0, QUIC_V1, &[0x20; 21])),
            (
                "another config rotation",
                long(0xe0, QUIC_V1, &other_rotation),
            ),
            (
                "a short header too short for the ID",
                vec![0x40, 0x20, 0xab],
            ),
        ] {
            assert_eq!(classify(&LAYOUT, &p), Classified::Unroutable, "{what}");
        }
    }
}
