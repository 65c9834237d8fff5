//! Loading `weir_lb`: load-time constants (.rodata) and map sizes come from
//! the configuration, so nothing is recompiled; state maps are reused from
//! their pins when a previous daemon left them, and pinned otherwise.
//!
//! Its `unsafe` calls are libbpf's on the maps of the object being loaded
//! (flags, key and value sizes), which libbpf-rs does not wrap; they stay
//! here, next to the BPF objects they read, rather than in weir-sys.

use std::fs;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, MapCore, MapHandle, OpenObject};
use weir_abi::{weir_conn, weir_flow_key, weir_rev_nat};

pub use weir_core::conn_timeouts::ConnTimeouts;
pub use weir_core::syn_budget::SynBudget;

use crate::features::Features;
use crate::maps::{read_all, Maps};
use crate::skel::lb::{OpenWeirLbSkel, WeirLbSkel, WeirLbSkelBuilder};

/// What weir does with traffic it does not balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pass,
    Drop,
}

impl Action {
    fn raw(self) -> u32 {
        match self {
            Action::Pass => weir_abi::WEIR_ACT_PASS,
            Action::Drop => weir_abi::WEIR_ACT_DROP,
        }
    }
}

/// What a TCP packet that misses the connection table and is not a SYN does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonSynMiss {
    /// Dispatch it like a new connection and install it (survives a lost table).
    Dispatch,
    Drop,
}

/// Which tier handles the traffic of the VIPs (weir.h WEIR_TIER_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tier {
    /// Everything in XDP: dispatch, connection table, rewrite.
    #[default]
    Xdp,
    /// XDP steers VIP traffic and nat replies to the AF_XDP workers, which
    /// keep the connection table, dispatch and rewrite.
    Software,
    /// XDP forwards the connections of its bounded fast table, which the
    /// workers fill; every other packet goes to the workers (HNLB).
    Hybrid,
}

impl Tier {
    fn raw(self) -> u32 {
        match self {
            Tier::Xdp => weir_abi::WEIR_TIER_XDP,
            Tier::Software => weir_abi::WEIR_TIER_SOFTWARE,
            Tier::Hybrid => weir_abi::WEIR_TIER_HYBRID,
        }
    }
}

/// How XDP hands packets to the software tier's workers (software.h; the
/// twin of `weir_software_engine::distribution::Steering`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workers {
    /// Workers, each with a socket on every queue (1..=WEIR_MAX_QUEUES).
    pub count: u32,
    pub mode: DistMode,
    /// Buckets of the flow hash: a power of two, at least `count`.
    pub buckets: u32,
    /// Spray and adaptive spread non-TCP packets too.
    pub spread_all: bool,
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            count: 1,
            mode: DistMode::Flow,
            buckets: 4096,
            spread_all: false,
        }
    }
}

/// Distribution modes (weir.h WEIR_DIST_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistMode {
    Flow,
    Spray,
    Adaptive,
}

impl DistMode {
    fn raw(self) -> u32 {
        match self {
            DistMode::Flow => weir_abi::WEIR_DIST_FLOW,
            DistMode::Spray => weir_abi::WEIR_DIST_SPRAY,
            DistMode::Adaptive => weir_abi::WEIR_DIST_ADAPTIVE,
        }
    }
}

/// How the ipip and gue modes build their outer headers (encap.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encap {
    /// The largest outer IP datagram sent; a bigger one is dropped and
    /// counted (`drop_too_big`).
    pub mtu: u32,
    /// Outer source of IPv4 DIPs; `None`: derived from the flow in
    /// 172.16.0.0/16 (RSS entropy at the DIP).
    pub source_v4: Option<Ipv4Addr>,
    /// Outer source of IPv6 DIPs; `None`: derived from the flow in
    /// fd77:6569:7200::/96.
    pub source_v6: Option<Ipv6Addr>,
    /// GUE's UDP destination port.
    pub gue_port: u16,
}

impl Default for Encap {
    fn default() -> Self {
        Encap {
            mtu: weir_core::wire::DEFAULT_ENCAP_MTU,
            source_v4: None,
            source_v6: None,
            gue_port: weir_abi::WEIR_GUE_PORT as u16,
        }
    }
}

