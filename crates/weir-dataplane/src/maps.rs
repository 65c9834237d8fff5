//! Typed access to the maps of `weir_lb`, from a loaded program or from the
//! pins of a running one. Values go in and out as the `weir-abi` structs.
//!
//! Its `unsafe` is BPF map memory: batch lookups into buffers sized for
//! every CPU, and the byte view of the version word; both belong with the
//! maps, not with the operating-system calls of weir-sys.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::vip_slot;

use crate::flow_table::FlowTable;
use crate::skel::lb::WeirLbSkel;

/// Handles on every map of the load balancer.
#[derive(Debug)]
pub struct Maps {
    /// Established connections (`conns4` and `conns`).
    pub conns: FlowTable<weir_conn>,
    /// Reverse entries of nat connections (`rev_nat4` and `rev_nat`).
    pub rev_nat: FlowTable<weir_rev_nat>,
    pub half_open: MapHandle,
    pub nat_endpoints: MapHandle,
    pub vips: MapHandle,
    pub dips: MapHandle,
    pub table_version: MapHandle,
    pub class_ranges: MapHandle,
    pub class_members: MapHandle,
    pub stats: MapHandle,
    pub vip_traffic: MapHandle,
    pub dip_traffic: MapHandle,
    pub dip_telemetry: MapHandle,
    /// The VIPs of `vips` by slot (bpf/lib/vip_match.h).
    pub vip_slots: MapHandle,
    /// QUIC VIPs' server IDs and their counters (bpf/lib/quic.h).
    pub quic_server_ids: MapHandle,
    /// The server ID each DIP slot owns, kept with `quic_server_ids`.
    pub quic_sid_owners: MapHandle,
    pub vip_quic: MapHandle,
    pub dip_quic: MapHandle,
    /// Only on a loaded program: interface maps are not pinned.
    pub ifaces: Option<(MapHandle, MapHandle)>,
    /// The software tier's AF_XDP sockets; only on a loaded program (a
    /// socket lives as long as the process that made it).
    pub xsks: Option<MapHandle>,
    /// Adaptive distribution: each bucket's workers (`dist_sets`) and the
    /// packets per bucket and CPU (`dist_packets`); only on a loaded program.
    pub dist: Option<(MapHandle, MapHandle)>,
    /// The program's run-time switches (its .bss); only on a loaded program.
    pub switches: Option<MapHandle>,
    /// The workers the loaded program distributes to (its `cfg_workers`).
    workers: u32,
}

fn handle(map: &libbpf_rs::Map<'_>) -> Result<MapHandle> {
    MapHandle::try_from(map).context("duplicating a map handle")
}

/// Where worker `worker`'s socket for RX queue `queue` of the interface in
/// `xsk_slot` sits in `xsks` (weir.h: (slot * WEIR_MAX_QUEUES + queue) *
/// workers + worker).
pub fn xsk_index(xsk_slot: u32, queue: u32, worker: u32, workers: u32) -> Result<u32> {
    if queue >= WEIR_MAX_QUEUES {
        bail!(
            "RX queue {queue}: weir steers the first {WEIR_MAX_QUEUES} queues of an interface to \
             workers; reduce the interface's queues (ethtool -L)"
        );
    }
    if worker >= workers {
        bail!("worker {worker}: the program was loaded for {workers} workers");
    }
    xsk_slot
        .checked_mul(WEIR_MAX_QUEUES)
        .and_then(|base| base.checked_add(queue))
        .and_then(|q| q.checked_mul(workers))
        .and_then(|q| q.checked_add(worker))
        .with_context(|| format!("interface slot {xsk_slot} is out of range"))
}

fn u32_key(k: u32) -> [u8; 4] {
    k.to_ne_bytes()
}

fn get<T: AsBytes>(map: &MapHandle, key: &[u8]) -> Result<Option<T>> {
    Ok(map
        .lookup(key, MapFlags::ANY)?
        .and_then(|v| T::from_bytes(&v)))
}

/// Sum of a per-CPU value of u64 words, word by word.
fn sum_percpu(map: &MapHandle, key: u32, words: usize) -> Result<Vec<u64>> {
    let mut total = vec![0u64; words];
    if let Some(per_cpu) = map.lookup_percpu(&u32_key(key), MapFlags::ANY)? {
        for cpu in per_cpu {
            for (i, t) in total.iter_mut().enumerate() {
                let b = cpu.get(8 * i..8 * i + 8).unwrap_or(&[0; 8]);
                *t += u64::from_ne_bytes(b.try_into().unwrap());
            }
        }
    }
    Ok(total)
}

/// Per-CPU counters added up over all CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
    pub new_conns: u64,
}

/// `struct weir_dip_telemetry` added up over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DipTelemetry {
    /// Requests started (a client payload with none outstanding).
    pub requests: u64,
    /// Requests completed by the DIP's first reply payload.
    pub samples: u64,
    /// Sum of their request-to-first-reply delays.
    pub sum_ns: u64,
}

