//! Where a VIP sits in the slot array `vip_slots`, bit for bit as
//! `weir_vip_slot_of()` in `bpf/lib/vip_match.h` computes it: a
//! multiplicative hash of the five little-endian words of
//! `struct weir_vip_key`, whose top bits (the best mixed) name the slot.
//! And what a slot holds: user space keeps every VIP of `vips` either in
//! its slot (USED) or its slot marked MORE, so that the data plane falls
//! back to `vips` only for a slot shared by several VIPs.

use weir_abi::{
    weir_vip, weir_vip_key, weir_vip_slot, AsBytes, WEIR_VIP_SLOTS_PER_VIP, WEIR_VIP_SLOT_MORE,
    WEIR_VIP_SLOT_MULT, WEIR_VIP_SLOT_USED,
};

/// Slots for a table of `max_vips` VIPs: a power of two with room for
/// [`WEIR_VIP_SLOTS_PER_VIP`] slots per VIP, so few VIPs share a slot.
/// None if that does not fit a u32.
pub fn slot_count(max_vips: u32) -> Option<u32> {
    max_vips
        .max(1)
        .checked_mul(WEIR_VIP_SLOTS_PER_VIP)?
        .checked_next_power_of_two()
}

/// The slot of `key` among `slots` slots (a power of two).
pub fn slot_of(key: &weir_vip_key, slots: u32) -> u32 {
    debug_assert!(slots.is_power_of_two());
    let h = key.as_bytes().chunks_exact(4).fold(0u32, |h, w| {
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        h.wrapping_add(w).wrapping_mul(WEIR_VIP_SLOT_MULT)
    });
    h.checked_shr(slot_shift(slots)).unwrap_or(0)
}

/// The right shift that keeps the top log2(`slots`) bits of the hash: the
/// data plane's `cfg_vip_slot_shift`.
pub fn slot_shift(slots: u32) -> u32 {
    32 - slots.trailing_zeros()
}

/// Slot `cur` once `key` is (also) a VIP of `vips` with value `vip`: the
/// key takes an empty slot or updates its own, and marks MORE on a slot
/// another VIP holds. A slot with MORE and no occupant stays so; the next
/// [`settle`] gives it one.
pub fn with_vip(cur: &weir_vip_slot, key: &weir_vip_key, vip: &weir_vip) -> weir_vip_slot {
    let used = cur.flags & WEIR_VIP_SLOT_USED != 0;
    let empty = !used && cur.flags & WEIR_VIP_SLOT_MORE == 0;
    if empty || (used && cur.key == *key) {
        weir_vip_slot {
            key: *key,
            vip: *vip,
            flags: WEIR_VIP_SLOT_USED | (cur.flags & WEIR_VIP_SLOT_MORE),
        }
    } else {
        weir_vip_slot {
            flags: cur.flags | WEIR_VIP_SLOT_MORE,
            ..*cur
        }
    }
}

/// The slot that holds `members`, the VIPs of `vips` that hash to it: the
/// current occupant stays if it still is one (no needless change of
/// occupant), else the least key moves in; MORE if there are others.
pub fn settle(cur: &weir_vip_slot, members: &[(weir_vip_key, weir_vip)]) -> weir_vip_slot {
    let stays = members
        .iter()
        .find(|(k, _)| cur.flags & WEIR_VIP_SLOT_USED != 0 && *k == cur.key);
    let occupant = stays.or_else(|| members.iter().min_by_key(|(k, _)| k.as_bytes()));
    match occupant {
        None => weir_vip_slot::default(),
        Some((key, vip)) => weir_vip_slot {
            key: *key,
            vip: *vip,
            flags: WEIR_VIP_SLOT_USED
                | if members.len() > 1 {
                    WEIR_VIP_SLOT_MORE
                } else {
                    0
                },
        },
    }
}

/// Whether writing `next` over `cur` must pass through [`vacated`] first:
/// a packet that reads the slot while it is being written must never take
/// one VIP's key with another VIP's (or an older) value.
pub fn needs_vacate(cur: &weir_vip_slot, next: &weir_vip_slot) -> bool {
    let used = |s: &weir_vip_slot| s.flags & WEIR_VIP_SLOT_USED != 0;
    used(cur) && used(next) && (cur.key != next.key || cur.vip != next.vip)
}

