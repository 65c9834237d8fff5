//! The benchmark's flows and their TCP frames (IPv4 or IPv6), and the
//! seeded generator that picks them.

use super::*;

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
    pub(super) fn name(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        }
    }

    /// The VIP (and the DIP: see the module documentation).
    pub(super) fn vip(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(VIP),
            Family::V6 => IpAddr::V6(VIP6),
        }
    }

    /// Frame length: Ethernet + IP + TCP + 10 bytes of payload.
    pub(super) fn frame_len(self) -> usize {
        match self {
            Family::V4 => FRAME_LEN,
            Family::V6 => FRAME_LEN + 20,
        }
    }
}

/// The flow of connection `i`: a distinct client address and port towards the VIP.
pub(super) fn flow(family: Family, i: u64) -> FlowTuple {
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
pub(super) fn reverse_key(key: &weir_flow_key) -> weir_flow_key {
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
pub(super) fn packet(family: Family, i: u64, tcp_flags: u8) -> Vec<u8> {
    let f = flow(family, i);
    let len = family.frame_len();
    let mut p = vec![0u8; len];
    p[0..6].copy_from_slice(&LB_MAC);
    p[6..12].copy_from_slice(&CLIENT_MAC);
    // The pseudo-header's addresses, as 16-bit words.
    let mut pseudo = 0u32;
    let mut add = |b: &[u8]| {
        for w in b.chunks(2) {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    };
    let l4 = match (f.src, f.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip = &mut p[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
            ip[6] = 0x40; // DF
            ip[8] = 64;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let c = checksum(ip, 0);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            add(&src.octets());
            add(&dst.octets());
            34
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            p[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut p[14..54];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((len - 54) as u16).to_be_bytes());
            ip[6] = 6;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            add(&src.octets());
            add(&dst.octets());
            54
        }
        _ => unreachable!("a flow's addresses are of one family"),
    };
    let tcp_len = (len - l4) as u16;
    let tcp = &mut p[l4..];
    tcp[0..2].copy_from_slice(&f.sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&f.dport.to_be_bytes());
    tcp[4..8].copy_from_slice(&(i as u32).to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = tcp_flags;
    tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
    for (k, b) in tcp[20..].iter_mut().enumerate() {
        *b = b'a' + k as u8;
    }
    let c = checksum(tcp, pseudo + 6 + u32::from(tcp_len));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn packets_have_valid_checksums() {
        let p = packet(Family::V4, 123_456, TCP_ACK);
        assert_eq!(p.len(), FRAME_LEN);
        assert_eq!(checksum(&p[14..34], 0), 0, "IPv4 header checksum");
        let mut pseudo = 0u32;
        for w in [&p[26..30], &p[30..34]] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + (FRAME_LEN as u32 - 34);
        assert_eq!(checksum(&p[34..], pseudo), 0, "TCP checksum");

        let p = packet(Family::V6, 123_456, TCP_ACK);
        assert_eq!(p.len(), Family::V6.frame_len());
        let mut pseudo = 0u32;
        for w in p[22..54].chunks(2) {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        pseudo += 6 + (p.len() as u32 - 54);
        assert_eq!(checksum(&p[54..], pseudo), 0, "TCP checksum over IPv6");
    }

    #[test]
    pub(super) fn flows_are_distinct() {
        for family in [Family::V4, Family::V6] {
            let mut seen = std::collections::HashSet::new();
            for i in (0..3_000_000u64).step_by(7) {
                assert!(seen.insert(flow(family, i)));
            }
            assert!(seen.insert(flow(family, u64::MAX / 2)));
        }
    }
}
