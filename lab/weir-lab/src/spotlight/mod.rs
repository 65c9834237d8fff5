//! `weir-lab spotlight`: Spotlight's testbed experiment (section V-B) on the
//! live load balancer, in network namespaces.
//!
//! Eight file servers of two capacity types (3 fast, 5 slow by default; the
//! server enforces its capacity itself, see [`server`]) sit behind a nat VIP.
//! A client requests files with bounded-Pareto sizes at Poisson arrivals
//! near the service's capacity ([`workload`]). For each policy (ECMP, LCF,
//! AWFD m=2 and m=4) and update interval, `weir serve` runs with its
//! controller polling the servers' in-process agents, and the client
//! measures flow completion times (FCT), aggregate throughput and PCC
//! violations (resets or broken transfers). Every repetition replays the same
//! request schedule for every policy (common random numbers), in a rotated
//! order. Results: a text table on stdout, `--json`, `--svg` ([`report`]).

pub mod report;
pub mod server;
pub mod workload;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use std::sync::Arc;
use weir_backend::agent::{Agent, LoadMeter, StatsSource};
use weir_progress::Progress;

use crate::daemon::Daemon;
use crate::netns::enter;
use crate::topology::{backend_addr, Lab};
use report::{Policy, RunResult};
use server::{FileServer, ServerSpec, FILE_PORT};
use workload::{BoundedPareto, PlayOptions};

/// The VIP the client requests files from (nat).
pub const VIP: &str = "10.77.100.1";
/// Port of the in-process load agent on every server.
pub const AGENT_PORT: u16 = 9300;

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct SpotlightArgs {
    /// Policies, comma-separated: ecmp, lcf, awfd<m> (m = 2..16), static
    /// (equal static weights, no controller).
    #[arg(long, value_delimiter = ',', default_value = "ecmp,lcf,awfd2,awfd4")]
    pub policies: Vec<String>,
    /// Controller update intervals in ms, comma-separated (policies that
    /// poll run at each; ECMP runs once).
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000")]
    pub intervals: Vec<u64>,
    /// Repetitions of every (policy, interval) cell.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds of arrivals that are measured (after the warm-up).
    #[arg(long, default_value_t = 8.0)]
    pub duration: f64,
    /// Seconds of arrivals before the measured window (the controller's
    /// first estimates, queues filling).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// After the last arrival, wait at most this many seconds for flows to
    /// finish; those still open count as unfinished.
    #[arg(long, default_value_t = 8.0)]
    pub drain: f64,
    /// Fast servers (backends 1..=fast).
    #[arg(long, default_value_t = 3)]
    pub fast: usize,
    /// Slow servers (the rest).
    #[arg(long, default_value_t = 5)]
    pub slow: usize,
    /// Workers per server.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Bytes per second of one worker of a slow server, in kB/s (1000 B).
    #[arg(long, default_value_t = 400.0)]
    pub slow_rate_kbs: f64,
    /// A fast server's worker rate over a slow one's.
    #[arg(long, default_value_t = 1.5)]
    pub fast_ratio: f64,
    /// Offered load as a fraction of the servers' total capacity.
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Pareto shape of the file sizes.
    #[arg(long, default_value_t = 1.2)]
    pub alpha: f64,
    /// Smallest file, bytes.
    #[arg(long, default_value_t = 10_000)]
    pub size_min: u64,
    /// Largest file, bytes.
    #[arg(long, default_value_t = 2_000_000)]
    pub size_max: u64,
    /// Seed of the request schedules (repetition r uses seed + r).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Controller telemetry: agent (the servers' in-process `weir agent`)
    /// or passive (the data plane measures).
    #[arg(long, default_value = "agent")]
    pub telemetry: String,
    /// Sliding window of the servers' load agents, ms.
    #[arg(long, default_value_t = 500)]
    pub agent_window_ms: u64,
    /// Write every run and cell as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the figure here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

impl Default for SpotlightArgs {
    fn default() -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: SpotlightArgs,
        }
        P::parse_from(["spotlight"]).a
    }
}

