//! `weir-lab hnlb`: HNLB's experiments (seed 000, section V) on this
//! machine, with weir's tiers in the roles of the paper's load balancers:
//! `software` is its SLB, `hybrid` is HNLB (a bounded fast table in XDP
//! in front of the software tier), `xdp` the reference.
//!
//! - Fig. 4 ([`throughput`]): the highest loss-free rate with one flow and
//!   one DIP, per variant.
//! - Fig. 5 ([`throughput`]): the same against the number of concurrent
//!   connections, with `first` under equally heavy connections and
//!   `heavy` under a Zipf mix.
//! - Fig. 7 ([`utilization`]): the workers' utilization metric against the
//!   offered rate, with the loss onset and a linear fit below it.
//!
//! Every figure runs in one lab ([`rig`]): 64-byte UDP frames from the
//! client to a nat VIP, counted where they arrive, at the backends. The
//! search for a loss-free rate is [`search`]. Results: a text table per
//! figure on stdout, `--json`, and an SVG per figure in `--svg-dir`
//! ([`report`]); progress on stderr.
//!
//! A variant whose tier this weir does not run (`weir check` refuses its
//! configuration) is skipped with the reason, and its rows are missing.

mod fit;
mod report;
mod rig;
mod search;
mod throughput;
mod utilization;
mod variant;
mod workers;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_progress::Progress;

pub use variant::{Mix, Series, Variant};

use rig::{Setup, Testbed};
use search::Limits;
use throughput::SearchRow;
use utilization::UtilizationRow;

/// Fig. 7's shortest trial, seconds: workers close a window every 500 ms
/// and weir serve writes their reports every second; the first new report
/// of a trial is left out, so 3.5 s gives two whole windows, 2.5 s one.
const UTILIZATION_TRIAL_S: f64 = 3.5;
const QUICK_UTILIZATION_TRIAL_S: f64 = 2.5;
/// The generator's most flows (its Zipf table holds one entry per flow).
const MAX_CONNECTIONS: u32 = weir_traffic::gen::MAX_FLOWS;

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct HnlbArgs {
    /// Figures to run: 4, 5 and 7.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 5, 7])]
    pub figures: Vec<u32>,
    /// Variants to measure; each figure runs those it has.
    #[arg(long, value_enum, value_delimiter = ',',
          default_values = ["xdp", "software", "hybrid-first", "hybrid-heavy"])]
    pub variants: Vec<Variant>,
    /// Fig. 5: concurrent connections.
    #[arg(long, value_delimiter = ',',
          default_values_t = [1u32, 100, 1000, 8000, 100_000, 1_000_000])]
    pub connections: Vec<u32>,
    /// Fig. 7: concurrent connections.
    #[arg(long, value_delimiter = ',', default_values_t = [1000u32, 8000])]
    pub utilization_connections: Vec<u32>,
    /// Fig. 7: offered rates, as fractions of the row's capacity (what
    /// gets through when the generator goes as fast as it can).
    #[arg(long, value_delimiter = ',',
          default_values_t = [0.02, 0.04, 0.06, 0.08, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2])]
    pub utilization_steps: Vec<f64>,
    /// DIPs behind the VIP in Fig. 5 and 7 (Fig. 4 has one).
    #[arg(long, default_value_t = 10)]
    pub dips: usize,
    /// Seconds of traffic per trial.
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Seconds of a row's traffic before its first trial, after its
    /// connections are installed.
    #[arg(long, default_value_t = 1.0)]
    pub settle: f64,
    /// Packets per second that install a row's connections (each gets 2).
    #[arg(long, default_value_t = 500_000.0)]
    pub install_rate: f64,
    /// Largest loss, as a fraction of the offered packets, that still
    /// counts as loss-free.
    #[arg(long, default_value_t = 0.001)]
    pub loss_threshold: f64,
    /// Trials per search, the full-speed one included.
    #[arg(long, default_value_t = 10)]
    pub max_trials: usize,
    /// Seconds per search, at most.
    #[arg(long, default_value_t = 60.0)]
    pub max_search_time: f64,
    /// A search stops when its loss-free and lossy rates are this close,
    /// relative to the lossy one.
    #[arg(long, default_value_t = 0.03)]
    pub resolution: f64,
    /// Skew of the Zipf mix.
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,
    /// The hybrid tier's fast table (a NIC's Flow Director holds 2k-8k).
    #[arg(long, default_value_t = 8192)]
    pub fast_table_size: u32,
    /// The worker's CPU (default: the last one this process may use; the
    /// generator runs on the first).
    #[arg(long)]
    pub worker_cpu: Option<usize>,
    /// A smoke test: 1000 connections in Fig. 5 and 7, 2 DIPs, 0.25 s
    /// trials (Fig. 7: 2.5 s), 6 trials per search, 2 rates in Fig. 7, no
    /// worker ledgers. Replaces those options.
    #[arg(long)]
    pub quick: bool,
    /// Write every row and trial as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Write hnlb-fig4.svg, hnlb-fig5.svg and hnlb-fig7.svg into this
    /// directory.
    #[arg(long)]
    #[serde(skip)]
    pub svg_dir: Option<PathBuf>,
}

