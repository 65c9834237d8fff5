//! The report of `weir-lab bench forward`: rows (medians over runs, ratios to
//! nftables and HAProxy from the same runs), the JSON shape, the text
//! tables and the figure.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use weir_plot::{Axis, Bar, Bars, Figure, Panel, Style};

use super::{Balancer, ForwardBenchArgs, HttpMode, HttpTrial, PacketMix, TcpTrial, Trial};

/// One balancer at one flow count, over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub balancer: Balancer,
    pub flows: u32,
    /// Received Mpps: median, min, max.
    pub received_mpps: f64,
    pub received_mpps_min: f64,
    pub received_mpps_max: f64,
    /// Offered Mpps, median.
    pub offered_mpps: f64,
    /// Busy share of the load balancer's CPU, median.
    pub lb_cpu_busy: f64,
    /// Load balancer's CPU time per received packet (ns), median.
    pub lb_cpu_ns_per_packet: Option<f64>,
    /// weir's program, BPF run time per packet (ns), median.
    pub bpf_ns_per_packet: Option<f64>,
    /// Median of the per-run ratios to nftables at the same flow count.
    pub received_vs_nftables: Option<f64>,
    pub cpu_per_packet_vs_nftables: Option<f64>,
}

/// One balancer's single long TCP flow, over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct TcpRow {
    pub balancer: Balancer,
    /// Received Gbit/s: median, min, max.
    pub gbps: f64,
    pub gbps_min: f64,
    pub gbps_max: f64,
    /// The sender's retransmissions, median.
    pub retransmits: f64,
    /// Frames XDP_REDIRECT found a full veth ring for, median.
    pub redirect_ring_full: f64,
    /// Packets of the kernel's own transmits (skbs) a veth dropped at a
    /// full ring, median.
    pub other_drops: f64,
    /// Medians of the per-run ratios.
    pub gbps_vs_nftables: Option<f64>,
    pub gbps_vs_haproxy: Option<f64>,
    pub retransmits_vs_nftables: Option<f64>,
    pub retransmits_vs_haproxy: Option<f64>,
}

