//! The benchmark's flows and their TCP frames (IPv4 or IPv6), and the
//! seeded generator that picks them.

use super::*;
use weir_core::wire::{EthernetRepr, IpRepr, TcpFlags, TcpRepr, ETH_HLEN, IPPROTO_TCP, TCP_HLEN};

/// The address family of the bench's VIP and connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// 64-byte Ethernet + IPv4 + TCP frames; connections in `conns4`.
    V4,
    /// 84-byte Ethernet + IPv6 + TCP frames; connections in `conns`.
    V6,
}

impl Family {
    pub(in crate::bench) fn name(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        }
    }

    /// The VIP (and the DIP: see the module documentation).
    pub(in crate::bench) fn vip(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(VIP),
            Family::V6 => IpAddr::V6(VIP6),
        }
    }

    /// Frame length: Ethernet + IP + TCP + 10 bytes of payload.
    pub(in crate::bench) fn frame_len(self) -> usize {
        match self {
            Family::V4 => FRAME_LEN,
            Family::V6 => FRAME_LEN + 20,
        }
    }
}

/// The flow of connection `i`: a distinct client address and port towards the VIP.
pub(in crate::bench) fn flow(family: Family, i: u64) -> FlowTuple {
    let c = i / 60_000;
    let client = match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(
            10,
            (1 + ((c >> 16) % 250)) as u8,
            (c >> 8) as u8,
            c as u8,
        )),
        // fd00:10::/64, the host part the same counter.
        Family::V6 => IpAddr::V6(Ipv6Addr::from((0xfd00_0010u128 << 96) | u128::from(c))),
    };
    FlowTuple {
        src: client,
        dst: family.vip(),
        sport: 1024 + (i % 60_000) as u16,
        dport: VIP_PORT,
        proto: Proto::Tcp,
    }
}

/// The key of a connection's replies (DIP -> client); the DIP is the VIP's
/// address and port here.
pub(in crate::bench) fn reverse_key(key: &weir_flow_key) -> weir_flow_key {
    weir_flow_key {
        src: key.dst,
        dst: key.src,
        sport: key.dport,
        dport: key.sport,
        proto: key.proto,
        family: key.family,
        pad: [0; 2],
    }
}

/// The frame of connection `i` of `family` with the given TCP flags.
pub(in crate::bench) fn packet(family: Family, i: u64, tcp_flags: u8) -> Vec<u8> {
    let f = flow(family, i);
    let mut ip = IpRepr::new(f.src, f.dst, IPPROTO_TCP, 0);
    ip.payload_len = family.frame_len() - ETH_HLEN - ip.header_len();
    ip.ident = i as u16;
    let payload: Vec<u8> = (0..ip.payload_len - TCP_HLEN)
        .map(|k| b'a' + k as u8)
        .collect();
    let mut p = Vec::with_capacity(family.frame_len());
    EthernetRepr {
        src: CLIENT_MAC,
        dst: LB_MAC,
        ethertype: ip.ethertype(),
    }
    .emit(&mut p);
    ip.emit(&mut p);
    TcpRepr {
        sport: f.sport,
        dport: f.dport,
        seq: i as u32,
        ack: 0,
        flags: TcpFlags::from_bits(tcp_flags),
        window: 64240,
    }
    .emit(&ip, &payload, &mut p);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::csum::checksum;

    #[test]
    pub(in crate::bench) fn packets_have_valid_checksums() {
        for family in [Family::V4, Family::V6] {
            let p = packet(family, 123_456, TCP_ACK);
            assert_eq!(p.len(), family.frame_len());
            let f = flow(family, 123_456);
            let ip = IpRepr::new(f.src, f.dst, IPPROTO_TCP, 0);
            let l4_off = ETH_HLEN + ip.header_len();
            if family == Family::V4 {
                assert_eq!(checksum(&p[ETH_HLEN..l4_off], 0), 0, "IPv4 header checksum");
            }
            let l4_len = p.len() - l4_off;
            let pseudo = ip.pseudo_header_sum(IPPROTO_TCP, l4_len);
            assert_eq!(
                checksum(&p[l4_off..], pseudo),
                0,
                "TCP checksum ({family:?})"
            );
        }
    }

    #[test]
    pub(in crate::bench) fn flows_are_distinct() {
        for family in [Family::V4, Family::V6] {
            let mut seen = std::collections::HashSet::new();
            for i in (0..3_000_000u64).step_by(7) {
                assert!(seen.insert(flow(family, i)));
            }
            assert!(seen.insert(flow(family, u64::MAX / 2)));
        }
    }
}