/// The settings a run uses: the arguments, with `--quick` applied.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub figures: Vec<u32>,
    pub variants: Vec<Variant>,
    pub connections: Vec<u32>,
    pub utilization_connections: Vec<u32>,
    pub utilization_steps: Vec<f64>,
    /// Fig. 7's trials: long enough for whole worker windows.
    pub utilization_trial_s: f64,
    pub dips: usize,
    pub duration_s: f64,
    pub settle_s: f64,
    pub install_rate: f64,
    pub install_rounds: u32,
    pub zipf_s: f64,
    pub fast_table_size: u32,
    pub limits: Limits,
    pub frame_bytes_on_wire: usize,
    /// Count where the workers' packets went over each row (it waits for
    /// their reports at both ends of a row).
    pub ledgers: bool,
}

impl Plan {
    fn from_args(a: &HnlbArgs) -> Result<Plan> {
        let mut p = Plan {
            figures: a.figures.clone(),
            variants: a.variants.clone(),
            connections: a.connections.clone(),
            utilization_connections: a.utilization_connections.clone(),
            utilization_steps: a.utilization_steps.clone(),
            utilization_trial_s: a.duration.max(UTILIZATION_TRIAL_S),
            dips: a.dips,
            duration_s: a.duration,
            settle_s: a.settle,
            install_rate: a.install_rate,
            install_rounds: 2,
            zipf_s: a.zipf_s,
            fast_table_size: a.fast_table_size,
            limits: Limits {
                loss_threshold: a.loss_threshold,
                max_trials: a.max_trials,
                max_time: Duration::from_secs_f64(a.max_search_time.clamp(0.0, 86_400.0)),
                resolution: a.resolution,
            },
            frame_bytes_on_wire: 64,
            ledgers: true,
        };
        if a.quick {
            p.connections = vec![1000];
            p.utilization_connections = vec![1000];
            p.utilization_steps = vec![0.05, 0.5];
            p.utilization_trial_s = QUICK_UTILIZATION_TRIAL_S;
            p.ledgers = false;
            p.dips = 2;
            p.duration_s = 0.25;
            p.settle_s = 0.1;
            p.limits.max_trials = 6;
            p.limits.max_time = Duration::from_secs(8);
            p.limits.resolution = 0.2;
        }
        p.validate()?;
        Ok(p)
    }