/// One balancer's HTTP trials in one mode, over the runs. CPU figures are
/// per answered request: in close mode, per new connection.
#[derive(Debug, Clone, Serialize)]
pub struct HttpRow {
    pub balancer: Balancer,
    pub mode: HttpMode,
    /// Requests per second: median, min, max.
    pub requests_per_s: f64,
    pub requests_per_s_min: f64,
    pub requests_per_s_max: f64,
    /// Latency percentiles (µs), medians over the runs.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Failed requests, median.
    pub failed: f64,
    /// The load balancer's CPU per request (ns), median: all of it, and
    /// its parts (kernel NAPI outside BPF, BPF run time, user-space process).
    pub lb_ns_per_request: f64,
    pub kernel_ns_per_request: f64,
    pub bpf_ns_per_request: Option<f64>,
    pub process_ns_per_request: Option<f64>,
    /// The process's threads by name: CPU per request (ns), median over
    /// the runs (a thread that used no CPU in a run counts 0 there).
    pub process_threads_ns_per_request: BTreeMap<String, f64>,
    /// weir's XDP runs (packets) per request, median.
    pub bpf_runs_per_request: Option<f64>,
    /// weir's packets of each kind per connection (its data-plane
    /// counters), field-wise median over the runs.
    pub packets_per_connection: Option<PacketMix>,
    /// Packets from the backends through the load balancer per request
    /// (its backend-side interfaces' RX), median: the replies it carried.
    pub lb_rx_from_backends_per_request: f64,
    /// Medians of the per-run ratios to nftables in the same mode.
    pub requests_per_s_vs_nftables: Option<f64>,
    pub p50_vs_nftables: Option<f64>,
    pub lb_cpu_vs_nftables: Option<f64>,
    pub requests_per_s_vs_haproxy: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub method: &'static str,
    pub dips: usize,
    pub duration_s: f64,
    pub runs: usize,
    pub generator_cpu: usize,
    pub lb_cpu: usize,
    pub rows: Vec<Row>,
    pub trials: Vec<TrialRecord>,
    pub tcp_seconds: u64,
    /// iperf3 -w in KiB; None: the kernel's autotuning.
    pub tcp_window_kib: Option<u32>,
    pub tcp_rows: Vec<TcpRow>,
    pub tcp_trials: Vec<TcpTrialRecord>,
    pub http_seconds: f64,
    pub http_connections: usize,
    pub http_rows: Vec<HttpRow>,
    pub http_trials: Vec<HttpTrialRecord>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrialRecord {
    pub run: usize,
    pub balancer: Balancer,
    pub flows: u32,
    #[serde(flatten)]
    pub trial: Trial,
}

#[derive(Debug, Clone, Serialize)]
pub struct TcpTrialRecord {
    pub run: usize,
    pub balancer: Balancer,
    #[serde(flatten)]
    pub trial: TcpTrial,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpTrialRecord {
    pub run: usize,
    pub balancer: Balancer,
    #[serde(flatten)]
    pub trial: HttpTrial,
}

const METHOD: &str = "64-byte UDP from weir_gen (live BPF_PROG_TEST_RUN, one CPU, full speed) \
    through the load balancer's namespace to XDP sinks at the backends; the load balancer's \
    receive NAPI in a kernel thread pinned to its own CPU; CPU per packet = that CPU's \
    /proc/stat busy time / received; BPF ns = run_time_ns / run_cnt of weir's program; \
    flows warmed before each trial; TCP: one iperf3 flow per balancer and run from the \
    client to iperf3 -s at one backend running weir decap, receiver's Gbit/s and \
    sum_sent.retransmits, the path's veth drop counters; HTTP: the lab's own bounded clients \
    (one thread per connection) on the generator's CPU to the lab's HTTP servers at every \
    backend, keep-alive and a connection per request (Connection: close, latency including \
    the connect), weir dsr's replies over a return path from the backends to the client \
    (weir dsr via LB and the others' through the load balancer); LB CPU = utime + stime of the load balancer's threaded NAPI contexts \
    (the kernel's share is that less BPF run time) + the daemon's or HAProxy's \
    /proc/PID/stat; medians over runs, ratios per run";

impl Report {
    pub fn new(
        args: &ForwardBenchArgs,
        generator_cpu: usize,
        lb_cpu: usize,
        trials: Vec<(usize, Balancer, u32, Trial)>,
        tcp_trials: Vec<(usize, Balancer, TcpTrial)>,
        http_trials: Vec<(usize, Balancer, HttpTrial)>,
    ) -> Report {
        let trials: Vec<TrialRecord> = trials
            .into_iter()
            .map(|(run, balancer, flows, trial)| TrialRecord {
                run,
                balancer,
                flows,
                trial,
            })
            .collect();
        let mut rows = Vec::new();
        for &flows in &args.flows {
            for &balancer in &args.balancers {
                let mine: Vec<&TrialRecord> = trials
                    .iter()
                    .filter(|t| t.balancer == balancer && t.flows == flows)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let mpps: Vec<f64> = mine.iter().map(|t| t.trial.received_pps / 1e6).collect();
                let ratio = |get: fn(&Trial) -> Option<f64>| {
                    let per_run: Vec<f64> = mine
                        .iter()
                        .filter_map(|t| {
                            let peer = trials.iter().find(|p| {
                                p.run == t.run
                                    && p.flows == flows
                                    && p.balancer == Balancer::Nftables
                            })?;
                            Some(get(&t.trial)? / get(&peer.trial).filter(|&x| x > 0.0)?)
                        })
                        .collect();
                    (balancer != Balancer::Nftables && !per_run.is_empty())
                        .then(|| median(&per_run))
                };
                rows.push(Row {
                    balancer,
                    flows,
                    received_mpps: median(&mpps),
                    received_mpps_min: mpps.iter().copied().fold(f64::INFINITY, f64::min),
                    received_mpps_max: mpps.iter().copied().fold(0.0, f64::max),
                    offered_mpps: median(
                        &mine
                            .iter()
                            .map(|t| t.trial.offered_pps / 1e6)
                            .collect::<Vec<_>>(),
                    ),
                    lb_cpu_busy: median(
                        &mine.iter().map(|t| t.trial.lb_cpu_busy).collect::<Vec<_>>(),
                    ),
                    lb_cpu_ns_per_packet: median_of(
                        mine.iter().map(|t| t.trial.lb_cpu_ns_per_packet),
                    ),
                    bpf_ns_per_packet: median_of(mine.iter().map(|t| t.trial.bpf_ns_per_packet)),
                    received_vs_nftables: ratio(|t| Some(t.received_pps)),
                    cpu_per_packet_vs_nftables: ratio(|t| t.lb_cpu_ns_per_packet),
                });
            }
        }
        let http_trials: Vec<HttpTrialRecord> = http_trials
            .into_iter()
            .map(|(run, balancer, trial)| HttpTrialRecord {
                run,
                balancer,
                trial,
            })
            .collect();
        let tcp_trials: Vec<TcpTrialRecord> = tcp_trials
            .into_iter()
            .map(|(run, balancer, trial)| TcpTrialRecord {
                run,
                balancer,
                trial,
            })
            .collect();
        Report {
            method: METHOD,
            dips: args.dips,
            duration_s: args.duration,
            runs: args.runs,
            generator_cpu,
            lb_cpu,
            rows,
            trials,
            tcp_seconds: args.tcp_seconds,
            tcp_window_kib: args.tcp_window,
            tcp_rows: tcp_rows(&args.balancers, &tcp_trials),
            tcp_trials,
            http_seconds: args.http_seconds,
            http_connections: args.http_connections,
            http_rows: http_rows(&args.balancers, &http_trials),
            http_trials,
        }
    }
}

/// A TCP row per balancer that has trials.
fn tcp_rows(balancers: &[Balancer], trials: &[TcpTrialRecord]) -> Vec<TcpRow> {
    let mut rows = Vec::new();
    for &balancer in balancers {
        let mine: Vec<&TcpTrialRecord> = trials.iter().filter(|t| t.balancer == balancer).collect();
        if mine.is_empty() {
            continue;
        }
        let of = |get: fn(&TcpTrial) -> f64| -> Vec<f64> {
            mine.iter().map(|t| get(&t.trial)).collect()
        };
        // The median of this balancer's per-run ratios to `peer`; a run
        // where the peer retransmitted nothing gives no retransmission ratio.
        let ratio = |peer: Balancer, get: fn(&TcpTrial) -> f64| -> Option<f64> {
            let per_run: Vec<f64> = mine
                .iter()
                .filter_map(|t| {
                    let p = trials
                        .iter()
                        .find(|p| p.run == t.run && p.balancer == peer)?;
                    let base = get(&p.trial);
                    (base > 0.0).then(|| get(&t.trial) / base)
                })
                .collect();
            (balancer != peer && !per_run.is_empty()).then(|| median(&per_run))
        };
        let gbps = of(|t| t.gbps);
        rows.push(TcpRow {
            balancer,
            gbps: median(&gbps),
            gbps_min: gbps.iter().copied().fold(f64::INFINITY, f64::min),
            gbps_max: gbps.iter().copied().fold(0.0, f64::max),
            retransmits: median(&of(|t| t.retransmits as f64)),
            redirect_ring_full: median(&of(|t| t.redirect_ring_full() as f64)),
            other_drops: median(&of(|t| t.other_drops() as f64)),
            gbps_vs_nftables: ratio(Balancer::Nftables, |t| t.gbps),
            gbps_vs_haproxy: ratio(Balancer::Haproxy, |t| t.gbps),
            retransmits_vs_nftables: ratio(Balancer::Nftables, |t| t.retransmits as f64),
            retransmits_vs_haproxy: ratio(Balancer::Haproxy, |t| t.retransmits as f64),
        });
    }
    rows
}

/// An HTTP row per balancer and mode that has trials.
fn http_rows(balancers: &[Balancer], trials: &[HttpTrialRecord]) -> Vec<HttpRow> {
    let mut rows = Vec::new();
    for mode in [HttpMode::KeepAlive, HttpMode::Close] {
        for &balancer in balancers {
            let mine: Vec<&HttpTrialRecord> = trials
                .iter()
                .filter(|t| t.balancer == balancer && t.trial.mode == mode)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let of = |get: &dyn Fn(&HttpTrial) -> f64| -> Vec<f64> {
                mine.iter().map(|t| get(&t.trial)).collect()
            };
            let per_request = |t: &HttpTrial, ns: f64| ns / t.requests as f64;
            let ratio = |peer: Balancer, get: fn(&HttpTrial) -> f64| -> Option<f64> {
                let per_run: Vec<f64> = mine
                    .iter()
                    .filter_map(|t| {
                        let p = trials.iter().find(|p| {
                            p.run == t.run && p.balancer == peer && p.trial.mode == mode
                        })?;
                        let base = get(&p.trial);
                        (base > 0.0).then(|| get(&t.trial) / base)
                    })
                    .collect();
                (balancer != peer && !per_run.is_empty()).then(|| median(&per_run))
            };
            let rps = of(&|t| t.requests_per_s);
            let names: BTreeSet<&String> = mine
                .iter()
                .flat_map(|t| t.trial.process_threads_ns.keys())
                .collect();
            let process_threads_ns_per_request = names
                .into_iter()
                .map(|name| {
                    let v = of(&|t| {
                        per_request(t, t.process_threads_ns.get(name).copied().unwrap_or(0.0))
                    });
                    (name.clone(), median(&v))
                })
                .collect();
            rows.push(HttpRow {
                balancer,
                mode,
                requests_per_s: median(&rps),
                requests_per_s_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
                requests_per_s_max: rps.iter().copied().fold(0.0, f64::max),
                p50_us: median(&of(&|t| t.p50_us)),
                p99_us: median(&of(&|t| t.p99_us)),
                failed: median(&of(&|t| t.failed as f64)),
                lb_ns_per_request: median(&of(&|t| per_request(t, t.lb_ns()))),
                kernel_ns_per_request: median(&of(&|t| per_request(t, t.kernel_ns()))),
                bpf_ns_per_request: median_of(
                    mine.iter()
                        .map(|t| t.trial.bpf_ns.map(|b| per_request(&t.trial, b))),
                ),
                process_ns_per_request: median_of(
                    mine.iter()
                        .map(|t| t.trial.process_ns.map(|p| per_request(&t.trial, p))),
                ),
                process_threads_ns_per_request,
                bpf_runs_per_request: median_of(
                    mine.iter()
                        .map(|t| t.trial.bpf_runs.map(|r| per_request(&t.trial, r as f64))),
                ),
                lb_rx_from_backends_per_request: median(&of(&|t| {
                    per_request(t, t.lb_rx_from_backends as f64)
                })),
                packets_per_connection: PacketMix::median(
                    &mine
                        .iter()
                        .filter_map(|t| t.trial.packets_per_connection)
                        .collect::<Vec<_>>(),
                ),
                requests_per_s_vs_nftables: ratio(Balancer::Nftables, |t| t.requests_per_s),
                p50_vs_nftables: ratio(Balancer::Nftables, |t| t.p50_us),
                lb_cpu_vs_nftables: ratio(Balancer::Nftables, |t| t.lb_ns() / t.requests as f64),
                requests_per_s_vs_haproxy: ratio(Balancer::Haproxy, |t| t.requests_per_s),
            });
        }
    }
    rows
}

/// The median; NaN for none.
pub(super) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of the values there are; None if none.
fn median_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| median(&v))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    if !r.rows.is_empty() {
        out += &render_udp(r);
    }
    if !r.tcp_rows.is_empty() {
        out += &render_tcp(r);
    }
    if !r.http_rows.is_empty() {
        out += &render_http(r);
    }
    out
}