/// How the connection tables' LRU lists are kept (maps.h: conns4, conns,
/// rev_nat4, rev_nat, half_open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnLru {
    /// One LRU list for all CPUs: any free entry serves any CPU, at the
    /// cost of the list's lock on every insert.
    #[default]
    Shared,
    /// One list per CPU (BPF_F_NO_COMMON_LRU): inserts take no shared lock,
    /// but the kernel splits the entries between the CPUs and each evicts
    /// only from its own share.
    PerCpu,
}

impl ConnLru {
    /// The map flags of the connection tables.
    fn map_flags(self) -> u32 {
        match self {
            ConnLru::Shared => 0,
            ConnLru::PerCpu => libbpf_rs::libbpf_sys::BPF_F_NO_COMMON_LRU,
        }
    }
}

/// The maps whose LRU layout `LoadOptions::conn_lru` decides.
const CONN_TABLES: [&str; 5] = ["conns4", "conns", "rev_nat4", "rev_nat", "half_open"];

/// Load-time parameters of the data plane.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub tier: Tier,
    /// Entries of the IPv4 connection table (and of its reverse-NAT table)
    /// in the xdp tier. The other tiers keep their connections in the workers.
    pub conn_capacity: u32,
    /// Entries of the IPv6 connection table (and of its reverse-NAT table)
    /// in the xdp tier: IPv6 entries are larger (40-byte keys), and most
    /// deployments carry fewer IPv6 connections.
    pub conn_capacity_v6: u32,
    /// The LRU layout of the connection tables.
    pub conn_lru: ConnLru,
    /// Entries of the half-open table (and of its reverse-NAT table): TCP
    /// connections whose handshake is not done yet (xdp tier only).
    pub half_open_capacity: u32,
    /// Entries of the fast table (the connection and reverse-NAT tables)
    /// in the hybrid tier, for each address family.
    pub fast_table_size: u32,
    /// Interfaces the program serves: each has WEIR_MAX_QUEUES slots for
    /// every worker's sockets in `xsks` (software and hybrid tiers).
    pub interfaces: u32,
    /// The software tier's workers (software and hybrid tiers).
    pub workers: Workers,
    /// Idle timeouts of connection entries by state.
    pub timeouts: ConnTimeouts,
    pub max_vips: u32,
    pub max_dips: u32,
    pub not_vip: Action,
    pub icmp: Action,
    pub fragments: Action,
    pub malformed: Action,
    pub nonsyn_miss: NonSynMiss,
    pub hash_seed: u32,
    /// Next hop from the kernel FIB (true) or from configured MACs only.
    pub fib_lookup: bool,
    /// Reuse and pin the state maps here; `None` keeps them private.
    pub pin_dir: Option<PathBuf>,
    /// Time nat requests in the data plane (`dip_telemetry`, telemetry.h)
    /// from the start; [`crate::maps::Maps::set_passive_telemetry`] turns it
    /// on and off while the program runs.
    pub passive_telemetry: bool,
    /// Announce installed connections in `sync_events` (lib/sync.h), for
    /// connection sync between cluster nodes.
    pub conn_sync: bool,
    /// Outer headers of the ipip and gue modes.
    pub encap: Encap,
    /// Software and hybrid tiers: SYNs admitted to the workers.
    pub syn_budget: SynBudget,
    /// What the program carries beyond dsr (features.rs): the verifier
    /// removes the code of the rest. A VIP whose mode, or QUIC routing, the
    /// program lacks must not be written to its maps; telemetry's run-time
    /// switch does nothing without [`Features::TELEMETRY`].
    pub features: Features,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            tier: Tier::Xdp,
            conn_capacity: 1 << 20,
            conn_capacity_v6: 1 << 17,
            conn_lru: ConnLru::Shared,
            half_open_capacity: 1 << 18,
            fast_table_size: 8192,
            interfaces: 1,
            workers: Workers::default(),
            timeouts: ConnTimeouts::default(),
            max_vips: 256,
            max_dips: 4096,
            not_vip: Action::Pass,
            icmp: Action::Pass,
            fragments: Action::Pass,
            malformed: Action::Drop,
            nonsyn_miss: NonSynMiss::Dispatch,
            hash_seed: weir_core::flow_hash::DEFAULT_SEED,
            fib_lookup: true,
            pin_dir: None,
            passive_telemetry: false,
            conn_sync: false,
            encap: Encap::default(),
            syn_budget: SynBudget::default(),
            features: Features::ALL,
        }
    }
}

