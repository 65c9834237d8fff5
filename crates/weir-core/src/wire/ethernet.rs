//! Ethernet II header (no VLAN tag).

/// Bytes of an Ethernet II header.
pub const ETH_HLEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub src: [u8; 6],
    pub dst: [u8; 6],
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Appends the header to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst);
        out.extend_from_slice(&self.src);
        out.extend_from_slice(&self.ethertype.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_comes_first() {
        let mut out = Vec::new();
        EthernetRepr {
            src: [2, 0, 0, 0, 0, 0xcc],
            dst: [2, 0, 0, 0, 0, 0xaa],
            ethertype: ETHERTYPE_IPV6,
        }
        .emit(&mut out);
        assert_eq!(out, [2, 0, 0, 0, 0, 0xaa, 2, 0, 0, 0, 0, 0xcc, 0x86, 0xdd]);
    }
}