    /// Checks everything before a namespace exists; errors name the option.
    fn validate(&self) -> Result<()> {
        ensure!(
            !self.figures.is_empty() && self.figures.iter().all(|f| [4, 5, 7].contains(f)),
            "--figures {:?}: give some of 4, 5 and 7",
            self.figures
        );
        ensure!(!self.variants.is_empty(), "--variants: give at least one");
        for (name, list) in [
            ("--connections", &self.connections),
            ("--utilization-connections", &self.utilization_connections),
        ] {
            ensure!(
                !list.is_empty() && list.iter().all(|c| (1..=MAX_CONNECTIONS).contains(c)),
                "{name} {list:?}: give 1 to {MAX_CONNECTIONS} connections each"
            );
        }
        ensure!(
            !self.utilization_steps.is_empty()
                && self
                    .utilization_steps
                    .iter()
                    .all(|s| s.is_finite() && *s > 0.0 && *s <= 10.0),
            "--utilization-steps {:?}: give fractions of the capacity, above 0 and at most 10",
            self.utilization_steps
        );
        ensure!(
            (1..=50).contains(&self.dips),
            "--dips {}: the lab has 1 to 50 backends",
            self.dips
        );
        ensure!(
            (0.05..=600.0).contains(&self.duration_s),
            "--duration {}: give 0.05 to 600 seconds per trial",
            self.duration_s
        );
        ensure!(
            (0.0..=600.0).contains(&self.settle_s),
            "--settle {}: give 0 to 600 seconds",
            self.settle_s
        );
        ensure!(
            self.install_rate.is_finite() && self.install_rate >= 1000.0,
            "--install-rate {}: give at least 1000 packets per second",
            self.install_rate
        );
        let l = &self.limits;
        ensure!(
            (0.0..0.5).contains(&l.loss_threshold),
            "--loss-threshold {}: give a fraction from 0 to below 0.5 (0.001 is 0.1%)",
            l.loss_threshold
        );
        ensure!(
            (2..=100).contains(&l.max_trials),
            "--max-trials {}: give 2 to 100 (the first trial runs at full speed)",
            l.max_trials
        );
        ensure!(
            l.max_time >= Duration::from_secs_f64(self.duration_s),
            "--max-search-time: give at least one trial's --duration"
        );
        ensure!(
            l.resolution > 0.0 && l.resolution < 1.0,
            "--resolution {}: give a fraction between 0 and 1",
            l.resolution
        );
        ensure!(
            self.zipf_s.is_finite() && self.zipf_s >= 0.0,
            "--zipf-s {}: give a finite skew >= 0",
            self.zipf_s
        );
        ensure!(
            self.fast_table_size >= 1,
            "--fast-table-size: give at least 1 entry"
        );
        Ok(())
    }

    fn wants(&self, figure: u32) -> bool {
        self.figures.contains(&figure)
    }

    /// The setup of one row.
    fn setup(&self, series: Series, connections: u32, dips: usize, tag: &str) -> Setup {
        Setup {
            variant: series.variant,
            connections,
            mix: series.mix,
            dips,
            fast_table_size: self.fast_table_size,
            duration: Duration::from_secs_f64(self.duration_s),
            install_rounds: self.install_rounds,
            install_pps: self.install_rate,
            settle: Duration::from_secs_f64(self.settle_s),
            label: format!("{tag} {}, {connections} conn.", series.label()),
            ledgers: self.ledgers,
        }
    }
}

/// A variant this weir does not run.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub variant: Variant,
    pub reason: String,
}

/// Everything `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub plan: Plan,
    pub generator_cpu: usize,
    pub worker_cpu: usize,
    pub skipped: Vec<Skipped>,
    pub fig4: Vec<SearchRow>,
    pub fig5: Vec<SearchRow>,
    pub fig7: Vec<UtilizationRow>,
    pub elapsed_s: f64,
}

/// One row to measure.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// A loss-free search, Fig. 4 (1 connection, 1 DIP) or Fig. 5.
    Search {
        figure: u32,
        series: Series,
        connections: u32,
        dips: usize,
    },
    /// Fig. 7's utilization sweep.
    Sweep { series: Series, connections: u32 },
}

impl Job {
    fn figure(self) -> u32 {
        match self {
            Job::Search { figure, .. } => figure,
            Job::Sweep { .. } => 7,
        }
    }
}

/// Every row of the plan, figure by figure, for the variants that run.
fn jobs(plan: &Plan, variants: &[Variant]) -> Vec<Job> {
    let mut jobs = Vec::new();
    if plan.wants(4) {
        for series in throughput::fig4_series(variants) {
            jobs.push(Job::Search {
                figure: 4,
                series,
                connections: 1,
                dips: 1,
            });
        }
    }
    if plan.wants(5) {
        for &connections in &plan.connections {
            for series in throughput::fig5_series(variants, plan.zipf_s) {
                jobs.push(Job::Search {
                    figure: 5,
                    series,
                    connections,
                    dips: plan.dips,
                });
            }
        }
    }
    if plan.wants(7) {
        for &connections in &plan.utilization_connections {
            for series in utilization::series(variants) {
                jobs.push(Job::Sweep {
                    series,
                    connections,
                });
            }
        }
    }
    jobs
}

