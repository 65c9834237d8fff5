//! Running many simulations: one job per (trace, policy, interval), spread
//! over threads, results in job order whatever thread ran them, progress on
//! stderr.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use weir_core::dispatch::Policy;
use weir_progress::Progress;

use crate::engine::{simulate, RunResult};
use crate::model::Pool;
use crate::trace::Trace;

/// One simulation to run: an index into the scenario list, a policy, an
/// update interval in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub scenario: usize,
    pub policy: Policy,
    pub interval: f64,
}

/// A trace with its pool.
pub struct Scenario {
    pub seed: u64,
    pub trace: Trace,
    pub pool: Pool,
}

/// Threads to use: `requested`, or every core if 0.
pub fn threads(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Runs every job; with `progress`, a bar on stderr and a summary.
pub fn run_jobs(
    scenarios: &[Scenario],
    jobs: &[Job],
    threads: usize,
    progress: bool,
) -> Vec<RunResult> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RunResult>>> = Mutex::new(vec![None; jobs.len()]);
    let bar = Progress::bar("weir-lab sim", jobs.len() as u64).quiet(!progress);
    let threads = threads.max(1).min(jobs.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(k) else { break };
                let sc = &scenarios[job.scenario];
                let r = simulate(&sc.trace, &sc.pool, job.policy, job.interval);
                bar.set_message(format!(
                    "seed {} {} at {} ms: omega {:.4}",
                    sc.seed,
                    r.policy,
                    fmt_ms(r.interval_ms),
                    r.omega
                ));
                bar.inc(1);
                results.lock().expect("no panics while holding")[k] = Some(r);
            });
        }
    });
    bar.finish(format!("{} simulations on {threads} threads", jobs.len()));
    results
        .into_inner()
        .expect("threads joined")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

pub(crate) fn fmt_ms(ms: f64) -> String {
    if ms == ms.round() {
        format!("{ms:.0}")
    } else {
        format!("{ms}")
    }
}

/// Omega of one (policy, interval) point averaged over seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub policy: String,
    pub interval_ms: f64,
    /// Mean over seeds.
    pub omega: f64,
    pub omega_min: f64,
    pub omega_max: f64,
    /// Mean over seeds, per VIP.
    pub omega_per_vip: Vec<f64>,
    pub served: f64,
    pub seeds: usize,
}

/// Averages results that share policy and interval, keeping first-seen order.
pub fn aggregate(results: &[RunResult]) -> Vec<Point> {
    let mut out: Vec<(Point, usize)> = Vec::new();
    for r in results {
        let pos = out
            .iter()
            .position(|(p, _)| p.policy == r.policy && p.interval_ms == r.interval_ms);
        match pos {
            None => out.push((
                Point {
                    policy: r.policy.clone(),
                    interval_ms: r.interval_ms,
                    omega: r.omega,
                    omega_min: r.omega,
                    omega_max: r.omega,
                    omega_per_vip: r.omega_per_vip.clone(),
                    served: r.served,
                    seeds: 1,
                },
                1,
            )),
            Some(i) => {
                let (p, n) = &mut out[i];
                *n += 1;
                p.omega += r.omega;
                p.omega_min = p.omega_min.min(r.omega);
                p.omega_max = p.omega_max.max(r.omega);
                p.served += r.served;
                for (a, b) in p.omega_per_vip.iter_mut().zip(&r.omega_per_vip) {
                    *a += b;
                }
                p.seeds += 1;
            }
        }
    }
    out.into_iter()
        .map(|(mut p, n)| {
            let n = n as f64;
            p.omega /= n;
            p.served /= n;
            p.omega_per_vip.iter_mut().for_each(|x| *x /= n);
            p
        })
        .collect()
}
