//! One loaded Katran balancer (`balancer_ingress` of balancer.bpf.o),
//! configured as its control library configures it: one TCP VIP, three
//! reals, the VIP's CH ring, the default router's MAC in ctl_array, and a
//! connection table (an LRU hash, as Katran creates one per forwarding CPU)
//! in lru_mapping, filled to `size` connections.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, Object, ObjectBuilder, ProgramMut};
use weir_core::splitmix::SplitMix;

use super::layout::{self, stat};
use crate::bench::xdp::packet::{flow, Family};
use crate::bench::xdp::{FILL_BATCH, VIP_PORT};

/// The program's name in Katran's object.
const PROG: &str = "balancer_ingress";
/// The bench's VIP is Katran's VIP number 0.
const VIP_NUM: u32 = 0;
/// Reals behind the VIP (Katran's real ids start at 1).
pub(super) const REALS: u32 = 3;
/// Where encapsulated packets go: the default router's MAC (ctl_array[0]).
const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0e];
const IPPROTO_TCP: u8 = 6;

/// A loaded, configured Katran with its connection table filled.
pub(super) struct Katran {
    pub(super) family: Family,
    pub(super) size: u64,
    obj: Object,
    /// MAX_VIPS of the build: where the global counters start in "stats".
    max_vips: u32,
    /// The connection table every CPU's lru_mapping entry names.
    lru: MapHandle,
    /// Installed connections no packet has used yet, in random order.
    untouched: Vec<u32>,
}

impl Katran {
    /// Loads `object`, configures it for `family` and gives it a connection
    /// table of `capacity` entries (not filled yet: `fill`).
    pub(super) fn load(object: &Path, family: Family, size: u64, capacity: u32) -> Result<Katran> {
        let open = ObjectBuilder::default()
            .open_file(object)
            .with_context(|| {
                format!(
                    "opening Katran's object {}: give the balancer.bpf.o that lab/scripts/katran-build.sh built, or --source",
                    object.display()
                )
            })?;
        let obj = open.load().with_context(|| {
            format!(
                "loading Katran's balancer from {} (the bench needs root)",
                object.display()
            )
        })?;
        let stats_len = map_of(&obj, "stats")?.max_entries();
        let max_vips = stats_len / 2;
        let lru = MapHandle::create(
            MapType::LruHash,
            Some("katran_lru"),
            layout::FLOW_KEY_LEN as u32,
            layout::REAL_POS_LRU_LEN as u32,
            capacity,
            &libbpf_rs::libbpf_sys::bpf_map_create_opts {
                sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
                ..Default::default()
            },
        )
        .context("creating Katran's connection table (an LRU hash)")?;
        let k = Katran {
            family,
            size,
            obj,
            max_vips,
            lru,
            untouched: Vec::new(),
        };
        k.check_layout()?;
        k.configure()?;
        Ok(k)
    }

    /// Refuses a build whose maps do not have the layout this bench writes.
    fn check_layout(&self) -> Result<()> {
        for (name, key, value) in [
            ("vip_map", layout::VIP_DEFINITION_LEN, layout::VIP_META_LEN),
            ("reals", 4, layout::REAL_DEFINITION_LEN),
            ("ch_rings", 4, 4),
            ("ctl_array", 4, layout::CTL_VALUE_LEN),
            ("stats", 4, layout::LB_STATS_LEN),
            ("lru_mapping", 4, 4),
        ] {
            let m = self.map(name)?;
            ensure!(
                m.key_size() as usize == key && m.value_size() as usize == value,
                "Katran's map {name} has {}-byte keys and {}-byte values, the bench writes {key} and {value}: \
                 this Katran's layout is not the one the bench knows (balancer_structs.h)",
                m.key_size(),
                m.value_size()
            );
        }
        Ok(())
    }

    fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>> {
        map_of(&self.obj, name)
    }