/// The maps pinned under the pin directory, by name.
pub const PINNED_MAPS: &[&str] = &[
    "conns4",
    "conns",
    "rev_nat4",
    "rev_nat",
    "half_open",
    "nat_endpoints",
    "vips",
    "dips",
    "table_version",
    "class_ranges",
    "class_members",
    "stats",
    "vip_traffic",
    "dip_traffic",
    "dip_telemetry",
    "vip_slots",
    "quic_server_ids",
    "quic_sid_owners",
    "vip_quic",
    "dip_quic",
];

/// Pinned maps whose state is short-lived, rebuilt from the configuration
/// (`apply` rewrites nat_endpoints and rebuilds vip_slots before the
/// program is attached), or counters: a pin of another layout (an older
/// weir's) is replaced rather than refused, so an upgrade keeps the
/// established connections. What is lost: handshakes in progress (clients
/// retransmit their SYN), and the QUIC counters of a VIP or DIP, which
/// start again from zero (Prometheus' `rate()` takes that as a reset).
const REPLACEABLE_MAPS: &[&str] = &[
    "half_open",
    "nat_endpoints",
    "vip_slots",
    "quic_server_ids",
    "quic_sid_owners",
    "vip_quic",
    "dip_quic",
];

/// Pinned counter maps indexed by `enum weir_stat`: a pin with another
/// number of counters is an older weir's, whose counters sit at other
/// indices (a new outcome goes before the event counters), so it is
/// replaced rather than refused. The counters start again from zero, which
/// Prometheus' `rate()` takes as a reset; no connection is lost.
const COUNTER_MAPS: &[&str] = &["stats"];

/// Pins older weir versions made that this one no longer uses.
const RETIRED_PINS: &[&str] = &["half_open_rev"];

/// The connection tables of a weir that kept both families under one key,
/// before `conns4`/`rev_nat4`: their entries are moved into this version's
/// tables by [`LoadedLb::migrate_connections`], so an upgrade keeps them.
const MERGED_FAMILY_TABLES: &[&str] = &["conns", "rev_nat"];

/// A loaded (not yet attached) `weir_lb`.
pub struct LoadedLb {
    pub skel: WeirLbSkel<'static>,
    /// What it was loaded to carry.
    pub features: Features,
    /// Pins this load created (the rest were reused from a previous run).
    pub created_pins: Vec<PathBuf>,
    /// Pins of another layout this load replaced (REPLACEABLE_MAPS): where
    /// each was, and its map, held until the start succeeds (bpffs cannot
    /// rename a pin, so it is unlinked and pinned again if the start fails).
    superseded_pins: Mutex<Vec<(PathBuf, MapHandle)>>,
    pin_dir: Option<PathBuf>,
}

impl LoadedLb {
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.skel.progs.weir_lb.as_fd()
    }

    /// Removes the pins this load created and puts back the ones it
    /// replaced: used when startup fails, so a failed start leaves the
    /// saved state as it found it.
    pub fn remove_created_pins(&self) {
        remove_pins(&self.created_pins);
        restore_pins(&mut self.superseded());
    }

    fn superseded(&self) -> std::sync::MutexGuard<'_, Vec<(PathBuf, MapHandle)>> {
        self.superseded_pins
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Once the program is attached: drops the pins it replaced and those
    /// of maps this version no longer has, which only an older program
    /// used. Returns the names dropped.
    /// Copies the connections of an older weir's tables of both families
    /// (MERGED_FAMILY_TABLES, replaced at load) into this version's, by
    /// family, leaving alone a connection this program installed meanwhile.
    /// Called before attaching, and again after (during a takeover the
    /// predecessor installs until the swap). Returns the entries copied.
    pub fn migrate_connections(&self, maps: &Maps) -> Result<usize> {
        let mut copied = 0;
        for (was, old) in self.superseded().iter() {
            let Some(name) = was.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let what = || format!("moving the connections of {}", was.display());
            copied += match name {
                "conns" => copy_new(
                    &read_all::<weir_flow_key, weir_conn>(old).with_context(what)?,
                    |k, v| maps.conns.insert_new(k, v),
                )?,
                "rev_nat" => copy_new(
                    &read_all::<weir_flow_key, weir_rev_nat>(old).with_context(what)?,
                    |k, v| maps.rev_nat.insert_new(k, v),
                )?,
                _ => 0,
            };
        }
        Ok(copied)
    }

    pub fn drop_superseded_pins(&self) -> Vec<String> {
        let mut dropped: Vec<String> = self
            .superseded()
            .drain(..)
            .map(|(was, _)| was.display().to_string())
            .collect();
        if let Some(dir) = &self.pin_dir {
            for name in RETIRED_PINS {
                let p = dir.join(name);
                if fs::remove_file(&p).is_ok() {
                    dropped.push(p.display().to_string());
                }
            }
        }
        dropped
    }
}

