//! Applying a configuration to the maps, keeping every established
//! connection on its DIP (per-connection consistency).
//!
//! DIP slots and VIP ids are recovered from the (pinned) maps, so a restarted
//! daemon keeps the ids its connection entries refer to. Order matters:
//! a new DIP is written before any table names it; a removed DIP leaves the
//! tables first and only then loses its LIVE flag (which is what makes its
//! connections move: they have nowhere to go).

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use weir_abi::*;
use weir_config::{Config, Mode};
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::addr_words;
use weir_dataplane::iface::parse_mac;
use weir_dataplane::maps::Maps;

/// What an apply changed, for the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub vips_added: usize,
    pub vips_removed: usize,
    pub dips_added: usize,
    pub dips_removed: usize,
    pub tables_published: usize,
}

pub(crate) fn vip_key(v: &weir_config::Vip) -> weir_vip_key {
    let (addr, family) = addr_words(*v.address.get_ref());
    weir_vip_key {
        addr,
        port: v.port.get_ref().to_be(),
        proto: v.protocol.number(),
        family,
    }
}

/// Identity of a DIP inside its VIP: address and NAT port.
type DipIdentity = ([u32; 4], u16);

/// Writes `cfg` into the maps. Idempotent: applying the same configuration
/// twice changes nothing, not even the table versions (a table is published
/// only when it differs from the one in force).
pub fn apply(maps: &Maps, cfg: &Config) -> Result<ApplyReport> {
    let mut report = ApplyReport::default();
    let max_vips = cfg.dataplane.max_vips;

    // What the data plane holds now.
    let existing_vips: HashMap<weir_vip_key, weir_vip> = maps.vips()?.into_iter().collect();
    let mut slots: BTreeMap<u32, weir_dip> = BTreeMap::new();
    for id in 0..maps.dip_slots() {
        if let Some(d) = maps.dip(id)? {
            slots.insert(id, d);
        }
    }

    // VIP ids: keep existing ones, hand out free ones to new VIPs. The id
    // of a VIP being removed is not reused in the same apply, since its
    // table is emptied below.
    let mut used_ids: Vec<bool> = vec![false; max_vips as usize];
    for v in existing_vips.values() {
        if let Some(u) = used_ids.get_mut(v.vip_id as usize) {
            *u = true;
        }
    }
    let mut wanted: Vec<(weir_vip_key, u32)> = Vec::new();
    let mut server_ids: HashMap<weir_quic_sid_key, weir_quic_route> = HashMap::new();
    for v in &cfg.vips {
        let key = vip_key(v);
        if let Some(old) = existing_vips.get(&key) {
            if old.vip_id < max_vips {
                wanted.push((key, old.vip_id));
                continue;
            }
        }
        wanted.push((key, u32::MAX));
    }
    for (_, id) in wanted.iter_mut().filter(|(_, id)| *id == u32::MAX) {
        let free = used_ids
            .iter()
            .position(|u| !u)
            .context("no free VIP id: raise dataplane.max_vips")?;
        used_ids[free] = true;
        *id = free as u32;
        report.vips_added += 1;
    }

    for (v, (key, vip_id)) in cfg.vips.iter().zip(&wanted) {
        let vip_id = *vip_id;
        // DIP slots of this VIP that are live now, by identity.
        let mut live: HashMap<DipIdentity, u32> = slots
            .iter()
            .filter(|(_, d)| d.flags & WEIR_DIP_F_LIVE != 0 && d.vip_id == vip_id)
            .map(|(id, d)| ((d.addr, d.port), *id))
            .collect();
        let mut weights = Vec::with_capacity(v.dips.len());
        for d in &v.dips {
            let (addr, family) = addr_words(*d.address.get_ref());
            let port = d.port.as_ref().map_or(0, |p| p.get_ref().to_be());
            let (mac_set, mac) = match &d.mac {
                Some(m) => (1, parse_mac(m.get_ref())?),
                None => (0, [0; 6]),
            };
            let id = match live.remove(&(addr, port)) {
                Some(id) => id,
                None => {
                    let id = (0..maps.dip_slots())
                        .find(|id| slots.get(id).is_none_or(|s| s.flags & WEIR_DIP_F_LIVE == 0))
                        .context("no free DIP slot: raise dataplane.max_dips")?;
                    report.dips_added += 1;
                    id
                }
            };
            let prev = slots.get(&id).copied().unwrap_or_default();
            let fresh = prev.flags & WEIR_DIP_F_LIVE == 0;
            // A DIP added to a health-checked VIP that serves gets new
            // connections once its first check passes (the controller's
            // health monitor): until then it is in no table.
            let awaiting_check = fresh && v.health.is_some() && existing_vips.contains_key(key);
            let dip = weir_dip {
                addr,
                port,
                family,
                mac_set,
                mac,
                pad: [0; 2],
                flags: WEIR_DIP_F_LIVE,
                // A reused slot gets a new generation so connections of its
                // previous tenant never land on the new one.
                gen: if fresh {
                    prev.gen.wrapping_add(1)
                } else {
                    prev.gen
                },
                vip_id,
                weight: if awaiting_check {
                    0
                } else {
                    *d.weight.get_ref()
                },
                // The next hop resolved for this very DIP stays until the
                // resolver says otherwise; a new tenant starts unresolved.
                nh: if fresh { Default::default() } else { prev.nh },
            };
            maps.put_dip(id, &dip)?;
            slots.insert(id, dip);
            if let Some(sid) = d.server_id_octets(v) {
                let mut key = weir_quic_sid_key {
                    vip_id,
                    ..Default::default()
                };
                key.sid[..sid.len()].copy_from_slice(&sid);
                server_ids.insert(
                    key,
                    weir_quic_route {
                        dip_id: id,
                        dip_gen: dip.gen,
                    },
                );
            }
            weights.push((id, dip.weight));
        }
        let table = AwfdTable::from_weights(&weights)
            .map_err(|e| anyhow::anyhow!("VIP {}: {e}", v.name.get_ref()))?;
        // A change that leaves the table as it is publishes no version.
        if !maps.holds_table(vip_id, &table)? {
            let version = maps.table_version(vip_id)?.wrapping_add(1);
            maps.publish_table(vip_id, version, &table)?;
            report.tables_published += 1;
        }
        let mode = match v.mode {
            Mode::Nat => WEIR_MODE_NAT,
            Mode::Dsr => WEIR_MODE_DSR,
            Mode::Ipip => WEIR_MODE_IPIP,
            Mode::Gue => WEIR_MODE_GUE,
        } as u8;
        maps.put_vip(
            key,
            &weir_vip {
                vip_id,
                mode,
                quic_sid_len: v.quic.as_ref().map_or(0, |q| *q.server_id_len.get_ref()),
                quic_config_id: v.quic.as_ref().map_or(0, |q| *q.config_id.get_ref()),
                pad: 0,
            },
        )?;
        // DIPs that left the configuration: out of the table (done above),
        // now out of service.
        for (_, id) in live {
            retire(maps, &mut slots, id)?;
            report.dips_removed += 1;
        }
    }

    maps.sync_nat_endpoints(&nat_endpoints(cfg))?;
    // A removed DIP's server IDs go with it: its connection IDs are then
    // unknown (counted), never routed to the slot's next tenant.
    maps.sync_quic_server_ids(&server_ids)?;

    // VIPs that left the configuration: stop matching them, then retire
    // their DIPs and empty their tables.
    let keep: HashMap<weir_vip_key, u32> = wanted.into_iter().collect();
    for (key, vip) in &existing_vips {
        if keep.contains_key(key) {
            continue;
        }
        maps.delete_vip(key)?;
        let version = maps.table_version(vip.vip_id)?.wrapping_add(1);
        maps.publish_table(vip.vip_id, version, &AwfdTable::default())?;
        let ids: Vec<u32> = slots
            .iter()
            .filter(|(_, d)| d.flags & WEIR_DIP_F_LIVE != 0 && d.vip_id == vip.vip_id)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            retire(maps, &mut slots, id)?;
            report.dips_removed += 1;
        }
        report.vips_removed += 1;
    }
    // put_vip and delete_vip keep each slot right; a full pass also mends
    // a slot array that is new next to pinned `vips` (first start, takeover
    // by a weir that did not have it).
    maps.sync_vip_slots()?;
    Ok(report)
}