    /// The VIP, its reals and ring, the router's MAC, and the connection
    /// table in every CPU's slot of lru_mapping.
    fn configure(&self) -> Result<()> {
        let vip = self.family.vip();
        self.map("vip_map")?
            .update(
                &layout::vip_definition(vip, VIP_PORT, IPPROTO_TCP),
                &layout::vip_meta(0, VIP_NUM),
                MapFlags::ANY,
            )
            .context("adding the VIP to Katran's vip_map")?;
        let reals = self.map("reals")?;
        for id in 1..=REALS {
            reals
                .update(
                    &id.to_ne_bytes(),
                    &layout::real_definition(real_addr(self.family, id)),
                    MapFlags::ANY,
                )
                .context("adding a real to Katran's reals")?;
        }
        let rings = self.map("ch_rings")?;
        let ring_size = rings.max_entries() / self.max_vips;
        let ring = layout::ch_ring(ring_size, REALS);
        let base = VIP_NUM * ring_size;
        for chunk in (0..ring_size).collect::<Vec<_>>().chunks(FILL_BATCH) {
            let keys: Vec<u8> = chunk
                .iter()
                .flat_map(|&p| (base + p).to_ne_bytes())
                .collect();
            let values: Vec<u8> = chunk
                .iter()
                .flat_map(|&p| ring[p as usize].to_ne_bytes())
                .collect();
            rings
                .update_batch(
                    &keys,
                    &values,
                    chunk.len() as u32,
                    MapFlags::ANY,
                    MapFlags::ANY,
                )
                .context("writing the VIP's ring into Katran's ch_rings")?;
        }
        self.map("ctl_array")?
            .update(
                &0u32.to_ne_bytes(),
                &layout::ctl_mac(ROUTER_MAC),
                MapFlags::ANY,
            )
            .context("writing the router's MAC into Katran's ctl_array")?;
        // Katran's library gives each forwarding CPU a table of its own; the
        // bench's calls may run on any CPU, so every slot names the one table.
        let mapping = self.map("lru_mapping")?;
        let fd = {
            use std::os::fd::{AsFd, AsRawFd};
            self.lru.as_fd().as_raw_fd() as u32
        };
        let slots = mapping
            .max_entries()
            .min(libbpf_rs::num_possible_cpus()? as u32);
        for cpu in 0..slots {
            mapping
                .update(&cpu.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
                .context("installing the connection table in Katran's lru_mapping")?;
        }
        Ok(())
    }

    /// Installs connections 0..size (the same flows as weir's tables), each
    /// on a real of the ring, and deals them out in a random order.
    pub(super) fn fill(&mut self, rng: &mut SplitMix) -> Result<()> {
        let mut i = 0u64;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        while i < self.size {
            let n = (self.size - i).min(FILL_BATCH as u64);
            keys.clear();
            values.clear();
            for j in i..i + n {
                keys.extend_from_slice(&self.key(j));
                values
                    .extend_from_slice(&layout::real_pos_lru(1 + (j % u64::from(REALS)) as u32, 0));
            }
            self.lru
                .update_batch(&keys, &values, n as u32, MapFlags::ANY, MapFlags::ANY)
                .context("batch update of Katran's connection table")?;
            i += n;
        }
        let n = self.size;
        let mut sample: Vec<u64> = vec![0, n - 1];
        sample.extend((0..1000.min(n)).map(|_| rng.below(n)));
        for j in sample {
            if self.installed(j)?.is_none() {
                bail!("connection {j} of {n} is missing from Katran's table (evicted?)");
            }
        }
        let mut order: Vec<u32> = (0..n as u32).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k as u64 + 1) as usize);
        }
        self.untouched = order;
        Ok(())
    }

    /// An installed connection no packet has used yet while there are any,
    /// else a random one.
    pub(super) fn draw(&mut self, rng: &mut SplitMix) -> u64 {
        match self.untouched.pop() {
            Some(k) => u64::from(k),
            None => rng.below(self.size),
        }
    }

    /// The connection-table key of connection `i`.
    fn key(&self, i: u64) -> [u8; layout::FLOW_KEY_LEN] {
        let f = flow(self.family, i);
        layout::flow_key(f.src, f.dst, f.sport, f.dport, IPPROTO_TCP)
    }

    /// The real connection `i` is installed on, if it is.
    pub(super) fn installed(&self, i: u64) -> Result<Option<u32>> {
        Ok(self
            .lru
            .lookup(&self.key(i), MapFlags::ANY)
            .context("looking a connection up in Katran's table")?
            .map(|v| layout::real_pos_of(&v)))
    }

    pub(super) fn prog(&self) -> Result<ProgramMut<'_>> {
        self.obj
            .progs_mut()
            .find(|p| p.name() == PROG)
            .with_context(|| format!("Katran's object has no program {PROG}"))
    }

    /// (v1, v2) of a global counter, summed over CPUs.
    pub(super) fn stat(&self, index: u32) -> Result<(u64, u64)> {
        let key = (self.max_vips + index).to_ne_bytes();
        let per_cpu = self
            .map("stats")?
            .lookup_percpu(&key, MapFlags::ANY)
            .context("reading Katran's stats")?
            .context("Katran's stats map has no such counter")?;
        Ok(per_cpu.iter().fold((0, 0), |(a, b), v| {
            let (v1, v2) = layout::lb_stats(v);
            (a + v1, b + v2)
        }))
    }

    /// Starts a new second of Katran's new-connection rate limit: past
    /// MAX_CONN_RATE new connections in one second it stops installing
    /// them (is_under_flood), and test runs send SYNs faster than a
    /// second's worth of that. A series of SYNs starts with this so that
    /// every SYN it times takes the installing path, as weir's do.
    pub(super) fn reset_conn_rate(&self) -> Result<()> {
        let key = (self.max_vips + stat::NEW_CONN_RATE_CNTR).to_ne_bytes();
        let cpus = libbpf_rs::num_possible_cpus()?;
        let zero = vec![vec![0u8; layout::LB_STATS_LEN]; cpus];
        self.map("stats")?
            .update_percpu(&key, &zero, MapFlags::ANY)
            .context("resetting Katran's new-connection rate counter")
    }
}

fn map_of<'o>(obj: &'o Object, name: &str) -> Result<libbpf_rs::Map<'o>> {
    obj.maps()
        .find(|m| m.name() == name)
        .with_context(|| format!("Katran's object has no map {name}: is it balancer.bpf.o?"))
}

/// Real `id`'s address: IPv4 reals for the IPv4 VIP, IPv6 for the IPv6 one.
fn real_addr(family: Family, id: u32) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(10, 254, 1, id as u8)),
        Family::V6 => IpAddr::V6(Ipv6Addr::new(0xfd00, 0x254, 1, 0, 0, 0, 0, id as u16)),
    }
}
