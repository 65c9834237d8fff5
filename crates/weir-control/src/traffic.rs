//! Traffic per VIP and per DIP whichever tier handled it: XDP's per-CPU
//! counters plus, with a software or hybrid tier, the workers' own (as of
//! their last report, at most a second old). `weir status`, the API,
//! /metrics and the controller's shares of new connections all read it here,
//! so they agree in every tier.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use weir_dataplane::maps::{Maps, Traffic as XdpTraffic};
use weir_software::stats::Traffic as WorkerTraffic;

/// XDP's counters and the workers' last reports, summed over workers.
pub struct Traffic<'a> {
    maps: &'a Maps,
    vips: BTreeMap<u32, WorkerTraffic>,
    dips: BTreeMap<u32, WorkerTraffic>,
}

impl<'a> Traffic<'a> {
    /// Reads the workers' reports from `run_dir` (none without one, or
    /// without a tier); the maps are read per query.
    pub fn read(maps: &'a Maps, run_dir: Option<&Path>) -> Traffic<'a> {
        let mut t = Traffic {
            maps,
            vips: BTreeMap::new(),
            dips: BTreeMap::new(),
        };
        for w in run_dir
            .map(crate::tier::read_worker_stats)
            .unwrap_or_default()
        {
            add_all(&mut t.vips, &w.vip_traffic);
            add_all(&mut t.dips, &w.dip_traffic);
        }
        t
    }

    pub fn vip(&self, vip_id: u32) -> Result<XdpTraffic> {
        Ok(plus(self.maps.vip_traffic(vip_id)?, self.vips.get(&vip_id)))
    }

    pub fn dip(&self, slot: u32) -> Result<XdpTraffic> {
        Ok(plus(self.maps.dip_traffic(slot)?, self.dips.get(&slot)))
    }
}

fn add_all(sum: &mut BTreeMap<u32, WorkerTraffic>, more: &BTreeMap<u32, WorkerTraffic>) {
    for (id, t) in more {
        let s = sum.entry(*id).or_default();
        s.packets += t.packets;
        s.bytes += t.bytes;
        s.new_conns += t.new_conns;
    }
}

fn plus(mut xdp: XdpTraffic, workers: Option<&WorkerTraffic>) -> XdpTraffic {
    if let Some(w) = workers {
        xdp.packets += w.packets;
        xdp.bytes += w.bytes;
        xdp.new_conns += w.new_conns;
    }
    xdp
}