fn render_udp(r: &Report) -> String {
    let mut out = format!(
        "\nweir-lab bench forward: 64-byte UDP, {} DIPs, {} s trials, median of {} runs; \
         generator on CPU {}, load balancer's receive path on CPU {}\n",
        r.dips, r.duration_s, r.runs, r.generator_cpu, r.lb_cpu
    );
    out += &format!(
        "{:<14} {:>7} {:>9} {:>17} {:>9} {:>8} {:>12} {:>10} {:>11} {:>13}\n",
        "balancer",
        "flows",
        "offered",
        "received Mpps",
        "LB CPU",
        "ns/pkt",
        "BPF ns/pkt",
        "vs nft rx",
        "vs nft CPU",
        ""
    );
    for row in &r.rows {
        out += &format!(
            "{:<14} {:>7} {:>9.3} {:>6.3} ({:.3}..{:.3}) {:>8.0}% {:>8} {:>12} {:>10} {:>11}\n",
            row.balancer.label(),
            row.flows,
            row.offered_mpps,
            row.received_mpps,
            row.received_mpps_min,
            row.received_mpps_max,
            row.lb_cpu_busy * 100.0,
            opt(row.lb_cpu_ns_per_packet, 0),
            opt(row.bpf_ns_per_packet, 0),
            ratio(row.received_vs_nftables),
            ratio(row.cpu_per_packet_vs_nftables),
        );
    }
    out
}