/// Inserts each entry with `insert_new`; returns how many went in.
fn copy_new<V>(
    entries: &[(weir_flow_key, V)],
    insert_new: impl Fn(&weir_flow_key, &V) -> Result<bool>,
) -> Result<usize> {
    let mut copied = 0;
    for (key, value) in entries {
        copied += usize::from(insert_new(key, value)?);
    }
    Ok(copied)
}

fn remove_pins(pins: &[PathBuf]) {
    for p in pins {
        let _ = fs::remove_file(p);
    }
}

/// Pins the replaced maps again where they were (the new pins there must
/// be gone first).
fn restore_pins(superseded: &mut Vec<(PathBuf, MapHandle)>) {
    for (was, mut map) in superseded.drain(..) {
        let _ = map.pin(&was);
    }
}

/// Sizes of the maps that have a pin. A table a tier does not use gets one
/// entry: these are preallocated, and a million-entry LRU costs about 100 MiB.
fn sizes(opts: &LoadOptions) -> Result<[(&'static str, u32); 16]> {
    let slots = weir_abi::WEIR_TABLE_SLOTS;
    let (conns4, conns6, half_open) = match opts.tier {
        Tier::Xdp => (
            opts.conn_capacity,
            opts.conn_capacity_v6,
            opts.half_open_capacity,
        ),
        Tier::Software => (1, 1, 1),
        Tier::Hybrid => (opts.fast_table_size, opts.fast_table_size, 1),
    };
    Ok([
        ("conns4", conns4),
        ("conns", conns6),
        ("rev_nat4", conns4),
        ("rev_nat", conns6),
        ("half_open", half_open),
        ("nat_endpoints", opts.max_dips),
        ("vips", opts.max_vips),
        ("dips", opts.max_dips),
        ("table_version", opts.max_vips),
        ("class_ranges", opts.max_vips * slots),
        (
            "class_members",
            opts.max_vips * slots * weir_abi::WEIR_MAX_CLASSES,
        ),
        ("vip_traffic", opts.max_vips),
        ("vip_slots", vip_slots(opts)?),
        ("quic_server_ids", opts.max_dips),
        ("quic_sid_owners", opts.max_dips),
        ("vip_quic", opts.max_vips),
    ])
}

/// Slots of `vip_slots` (weir-core vip_slot): a power of two.
fn vip_slots(opts: &LoadOptions) -> Result<u32> {
    weir_core::vip_slot::slot_count(opts.max_vips).with_context(|| {
        format!(
            "max_vips {}: too many VIPs for the VIP slot array; lower dataplane.max_vips",
            opts.max_vips
        )
    })
}

fn configure(open: &mut OpenWeirLbSkel<'static>, opts: &LoadOptions) -> Result<()> {
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("weir_lb has no .rodata")?;
    ro.cfg_not_vip_action = opts.not_vip.raw();
    ro.cfg_icmp_action = opts.icmp.raw();
    ro.cfg_fragment_action = opts.fragments.raw();
    ro.cfg_malformed_action = opts.malformed.raw();
    ro.cfg_nonsyn_miss = match opts.nonsyn_miss {
        NonSynMiss::Dispatch => weir_abi::WEIR_NONSYN_DISPATCH,
        NonSynMiss::Drop => weir_abi::WEIR_NONSYN_DROP,
    };
    ro.cfg_hash_seed = opts.hash_seed;
    ro.cfg_fib_lookup = u32::from(opts.fib_lookup);
    ro.cfg_tier = opts.tier.raw();
    ro.cfg_features = opts.features.raw();
    open.maps
        .bss_data
        .as_deref_mut()
        .context("weir_lb has no .bss")?
        .passive_telemetry_on = u32::from(opts.passive_telemetry);
    ro.cfg_vip_slot_shift = weir_core::vip_slot::slot_shift(vip_slots(opts)?);
    let w = &opts.workers;
    if w.count == 0 || w.count > weir_abi::WEIR_MAX_QUEUES {
        bail!("workers: {} (1 to {})", w.count, weir_abi::WEIR_MAX_QUEUES);
    }
    if !w.buckets.is_power_of_two() || w.buckets < w.count {
        bail!(
            "distribution buckets: {} (a power of two, at least the workers)",
            w.buckets
        );
    }
    ro.cfg_workers = w.count;
    ro.cfg_dist_mode = w.mode.raw();
    ro.cfg_dist_buckets = w.buckets;
    ro.cfg_spray_all = u32::from(w.spread_all);
    ro.cfg_conn_sync = u32::from(opts.conn_sync);
    let t = opts.timeouts.ticks();
    ro.cfg_timeouts.tcp_half_open = t.tcp_half_open;
    ro.cfg_timeouts.tcp_established = t.tcp_established;
    ro.cfg_timeouts.tcp_closing = t.tcp_closing;
    ro.cfg_timeouts.tcp_closed = t.tcp_closed;
    ro.cfg_timeouts.udp = t.udp;
    let e = &opts.encap;
    ro.cfg_encap_mtu = e.mtu;
    ro.cfg_encap_src_v4 = e.source_v4.map_or(0, |a| u32::from_ne_bytes(a.octets()));
    ro.cfg_encap_src_v6 = e
        .source_v6
        .map_or([0; 4], |a| weir_core::flow::addr_words(a.into()).0);
    ro.cfg_gue_port = e.gue_port.to_be();
    opts.syn_budget
        .validate()
        .map_err(|e| anyhow::anyhow!("SYN budget: {e}"))?;
    (ro.cfg_syn_interval_ns, ro.cfg_syn_tolerance_ns) = opts.syn_budget.gcra();

    let queues = match opts.tier {
        Tier::Xdp => 1,
        Tier::Software | Tier::Hybrid => opts
            .interfaces
            .checked_mul(weir_abi::WEIR_MAX_QUEUES)
            .context("too many interfaces for the workers' socket map xsks")?,
    };
    let xsks = queues
        .checked_mul(w.count)
        .context("too many interfaces and workers for the socket map xsks")?;
    // Numbers and buckets only where they are read.
    let seq = if w.count > 1 { queues } else { 1 };
    let buckets = if w.mode == DistMode::Adaptive {
        w.buckets
    } else {
        1
    };
    let want: Vec<(&str, u32)> = sizes(opts)?
        .into_iter()
        .chain([
            ("dip_traffic", opts.max_dips),
            ("dip_telemetry", opts.max_dips),
            ("dip_quic", opts.max_dips),
            ("xsks", xsks),
            ("xsk_seq", seq),
            ("dist_sets", buckets),
            ("dist_packets", buckets),
            ("sync_events", crate::sync_events::ring_size(opts.conn_sync)),
        ])
        .collect();
    let object = open.open_object_mut();
    for mut map in object.maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if let Some((_, n)) = want.iter().find(|(w, _)| *w == name) {
            if *n == 0 {
                bail!("map {name}: size must be at least 1");
            }
            map.set_max_entries(*n)
                .with_context(|| format!("setting the size of map {name} to {n}"))?;
        }
        if CONN_TABLES.contains(&name.as_str()) {
            let flags = map_flags(&map) | opts.conn_lru.map_flags();
            map.set_map_flags(flags)
                .with_context(|| format!("setting the flags of map {name} to {flags:#x}"))?;
        }
    }
    Ok(())
}