/// One run of the plan.
#[derive(Debug, Clone, Copy)]
struct Cell {
    policy: Policy,
    interval_ms: Option<u64>,
}

/// Everything `--json` writes.
#[derive(Debug, Serialize)]
pub struct Report {
    pub args: SpotlightArgs,
    /// Servers' capacities, bytes per second.
    pub capacities: Vec<f64>,
    pub mean_file_bytes: f64,
    /// Offered request rate, per second.
    pub request_rate: f64,
    pub runs: Vec<RunResult>,
    pub cells: Vec<report::Cell>,
    pub total_pcc_violations: usize,
    pub wall_s: f64,
}

impl SpotlightArgs {
    fn validate(&self) -> Result<(Vec<Policy>, BoundedPareto)> {
        let policies = self
            .policies
            .iter()
            .map(|p| {
                Policy::parse(p).with_context(|| {
                    format!("--policies: unknown policy {p:?} (ecmp, lcf, awfd2..awfd16, static)")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if policies.is_empty() {
            bail!("--policies: name at least one");
        }
        if policies.iter().any(|p| p.polls()) && self.intervals.is_empty() {
            bail!("--intervals: name at least one");
        }
        if self.intervals.iter().any(|&i| !(10..=10_000).contains(&i)) {
            bail!("--intervals must be 10..=10000 ms");
        }
        if !(1..=20).contains(&self.reps) {
            bail!("--reps must be 1..=20");
        }
        let n = self.fast + self.slow;
        if !(1..=16).contains(&n) {
            bail!("--fast + --slow must be 1..=16 servers");
        }
        if !(10..=60_000).contains(&self.agent_window_ms) {
            bail!("--agent-window-ms must be 10..=60000");
        }
        if !(1..=64).contains(&self.slots) {
            bail!("--slots must be 1..=64");
        }
        for (name, v, lo, hi) in [
            ("--duration", self.duration, 0.5, 600.0),
            ("--warmup", self.warmup, 0.0, 60.0),
            ("--drain", self.drain, 0.0, 300.0),
            ("--slow-rate-kbs", self.slow_rate_kbs, 1.0, 1e6),
            ("--fast-ratio", self.fast_ratio, 0.1, 100.0),
            ("--load", self.load, 0.01, 2.0),
            ("--alpha", self.alpha, 0.1, 10.0),
        ] {
            if !(v.is_finite() && (lo..=hi).contains(&v)) {
                bail!("{name} must be in {lo}..={hi}, got {v}");
            }
        }
        if !matches!(self.telemetry.as_str(), "agent" | "passive") {
            bail!("--telemetry must be agent or passive");
        }
        let sizes = BoundedPareto::new(self.alpha, self.size_min as f64, self.size_max as f64)
            .context("--alpha/--size-min/--size-max")?;
        Ok((policies, sizes))
    }

    fn specs(&self) -> Vec<ServerSpec> {
        (1..=self.fast + self.slow)
            .map(|i| ServerSpec {
                index: i,
                slots: self.slots,
                slot_rate: self.slow_rate_kbs
                    * 1000.0
                    * if i <= self.fast { self.fast_ratio } else { 1.0 },
            })
            .collect()
    }

    /// The plan: ECMP-like policies once, polling ones at every interval.
    fn plan(&self, policies: &[Policy]) -> Vec<Cell> {
        let mut v = Vec::new();
        for &policy in policies {
            if policy.polls() {
                for &i in &self.intervals {
                    v.push(Cell {
                        policy,
                        interval_ms: Some(i),
                    });
                }
            } else {
                v.push(Cell {
                    policy,
                    interval_ms: None,
                });
            }
        }
        v
    }
}

/// The `weir serve` configuration of one run.
pub fn config(
    interfaces: &[String],
    servers: usize,
    policy: Policy,
    interval_ms: u64,
    telemetry: &str,
) -> String {
    let ifs: Vec<String> = interfaces.iter().map(|i| format!("\"{i}\"")).collect();
    let mut s = format!(
        "# weir-lab spotlight: {}\n[dataplane]\ninterfaces = [{}]\nconn_table_size = 65536\n",
        policy.label(),
        ifs.join(", ")
    );
    let ctl = match policy {
        Policy::Static => None,
        Policy::Ecmp => Some(("ecmp", 0)),
        Policy::Lcf => Some(("lcf", 1)),
        Policy::Awfd { m } => Some(("awfd", m)),
    };
    if let Some((name, m)) = ctl {
        let _ = write!(
            s,
            "\n[controller]\npolicy = \"{name}\"\n{}update_interval_ms = {interval_ms}\ntelemetry = \"{telemetry}\"\n",
            if name == "awfd" {
                format!("m = {m}\n")
            } else {
                String::new()
            }
        );
    }
    let _ = write!(
        s,
        "\n[[vip]]\nname = \"files\"\naddress = \"{VIP}\"\nport = {FILE_PORT}\nprotocol = \"tcp\"\nmode = \"nat\"\n"
    );
    for i in 1..=servers {
        let a = backend_addr(i);
        let _ = write!(
            s,
            "\n  [[vip.dip]]\n  address = \"{a}\"\n  port = {FILE_PORT}\n  agent = \"{a}:{AGENT_PORT}\"\n"
        );
    }
    s
}

fn fmt_dur(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}m{:02}s", s / 60, s % 60)
}

pub fn run(args: &SpotlightArgs) -> Result<()> {
    let (policies, sizes) = args.validate()?;
    let started = Instant::now();
    let specs = args.specs();
    let n = specs.len();
    let capacity: f64 = specs.iter().map(|s| s.capacity()).sum();
    let rate = args.load * capacity / sizes.mean();
    let plan = args.plan(&policies);
    let total_runs = plan.len() * args.reps;
    let run_len = args.warmup + args.duration;
    eprintln!(
        "weir-lab spotlight: {} fast + {} slow servers ({} workers; {:.2} / {:.2} MB/s each), \
         files {}..{} B (Pareto {}, mean {:.0} B), {:.0} req/s = {:.0}% of {:.2} MB/s",
        args.fast,
        args.slow,
        args.slots,
        specs.first().map_or(0.0, |s| s.capacity()) / 1e6,
        specs.last().map_or(0.0, |s| s.capacity()) / 1e6,
        args.size_min,
        args.size_max,
        args.alpha,
        sizes.mean(),
        rate,
        args.load * 100.0,
        capacity / 1e6
    );
    eprintln!(
        "  {} cells x {} reps = {} runs of {:.0} s arrivals (+ up to {:.0} s drain)",
        plan.len(),
        args.reps,
        total_runs,
        run_len,
        args.drain
    );

    crate::netns::install_signal_teardown();
    let progress = Progress::bar("weir-lab spotlight", total_runs as u64);
    progress.set_message(format!(
        "building the lab: client, load balancer, {n} servers"
    ));
    let lab = Lab::build(n)?;
    let mut servers: Vec<FileServer> = Vec::new();
    let mut agents: Vec<Agent> = Vec::new();
    for (spec, ns) in specs.iter().zip(&lab.backends) {
        let meter = LoadMeter::new();
        servers.push(FileServer::start(
            ns,
            spec.clone(),
            Some(recorder(meter.clone())),
        )?);
        agents.push(start_agent(
            ns,
            SocketAddr::from((backend_addr(spec.index), AGENT_PORT)),
            meter,
            Duration::from_millis(args.agent_window_ms),
        )?);
    }
    let exe = crate::weir_binary::locate()?;
    let interfaces = lab.lb_interfaces();
    let vip: SocketAddr = format!("{VIP}:{FILE_PORT}").parse()?;
    let opts = PlayOptions {
        vip,
        warmup: args.warmup,
        measure: args.duration,
        drain: args.drain,
        max_in_flight: 4000,
    };

    let mut runs: Vec<RunResult> = Vec::new();
    let mut k = 0;
    for rep in 0..args.reps {
        let seed = args.seed.wrapping_add(rep as u64);
        let sched = workload::schedule(rate, run_len, &sizes, seed);
        // Rotate the order so no policy always runs first or last.
        let order: Vec<Cell> = (0..plan.len())
            .map(|i| plan[(i + rep) % plan.len()])
            .collect();
        for cell in order {
            k += 1;
            let t0 = Instant::now();
            wait_idle(&servers, Duration::from_secs(30))?;
            // Let the agents' windows empty, so the new controller starts
            // cold on every server alike instead of seeing the tail of the
            // previous run on some (which, under LCF, keeps the others from
            // ever being measured: DIPs without an estimate are weighed as
            // the pool's mean, never its maximum).
            std::thread::sleep(Duration::from_millis(args.agent_window_ms + 100));
            let cfg = config(
                &interfaces,
                n,
                cell.policy,
                cell.interval_ms
                    .unwrap_or(args.intervals.first().copied().unwrap_or(100)),
                &args.telemetry,
            );
            let mut daemon = Daemon::new(&exe, &lab.lb)?;
            daemon.write_config(&cfg)?;
            daemon
                .start()
                .with_context(|| format!("starting weir serve for {}", cell.policy.label()))?;
            let what = format!(
                "[{k}/{total_runs}] rep {} {}{}",
                rep + 1,
                cell.policy.label(),
                cell.interval_ms
                    .map_or(String::new(), |i| format!(" @ {i} ms"))
            );
            let client = workload::play(&lab.client, &sched, &opts, &mut |t, done, open| {
                progress.set_message(format!(
                    "{what}: t={t:.0}s, {done}/{} flows done, {open} open",
                    sched.len()
                ));
            })?;
            let controller = std::fs::read_to_string(daemon.run_dir().join("controller.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map(|v| report::ControllerStats::from_json(&v));
            daemon.stop()?;
            drop(daemon);
            let mut r = report::summarize(
                cell.policy,
                cell.interval_ms,
                rep,
                seed,
                &client,
                args.warmup,
                args.duration,
                args.fast,
                n,
                t0.elapsed().as_secs_f64(),
            );
            r.controller = controller.filter(|_| cell.policy != Policy::Static);
            let elapsed = started.elapsed().as_secs_f64();
            let eta = elapsed / k as f64 * (total_runs - k) as f64;
            progress.inc(1);
            progress.note(format!(
                "  {what}: {} flows, mean FCT {:.0} ms, p99 {:.0} ms, {:.2} MB/s, fast share {:.2}, \
                 PCC violations {}, unfinished {}  ({} elapsed, ~{} left)",
                r.measured,
                r.mean_fct_s * 1e3,
                r.p99_fct_s * 1e3,
                r.throughput_mb_s,
                r.fast_share,
                r.pcc_violations,
                r.unfinished,
                fmt_dur(elapsed),
                fmt_dur(eta)
            ));
            if let Some(c) = r.controller.as_ref().filter(|c| c.agent_errors > 0) {
                progress.note(format!(
                    "    note: {} failed agent polls in {} controller ticks",
                    c.agent_errors, c.ticks
                ));
            }
            for e in r.errors.iter().take(3) {
                progress.note(format!("    error: {e}"));
            }
            if r.max_start_lag_s > 0.05 {
                progress.note(format!(
                    "    note: the client fell up to {:.0} ms behind its schedule (counted in FCT)",
                    r.max_start_lag_s * 1e3
                ));
            }
            runs.push(r);
        }
    }
    progress.set_message("tearing the lab down");
    drop(agents);
    drop(servers);
    drop(lab);

    let cells = report::cells(&runs);
    let total_pcc: usize = runs.iter().map(|r| r.pcc_violations).sum();
    progress.finish(format!(
        "{} runs, {total_pcc} PCC violations; lab torn down",
        runs.len()
    ));
    let first_interval = args.intervals.first().copied().unwrap_or(100);
    let subtitle = format!(
        "{} fast + {} slow servers, {:.0}% load, Pareto {} files, {} x {:.0} s runs per cell",
        args.fast,
        args.slow,
        args.load * 100.0,
        args.alpha,
        args.reps,
        args.duration
    );
    println!("{}", report::table(&cells));
    println!("{}", report::paper_comparison(&cells, first_interval));
    println!(
        "PCC violations (resets or broken transfers) in all {} runs: {total_pcc}",
        runs.len()
    );
    let report = Report {
        args: args.clone(),
        capacities: specs.iter().map(|s| s.capacity()).collect(),
        mean_file_bytes: sizes.mean(),
        request_rate: rate,
        runs,
        cells,
        total_pcc_violations: total_pcc,
        wall_s: started.elapsed().as_secs_f64(),
    };
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &args.svg {
        std::fs::write(
            p,
            report::figure(&report.cells, first_interval, &subtitle).svg()?,
        )
        .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    if total_pcc > 0 {
        bail!("{total_pcc} connections were reset or broken (PCC violations)");
    }
    Ok(())
}

/// What a server records into its agent's meter: one sample per 16 KiB
/// chunk sent (Spotlight's load is a packet rate; a chunk is our packet),
/// with the time the worker spent on it divided by the number of workers.
/// So the controller's C = 1 / mean processing time is the server's
/// capacity in chunks per second (k workers), R the chunks it sends per
/// second, and A = C - R its spare capacity. Per-request samples would be
/// far noisier with heavy-tailed sizes, and would arrive only when a long
/// transfer ends.
fn recorder(meter: LoadMeter) -> server::Recorder {
    Arc::new(move |spec: &ServerSpec, _bytes: u64, busy: Duration| {
        meter.record(busy / spec.slots.max(1) as u32);
    })
}

/// Starts `weir agent`'s server in namespace `ns` on `addr`, reading `meter`.
fn start_agent(ns: &str, addr: SocketAddr, meter: LoadMeter, window: Duration) -> Result<Agent> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<Agent> {
        enter(&ns)?;
        // The agent's threads are spawned from here and stay in `ns`.
        Agent::start(addr, StatsSource::Meter(meter), window)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the agent thread panicked"))?
    .with_context(|| format!("starting the load agent on {addr}"))
}

/// Waits until no server has a request open (the previous run's flows are
/// gone), at most `limit`.
fn wait_idle(servers: &[FileServer], limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let open: u64 = servers
            .iter()
            .map(|s| s.stats.open.load(Ordering::Relaxed))
            .sum();
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{open} requests still open on the servers after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_plan_ten_cells() {
        let a = SpotlightArgs::default();
        let (p, sizes) = a.validate().unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(a.plan(&p).len(), 1 + 3 * 3);
        assert!(sizes.mean() > a.size_min as f64);
        let specs = a.specs();
        assert_eq!(specs.len(), 8);
        assert!(specs[0].capacity() > specs[7].capacity());
        let mut bad = a.clone();
        bad.policies = vec!["rr".into()];
        assert!(bad.validate().is_err());
        let mut bad = a.clone();
        bad.load = f64::NAN;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn config_names_the_policy_and_every_agent() {
        let ifs: Vec<String> = ["wc0", "wb1", "wb2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = config(&ifs, 2, Policy::Awfd { m: 4 }, 500, "agent");
        assert!(c.contains("policy = \"awfd\"\nm = 4\nupdate_interval_ms = 500"));
        assert!(c.contains("agent = \"10.77.2.2:9300\""));
        assert!(c.contains("interfaces = [\"wc0\", \"wb1\", \"wb2\"]"));
        let s = config(&ifs, 2, Policy::Static, 100, "agent");
        assert!(!s.contains("[controller]"));
        let e = config(&ifs, 2, Policy::Ecmp, 100, "passive");
        assert!(e.contains("policy = \"ecmp\"") && !e.contains("m = "));
        assert!(e.contains("telemetry = \"passive\""));
    }
}
