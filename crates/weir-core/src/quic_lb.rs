//! QUIC connection IDs that carry a server ID, as the plaintext algorithm
//! of the QUIC-LB draft (draft-ietf-quic-load-balancers) lays them out:
//! the first octet's top three bits are the config rotation codepoint, the
//! next `server_id_len` octets the server ID, the rest a nonce. The XDP
//! tier decodes the same layout (bpf/lib/quic.h); backends encode it.

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
}
