//! What the software tier reads of the data plane's maps: the VIPs, the DIP
//! slots and each VIP's active AWFD table with its version. These are the
//! very tables the controller and `apply` publish for XDP, so both tiers
//! dispatch a new connection to the same DIP.

use anyhow::{Context, Result};
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_dataplane::maps::Maps;

/// One VIP as the data plane holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct VipTable {
    pub key: weir_vip_key,
    pub vip: weir_vip,
    pub version: u32,
    pub table: AwfdTable,
}

/// Everything the software tier dispatches with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub vips: Vec<VipTable>,
    /// Occupied DIP slots, by slot id.
    pub dips: Vec<(u32, weir_dip)>,
    /// Service endpoints of nat DIPs: packets from them are replies.
    pub nat_endpoints: Vec<weir_endpoint>,
}

impl Snapshot {
    /// Reads the maps. A table is read from the slot its version word names,
    /// which the publisher filled completely before flipping the word.
    pub fn read(maps: &Maps) -> Result<Snapshot> {
        let mut vips = Vec::new();
        for (key, vip) in maps.vips()? {
            let version = maps.table_version(vip.vip_id)?;
            vips.push(VipTable {
                key,
                vip,
                version,
                table: active_table(maps, vip.vip_id, version)?,
            });
        }
        vips.sort_by_key(|v| v.vip.vip_id);
        let mut dips = Vec::new();
        for id in 0..maps.dip_slots() {
            if let Some(d) = maps.dip(id)? {
                if d.flags != 0 || d.gen != 0 {
                    dips.push((id, d));
                }
            }
        }
        let nat_endpoints = maps
            .nat_endpoints
            .keys()
            .filter_map(|k| weir_endpoint::from_bytes(&k))
            .collect();
        Ok(Snapshot {
            vips,
            dips,
            nat_endpoints,
        })
    }

    /// The versions of every VIP's table: cheap to poll, to see whether a
    /// full read is due.
    pub fn versions(maps: &Maps, vips: &[VipTable]) -> Result<Vec<u32>> {
        vips.iter()
            .map(|v| maps.table_version(v.vip.vip_id))
            .collect()
    }
}

fn active_table(maps: &Maps, vip_id: u32, version: u32) -> Result<AwfdTable> {
    let classes = maps.slot_table(vip_id, version % WEIR_TABLE_SLOTS)?;
    let weights: Vec<(u32, u32)> = classes
        .iter()
        .flat_map(|(k, members)| members.iter().map(move |m| (*m, *k)))
        .collect();
    AwfdTable::from_weights(&weights)
        .with_context(|| format!("reading the table of VIP {vip_id} (version {version})"))
}