/// The flags an open map will be created with.
fn map_flags(map: &libbpf_rs::OpenMapMut<'_>) -> u32 {
    // SAFETY: the pointer is the live open map `map` borrows.
    unsafe { libbpf_rs::libbpf_sys::bpf_map__map_flags(map.as_libbpf_object().as_ptr()) }
}

/// Whether a pinned map of `pinned` entries is what a load asking for
/// `requested` makes: the kernel rounds a per-CPU LRU up to a whole share
/// for every possible CPU (htab_map_alloc), which libbpf's copy of the size
/// does not show.
fn same_entries(pinned: u32, requested: u32, flags: u32) -> Result<bool> {
    if pinned == requested || flags & libbpf_rs::libbpf_sys::BPF_F_NO_COMMON_LRU == 0 {
        return Ok(pinned == requested);
    }
    let cpus = u32::try_from(libbpf_rs::num_possible_cpus().context("counting possible CPUs")?)
        .context("possible CPUs")?;
    Ok(requested.checked_next_multiple_of(cpus) == Some(pinned))
}

/// What [`prepare_pins`] arranged: the pins the load will create, and the
/// pins of another layout it unlinked for them, with their maps.
#[derive(Default)]
struct Pins {
    created: Vec<PathBuf>,
    superseded: Vec<(PathBuf, MapHandle)>,
}

