//! Prometheus metrics of `weir serve` (`[metrics] listen`, default
//! 127.0.0.1:9100) at `GET /metrics`: the controller's per-DIP view
//! (capacity, load, available capacity, weight, class, share of new
//! connections, health, agent errors), the data plane's counters and the
//! QUIC VIPs' routing counters (with or without a controller).
//!
//! Every value already lives elsewhere (the controller's [`Snapshot`], the
//! running configuration, the pinned maps), so a scrape reads them once ([`Scrape::read`]) and
//! prometheus-client encodes them, as a collector of constant metrics, in
//! the OpenMetrics text format. Counter samples carry the `_total` suffix.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use axum::http::header;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use weir_config::Config;
use weir_dataplane::maps::Maps;

use crate::api::view::Slots;
use crate::controller::{DipSnapshot, Snapshot};
use crate::live::Live;
use crate::status::QuicStatus;
use crate::status::STAT_NAMES;
use crate::telemetry::agent::AgentError;
use weir_http::Server;
use weir_software::WorkerStats;

/// The media type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What one scrape exposes, read from the controller and the maps.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    pub snapshot: Option<Snapshot>,
    /// New connections dispatched to each DIP slot.
    pub new_conns: BTreeMap<u32, u64>,
    /// The `enum weir_stat` counters, in [`STAT_NAMES`] order (empty
    /// without the maps).
    pub stats: Vec<u64>,
    /// The software tier's workers' last reports (empty with `tier = "xdp"`).
    pub workers: Vec<WorkerStats>,
    /// The cluster as this node sees it, when it runs in one.
    pub cluster: Option<weir_cluster::view::ClusterView>,
    /// Whether weir's program runs on each configured interface.
    pub xdp_attach: Vec<crate::xdp_watch::IfaceAttach>,
    /// Whether frames sent out by each configured interface can leave.
    pub redirect_targets: Vec<crate::redirect_targets::RedirectTarget>,
    /// The BGP speaker's neighbours and announcements, with `[bgp]`.
    pub bgp: Option<crate::bgp::BgpView>,
    /// Each QUIC VIP's routing counters and its DIPs'.
    pub quic: Vec<QuicSample>,
}

/// A QUIC VIP's routing counters, and those of each of its DIPs in the data
/// plane by `ADDR:PORT` (the `dip` label of every per-DIP family).
#[derive(Debug, Clone)]
pub struct QuicSample {
    pub vip: String,
    pub counters: QuicStatus,
    pub dips: Vec<(String, QuicStatus)>,
}

/// The QUIC routing counters of every QUIC VIP of `cfg` and of its DIPs,
/// from the maps. They come from the running configuration, not the
/// controller's snapshot: a QUIC VIP is counted with or without
/// `[controller]`.
fn quic_counters(m: &Maps, cfg: &Config, slots: &Slots, run_dir: &Path) -> Vec<QuicSample> {
    if cfg.vips.iter().all(|v| v.quic.is_none()) {
        return Vec::new();
    }
    let vips = crate::api::view::vips(cfg, m, None, slots, run_dir).unwrap_or_else(|e| {
        log::debug!("metrics: reading the QUIC VIPs: {e:#}");
        Vec::new()
    });
    vips.into_iter()
        .filter_map(|v| {
            let counters = v.quic?.counters;
            let dips = v
                .dips
                .into_iter()
                .filter_map(|d| Some((format!("{}:{}", d.address, d.port), d.quic?.counters)))
                .collect();
            Some(QuicSample {
                vip: v.name,
                counters,
                dips,
            })
        })
        .collect()
}

/// A QUIC counter family: name suffix, help, and the field it exports.
type QuicFamily = (&'static str, &'static str, fn(&QuicStatus) -> u64);

const QUIC_FAMILIES: [QuicFamily; 4] = [
    (
        "quic_cid_routed",
        "QUIC packets routed by the server ID in their connection ID.",
        |c| c.cid_routed,
    ),
    (
        "quic_cid_fallback",
        "QUIC packets left to the 5-tuple connection table (no usable server ID).",
        |c| c.cid_fallback,
    ),
    (
        "quic_cid_unknown",
        "QUIC packets whose server-chosen connection ID names no live DIP (a removed DIP, a misconfigured backend).",
        |c| c.cid_unknown,
    ),
    (
        "quic_reused_tuple",
        "New QUIC connections (a client's Initial or 0-RTT of another handshake) on a client address and port whose live entry named this VIP's DIP, or this DIP: dispatched anew by the current table.",
        |c| c.reused_tuple,
    ),
];

