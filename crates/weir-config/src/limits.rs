//! What the kernel would refuse when `weir serve` creates the data plane's
//! maps, found before anything is created: a map of more entries than a
//! map may have, a hash map whose bucket array would overflow, or maps that
//! need more memory than the host (or this process's memory cgroup) has
//! left. Pure: the host's facts come in as [`HostFacts`], so `weir check`
//! and `weir serve` give the same answer and the tests pick any host.
//!
//! The sizes follow the kernel's allocation (kernel/bpf/hashtab.c and
//! arraymap.c): a hash or LRU hash element is a 48-byte header plus key and
//! value, each rounded up to 8 bytes, all preallocated, behind a bucket
//! array of 16 bytes per slot for the entries rounded up to a power of two
//! (which must stay below 2^32 bytes: at most 2^28 entries); an array holds
//! its values; a per-CPU array holds them once per possible CPU.

use std::mem::size_of;

use weir_abi::*;

use crate::dataplane::Dataplane;
use crate::error::ConfigError;
use crate::host::HostFacts;
use crate::load::Config;
use crate::tier::Tier;

/// The most entries a hash map can have: its bucket array (16 bytes a
/// bucket, the entries rounded up to a power of two) must stay below 4 GiB.
pub const HASH_MAX_ENTRIES: u64 = 1 << 28;

/// The header of a hash map element (struct htab_elem on 64-bit).
const HTAB_ELEM: u64 = 48;
/// A hash map's bucket (struct bucket).
const BUCKET: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hash,
    LruHash,
    Array,
    PercpuArray,
}

/// One map as a configuration would create it.
#[derive(Debug, Clone, Copy)]
struct MapSize {
    name: &'static str,
    kind: Kind,
    entries: u64,
    key: usize,
    value: usize,
    /// The key of the file its size follows.
    key_field: &'static str,
}

impl MapSize {
    /// The bytes the kernel allocates for it.
    fn bytes(&self, cpus: u32) -> u64 {
        let round8 = |n: usize| (n as u64).div_ceil(8) * 8;
        let n = self.entries;
        match self.kind {
            Kind::Hash | Kind::LruHash => {
                let buckets = n.checked_next_power_of_two().unwrap_or(u64::MAX / 2);
                n.saturating_mul(HTAB_ELEM + round8(self.key) + round8(self.value))
                    .saturating_add(buckets.saturating_mul(BUCKET))
            }
            Kind::Array => n.saturating_mul(round8(self.value)),
            Kind::PercpuArray => n
                .saturating_mul(round8(self.value))
                .saturating_mul(u64::from(cpus))
                .saturating_add(n.saturating_mul(8)),
        }
    }
}

/// The key a derived size follows: its own if the file gives it, else
/// the one it is derived from.
fn own_or<T>(given: &Option<T>, own: &'static str, from: &'static str) -> &'static str {
    if given.is_some() {
        own
    } else {
        from
    }
}

