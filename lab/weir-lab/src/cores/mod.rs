//! `weir-lab cores`: spreading packets over the software tier's workers on
//! this machine's two cores, seed 001's and seed 003's experiments with
//! weir's distributions in their roles:
//!
//! - Fig. 2 (seed 001): the most 64-byte packets of one 5-tuple the workers
//!   get through, against the cycles of work added per packet: flow (RSS:
//!   one core), spray (per-packet, reordered) and adaptive (TBTD).
//! - Fig. 3 (seed 001): one iperf3 TCP flow through a nat VIP against the
//!   added cycles: flow, spray with the reorder stage (weir's default hold
//!   time, and a longer one), spray without; with the sender's
//!   retransmissions and the segments the receiver's kernel queued out of
//!   order.
//! - TBTD (seed 003): a dominant flow (one of 64 flows carries most
//!   packets) and a backbone mix (1024 flows of equal rates) at one cost:
//!   packets a second, and what weir's reorder stage released out of order.
//!
//! One lab for the run ([`rig`]). Results: a text table per figure on
//! stdout next to the seeds' claims and the targets, `--json`, and
//! an SVG per figure in `--svg-dir` ([`report`]); progress on stderr.

mod rate;
mod report;
mod rig;
mod tx;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_progress::Progress;
use weir_software_engine::distribution::Mode;

use crate::traffic::FlowDist;
use rate::RatePoint;
use rig::{Iperf, Reordering, Setting, Testbed};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Figure {
    /// Seed 001 Fig. 2: one 5-tuple's packets a second against the cost.
    Fig2,
    /// Seed 001 Fig. 3: one iperf3 TCP flow against the cost.
    Fig3,
    /// Seed 003: a dominant flow and a backbone mix.
    Tbtd,
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct CoresArgs {
    /// Figures to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["fig2", "fig3", "tbtd"])]
    pub figures: Vec<Figure>,
    /// Cycles of work added per packet (cost_cycles), Fig. 2 and 3.
    #[arg(long, value_delimiter = ',',
          default_values_t = [0u64, 500, 1000, 2000, 5000, 10_000, 20_000])]
    pub costs: Vec<u64>,
    /// Seconds per generator trial.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Seconds of each iperf3 run (whole seconds).
    #[arg(long, default_value_t = 4)]
    pub iperf_duration: u64,
    /// The cost of the seed 003 mixes.
    #[arg(long, default_value_t = 10_000)]
    pub tbtd_cost: u64,
    /// Fig. 3's second spray line: this reorder hold time (µs), for
    /// workers that share their CPUs with iperf3's threads.
    #[arg(long, default_value_t = 20_000)]
    pub reorder_hold_us: u64,
    /// A smoke test: costs 0 and 10000, 0.5 s trials, 1 s iperf3 runs.
    /// Replaces those options.
    #[arg(long)]
    pub quick: bool,
    /// Write every point and trial as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Write cores-fig2.svg, cores-fig3.svg and cores-tbtd.svg into this
    /// directory.
    #[arg(long)]
    #[serde(skip)]
    pub svg_dir: Option<PathBuf>,
}

/// The settings a run uses: the arguments, with `--quick` applied.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub figures: Vec<Figure>,
    pub costs: Vec<u64>,
    pub duration_s: f64,
    pub iperf_s: u64,
    pub tbtd_cost: u64,
    pub reorder_hold_us: u64,
    pub frame_bytes_on_wire: usize,
    /// The dominant-flow mix: flows and Zipf skew.
    pub dominant: (u32, f64),
    pub backbone_flows: u32,
}

/// Seed 003's mixes.
const DOMINANT: (u32, f64) = (64, 2.0);
const BACKBONE_FLOWS: u32 = 1024;
/// Frames of the dominant-flow mix, sent round and round.
const ZIPF_FRAMES: usize = 1 << 16;

impl Plan {
    fn from_args(a: &CoresArgs) -> Result<Plan> {
        let mut p = Plan {
            figures: a.figures.clone(),
            costs: a.costs.clone(),
            duration_s: a.duration,
            iperf_s: a.iperf_duration,
            tbtd_cost: a.tbtd_cost,
            reorder_hold_us: a.reorder_hold_us,
            frame_bytes_on_wire: 64,
            dominant: DOMINANT,
            backbone_flows: BACKBONE_FLOWS,
        };
        if a.quick {
            p.costs = vec![0, 10_000];
            p.duration_s = 0.5;
            p.iperf_s = 1;
        }
        p.validate()?;
        Ok(p)
    }

    /// Checks everything before a namespace exists; errors name the option.
    fn validate(&self) -> Result<()> {
        ensure!(!self.figures.is_empty(), "--figures: give at least one");
        let max = weir_core::cost::MAX_COST_CYCLES;
        ensure!(
            !self.costs.is_empty() && self.costs.iter().all(|&c| c <= max),
            "--costs {:?}: give 0 to {max} cycles each",
            self.costs
        );
        ensure!(
            self.tbtd_cost <= max,
            "--tbtd-cost {}: give 0 to {max} cycles",
            self.tbtd_cost
        );
        ensure!(
            (0.05..=600.0).contains(&self.duration_s),
            "--duration {}: give 0.05 to 600 seconds per trial",
            self.duration_s
        );
        ensure!(
            (1..=100_000).contains(&self.reorder_hold_us),
            "--reorder-hold-us {}: give 1 to 100000 µs (weir's bounds)",
            self.reorder_hold_us
        );
        ensure!(
            (1..=600).contains(&self.iperf_s),
            "--iperf-duration {}: give 1 to 600 seconds",
            self.iperf_s
        );
        Ok(())
    }