/// Points every pinned map at its pin: an existing pin is reused (after a
/// compatibility check that names the problem), a missing one is created at
/// load, and one of another layout is unlinked if its map is replaceable
/// (REPLACEABLE_MAPS), or a counter map of another size (COUNTER_MAPS). On
/// an error, what was unlinked is pinned again.
fn prepare_pins(open: &mut OpenWeirLbSkel<'static>, dir: &Path) -> Result<Pins> {
    fs::create_dir_all(dir).with_context(|| {
        format!(
            "creating {} (is bpffs mounted on /sys/fs/bpf?)",
            dir.display()
        )
    })?;
    // State pinned before IPv4 connections had tables of their own keeps
    // them in `conns`, where this version never looks for them.
    let merged_families = dir.join("conns").exists() && !dir.join("conns4").exists();
    let mut pins = Pins::default();
    let prepared = point_at_pins(open, dir, merged_families, &mut pins);
    if prepared.is_err() {
        restore_pins(&mut pins.superseded);
    }
    prepared.map(|()| pins)
}

fn point_at_pins(
    open: &mut OpenWeirLbSkel<'static>,
    dir: &Path,
    merged_families: bool,
    pins: &mut Pins,
) -> Result<()> {
    for mut map in open.open_object_mut().maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if !PINNED_MAPS.contains(&name.as_str()) {
            continue;
        }
        let path = dir.join(&name);
        if path.exists() {
            let pinned = MapHandle::from_pinned_path(&path)
                .with_context(|| format!("opening pinned map {}", path.display()))?;
            let raw = map.as_libbpf_object().as_ptr();
            // SAFETY: `raw` is the open map this loop borrows.
            let (key_size, value_size) = unsafe {
                (
                    libbpf_rs::libbpf_sys::bpf_map__key_size(raw),
                    libbpf_rs::libbpf_sys::bpf_map__value_size(raw),
                )
            };
            let same_layout = pinned.key_size() == key_size && pinned.value_size() == value_size;
            let migrated =
                merged_families && same_layout && MERGED_FAMILY_TABLES.contains(&name.as_str());
            let other_counters =
                COUNTER_MAPS.contains(&name.as_str()) && pinned.max_entries() != map.max_entries();
            if migrated
                || other_counters
                || (!same_layout && REPLACEABLE_MAPS.contains(&name.as_str()))
            {
                fs::remove_file(&path)
                    .with_context(|| format!("unpinning the older map {}", path.display()))?;
                pins.superseded.push((path.clone(), pinned));
                map.set_pin_path(&path)
                    .with_context(|| format!("setting pin path {}", path.display()))?;
                pins.created.push(path);
                continue;
            }
            if !same_layout {
                bail!(
                    "pinned map {} was made by an incompatible weir version (key/value of {}/{} \
                     bytes, this one needs {}/{}); drop the saved state with \
                     `weir serve --reset-state` (this drops established connections)",
                    path.display(),
                    pinned.key_size(),
                    pinned.value_size(),
                    key_size,
                    value_size
                );
            }
            let flags = map_flags(&map);
            let pinned_flags = pinned
                .info()
                .with_context(|| format!("reading pinned map {}", path.display()))?
                .info
                .map_flags;
            let lru = libbpf_rs::libbpf_sys::BPF_F_NO_COMMON_LRU;
            if (pinned_flags ^ flags) & lru != 0 {
                let layout = |f: u32| if f & lru != 0 { "per-cpu" } else { "shared" };
                bail!(
                    "pinned map {} has a {} LRU but the configuration asks for {} \
                     (dataplane.conn_lru); keep the old setting or drop the saved state with \
                     `weir serve --reset-state` (this drops established connections)",
                    path.display(),
                    layout(pinned_flags),
                    layout(flags)
                );
            }
            if !same_entries(pinned.max_entries(), map.max_entries(), flags)?
                || pinned.map_type() != map.map_type()
            {
                bail!(
                    "pinned map {} has {} entries but the configuration asks for {} (the \
                     table sizes and dataplane.tier decide it); keep the old settings or drop \
                     the saved state with `weir serve --reset-state` (this drops established \
                     connections)",
                    path.display(),
                    pinned.max_entries(),
                    map.max_entries()
                );
            }
            map.reuse_pinned_map(&path)
                .with_context(|| format!("reusing pinned map {}", path.display()))?;
        } else {
            map.set_pin_path(&path)
                .with_context(|| format!("setting pin path {}", path.display()))?;
            pins.created.push(path);
        }
    }
    Ok(())
}