/// The maps weir_lb creates for `dp`, as the loader sizes them.
fn maps(dp: &Dataplane) -> Vec<MapSize> {
    let conn = "dataplane.conn_table_size";
    let v6 = own_or(&dp.conn_table_size_v6, "dataplane.conn_table_size_v6", conn);
    let half = own_or(
        &dp.half_open_table_size,
        "dataplane.half_open_table_size",
        conn,
    );
    let fast = own_or(&dp.fast_table_size, "dataplane.fast_table_size", conn);
    let (vips, dips) = ("dataplane.max_vips", "dataplane.max_dips");
    let (c4, c6, h) = match dp.tier {
        Tier::Xdp => (
            (u64::from(dp.conn_table_size), conn),
            (u64::from(dp.conn_size_v6()), v6),
            (u64::from(dp.half_open_size()), half),
        ),
        // The workers keep the connections; XDP's tables hold one entry.
        Tier::Software => ((1, conn), (1, conn), (1, conn)),
        Tier::Hybrid => {
            let f = u64::from(dp.fast_size());
            ((f, fast), (f, fast), (1, conn))
        }
    };
    let (max_vips, max_dips) = (u64::from(dp.max_vips), u64::from(dp.max_dips));
    let slots = u64::from(WEIR_TABLE_SLOTS);
    let vip_slots = u64::from(WEIR_VIP_SLOTS_PER_VIP)
        .saturating_mul(max_vips.max(1))
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    let m = |name, kind, (entries, key_field), key, value| MapSize {
        name,
        kind,
        entries,
        key,
        value,
        key_field,
    };
    use Kind::*;
    vec![
        m(
            "conns4",
            LruHash,
            c4,
            size_of::<weir_flow_key4>(),
            size_of::<weir_conn>(),
        ),
        m(
            "conns",
            LruHash,
            c6,
            size_of::<weir_flow_key>(),
            size_of::<weir_conn>(),
        ),
        m(
            "rev_nat4",
            LruHash,
            c4,
            size_of::<weir_flow_key4>(),
            size_of::<weir_rev_nat>(),
        ),
        m(
            "rev_nat",
            LruHash,
            c6,
            size_of::<weir_flow_key>(),
            size_of::<weir_rev_nat>(),
        ),
        m(
            "half_open",
            LruHash,
            h,
            size_of::<weir_flow_key>(),
            size_of::<weir_half_open>(),
        ),
        m(
            "nat_endpoints",
            Hash,
            (max_dips, dips),
            size_of::<weir_endpoint>(),
            size_of::<weir_nat_endpoint>(),
        ),
        m(
            "vips",
            Hash,
            (max_vips, vips),
            size_of::<weir_vip_key>(),
            size_of::<weir_vip>(),
        ),
        m("dips", Array, (max_dips, dips), 4, size_of::<weir_dip>()),
        m("table_version", Array, (max_vips, vips), 4, 4),
        m(
            "class_ranges",
            Array,
            (max_vips * slots, vips),
            4,
            size_of::<weir_class_ranges>(),
        ),
        m(
            "class_members",
            Array,
            (max_vips * slots * u64::from(WEIR_MAX_CLASSES), vips),
            4,
            size_of::<weir_class_members>(),
        ),
        m(
            "vip_traffic",
            PercpuArray,
            (max_vips, vips),
            4,
            size_of::<weir_traffic>(),
        ),
        m(
            "dip_traffic",
            PercpuArray,
            (max_dips, dips),
            4,
            size_of::<weir_traffic>(),
        ),
        m(
            "dip_telemetry",
            PercpuArray,
            (max_dips, dips),
            4,
            size_of::<weir_dip_telemetry>(),
        ),
        m(
            "quic_server_ids",
            Hash,
            (max_dips, dips),
            size_of::<weir_quic_sid_key>(),
            size_of::<weir_quic_route>(),
        ),
        m(
            "quic_sid_owners",
            Array,
            (max_dips, dips),
            4,
            size_of::<weir_quic_sid_owner>(),
        ),
        m(
            "vip_quic",
            PercpuArray,
            (max_vips, vips),
            4,
            size_of::<weir_quic_counters>(),
        ),
        m(
            "dip_quic",
            PercpuArray,
            (max_dips, dips),
            4,
            size_of::<weir_quic_counters>(),
        ),
        m(
            "vip_slots",
            Array,
            (vip_slots, vips),
            4,
            size_of::<weir_vip_slot>(),
        ),
    ]
}

/// The bytes of all of `dp`'s maps on a host of `cpus` CPUs.
pub fn map_memory(dp: &Dataplane, cpus: u32) -> u64 {
    maps(dp).iter().map(|m| m.bytes(cpus)).sum()
}

