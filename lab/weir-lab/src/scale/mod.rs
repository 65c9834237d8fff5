//! `weir-lab scale`: several weir nodes behind a router's ECMP route. A
//! client, a router running FRR that learns the VIP only from the nodes'
//! BGP announcements (BFD, ECMP over an L4 hash), the nodes and the
//! backends on one segment, and etcd, all in namespaces the lab builds and
//! removes ([`topology`]). Under steady long-lived and new connections
//! ([`traffic`]) with load-aware tables changing every 100 ms, a node is
//! killed, comes back, a fourth joins, a link is cut, a node is drained and
//! undrained, one node's DIPs fail and recover, every node is upgraded in
//! turn, and the leader is killed ([`scenario`]); with connection sync on,
//! then off. The router's route is watched throughout ([`routes`]).
//! Results ([`report`]): how fast the router followed each event, PCC
//! violations by the connections' age against the sync window,
//! new-connection failures (also after the router converged), time to
//! recover, join and leader takeover times, the sync window and the
//! tables' apply delay, as a text table, `--json` and `--svg`.

pub mod report;
pub mod routes;
pub mod scenario;
pub mod topology;
pub mod traffic;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use weir_progress::Progress;

use report::Report;
use scenario::RunOptions;
use traffic::TrafficOptions;

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ScaleArgs {
    /// Connection sync modes to run, comma-separated: on, off.
    #[arg(long, value_delimiter = ',', default_value = "on,off")]
    pub sync: Vec<String>,
    /// Seconds of traffic before the first event and after each.
    #[arg(long, default_value_t = 4.0)]
    pub phase: f64,
    /// Long-lived connections open at any time.
    #[arg(long, default_value_t = 40)]
    pub conns: usize,
    /// Their lifetimes, uniform between these (seconds).
    #[arg(long, default_value_t = 2.0)]
    pub life_min: f64,
    #[arg(long, default_value_t = 10.0)]
    pub life_max: f64,
    /// Milliseconds between two requests of a long-lived connection.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    /// New one-request connections per second.
    #[arg(long, default_value_t = 20.0)]
    pub new_per_s: f64,
    /// Backends.
    #[arg(long, default_value_t = 3)]
    pub backends: usize,
    /// How often each backend's service delay changes, ms (it drives the
    /// load-aware tables).
    #[arg(long, default_value_t = 100)]
    pub load_every_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the runs as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the figure here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// Runs the experiment and prints the table; returns the report.
pub fn run(exe: &std::path::Path, args: &ScaleArgs) -> Result<Report> {
    let modes: Vec<bool> = args
        .sync
        .iter()
        .map(|m| match m.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            other => anyhow::bail!("--sync takes on and off, not `{other}`"),
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(
        args.life_min > 0.0 && args.life_max >= args.life_min,
        "--life-min must be above 0 and at most --life-max"
    );
    crate::netns::install_signal_teardown();
    // Per run: the warm-up and a phase after each event.
    let progress = Progress::bar(
        "weir-lab scale",
        (1 + scenario::EVENTS) * modes.len() as u64,
    );
    let mut runs = Vec::new();
    for sync in modes {
        let opts = RunOptions {
            sync,
            backends: args.backends,
            phase: Duration::from_secs_f64(args.phase),
            traffic: TrafficOptions {
                conns: args.conns,
                lifetime: (args.life_min, args.life_max),
                interval: Duration::from_millis(args.interval_ms),
                new_per_s: args.new_per_s,
                seed: args.seed,
            },
            load_every: Duration::from_millis(args.load_every_ms),
        };
        let r = scenario::run(exe, &opts, &progress)
            .with_context(|| format!("the run with sync {}", if sync { "on" } else { "off" }))?;
        let broken: usize = r
            .events
            .iter()
            .map(|e| e.broken_older + e.broken_younger)
            .sum();
        progress.note(format!(
            "sync {}: {broken} broken of {} long-lived connections, sync window p99 {} ms",
            if sync { "on" } else { "off" },
            r.long_lived,
            r.sync_window_ms.map_or("-".into(), |w| format!("{w:.3}"))
        ));
        runs.push(r);
    }
    let report = Report::new(runs);
    progress.finish("done");
    print!("{}", report::table(&report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.svg {
        let svg = report::figure(&report).svg()?;
        std::fs::write(p, svg).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}