fn render_http(r: &Report) -> String {
    let mut out = format!(
        "\nHTTP, {} connections, {} s per trial, median of {} runs; load balancer CPU per \
         request (in close mode: per new connection), ns: all, the kernel's (NAPI threads \
         less BPF), BPF run time, the daemon's or HAProxy's process; packets from the \
         backends through the load balancer per request (weir dsr's replies take the DSR \
         return path)\n",
        r.http_connections, r.http_seconds, r.runs
    );
    out += &format!(
        "{:<15} {:<17} {:>26} {:>8} {:>8} {:>6} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}\n",
        "balancer",
        "mode",
        "requests/s",
        "p50 us",
        "p99 us",
        "failed",
        "LB ns",
        "kernel",
        "BPF",
        "process",
        "BPF runs",
        "DIP->LB",
        "vs nft",
        "p50/nft",
        "CPU/nft",
        "vs HAP"
    );
    for row in &r.http_rows {
        out += &format!(
            "{:<15} {:<17} {:>8.0} ({:>7.0}..{:>7.0}) {:>8.0} {:>8.0} {:>6.0} {:>8.0} {:>8.0} {:>6} {:>8} {:>8} {:>8.1} {:>7} {:>7} {:>7} {:>7}\n",
            row.balancer.label(),
            row.mode.label(),
            row.requests_per_s,
            row.requests_per_s_min,
            row.requests_per_s_max,
            row.p50_us,
            row.p99_us,
            row.failed,
            row.lb_ns_per_request,
            row.kernel_ns_per_request,
            opt(row.bpf_ns_per_request, 0),
            opt(row.process_ns_per_request, 0),
            opt(row.bpf_runs_per_request, 1),
            row.lb_rx_from_backends_per_request,
            ratio(row.requests_per_s_vs_nftables),
            ratio(row.p50_vs_nftables),
            ratio(row.lb_cpu_vs_nftables),
            ratio(row.requests_per_s_vs_haproxy),
        );
    }
    for row in r.http_rows.iter().filter(|r| r.balancer.is_weir()) {
        let threads: Vec<String> = row
            .process_threads_ns_per_request
            .iter()
            .map(|(name, ns)| format!("{name} {ns:.0}"))
            .collect();
        if let Some(m) = &row.packets_per_connection {
            out += &format!(
                "{} {}: XDP packets per connection: {:.1} SYN, {:.1} promoting ACK, {:.1} hits, \
                 {:.1} reverse NAT, {:.1} other\n",
                row.balancer.label(),
                row.mode.label(),
                m.syns + m.syn_retransmits,
                m.promotions,
                m.hits,
                m.reverse_nats,
                m.unclassified()
            );
        }
        out += &format!(
            "{} {}: the daemon's threads, ns per request: {}\n",
            row.balancer.label(),
            row.mode.label(),
            if threads.is_empty() {
                "none used CPU".to_string()
            } else {
                threads.join(", ")
            }
        );
    }
    out
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.2}x"))
}

