//! The VIP slot array (bpf/lib/vip_match.h) through BPF_PROG_TEST_RUN: a
//! packet finds its VIP in the slot weir-core computes, VIPs that share a
//! slot are all balanced, and user space keeps the slots consistent with
//! `vips` across puts, deletes, mode changes and a restart.
//!
//! Needs root (BPF).

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_core::flow::Proto;
use weir_core::vip_slot::slot_of;
use weir_dataplane::loader::{self, LoadOptions};
use weir_dataplane::maps::Maps;
use weir_dataplane::testrun::XdpAction;

/// A VIP at `addr`:80/tcp.
fn key_of(addr: IpAddr) -> weir_vip_key {
    Vip {
        id: 0,
        addr,
        port: 80,
        proto: Proto::Tcp,
        mode: NAT,
        weights: None,
    }
    .key()
}

fn value(vip_id: u32, mode: u32) -> weir_vip {
    weir_vip {
        vip_id,
        mode: mode as u8,
        ..Default::default()
    }
}

/// A client's SYN to `addr`:80: the verdict, and the DIP its half-open
/// entry names if the program balanced it.
fn syn(h: &Harness, addr: IpAddr, sport: u16) -> (XdpAction, Option<u32>) {
    let src = if addr.is_ipv4() {
        ip("192.0.2.1")
    } else {
        ip("2001:db8:c::1")
    };
    let f = Frame::tcp(src, sport, addr, 80, TcpFlags::SYN).macs(CLIENT_MAC, VIP_MAC);
    let r = h.run(&f.bytes());
    let action = XdpAction::from_raw(r.raw).expect("an XDP action");
    let dip = h
        .maps
        .half_open(&f.tuple().key())
        .unwrap()
        .map(|c| c.dip_id);
    (action, dip)
}

/// `addr` is balanced as fixture VIP `vip_id` (its table's DIP for the flow).
fn assert_balanced_as(h: &Harness, addr: IpAddr, sport: u16, vip_id: u32) {
    let src = if addr.is_ipv4() {
        ip("192.0.2.1")
    } else {
        ip("2001:db8:c::1")
    };
    let t = Frame::tcp(src, sport, addr, 80, TcpFlags::SYN).tuple();
    let want = h.fx.predict(vip_id, &t).map(|d| d.id);
    assert!(want.is_some(), "VIP {vip_id} has a DIP");
    assert_eq!(
        syn(h, addr, sport),
        (XdpAction::Tx, want),
        "{addr} as VIP {vip_id}"
    );
}

fn assert_not_vip(h: &Harness, addr: IpAddr, sport: u16) {
    let before = h.stats()[WEIR_STAT_PASS_NOT_VIP as usize];
    assert_eq!(syn(h, addr, sport), (XdpAction::Pass, None), "{addr}");
    assert_eq!(
        h.stats()[WEIR_STAT_PASS_NOT_VIP as usize],
        before + 1,
        "{addr}"
    );
}

/// The invariant the data plane relies on: every VIP of `vips` is in its
/// slot or its slot has MORE, and a slot's occupant is a VIP of `vips`
/// with its value.
fn assert_consistent(maps: &Maps) {
    let slots = maps.vip_slot_count();
    let vips: HashMap<weir_vip_key, weir_vip> = maps.vips().unwrap().into_iter().collect();
    for (k, v) in &vips {
        let s = maps.vip_slot(slot_of(k, slots)).unwrap();
        let held = s.flags & WEIR_VIP_SLOT_USED != 0 && s.key == *k && s.vip == *v;
        assert!(
            held || s.flags & WEIR_VIP_SLOT_MORE != 0,
            "{k:?}: slot {s:?}"
        );
    }
    for idx in 0..slots {
        let s = maps.vip_slot(idx).unwrap();
        if s.flags & WEIR_VIP_SLOT_USED != 0 {
            assert_eq!(vips.get(&s.key), Some(&s.vip), "slot {idx}");
            assert_eq!(slot_of(&s.key, slots), idx, "slot {idx}");
        }
    }
}

