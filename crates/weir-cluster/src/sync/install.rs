//! Between sync records and this node's connection table: installing a
//! peer's connection, and reading this node's connections for a bulk.
//!
//! A record names its VIP by the client tuple's destination and its DIP by
//! identity; both are translated to this node's VIP id and DIP slot (with
//! the slot's generation, so a DIP removed here later strands nothing). A
//! record never replaces an entry this node has (BPF_NOEXIST: a node's own
//! view of a connection wins). Peers' entries are bounded: at most
//! `budget` of them sit in the table, so peers, whatever they send, cannot
//! make the LRU table evict this node's own connections unless they alone
//! would fill it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use weir_abi::*;
use weir_core::dispatch::awfd::DipId;
use weir_dataplane::conntrack::{idle_past, now_ticks, timeout};
use weir_dataplane::loader::ConnTimeouts;
use weir_dataplane::maps::Maps;

use crate::apply::dip_ref;
use crate::record::DipRef;
use crate::sync::wire::ConnRecord;

/// How often the VIP and DIP translations are read again at most, when a
/// record names something they do not know (a reload may have added it).
const REFRESH_EVERY: Duration = Duration::from_millis(100);
/// How often peers' entries are counted again at most when their share
/// looks full (entries expire and the LRU evicts without telling us).
const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    /// This node already has the connection.
    Present,
    /// No such VIP, or no live DIP of that identity in it, here.
    Unknown,
    /// Peers' entries fill their share of the table.
    Full,
}

/// A local DIP slot: id and generation.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: DipId,
    gen: u32,
}

fn us_to_ticks(us: u32) -> u32 {
    ((u64::from(us) * 1000) >> WEIR_TICK_SHIFT) as u32
}

fn ticks_to_us(t: u32) -> u32 {
    ((u64::from(t) << WEIR_TICK_SHIFT) / 1000).min(u64::from(u32::MAX)) as u32
}

/// Installs peers' connections into this node's `conns`.
pub struct Installer {
    maps: Maps,
    budget: usize,
    /// Keys of the entries peers put here (some may have gone since).
    ours: HashSet<weir_flow_key>,
    last_recount: Option<Instant>,
    vips: HashMap<weir_vip_key, u32>,
    slots: HashMap<(u32, DipRef), Slot>,
    last_refresh: Option<Instant>,
}

impl Installer {
    pub fn new(maps: Maps, budget: u32) -> Installer {
        Installer {
            maps,
            budget: budget as usize,
            ours: HashSet::new(),
            last_recount: None,
            vips: HashMap::new(),
            slots: HashMap::new(),
            last_refresh: None,
        }
    }

    /// Peers' entries this node holds, as last counted.
    pub fn peer_entries(&self) -> usize {
        self.ours.len()
    }

    fn refresh(&mut self, now: Instant) -> Result<()> {
        if self
            .last_refresh
            .is_some_and(|t| now.duration_since(t) < REFRESH_EVERY)
        {
            return Ok(());
        }
        self.last_refresh = Some(now);
        self.vips = self
            .maps
            .vips()?
            .into_iter()
            .map(|(k, v)| (k, v.vip_id))
            .collect();
        self.slots.clear();
        for id in 0..self.maps.dip_slots() {
            let Some(d) = self.maps.dip(id)? else {
                continue;
            };
            if d.flags & WEIR_DIP_F_LIVE == 0 {
                continue;
            }
            if let Some(r) = dip_ref(&d) {
                self.slots.insert((d.vip_id, r), Slot { id, gen: d.gen });
            }
        }
        Ok(())
    }

    fn translate(&self, r: &ConnRecord) -> Option<(u32, Slot)> {
        let k = &r.key;
        let vip = weir_vip_key {
            addr: k.dst,
            port: k.dport,
            proto: k.proto,
            family: k.family,
        };
        let vip_id = *self.vips.get(&vip)?;
        let dip = dip_ref(&weir_dip {
            addr: r.dip_addr,
            port: r.dip_port,
            family: k.family,
            ..Default::default()
        })?;
        let slot = *self.slots.get(&(vip_id, dip))?;
        Some((vip_id, slot))
    }

    /// Drops the keys of entries that are gone (expired, evicted, replaced).
    fn recount(&mut self, now: Instant) {
        if self
            .last_recount
            .is_some_and(|t| now.duration_since(t) < RECOUNT_EVERY)
        {
            return;
        }
        self.last_recount = Some(now);
        let conns = &self.maps.conns;
        self.ours.retain(|k| conns.get(k).ok().flatten().is_some());
    }

    /// Installs one record, received at `now`.
    pub fn install(&mut self, r: &ConnRecord, now: Instant) -> Result<Outcome> {
        let mut found = self.translate(r);
        if found.is_none() {
            self.refresh(now)?;
            found = self.translate(r);
        }
        let Some((vip_id, slot)) = found else {
            return Ok(Outcome::Unknown);
        };
        if self.ours.len() >= self.budget {
            self.recount(now);
            if self.ours.len() >= self.budget {
                return Ok(Outcome::Full);
            }
        }
        let idle = us_to_ticks(r.idle_us);
        let entry = weir_conn {
            dip_id: slot.id,
            dip_gen: slot.gen,
            table_version: self.maps.table_version(vip_id)?,
            created_ns: weir_sys::monotonic_ns().saturating_sub(u64::from(r.idle_us) * 1000),
            atime: now_ticks().wrapping_sub(idle),
            close_flags: r.close_flags,
            ..Default::default()
        };
        if !self.maps.conns.insert_new(&r.key, &entry)? {
            return Ok(Outcome::Present);
        }
        self.ours.insert(r.key);
        Ok(Outcome::Installed)
    }
}

/// Every live connection of this node's table, as records (a bulk).
/// Expired entries and entries of removed DIPs are left out.
pub fn table_records(maps: &Maps, timeouts: &ConnTimeouts) -> Result<Vec<ConnRecord>> {
    let t = timeouts.ticks();
    let now = now_ticks();
    let mut dips: HashMap<u32, weir_dip> = HashMap::new();
    for id in 0..maps.dip_slots() {
        if let Some(d) = maps.dip(id)? {
            dips.insert(id, d);
        }
    }
    let mut out = Vec::new();
    for (key, c) in maps.fast_entries()? {
        if idle_past(c.atime, timeout(&c, key.proto, &t), now) {
            continue;
        }
        let Some(d) = dips
            .get(&c.dip_id)
            .filter(|d| d.flags & WEIR_DIP_F_LIVE != 0 && d.gen == c.dip_gen)
        else {
            continue;
        };
        out.push(ConnRecord {
            key,
            dip_addr: d.addr,
            dip_port: d.port,
            close_flags: c.close_flags,
            idle_us: ticks_to_us(now.wrapping_sub(c.atime)),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_times_convert_between_ticks_and_microseconds() {
        assert_eq!(us_to_ticks(1_048_576 / 1000 * 1000), 999);
        assert_eq!(us_to_ticks(0), 0);
        assert_eq!(ticks_to_us(1000), 1_048_576);
        assert_eq!(ticks_to_us(u32::MAX), u32::MAX, "saturates");
        for t in [1u32, 953, 858_306] {
            let back = us_to_ticks(ticks_to_us(t));
            assert!(back == t || back + 1 == t, "{t} -> {back}");
        }
    }
}
