//! The bytes of Katran's map keys and values (katran/lib/bpf/balancer_structs.h),
//! written from user space as its control library writes them. Sizes are
//! checked against the loaded object's maps (`Katran::load`), so a Katran
//! whose layout differs is refused by name instead of measured wrongly.

use std::net::IpAddr;

/// `struct flow_key`: source and destination (IPv4 in the first 4 bytes of
/// 16), source and destination port (network order), protocol; padded to 40.
pub(super) const FLOW_KEY_LEN: usize = 40;
/// `struct vip_definition`: address (16), port (network order), protocol; padded to 20.
pub(super) const VIP_DEFINITION_LEN: usize = 20;
/// `struct vip_meta`: flags, vip_num.
pub(super) const VIP_META_LEN: usize = 8;
/// `struct real_definition`: address (16), flags; padded to 20.
pub(super) const REAL_DEFINITION_LEN: usize = 20;
/// `struct real_pos_lru`: the real's index, padding, atime (u64).
pub(super) const REAL_POS_LRU_LEN: usize = 16;
/// `struct ctl_value`: a union of a u64, an ifindex and a MAC address.
pub(super) const CTL_VALUE_LEN: usize = 8;
/// `struct lb_stats`: two u64 counters, v1 and v2.
pub(super) const LB_STATS_LEN: usize = 16;

/// `real_definition.flags`: the real's address is IPv6 (F_IPV6).
const F_IPV6: u8 = 1;

/// Katran's "stats" map holds per-VIP counters at 0..MAX_VIPS and its
/// global counters after them (balancer_consts.h): the index of each past MAX_VIPS.
pub(super) mod stat {
    /// v1: packets to a VIP that reached the connection table; v2: of
    /// those, the ones it had no entry for.
    pub const LRU_CNTRS: u32 = 0;
    /// v1: TCP SYNs not in the table; v2: other TCP packets not in the table.
    pub const LRU_MISS_CNTR: u32 = 1;
    /// v1: new connections in the current second, v2: when that second began.
    pub const NEW_CONN_RATE_CNTR: u32 = 2;
    /// v1: packets that found no connection table for their CPU.
    pub const FALLBACK_LRU_CNTR: u32 = 3;
    /// v1: packets that left with XDP_TX.
    pub const XDP_TX_CNTR: u32 = 17;
}

/// The 16 address bytes Katran's unions hold: IPv4 in the first 4.
fn addr16(addr: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match addr {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out = a.octets(),
    }
    out
}

/// The connection-table key of a TCP or UDP flow, as `process_packet` looks it up.
pub(super) fn flow_key(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    proto: u8,
) -> [u8; FLOW_KEY_LEN] {
    let mut k = [0u8; FLOW_KEY_LEN];
    k[..16].copy_from_slice(&addr16(src));
    k[16..32].copy_from_slice(&addr16(dst));
    k[32..34].copy_from_slice(&sport.to_be_bytes());
    k[34..36].copy_from_slice(&dport.to_be_bytes());
    k[36] = proto;
    k
}

pub(super) fn vip_definition(addr: IpAddr, port: u16, proto: u8) -> [u8; VIP_DEFINITION_LEN] {
    let mut k = [0u8; VIP_DEFINITION_LEN];
    k[..16].copy_from_slice(&addr16(addr));
    k[16..18].copy_from_slice(&port.to_be_bytes());
    k[18] = proto;
    k
}

pub(super) fn vip_meta(flags: u32, vip_num: u32) -> [u8; VIP_META_LEN] {
    let mut v = [0u8; VIP_META_LEN];
    v[..4].copy_from_slice(&flags.to_ne_bytes());
    v[4..].copy_from_slice(&vip_num.to_ne_bytes());
    v
}

pub(super) fn real_definition(addr: IpAddr) -> [u8; REAL_DEFINITION_LEN] {
    let mut v = [0u8; REAL_DEFINITION_LEN];
    v[..16].copy_from_slice(&addr16(addr));
    v[16] = if addr.is_ipv6() { F_IPV6 } else { 0 };
    v
}