/// Three IPv4 addresses whose VIP keys share a slot no VIP uses yet.
fn colliding(h: &Harness) -> [IpAddr; 3] {
    let slots = h.maps.vip_slot_count();
    let mut by_slot: HashMap<u32, Vec<IpAddr>> = HashMap::new();
    for i in 0..4096u32 {
        let addr = IpAddr::from([10, 0, 5 + (i >> 8) as u8, i as u8]);
        let idx = slot_of(&key_of(addr), slots);
        if h.maps.vip_slot(idx).unwrap().flags != 0 {
            continue;
        }
        let same = by_slot.entry(idx).or_default();
        same.push(addr);
        if let [a, b, c] = same[..] {
            return [a, b, c];
        }
    }
    panic!("no three of 4096 keys share a free slot of {slots}");
}

#[test]
fn the_program_looks_where_weir_core_says() {
    // Keys written only into the slot Rust computes, not into `vips`: the
    // program balances them only if it computes the same slot.
    let h = Harness::new(&test_options());
    let slots = h.maps.vip_slot_count();
    let addrs = (1..=40u8)
        .map(|i| IpAddr::from([10, 7, i, 200 - i]))
        .chain((1..=40u16).map(|i| IpAddr::from([0x2001, 0xdb8, 7, i, 0, 0, 0, 9 * i])));
    let mut checked = 0;
    for addr in addrs {
        let key = key_of(addr);
        let idx = slot_of(&key, slots);
        let was = h.maps.vip_slot(idx).unwrap();
        let vip_id = if addr.is_ipv4() { 0 } else { 4 };
        let slot = weir_vip_slot {
            key,
            vip: value(vip_id, NAT),
            flags: WEIR_VIP_SLOT_USED,
        };
        h.maps
            .vip_slots
            .update(
                &idx.to_ne_bytes(),
                slot.as_bytes(),
                libbpf_rs::MapFlags::ANY,
            )
            .unwrap();
        assert_balanced_as(&h, addr, 40000 + checked, vip_id);
        h.maps
            .vip_slots
            .update(&idx.to_ne_bytes(), was.as_bytes(), libbpf_rs::MapFlags::ANY)
            .unwrap();
        checked += 1;
    }
    assert_eq!(checked, 80);
    h.assert_balanced("slot vectors");
}

#[test]
fn the_fixture_vips_sit_in_their_slots() {
    let h = Harness::new(&test_options());
    assert_consistent(&h.maps);
    assert_balanced_as(&h, h.fx.vip(0).addr, 1000, 0);
    assert_balanced_as(&h, h.fx.vip(4).addr, 1000, 4);
    // Writing them again changes no slot.
    assert_eq!(h.maps.sync_vip_slots().unwrap(), 0);
}

#[test]
fn vips_sharing_a_slot_are_all_balanced() {
    let h = Harness::new(&test_options());
    let [a, b, c] = colliding(&h);
    let idx = slot_of(&key_of(a), h.maps.vip_slot_count());
    h.maps.put_vip(&key_of(a), &value(0, NAT)).unwrap();
    h.maps.put_vip(&key_of(b), &value(11, NAT)).unwrap();
    let s = h.maps.vip_slot(idx).unwrap();
    assert_eq!(s.key, key_of(a));
    assert_eq!(s.flags, WEIR_VIP_SLOT_USED | WEIR_VIP_SLOT_MORE);
    assert_consistent(&h.maps);
    assert_balanced_as(&h, a, 2000, 0);
    assert_balanced_as(&h, b, 2000, 11);
    // MORE sends a packet to `vips`, which does not have c.
    assert_not_vip(&h, c, 2000);

    // The occupant leaves: b moves in, and nothing else shares the slot.
    h.maps.delete_vip(&key_of(a)).unwrap();
    let s = h.maps.vip_slot(idx).unwrap();
    assert_eq!((s.key, s.flags), (key_of(b), WEIR_VIP_SLOT_USED));
    assert_consistent(&h.maps);
    assert_not_vip(&h, a, 2001);
    assert_balanced_as(&h, b, 2001, 11);

    // A VIP that is not the occupant leaves: MORE goes.
    h.maps.put_vip(&key_of(c), &value(0, NAT)).unwrap();
    assert_balanced_as(&h, c, 2002, 0);
    h.maps.delete_vip(&key_of(c)).unwrap();
    let s = h.maps.vip_slot(idx).unwrap();
    assert_eq!((s.key, s.flags), (key_of(b), WEIR_VIP_SLOT_USED));
    assert_not_vip(&h, c, 2003);

    // The last one leaves: the slot is empty.
    h.maps.delete_vip(&key_of(b)).unwrap();
    assert_eq!(h.maps.vip_slot(idx).unwrap(), weir_vip_slot::default());
    assert_not_vip(&h, b, 2004);
    h.assert_balanced("shared slot");
}