impl Scrape {
    /// Reads the controller's last snapshot, the workers' reports in the
    /// run directory and, with `maps`, the counters (the QUIC VIPs' of the
    /// running configuration, their DIPs found through `slots`).
    pub(crate) fn read(live: &Live, maps: Option<&Maps>, slots: &Slots) -> Scrape {
        let shared = live.shared();
        let run_dir = live.run_dir();
        let snapshot = shared.snapshot();
        let workers = crate::tier::read_worker_stats(run_dir);
        let cluster = shared.cluster.get().map(|c| c.view());
        let xdp_attach = crate::xdp_watch::REPORT.read(run_dir).unwrap_or_default();
        let redirect_targets = crate::redirect_targets::REPORT
            .read(run_dir)
            .unwrap_or_default();
        let bgp = crate::bgp::REPORT.read(run_dir);
        let Some(m) = maps else {
            return Scrape {
                snapshot,
                workers,
                cluster,
                xdp_attach,
                redirect_targets,
                bgp,
                ..Scrape::default()
            };
        };
        let traffic = crate::traffic::Traffic::read(m, Some(run_dir));
        let new_conns = snapshot
            .iter()
            .flat_map(|s| &s.vips)
            .flat_map(|v| &v.dips)
            .filter_map(|d| Some((d.slot, traffic.dip(d.slot).ok()?.new_conns)))
            .collect();
        let quic = quic_counters(m, &live.running(), slots, run_dir);
        Scrape {
            snapshot,
            new_conns,
            quic,
            stats: m.stats().unwrap_or_default(),
            workers,
            cluster,
            xdp_attach,
            redirect_targets,
            bgp,
        }
    }

    /// The exposition text.
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("encoding into a String cannot fail");
        out
    }
}

/// One metric family: a descriptor, then a sample per label set.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut fam = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family with one unlabelled sample.
fn single<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: M,
) -> fmt::Result {
    metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)
}

