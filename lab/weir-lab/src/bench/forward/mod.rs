//! `weir-lab bench forward`: real forwarding in network namespaces, weir next to
//! the kernel's stateful NAT on the same topology and the same packets.
//!
//! What is measured, and how (also in the JSON as `method`):
//! - The lab: a client namespace with the generator (weir_gen on live
//!   frames, 64-byte UDP to a VIP, as fast as it goes on its CPU), the load
//!   balancer's namespace, and `--dips` backends whose XDP sinks count and
//!   drop what reaches them. Received is what the sinks counted.
//! - The load balancer's receive path (the NAPI context of its client-side
//!   veth: weir's XDP, or the kernel's forwarding and netfilter) runs in a
//!   kernel thread pinned to a CPU of its own; the generator and the sinks
//!   share the other CPU (see rig.rs). The load balancer's CPU time per
//!   received packet comes from that CPU's /proc/stat busy time, and for
//!   weir also from its program's BPF run time (BPF_ENABLE_STATS).
//! - The balancers: weir serve with the default configuration (next hops
//!   resolved by the control plane) and a nat, dsr or ipip VIP over the
//!   DIPs (the sinks count an IPIP frame by its inner datagram), and
//!   nftables DNAT (`numgen inc mod N` over the same DIPs, conntrack keeping
//!   each flow on its DIP). Each trial's flows are warmed first (two packets
//!   each), so trials measure established flows.
//! - The single long TCP flow (tcp.rs): iperf3 through each balancer and
//!   HAProxy (tcp mode) to a real TCP stack at one backend, in a lab of its
//!   own, with the sender's retransmissions and the drops on the path.
//! - HTTP (http.rs): requests per second and latency through each
//!   balancer but weir ipip (the backends do not decapsulate) with
//!   keep-alive connections and with a connection per request
//!   (`Connection: close`), to the lab's own HTTP servers at the backends;
//!   the load balancer's CPU per request and per new connection, split
//!   into the kernel's (NAPI threads), BPF run time and the daemon's or
//!   HAProxy's process time. The HTTP lab has the DSR return path: weir
//!   dsr's replies go from the backends straight to the client, as DSR
//!   runs; `weir-dsr-via-lb` routes them back through the load balancer's
//!   host instead, the way nat, nftables and HAProxy need theirs.
//! - Every run starts every balancer once per kind of trial, in an order
//!   that rotates from run to run. Rows report medians over the runs;
//!   ratios are the medians of the per-run ratios.

mod balancer;
mod child;
mod http;
mod http_load;
mod packet_mix;
mod report;
mod rig;
mod run_time;
mod tcp;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use weir_dataplane::runstats::StatsEnabled;
use weir_progress::Progress;

pub use balancer::Balancer;
pub use http::HttpTrial;
pub use http_load::HttpMode;
pub use packet_mix::PacketMix;
pub use report::{render, HttpRow, Report, Row, TcpRow};
pub use rig::Trial;
pub use tcp::TcpTrial;

/// The kinds of trial a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrialKind {
    /// 64-byte UDP at the generator's full speed, per flow count.
    Udp,
    /// One long TCP flow (iperf3).
    Tcp,
    /// HTTP, keep-alive and a connection per request.
    Http,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ForwardBenchArgs {
    /// The kinds of trial to make.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["udp", "tcp", "http"])]
    pub trials: Vec<TrialKind>,
    /// The load balancers to compare (HAProxy carries no UDP; weir's dsr
    /// via the load balancer, whose replies skip the DSR return path, runs
    /// only in the HTTP trials, the only ones with that path).
    #[arg(long, value_enum, value_delimiter = ',',
          default_values = ["weir-nat", "weir-dsr", "weir-ipip", "nftables", "haproxy"])]
    pub balancers: Vec<Balancer>,
    /// Concurrent flows (round robin), one row each.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 1000, 100_000])]
    pub flows: Vec<u32>,
    /// Backends behind the VIP.
    #[arg(long, default_value_t = 4)]
    pub dips: usize,
    /// Seconds of traffic per trial.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Seconds of the single long TCP flow (iperf3) per balancer and run;
    /// 0 leaves the TCP trials out.
    #[arg(long, default_value_t = 10)]
    pub tcp_seconds: u64,
    /// The TCP flow's socket buffers in KiB (iperf3 -w), which bound its
    /// window; default: the kernel's autotuning.
    #[arg(long)]
    pub tcp_window: Option<u32>,
    /// Seconds of HTTP load per balancer, mode and run.
    #[arg(long, default_value_t = 10.0)]
    pub http_seconds: f64,
    /// The HTTP trials' modes, each run in this order per balancer.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["keep-alive", "close"])]
    pub http_modes: Vec<HttpMode>,
    /// Concurrent HTTP client connections (one thread each).
    #[arg(long, default_value_t = 64)]
    pub http_connections: usize,
    /// Runs; every run measures every balancer and flow count once.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Write the rows and every trial as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write bar charts: received Mpps, CPU per packet, and the TCP flow.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