fn render_tcp(r: &Report) -> String {
    let mut out = format!(
        "\nOne long TCP flow (iperf3, {} s, {}), median of {} runs; drops at full veth rings: \
         frames XDP_REDIRECT sent (ring full) and the kernel's own transmits (other)\n",
        r.tcp_seconds,
        r.tcp_window_kib
            .map_or("autotuned buffers".into(), |w| format!("-w {w}K")),
        r.runs
    );
    out += &format!(
        "{:<14} {:>20} {:>8} {:>10} {:>8} {:>9} {:>9} {:>10} {:>10}\n",
        "balancer",
        "Gbit/s",
        "retrans",
        "ring full",
        "other",
        "vs nft",
        "vs HAP",
        "retr/nft",
        "retr/HAP"
    );
    for row in &r.tcp_rows {
        out += &format!(
            "{:<14} {:>5.2} ({:.2}..{:.2}) {:>8.0} {:>10.0} {:>8.0} {:>9} {:>9} {:>10} {:>10}\n",
            row.balancer.label(),
            row.gbps,
            row.gbps_min,
            row.gbps_max,
            row.retransmits,
            row.redirect_ring_full,
            row.other_drops,
            ratio(row.gbps_vs_nftables),
            ratio(row.gbps_vs_haproxy),
            ratio(row.retransmits_vs_nftables),
            ratio(row.retransmits_vs_haproxy),
        );
    }
    out
}

