//! HNLB Fig. 7: the worker's utilization metric (HNLB eq. 2/3, computed by
//! `weir_core::utilization` in the worker) against the offered rate, with
//! the loss onset and a linear fit below it.
//!
//! A row first searches its loss-free rate, then offers fractions of it
//! (`--utilization-steps`). During each trial it reads `weir status
//! --json`, where every worker shows its last window. Workers close a
//! window every 500 ms and `weir serve` writes their reports every second,
//! so the first new window a trial sees may have begun before its traffic;
//! it is left out, and the later ones (all seen while the traffic still
//! ran) are summed into one for the trial. The onset is the lowest offered
//! rate that lost more than the threshold; the fit is over the rates below
//! it. HNLB's claims: the metric is linear in the rate there (condition
//! iii) and reaches 1 at the onset (condition i).

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use weir_core::utilization::{CostModel, QueueBursts, Utilization};
use weir_progress::Progress;

use super::fit::{linear_fit, LinearFit};
use super::rig::Testbed;
use super::search::{search, Found};
use super::variant::{Mix, Series, Variant};
use super::Plan;

/// Trials of Fig. 7 last at least this long: the first new window is left
/// out, and the reports come a second apart.
const MIN_TRIAL: Duration = Duration::from_millis(3500);

/// One offered rate of a row.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The rate asked for, as a fraction of the row's loss-free rate.
    pub fraction: f64,
    pub requested_pps: f64,
    pub offered: u64,
    pub offered_pps: f64,
    pub received: u64,
    pub received_pps: f64,
    pub loss: f64,
    /// HNLB's metric (eq. 2, or 3 with several queues) over the windows.
    pub utilization: Option<f64>,
    /// Eq. 1: busy cycles over all cycles.
    pub busy_fraction: Option<f64>,
    /// The busiest queue's mean burst over the maximum burst.
    pub burst_fill: Option<f64>,
    /// weir's cost-model load (docs/software-tier.md), when the worker
    /// could fit its poll cost.
    pub load: Option<f64>,
    /// Worker windows summed into this point.
    pub windows: usize,
}

/// Fig. 7's row: one series at one number of connections.
#[derive(Debug, Clone, Serialize)]
pub struct UtilizationRow {
    pub series: Series,
    pub connections: u32,
    pub dips: usize,
    /// The search that placed the offered rates.
    pub search: Found,
    pub points: Vec<Point>,
    /// The lowest offered rate that lost more than the threshold.
    pub onset_pps: Option<f64>,
    /// Utilization against offered Mpps, below the onset.
    pub fit: Option<LinearFit>,
    /// The utilization at the highest loss-free point, and at the onset.
    pub utilization_last_loss_free: Option<f64>,
    pub utilization_at_onset: Option<f64>,
}

/// Fig. 7's series: HNLB's SLB and HNLB, equally heavy connections (the
/// heavy policy has nothing to choose among them).
pub fn series(variants: &[Variant]) -> Vec<Series> {
    [Variant::Software, Variant::HybridFirst]
        .into_iter()
        .filter(|v| variants.contains(v))
        .map(|variant| Series {
            variant,
            mix: Mix::RoundRobin,
        })
        .collect()
}

