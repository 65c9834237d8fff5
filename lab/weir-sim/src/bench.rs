//! `weir-lab bench sim`: how the simulator's cost grows with the trace.
//! One thread, every policy on the same trace, wall-clock per run.

use std::fmt::Write;
use std::time::Instant;

use serde::Serialize;
use weir_core::dispatch::Policy;
use weir_progress::Progress;

use crate::engine::simulate;
use crate::model::PoolParams;
use crate::trace::SyntheticParams;

#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub flows: usize,
    pub policy: String,
    pub interval_ms: f64,
    pub generate_s: f64,
    pub simulate_s: f64,
    pub ns_per_flow: f64,
    pub events: u64,
    pub updates: u64,
    pub omega: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub threads: usize,
    pub rows: Vec<BenchRow>,
}

/// Times `policies` at `interval` on synthetic traces of each size.
pub fn run(
    sizes: &[usize],
    policies: &[Policy],
    interval: f64,
    seed: u64,
    progress: bool,
) -> anyhow::Result<BenchReport> {
    anyhow::ensure!(
        interval.is_finite() && interval > 0.0,
        "interval must be > 0"
    );
    let bar =
        Progress::bar("weir-lab bench sim", (sizes.len() * policies.len()) as u64).quiet(!progress);
    let mut rows = Vec::new();
    for &n in sizes {
        bar.set_message(format!("generating {n} flows"));
        let t0 = Instant::now();
        let trace = SyntheticParams {
            flows: n,
            seed,
            ..Default::default()
        }
        .generate()?;
        let pool = PoolParams::default().build(&trace)?;
        let generate_s = t0.elapsed().as_secs_f64();
        for &p in policies {
            bar.set_message(format!("{n} flows, {p}"));
            let t1 = Instant::now();
            let r = simulate(&trace, &pool, p, interval);
            let s = t1.elapsed().as_secs_f64();
            bar.inc(1);
            rows.push(BenchRow {
                flows: n,
                policy: p.to_string(),
                interval_ms: interval * 1e3,
                generate_s,
                simulate_s: s,
                ns_per_flow: s * 1e9 / n as f64,
                events: r.events,
                updates: r.updates,
                omega: r.omega,
            });
        }
    }
    bar.finish(format!("{} timings on one thread", rows.len()));
    Ok(BenchReport { threads: 1, rows })
}

impl BenchReport {
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:>9} {:<10} {:>8} {:>11} {:>11} {:>11} {:>10} {:>8}\n",
            "flows", "policy", "int_ms", "generate_s", "simulate_s", "ns/flow", "updates", "omega"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:>9} {:<10} {:>8} {:>11.3} {:>11.3} {:>11.0} {:>10} {:>8.4}",
                r.flows,
                r.policy,
                r.interval_ms,
                r.generate_s,
                r.simulate_s,
                r.ns_per_flow,
                r.updates,
                r.omega
            );
        }
        s
    }
}