type DipLabels = [(&'static str, String); 2];

fn dip_labels(vip: &str, d: &DipSnapshot) -> DipLabels {
    [
        ("vip", vip.to_string()),
        ("dip", format!("{}:{}", d.address, d.port)),
    ]
}

/// Every DIP of the snapshot with its VIP's name.
fn dips(s: &Snapshot) -> impl Iterator<Item = (&str, &DipSnapshot)> {
    s.vips
        .iter()
        .flat_map(|v| v.dips.iter().map(move |d| (v.name.as_str(), d)))
}

type Get = fn(&DipSnapshot) -> Option<f64>;

/// The per-DIP gauges: name, help, value (None: not exported).
const DIP_GAUGES: [(&str, &str, Get); 8] = [
    (
        "weir_dip_capacity",
        "Estimated capacity C = 1 / mean processing time (requests/s).",
        |d| d.capacity,
    ),
    ("weir_dip_load", "Smoothed load R (requests/s).", |d| d.load),
    (
        "weir_dip_available",
        "Available capacity A = C - R (requests/s).",
        |d| d.available,
    ),
    (
        "weir_dip_weight",
        "Weight in the published table (0 = no new connections).",
        |d| Some(f64::from(d.weight)),
    ),
    (
        "weir_dip_class",
        "AWFD priority class k of the DIP (0 = none).",
        |d| Some(f64::from(d.class.unwrap_or(0))),
    ),
    (
        "weir_dip_new_conn_share",
        "Share of the VIP's new connections over the last second.",
        |d| d.share,
    ),
    (
        "weir_dip_healthy",
        "1 healthy, 0 failing its health checks (absent without checks).",
        |d| d.healthy.map(|h| if h { 1.0 } else { 0.0 }),
    ),
    (
        "weir_dip_agent_silent",
        "1 when the DIP's agent missed silent_after polls in a row.",
        |d| Some(if d.agent_silent { 1.0 } else { 0.0 }),
    ),
];

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        if !self.xdp_attach.is_empty() {
            family(
                &mut enc,
                "weir_xdp_attached",
                "1 while weir's XDP program is the one attached to the interface; 0 once it \
                 was detached or replaced from outside (restart weir to attach it again).",
                MetricType::Gauge,
                self.xdp_attach.iter().map(|a| {
                    let value = if a.attached { 1 } else { 0 };
                    ([("interface", a.interface.clone())], ConstGauge::new(value))
                }),
            )?;
        }
        let checked = || {
            self.redirect_targets
                .iter()
                .filter(|t| t.verdict != crate::redirect_targets::Verdict::Unchecked)
        };
        if checked().next().is_some() {
            family(
                &mut enc,
                "weir_redirect_target_ok",
                "1 while frames weir sends out by the interface can leave; 0 for a veth whose \
                 peer has neither an XDP program nor GRO on (or is down): the driver drops \
                 them all (`weir status` says what to change).",
                MetricType::Gauge,
                checked().map(|t| {
                    let ok = t.verdict == crate::redirect_targets::Verdict::Ok;
                    (
                        [("interface", t.interface.clone())],
                        ConstGauge::new(if ok { 1 } else { 0 }),
                    )
                }),
            )?;
        }
        if let Some(s) = &self.snapshot {
            single(
                &mut enc,
                "weir_controller_ticks",
                "Controller intervals run.",
                ConstCounter::new(s.ticks),
            )?;
            single(
                &mut enc,
                "weir_controller_tables_published",
                "AWFD table versions the controller published.",
                ConstCounter::new(s.tables_published),
            )?;
            single(
                &mut enc,
                "weir_controller_entries_written",
                "Stage-1/stage-2 map entries those publications wrote.",
                ConstCounter::new(s.entries_written),
            )?;
            family(
                &mut enc,
                "weir_vip_table_version",
                "Active AWFD table version of a VIP.",
                MetricType::Gauge,
                s.vips.iter().map(|v| {
                    (
                        [("vip", v.name.clone())],
                        ConstGauge::new(i64::from(v.table_version)),
                    )
                }),
            )?;
            for (name, help, get) in DIP_GAUGES {
                family(
                    &mut enc,
                    name,
                    help,
                    MetricType::Gauge,
                    dips(s).filter_map(|(vip, d)| {
                        let x = get(d).filter(|x| x.is_finite())?;
                        Some((dip_labels(vip, d), ConstGauge::new(x)))
                    }),
                )?;
            }
            family(
                &mut enc,
                "weir_dip_agent_errors",
                "Failed agent polls by kind.",
                MetricType::Counter,
                dips(s).flat_map(|(vip, d)| {
                    AgentError::KINDS.into_iter().map(move |kind| {
                        let [v, a] = dip_labels(vip, d);
                        let n = d.agent_errors.get(kind).copied().unwrap_or(0);
                        ([v, a, ("kind", kind.to_string())], ConstCounter::new(n))
                    })
                }),
            )?;
            family(
                &mut enc,
                "weir_dip_health_failures",
                "Failed health checks.",
                MetricType::Counter,
                dips(s)
                    .filter(|(_, d)| d.healthy.is_some())
                    .map(|(vip, d)| (dip_labels(vip, d), ConstCounter::new(d.health_failures))),
            )?;
            if !self.new_conns.is_empty() {
                family(
                    &mut enc,
                    "weir_dip_new_conns",
                    "New connections dispatched to the DIP.",
                    MetricType::Counter,
                    dips(s).filter_map(|(vip, d)| {
                        let n = *self.new_conns.get(&d.slot)?;
                        Some((dip_labels(vip, d), ConstCounter::new(n)))
                    }),
                )?;
            }
        }
        for (name, help, field) in QUIC_FAMILIES {
            if self.quic.is_empty() {
                break;
            }
            family(
                &mut enc,
                &format!("weir_vip_{name}"),
                help,
                MetricType::Counter,
                self.quic.iter().map(|q| {
                    (
                        [("vip", q.vip.clone())],
                        ConstCounter::new(field(&q.counters)),
                    )
                }),
            )?;
            family(
                &mut enc,
                &format!("weir_dip_{name}"),
                help,
                MetricType::Counter,
                self.quic.iter().flat_map(|q| {
                    q.dips.iter().map(|(dip, c)| {
                        let labels = [("vip", q.vip.clone()), ("dip", dip.clone())];
                        (labels, ConstCounter::new(field(c)))
                    })
                }),
            )?;
        }
        if !self.workers.is_empty() {
            encode_workers(&mut enc, &self.workers)?;
        }
        if let Some(c) = &self.cluster {
            encode_cluster(&mut enc, c)?;
        }
        if let Some(b) = &self.bgp {
            encode_bgp(&mut enc, b)?;
        }
        if !self.stats.is_empty() {
            family(
                &mut enc,
                "weir_packets",
                "Data-plane outcome and event counters (enum weir_stat).",
                MetricType::Counter,
                STAT_NAMES
                    .iter()
                    .zip(&self.stats)
                    .map(|(name, v)| ([("counter", *name)], ConstCounter::new(*v))),
            )?;
        }
        Ok(())
    }
}

type WorkerGet = fn(&WorkerStats) -> Option<f64>;

