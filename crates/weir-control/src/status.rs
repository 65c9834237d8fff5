//! `weir status`: what the data plane holds, read from the pinned maps.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use weir_abi::*;
use weir_config::Config;
use weir_core::flow::{words_addr, Proto};
use weir_dataplane::maps::Maps;

// The parts of a `Status`, for those who render it (`weir status`).
pub use crate::bgp::BgpView;
pub use crate::controller::{DipSnapshot, Snapshot as ControllerSnapshot, VipSnapshot};
pub use crate::redirect_targets::{RedirectTarget, Verdict};
pub use crate::xdp_watch::IfaceAttach;

/// Names of `enum weir_stat`, in order.
pub const STAT_NAMES: [&str; WEIR_STAT_MAX as usize] = [
    "rx",
    "pass_not_ip",
    "pass_not_vip",
    "pass_icmp",
    "pass_fragment",
    "pass_no_neigh",
    "drop_not_vip",
    "drop_icmp",
    "drop_fragment",
    "drop_malformed",
    "pass_malformed",
    "drop_no_backend",
    "drop_nonsyn_miss",
    "drop_no_route",
    "tx",
    "redirect",
    "drop_redirect",
    "drop_reply_no_state",
    "to_software",
    "drop_no_worker",
    "drop_too_big",
    "drop_syn_budget",
    "conn_hit",
    "conn_miss",
    "conn_new",
    "conn_install_fail",
    "conn_stale",
    "nonsyn_miss",
    "rev_nat",
    "mac_fallback",
    "half_open_new",
    "syn_retransmit",
    "conn_reused",
    "conn_expired",
    "conn_closing",
];

/// The outcome counters: every packet ends in exactly one of them, so
/// their sum equals `rx`.
pub fn outcome_names() -> &'static [&'static str] {
    &STAT_NAMES[1..=WEIR_STAT_LAST_OUTCOME as usize]
}

#[derive(Debug, Clone, Serialize)]
pub struct DipStatus {
    pub slot: u32,
    pub address: String,
    pub port: Option<u16>,
    pub weight: u32,
    pub live: bool,
    pub packets: u64,
    pub new_conns: u64,
    /// QUIC VIP: how its packets to this DIP were routed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicStatus>,
}

/// QUIC routing counters (bpf/lib/quic.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicStatus {
    /// Routed by the server ID in the destination connection ID.
    pub cid_routed: u64,
    /// Left to the 5-tuple connection table (cid_unknown included).
    pub cid_fallback: u64,
    /// Server-chosen connection IDs whose server ID no live DIP owns.
    pub cid_unknown: u64,
    /// A client's Initial or 0-RTT of another handshake than the one that
    /// opened the live 5-tuple entry of its address and port: a new
    /// connection, dispatched anew (a DIP's: its entry was given up).
    #[serde(default)]
    pub reused_tuple: u64,
}