/// `dp` with `key` set to `v`.
fn with(dp: &Dataplane, key: &str, v: u32) -> Dataplane {
    let mut d = dp.clone();
    let spanned = |s: &Option<toml::Spanned<u32>>| s.as_ref().map_or(0..0, |s| s.span());
    match key {
        "dataplane.conn_table_size" => d.conn_table_size = v,
        "dataplane.conn_table_size_v6" => {
            d.conn_table_size_v6 = Some(toml::Spanned::new(spanned(&dp.conn_table_size_v6), v))
        }
        "dataplane.half_open_table_size" => d.half_open_table_size = Some(v),
        "dataplane.fast_table_size" => {
            d.fast_table_size = Some(toml::Spanned::new(spanned(&dp.fast_table_size), v))
        }
        "dataplane.max_vips" => d.max_vips = v,
        "dataplane.max_dips" => d.max_dips = v,
        _ => unreachable!("no size key {key}"),
    }
    d
}

/// The value of `key` in `dp`.
fn value(dp: &Dataplane, key: &str) -> u32 {
    match key {
        "dataplane.conn_table_size" => dp.conn_table_size,
        "dataplane.conn_table_size_v6" => dp.conn_size_v6(),
        "dataplane.half_open_table_size" => dp.half_open_size(),
        "dataplane.fast_table_size" => dp.fast_size(),
        "dataplane.max_vips" => dp.max_vips,
        "dataplane.max_dips" => dp.max_dips,
        _ => unreachable!("no size key {key}"),
    }
}

/// The largest value of `key` (below its current one) for which `fits`
/// holds, if any.
fn largest_fitting(dp: &Dataplane, key: &str, fits: impl Fn(&Dataplane) -> bool) -> Option<u32> {
    let (mut lo, mut hi) = (0u32, value(dp, key));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if mid >= 1 && fits(&with(dp, key, mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    (lo >= 1).then_some(lo)
}

/// A byte count for people: "38 GiB", "512 MiB", "12 KiB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if v < 10.0 && unit > 0 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
}

impl Config {
    /// Refuses a configuration whose maps the kernel would refuse or this
    /// host could not hold, naming the key, its line, the need, the limit
    /// and the value to set.
    pub fn check_host(&self, host: &HostFacts) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        let all = maps(dp);
        for m in &all {
            let (limit, why) = match m.kind {
                Kind::Hash | Kind::LruHash => (
                    HASH_MAX_ENTRIES,
                    format!(
                        "the kernel refuses a hash map of more than {HASH_MAX_ENTRIES} entries \
                         (its bucket array would pass 4 GiB)"
                    ),
                ),
                Kind::Array | Kind::PercpuArray => (
                    u64::from(u32::MAX),
                    format!("a BPF map holds at most {} entries", u32::MAX),
                ),
            };
            if m.entries <= limit {
                continue;
            }
            let fits = |d: &Dataplane| {
                maps(d)
                    .iter()
                    .filter(|n| n.name == m.name)
                    .all(|n| n.entries <= limit)
            };
            return Err(self.located(
                m.key_field,
                format!(
                    "{} = {} makes the `{}` map {} entries, and {why}; {}",
                    short(m.key_field),
                    value(dp, m.key_field),
                    m.name,
                    m.entries,
                    set_at_most(m.key_field, largest_fitting(dp, m.key_field, fits)),
                ),
            ));
        }
        let cpus = host.possible_cpus;
        let need = map_memory(dp, cpus);
        let room = host.room();
        if need <= room {
            return Ok(());
        }
        // The key whose maps take the most memory is the one to lower.
        let mut by_key: Vec<(&str, u64)> = Vec::new();
        for m in &all {
            match by_key.iter_mut().find(|(k, _)| *k == m.key_field) {
                Some((_, b)) => *b += m.bytes(cpus),
                None => by_key.push((m.key_field, m.bytes(cpus))),
            }
        }
        let (key, key_bytes) = by_key
            .iter()
            .copied()
            .max_by_key(|&(_, b)| b)
            .expect("weir_lb has maps");
        let fits = |d: &Dataplane| map_memory(d, cpus) <= room;
        let limit = match host.memcg_room {
            Some(r) if r < host.mem_available => {
                format!("this process's memory cgroup has {} left", human(room))
            }
            _ => format!("this host has {} available", human(room)),
        };
        Err(self.located(
            key,
            format!(
                "{} = {} needs ~{} of map memory ({} for the maps it sizes, {} CPUs), and \
                 {limit}; {}",
                short(key),
                value(dp, key),
                human(need),
                human(key_bytes),
                cpus,
                set_at_most(key, largest_fitting(dp, key, fits)),
            ),
        ))
    }

    /// An error at `key`'s line in the file (the file's, if it does not
    /// give the key: a derived size).
    fn located(&self, key: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.origin.file.clone(),
            line: self.origin.line_of_key(key),
            field: key.to_string(),
            message,
        }
    }
}