/// The per-worker gauges (label `cpu`): name, help, value (None: not
/// exported, e.g. before the first window).
const WORKER_GAUGES: [(&str, &str, WorkerGet); 5] = [
    (
        "weir_worker_utilization",
        "HNLB utilization of the worker's last window (eq. 2/3; 1 = saturated).",
        |w| w.utilization.as_ref().map(|u| u.utilization()),
    ),
    (
        "weir_worker_busy_fraction",
        "Share of the worker's cycles spent in polls that received packets (HNLB eq. 1).",
        |w| w.utilization.as_ref().map(|u| u.busy_fraction()),
    ),
    (
        "weir_worker_connections",
        "Connections in the worker's table (established, closing).",
        |w| Some(w.connections as f64),
    ),
    (
        "weir_worker_half_open",
        "Half-open TCP connections in the worker's table.",
        |w| Some(w.half_open as f64),
    ),
    (
        "weir_worker_fast_table_entries",
        "Connections the worker keeps in XDP's fast table (hybrid tier).",
        |w| w.offload.as_ref().map(|o| o.occupancy as f64),
    ),
];

type SocketGet = fn(&weir_software::stats::SocketStats) -> u64;

/// The per-socket counters (labels `cpu`, `interface`, `queue`).
const SOCKET_COUNTERS: [(&str, &str, SocketGet); 7] = [
    (
        "weir_worker_rx_packets",
        "Packets the worker received on the socket.",
        |s| s.rx_packets,
    ),
    (
        "weir_worker_tx_packets",
        "Packets the worker sent on the socket.",
        |s| s.tx_packets,
    ),
    (
        "weir_worker_tx_ring_full",
        "Packets to send that found the socket's TX ring full.",
        |s| s.tx_ring_full,
    ),
    (
        "weir_worker_rx_dropped",
        "Kernel: packets for the socket dropped (no frame, too long).",
        |s| s.rx_dropped,
    ),
    (
        "weir_worker_rx_ring_full",
        "Kernel: packets dropped because the socket's RX ring was full.",
        |s| s.rx_ring_full,
    ),
    (
        "weir_worker_fill_ring_empty",
        "Kernel: packets that found the socket's fill ring empty.",
        |s| s.fill_ring_empty,
    ),
    (
        "weir_worker_rx_invalid_descs",
        "Kernel: invalid descriptors on the socket's RX ring (dropped).",
        |s| s.rx_invalid_descs,
    ),
];

/// The software tier's workers: HNLB's utilization, tables, sockets and
/// the hybrid tier's offload decisions.
fn encode_workers(enc: &mut DescriptorEncoder, workers: &[WorkerStats]) -> fmt::Result {
    let cpu = |w: &WorkerStats| [("cpu", w.cpu.to_string())];
    for (name, help, get) in WORKER_GAUGES {
        family(
            enc,
            name,
            help,
            MetricType::Gauge,
            workers.iter().filter_map(|w| {
                let x = get(w).filter(|x| x.is_finite())?;
                Some((cpu(w), ConstGauge::new(x)))
            }),
        )?;
    }
    for (name, help, get) in SOCKET_COUNTERS {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            workers.iter().flat_map(|w| {
                w.sockets.iter().map(move |s| {
                    let labels = [
                        ("cpu", w.cpu.to_string()),
                        ("interface", s.interface.clone()),
                        ("queue", s.queue.to_string()),
                    ];
                    (labels, ConstCounter::new(get(s)))
                })
            }),
        )?;
    }
    let offload: Vec<_> = workers
        .iter()
        .filter_map(|w| Some((w.cpu, w.offload?)))
        .collect();
    if !offload.is_empty() {
        family(
            enc,
            "weir_worker_offload",
            "Hybrid tier: fast-table admissions, promotions and demotions by kind.",
            MetricType::Counter,
            offload.iter().flat_map(|(cpu, o)| {
                [
                    ("admitted", o.admitted),
                    ("promoted", o.promoted),
                    ("demoted_idle", o.demoted_idle),
                    ("demoted_closed", o.demoted_closed),
                    ("demoted_light", o.demoted_light),
                ]
                .map(|(kind, n)| {
                    (
                        [("cpu", cpu.to_string()), ("kind", kind.to_string())],
                        ConstCounter::new(n),
                    )
                })
            }),
        )?;
    }
    Ok(())
}

type SyncGet = fn(&weir_cluster::sync::stats::Counters) -> u64;
/// A counter family of connection sync: name, help, the label's name, and
/// each label value with its counter.
type SyncFamily = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, SyncGet)],
);

