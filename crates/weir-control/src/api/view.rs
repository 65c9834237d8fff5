//! What the management API shows: the running configuration (names,
//! configured weights) joined with the data plane's maps (table versions,
//! classes, weights in force, traffic) and the controller's snapshot
//! (capacity, load, health, share of new connections).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use weir_abi::{weir_dip, WEIR_DIP_F_LIVE, WEIR_MAX_CLASSES};
use weir_config::{Config, Mode, OnSilent, PolicyName, TelemetryKind};
use weir_core::flow::{addr_words, Proto};
use weir_dataplane::maps::Maps;

use crate::apply::vip_key;
use crate::controller::{DipSnapshot, Snapshot};
use crate::status::{Connections, QuicStatus, VipQuicStatus, STAT_NAMES};

/// Connection counts are at most this old: counting walks the tables.
pub const COUNT_MAX_AGE: Duration = Duration::from_secs(2);

/// One DIP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DipView {
    /// `ADDR:PORT` (`[ADDR]:PORT` for IPv6): its name in the API's paths.
    pub id: String,
    pub address: IpAddr,
    /// The port it serves on: its own (nat) or the VIP's (dsr).
    pub port: u16,
    /// The weight in the configuration (0: drained).
    pub config_weight: u32,
    /// The weight in the table in force (the controller's, or the
    /// configured one); its AWFD class is this weight, none at 0.
    pub weight: Option<u32>,
    pub class: Option<u32>,
    /// Its slot in the data plane (none before it is applied).
    pub slot: Option<u32>,
    pub mac: Option<String>,
    pub agent: Option<SocketAddr>,
    /// Packets and new connections the data plane sent it.
    pub packets: u64,
    pub new_conns: u64,
    /// Share of the VIP's new connections over the last second.
    pub share: Option<f64>,
    /// The controller's estimates (requests/s): C, R and A = C - R.
    pub capacity: Option<f64>,
    pub load: Option<f64>,
    pub available: Option<f64>,
    /// None without health checks.
    pub healthy: Option<bool>,
    pub health_checks: u64,
    pub health_failures: u64,
    pub agent_silent: bool,
    pub agent_misses: u32,
    pub agent_errors: BTreeMap<String, u64>,
    pub last_error: Option<String>,
    /// QUIC VIP: the DIP's server ID and how its packets were routed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<DipQuicView>,
}

/// A QUIC VIP's DIP: its server ID (hex) and routing counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DipQuicView {
    pub server_id: String,
    #[serde(flatten)]
    pub counters: QuicStatus,
}

/// One VIP and its DIPs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VipView {
    pub name: String,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: String,
    pub mode: Mode,
    /// Its id in the data plane (none before it is applied).
    pub vip_id: Option<u32>,
    /// The version of its table in force; every change publishes one.
    pub table_version: Option<u32>,
    /// The weights of the table's priority classes, highest first.
    pub classes: Vec<u32>,
    pub packets: u64,
    pub bytes: u64,
    pub new_conns: u64,
    /// Whether its DIPs are health-checked.
    pub health_checks: bool,
    /// QUIC VIP: its connection-ID layout and routing counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<VipQuicStatus>,
    pub dips: Vec<DipView>,
}

/// The controller's parameters and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerView {
    pub policy: PolicyName,
    pub m: u32,
    pub update_interval_ms: u64,
    pub telemetry: Option<TelemetryKind>,
    pub on_agent_silent: OnSilent,
    pub ticks: u64,
    pub tables_published: u64,
    pub entries_written: u64,
    /// When its snapshot was taken (ms since the epoch).
    pub at_unix_ms: u64,
}

