//! `weir status`: what the data plane holds, read from the pinned maps.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use weir_abi::*;
use weir_config::{Config, PolicyName};
use weir_core::flow::{words_addr, Proto};
use weir_dataplane::maps::Maps;

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
}

impl From<weir_dataplane::maps::QuicCounters> for QuicStatus {
    fn from(c: weir_dataplane::maps::QuicCounters) -> QuicStatus {
        QuicStatus {
            cid_routed: c.cid_routed,
            cid_fallback: c.cid_fallback,
            cid_unknown: c.cid_unknown,
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
    pub controller: Option<crate::controller::Snapshot>,
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
    pub xdp_attach: Option<Vec<crate::xdp_watch::IfaceAttach>>,
    /// Whether frames weir sends out by each configured interface can
    /// leave (`<run dir>/redirect_targets.json`), when `weir serve` runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_targets: Option<Vec<crate::redirect_targets::RedirectTarget>>,
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
    })
}

/// What a running daemon adds to the maps' status from its run dir: the
/// workers' reports, their accounting, the XDP attachment check and the
/// check of the interfaces weir sends by.
pub fn add_running(st: &mut Status, run_dir: &Path) {
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
    st.xdp_attach = crate::xdp_watch::read(run_dir);
    st.redirect_targets = crate::redirect_targets::read(run_dir);
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
pub fn read_controller(run_dir: &Path) -> Option<crate::controller::Snapshot> {
    let text = std::fs::read_to_string(crate::controller::snapshot_path(run_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The cluster as `weir serve` last saw it, from `<run dir>/cluster.json`.
pub fn read_cluster(run_dir: &Path) -> Option<weir_cluster::view::ClusterView> {
    weir_cluster::view::read_view(run_dir)
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// A value as the configuration spells it (`awfd`, `keep`, `passive`).
fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// The controller's part of the human output.
fn render_controller(o: &mut String, c: &crate::controller::Snapshot) {
    let policy = match c.policy {
        // Only AWFD takes m; the other policies are fixed points of it.
        PolicyName::Awfd => format!("policy=awfd m={}", c.m),
        PolicyName::Static => {
            "policy=static (the configured weights, health checks applied)".into()
        }
        p => format!("policy={}", word(&p)),
    };
    let telemetry = c
        .telemetry
        .map_or(String::new(), |t| format!(" telemetry={}", word(&t)));
    let _ = writeln!(
        o,
        "\ncontroller: {policy} interval={}ms{telemetry} on_agent_silent={} tables_published={} entries_written={}",
        c.update_interval_ms,
        word(&c.on_agent_silent),
        c.tables_published,
        c.entries_written
    );
    for v in &c.vips {
        let _ = writeln!(o, "  VIP {} table=v{}", v.name, v.table_version);
        let _ = writeln!(
            o,
            "    {:<22} {:>10} {:>10} {:>10} {:>6} {:>5} {:>6} {:>8} {:>6}  agent errors",
            "DIP", "capacity", "load", "available", "weight", "class", "share", "health", "misses"
        );
        for d in &v.dips {
            let errors: Vec<String> = d
                .agent_errors
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            let _ = writeln!(
                o,
                "    {:<22} {:>10} {:>10} {:>10} {:>6} {:>5} {:>6} {:>8} {:>6}  {}",
                format!("{}:{}", d.address, d.port),
                opt(d.capacity, 1),
                opt(d.load, 1),
                opt(d.available, 1),
                d.weight,
                d.class.map_or("-".into(), |k| format!("B{k}")),
                d.share.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)),
                match d.healthy {
                    None => "-",
                    Some(true) => "up",
                    Some(false) => "FAILING",
                },
                if d.agent_silent {
                    format!("{}!", d.agent_misses)
                } else {
                    d.agent_misses.to_string()
                },
                if errors.is_empty() {
                    "-".into()
                } else {
                    errors.join(" ")
                }
            );
        }
    }
}

/// One line per worker: HNLB's utilization (eq. 2/3) and its parts, the
/// software table, socket drops, and the offload counters (hybrid).
fn render_workers(o: &mut String, workers: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let _ = writeln!(o, "\nworkers:");
    for w in workers.as_array().into_iter().flatten() {
        let u = &w["utilization"];
        let (busy, all) = (n(&u["busy_cycles"]), n(&u["cycles"]).max(1));
        let (pkts, bursts, max) = (n(&u["packets"]), n(&u["bursts"]), n(&u["max_burst"]).max(1));
        let fill = if bursts == 0 {
            0.0
        } else {
            pkts as f64 / bursts as f64 / max as f64
        };
        let sockets = w["sockets"].as_array().cloned().unwrap_or_default();
        let sum = |k: &str| sockets.iter().map(|s| n(&s[k])).sum::<u64>();
        let _ = writeln!(
            o,
            "  cpu {}: utilization {:.1}% (busy {:.1}% x burst fill {:.2}), {} packets in {} bursts, \
             connections {} (half-open {}), rx {} tx {}, drops: rx ring full {} fill ring empty {} \
             tx ring full {}",
            n(&w["cpu"]),
            100.0 * busy as f64 / all as f64 * fill,
            100.0 * busy as f64 / all as f64,
            fill,
            pkts,
            bursts,
            n(&w["connections"]),
            n(&w["half_open"]),
            sum("rx_packets"),
            sum("tx_packets"),
            sum("rx_ring_full"),
            sum("fill_ring_empty"),
            sum("tx_ring_full"),
        );
        let f = &w["offload"];
        if f.is_object() {
            let _ = writeln!(
                o,
                "    fast table {}/{}: admitted {} promoted {} demoted idle {} closed {} light {}",
                n(&f["occupancy"]),
                n(&f["capacity"]),
                n(&f["admitted"]),
                n(&f["promoted"]),
                n(&f["demoted_idle"]),
                n(&f["demoted_closed"]),
                n(&f["demoted_light"]),
            );
        }
        if let Some(e) = w["error"].as_str() {
            let _ = writeln!(o, "    last error: {e}");
        }
    }
}

/// The cluster's part: etcd, the leader, each node's table versions and
/// connection sync, and what this node could not apply.
fn render_cluster(o: &mut String, c: &weir_cluster::view::ClusterView) {
    let etcd = match (c.etcd_ok, c.etcd_down_since_unix_ms) {
        (true, _) => "etcd ok".to_string(),
        (false, since) => format!(
            "etcd UNREACHABLE{}: every node keeps its tables ({})",
            since.map_or(String::new(), |t| format!(
                " for {:.1} s",
                c.at_unix_ms.saturating_sub(t) as f64 / 1000.0
            )),
            c.etcd_error.as_deref().unwrap_or("no answer")
        ),
    };
    let _ = writeln!(
        o,
        "\ncluster {}: node {}{}, leader {}, {etcd}",
        c.prefix,
        c.node,
        if c.is_leader { " (leads)" } else { "" },
        c.leader
            .as_deref()
            .unwrap_or("NONE (an election is under way)"),
    );
    for t in &c.tables {
        let _ = writeln!(
            o,
            "  VIP {} table=v{} published by {} {:.1} s ago",
            t.vip,
            t.version,
            t.leader,
            c.at_unix_ms.saturating_sub(t.published_unix_ms) as f64 / 1000.0
        );
    }
    let _ = writeln!(
        o,
        "  {:<16} {:>6} {:>5} {:<24} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "node",
        "leader",
        "ready",
        "tables",
        "apply max",
        "sent",
        "received",
        "installed",
        "dropped",
        "lag p99"
    );
    for n in &c.nodes {
        let st = n.status.as_ref();
        let tables = st.map_or("?".to_string(), |s| {
            s.tables
                .iter()
                .map(|(v, a)| format!("{v}={}", a.version.map_or("-".into(), |x| format!("v{x}"))))
                .collect::<Vec<_>>()
                .join(" ")
        });
        let sync = st.and_then(|s| s.sync.as_ref());
        let num = |f: fn(&weir_cluster::sync::stats::Counters) -> u64| {
            sync.map_or("-".to_string(), |c| f(c).to_string())
        };
        let _ = writeln!(
            o,
            "  {:<16} {:>6} {:>5} {:<24} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
            n.name,
            if n.leader { "*" } else { "" },
            st.map_or("?", |s| if s.ready { "yes" } else { "no" }),
            tables,
            st.and_then(|s| s.apply_delay_max_ms)
                .map_or("-".into(), |d| format!("{d:.0} ms")),
            num(|c| c.sent_records),
            num(|c| c.received_records),
            num(|c| c.installed),
            num(|c| c.dropped()),
            sync.and_then(|c| c.lag_p99_us)
                .map_or("-".into(), |us| format!("<{us} us")),
        );
    }
    if let Some(j) = &c.join {
        let _ = writeln!(
            o,
            "  joined: {} established connections from {} ({} received) in {} ms",
            j.total,
            j.from.as_deref().unwrap_or("no peer"),
            j.received,
            j.took_ms
        );
    }
    if let Some(s) = &c.this.sync {
        let _ = writeln!(
            o,
            "  sync here: announced={} lost={} peer_entries={} present={} unknown={} \
             dropped: full={} install_error={} malformed={} oversized={} unauthenticated={} \
             replayed={}",
            s.announced,
            s.announce_lost,
            s.peer_entries,
            s.present,
            s.unknown,
            s.dropped_full,
            s.install_errors,
            s.dropped_malformed,
            s.dropped_oversized,
            s.dropped_unauthenticated,
            s.dropped_replayed
        );
        let _ = writeln!(
            o,
            "  bulks here: served={} records={} challenges={} refused: busy={} unknown_member={} \
             address_mismatch={} stale_challenge={} rate_limited={}",
            s.bulks_served,
            s.bulk_records_sent,
            s.bulk_challenges,
            s.bulks_refused,
            s.bulk_refused_unknown_member,
            s.bulk_refused_address_mismatch,
            s.bulk_refused_stale_challenge,
            s.bulk_refused_rate_limited
        );
    }
    for (vip, a) in &c.this.tables {
        if let Some(why) = &a.skew {
            let _ = writeln!(o, "  NOT APPLIED here, VIP {vip}: {why}");
        }
    }
}

/// The human table.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    for a in s.xdp_attach.iter().flatten() {
        let _ = if a.attached {
            writeln!(o, "xdp on {}: attached", a.interface)
        } else {
            writeln!(o, "xdp on {}: NOT ATTACHED: {}", a.interface, a.warning())
        };
    }
    for t in s.redirect_targets.iter().flatten() {
        use crate::redirect_targets::Verdict;
        let problem = t.problem.as_deref().unwrap_or("");
        let fix = t.fix.as_deref().unwrap_or("");
        let _ = match t.verdict {
            Verdict::Ok => Ok(()),
            Verdict::Drops => writeln!(
                o,
                "send by {}: FRAMES DROPPED: {problem}; fix: {fix}",
                t.interface
            ),
            Verdict::Unchecked => {
                writeln!(o, "send by {}: unchecked: {problem}; {fix}", t.interface)
            }
        };
    }
    let c = &s.connections;
    let _ = writeln!(
        o,
        "connections: {} established, {} closing, {} half-open",
        c.established, c.closing, c.half_open
    );
    for v in &s.vips {
        let _ = writeln!(
            o,
            "\nVIP {} {}:{}/{} mode={} table=v{} classes={:?} packets={} new_conns={}",
            v.name.as_deref().unwrap_or("-"),
            v.address,
            v.port,
            v.protocol,
            v.mode,
            v.table_version,
            v.classes,
            v.packets,
            v.new_conns
        );
        let _ = writeln!(
            o,
            "  {:>5}  {:<40} {:>6} {:>6} {:>12} {:>10}",
            "slot", "DIP", "port", "weight", "packets", "new_conns"
        );
        for d in &v.dips {
            let _ = writeln!(
                o,
                "  {:>5}  {:<40} {:>6} {:>6} {:>12} {:>10}",
                d.slot,
                d.address,
                d.port.map_or("-".into(), |p| p.to_string()),
                d.weight,
                d.packets,
                d.new_conns
            );
        }
        if let Some(q) = &v.quic {
            let c = &q.counters;
            let _ = writeln!(
                o,
                "  quic: server_id_len={} config_id={} cid_routed={} cid_fallback={} cid_unknown={}",
                q.server_id_len, q.config_id, c.cid_routed, c.cid_fallback, c.cid_unknown
            );
            for d in &v.dips {
                if let Some(c) = &d.quic {
                    let _ = writeln!(
                        o,
                        "  {:>5}  quic: cid_routed={} cid_fallback={} cid_unknown={}",
                        d.slot, c.cid_routed, c.cid_fallback, c.cid_unknown
                    );
                }
            }
        }
    }
    match &s.controller {
        Some(c) => render_controller(&mut o, c),
        None => {
            let _ = writeln!(o, "\ncontroller: none");
        }
    }
    if let Some(a) = &s.software_accounting {
        let _ = writeln!(
            o,
            "\nsoftware tier: XDP steered {} since start: received {}, dropped by the kernel {}, \
             unaccounted {} (in flight while traffic runs)",
            a.steered, a.received, a.kernel_dropped, a.unaccounted
        );
    }
    if let Some(w) = &s.workers {
        render_workers(&mut o, w);
    }
    if let Some(c) = &s.cluster {
        render_cluster(&mut o, c);
    }
    let _ = writeln!(o, "\ncounters:");
    for (name, v) in &s.counters {
        if *v > 0 {
            let _ = writeln!(o, "  {name:<20} {v}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_of(text: &str, needle: &str) -> String {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
            .to_string()
    }
    use crate::controller::{DipSnapshot, Snapshot, VipSnapshot};
    use weir_config::{OnSilent, PolicyName, TelemetryKind};

    #[test]
    fn the_human_output_shows_the_controller_view() {
        let dip = |addr: &str, weight, healthy, silent| DipSnapshot {
            slot: 0,
            address: addr.into(),
            port: 8080,
            capacity: Some(200.0),
            load: Some(50.0),
            available: Some(150.0),
            weight,
            class: (weight > 0).then_some(weight),
            share: Some(0.25),
            healthy,
            health_checks: 4,
            health_failures: 0,
            agent_misses: if silent { 5 } else { 0 },
            agent_silent: silent,
            agent_errors: if silent {
                [("timeout".to_string(), 5)].into_iter().collect()
            } else {
                Default::default()
            },
            last_error: None,
        };
        let st = Status {
            connections: Connections {
                established: 3,
                half_open: 1,
                closing: 2,
                counted_at_unix_ms: 0,
            },
            vips: Vec::new(),
            counters: vec![("rx".into(), 9)],
            controller: Some(Snapshot {
                policy: PolicyName::Awfd,
                m: 4,
                update_interval_ms: 100,
                telemetry: Some(TelemetryKind::Agent),
                on_agent_silent: OnSilent::Drain,
                at_unix_ms: 0,
                ticks: 10,
                tables_published: 3,
                entries_written: 7,
                vips: vec![VipSnapshot {
                    name: "web".into(),
                    vip_id: 0,
                    table_version: 4,
                    dips: vec![
                        dip("10.0.0.1", 4, Some(true), false),
                        dip("10.0.0.2", 0, Some(false), true),
                    ],
                }],
            }),
            workers: Some(serde_json::json!([{
                "cpu": 1,
                "error": null,
                "connections": 7,
                "half_open": 2,
                "utilization": {"cycles": 1000, "busy_cycles": 500, "packets": 64,
                                "bursts": 4, "max_burst": 32},
                "sockets": [{"rx_packets": 60, "tx_packets": 50, "rx_ring_full": 3,
                             "fill_ring_empty": 0, "tx_ring_full": 1}],
                "offload": {"occupancy": 5, "capacity": 16, "admitted": 5, "promoted": 2,
                            "demoted_idle": 1, "demoted_closed": 0, "demoted_light": 0}
            }])),
            cluster: None,
            software_accounting: None,
            xdp_attach: None,
            redirect_targets: None,
        };
        let text = render(&st);
        // 50% busy, bursts of 16 of 32: HNLB's utilization reads 25%.
        let worker = row_of(&text, "cpu 1:");
        assert!(
            worker.contains("utilization 25.0%")
                && worker.contains("busy 50.0%")
                && worker.contains("burst fill 0.50")
                && worker.contains("rx ring full 3"),
            "{worker}"
        );
        assert!(
            row_of(&text, "fast table 5/16").contains("promoted 2"),
            "{text}"
        );
        // The configuration's words, not Rust's names.
        assert!(
            text.contains(
                "controller: policy=awfd m=4 interval=100ms telemetry=agent on_agent_silent=drain"
            ),
            "{text}"
        );
        assert!(
            text.contains("connections: 3 established, 2 closing, 1 half-open"),
            "{text}"
        );
        let row = |a: &str| row_of(&text, a);
        let up = row("10.0.0.1:8080");
        assert!(
            up.contains("200.0") && up.contains("B4") && up.contains("25%") && up.contains(" up "),
            "{up}"
        );
        let down = row("10.0.0.2:8080");
        assert!(
            down.contains("FAILING") && down.contains("5!") && down.contains("timeout=5"),
            "{down}"
        );
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(
            json["controller"]["vips"][0]["dips"][1]["agent_silent"],
            true
        );
        // The API's shape: counters by name, connections by kind.
        assert_eq!(json["counters"], serde_json::json!({"rx": 9}));
        assert_eq!(json["connections"]["closing"], 2);
        // Health checks only: no m; no controller at all: "none".
        let mut st = st;
        if let Some(c) = st.controller.as_mut() {
            c.policy = PolicyName::Static;
            c.m = 0;
            c.telemetry = None;
        }
        let text = render(&st);
        let line = row_of(&text, "controller:");
        assert!(
            line.contains("policy=static") && !line.contains("m=") && !line.contains("telemetry"),
            "{line}"
        );
        st.controller = None;
        assert_eq!(row_of(&render(&st), "controller:"), "controller: none");
    }
    #[test]
    fn the_human_output_shows_the_cluster() {
        use weir_cluster::sync::stats::Counters;
        use weir_cluster::view::*;
        let applied = |v| AppliedTable {
            version: Some(v),
            applied_unix_ms: Some(9_000),
            delay_ms: Some(2.0),
            skew: None,
        };
        let status = |name: &str, v, sync| NodeStatus {
            name: name.into(),
            at_unix_ms: 9_000,
            tables: [("web".to_string(), applied(v))].into_iter().collect(),
            apply_delay_max_ms: Some(3.0),
            sync,
            ready: true,
        };
        let counters = Counters {
            sent_records: 120,
            received_records: 340,
            installed: 338,
            dropped_replayed: 2,
            bulk_refused_address_mismatch: 3,
            lag_p99_us: Some(512),
            ..Default::default()
        };
        let mut this = status("lb-a", 12, Some(counters));
        this.tables.insert(
            "api".into(),
            AppliedTable {
                version: None,
                applied_unix_ms: None,
                delay_ms: None,
                skew: Some("the leader's table names DIP 10.0.0.9".into()),
            },
        );
        let view = ClusterView {
            node: "lb-a".into(),
            prefix: "/weir/prod".into(),
            etcd: vec!["10.0.0.1:2379".parse().unwrap()],
            etcd_ok: false,
            etcd_error: Some("etcd unreachable (connection refused)".into()),
            etcd_down_since_unix_ms: Some(6_000),
            leader: Some("lb-b".into()),
            is_leader: false,
            terms_won: 0,
            nodes: vec![
                NodeView {
                    name: "lb-a".into(),
                    sync: None,
                    leader: false,
                    status: Some(this.clone()),
                },
                NodeView {
                    name: "lb-b".into(),
                    sync: None,
                    leader: true,
                    status: Some(status("lb-b", 12, None)),
                },
            ],
            tables: vec![TableView {
                vip: "web".into(),
                version: 12,
                leader: "lb-b".into(),
                published_unix_ms: 8_500,
            }],
            this,
            join: Some(JoinView {
                from: Some("lb-b".into()),
                total: 300,
                received: 300,
                took_ms: 45,
            }),
            at_unix_ms: 9_000,
        };
        let mut st = collect_empty();
        st.cluster = Some(view);
        let text = render(&st);
        let head = row_of(&text, "cluster /weir/prod");
        assert!(
            head.contains("leader lb-b") && head.contains("etcd UNREACHABLE for 3.0 s"),
            "{head}"
        );
        assert!(head.contains("keeps its tables"), "{head}");
        let a = row_of(&text, "  lb-a ");
        assert!(
            a.contains("web=v12")
                && a.contains("api=-")
                && a.contains("120")
                && a.contains("<512 us"),
            "{a}"
        );
        assert!(a.contains(" 2 "), "dropped: {a}");
        assert!(row_of(&text, "  lb-b ").contains('*'));
        assert!(row_of(&text, "VIP web table=v12").contains("0.5 s ago"));
        assert!(row_of(&text, "joined: 300").contains("from lb-b"));
        let bulks = row_of(&text, "  bulks here:");
        assert!(
            bulks.contains("address_mismatch=3") && bulks.contains("rate_limited=0"),
            "{bulks}"
        );
        assert!(row_of(&text, "NOT APPLIED here, VIP api").contains("10.0.0.9"));
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["cluster"]["leader"], "lb-b");
    }

    fn collect_empty() -> Status {
        Status {
            connections: Connections {
                established: 0,
                half_open: 0,
                closing: 0,
                counted_at_unix_ms: 0,
            },
            vips: Vec::new(),
            counters: Vec::new(),
            controller: None,
            workers: None,
            cluster: None,
            software_accounting: None,
            xdp_attach: None,
            redirect_targets: None,
        }
    }

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

    #[test]
    fn a_detached_interface_is_a_line_of_its_own() {
        let mut st = collect_empty();
        st.xdp_attach = Some(vec![
            crate::xdp_watch::IfaceAttach::of("wc0", 5, Some(5), |_| None),
            crate::xdp_watch::IfaceAttach::of("wb1", 5, None, |_| None),
        ]);
        let text = render(&st);
        assert!(text.contains("xdp on wc0: attached\n"), "{text}");
        assert!(
            text.contains(
                "xdp on wb1: NOT ATTACHED: wb1: weir's XDP program is no longer attached"
            ),
            "{text}"
        );
    }
}