pub fn run(args: &ForwardBenchArgs) -> Result<()> {
    ensure!(!args.balancers.is_empty(), "--balancers: name at least one");
    ensure!(
        !args.flows.is_empty() && args.flows.iter().all(|&f| (1..=1 << 22).contains(&f)),
        "--flows {:?}: give 1 to {} flows per row",
        args.flows,
        1 << 22
    );
    ensure!(
        (1..=16).contains(&args.dips),
        "--dips {}: give 1 to 16",
        args.dips
    );
    ensure!(
        (0.5..=60.0).contains(&args.duration),
        "--duration {}: give 0.5 to 60 seconds",
        args.duration
    );
    ensure!(
        (1..=20).contains(&args.runs),
        "--runs {}: give 1 to 20",
        args.runs
    );
    ensure!(
        args.tcp_seconds <= 60,
        "--tcp-seconds {}: give 0 (no TCP trials) to 60",
        args.tcp_seconds
    );
    ensure!(
        args.tcp_window.is_none_or(|w| (4..=65536).contains(&w)),
        "--tcp-window {:?}: give 4 to 65536 KiB",
        args.tcp_window
    );
    ensure!(!args.trials.is_empty(), "--trials: name at least one kind");
    ensure!(
        (1.0..=60.0).contains(&args.http_seconds),
        "--http-seconds {}: give 1 to 60 seconds",
        args.http_seconds
    );
    ensure!(
        (1..=512).contains(&args.http_connections),
        "--http-connections {}: give 1 to 512",
        args.http_connections
    );
    ensure!(
        !args.http_modes.is_empty(),
        "--http-modes: name keep-alive, close or both"
    );
    let wants = |k| args.trials.contains(&k);
    let taking_part = |kind: TrialKind| -> Vec<Balancer> {
        if !wants(kind) {
            return Vec::new();
        }
        args.balancers
            .iter()
            .copied()
            .filter(|b| b.in_trials(kind))
            .collect()
    };
    let (udp, tcp, http) = (
        taking_part(TrialKind::Udp),
        taking_part(TrialKind::Tcp),
        taking_part(TrialKind::Http),
    );
    ensure!(
        !udp.is_empty() || (!tcp.is_empty() && args.tcp_seconds > 0) || !http.is_empty(),
        "--balancers {}: none of them takes part in the --trials given (HAProxy carries no \
         UDP, weir-ipip has no HTTP trials, weir-dsr-via-lb only HTTP ones)",
        args.balancers
            .iter()
            .map(|b| b.label())
            .collect::<Vec<_>>()
            .join(", ")
    );
    crate::netns::install_signal_teardown();
    let exe = crate::weir_binary::locate()?;
    let _stats = StatsEnabled::new()?;
    let tcp_runs = if args.tcp_seconds > 0 && !tcp.is_empty() {
        args.runs
    } else {
        0
    };
    let progress = Progress::bar(
        "weir-lab bench forward",
        (args.runs * udp.len() * args.flows.len()
            + tcp_runs * tcp.len()
            + args.runs * http.len() * args.http_modes.len()) as u64,
    );
    let (generator_cpu, lb_cpu) = rig::cpus()?;
    let trials = if udp.is_empty() {
        Vec::new()
    } else {
        udp_trials(args, &exe, &udp, &progress)?
    };
    let mut tcp_trials = Vec::new();
    for run in 0..tcp_runs {
        // A fresh lab per run: no state of one run's balancers in the next.
        let bed = tcp::TcpTestbed::build(&exe, generator_cpu, lb_cpu)?;
        for balancer in rotated(&tcp, run) {
            progress.set_message(format!("run {}: TCP flow, {}", run + 1, balancer.label()));
            let running = bed.start(balancer)?;
            let t = bed
                .trial(args.tcp_seconds, args.tcp_window)
                .with_context(|| format!("the TCP flow through {}", balancer.label()))?;
            running.stop()?;
            progress.note(format!(
                "run {} {:<14} TCP flow: {:.2} Gbit/s, {} retransmits, {} redirects into a \
                 full ring, {} kernel transmits dropped at a full ring",
                run + 1,
                balancer.label(),
                t.gbps,
                t.retransmits,
                t.redirect_ring_full(),
                t.other_drops()
            ));
            tcp_trials.push((run, balancer, t));
            progress.inc(1);
        }
    }
    let http_trials = http_trials(args, &exe, &http, (generator_cpu, lb_cpu), &progress)?;
    let report = Report::new(args, generator_cpu, lb_cpu, trials, tcp_trials, http_trials);
    let took = weir_progress::duration(progress.elapsed());
    progress.finish(format!(
        "{} trials in {took}",
        report.trials.len() + report.tcp_trials.len() + report.http_trials.len()
    ));
    print!("{}", render(&report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.svg {
        std::fs::write(p, report::figure(&report).svg()?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// `balancers` starting at the one run `run` starts with.
fn rotated(balancers: &[Balancer], run: usize) -> Vec<Balancer> {
    let mut order = balancers.to_vec();
    if !order.is_empty() {
        order.rotate_left(run % balancers.len());
    }
    order
}

type UdpTrials = Vec<(usize, Balancer, u32, Trial)>;

/// Every run's packet-rate trials of the `udp` balancers.
fn udp_trials(
    args: &ForwardBenchArgs,
    exe: &std::path::Path,
    udp: &[Balancer],
    progress: &Progress,
) -> Result<UdpTrials> {
    let bed = rig::Testbed::build(exe, args.dips)?;
    let duration = Duration::from_secs_f64(args.duration);
    let mut trials = Vec::new();
    for run in 0..args.runs {
        for balancer in rotated(udp, run) {
            progress.set_message(format!("run {}: starting {}", run + 1, balancer.label()));
            let running = bed.start(balancer)?;
            for &flows in &args.flows {
                progress.set_message(format!(
                    "run {}: {}, {flows} flows",
                    run + 1,
                    balancer.label()
                ));
                bed.warm(flows)?;
                let t = bed
                    .trial(&running, flows, duration)
                    .with_context(|| format!("{} with {flows} flows", balancer.label()))?;
                progress.note(format!(
                    "run {} {:<14} {:>7} flows: {:.3} Mpps offered, {:.3} received, LB CPU {:.0}% busy",
                    run + 1,
                    balancer.label(),
                    flows,
                    t.offered_pps / 1e6,
                    t.received_pps / 1e6,
                    t.lb_cpu_busy * 100.0
                ));
                trials.push((run, balancer, flows, t));
                progress.inc(1);
            }
            running.stop()?;
        }
    }
    Ok(trials)
}

/// Every run's HTTP trials of the `http` balancers, in `--http-modes` order.
fn http_trials(
    args: &ForwardBenchArgs,
    exe: &std::path::Path,
    http: &[Balancer],
    (generator_cpu, lb_cpu): (usize, usize),
    progress: &Progress,
) -> Result<Vec<(usize, Balancer, HttpTrial)>> {
    let duration = Duration::from_secs_f64(args.http_seconds);
    let mut trials = Vec::new();
    for run in 0..if http.is_empty() { 0 } else { args.runs } {
        // A fresh lab per run: no TIME_WAIT or conntrack state carried over.
        let bed =
            http::HttpTestbed::build(exe, args.dips, args.http_connections, generator_cpu, lb_cpu)?;
        for balancer in rotated(http, run) {
            let running = bed.start(balancer)?;
            for &mode in &args.http_modes {
                progress.set_message(format!(
                    "run {}: HTTP {}, {}",
                    run + 1,
                    mode.label(),
                    balancer.label()
                ));
                let t = bed
                    .trial(&running, mode, args.http_connections, duration)
                    .with_context(|| {
                        format!("HTTP {} through {}", mode.label(), balancer.label())
                    })?;
                progress.note(format!(
                    "run {} {:<14} HTTP {:<17}: {:.0} req/s, p50 {:.0} us, p99 {:.0} us, \
                     {} failed, LB CPU {:.0} ns/request",
                    run + 1,
                    balancer.label(),
                    mode.label(),
                    t.requests_per_s,
                    t.p50_us,
                    t.p99_us,
                    t.failed,
                    t.lb_ns() / t.requests as f64
                ));
                trials.push((run, balancer, t));
                progress.inc(1);
            }
            running.stop()?;
        }
    }
    Ok(trials)
}