/// Everything at once (`GET /api/v1/status`), for a dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub at_unix_ms: u64,
    pub connections: Connections,
    /// None when no controller runs (no `[controller]`, no health checks).
    pub controller: Option<ControllerView>,
    pub vips: Vec<VipView>,
    /// The data plane's counters (`enum weir_stat`) by name.
    pub counters: BTreeMap<String, u64>,
    /// The software tier's workers (HNLB utilization, connections, socket
    /// drops, offload counters), as `weir status` shows them; none with
    /// `tier = "xdp"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<serde_json::Value>,
    /// The cluster as this node sees it (nodes, leader, versions, sync);
    /// none for a single node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<weir_cluster::view::ClusterView>,
    /// What XDP steered to the software tier's sockets since they were
    /// registered, and where it went; none with `tier = "xdp"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_accounting: Option<crate::status::SoftwareAccounting>,
    /// Whether weir's program still runs on each configured interface.
    #[serde(default)]
    pub xdp_attach: Vec<crate::xdp_watch::IfaceAttach>,
    /// Whether frames weir sends out by each configured interface can
    /// leave (a veth's peer must take them).
    #[serde(default)]
    pub redirect_targets: Vec<crate::redirect_targets::RedirectTarget>,
    /// The BGP speaker's neighbours and each VIP's announcement; none
    /// without `[bgp]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<crate::bgp::BgpView>,
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A DIP's identity in the `dips` map: VIP id, address words, nat port (BE).
type DipKey = (u32, [u32; 4], u16);

/// Where each DIP lives in the `dips` map, remembered between reads. The
/// map has `max_dips` slots (4096 by default) and reading them all costs
/// milliseconds; a read instead checks the remembered slot of each DIP it
/// shows, and scans all slots again only when one no longer holds its DIP.
#[derive(Debug, Default)]
pub struct Slots {
    known: Mutex<HashMap<DipKey, u32>>,
}

impl Slots {
    /// The live slot of every DIP in `wanted` that has one.
    fn find(&self, maps: &Maps, wanted: &[DipKey]) -> HashMap<DipKey, (u32, weir_dip)> {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let holds = |slot: u32, k: &DipKey| {
            maps.dip(slot)
                .ok()
                .flatten()
                .filter(|d| d.flags & WEIR_DIP_F_LIVE != 0 && (d.vip_id, d.addr, d.port) == *k)
        };
        let cached = wanted.iter().try_fold(HashMap::new(), |mut found, k| {
            let slot = *known.get(k)?;
            found.insert(*k, (slot, holds(slot, k)?));
            Some(found)
        });
        if let Some(found) = cached {
            return found;
        }
        let live: HashMap<DipKey, (u32, weir_dip)> = (0..maps.dip_slots())
            .filter_map(|id| Some((id, maps.dip(id).ok()??)))
            .filter(|(_, d)| d.flags & WEIR_DIP_F_LIVE != 0)
            .map(|(id, d)| ((d.vip_id, d.addr, d.port), (id, d)))
            .collect();
        *known = live.iter().map(|(k, (id, _))| (*k, *id)).collect();
        live
    }
}

