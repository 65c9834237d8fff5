//! Saved state across weir versions: a pinned table of another layout is
//! replaced when it only holds handshakes or configuration (`half_open`,
//! `nat_endpoints`), and refused when it holds established connections.
//! A failed start puts back what it moved; a successful one drops it, and
//! the pins of tables this version no longer has.

use std::fs;
use std::path::{Path, PathBuf};

use libbpf_rs::{MapCore, MapHandle, MapType};
use weir_dataplane::loader::{self, LoadOptions};

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