/// A slot between two occupants: no key, every packet to it looks in `vips`.
pub fn vacated() -> weir_vip_slot {
    weir_vip_slot {
        flags: WEIR_VIP_SLOT_MORE,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(a: u32, port: u16) -> weir_vip_key {
        weir_vip_key {
            addr: [a.to_be(), 0, 0, 0],
            port: port.to_be(),
            proto: 6,
            family: 2,
        }
    }

    #[test]
    fn slot_counts_are_powers_of_two_with_room() {
        assert_eq!(slot_count(256), Some(1024));
        assert_eq!(slot_count(3), Some(16));
        assert_eq!(slot_count(0), Some(4));
        assert_eq!(slot_count(u32::MAX / 2), None);
    }

    #[test]
    fn known_vector() {
        // 10.0.0.1:80/tcp, worked by hand from the definition: words
        // 0x0100000a, 0, 0, 0, 0x02065000.
        let mult = WEIR_VIP_SLOT_MULT;
        let mut h = 0u32;
        for w in [0x0100_000au32, 0, 0, 0, 0x0206_5000] {
            h = h.wrapping_add(w).wrapping_mul(mult);
        }
        assert_eq!(slot_of(&key(0x0a00_0001, 80), 1 << 20), h >> 12);
        assert_eq!(slot_of(&key(0x0a00_0001, 80), 1), 0);
    }

    fn vip(id: u32) -> weir_vip {
        weir_vip {
            vip_id: id,
            ..Default::default()
        }
    }

    #[test]
    fn a_vip_takes_an_empty_slot_and_marks_a_taken_one() {
        let (a, b) = (key(1, 80), key(2, 80));
        let s = with_vip(&weir_vip_slot::default(), &a, &vip(1));
        assert_eq!((s.key, s.vip, s.flags), (a, vip(1), WEIR_VIP_SLOT_USED));
        let s = with_vip(&s, &b, &vip(2));
        assert_eq!((s.key, s.vip), (a, vip(1)));
        assert_eq!(s.flags, WEIR_VIP_SLOT_USED | WEIR_VIP_SLOT_MORE);
        // The occupant's new value keeps MORE.
        let s = with_vip(&s, &a, &vip(3));
        assert_eq!((s.key, s.vip), (a, vip(3)));
        assert_eq!(s.flags, WEIR_VIP_SLOT_USED | WEIR_VIP_SLOT_MORE);
        // A vacated slot is left to settle.
        assert_eq!(with_vip(&vacated(), &b, &vip(2)), vacated());
    }

    #[test]
    fn settling_keeps_the_occupant_and_replaces_a_gone_one() {
        let (a, b, c) = (key(1, 80), key(2, 80), key(3, 80));
        let held = settle(&weir_vip_slot::default(), &[(b, vip(2)), (a, vip(1))]);
        let first = if a.as_bytes() < b.as_bytes() { a } else { b };
        assert_eq!(held.key, first);
        let s = settle(&held, &[(c, vip(3)), (first, vip(9))]);
        assert_eq!((s.key, s.vip.vip_id), (first, 9));
        assert_eq!(s.flags, WEIR_VIP_SLOT_USED | WEIR_VIP_SLOT_MORE);
        let s = settle(&s, &[(c, vip(3))]);
        assert_eq!((s.key, s.flags), (c, WEIR_VIP_SLOT_USED));
        assert_eq!(settle(&s, &[]), weir_vip_slot::default());
    }

    #[test]
    fn only_a_change_of_occupant_or_value_vacates_first() {
        let a = settle(&weir_vip_slot::default(), &[(key(1, 80), vip(1))]);
        let b = settle(&weir_vip_slot::default(), &[(key(2, 80), vip(2))]);
        let a2 = settle(&a, &[(key(1, 80), vip(5))]);
        let a_more = settle(&a, &[(key(1, 80), vip(1)), (key(2, 80), vip(2))]);
        assert!(needs_vacate(&a, &b));
        assert!(needs_vacate(&a, &a2));
        assert!(!needs_vacate(&a, &a_more));
        assert!(!needs_vacate(&a, &weir_vip_slot::default()));
        assert!(!needs_vacate(&vacated(), &b));
    }

    #[test]
    fn nearby_vips_spread_over_the_slots() {
        // 256 VIPs on consecutive addresses and ports: the table sized for
        // them leaves most alone in their slot.
        let slots = slot_count(256).unwrap();
        let mut used = std::collections::HashSet::new();
        for i in 0..256u32 {
            used.insert(slot_of(
                &key(0x0a00_0000 + i / 16, 80 + (i % 16) as u16),
                slots,
            ));
        }
        assert!(
            used.len() > 200,
            "{} distinct slots of 256 VIPs",
            used.len()
        );
    }
}