/// Every VIP of `cfg` as the maps and the controller's snapshot see it.
pub fn vips(
    cfg: &Config,
    maps: &Maps,
    snap: Option<&Snapshot>,
    slots: &Slots,
    run_dir: &Path,
) -> Result<Vec<VipView>> {
    let tier_traffic = crate::traffic::Traffic::read(maps, Some(run_dir));
    let ids: HashMap<_, u32> = maps
        .vips()?
        .into_iter()
        .map(|(k, v)| (k, v.vip_id))
        .collect();
    let key = |vip_id: u32, d: &weir_config::Dip| -> DipKey {
        let (words, _) = addr_words(*d.address.get_ref());
        (
            vip_id,
            words,
            d.port.as_ref().map_or(0, |p| p.get_ref().to_be()),
        )
    };
    let wanted: Vec<DipKey> = cfg
        .vips
        .iter()
        .filter_map(|v| Some((ids.get(&vip_key(v))?, v)))
        .flat_map(|(id, v)| v.dips.iter().map(move |d| key(*id, d)))
        .collect();
    let slots = slots.find(maps, &wanted);
    let mut out = Vec::with_capacity(cfg.vips.len());
    for v in &cfg.vips {
        let vip_id = ids.get(&vip_key(v)).copied();
        let from_controller: HashMap<u32, &DipSnapshot> = snap
            .and_then(|s| s.vips.iter().find(|sv| sv.name == *v.name.get_ref()))
            .map(|sv| sv.dips.iter().map(|d| (d.slot, d)).collect())
            .unwrap_or_default();
        let dips = v
            .dips
            .iter()
            .map(|d| -> Result<DipView> {
                let slot = vip_id.and_then(|id| slots.get(&key(id, d)));
                let traffic = slot.and_then(|(id, _)| tier_traffic.dip(*id).ok());
                let c = slot.and_then(|(id, _)| from_controller.get(id).copied());
                let port = d.service_port(v);
                let weight = slot.map(|(_, s)| s.weight);
                Ok(DipView {
                    id: SocketAddr::new(*d.address.get_ref(), port).to_string(),
                    address: *d.address.get_ref(),
                    port,
                    config_weight: *d.weight.get_ref(),
                    weight,
                    class: weight.filter(|&w| w > 0),
                    slot: slot.map(|(id, _)| *id),
                    mac: d.mac.as_ref().map(|m| m.get_ref().clone()),
                    agent: d.agent.as_ref().map(|a| *a.get_ref()),
                    packets: traffic.map_or(0, |t| t.packets),
                    new_conns: traffic.map_or(0, |t| t.new_conns),
                    share: c.and_then(|c| c.share),
                    capacity: c.and_then(|c| c.capacity),
                    load: c.and_then(|c| c.load),
                    available: c.and_then(|c| c.available),
                    healthy: c.and_then(|c| c.healthy),
                    health_checks: c.map_or(0, |c| c.health_checks),
                    health_failures: c.map_or(0, |c| c.health_failures),
                    agent_silent: c.is_some_and(|c| c.agent_silent),
                    agent_misses: c.map_or(0, |c| c.agent_misses),
                    agent_errors: c.map(|c| c.agent_errors.clone()).unwrap_or_default(),
                    last_error: c.and_then(|c| c.last_error.clone()),
                    quic: match (&d.server_id, slot) {
                        (Some(id), Some((slot, _))) => Some(DipQuicView {
                            server_id: id.get_ref().clone(),
                            counters: maps.dip_quic(*slot)?.into(),
                        }),
                        _ => None,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let traffic = vip_id.and_then(|id| tier_traffic.vip(id).ok());
        let classes = match vip_id {
            Some(id) => maps
                .active_ranges(id)?
                .map(|r| r.class_weight[..r.nr.min(WEIR_MAX_CLASSES) as usize].to_vec())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        out.push(VipView {
            name: v.name.get_ref().clone(),
            address: *v.address.get_ref(),
            port: *v.port.get_ref(),
            protocol: match v.protocol {
                Proto::Tcp => "tcp".into(),
                Proto::Udp => "udp".into(),
            },
            mode: v.mode,
            vip_id,
            table_version: match vip_id {
                Some(id) => Some(maps.table_version(id)?),
                None => None,
            },
            classes,
            packets: traffic.map_or(0, |t| t.packets),
            bytes: traffic.map_or(0, |t| t.bytes),
            new_conns: traffic.map_or(0, |t| t.new_conns),
            health_checks: v.health.is_some(),
            quic: match (&v.quic, vip_id) {
                (Some(q), Some(id)) => Some(VipQuicStatus {
                    server_id_len: *q.server_id_len.get_ref(),
                    config_id: *q.config_id.get_ref(),
                    counters: maps.vip_quic(id)?.into(),
                }),
                _ => None,
            },
            dips,
        });
    }
    Ok(out)
}

/// The data plane's counters by name.
pub fn counters(maps: &Maps) -> Result<BTreeMap<String, u64>> {
    Ok(STAT_NAMES
        .iter()
        .map(|s| s.to_string())
        .zip(maps.stats()?)
        .collect())
}

pub fn controller(s: &Snapshot) -> ControllerView {
    ControllerView {
        policy: s.policy,
        m: s.m,
        update_interval_ms: s.update_interval_ms,
        telemetry: s.telemetry,
        on_agent_silent: s.on_agent_silent,
        ticks: s.ticks,
        tables_published: s.tables_published,
        entries_written: s.entries_written,
        at_unix_ms: s.at_unix_ms,
    }
}

/// Connection counts, walked at most every [`COUNT_MAX_AGE`] however often
/// they are asked for (a table can hold millions of entries).
#[derive(Debug, Default)]
pub struct Counts {
    last: Mutex<Option<(Instant, Connections)>>,
}

impl Counts {
    pub fn get(&self, maps: &Maps) -> Connections {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, c)) = *last {
            if at.elapsed() < COUNT_MAX_AGE {
                return c;
            }
        }
        let c = Connections::count(maps);
        *last = Some((Instant::now(), c));
        c
    }
}