/// Runs `args` with the `weir` binary at `exe`: prints each figure's table
/// when it is done, then writes the JSON and SVGs.
pub fn run(exe: &Path, args: &HnlbArgs) -> Result<Report> {
    let plan = Plan::from_args(args)?;
    if let Some(dir) = &args.svg_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::netns::install_signal_teardown();
    let progress = Progress::bar("weir-lab hnlb", 0);
    let backends = if plan.wants(5) || plan.wants(7) {
        plan.dips
    } else {
        1
    };
    progress.set_message(format!(
        "building the lab: client, load balancer, {backends} backends"
    ));
    let mut bed = Testbed::build(exe, backends, args.worker_cpu)?;
    progress.note(format!(
        "weir-lab hnlb: generator on CPU {}, worker on CPU {}, {backends} backends",
        bed.generator_cpu, bed.worker_cpu
    ));
    let mut skipped = Vec::new();
    let mut variants = Vec::new();
    for &v in &plan.variants {
        match bed.probe(v, plan.fast_table_size) {
            Ok(()) => variants.push(v),
            Err(e) => {
                // Until weir serve runs every tier (issue 9), a missing one is skipped.
                progress.note(format!(
                    "weir-lab hnlb: skipping {}, this weir does not run its tier ({e:#})",
                    v.name()
                ));
                skipped.push(Skipped {
                    variant: v,
                    reason: format!("{e:#}"),
                });
            }
        }
    }
    let jobs = jobs(&plan, &variants);
    if plan.wants(7) && !jobs.iter().any(|j| j.figure() == 7) {
        progress.note("weir-lab hnlb: no Fig. 7, it needs software or hybrid-first");
    }
    progress.set_length(jobs.len() as u64);
    let mut report = Report {
        plan: plan.clone(),
        generator_cpu: bed.generator_cpu,
        worker_cpu: bed.worker_cpu,
        skipped,
        fig4: Vec::new(),
        fig5: Vec::new(),
        fig7: Vec::new(),
        elapsed_s: 0.0,
    };
    let mut nth_of_figure = 0;
    for (i, &job) in jobs.iter().enumerate() {
        // Jobs come figure by figure.
        let figure = job.figure();
        if i == 0 || jobs[i - 1].figure() != figure {
            nth_of_figure = 0;
        }
        nth_of_figure += 1;
        let of_figure = jobs.iter().filter(|j| j.figure() == figure).count();
        let tag = format!("[fig {figure} {nth_of_figure}/{of_figure}]");
        match job {
            Job::Search {
                figure,
                series,
                connections,
                dips,
            } => {
                let row = throughput::search_row(
                    &mut bed,
                    &plan,
                    &progress,
                    &tag,
                    series,
                    connections,
                    dips,
                )?;
                if figure == 4 {
                    report.fig4.push(row);
                } else {
                    report.fig5.push(row);
                }
            }
            Job::Sweep {
                series,
                connections,
            } => {
                let row =
                    utilization::sweep(&mut bed, &plan, &progress, &tag, series, connections)?;
                report.fig7.push(row);
            }
        }
        progress.inc(1);
        // A figure's table as soon as its last row is in.
        if jobs.get(i + 1).is_none_or(|j| j.figure() != figure) {
            print!(
                "{}",
                match figure {
                    4 => report::fig4_table(&plan, &report.fig4),
                    5 => report::fig5_table(&plan, &report.fig5),
                    _ => report::fig7_table(&plan, bed.worker_cpu, &report.fig7),
                }
            );
        }
    }
    report.elapsed_s = progress.elapsed().as_secs_f64();
    for s in &report.skipped {
        println!(
            "skipped: {} (this weir does not run its tier: {})",
            s.variant.name(),
            s.reason
        );
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(dir) = &args.svg_dir {
        for (name, svg) in report::svgs(&report)? {
            let path = dir.join(name);
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    progress.finish(format!(
        "{} rows, {} trials",
        jobs.len(),
        report
            .fig4
            .iter()
            .chain(&report.fig5)
            .map(|r| r.found.trials.len())
            .sum::<usize>()
            + report
                .fig7
                .iter()
                .map(|r| r.points.len() + 1)
                .sum::<usize>()
    ));
    Ok(report)
}
