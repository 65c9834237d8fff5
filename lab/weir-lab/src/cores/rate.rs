//! Generator points (seed 001 Fig. 2, seed 003's mixes): the most packets
//! a second weir's workers get through to the sink, found by offering more
//! and more until the sink gets clearly less than offered.

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use weir_progress::Progress;

use super::rig::{reordering, Reordering, Setting, Testbed, Trial};

/// The first rate offered, and the factor between rates.
const FIRST_RATE: f64 = 50_000.0;
const STEP: f64 = 1.5;
/// The sink got this much less than offered: past the capacity.
const OVERLOAD: f64 = 0.05;
/// The most rates one point offers (50 kpps * 1.5^9 = 1.9 Mpps).
const MAX_TRIALS: usize = 10;

/// One setting at one cost, on one packet mix.
#[derive(Debug, Clone, Serialize)]
pub struct RatePoint {
    /// "single flow", "dominant flow", "backbone".
    pub traffic: String,
    pub setting: Setting,
    /// The most the sink received, packets per second.
    pub received_pps: f64,
    /// The workers' CPUs in the trial that received the most.
    pub workers_cpu: f64,
    pub trials: Vec<Trial>,
    pub reordering: Reordering,
}

/// Starts weir with `setting` and sends `frames` at rising rates, each
/// for `duration`.
pub fn measure(
    bed: &Testbed,
    traffic: &str,
    setting: Setting,
    frames: &[Vec<u8>],
    duration: Duration,
    progress: &Progress,
) -> Result<RatePoint> {
    let label = format!(
        "{traffic}, {}, {} cycles",
        setting.name(),
        setting.cost_cycles
    );
    progress.set_message(format!("{label}: starting weir serve"));
    let daemon = bed.start(&setting)?;
    let mut trials: Vec<Trial> = Vec::new();
    let mut rate = FIRST_RATE;
    for _ in 0..MAX_TRIALS {
        let t = bed.trial(&daemon, frames, rate, duration)?;
        progress.set_message(format!(
            "{label}: offered {:.3} Mpps, received {:.3} Mpps, workers had {:.2} CPUs",
            t.offered_pps / 1e6,
            t.received_pps / 1e6,
            t.workers_cpu
        ));
        let over = t.loss > OVERLOAD;
        trials.push(t);
        if over {
            break;
        }
        rate *= STEP;
    }
    let reordering = reordering(&daemon)?;
    let best = trials
        .iter()
        .max_by(|a, b| a.received_pps.total_cmp(&b.received_pps))
        .expect("at least one trial");
    Ok(RatePoint {
        traffic: traffic.to_string(),
        setting,
        received_pps: best.received_pps,
        workers_cpu: best.workers_cpu,
        trials,
        reordering,
    })
}