impl From<weir_dataplane::maps::QuicCounters> for QuicStatus {
    fn from(c: weir_dataplane::maps::QuicCounters) -> QuicStatus {
        QuicStatus {
            cid_routed: c.cid_routed,
            cid_fallback: c.cid_fallback,
            cid_unknown: c.cid_unknown,
            reused_tuple: c.reused_tuple,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VipStatus {
    pub name: Option<String>,
    pub id: u32,
    pub address: String,
    pub port: u16,
    pub protocol: String,
    pub mode: String,
    pub table_version: u32,
    /// The weights of the table's priority classes, highest first.
    pub classes: Vec<u32>,
    pub packets: u64,
    pub bytes: u64,
    pub new_conns: u64,
    /// QUIC VIP: its connection IDs' layout and routing counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<VipQuicStatus>,
    pub dips: Vec<DipStatus>,
}

/// A QUIC VIP's connection-ID layout and routing counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipQuicStatus {
    pub server_id_len: u8,
    pub config_id: u8,
    #[serde(flatten)]
    pub counters: QuicStatus,
}

/// Entries of the connection tables: one shape for `weir status --json`
/// and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connections {
    /// Confirmed connections with no FIN or RST seen (expired ones
    /// included until the next sweep, `sweeper::SWEEP_INTERVAL`).
    pub established: u64,
    /// TCP connections whose handshake is not done (the half-open table).
    pub half_open: u64,
    /// Connections that saw a FIN or a RST, until their closing timeout.
    pub closing: u64,
    /// When they were counted (ms since the epoch).
    pub counted_at_unix_ms: u64,
}

impl Connections {
    /// Counts the tables (walks the connection table).
    pub fn count(maps: &Maps) -> Connections {
        let (established, closing) = maps.conn_counts().unwrap_or_else(|e| {
            log::warn!("counting closing connections: {e:#}");
            (maps.conn_count(), 0)
        });
        Connections {
            established: established as u64,
            half_open: maps.half_open_count() as u64,
            closing: closing as u64,
            counted_at_unix_ms: crate::api::view::unix_ms(),
        }
    }
}

/// The data plane's counters (`enum weir_stat`), as a JSON object keyed
/// by name in the enum's order.
fn counters_by_name<S: serde::Serializer>(c: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(c.iter().map(|(k, v)| (k, v)))
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub connections: Connections,
    pub vips: Vec<VipStatus>,
    #[serde(serialize_with = "counters_by_name")]
    pub counters: Vec<(String, u64)>,
    /// The controller's view (estimates, weights, health, agent errors),
    /// when `weir serve` runs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerSnapshot>,
    /// The software tier's workers (`weir_software::WorkerStats`, as
    /// `weir serve` last wrote them), when it runs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<serde_json::Value>,
    /// The cluster as this node sees it (`<run dir>/cluster.json`), when
    /// `weir serve` runs in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<weir_cluster::view::ClusterView>,
    /// What XDP steered to this daemon's sockets and where it went, when
    /// it runs a software tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub software_accounting: Option<SoftwareAccounting>,
    /// Whether weir's program still runs on each configured interface
    /// (`<run dir>/xdp_attach.json`), when `weir serve` runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_attach: Option<Vec<IfaceAttach>>,
    /// Whether frames weir sends out by each configured interface can
    /// leave (`<run dir>/redirect_targets.json`), when `weir serve` runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_targets: Option<Vec<RedirectTarget>>,
    /// The BGP speaker's neighbours and each VIP's announcement
    /// (`<run dir>/bgp.json`), when `weir serve` runs with `[bgp]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<crate::bgp::BgpView>,
}

/// Every frame XDP steers to the software tier (`to_software`) is received
/// by a worker or dropped by the kernel on its way to the socket; what is
/// neither is on its way (in a ring) or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftwareAccounting {
    /// XDP's `to_software` since this daemon's sockets were registered.
    pub steered: u64,
    /// Taken off the RX rings by the workers, over every socket.
    pub received: u64,
    /// Dropped by the kernel before the RX ring, over every socket:
    /// `rx_dropped` (no frame, too long) + `rx_ring_full` +
    /// `rx_invalid_descs`.
    pub kernel_dropped: u64,
    /// `steered - received - kernel_dropped`: in flight while traffic
    /// runs, 0 once it stopped and the workers drained.
    pub unaccounted: i64,
}

impl SoftwareAccounting {
    /// From XDP's `to_software` now, the tier's baseline and the workers'
    /// reports (a JSON list of `weir_software::WorkerStats`).
    pub fn of(
        to_software: u64,
        baseline: crate::tier::Baseline,
        workers: &serde_json::Value,
    ) -> SoftwareAccounting {
        let sockets = workers
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|w| w["sockets"].as_array().into_iter().flatten());
        let (mut received, mut kernel_dropped) = (0u64, 0u64);
        for s in sockets {
            let n = |k: &str| s[k].as_u64().unwrap_or(0);
            received += n("rx_packets");
            kernel_dropped += n("rx_dropped") + n("rx_ring_full") + n("rx_invalid_descs");
        }
        let steered = to_software.saturating_sub(baseline.to_software_at_start);
        SoftwareAccounting {
            steered,
            received,
            kernel_dropped,
            unaccounted: steered as i64 - received as i64 - kernel_dropped as i64,
        }
    }
}