/// Received Mpps and CPU per packet, a panel each, a bar per balancer and
/// flow count.
pub fn figure(r: &Report) -> Figure {
    let color = |b: Balancer| match b {
        Balancer::WeirNat => 0,
        Balancer::WeirDsr => 1,
        Balancer::WeirIpip => 2,
        Balancer::Nftables => 3,
        Balancer::Haproxy => 4,
        Balancer::WeirDsrViaLb => 5,
    };
    let bars = |value: fn(&Row) -> Option<f64>| -> Vec<Bar> {
        r.rows
            .iter()
            .filter_map(|row| {
                Some(Bar {
                    label: format!("{}, {} flows", row.balancer.label(), row.flows),
                    value: value(row)?,
                    err: None,
                    style: Style::solid(color(row.balancer)),
                })
            })
            .collect()
    };
    let mut panels = vec![
        Panel::Bars(Bars {
            title: "64-byte UDP received at the backends".into(),
            y: Axis::new("Mpps"),
            bars: bars(|row| Some(row.received_mpps)),
        }),
        Panel::Bars(Bars {
            title: "load balancer CPU per packet".into(),
            y: Axis::new("ns per packet"),
            bars: bars(|row| row.lb_cpu_ns_per_packet),
        }),
    ];
    if !r.tcp_rows.is_empty() {
        let tcp_bars = |value: fn(&TcpRow) -> f64| -> Vec<Bar> {
            r.tcp_rows
                .iter()
                .map(|row| Bar {
                    label: row.balancer.label().into(),
                    value: value(row),
                    err: None,
                    style: Style::solid(color(row.balancer)),
                })
                .collect()
        };
        panels.push(Panel::Bars(Bars {
            title: format!("one long TCP flow ({} s)", r.tcp_seconds),
            y: Axis::new("Gbit/s"),
            bars: tcp_bars(|row| row.gbps),
        }));
        panels.push(Panel::Bars(Bars {
            title: "its retransmissions".into(),
            y: Axis::new("segments"),
            bars: tcp_bars(|row| row.retransmits),
        }));
    }
    let height = 450 * panels.len() as u32;
    Figure {
        title: "weir-lab bench forward: real forwarding through the load balancer".into(),
        subtitle: Some(format!(
            "{} DIPs, {} s trials, median of {} runs; the load balancer's receive path alone \
             on CPU {}",
            r.dips, r.duration_s, r.runs, r.lb_cpu
        )),
        panels,
        columns: 1,
        size: (1100, height),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(rx_pps: f64, cpu_ns: f64) -> Trial {
        Trial {
            offered: 1000,
            offered_pps: 2e6,
            received: 1000,
            received_pps: rx_pps,
            lb_cpu_busy: 1.0,
            lb_cpu_ns_per_packet: Some(cpu_ns),
            bpf_ns_per_packet: None,
            elapsed_s: 1.0,
        }
    }

    #[test]
    fn ratios_pair_trials_of_the_same_run_and_flow_count() {
        let args = ForwardBenchArgs {
            balancers: vec![Balancer::WeirNat, Balancer::Nftables],
            flows: vec![1, 1000],
            dips: 2,
            duration: 1.0,
            tcp_seconds: 0,
            tcp_window: None,
            http_seconds: 1.0,
            http_modes: vec![HttpMode::KeepAlive, HttpMode::Close],
            http_connections: 4,
            trials: vec![super::super::TrialKind::Udp],
            runs: 2,
            json: None,
            svg: None,
        };
        let trials = vec![
            (0, Balancer::WeirNat, 1000, trial(4e6, 100.0)),
            (0, Balancer::Nftables, 1000, trial(1e6, 500.0)),
            (1, Balancer::WeirNat, 1000, trial(2e6, 300.0)),
            (1, Balancer::Nftables, 1000, trial(2e6, 300.0)),
            // Run 1 measured no nftables at 1 flow: no ratio from it.
            (0, Balancer::WeirNat, 1, trial(3e6, 100.0)),
        ];
        let r = Report::new(&args, 0, 1, trials, Vec::new(), Vec::new());
        let row = |b, f| {
            r.rows
                .iter()
                .find(|x| x.balancer == b && x.flows == f)
                .unwrap()
        };
        let weir = row(Balancer::WeirNat, 1000);
        assert_eq!(weir.received_mpps, 3.0);
        // Per run 4x and 1x: the median is 2.5x, not 3/1.5.
        assert_eq!(weir.received_vs_nftables, Some(2.5));
        assert_eq!(weir.cpu_per_packet_vs_nftables, Some((0.2 + 1.0) / 2.0));
        assert_eq!(row(Balancer::Nftables, 1000).received_vs_nftables, None);
        assert_eq!(row(Balancer::WeirNat, 1).received_vs_nftables, None);
        assert!(render(&r).contains("2.50x"), "{}", render(&r));
        assert!(figure(&r).svg().is_ok());
    }

    fn tcp(gbps: f64, retransmits: u64, ring_full: u64) -> TcpTrial {
        TcpTrial {
            gbps,
            retransmits,
            drops: [
                ("lb wb1 tx_queue_0_xdp_xmit_errors".to_string(), ring_full),
                ("lb wb1 tx_dropped".to_string(), ring_full),
                ("client eth0 tx_dropped".to_string(), 3),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn tcp_rows_take_per_run_ratios_and_split_the_drops() {
        let args = ForwardBenchArgs {
            balancers: vec![Balancer::WeirNat, Balancer::Nftables, Balancer::Haproxy],
            flows: vec![1],
            dips: 1,
            duration: 1.0,
            tcp_seconds: 2,
            tcp_window: None,
            http_seconds: 1.0,
            http_modes: vec![HttpMode::KeepAlive, HttpMode::Close],
            http_connections: 4,
            trials: vec![super::super::TrialKind::Udp],
            runs: 2,
            json: None,
            svg: None,
        };
        let tcp_trials = vec![
            (0, Balancer::WeirNat, tcp(3.0, 100, 40)),
            (0, Balancer::Nftables, tcp(2.0, 10, 0)),
            (0, Balancer::Haproxy, tcp(3.0, 50, 0)),
            (1, Balancer::WeirNat, tcp(2.0, 30, 20)),
            // No retransmission in run 1: no retransmission ratio from it.
            (1, Balancer::Nftables, tcp(2.0, 0, 0)),
            (1, Balancer::Haproxy, tcp(1.0, 30, 0)),
        ];
        let r = Report::new(&args, 0, 1, Vec::new(), tcp_trials, Vec::new());
        let row = |b| r.tcp_rows.iter().find(|x| x.balancer == b).unwrap();
        let weir = row(Balancer::WeirNat);
        assert_eq!(weir.gbps, 2.5);
        assert_eq!(weir.retransmits, 65.0);
        assert_eq!(weir.redirect_ring_full, 30.0);
        assert_eq!(weir.other_drops, 3.0);
        // Per run 1.5x and 1x.
        assert_eq!(weir.gbps_vs_nftables, Some(1.25));
        assert_eq!(weir.retransmits_vs_nftables, Some(10.0));
        // Per run 2x and 1x.
        assert_eq!(weir.retransmits_vs_haproxy, Some(1.5));
        assert_eq!(row(Balancer::Haproxy).gbps_vs_haproxy, None);
        assert!(render(&r).contains("10.00x"), "{}", render(&r));
        assert!(figure(&r).svg().is_ok());
    }

    fn http(mode: HttpMode, rps: f64, p50: f64, lb_ns: f64, sweeper_ns: Option<f64>) -> HttpTrial {
        HttpTrial {
            mode,
            requests: 1000,
            connections: 1000,
            failed: 0,
            first_error: None,
            requests_per_s: rps,
            p50_us: p50,
            p99_us: p50 * 3.0,
            napi_ns: lb_ns,
            bpf_ns: None,
            bpf_runs: None,
            process_ns: None,
            process_threads_ns: sweeper_ns
                .map(|ns| ("weir-sweeper".to_string(), ns))
                .into_iter()
                .collect(),
            packets_per_connection: None,
            lb_rx_from_backends: 5 * 1000,
            elapsed_s: 10.0,
        }
    }

    #[test]
    fn http_rows_pair_runs_and_modes_and_split_the_daemons_threads() {
        let args = ForwardBenchArgs {
            balancers: vec![Balancer::WeirNat, Balancer::Nftables, Balancer::Haproxy],
            flows: vec![1],
            dips: 2,
            duration: 1.0,
            tcp_seconds: 0,
            tcp_window: None,
            http_seconds: 1.0,
            http_modes: vec![HttpMode::KeepAlive, HttpMode::Close],
            http_connections: 4,
            trials: vec![super::super::TrialKind::Http],
            runs: 2,
            json: None,
            svg: None,
        };
        let close = HttpMode::Close;
        let http_trials = vec![
            (
                0,
                Balancer::WeirNat,
                http(close, 3000.0, 10.0, 1e6, Some(2e5)),
            ),
            (0, Balancer::Nftables, http(close, 1000.0, 20.0, 2e6, None)),
            (0, Balancer::Haproxy, http(close, 500.0, 40.0, 4e6, None)),
            (1, Balancer::WeirNat, http(close, 2000.0, 10.0, 1e6, None)),
            (1, Balancer::Nftables, http(close, 2000.0, 10.0, 1e6, None)),
            // Keep-alive is no peer of close: no ratio from it.
            (
                1,
                Balancer::Haproxy,
                http(HttpMode::KeepAlive, 9e9, 1.0, 1.0, None),
            ),
        ];
        let r = Report::new(&args, 0, 1, Vec::new(), Vec::new(), http_trials);
        let row = |b, m| {
            r.http_rows
                .iter()
                .find(|x| x.balancer == b && x.mode == m)
                .unwrap()
        };
        let weir = row(Balancer::WeirNat, close);
        assert_eq!(weir.requests_per_s, 2500.0);
        // Per run 3x and 1x.
        assert_eq!(weir.requests_per_s_vs_nftables, Some(2.0));
        assert_eq!(weir.p50_vs_nftables, Some(0.75));
        assert_eq!(weir.lb_cpu_vs_nftables, Some(0.75));
        // Only run 0 has a close HAProxy trial: 6x.
        assert_eq!(weir.requests_per_s_vs_haproxy, Some(6.0));
        assert_eq!(weir.lb_ns_per_request, 1000.0);
        // 200 ns per request in run 0, none in run 1.
        assert_eq!(weir.process_threads_ns_per_request["weir-sweeper"], 100.0);
        assert_eq!(
            row(Balancer::Nftables, close).requests_per_s_vs_nftables,
            None
        );
        assert_eq!(
            row(Balancer::Haproxy, HttpMode::KeepAlive).requests_per_s_vs_nftables,
            None
        );
        let text = render(&r);
        assert!(text.contains("weir-sweeper 100"), "{text}");
        assert!(text.contains("6.00x"), "{text}");
    }
}