/// Connection sync's counters.
const SYNC_COUNTERS: [SyncFamily; 6] = [
    (
        "weir_sync_records",
        "Connection-sync records by fate: sent to peers, received, installed, already present, for an unknown VIP or DIP.",
        "kind",
        &[
            ("sent", |c| c.sent_records),
            ("received", |c| c.received_records),
            ("installed", |c| c.installed),
            ("present", |c| c.present),
            ("unknown", |c| c.unknown),
        ],
    ),
    (
        "weir_sync_datagrams",
        "Connection-sync datagrams by direction (send_error: refused by the socket).",
        "direction",
        &[
            ("sent", |c| c.sent_datagrams),
            ("received", |c| c.received_datagrams),
            ("send_error", |c| c.send_errors),
        ],
    ),
    (
        "weir_sync_dropped",
        "Connection-sync records (full, install_error) and datagrams (the rest) dropped, by reason.",
        "reason",
        &[
            ("full", |c| c.dropped_full),
            ("install_error", |c| c.install_errors),
            ("malformed", |c| c.dropped_malformed),
            ("oversized", |c| c.dropped_oversized),
            ("unauthenticated", |c| c.dropped_unauthenticated),
            ("replayed", |c| c.dropped_replayed),
        ],
    ),
    (
        "weir_sync_bulks",
        "Bulks (every connection, to a joining member): served, their records, and the challenges sent to members that asked.",
        "kind",
        &[
            ("served", |c| c.bulks_served),
            ("records", |c| c.bulk_records_sent),
            ("challenges", |c| c.bulk_challenges),
        ],
    ),
    (
        "weir_sync_bulk_refused",
        "Bulk requests and proofs refused, by reason (busy: one bulk at a time; unknown_member: not registered; address_mismatch: not from the member's registered address; stale_challenge: a nonce not issued, used or expired; rate_limited: a bulk too soon after the last).",
        "reason",
        &[
            ("busy", |c| c.bulks_refused),
            ("unknown_member", |c| c.bulk_refused_unknown_member),
            ("address_mismatch", |c| c.bulk_refused_address_mismatch),
            ("stale_challenge", |c| c.bulk_refused_stale_challenge),
            ("rate_limited", |c| c.bulk_refused_rate_limited),
        ],
    ),
    (
        "weir_sync_announcements",
        "Installs the data plane announced, and those its full ring lost.",
        "kind",
        &[("announced", |c| c.announced), ("lost", |c| c.announce_lost)],
    ),
];

/// BGP: the speaker, each neighbour's session and BFD, each VIP announced.
fn encode_bgp(enc: &mut DescriptorEncoder, b: &crate::bgp::BgpView) -> fmt::Result {
    let flag = |x: bool| ConstGauge::new(i64::from(x));
    single(
        enc,
        "weir_bgp_speaker_up",
        "1 while the BGP speaker (BIRD) runs and takes its configuration.",
        flag(b.speaker_pid.is_some() && b.speaker_error.is_none()),
    )?;
    single(
        enc,
        "weir_bgp_drained",
        "1 while the node is drained (weir node drain): its VIPs are withdrawn, or announced \
         de-preferred with bgp.drain = \"graceful-shutdown\".",
        flag(b.drained),
    )?;
    family(
        enc,
        "weir_bgp_session_established",
        "1 while the BGP session with the neighbour is Established.",
        MetricType::Gauge,
        b.neighbours
            .iter()
            .map(|n| ([("neighbour", n.address.clone())], flag(n.established))),
    )?;
    family(
        enc,
        "weir_bgp_bfd_up",
        "1 while the BFD session with the neighbour is Up (neighbours with bfd = true).",
        MetricType::Gauge,
        b.neighbours.iter().filter_map(|n| {
            let up = n.bfd.as_ref()? == "Up";
            Some(([("neighbour", n.address.clone())], flag(up)))
        }),
    )?;
    family(
        enc,
        "weir_bgp_vip_announced",
        "1 while the VIP is announced to the neighbours; 0 withdrawn (weir status says why).",
        MetricType::Gauge,
        b.vips.iter().map(|v| {
            (
                [("vip", v.name.clone()), ("prefix", v.prefix.clone())],
                flag(v.announced),
            )
        }),
    )
}