#[test]
fn a_mode_change_takes_effect() {
    let h = Harness::new(&test_options());
    let [a, b, _] = colliding(&h);
    // Once as the slot's occupant, once behind MORE.
    h.maps.put_vip(&key_of(b), &value(0, NAT)).unwrap();
    for addr in [b, a] {
        h.maps.put_vip(&key_of(addr), &value(0, NAT)).unwrap();
        let f = Frame::tcp(ip("192.0.2.9"), 3000, addr, 80, TcpFlags::SYN);
        let out = h.run(&f.clone().macs(CLIENT_MAC, VIP_MAC).bytes()).packet;
        let dst = |p: &[u8]| IpAddr::from(<[u8; 4]>::try_from(&p[30..34]).unwrap());
        assert_ne!(dst(&out), addr, "nat rewrites the destination");

        h.maps.put_vip(&key_of(addr), &value(2, DSR)).unwrap();
        assert_consistent(&h.maps);
        let f = f.with_src(ip("192.0.2.9"), 3001);
        let r = h.run(&f.macs(CLIENT_MAC, VIP_MAC).bytes());
        assert_eq!(XdpAction::from_raw(r.raw), Some(XdpAction::Tx));
        assert_eq!(dst(&r.packet), addr, "dsr keeps the destination");
    }
    h.assert_balanced("mode change");
}

#[test]
fn a_fresh_slot_array_next_to_pinned_vips_is_rebuilt() {
    let pins = PinDir::new();
    let dir = pins.0.clone();
    let opts = LoadOptions {
        pin_dir: Some(dir.clone()),
        ..test_options()
    };
    let first = Harness::new(&opts);
    assert_balanced_as(&first, first.fx.vip(0).addr, 4000, 0);
    drop(first);
    // A weir that had no slot array left `vips` behind without one.
    std::fs::remove_file(dir.join("vip_slots")).unwrap();
    let lb = loader::load(&opts).unwrap();
    let maps = Maps::of(&lb.skel).unwrap();
    assert_eq!(maps.vips().unwrap().len(), Fixture::standard().vips.len());
    maps.put_iface(TEST_IFINDEX, LB_IF_MAC).unwrap();
    let run = |addr, sport| {
        let f = Frame::tcp(ip("192.0.2.1"), sport, addr, 80, TcpFlags::SYN);
        let r = weir_dataplane::testrun::run(
            &lb.skel.progs.weir_lb,
            &f.macs(CLIENT_MAC, VIP_MAC).bytes(),
            1,
        )
        .unwrap();
        XdpAction::from_raw(r.raw)
    };
    // Until the slots are synchronised the program sees no VIP at all.
    assert_eq!(run(ip("10.0.0.100"), 4001), Some(XdpAction::Pass));
    assert!(maps.sync_vip_slots().unwrap() > 0);
    assert_consistent(&maps);
    assert_eq!(run(ip("10.0.0.100"), 4002), Some(XdpAction::Tx));
    assert_eq!(run(ip("10.9.9.9"), 4003), Some(XdpAction::Pass));
}

/// A pin directory of its own, removed (with its pins) also on a panic.
struct PinDir(std::path::PathBuf);

impl PinDir {
    fn new() -> PinDir {
        let dir = std::path::PathBuf::from(format!(
            "/sys/fs/bpf/weir-test-vipslots-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        PinDir(dir)
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
