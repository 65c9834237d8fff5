//! Saved state across weir versions: a pinned table of another layout is
//! replaced when it only holds handshakes, configuration or counters
//! (`half_open`, `nat_endpoints`, `stats`, `vip_quic`), and refused when it holds
//! established connections.
//! A failed start puts back what it moved; a successful one drops it, and
//! the pins of tables this version no longer has. The connections of an
//! older weir's tables that held both families are moved, not dropped.

use std::fs;
use std::path::{Path, PathBuf};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use weir_abi::*;
use weir_dataplane::loader::{self, LoadOptions};
use weir_dataplane::maps::Maps;

mod common;
use common::test_options;

/// A pin directory of its own, removed with everything in it.
struct PinDir(PathBuf);

impl PinDir {
    fn new(name: &str) -> PinDir {
        let dir = PathBuf::from(format!(
            "/sys/fs/bpf/weir-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("bpffs at /sys/fs/bpf (tests need root)");
        PinDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Pins a map like an older weir's table of `value` bytes per entry.
fn pin_old_table(path: &Path, kind: MapType, key: u32, value: u32, entries: u32) {
    let map = MapHandle::create(
        kind,
        Some("old_table"),
        key,
        value,
        entries,
        &libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        },
    )
    .unwrap();
    let mut map = map;
    map.pin(path).unwrap();
}

fn value_size(path: &Path) -> u32 {
    MapHandle::from_pinned_path(path).unwrap().value_size()
}

fn options(dir: &PinDir) -> LoadOptions {
    LoadOptions {
        pin_dir: Some(dir.0.clone()),
        ..test_options()
    }
}

#[test]
fn an_older_half_open_table_is_replaced_and_put_back_if_the_start_fails() {
    let dir = PinDir::new("replace");
    let opts = options(&dir);
    let half_open = dir.path("half_open");
    // An older weir's half-open table (40-byte values) and its separate
    // reverse table.
    let entries = opts.half_open_capacity;
    pin_old_table(&half_open, MapType::LruHash, 40, 40, entries);
    pin_old_table(
        &dir.path("half_open_rev"),
        MapType::LruHash,
        40,
        40,
        entries,
    );

    let lb = loader::load(&opts).expect("an older half_open must not stop a start");
    assert_eq!(value_size(&half_open), 80, "the new layout is pinned");
    // The start fails later (say, attaching): the saved state is as found.
    lb.remove_created_pins();
    drop(lb);
    assert_eq!(value_size(&half_open), 40);
    assert!(dir.path("half_open_rev").exists());
    assert!(
        !dir.path("conns").exists(),
        "pins this load created are gone"
    );

    // The start succeeds: what was replaced or retired goes.
    let lb = loader::load(&opts).unwrap();
    let mut dropped = lb.drop_superseded_pins();
    dropped.sort();
    let shown = |p: PathBuf| p.display().to_string();
    assert_eq!(
        dropped,
        vec![shown(half_open.clone()), shown(dir.path("half_open_rev"))]
    );
    assert!(!dir.path("half_open_rev").exists());
    assert_eq!(value_size(&half_open), 80);
    drop(lb);

    // The next start reuses its own pins and replaces nothing.
    let lb = loader::load(&opts).unwrap();
    assert!(lb.created_pins.is_empty(), "{:?}", lb.created_pins);
    assert!(lb.drop_superseded_pins().is_empty());
}

#[test]
fn counters_of_an_older_weir_are_replaced_and_its_connections_kept() {
    let dir = PinDir::new("stats");
    let opts = options(&dir);
    let lb = loader::load(&opts).unwrap();
    let key = tuple(WEIR_AF_INET, 7);
    let conn = weir_conn {
        dip_id: 3,
        dip_gen: 1,
        ..Default::default()
    };
    Maps::of(&lb.skel).unwrap().put_conn(&key, &conn).unwrap();
    drop(lb);
    // An older weir had one outcome fewer: its `stats` had one slot less.
    let stats = dir.path("stats");
    let slots = MapHandle::from_pinned_path(&stats).unwrap().max_entries();
    fs::remove_file(&stats).unwrap();
    pin_old_table(&stats, MapType::PercpuArray, 4, 8, slots - 1);

    let lb = loader::load(&opts).expect("older counters must not stop a start");
    let replaced = MapHandle::from_pinned_path(&stats).unwrap();
    assert_eq!(replaced.max_entries(), slots, "this version's counters");
    assert_eq!(
        Maps::of(&lb.skel).unwrap().conn(&key).unwrap(),
        Some(conn),
        "the established connection is kept"
    );
    assert_eq!(lb.drop_superseded_pins(), vec![stats.display().to_string()]);
}

#[test]
fn quic_counters_of_an_older_weir_are_replaced_and_its_connections_kept() {
    let dir = PinDir::new("quic-counters");
    let opts = options(&dir);
    let lb = loader::load(&opts).unwrap();
    let key = tuple(WEIR_AF_INET, 9);
    let conn = weir_conn {
        dip_id: 4,
        dip_gen: 1,
        ..Default::default()
    };
    Maps::of(&lb.skel).unwrap().put_conn(&key, &conn).unwrap();
    drop(lb);
    // An older weir's QUIC counters had three fields, not four.
    let pins = ["dip_quic", "vip_quic"].map(|n| dir.path(n));
    for p in &pins {
        let entries = MapHandle::from_pinned_path(p).unwrap().max_entries();
        fs::remove_file(p).unwrap();
        pin_old_table(p, MapType::PercpuArray, 4, 24, entries);
    }

    let lb = loader::load(&opts).expect("older QUIC counters must not stop a start");
    for p in &pins {
        let want = std::mem::size_of::<weir_quic_counters>() as u32;
        assert_eq!(
            value_size(p),
            want,
            "{}: this version's counters",
            p.display()
        );
    }
    assert_eq!(
        Maps::of(&lb.skel).unwrap().conn(&key).unwrap(),
        Some(conn),
        "the established connection is kept"
    );
    let mut dropped = lb.drop_superseded_pins();
    dropped.sort();
    assert_eq!(dropped, pins.map(|p| p.display().to_string()));
}

#[test]
fn a_table_of_another_layout_that_must_stay_is_refused_and_nothing_moves() {
    let dir = PinDir::new("refuse");
    let opts = options(&dir);
    let (half_open, dips) = (dir.path("half_open"), dir.path("dips"));
    pin_old_table(
        &half_open,
        MapType::LruHash,
        40,
        40,
        opts.half_open_capacity,
    );
    // `dips` comes after `half_open`: the replacement is undone.
    pin_old_table(&dips, MapType::Array, 4, 8, opts.max_dips);

    let err = loader::load(&opts)
        .err()
        .expect("an older dips must be refused");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("incompatible weir version") && msg.contains("--reset-state"),
        "{msg}"
    );
    assert_eq!(value_size(&half_open), 40, "pinned again");
    assert_eq!(value_size(&dips), 8);
}

fn tuple(family: u32, last: u32) -> weir_flow_key {
    let addr = |a: u32| match family {
        WEIR_AF_INET => [a.to_be(), 0, 0, 0],
        _ => [0x2001_0db8u32.to_be(), 0, 0, a.to_be()],
    };
    weir_flow_key {
        src: addr(0xc000_0200 + last),
        dst: addr(0x0a00_0064),
        sport: (40000 + last as u16).to_be(),
        dport: 80u16.to_be(),
        proto: 6,
        family: family as u8,
        pad: [0; 2],
    }
}

/// An older weir kept both families' connections in `conns`/`rev_nat`
/// under the 40-byte key: an upgrade moves them into this version's tables
/// (IPv4 ones into `conns4`/`rev_nat4`), again after the swap for what the
/// predecessor installed until then, and never over a newer entry.
#[test]
fn connections_of_an_older_weir_are_moved_by_family() {
    let dir = PinDir::new("migrate");
    let opts = options(&dir);
    let (conns, rev_nat) = (dir.path("conns"), dir.path("rev_nat"));
    pin_old_table(&conns, MapType::LruHash, 40, 40, 1024);
    pin_old_table(&rev_nat, MapType::LruHash, 40, 40, 1024);
    let old_conns = MapHandle::from_pinned_path(&conns).unwrap();
    let old_rev = MapHandle::from_pinned_path(&rev_nat).unwrap();
    let conn = |dip_id| weir_conn {
        dip_id,
        dip_gen: 1,
        ..Default::default()
    };
    let put = |map: &MapHandle, key: &weir_flow_key, value: &[u8]| {
        map.update(key.as_bytes(), value, MapFlags::ANY).unwrap()
    };
    let (v4, v6) = (tuple(WEIR_AF_INET, 1), tuple(WEIR_AF_INET6, 1));
    put(&old_conns, &v4, conn(1).as_bytes());
    put(&old_conns, &v6, conn(2).as_bytes());
    let rev = weir_rev_nat {
        vip_id: 3,
        ..Default::default()
    };
    put(&old_rev, &v4, rev.as_bytes());

    let lb = loader::load(&opts).expect("an older weir's tables must not stop a start");
    let maps = Maps::of(&lb.skel).unwrap();
    assert_eq!(lb.migrate_connections(&maps).unwrap(), 3);
    assert_eq!(maps.conns.get(&v4).unwrap(), Some(conn(1)));
    assert_eq!(maps.conns.get(&v6).unwrap(), Some(conn(2)));
    assert_eq!(maps.rev_nat.get(&v4).unwrap(), Some(rev));
    let [conns4, _] = maps.conns.maps();
    assert_eq!(conns4.keys().count(), 1, "the IPv4 entry is in conns4");

    // The predecessor installs one more before the swap; this program has
    // meanwhile dispatched v4's tuple anew, which the copy leaves alone.
    let late = tuple(WEIR_AF_INET, 2);
    put(&old_conns, &late, conn(4).as_bytes());
    maps.conns.insert(&v4, &conn(5)).unwrap();
    assert_eq!(lb.migrate_connections(&maps).unwrap(), 1);
    assert_eq!(maps.conns.get(&late).unwrap(), Some(conn(4)));
    assert_eq!(maps.conns.get(&v4).unwrap(), Some(conn(5)));

    // A failed start puts the older tables back as they were.
    lb.remove_created_pins();
    drop((maps, lb));
    assert_eq!(
        MapHandle::from_pinned_path(&conns).unwrap().keys().count(),
        3
    );
    assert!(!dir.path("conns4").exists());

    // A successful one drops them once attached.
    let lb = loader::load(&opts).unwrap();
    let mut dropped = lb.drop_superseded_pins();
    dropped.sort();
    let shown = |p: &Path| p.display().to_string();
    assert_eq!(dropped, vec![shown(&conns), shown(&rev_nat)]);
    assert!(dir.path("conns4").exists() && conns.exists());
    assert_eq!(MapHandle::from_pinned_path(&conns).unwrap().key_size(), 40);
}