/// Reads the status; `cfg` (the running configuration) supplies VIP names,
/// `run_dir` the software tier's traffic.
pub fn collect(maps: &Maps, cfg: Option<&Config>, run_dir: Option<&Path>) -> Result<Status> {
    let traffic = crate::traffic::Traffic::read(maps, run_dir);
    let names: HashMap<(std::net::IpAddr, u16, u8), String> = cfg
        .map(|c| {
            c.vips
                .iter()
                .map(|v| {
                    (
                        (*v.address.get_ref(), *v.port.get_ref(), v.protocol.number()),
                        v.name.get_ref().clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let all_vips = maps.vips()?;
    let quic_vips: std::collections::HashSet<u32> = all_vips
        .iter()
        .filter(|(_, v)| v.quic_sid_len != 0)
        .map(|(_, v)| v.vip_id)
        .collect();
    let mut dips_by_vip: HashMap<u32, Vec<DipStatus>> = HashMap::new();
    for slot in 0..maps.dip_slots() {
        let Some(d) = maps.dip(slot)? else { continue };
        if d.flags & WEIR_DIP_F_LIVE == 0 {
            continue;
        }
        let t = traffic.dip(slot)?;
        let quic = match quic_vips.contains(&d.vip_id) {
            true => Some(maps.dip_quic(slot)?.into()),
            false => None,
        };
        dips_by_vip.entry(d.vip_id).or_default().push(DipStatus {
            slot,
            address: words_addr(&d.addr, d.family).map_or("?".into(), |a| a.to_string()),
            port: (d.port != 0).then(|| u16::from_be(d.port)),
            weight: d.weight,
            live: true,
            packets: t.packets,
            new_conns: t.new_conns,
            quic,
        });
    }
    let mut vips = Vec::new();
    for (key, vip) in all_vips {
        let addr = words_addr(&key.addr, key.family);
        let port = u16::from_be(key.port);
        let t = traffic.vip(vip.vip_id)?;
        let ranges = maps.active_ranges(vip.vip_id)?.unwrap_or_default();
        vips.push(VipStatus {
            name: addr.and_then(|a| names.get(&(a, port, key.proto)).cloned()),
            id: vip.vip_id,
            address: addr.map_or("?".into(), |a| a.to_string()),
            port,
            protocol: match Proto::from_number(key.proto) {
                Some(Proto::Tcp) => "tcp".into(),
                Some(Proto::Udp) => "udp".into(),
                None => key.proto.to_string(),
            },
            mode: match u32::from(vip.mode) {
                WEIR_MODE_NAT => "nat".into(),
                WEIR_MODE_DSR => "dsr".into(),
                WEIR_MODE_IPIP => "ipip".into(),
                WEIR_MODE_GUE => "gue".into(),
                m => m.to_string(),
            },
            table_version: maps.table_version(vip.vip_id)?,
            classes: ranges.class_weight[..ranges.nr.min(WEIR_MAX_CLASSES) as usize].to_vec(),
            packets: t.packets,
            bytes: t.bytes,
            new_conns: t.new_conns,
            quic: match vip.quic_sid_len {
                0 => None,
                len => Some(VipQuicStatus {
                    server_id_len: len,
                    config_id: vip.quic_config_id,
                    counters: maps.vip_quic(vip.vip_id)?.into(),
                }),
            },
            dips: dips_by_vip.remove(&vip.vip_id).unwrap_or_default(),
        });
    }
    vips.sort_by_key(|v| v.id);
    let counters = STAT_NAMES
        .iter()
        .map(|s| s.to_string())
        .zip(maps.stats()?)
        .collect();
    Ok(Status {
        connections: Connections::count(maps),
        vips,
        counters,
        controller: None,
        workers: None,
        cluster: None,
        software_accounting: None,
        xdp_attach: None,
        redirect_targets: None,
        bgp: None,
    })
}

/// What a running daemon adds to the maps' status from its run dir: the
/// workers' reports, their accounting, the XDP attachment check and the
/// check of the interfaces weir sends by.
pub fn add_running(st: &mut Status, run_dir: &Path) {
    st.bgp = crate::bgp::REPORT.read(run_dir);
    st.workers = crate::tier::read_workers(run_dir);
    st.software_accounting = st.workers.as_ref().and_then(|w| {
        let baseline = crate::tier::read_baseline(run_dir)?;
        let to_software = st
            .counters
            .iter()
            .find(|(name, _)| name == "to_software")?
            .1;
        Some(SoftwareAccounting::of(to_software, baseline, w))
    });
    st.xdp_attach = crate::xdp_watch::REPORT.read(run_dir);
    st.redirect_targets = crate::redirect_targets::REPORT.read(run_dir);
}

/// Reads status from the pins in `pin_dir`.
pub fn collect_pinned(
    pin_dir: &Path,
    cfg: Option<&Config>,
    run_dir: Option<&Path>,
) -> Result<Status> {
    collect(&Maps::pinned(pin_dir)?, cfg, run_dir)
}

/// The running controller's last view, from `<run dir>/controller.json`.
pub fn read_controller(run_dir: &Path) -> Option<ControllerSnapshot> {
    let text = std::fs::read_to_string(crate::controller::snapshot_path(run_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The cluster as `weir serve` last saw it, from `<run dir>/cluster.json`.
pub fn read_cluster(run_dir: &Path) -> Option<weir_cluster::view::ClusterView> {
    weir_cluster::view::read_view(run_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_adds_every_socket_of_every_worker_since_the_baseline() {
        let workers = serde_json::json!([
            {"sockets": [{"rx_packets": 10, "rx_dropped": 1, "rx_ring_full": 2,
                          "rx_invalid_descs": 0},
                         {"rx_packets": 5, "rx_dropped": 0, "rx_ring_full": 0}]},
            {"sockets": [{"rx_packets": 7, "rx_dropped": 0, "rx_ring_full": 3,
                          "rx_invalid_descs": 1}]}
        ]);
        let base = crate::tier::Baseline {
            to_software_at_start: 100,
        };
        let a = SoftwareAccounting::of(129, base, &workers);
        assert_eq!((a.steered, a.received, a.kernel_dropped), (29, 22, 7));
        assert_eq!(a.unaccounted, 0);
        let a = SoftwareAccounting::of(131, base, &workers);
        assert_eq!(a.unaccounted, 2);
    }
}