pub(super) fn real_pos_lru(pos: u32, atime: u64) -> [u8; REAL_POS_LRU_LEN] {
    let mut v = [0u8; REAL_POS_LRU_LEN];
    v[..4].copy_from_slice(&pos.to_ne_bytes());
    v[8..].copy_from_slice(&atime.to_ne_bytes());
    v
}

/// The real index a connection-table value names.
pub(super) fn real_pos_of(value: &[u8]) -> u32 {
    u32::from_ne_bytes(value[..4].try_into().expect("a real_pos_lru value"))
}

/// ctl_array's entry 0: the MAC address every encapsulated packet is sent to.
pub(super) fn ctl_mac(mac: [u8; 6]) -> [u8; CTL_VALUE_LEN] {
    let mut v = [0u8; CTL_VALUE_LEN];
    v[..6].copy_from_slice(&mac);
    v
}

/// (v1, v2) of an `lb_stats` value.
pub(super) fn lb_stats(value: &[u8]) -> (u64, u64) {
    let word =
        |i: usize| u64::from_ne_bytes(value[i..i + 8].try_into().expect("an lb_stats value"));
    (word(0), word(8))
}

/// A VIP's consistent-hashing ring of `ring_size` positions over reals
/// 1..=reals (Katran never maps a position to real 0, which means "none"),
/// each real taking an equal share of positions spread around the ring.
/// Which real a position names does not change what a lookup costs, so the
/// ring is a plain interleave rather than Katran's Maglev permutation.
pub(super) fn ch_ring(ring_size: u32, reals: u32) -> Vec<u32> {
    (0..ring_size).map(|pos| 1 + pos % reals).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn flow_key_puts_ipv4_in_the_first_word_and_ports_in_network_order() {
        let k = flow_key(
            IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
            IpAddr::V4(Ipv4Addr::new(10, 255, 0, 1)),
            1024,
            80,
            6,
        );
        assert_eq!(&k[..4], &[10, 1, 2, 3]);
        assert!(k[4..16].iter().all(|&b| b == 0));
        assert_eq!(&k[16..20], &[10, 255, 0, 1]);
        assert_eq!(&k[32..36], &[0x04, 0x00, 0x00, 0x50]);
        assert_eq!(k[36], 6);
        assert!(k[37..].iter().all(|&b| b == 0), "padding must be zero");
    }

    #[test]
    fn ipv6_definitions_carry_the_whole_address_and_the_v6_flag() {
        let a = IpAddr::V6(Ipv6Addr::new(0xfd00, 0x255, 0, 0, 0, 0, 0, 1));
        let vip = vip_definition(a, 80, 6);
        assert_eq!(
            &vip[..16],
            &Ipv6Addr::new(0xfd00, 0x255, 0, 0, 0, 0, 0, 1).octets()
        );
        assert_eq!(&vip[16..19], &[0, 80, 6]);
        assert_eq!(real_definition(a)[16], F_IPV6);
        assert_eq!(real_definition(IpAddr::V4(Ipv4Addr::LOCALHOST))[16], 0);
    }

    #[test]
    fn values_round_trip() {
        let v = real_pos_lru(3, 7);
        assert_eq!(real_pos_of(&v), 3);
        assert_eq!(u64::from_ne_bytes(v[8..].try_into().unwrap()), 7);
        let mut s = [0u8; LB_STATS_LEN];
        s[..8].copy_from_slice(&5u64.to_ne_bytes());
        s[8..].copy_from_slice(&9u64.to_ne_bytes());
        assert_eq!(lb_stats(&s), (5, 9));
        assert_eq!(&ctl_mac([1, 2, 3, 4, 5, 6])[..], &[1, 2, 3, 4, 5, 6, 0, 0]);
        assert_eq!(&vip_meta(0, 2)[4..], &2u32.to_ne_bytes());
    }

    #[test]
    fn the_ring_never_names_real_zero_and_shares_positions_evenly() {
        let ring = ch_ring(65537, 3);
        assert_eq!(ring.len(), 65537);
        assert!(ring.iter().all(|&r| (1..=3).contains(&r)));
        let count = |r| ring.iter().filter(|&&x| x == r).count();
        assert!(count(1).abs_diff(count(3)) <= 1);
    }
}