/// The cluster: etcd, leadership, table versions here and in etcd, and
/// connection sync.
fn encode_cluster(enc: &mut DescriptorEncoder, c: &weir_cluster::view::ClusterView) -> fmt::Result {
    let flag = |b: bool| ConstGauge::new(i64::from(b));
    single(
        enc,
        "weir_cluster_etcd_up",
        "1 when etcd answered this node's last call; 0: tables are kept as they are.",
        flag(c.etcd_ok),
    )?;
    single(
        enc,
        "weir_cluster_leader",
        "1 when this node leads the cluster (its controller publishes the tables).",
        flag(c.is_leader),
    )?;
    single(
        enc,
        "weir_cluster_nodes",
        "Nodes registered in the cluster.",
        ConstGauge::new(c.nodes.len() as i64),
    )?;
    family(
        enc,
        "weir_cluster_table_version",
        "The VIP's latest table version in etcd (the leader's).",
        MetricType::Gauge,
        c.tables.iter().map(|t| {
            (
                [("vip", t.vip.clone())],
                ConstGauge::new(i64::from(t.version)),
            )
        }),
    )?;
    family(
        enc,
        "weir_cluster_applied_version",
        "The cluster table version in force on this node.",
        MetricType::Gauge,
        c.this.tables.iter().filter_map(|(v, a)| {
            Some(([("vip", v.clone())], ConstGauge::new(i64::from(a.version?))))
        }),
    )?;
    family(
        enc,
        "weir_cluster_apply_delay_seconds",
        "From the leader's publication to its apply on this node, for the last version.",
        MetricType::Gauge,
        c.this.tables.iter().filter_map(|(v, a)| {
            Some(([("vip", v.clone())], ConstGauge::new(a.delay_ms? / 1000.0)))
        }),
    )?;
    family(
        enc,
        "weir_cluster_skew",
        "1 when the VIP's latest cluster table could not be applied here (configuration skew).",
        MetricType::Gauge,
        c.this
            .tables
            .iter()
            .map(|(v, a)| ([("vip", v.clone())], flag(a.skew.is_some()))),
    )?;
    let Some(s) = &c.this.sync else {
        return Ok(());
    };
    for (name, help, label, values) in SYNC_COUNTERS {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            values
                .iter()
                .map(|(v, get)| ([(label, v.to_string())], ConstCounter::new(get(s)))),
        )?;
    }
    single(
        enc,
        "weir_sync_peer_entries",
        "Peers' connections in this node's table (bounded by sync_max_entries).",
        ConstGauge::new(s.peer_entries as i64),
    )?;
    family(
        enc,
        "weir_sync_lag_seconds",
        "From a peer's install to this node's, by quantile (upper bounds of buckets an eighth of their value wide; 1 = the maximum).",
        MetricType::Gauge,
        [("0.5", s.lag_p50_us), ("0.99", s.lag_p99_us), ("1", s.lag_max_us)]
            .into_iter()
            .filter_map(|(q, us)| {
                Some(([("quantile", q.to_string())], ConstGauge::new(us? as f64 / 1e6)))
            }),
    )
}

/// `GET /metrics` over the controller's state, the maps pinned in
/// `pin_dir` (opened once; without them only the controller's view) and the
/// workers' reports in `run_dir`.
pub(crate) fn router(live: Arc<Live>, pin_dir: &Path) -> Router {
    let maps = Arc::new(Mutex::new(Maps::pinned(pin_dir).ok()));
    let slots = Arc::new(Slots::default());
    Router::new().route(
        "/metrics",
        get(move || async move {
            let text = tokio::task::spawn_blocking(move || {
                let maps = maps.lock().unwrap_or_else(|e| e.into_inner());
                Scrape::read(&live, maps.as_ref(), &slots).render()
            })
            .await
            .unwrap_or_default();
            ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
        }),
    )
}