/// `struct weir_quic_counters` added up over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuicCounters {
    /// Routed by the server ID in the destination connection ID.
    pub cid_routed: u64,
    /// Left to the 5-tuple connection table (cid_unknown included).
    pub cid_fallback: u64,
    /// Fallbacks whose server-chosen connection ID named no live DIP.
    pub cid_unknown: u64,
    /// A client's Initial or 0-RTT of another handshake than the one that
    /// opened the live 5-tuple entry of its address and port: a new
    /// connection, dispatched anew (a DIP's: its entry was the one given up).
    pub reused_tuple: u64,
}

fn quic_counters(map: &MapHandle, idx: u32) -> Result<QuicCounters> {
    let w = sum_percpu(map, idx, 4)?;
    Ok(QuicCounters {
        cid_routed: w[0],
        cid_fallback: w[1],
        cid_unknown: w[2],
        reused_tuple: w[3],
    })
}

impl Maps {
    /// Handles on the maps of a loaded program.
    pub fn of(skel: &WeirLbSkel<'_>) -> Result<Maps> {
        let m = &skel.maps;
        Ok(Maps {
            conns: FlowTable::new(handle(&m.conns4)?, handle(&m.conns)?),
            rev_nat: FlowTable::new(handle(&m.rev_nat4)?, handle(&m.rev_nat)?),
            half_open: handle(&m.half_open)?,
            nat_endpoints: handle(&m.nat_endpoints)?,
            vips: handle(&m.vips)?,
            dips: handle(&m.dips)?,
            table_version: handle(&m.table_version)?,
            class_ranges: handle(&m.class_ranges)?,
            class_members: handle(&m.class_members)?,
            stats: handle(&m.stats)?,
            vip_traffic: handle(&m.vip_traffic)?,
            dip_traffic: handle(&m.dip_traffic)?,
            dip_telemetry: handle(&m.dip_telemetry)?,
            vip_slots: handle(&m.vip_slots)?,
            quic_server_ids: handle(&m.quic_server_ids)?,
            quic_sid_owners: handle(&m.quic_sid_owners)?,
            vip_quic: handle(&m.vip_quic)?,
            dip_quic: handle(&m.dip_quic)?,
            ifaces: Some((handle(&m.tx_ports)?, handle(&m.ifaces)?)),
            xsks: Some(handle(&m.xsks)?),
            dist: Some((handle(&m.dist_sets)?, handle(&m.dist_packets)?)),
            switches: Some(handle(&m.bss)?),
            workers: m.rodata_data.as_ref().map_or(1, |r| r.cfg_workers),
        })
    }

    /// Handles on the pinned maps of a running (or stopped) weir.
    pub fn pinned(dir: &Path) -> Result<Maps> {
        let open = |name: &str| {
            let p = dir.join(name);
            MapHandle::from_pinned_path(&p).with_context(|| {
                format!(
                    "no pinned weir state at {} (is `weir serve` running?)",
                    p.display()
                )
            })
        };
        Ok(Maps {
            conns: FlowTable::new(open("conns4")?, open("conns")?),
            rev_nat: FlowTable::new(open("rev_nat4")?, open("rev_nat")?),
            half_open: open("half_open")?,
            nat_endpoints: open("nat_endpoints")?,
            vips: open("vips")?,
            dips: open("dips")?,
            table_version: open("table_version")?,
            class_ranges: open("class_ranges")?,
            class_members: open("class_members")?,
            stats: open("stats")?,
            vip_traffic: open("vip_traffic")?,
            dip_traffic: open("dip_traffic")?,
            dip_telemetry: open("dip_telemetry")?,
            vip_slots: open("vip_slots")?,
            quic_server_ids: open("quic_server_ids")?,
            quic_sid_owners: open("quic_sid_owners")?,
            vip_quic: open("vip_quic")?,
            dip_quic: open("dip_quic")?,
            ifaces: None,
            xsks: None,
            dist: None,
            switches: None,
            workers: 1,
        })
    }

    /// Turns the data plane's passive telemetry (bpf/lib/telemetry.h) on or
    /// off while the program runs.
    pub fn set_passive_telemetry(&self, on: bool) -> Result<()> {
        let switches = self
            .switches
            .as_ref()
            .context("the run-time switches belong to the loaded program, not to its pins")?;
        // The .bss holds this one switch (a u32): its map's one value.
        const _: () = assert!(std::mem::size_of::<crate::skel::lb::types::bss>() == 4);
        let value = u32::from(on).to_ne_bytes();
        switches
            .update(&0u32.to_ne_bytes(), &value, MapFlags::ANY)
            .context("writing the program's run-time switches")
    }

    /// Writes a VIP into `vips`, then into its slot (or marks the slot
    /// MORE): in this order a packet never misses a VIP of `vips`.
    pub fn put_vip(&self, key: &weir_vip_key, vip: &weir_vip) -> Result<()> {
        self.vips
            .update(key.as_bytes(), vip.as_bytes(), MapFlags::ANY)
            .context("writing a VIP")?;
        let idx = vip_slot::slot_of(key, self.vip_slot_count());
        let cur = self.vip_slot(idx)?;
        self.write_vip_slot(idx, &cur, &vip_slot::with_vip(&cur, key, vip))
    }