/// Opens, configures and loads `weir_lb`.
pub fn load(opts: &LoadOptions) -> Result<LoadedLb> {
    // The skeleton borrows its object storage for as long as it lives; a
    // process loads a handful of programs, so the storage is leaked.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = WeirLbSkelBuilder::default()
        .open(storage)
        .context("opening the weir_lb BPF object")?;
    configure(&mut open, opts)?;
    let mut pins = match &opts.pin_dir {
        Some(dir) => prepare_pins(&mut open, dir)?,
        None => Pins::default(),
    };
    let skel = open.load().map_err(|e| {
        remove_pins(&pins.created);
        restore_pins(&mut pins.superseded);
        anyhow::anyhow!(
            "the kernel refused to load weir_lb: {e}; weir needs Linux >= 5.15 with BTF \
             (/sys/kernel/btf/vmlinux) and root (CAP_BPF, CAP_NET_ADMIN)"
        )
    })?;
    Ok(LoadedLb {
        skel,
        features: opts.features,
        created_pins: pins.created,
        superseded_pins: Mutex::new(pins.superseded),
        pin_dir: opts.pin_dir.clone(),
    })
}

/// Loads `weir_lb` for `opts` into the maps of `running`, a program loaded
/// before: every map but the load-time constants (.rodata) is `running`'s
/// own, its connection tables, counters, socket and interface maps and
/// run-time switches, so the new program takes over its state as it is
/// when it is swapped in. Nothing is created or pinned. For a program that
/// carries more features than the one running (a configuration change that
/// needs them); `opts` must otherwise be the options `running` was loaded
/// with, as the maps' sizes are.
pub fn load_into(opts: &LoadOptions, running: &LoadedLb) -> Result<LoadedLb> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = WeirLbSkelBuilder::default()
        .open(storage)
        .context("opening the weir_lb BPF object")?;
    configure(&mut open, opts)?;
    let object = running.skel.object();
    for mut map in open.open_object_mut().maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if name.ends_with(".rodata") {
            continue;
        }
        let Some(old) = object
            .maps()
            .find(|m| m.name().to_string_lossy() == name.as_str())
        else {
            bail!("the running weir_lb has no map {name} to share");
        };
        map.reuse_fd(old.as_fd())
            .with_context(|| format!("sharing map {name} with the running weir_lb"))?;
    }
    let skel = open.load().map_err(|e| {
        anyhow::anyhow!(
            "the kernel refused weir_lb with features {}: {e}; the running program stays",
            opts.features
        )
    })?;
    Ok(LoadedLb {
        skel,
        features: opts.features,
        created_pins: Vec::new(),
        superseded_pins: Mutex::new(Vec::new()),
        pin_dir: opts.pin_dir.clone(),
    })
}

/// The kernel's name of the program [`load`] loads (its function's name):
/// how an XDP program found on an interface is recognised as weir's.
pub const PROG_NAME: &str = "weir_lb";

/// The maps pinned in `dir` under the names of [`PINNED_MAPS`] with their
/// kernel ids (missing pins are left out): to tell whether a program found
/// attached really uses these pins.
pub fn pinned_map_ids(dir: &Path) -> Result<Vec<(&'static str, u32)>> {
    let mut ids = Vec::new();
    for name in PINNED_MAPS {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let info = MapHandle::from_pinned_path(&path)
            .and_then(|m| m.info())
            .with_context(|| format!("reading pinned map {}", path.display()))?;
        ids.push((*name, info.info.id));
    }
    Ok(ids)
}