/// Serves `/metrics` on `addr` until dropped.
pub(crate) fn serve(addr: SocketAddr, live: Arc<Live>, pin_dir: &Path) -> Result<Server> {
    Server::start(addr, router(live, pin_dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::VipSnapshot;
    use weir_config::{OnSilent, PolicyName, TelemetryKind};

    fn scrape() -> Scrape {
        let d = DipSnapshot {
            slot: 3,
            address: "10.0.0.2".into(),
            port: 8080,
            capacity: Some(500.0),
            load: Some(100.0),
            available: Some(400.0),
            weight: 4,
            class: Some(4),
            share: None,
            healthy: Some(true),
            health_checks: 9,
            health_failures: 1,
            agent_misses: 0,
            agent_silent: false,
            agent_errors: [("parse".to_string(), 2)].into_iter().collect(),
            last_error: None,
        };
        Scrape {
            snapshot: Some(Snapshot {
                policy: PolicyName::Awfd,
                m: 4,
                update_interval_ms: 100,
                telemetry: Some(TelemetryKind::Agent),
                on_agent_silent: OnSilent::Keep,
                at_unix_ms: 0,
                ticks: 7,
                tables_published: 2,
                entries_written: 5,
                vips: vec![VipSnapshot {
                    name: "we\"b".into(),
                    vip_id: 0,
                    table_version: 12,
                    dips: vec![d],
                }],
            }),
            new_conns: [(3, 42)].into_iter().collect(),
            quic: Vec::new(),
            stats: (0..STAT_NAMES.len() as u64).collect(),
            workers: Vec::new(),
            cluster: None,
            xdp_attach: Vec::new(),
            redirect_targets: Vec::new(),
            bgp: None,
        }
    }

    #[test]
    fn a_quic_vip_exports_its_and_its_dips_cid_counters() {
        let counters = |r, f, u| QuicStatus {
            cid_routed: r,
            cid_fallback: f,
            cid_unknown: u,
            reused_tuple: r + u,
        };
        // Without a controller as well: the QUIC counters do not come from
        // its snapshot.
        let t = Scrape {
            snapshot: None,
            quic: vec![QuicSample {
                vip: "we\"b".into(),
                counters: counters(10, 3, 1),
                dips: vec![("10.0.0.2:8080".into(), counters(7, 2, 0))],
            }],
            ..scrape()
        }
        .render();
        let dip = "{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\"}";
        let vip = "{vip=\"we\\\"b\"}";
        for line in [
            format!("weir_vip_quic_cid_routed_total{vip} 10"),
            format!("weir_vip_quic_cid_fallback_total{vip} 3"),
            format!("weir_vip_quic_cid_unknown_total{vip} 1"),
            format!("weir_dip_quic_cid_routed_total{dip} 7"),
            format!("weir_dip_quic_cid_fallback_total{dip} 2"),
            format!("weir_dip_quic_cid_unknown_total{dip} 0"),
            format!("weir_vip_quic_reused_tuple_total{vip} 11"),
            format!("weir_dip_quic_reused_tuple_total{dip} 7"),
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
    }

    #[test]
    fn exposition_has_one_sample_per_dip_and_skips_unknowns() {
        let t = scrape().render();
        let dip = "{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\"}";
        for line in [
            format!("weir_dip_capacity{dip} 500.0"),
            format!("weir_dip_weight{dip} 4.0"),
            format!("weir_dip_healthy{dip} 1.0"),
            format!("weir_dip_new_conns_total{dip} 42"),
            format!("weir_dip_health_failures_total{dip} 1"),
            "weir_dip_agent_errors_total{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\",kind=\"parse\"} 2"
                .into(),
            "weir_dip_agent_errors_total{vip=\"we\\\"b\",dip=\"10.0.0.2:8080\",kind=\"timeout\"} 0"
                .into(),
            "weir_vip_table_version{vip=\"we\\\"b\"} 12".into(),
            "weir_controller_ticks_total 7".into(),
            "weir_packets_total{counter=\"rx\"} 0".into(),
            "weir_packets_total{counter=\"pass_not_ip\"} 1".into(),
            "# TYPE weir_dip_agent_errors counter".into(),
            "# TYPE weir_dip_capacity gauge".into(),
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
        assert!(
            !t.contains("weir_dip_new_conn_share{"),
            "an unknown share is not exported:\n{t}"
        );
        assert!(!t.contains("quic"), "no QUIC VIP, no QUIC family:\n{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn software_tier_workers_have_gauges_and_socket_counters() {
        use weir_software::stats::SocketStats;
        use weir_software_engine::offload::OffloadStats;
        use weir_software_engine::utilization::{QueueBursts, Utilization};

        let window = Utilization {
            max_burst: 64,
            cycles: 1000,
            busy_cycles: 250,
            polls: 100,
            bursts: 10,
            packets: 320,
            busiest_queue: QueueBursts::default(),
            cost: None,
        };
        let busy = WorkerStats {
            cpu: 1,
            connections: 7,
            utilization: Some(window.clone()),
            offload: Some(OffloadStats {
                occupancy: 3,
                promoted: 5,
                ..OffloadStats::default()
            }),
            sockets: vec![SocketStats {
                interface: "eth0".into(),
                queue: 2,
                rx_packets: 320,
                rx_ring_full: 4,
                ..SocketStats::default()
            }],
            ..WorkerStats::default()
        };
        // A worker before its first window: no utilization sample.
        let starting = WorkerStats {
            cpu: 0,
            ..WorkerStats::default()
        };
        let t = Scrape {
            workers: vec![starting, busy],
            ..Scrape::default()
        }
        .render();
        for line in [
            format!(
                "weir_worker_utilization{{cpu=\"1\"}} {:?}",
                window.utilization()
            ),
            "weir_worker_busy_fraction{cpu=\"1\"} 0.25".to_string(),
            "weir_worker_connections{cpu=\"1\"} 7.0".into(),
            "weir_worker_connections{cpu=\"0\"} 0.0".into(),
            "weir_worker_fast_table_entries{cpu=\"1\"} 3.0".into(),
            "weir_worker_rx_packets_total{cpu=\"1\",interface=\"eth0\",queue=\"2\"} 320".into(),
            "weir_worker_rx_ring_full_total{cpu=\"1\",interface=\"eth0\",queue=\"2\"} 4".into(),
            "weir_worker_offload_total{cpu=\"1\",kind=\"promoted\"} 5".into(),
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
        assert!(!t.contains("weir_worker_utilization{cpu=\"0\"}"), "{t}");
        assert!(!t.contains("weir_worker_offload_total{cpu=\"0\""), "{t}");
    }

    #[test]
    fn a_detached_interface_reads_0_and_an_attached_one_1() {
        let attach = |name: &str, found| {
            crate::xdp_watch::IfaceAttach::of(name, 5, found, |_| Some("xdp_pass".into()))
        };
        let t = Scrape {
            xdp_attach: vec![
                attach("wc0", Some(5)),
                attach("wb1", None),
                attach("wb2", Some(6)),
            ],
            ..Scrape::default()
        }
        .render();
        assert!(
            t.contains("weir_xdp_attached{interface=\"wc0\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("weir_xdp_attached{interface=\"wb1\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("weir_xdp_attached{interface=\"wb2\"} 0\n"),
            "{t}"
        );
        assert!(!Scrape::default().render().contains("weir_xdp_attached"));
    }

    #[test]
    fn a_veth_that_drops_reads_0_and_an_unchecked_one_has_no_sample() {
        use crate::redirect_targets::{RedirectTarget, Verdict};
        let target = |name: &str, verdict| RedirectTarget {
            interface: name.into(),
            verdict,
            peer: None,
            peer_netns: None,
            problem: None,
            fix: None,
        };
        let t = Scrape {
            redirect_targets: vec![
                target("wc0", Verdict::Ok),
                target("wb1", Verdict::Drops),
                target("wb2", Verdict::Unchecked),
            ],
            ..Scrape::default()
        }
        .render();
        for line in [
            "weir_redirect_target_ok{interface=\"wc0\"} 1",
            "weir_redirect_target_ok{interface=\"wb1\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
        assert!(
            !t.contains("weir_redirect_target_ok{interface=\"wb2\"}"),
            "{t}"
        );
        assert!(!Scrape::default().render().contains("weir_redirect_target"));
    }

    #[test]
    fn without_a_controller_only_the_counters() {
        let s = Scrape {
            snapshot: None,
            ..scrape()
        };
        let t = s.render();
        assert!(t.contains("weir_packets_total{counter=\"rx\"} 0\n"), "{t}");
        assert!(!t.contains("weir_dip_"), "{t}");
        assert_eq!(Scrape::default().render(), "# EOF\n");
    }
    #[test]
    fn a_cluster_node_exports_etcd_leadership_versions_and_sync() {
        use weir_cluster::sync::stats::Counters;
        use weir_cluster::view::*;
        let this = NodeStatus {
            name: "lb-a".into(),
            at_unix_ms: 0,
            tables: [(
                "web".to_string(),
                AppliedTable {
                    version: Some(12),
                    applied_unix_ms: Some(0),
                    delay_ms: Some(3.0),
                    skew: None,
                },
            )]
            .into_iter()
            .collect(),
            apply_delay_max_ms: Some(3.0),
            sync: Some(Counters {
                sent_records: 5,
                dropped_replayed: 2,
                bulk_refused_stale_challenge: 4,
                lag_p99_us: Some(512),
                ..Counters::default()
            }),
            ready: true,
        };
        let t = Scrape {
            cluster: Some(ClusterView {
                node: "lb-a".into(),
                prefix: "/weir".into(),
                etcd: Vec::new(),
                etcd_ok: false,
                etcd_error: None,
                etcd_down_since_unix_ms: Some(0),
                leader: Some("lb-a".into()),
                is_leader: true,
                terms_won: 1,
                nodes: Vec::new(),
                tables: vec![TableView {
                    vip: "web".into(),
                    version: 12,
                    leader: "lb-a".into(),
                    published_unix_ms: 0,
                }],
                this,
                join: None,
                at_unix_ms: 0,
            }),
            ..Scrape::default()
        }
        .render();
        for line in [
            "weir_cluster_etcd_up 0",
            "weir_cluster_leader 1",
            "weir_cluster_table_version{vip=\"web\"} 12",
            "weir_cluster_applied_version{vip=\"web\"} 12",
            "weir_cluster_apply_delay_seconds{vip=\"web\"} 0.003",
            "weir_cluster_skew{vip=\"web\"} 0",
            "weir_sync_records_total{kind=\"sent\"} 5",
            "weir_sync_dropped_total{reason=\"replayed\"} 2",
            "weir_sync_bulk_refused_total{reason=\"stale_challenge\"} 4",
            "weir_sync_bulk_refused_total{reason=\"unknown_member\"} 0",
            "weir_sync_lag_seconds{quantile=\"0.99\"} 0.000512",
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
    }
}