/// The service endpoints of every nat DIP, each with the nat VIPs it
/// serves: replies from them must belong to a connection, or the data plane
/// drops them.
fn nat_endpoints(cfg: &Config) -> HashMap<weir_endpoint, weir_nat_endpoint> {
    let mut out = HashMap::new();
    for ((addr, port, proto), users) in cfg.nat_endpoint_users() {
        let (addr, family) = addr_words(addr);
        let mut value = weir_nat_endpoint::default();
        // Validation bounds `users` by the value's room.
        for (slot, &(i, _)) in value.vips.iter_mut().zip(&users) {
            let vip = &cfg.vips[i];
            *slot = weir_vip_addr {
                addr: addr_words(*vip.address.get_ref()).0,
                port: vip.port.get_ref().to_be(),
                pad: [0; 2],
            };
            value.count += 1;
        }
        let key = weir_endpoint {
            addr,
            port: port.to_be(),
            proto,
            family,
        };
        out.insert(key, value);
    }
    out
}

fn retire(maps: &Maps, slots: &mut BTreeMap<u32, weir_dip>, id: u32) -> Result<()> {
    let Some(mut d) = slots.get(&id).copied() else {
        bail!("DIP slot {id} vanished");
    };
    d.flags &= !WEIR_DIP_F_LIVE;
    d.weight = 0;
    maps.put_dip(id, &d)?;
    slots.insert(id, d);
    Ok(())
}

/// DSR rewrites only L2 (and ipip and gue keep the client's datagram), so the
/// DIP's neighbour entry must exist before the first packet: a short TCP
/// connect makes the kernel resolve it.
pub(crate) fn prime_neighbours(cfg: &Config) {
    let targets: Vec<SocketAddr> = cfg
        .vips
        .iter()
        .filter(|v| v.mode != Mode::Nat)
        .flat_map(|v| {
            let port = *v.port.get_ref();
            v.dips
                .iter()
                .filter(|d| d.mac.is_none())
                .map(move |d| SocketAddr::new(*d.address.get_ref(), port))
        })
        .collect();
    for t in targets {
        std::thread::spawn(move || {
            let _ = TcpStream::connect_timeout(&t, Duration::from_millis(500));
        });
    }
}