/// Searches the row's loss-free rate, then measures the utilization at
/// each step of it.
pub fn sweep(
    bed: &mut Testbed,
    plan: &Plan,
    progress: &Progress,
    tag: &str,
    series: Series,
    connections: u32,
) -> Result<UtilizationRow> {
    let setup = plan.setup(series, connections, plan.dips, tag);
    let bench = bed.bench(&setup, progress)?;
    let found = search(&plan.limits, bench.trial_time(), |rate| bench.trial(rate))?;
    let base = if found.loss_free_pps > 0.0 {
        found.loss_free_pps
    } else {
        found.full_speed_received_pps
    };
    let duration = Duration::from_secs_f64(plan.duration_s).max(MIN_TRIAL);
    let mut steps = plan.utilization_steps.clone();
    steps.sort_by(f64::total_cmp);
    let mut points = Vec::new();
    for fraction in steps {
        let rate = base * fraction;
        // Reports: every worker's window, as one `weir status` shows them.
        let before = worker_windows(&bench.status()?)?;
        let mut reports: Vec<Vec<Utilization>> = Vec::new();
        let trial = bench.observed_trial(Some(rate), duration, |_| {
            let now = worker_windows(&bench.status()?)?;
            if now != before && !reports.contains(&now) {
                reports.push(now);
            }
            Ok(())
        })?;
        // The first new report may hold windows begun before the traffic.
        let windows: Vec<Utilization> = reports.into_iter().skip(1).flatten().collect();
        let sum = summed(&windows);
        let p = Point {
            fraction,
            requested_pps: rate,
            offered: trial.offered,
            offered_pps: trial.offered_pps,
            received: trial.received,
            received_pps: trial.received_pps,
            loss: trial.loss,
            utilization: sum.as_ref().map(Utilization::utilization),
            busy_fraction: sum.as_ref().map(Utilization::busy_fraction),
            burst_fill: sum.as_ref().map(Utilization::busiest_queue_fill),
            load: sum.as_ref().and_then(Utilization::load),
            windows: windows.len(),
        };
        progress.set_message(format!(
            "{}: utilization {} at {:.3} Mpps, loss {:.3}%",
            setup.label,
            p.utilization
                .map_or("unknown".to_string(), |u| format!("{:.1}%", u * 100.0)),
            p.offered_pps / 1e6,
            p.loss * 100.0
        ));
        points.push(p);
    }
    let row = finish(
        series,
        connections,
        plan.dips,
        found,
        points,
        plan.limits.loss_threshold,
    );
    progress.note(format!(
        "{}: loss onset {}, R^2 below it {}, utilization at the last loss-free rate {}",
        setup.label,
        row.onset_pps
            .map_or("none".to_string(), |r| format!("{:.3} Mpps", r / 1e6)),
        row.fit.map_or("-".to_string(), |f| format!("{:.4}", f.r2)),
        row.utilization_last_loss_free
            .map_or("-".to_string(), |u| format!("{:.1}%", u * 100.0)),
    ));
    Ok(row)
}

/// The onset, the fit below it and the metric at both ends.
fn finish(
    series: Series,
    connections: u32,
    dips: usize,
    search: Found,
    points: Vec<Point>,
    loss_threshold: f64,
) -> UtilizationRow {
    let onset = points.iter().position(|p| p.loss > loss_threshold);
    let below = &points[..onset.unwrap_or(points.len())];
    let fit = linear_fit(
        &below
            .iter()
            .filter_map(|p| Some((p.offered_pps / 1e6, p.utilization?)))
            .collect::<Vec<_>>(),
    );
    UtilizationRow {
        series,
        connections,
        dips,
        search,
        onset_pps: onset.map(|i| points[i].offered_pps),
        fit,
        utilization_last_loss_free: below.last().and_then(|p| p.utilization),
        utilization_at_onset: onset.and_then(|i| points[i].utilization),
        points,
    }
}

/// The windows of every worker in `weir status --json`.
fn worker_windows(status: &Value) -> Result<Vec<Utilization>> {
    let workers = status["workers"]
        .as_array()
        .context("weir status --json has no workers")?;
    workers
        .iter()
        .filter(|w| !w["utilization"].is_null())
        .map(|w| window(&w["utilization"]).with_context(|| format!("worker {w}")))
        .collect()
}

/// A worker's window, as `weir_core::utilization::Utilization` serializes.
fn window(v: &Value) -> Result<Utilization> {
    let n = |v: &Value, key: &str| {
        v[key]
            .as_u64()
            .with_context(|| format!("utilization.{key} is not a count"))
    };
    let q = &v["busiest_queue"];
    let cost = match &v["cost"] {
        Value::Null => None,
        c => Some(CostModel {
            burst_cycles: c["burst_cycles"].as_f64().context("cost.burst_cycles")?,
            packet_cycles: c["packet_cycles"].as_f64().context("cost.packet_cycles")?,
        }),
    };
    Ok(Utilization {
        max_burst: u32::try_from(n(v, "max_burst")?).context("utilization.max_burst")?,
        cycles: n(v, "cycles")?,
        busy_cycles: n(v, "busy_cycles")?,
        polls: n(v, "polls")?,
        bursts: n(v, "bursts")?,
        packets: n(v, "packets")?,
        busiest_queue: QueueBursts {
            queue: n(q, "queue")? as usize,
            bursts: n(q, "bursts")?,
            packets: n(q, "packets")?,
        },
        cost,
    })
}

