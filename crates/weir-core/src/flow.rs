//! Flow keys: the 5-tuple in the exact byte layout of `struct weir_flow_key`.

use std::net::IpAddr;

use weir_abi::{weir_flow_key, WEIR_AF_INET, WEIR_AF_INET6};

/// Transport protocols weir balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }

    pub fn from_number(n: u8) -> Option<Proto> {
        match n {
            6 => Some(Proto::Tcp),
            17 => Some(Proto::Udp),
            _ => None,
        }
    }
}

/// An address in weir's four-word form (IPv4 in word 0) and its family.
pub fn addr_words(addr: IpAddr) -> ([u32; 4], u8) {
    let mut words = [0u32; 4];
    match addr {
        IpAddr::V4(v4) => {
            words[0] = u32::from_ne_bytes(v4.octets());
            (words, WEIR_AF_INET as u8)
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            for (i, w) in words.iter_mut().enumerate() {
                *w = u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]]);
            }
            (words, WEIR_AF_INET6 as u8)
        }
    }
}

/// The inverse of [`addr_words`]; `None` for an unknown family.
pub fn words_addr(words: &[u32; 4], family: u8) -> Option<IpAddr> {
    match u32::from(family) {
        WEIR_AF_INET => Some(IpAddr::from(words[0].to_ne_bytes())),
        WEIR_AF_INET6 => {
            let mut o = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                o[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
            }
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

/// A connection's 5-tuple as the client sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: Proto,
}

impl FlowTuple {
    /// The key the data plane looks up. Both addresses must be of one family.
    pub fn key(&self) -> weir_flow_key {
        let (src, family) = addr_words(self.src);
        let (dst, _) = addr_words(self.dst);
        weir_flow_key {
            src,
            dst,
            sport: self.sport.to_be(),
            dport: self.dport.to_be(),
            proto: self.proto.number(),
            family,
            pad: [0; 2],
        }
    }

    /// Reads a key back; `None` for an unknown family or protocol.
    pub fn from_key(key: &weir_flow_key) -> Option<FlowTuple> {
        Some(FlowTuple {
            src: words_addr(&key.src, key.family)?,
            dst: words_addr(&key.dst, key.family)?,
            sport: u16::from_be(key.sport),
            dport: u16::from_be(key.dport),
            proto: Proto::from_number(key.proto)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trips_v4_and_v6() {
        for (s, d) in [("10.0.0.1", "10.0.0.2"), ("2001:db8::1", "2001:db8::2")] {
            let t = FlowTuple {
                src: s.parse().unwrap(),
                dst: d.parse().unwrap(),
                sport: 40000,
                dport: 80,
                proto: Proto::Tcp,
            };
            assert_eq!(FlowTuple::from_key(&t.key()), Some(t));
        }
    }

    #[test]
    fn ipv4_sits_in_word_zero_in_network_order() {
        let (w, fam) = addr_words("1.2.3.4".parse().unwrap());
        assert_eq!(w[0].to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(&w[1..], &[0, 0, 0]);
        assert_eq!(u32::from(fam), WEIR_AF_INET);
    }
}
