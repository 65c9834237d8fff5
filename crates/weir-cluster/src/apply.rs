//! Putting a published table into this node's maps.
//!
//! The record's version becomes this node's version word, so every node's
//! `weir status` and connection entries show the cluster's version. The
//! data plane reads slot `version % 2`, and a write must only ever go to
//! the inactive slot: when the record's version has the parity of the one
//! in force (this node skipped an odd number of versions, or a reload
//! published a table of its own), the table first goes in at the next local
//! version, and then in at the record's, each step one atomic flip.

use std::collections::HashMap;

use anyhow::Result;
use weir_abi::*;
use weir_core::dispatch::awfd::{AwfdTable, DipId};
use weir_core::flow::words_addr;
use weir_dataplane::maps::Maps;

use crate::record::{DipRef, Skew, TableRecord, VipRef};

/// A DIP slot's identity (`weir_dip.addr`, `port`, `family`).
pub fn dip_ref(d: &weir_dip) -> Option<DipRef> {
    Some(DipRef {
        address: words_addr(&d.addr, d.family)?,
        nat_port: u16::from_be(d.port),
    })
}

/// The VIP a `vips` key names.
pub fn vip_ref(k: &weir_vip_key) -> Option<VipRef> {
    Some(VipRef {
        address: words_addr(&k.addr, k.family)?,
        port: u16::from_be(k.port),
        protocol: k.proto,
    })
}

/// The live DIP slots of VIP `vip_id`, by identity.
pub fn live_slots(maps: &Maps, vip_id: u32) -> Result<HashMap<DipRef, DipId>> {
    let mut out = HashMap::new();
    for id in 0..maps.dip_slots() {
        if let Some(d) = maps.dip(id)? {
            if let Some(r) =
                dip_ref(&d).filter(|_| d.flags & WEIR_DIP_F_LIVE != 0 && d.vip_id == vip_id)
            {
                out.insert(r, id);
            }
        }
    }
    Ok(out)
}

/// Makes `table` the VIP's table under `version`, writing only the
/// inactive slot at each step (see the module's comment).
pub fn install_version(maps: &Maps, vip_id: u32, version: u32, table: &AwfdTable) -> Result<()> {
    let current = maps.table_version(vip_id)?;
    if current % WEIR_TABLE_SLOTS == version % WEIR_TABLE_SLOTS {
        maps.publish_table(vip_id, current.wrapping_add(1), table)?;
    }
    maps.publish_table(vip_id, version, table)?;
    Ok(())
}

/// What applying a record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The table is in force at the record's version.
    Done,
    /// This node has no VIP by that name: nothing to do.
    NoSuchVip,
    /// The record does not fit this node's configuration; its table stays.
    Skewed(Skew),
}

/// Applies `record` to VIP `vip_id` (whose identity here is `here`).
/// The caller holds the node's table lock.
pub fn apply_record(
    maps: &Maps,
    vip_id: u32,
    here: &VipRef,
    record: &TableRecord,
) -> Result<Applied> {
    if *here != record.vip_ref {
        return Ok(Applied::Skewed(Skew::OtherVip {
            here: *here,
            there: record.vip_ref,
        }));
    }
    let slots = live_slots(maps, vip_id)?;
    let table = match record.to_table(&slots) {
        Ok(t) => t,
        Err(s) => return Ok(Applied::Skewed(s)),
    };
    // Weights are what `weir status` shows of each DIP; the table decides.
    let weights = record.weights();
    for (d, slot) in &slots {
        let w = weights.get(d).copied().unwrap_or(0);
        if let Some(mut cur) = maps.dip(*slot)? {
            if cur.weight != w {
                cur.weight = w;
                maps.put_dip(*slot, &cur)?;
            }
        }
    }
    install_version(maps, vip_id, record.version, &table)?;
    Ok(Applied::Done)
}

/// This node's VIPs: name-independent identity -> id.
pub fn vip_ids(maps: &Maps) -> Result<HashMap<VipRef, u32>> {
    Ok(maps
        .vips()?
        .into_iter()
        .filter_map(|(k, v)| Some((vip_ref(&k)?, v.vip_id)))
        .collect())
}