    fn wants(&self, f: Figure) -> bool {
        self.figures.contains(&f)
    }

    /// Points the run measures, for the progress bar.
    fn points(&self) -> u64 {
        let per_cost = self.costs.len() as u64;
        let mut n = 0;
        if self.wants(Figure::Fig2) {
            n += 3 * per_cost;
        }
        if self.wants(Figure::Fig3) {
            n += 4 * per_cost;
        }
        if self.wants(Figure::Tbtd) {
            n += 6;
        }
        n
    }
}

/// One iperf3 run (Fig. 3).
#[derive(Debug, Clone, Serialize)]
pub struct IperfPoint {
    pub setting: Setting,
    pub iperf: Iperf,
    pub reordering: Reordering,
}

/// Everything `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub plan: Plan,
    pub generator_cpu: usize,
    pub free_cpu: usize,
    /// The time-stamp counter's rate: what a cycle of cost is in time.
    pub tsc_hz: f64,
    pub fig2: Vec<RatePoint>,
    pub fig3: Vec<IperfPoint>,
    pub tbtd: Vec<RatePoint>,
    pub elapsed_s: f64,
}

fn setting(mode: Mode, reorder: bool, cost_cycles: u64) -> Setting {
    Setting {
        mode,
        reorder,
        hold_us: None,
        cost_cycles,
    }
}

/// Fig. 3's lines: flow, spray with weir's default hold and with
/// `--reorder-hold-us`, spray without reordering.
fn fig3_settings(hold_us: u64, cost: u64) -> [Setting; 4] {
    [
        setting(Mode::Flow, true, cost),
        setting(Mode::Spray, true, cost),
        Setting {
            hold_us: Some(hold_us),
            ..setting(Mode::Spray, true, cost)
        },
        setting(Mode::Spray, false, cost),
    ]
}

/// Runs the figures `args` asks for with the weir binary `exe`; prints the
/// tables and writes the JSON and SVGs.
pub fn run(exe: &Path, args: &CoresArgs) -> Result<Report> {
    let plan = Plan::from_args(args)?;
    if let Some(dir) = &args.svg_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::netns::install_signal_teardown();
    let progress = Progress::bar("weir-lab cores", plan.points());
    let bed = Testbed::build(exe)?;
    let mut report = Report {
        plan: plan.clone(),
        generator_cpu: bed.generator_cpu,
        free_cpu: bed.free_cpu,
        tsc_hz: weir_software::cost::tsc_hz(Duration::from_millis(100)),
        fig2: Vec::new(),
        fig3: Vec::new(),
        tbtd: Vec::new(),
        elapsed_s: 0.0,
    };
    let trial = Duration::from_secs_f64(plan.duration_s);
    if plan.wants(Figure::Fig2) {
        let frames = tx::frames(&bed.single_flow()?, 1)?;
        for mode in [Mode::Flow, Mode::Spray, Mode::Adaptive] {
            for &cost in &plan.costs {
                let s = setting(mode, true, cost);
                let p = rate::measure(&bed, "single flow", s, &frames, trial, &progress)?;
                progress.inc(1);
                report.fig2.push(p);
            }
        }
        print!("{}", report::fig2(&report));
    }
    if plan.wants(Figure::Fig3) {
        let duration = Duration::from_secs(plan.iperf_s);
        for line in 0..4 {
            for &cost in &plan.costs {
                let s = fig3_settings(plan.reorder_hold_us, cost)[line];
                progress.set_message(format!("iperf3, {}, {cost} cycles", s.name()));
                let daemon = bed.start(&s)?;
                let iperf = rig::iperf(&bed, duration)?;
                let reordering = rig::reordering(&daemon)?;
                progress.set_message(format!(
                    "iperf3, {}, {cost} cycles: {:.2} Gbit/s, {} retransmits, {} out of order",
                    s.name(),
                    iperf.received_gbps,
                    iperf.retransmits,
                    iperf.receiver_out_of_order
                ));
                progress.inc(1);
                report.fig3.push(IperfPoint {
                    setting: s,
                    iperf,
                    reordering,
                });
            }
        }
        print!("{}", report::fig3(&report));
    }
    if plan.wants(Figure::Tbtd) {
        let (flows, s) = plan.dominant;
        // A Zipf mix drawn once, long enough to hold its shape; the
        // backbone's flows once each, in turn.
        let dominant = bed.many_flows(flows, FlowDist::Zipf { s })?;
        let backbone = bed.many_flows(plan.backbone_flows, FlowDist::RoundRobin)?;
        let mixes = [
            ("dominant flow", tx::frames(&dominant, ZIPF_FRAMES)?),
            (
                "backbone",
                tx::frames(&backbone, plan.backbone_flows as usize)?,
            ),
        ];
        for (traffic, frames) in &mixes {
            for mode in [Mode::Flow, Mode::Spray, Mode::Adaptive] {
                let s = setting(mode, true, plan.tbtd_cost);
                let p = rate::measure(&bed, traffic, s, frames, trial, &progress)?;
                progress.inc(1);
                report.tbtd.push(p);
            }
        }
        print!("{}", report::tbtd(&report));
    }
    report.elapsed_s = progress.elapsed().as_secs_f64();
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.svg_dir {
        for (name, svg) in report::svgs(&report)? {
            let path = dir.join(name);
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    progress.finish(format!(
        "{} points; workers on CPUs {} and {}",
        report.fig2.len() + report.fig3.len() + report.tbtd.len(),
        report.free_cpu,
        report.generator_cpu
    ));
    Ok(report)
}