/// `dataplane.conn_table_size` as the file writes it under `[dataplane]`.
fn short(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

fn set_at_most(key: &str, most: Option<u32>) -> String {
    match most {
        Some(n) => format!("at most ~{n} fits: set {} <= {n}", short(key)),
        None => format!("no {} fits; free memory or use a larger host", short(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;

    const GIB: u64 = 1 << 30;

    fn host(gib: u64, cpus: u32) -> HostFacts {
        HostFacts {
            mem_available: gib * GIB,
            memcg_room: None,
            possible_cpus: cpus,
        }
    }

    fn sized(keys: &str) -> Config {
        Config::parse("t.toml", &dataplane_with(keys)).unwrap()
    }

    #[test]
    fn the_default_tables_fit_a_small_host() {
        let c = sized("");
        c.check_host(&host(1, 64)).unwrap();
        let need = map_memory(&c.dataplane, 64);
        // About 2.2 million connection entries of ~100 bytes and the rest.
        assert!((100 << 20..400 << 20).contains(&need), "{}", human(need));
    }

    #[test]
    fn a_hash_map_beyond_the_kernel_bound_names_the_key_and_the_line() {
        for size in ["300000000", "4000000000"] {
            let c = sized(&format!("conn_table_size = {size}"));
            let e = c.check_host(&host(1 << 20, 4)).unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.line),
                ("dataplane.conn_table_size", Some(4)),
                "{e}"
            );
            assert!(
                e.message.contains("`conns4` map")
                    && e.message.contains("268435456")
                    && e.message.contains("set conn_table_size <= 268435456"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_derived_size_names_the_key_it_follows() {
        let c = sized("conn_table_size_v6 = 270000000");
        let e = c.check_host(&host(1 << 20, 4)).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("dataplane.conn_table_size_v6", Some(4))
        );
    }

    #[test]
    fn maps_beyond_the_memory_left_are_refused_with_what_fits() {
        let c = sized("conn_table_size = 200000000");
        let need = map_memory(&c.dataplane, 8);
        assert!(need > 23 * GIB, "{}", human(need));
        let e = c.check_host(&host(23, 8)).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("dataplane.conn_table_size", Some(4))
        );
        assert!(e.message.contains("this host has 23 GiB available"), "{e}");
        let most: u32 = e.message.rsplit("<= ").next().unwrap().parse().unwrap();
        // What it proposes fits, and a little more would not.
        sized(&format!("conn_table_size = {most}"))
            .check_host(&host(23, 8))
            .unwrap();
        let more = sized(&format!("conn_table_size = {}", most + most / 100));
        assert!(more.check_host(&host(23, 8)).is_err());
        // A memory cgroup's limit is the tighter one.
        let capped = HostFacts {
            memcg_room: Some(GIB),
            ..host(64, 8)
        };
        let e = sized("conn_table_size = 20000000")
            .check_host(&capped)
            .unwrap_err();
        assert!(e.message.contains("memory cgroup has 1.0 GiB left"), "{e}");
    }

    #[test]
    fn per_cpu_maps_grow_with_the_cpus() {
        let c = sized("max_dips = 1000000");
        assert!(map_memory(&c.dataplane, 256) > 4 * map_memory(&c.dataplane, 8));
        let e = c.check_host(&host(1, 256)).unwrap_err();
        assert_eq!(e.field, "dataplane.max_dips", "{e}");
    }
}