/// The windows as one: counts summed, the busiest queues' bursts summed,
/// the latest cost fit (the worker's fit carries over windows). None for
/// no window.
fn summed(windows: &[Utilization]) -> Option<Utilization> {
    let last = windows.last()?;
    let mut sum = Utilization {
        cycles: 0,
        busy_cycles: 0,
        polls: 0,
        bursts: 0,
        packets: 0,
        busiest_queue: QueueBursts {
            queue: last.busiest_queue.queue,
            bursts: 0,
            packets: 0,
        },
        ..last.clone()
    };
    for w in windows {
        sum.cycles += w.cycles;
        sum.busy_cycles += w.busy_cycles;
        sum.polls += w.polls;
        sum.bursts += w.bursts;
        sum.packets += w.packets;
        sum.busiest_queue.bursts += w.busiest_queue.bursts;
        sum.busiest_queue.packets += w.busiest_queue.packets;
    }
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hnlb::search::Ended;

    fn window_of(cycles: u64, busy: u64, bursts: u64, packets: u64) -> Utilization {
        Utilization {
            max_burst: 64,
            cycles,
            busy_cycles: busy,
            polls: bursts * 2,
            bursts,
            packets,
            busiest_queue: QueueBursts {
                queue: 0,
                bursts,
                packets,
            },
            cost: None,
        }
    }

    #[test]
    fn a_window_reads_back_from_its_json() {
        let w = Utilization {
            cost: Some(CostModel {
                burst_cycles: 300.0,
                packet_cycles: 40.5,
            }),
            ..window_of(1000, 400, 10, 320)
        };
        let status = serde_json::json!({ "workers": [ { "cpu": 1, "utilization": w } ] });
        assert_eq!(worker_windows(&status).unwrap(), vec![w]);
        let idle = serde_json::json!({ "workers": [ { "cpu": 1, "utilization": null } ] });
        assert!(worker_windows(&idle).unwrap().is_empty());
        assert!(worker_windows(&serde_json::json!({})).is_err());
    }

    #[test]
    fn windows_sum_to_the_metric_of_their_union() {
        // Half busy with half-full bursts, then fully busy with full ones.
        let sum = summed(&[
            window_of(1000, 500, 10, 320),
            window_of(1000, 1000, 10, 640),
        ])
        .unwrap();
        assert_eq!(
            (sum.cycles, sum.busy_cycles, sum.packets),
            (2000, 1500, 960)
        );
        // U_c = 0.75, fill = 960 / (20 * 64) = 0.75.
        assert!((sum.utilization() - 0.5625).abs() < 1e-12);
        assert!(summed(&[]).is_none());
    }

    fn point(offered_pps: f64, loss: f64, utilization: f64) -> Point {
        Point {
            fraction: 0.0,
            requested_pps: offered_pps,
            offered: 1,
            offered_pps,
            received: 1,
            received_pps: offered_pps,
            loss,
            utilization: Some(utilization),
            busy_fraction: None,
            burst_fill: None,
            load: None,
            windows: 1,
        }
    }

    #[test]
    fn the_onset_is_the_first_lossy_rate_and_the_fit_stops_below_it() {
        let found = Found {
            loss_free_pps: 1e6,
            loss_free_received_pps: 1e6,
            first_loss_pps: None,
            full_speed_offered_pps: 2e6,
            full_speed_received_pps: 1e6,
            ended: Ended::Converged,
            trials: Vec::new(),
        };
        let points = vec![
            point(0.25e6, 0.0, 0.25),
            point(0.5e6, 0.0, 0.5),
            point(0.75e6, 0.0, 0.75),
            point(1.0e6, 0.0005, 0.99),
            point(1.25e6, 0.02, 1.0),
            point(1.5e6, 0.0, 1.0),
        ];
        let series = Series {
            variant: Variant::Software,
            mix: Mix::RoundRobin,
        };
        let row = finish(series, 1000, 2, found, points, 0.001);
        assert_eq!(row.onset_pps, Some(1.25e6));
        let fit = row.fit.unwrap();
        assert_eq!(fit.n, 4);
        assert!(fit.r2 > 0.99 && (fit.slope - 1.0).abs() < 0.05, "{fit:?}");
        assert_eq!(row.utilization_last_loss_free, Some(0.99));
        assert_eq!(row.utilization_at_onset, Some(1.0));
    }
}