    /// Deletes a VIP from `vips`, then from its slot: another VIP of the
    /// slot, if any, moves in, and MORE says whether more remain.
    pub fn delete_vip(&self, key: &weir_vip_key) -> Result<()> {
        self.vips.delete(key.as_bytes()).context("deleting a VIP")?;
        let slots = self.vip_slot_count();
        let idx = vip_slot::slot_of(key, slots);
        let cur = self.vip_slot(idx)?;
        if cur.flags & (WEIR_VIP_SLOT_USED | WEIR_VIP_SLOT_MORE) == 0 {
            return Ok(());
        }
        let members: Vec<_> = self
            .vips()?
            .into_iter()
            .filter(|(k, _)| vip_slot::slot_of(k, slots) == idx)
            .collect();
        self.write_vip_slot(idx, &cur, &vip_slot::settle(&cur, &members))
    }

    /// Rebuilds every slot of `vip_slots` from `vips`. After an apply and
    /// before a program is attached: pinned `vips` may have been written by
    /// another weir, or the slot array may be new. Returns the slots
    /// written.
    pub fn sync_vip_slots(&self) -> Result<u32> {
        let slots = self.vip_slot_count();
        let mut members: HashMap<u32, Vec<(weir_vip_key, weir_vip)>> = HashMap::new();
        for (k, v) in self.vips()? {
            members
                .entry(vip_slot::slot_of(&k, slots))
                .or_default()
                .push((k, v));
        }
        let mut written = 0;
        for idx in 0..slots {
            let cur = self.vip_slot(idx)?;
            let next = vip_slot::settle(&cur, members.get(&idx).map_or(&[], Vec::as_slice));
            if next != cur {
                self.write_vip_slot(idx, &cur, &next)?;
                written += 1;
            }
        }
        Ok(written)
    }

    /// Slots of `vip_slots` (a power of two, set at load).
    pub fn vip_slot_count(&self) -> u32 {
        self.vip_slots.max_entries()
    }

    pub fn vip_slot(&self, idx: u32) -> Result<weir_vip_slot> {
        Ok(get(&self.vip_slots, &u32_key(idx))
            .with_context(|| format!("reading VIP slot {idx}"))?
            .unwrap_or_default())
    }

    /// Replaces slot `idx`'s `cur` by `next`; a new occupant or value goes
    /// through a vacated slot first, so that a packet reading the slot
    /// mid-write never pairs one key with another value.
    fn write_vip_slot(&self, idx: u32, cur: &weir_vip_slot, next: &weir_vip_slot) -> Result<()> {
        if next == cur {
            return Ok(());
        }
        let put = |s: &weir_vip_slot| {
            self.vip_slots
                .update(&u32_key(idx), s.as_bytes(), MapFlags::ANY)
                .with_context(|| format!("writing VIP slot {idx}"))
        };
        if vip_slot::needs_vacate(cur, next) {
            put(&vip_slot::vacated())?;
        }
        put(next)
    }

    /// All VIPs in the table.
    pub fn vips(&self) -> Result<Vec<(weir_vip_key, weir_vip)>> {
        let mut out = Vec::new();
        for k in self.vips.keys() {
            if let (Some(key), Some(v)) = (weir_vip_key::from_bytes(&k), get(&self.vips, &k)?) {
                out.push((key, v));
            }
        }
        Ok(out)
    }

