//! The benchmark's flows and their 64-byte TCP frames, and the seeded
//! generator that picks them.

use super::*;

/// The flow of connection `i`: a distinct client address and port towards the VIP.
pub(super) fn flow(i: u64) -> FlowTuple {
    let c = i / 60_000;
    let client = Ipv4Addr::new(10, (1 + ((c >> 16) % 250)) as u8, (c >> 8) as u8, c as u8);
    FlowTuple {
        src: IpAddr::V4(client),
        dst: IpAddr::V4(VIP),
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

/// The 64-byte frame of connection `i` with the given TCP flags.
pub(super) fn packet(i: u64, tcp_flags: u8) -> Vec<u8> {
    let f = flow(i);
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (f.src, f.dst) else {
        unreachable!("the bench uses IPv4")
    };
    let mut p = vec![0u8; FRAME_LEN];
    p[0..6].copy_from_slice(&LB_MAC);
    p[6..12].copy_from_slice(&CLIENT_MAC);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (FRAME_LEN - 14) as u16;
    {
        let ip = &mut p[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = checksum(ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    {
        let tcp_len = ip_len - 20;
        let tcp = &mut p[34..];
        tcp[0..2].copy_from_slice(&f.sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&f.dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&(i as u32).to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = tcp_flags;
        tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
        for (k, b) in tcp[20..].iter_mut().enumerate() {
            *b = b'a' + k as u8;
        }
        let mut pseudo = 0u32;
        for w in [src.octets(), dst.octets()] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + u32::from(tcp_len);
        let c = checksum(tcp, pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn packets_have_valid_checksums() {
        let p = packet(123_456, TCP_ACK);
        assert_eq!(p.len(), FRAME_LEN);
        assert_eq!(checksum(&p[14..34], 0), 0, "IPv4 header checksum");
        let mut pseudo = 0u32;
        for w in [&p[26..30], &p[30..34]] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + (FRAME_LEN as u32 - 34);
        assert_eq!(checksum(&p[34..], pseudo), 0, "TCP checksum");
    }

    #[test]
    pub(super) fn flows_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..3_000_000u64).step_by(7) {
            assert!(seen.insert(flow(i)));
        }
        assert!(seen.insert(flow(u64::MAX / 2)));
    }
}