    pub fn put_dip(&self, id: u32, dip: &weir_dip) -> Result<()> {
        self.dips
            .update(&u32_key(id), dip.as_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing DIP slot {id}"))
    }

    pub fn dip(&self, id: u32) -> Result<Option<weir_dip>> {
        get(&self.dips, &u32_key(id))
    }

    /// Number of DIP slots.
    pub fn dip_slots(&self) -> u32 {
        self.dips.max_entries()
    }

    pub fn table_version(&self, vip_id: u32) -> Result<u32> {
        Ok(get::<VersionWord>(&self.table_version, &u32_key(vip_id))?.map_or(0, |v| v.0))
    }

    /// Writes `table` into the slot of `version` and then makes `version`
    /// the VIP's active one. The slot is the inactive one as long as versions
    /// go up by one, so readers see the old table or the new one, never a mix.
    ///
    /// Only entries that differ from what the slot holds (the table of
    /// version - 2) are written (Spotlight IV-D1: at most m ranges and the
    /// rows of the classes that changed); the version flip is always written.
    pub fn publish_table(
        &self,
        vip_id: u32,
        version: u32,
        table: &AwfdTable,
    ) -> Result<PublishReport> {
        let slot = version % WEIR_TABLE_SLOTS;
        let idx = vip_id * WEIR_TABLE_SLOTS + slot;
        let mut report = PublishReport::default();
        for range in 0..WEIR_MAX_CLASSES {
            let key = u32_key(class_row(vip_id, slot, range));
            // An empty row (nr = 0) is an absent one.
            let held = get::<weir_class_members>(&self.class_members, &key)?.filter(|h| h.nr != 0);
            let (row, what) = match table.members(range as usize) {
                Some(row) if held.is_some_and(|h| same_members(&h, &row)) => continue,
                Some(row) => (row, &mut report.rows_written),
                // Rows past the last class are never read; empty stale ones.
                None if held.is_some() => (weir_class_members::default(), &mut report.rows_deleted),
                None => continue,
            };
            self.class_members
                .update(&key, row.as_bytes(), MapFlags::ANY)
                .with_context(|| format!("writing class row {range} of VIP {vip_id}"))?;
            *what += 1;
        }
        let ranges = table.ranges();
        let held: Option<weir_class_ranges> = get(&self.class_ranges, &u32_key(idx))?;
        if held.is_none_or(|h| h.as_bytes() != ranges.as_bytes()) {
            self.class_ranges
                .update(&u32_key(idx), ranges.as_bytes(), MapFlags::ANY)
                .with_context(|| format!("writing class ranges of VIP {vip_id}"))?;
            report.ranges_written = true;
        }
        self.table_version
            .update(&u32_key(vip_id), &version.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("switching VIP {vip_id} to table version {version}"))?;
        Ok(report)
    }

    /// Whether the VIP's active table is `table` already, entry for entry:
    /// publishing it again would change nothing but the version.
    pub fn holds_table(&self, vip_id: u32, table: &AwfdTable) -> Result<bool> {
        let slot = self.table_version(vip_id)? % WEIR_TABLE_SLOTS;
        let idx = vip_id * WEIR_TABLE_SLOTS + slot;
        let held: Option<weir_class_ranges> = get(&self.class_ranges, &u32_key(idx))?;
        if held.is_none_or(|h| h.as_bytes() != table.ranges().as_bytes()) {
            return Ok(false);
        }
        for range in 0..WEIR_MAX_CLASSES {
            let key = u32_key(class_row(vip_id, slot, range));
            let row = get::<weir_class_members>(&self.class_members, &key)?.filter(|h| h.nr != 0);
            let same = match (table.members(range as usize), row) {
                (Some(want), Some(row)) => same_members(&row, &want),
                (Some(_), None) => false,
                // Rows past the last class are never read.
                (None, _) => true,
            };
            if !same {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The table a VIP's slot holds, as (dip, weight) pairs per class: what
    /// the data plane reads once that slot is active.
    pub fn slot_table(&self, vip_id: u32, slot: u32) -> Result<Vec<(u32, Vec<u32>)>> {
        let idx = vip_id * WEIR_TABLE_SLOTS + slot;
        let Some(r) = get::<weir_class_ranges>(&self.class_ranges, &u32_key(idx))? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for range in 0..r.nr.min(WEIR_MAX_CLASSES) {
            let key = u32_key(class_row(vip_id, slot, range));
            let m: Option<weir_class_members> = get(&self.class_members, &key)?;
            let members = m.map_or(Vec::new(), |m| {
                m.dip_id[..(m.nr.min(WEIR_MAX_CLASS_MEMBERS)) as usize].to_vec()
            });
            out.push((r.class_weight[range as usize], members));
        }
        Ok(out)
    }

    /// The active stage-1 table of a VIP.
    pub fn active_ranges(&self, vip_id: u32) -> Result<Option<weir_class_ranges>> {
        let slot = self.table_version(vip_id)? % WEIR_TABLE_SLOTS;
        get(
            &self.class_ranges,
            &u32_key(vip_id * WEIR_TABLE_SLOTS + slot),
        )
    }

    /// Registers an interface as a redirect target with its MAC, as the
    /// first interface of the software tier (`xsks` slot 0).
    pub fn put_iface(&self, ifindex: u32, mac: [u8; 6]) -> Result<()> {
        self.put_iface_in_slot(ifindex, mac, 0)
    }

    /// Registers an interface as a redirect target with its MAC; its
    /// workers' sockets go in `xsks` slot `xsk_slot` (see [`xsk_index`]).
    /// weir numbers the interfaces of its configuration 0, 1, ...
    pub fn put_iface_in_slot(&self, ifindex: u32, mac: [u8; 6], xsk_slot: u32) -> Result<()> {
        let (tx_ports, ifaces) = self
            .ifaces
            .as_ref()
            .context("interface maps are not pinned")?;
        tx_ports
            .update(&u32_key(ifindex), &u32_key(ifindex), MapFlags::ANY)
            .with_context(|| format!("adding ifindex {ifindex} to tx_ports"))?;
        let v = weir_iface {
            mac,
            pad: [0; 2],
            xsk_slot,
        };
        ifaces
            .update(&u32_key(ifindex), v.as_bytes(), MapFlags::ANY)
            .with_context(|| format!("adding ifindex {ifindex} to ifaces"))
    }

    /// The workers the loaded program distributes packets to.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// Puts worker `worker`'s AF_XDP socket where the program sends that
    /// worker's packets of RX queue `queue` of the interface in `xsk_slot`.
    /// The kernel takes a socket out of the map when it closes.
    pub fn put_worker(
        &self,
        xsk_slot: u32,
        queue: u32,
        worker: u32,
        socket: &impl AsRawFd,
    ) -> Result<()> {
        let xsks = self
            .xsks
            .as_ref()
            .context("the socket map xsks belongs to the process that loaded the program")?;
        let index = xsk_index(xsk_slot, queue, worker, self.workers)?;
        if index >= xsks.max_entries() {
            bail!(
                "interface slot {xsk_slot} is past the {} interfaces the program was loaded for",
                xsks.max_entries() / WEIR_MAX_QUEUES / self.workers
            );
        }
        let fd = socket.as_raw_fd();
        xsks.update(&u32_key(index), &fd.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| {
                format!(
                    "registering worker {worker}'s AF_XDP socket of queue {queue} (interface \
                     slot {xsk_slot}) in xsks; it must be bound (tier software or hybrid loads \
                     xsks)"
                )
            })
    }

    /// Adaptive distribution: the workers of `bucket` (one: its home).
    pub fn put_worker_set(&self, bucket: u32, set: &weir_worker_set) -> Result<()> {
        let (sets, _) = self
            .dist
            .as_ref()
            .context("the distribution maps belong to the process that loaded the program")?;
        sets.update(&u32_key(bucket), set.as_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing the workers of bucket {bucket} (dist_sets)"))
    }

    /// Adaptive distribution: the packets XDP counted per bucket, added up
    /// over CPUs (running totals, one BPF_MAP_LOOKUP_BATCH round).
    pub fn dist_packets(&self) -> Result<Vec<u64>> {
        let (_, packets) = self
            .dist
            .as_ref()
            .context("the distribution maps belong to the process that loaded the program")?;
        sum_percpu_u64(packets)
    }

    /// Every counter of `enum weir_stat`, added up over CPUs (see
    /// [`fold_stats`] for the ones the data plane does not count itself).
    pub fn stats(&self) -> Result<Vec<u64>> {
        let raw = (0..WEIR_STAT_SLOTS)
            .map(|i| Ok(sum_percpu(&self.stats, i, 1)?[0]))
            .collect::<Result<Vec<u64>>>()?;
        Ok(fold_stats(&raw))
    }

    pub fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        traffic(&self.vip_traffic, vip_id)
    }

    pub fn dip_traffic(&self, dip_id: u32) -> Result<Traffic> {
        traffic(&self.dip_traffic, dip_id)
    }

    /// Passive telemetry of a DIP slot, added up over CPUs.
    pub fn dip_telemetry(&self, dip_id: u32) -> Result<DipTelemetry> {
        let w = sum_percpu(&self.dip_telemetry, dip_id, 3)?;
        Ok(DipTelemetry {
            requests: w[0],
            samples: w[1],
            sum_ns: w[2],
        })
    }

    /// QUIC routing counters of a VIP id.
    pub fn vip_quic(&self, vip_id: u32) -> Result<QuicCounters> {
        quic_counters(&self.vip_quic, vip_id)
    }

    /// QUIC routing counters of the packets that went to a DIP slot.
    pub fn dip_quic(&self, dip_id: u32) -> Result<QuicCounters> {
        quic_counters(&self.dip_quic, dip_id)
    }

    /// Every QUIC server ID the data plane routes by.
    pub fn quic_server_ids(&self) -> Result<Vec<(weir_quic_sid_key, weir_quic_route)>> {
        let mut out = Vec::new();
        for k in self.quic_server_ids.keys() {
            let key = weir_quic_sid_key::from_bytes(&k);
            if let (Some(key), Some(v)) = (key, get(&self.quic_server_ids, &k)?) {
                out.push((key, v));
            }
        }
        Ok(out)
    }

    /// The server ID DIP slot `dip_id` owns (`quic_sid_owners`), if any.
    pub fn quic_sid_owner(&self, dip_id: u32) -> Result<Option<weir_quic_sid_owner>> {
        let owner = get::<weir_quic_sid_owner>(&self.quic_sid_owners, &u32_key(dip_id))?;
        Ok(owner.filter(|o| o.owned != 0))
    }

    fn put_quic_sid_owner(&self, dip_id: u32, owner: &weir_quic_sid_owner) -> Result<()> {
        self.quic_sid_owners
            .update(&u32_key(dip_id), owner.as_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing the QUIC server ID of DIP slot {dip_id}"))
    }

    /// Makes `quic_server_ids` hold exactly `wanted`, and `quic_sid_owners`
    /// its inverse. New and changed IDs are written before stale ones go,
    /// so an ID that moves is never missing in between. A slot whose ID
    /// moves or goes stops owning it first and owns its new ID last: the
    /// data plane sends a packet to the DIP of its 5-tuple entry when that
    /// slot owns the packet's ID (bpf/lib/quic.h), which must never be
    /// true of an ID quic_server_ids gives another DIP.
    pub fn sync_quic_server_ids(
        &self,
        wanted: &HashMap<weir_quic_sid_key, weir_quic_route>,
    ) -> Result<()> {
        // A slot with two IDs (two VIPs' DIP on one slot, which apply never
        // makes) owns none: its packets look their ID up.
        let mut owners: HashMap<u32, Option<weir_quic_sid_owner>> = HashMap::new();
        for (key, route) in wanted {
            let owner = weir_quic_sid_owner {
                key: *key,
                dip_gen: route.dip_gen,
                owned: 1,
            };
            owners
                .entry(route.dip_id)
                .and_modify(|o| *o = None)
                .or_insert(Some(owner));
        }
        let owners: HashMap<u32, weir_quic_sid_owner> = owners
            .into_iter()
            .filter_map(|(id, o)| o.map(|o| (id, o)))
            .collect();
        let mut unchanged = HashSet::new();
        for dip_id in 0..self.quic_sid_owners.max_entries() {
            let Some(present) = self.quic_sid_owner(dip_id)? else {
                continue;
            };
            if owners.get(&dip_id) == Some(&present) {
                unchanged.insert(dip_id);
            } else {
                self.put_quic_sid_owner(dip_id, &weir_quic_sid_owner::default())?;
            }
        }
        self.sync_quic_server_id_routes(wanted)?;
        for (dip_id, owner) in owners.iter().filter(|(id, _)| !unchanged.contains(*id)) {
            self.put_quic_sid_owner(*dip_id, owner)?;
        }
        Ok(())
    }

    fn sync_quic_server_id_routes(
        &self,
        wanted: &HashMap<weir_quic_sid_key, weir_quic_route>,
    ) -> Result<()> {
        let present = self.quic_server_ids()?;
        for (key, route) in wanted {
            if present.iter().any(|(k, r)| k == key && r == route) {
                continue;
            }
            self.quic_server_ids
                .update(key.as_bytes(), route.as_bytes(), MapFlags::ANY)
                .context("writing a QUIC server ID (raise dataplane.max_dips)")?;
        }
        for (key, _) in present.iter().filter(|(k, _)| !wanted.contains_key(k)) {
            self.quic_server_ids
                .delete(key.as_bytes())
                .context("deleting a QUIC server ID")?;
        }
        Ok(())
    }

    /// Entries in the connection table, both families (walks it: O(n)).
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// The connection table's entries: (open, closing). Closing ones have
    /// seen a FIN or a RST (`close_flags`) and age out on the closing
    /// timeouts.
    pub fn conn_counts(&self) -> Result<(usize, usize)> {
        let entries = self.conns.entries()?;
        let closing = entries.iter().filter(|(_, c)| c.close_flags != 0).count();
        Ok((entries.len() - closing, closing))
    }

    /// Every connection: key and value (reads the table in batches).
    pub fn conns(&self) -> Result<Vec<(weir_flow_key, weir_conn)>> {
        self.conns.entries()
    }

    pub fn put_conn(&self, key: &weir_flow_key, conn: &weir_conn) -> Result<()> {
        self.conns.insert(key, conn).context("writing a connection")
    }

    pub fn conn(&self, key: &weir_flow_key) -> Result<Option<weir_conn>> {
        self.conns.get(key)
    }

    pub fn rev_nat(&self, key: &weir_flow_key) -> Result<Option<weir_rev_nat>> {
        self.rev_nat.get(key)
    }

    /// Hybrid tier: puts a connection in the fast table, and in nat mode
    /// its reverse entry (the reply's tuple and where the reply goes) first,
    /// so the connection's first fast packet never leaves before its
    /// replies can come back through XDP. The table is an LRU of
    /// `fast_table_size` entries: an insert into a full table evicts the
    /// least recently used entry (the offload policy demotes first).
    pub fn install_fast(
        &self,
        key: &weir_flow_key,
        conn: &weir_conn,
        reverse: Option<(&weir_flow_key, &weir_rev_nat)>,
    ) -> Result<()> {
        if let Some((rkey, rev)) = reverse {
            self.rev_nat
                .insert(rkey, rev)
                .context("writing a fast reverse-NAT entry")?;
        }
        self.conns
            .insert(key, conn)
            .context("writing a fast-table entry")
    }

    /// Hybrid tier: takes a connection out of the fast table, with its
    /// reverse entry (nat) after it: its packets go to the software tier
    /// again. Returns whether the connection was there (the data plane
    /// drops expired entries and the LRU evicts, so it may be gone).
    pub fn remove_fast(
        &self,
        key: &weir_flow_key,
        reverse: Option<&weir_flow_key>,
    ) -> Result<bool> {
        let removed = self
            .conns
            .delete(key)
            .context("deleting a fast-table entry")?;
        if let Some(rkey) = reverse {
            self.rev_nat
                .delete(rkey)
                .context("deleting a fast reverse-NAT entry")?;
        }
        Ok(removed)
    }

    /// Hybrid tier: every fast-table entry with its `hits` (batched reads,
    /// for the offload policy). Entries change meanwhile: each is read
    /// whole, but the set is no snapshot.
    pub fn fast_entries(&self) -> Result<Vec<(weir_flow_key, weir_conn)>> {
        self.conns.entries().context("reading the fast table")
    }

    /// Entries in the half-open table (walks it: O(n)).
    pub fn half_open_count(&self) -> usize {
        self.half_open.keys().count()
    }

    /// The connection of a half-open entry.
    pub fn half_open(&self, key: &weir_flow_key) -> Result<Option<weir_conn>> {
        Ok(self.half_open_entry(key)?.map(|h| h.conn))
    }

    /// A half-open entry whole: the connection and, in nat mode, the
    /// reverse entry its DIP's replies use until the handshake is done.
    pub fn half_open_entry(&self, key: &weir_flow_key) -> Result<Option<weir_half_open>> {
        get(&self.half_open, key.as_bytes())
    }

    pub fn put_half_open(&self, key: &weir_flow_key, entry: &weir_half_open) -> Result<()> {
        self.half_open
            .update(key.as_bytes(), entry.as_bytes(), MapFlags::ANY)
            .context("writing a half-open connection")
    }

    /// Makes `nat_endpoints` hold exactly `wanted`: the endpoints of nat
    /// DIPs (whose replies must never leave without their connection), each
    /// with the nat VIPs it serves.
    pub fn sync_nat_endpoints(
        &self,
        wanted: &HashMap<weir_endpoint, weir_nat_endpoint>,
    ) -> Result<()> {
        let present: Vec<weir_endpoint> = self
            .nat_endpoints
            .keys()
            .filter_map(|k| weir_endpoint::from_bytes(&k))
            .collect();
        for (ep, vips) in wanted {
            if get::<weir_nat_endpoint>(&self.nat_endpoints, ep.as_bytes())?.as_ref() == Some(vips)
            {
                continue;
            }
            self.nat_endpoints
                .update(ep.as_bytes(), vips.as_bytes(), MapFlags::ANY)
                .context("writing a nat endpoint (raise dataplane.max_dips)")?;
        }
        for ep in present.iter().filter(|ep| !wanted.contains_key(ep)) {
            self.nat_endpoints
                .delete(ep.as_bytes())
                .context("deleting a nat endpoint")?;
        }
        Ok(())
    }
}

/// The combined counters of `enum weir_stat_path`: (slot, event, outcome).
const COMBINED_STATS: [(u32, u32, u32); 4] = [
    (WEIR_STAT_HIT_TX, WEIR_STAT_CONN_HIT, WEIR_STAT_TX),
    (
        WEIR_STAT_HIT_REDIRECT,
        WEIR_STAT_CONN_HIT,
        WEIR_STAT_REDIRECT,
    ),
    (WEIR_STAT_REV_TX, WEIR_STAT_REV_NAT, WEIR_STAT_TX),
    (
        WEIR_STAT_REV_REDIRECT,
        WEIR_STAT_REV_NAT,
        WEIR_STAT_REDIRECT,
    ),
];

/// The public counters (`enum weir_stat`) from the `stats` map's slots
/// (`WEIR_STAT_SLOTS` of them, summed over CPUs): each combined counter is
/// added to its event and its outcome, and RX, which the data plane does
/// not count, is the sum of the outcomes (every packet ends in one).
pub fn fold_stats(raw: &[u64]) -> Vec<u64> {
    let mut s = vec![0u64; WEIR_STAT_MAX as usize];
    for (i, v) in raw.iter().take(WEIR_STAT_MAX as usize).enumerate() {
        s[i] = *v;
    }
    for (slot, event, outcome) in COMBINED_STATS {
        let n = raw.get(slot as usize).copied().unwrap_or(0);
        s[event as usize] += n;
        s[outcome as usize] += n;
    }
    s[WEIR_STAT_RX as usize] = (WEIR_STAT_PASS_NOT_IP..=WEIR_STAT_LAST_OUTCOME)
        .map(|i| s[i as usize])
        .sum();
    s
}

/// What [`Maps::publish_table`] wrote besides the version word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Stage-2 rows written (new or changed classes).
    pub rows_written: u32,
    /// Stage-2 rows emptied (classes that no longer exist).
    pub rows_deleted: u32,
    /// The stage-1 ranges changed.
    pub ranges_written: bool,
}

impl PublishReport {
    /// Map writes in all, the version flip excluded.
    pub fn writes(&self) -> u32 {
        self.rows_written + self.rows_deleted + u32::from(self.ranges_written)
    }
}

/// Where the stage-2 row of (VIP, slot, range) sits in `class_members`
/// (weir.h).
fn class_row(vip_id: u32, slot: u32, range: u32) -> u32 {
    (vip_id * WEIR_TABLE_SLOTS + slot) * WEIR_MAX_CLASSES + range
}

/// Equal rows: the same count and the same members (the bytes past `nr`
/// are never read).
fn same_members(a: &weir_class_members, b: &weir_class_members) -> bool {
    let n = a.nr.min(WEIR_MAX_CLASS_MEMBERS) as usize;
    a.nr == b.nr && a.dip_id[..n] == b.dip_id[..n]
}

/// Entries per batch syscall of [`read_all`].
const BATCH: u32 = 4096;

/// Every entry of a hash map, read in batches (BPF_MAP_LOOKUP_BATCH).
///
/// libbpf-rs's batch iterator takes a short batch for the last one, but a
/// hash map returns whole buckets, so a short batch may come anywhere: this
/// reads on until the kernel says the map is done (ENOENT).
/// Every entry of a per-CPU array of u64, added up over CPUs, by key.
fn sum_percpu_u64(map: &MapHandle) -> Result<Vec<u64>> {
    let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
    let entries = map.max_entries() as usize;
    let mut keys = vec![0u32; entries];
    let mut values = vec![0u64; entries * cpus];
    let mut count = entries as u32;
    let mut pos_out = [0u8; 8];
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    // SAFETY: the buffers hold every key of the array and its value on
    // every possible CPU (8 bytes each), the position 8 bytes.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
            map.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            pos_out.as_mut_ptr().cast(),
            keys.as_mut_ptr().cast(),
            values.as_mut_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    // ENOENT: the batch reached the end, which for a whole array it does.
    if rc < 0 && rc != -libc::ENOENT {
        bail!(
            "BPF_MAP_LOOKUP_BATCH on map {}: {}",
            map.name().to_string_lossy(),
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    let mut sums = vec![0u64; entries];
    for (i, &k) in keys.iter().enumerate().take(count as usize) {
        if let Some(slot) = sums.get_mut(k as usize) {
            *slot = values[i * cpus..(i + 1) * cpus].iter().sum();
        }
    }
    Ok(sums)
}

pub(crate) fn read_all<K: AsBytes, V: AsBytes>(map: &MapHandle) -> Result<Vec<(K, V)>> {
    let (ks, vs) = (map.key_size() as usize, map.value_size() as usize);
    if (ks, vs) != (std::mem::size_of::<K>(), std::mem::size_of::<V>()) {
        bail!(
            "map {} has keys/values of {ks}/{vs} bytes, not {}/{}",
            map.name().to_string_lossy(),
            std::mem::size_of::<K>(),
            std::mem::size_of::<V>()
        );
    }
    let mut keys = vec![0u8; ks * BATCH as usize];
    let mut values = vec![0u8; vs * BATCH as usize];
    // The position between batches: for hash maps a bucket index (u32).
    let (mut pos_in, mut pos_out) = ([0u8; 8], [0u8; 8]);
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    let mut out = Vec::new();
    let mut first = true;
    loop {
        let mut count = BATCH;
        // SAFETY: the buffers hold BATCH keys and values of the map's sizes
        // and the positions 8 bytes, more than a hash map's token.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                map.as_fd().as_raw_fd(),
                if first {
                    std::ptr::null_mut()
                } else {
                    pos_in.as_mut_ptr().cast()
                },
                pos_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        if rc < 0 && rc != -libc::ENOENT {
            bail!(
                "BPF_MAP_LOOKUP_BATCH on map {}: {}",
                map.name().to_string_lossy(),
                std::io::Error::from_raw_os_error(-rc)
            );
        }
        for i in 0..count as usize {
            let k = K::from_bytes(&keys[i * ks..(i + 1) * ks]);
            let v = V::from_bytes(&values[i * vs..(i + 1) * vs]);
            out.extend(k.zip(v));
        }
        if rc == -libc::ENOENT {
            return Ok(out);
        }
        pos_in = pos_out;
        first = false;
    }
}

/// Deletes every key of `keys` (the map's key size each, back to back)
/// that `map` holds, BPF_MAP_DELETE_BATCH at a time; returns how many it
/// deleted. The kernel stops a batch at the first key it does not hold,
/// so the next batch starts past that key.
pub(crate) fn delete_all(map: &MapHandle, keys: &[u8]) -> Result<usize> {
    let ks = map.key_size() as usize;
    if ks == 0 || !keys.len().is_multiple_of(ks) {
        bail!(
            "deleting from map {}: {} bytes of keys are no whole number of {ks}-byte keys",
            map.name().to_string_lossy(),
            keys.len()
        );
    }
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    let total = keys.len() / ks;
    let (mut next, mut deleted) = (0usize, 0usize);
    while next < total {
        let mut count = (total - next).min(BATCH as usize) as u32;
        // SAFETY: `count` keys of the map's key size follow `next` in
        // `keys`; the kernel only reads them, and writes `count`.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_delete_batch(
                map.as_fd().as_raw_fd(),
                keys[next * ks..].as_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        deleted += count as usize;
        next += count as usize;
        if rc == -libc::ENOENT {
            // Key `next` is not there (evicted, or deleted by the data
            // plane): skip it.
            next += 1;
        } else if rc < 0 {
            bail!(
                "BPF_MAP_DELETE_BATCH on map {}: {}",
                map.name().to_string_lossy(),
                std::io::Error::from_raw_os_error(-rc)
            );
        }
    }
    Ok(deleted)
}

fn traffic(map: &MapHandle, id: u32) -> Result<Traffic> {
    let w = sum_percpu(map, id, 3)?;
    Ok(Traffic {
        packets: w[0],
        bytes: w[1],
        new_conns: w[2],
    })
}

/// The value of `table_version`: a bare u32.
#[derive(Debug, Clone, Copy, Default)]
#[repr(transparent)]
struct VersionWord(u32);
// SAFETY: a u32 is padding-free POD.
unsafe impl AsBytes for VersionWord {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_counters_count_their_event_and_outcome_and_rx_adds_up() {
        let mut raw = vec![0u64; WEIR_STAT_SLOTS as usize];
        raw[WEIR_STAT_PASS_NOT_VIP as usize] = 5;
        raw[WEIR_STAT_TX as usize] = 2;
        raw[WEIR_STAT_CONN_HIT as usize] = 1; // a hit that ended otherwise
        raw[WEIR_STAT_DROP_REDIRECT as usize] = 1;
        raw[WEIR_STAT_HIT_TX as usize] = 10;
        raw[WEIR_STAT_HIT_REDIRECT as usize] = 20;
        raw[WEIR_STAT_REV_TX as usize] = 300;
        raw[WEIR_STAT_REV_REDIRECT as usize] = 4000;
        let s = fold_stats(&raw);
        assert_eq!(s.len(), WEIR_STAT_MAX as usize);
        assert_eq!(s[WEIR_STAT_CONN_HIT as usize], 31);
        assert_eq!(s[WEIR_STAT_REV_NAT as usize], 4300);
        assert_eq!(s[WEIR_STAT_TX as usize], 312);
        assert_eq!(s[WEIR_STAT_REDIRECT as usize], 4020);
        assert_eq!(s[WEIR_STAT_RX as usize], 5 + 312 + 4020 + 1);
    }
}
