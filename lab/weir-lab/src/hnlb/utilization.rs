//! HNLB Fig. 7: the worker's utilization metric (HNLB eq. 2/3, computed by
//! `weir_software_engine::utilization` in the worker) against the offered rate, with
//! the loss onset, linear fits, and the metric at saturation.
//!
//! A row first offers traffic as fast as the generator goes: what gets
//! through is the row's capacity, and the metric there is its value at
//! saturation (condition i: 100% at the highest rate served). Then it
//! offers fractions of that capacity (`--utilization-steps`), lowest first.
//! During each trial it reads the worker reports ([`workers`]): workers
//! close a window every 500 ms and `weir serve` writes their reports every
//! second, so the first new report of a trial may hold windows begun before
//! its traffic; it is left out, and the later ones (all seen while the
//! traffic still ran) are summed into one for the trial.
//!
//! The onset is the lowest offered rate that lost more than the threshold.
//! Two fits test condition iii (linear in the rate): the paper's, against
//! the offered rate below the onset, and one against the rate the backends
//! received, over every rate below 90% of the capacity: packets lost before
//! the worker (a ring overflowing under a burst) cost it nothing, so its
//! metric follows what it forwarded.
//!
//! [`workers`]: super::workers

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use weir_progress::Progress;
use weir_software_engine::utilization::{QueueBursts, Utilization};

use super::fit::{linear_fit, LinearFit};
use super::rig::{Bench, Testbed, Trial};
use super::variant::{Mix, Series, Variant};
use super::workers::{windows, Ledger};
use super::Plan;

/// Rates up to this share of the capacity count as unsaturated in the fit
/// against the received rate.
const UNSATURATED: f64 = 0.9;

/// One offered rate of a row.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The rate asked for, as a fraction of the row's capacity; None: as
    /// fast as the generator goes.
    pub fraction: Option<f64>,
    pub requested_pps: Option<f64>,
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
    /// weir's cost-model load (docs/src/software-tier.md), when the worker
    /// could fit its poll cost.
    pub load: Option<f64>,
    /// Worker windows summed into this point.
    pub windows: usize,
    /// The worker's CPU time over the trial's (see `Trial`).
    pub worker_cpu_share: Option<f64>,
}

/// Fig. 7's row: one series at one number of connections.
#[derive(Debug, Clone, Serialize)]
pub struct UtilizationRow {
    pub series: Series,
    pub connections: u32,
    pub dips: usize,
    /// As fast as the generator goes: its received rate is the capacity.
    pub full_speed: Point,
    /// The fractions of the capacity, lowest first.
    pub points: Vec<Point>,
    /// The lowest offered rate that lost more than the threshold.
    pub onset_pps: Option<f64>,
    /// Utilization against offered Mpps, below the onset (the paper's).
    pub fit_offered: Option<LinearFit>,
    /// Utilization against received Mpps, below 90% of the capacity.
    pub fit_received: Option<LinearFit>,
    /// The utilization at the highest loss-free rate, and at the onset.
    pub utilization_last_loss_free: Option<f64>,
    pub utilization_at_onset: Option<f64>,
    /// Where the workers' packets went over the row.
    pub workers: Option<Ledger>,
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

/// Measures the capacity at full speed, then the utilization at each
/// step of it.
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
    let before = bench.ledger()?;
    let duration = Duration::from_secs_f64(plan.utilization_trial_s);
    let full_speed = measure(&bench, None, duration)?;
    let capacity = full_speed.received_pps;
    let mut steps = plan.utilization_steps.clone();
    steps.sort_by(f64::total_cmp);
    let mut points = Vec::new();
    for fraction in steps {
        let mut p = measure(&bench, Some(capacity * fraction), duration)?;
        p.fraction = Some(fraction);
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
    let mut row = finish(
        series,
        connections,
        plan.dips,
        full_speed,
        points,
        plan.limits.loss_threshold,
    );
    row.workers = bench.ledger()?.zip(before).map(|(a, b)| a.since(&b));
    let pct = |u: Option<f64>| u.map_or("-".to_string(), |u| format!("{:.1}%", u * 100.0));
    let r2 = |f: Option<LinearFit>| f.map_or("-".to_string(), |f| format!("{:.4}", f.r2));
    progress.note(format!(
        "{}: capacity {:.3} Mpps with U {}; loss onset {}; R^2 {} (offered, below the onset), \
         {} (received)",
        setup.label,
        capacity / 1e6,
        pct(row.full_speed.utilization),
        row.onset_pps
            .map_or("none".to_string(), |r| format!("{:.3} Mpps", r / 1e6)),
        r2(row.fit_offered),
        r2(row.fit_received),
    ));
    Ok(row)
}

/// One trial at `rate` with the workers' windows summed over it.
fn measure(bench: &Bench<'_>, rate: Option<f64>, duration: Duration) -> Result<Point> {
    // Reports: every worker's window, as one `weir status` shows them.
    let before = windows(&bench.workers()?)?;
    let mut reports: Vec<Vec<Utilization>> = Vec::new();
    let trial: Trial = bench.observed_trial(rate, duration, |_| {
        let now = windows(&bench.workers()?)?;
        if now != before && !reports.contains(&now) {
            reports.push(now);
        }
        Ok(())
    })?;
    // The first new report may hold windows begun before the traffic.
    let windows: Vec<Utilization> = reports.into_iter().skip(1).flatten().collect();
    let sum = summed(&windows);
    Ok(Point {
        fraction: None,
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
        worker_cpu_share: trial.worker_cpu_share,
    })
}

/// The onset, the fits and the metric at the onset.
fn finish(
    series: Series,
    connections: u32,
    dips: usize,
    full_speed: Point,
    points: Vec<Point>,
    loss_threshold: f64,
) -> UtilizationRow {
    let onset = points.iter().position(|p| p.loss > loss_threshold);
    let below = &points[..onset.unwrap_or(points.len())];
    let fit = |ps: &mut dyn Iterator<Item = &Point>, x: fn(&Point) -> f64| {
        linear_fit(
            &ps.filter_map(|p| Some((x(p) / 1e6, p.utilization?)))
                .collect::<Vec<_>>(),
        )
    };
    let capacity = full_speed.received_pps;
    UtilizationRow {
        series,
        connections,
        dips,
        onset_pps: onset.map(|i| points[i].offered_pps),
        fit_offered: fit(&mut below.iter(), |p| p.offered_pps),
        fit_received: fit(
            &mut points
                .iter()
                .filter(|p| p.received_pps < UNSATURATED * capacity),
            |p| p.received_pps,
        ),
        utilization_last_loss_free: below.last().and_then(|p| p.utilization),
        utilization_at_onset: onset.and_then(|i| points[i].utilization),
        full_speed,
        points,
        workers: None,
    }
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

    fn point(offered_pps: f64, received_pps: f64, loss: f64, utilization: f64) -> Point {
        Point {
            fraction: None,
            requested_pps: Some(offered_pps),
            offered: 1,
            offered_pps,
            received: 1,
            received_pps,
            loss,
            utilization: Some(utilization),
            busy_fraction: None,
            burst_fill: None,
            load: None,
            windows: 1,
            worker_cpu_share: None,
        }
    }

    #[test]
    fn the_onset_is_the_first_lossy_rate_and_the_fits_stop_where_they_should() {
        // Capacity 1.3 Mpps. A burst loses a little at 1 Mpps, so the onset
        // comes before saturation; what the worker forwards stays linear.
        let points = vec![
            point(0.25e6, 0.25e6, 0.0, 0.25),
            point(0.5e6, 0.5e6, 0.0, 0.5),
            point(0.75e6, 0.75e6, 0.0, 0.75),
            point(1.0e6, 0.99e6, 0.01, 0.99),
            point(1.25e6, 1.2e6, 0.04, 1.0),
            point(1.5e6, 1.3e6, 0.13, 1.0),
        ];
        let series = Series {
            variant: Variant::Software,
            mix: Mix::RoundRobin,
        };
        let full = point(2.0e6, 1.3e6, 0.35, 1.0);
        let row = finish(series, 1000, 2, full, points, 0.001);
        assert_eq!(row.onset_pps, Some(1.0e6));
        let below = row.fit_offered.unwrap();
        assert_eq!(below.n, 3);
        assert!(
            below.r2 > 0.999 && (below.slope - 1.0).abs() < 1e-9,
            "{below:?}"
        );
        // Received below 0.9 * 1.3 = 1.17 Mpps: four points.
        let received = row.fit_received.unwrap();
        assert_eq!(received.n, 4);
        assert!(received.r2 > 0.99, "{received:?}");
        assert_eq!(row.utilization_last_loss_free, Some(0.75));
        assert_eq!(row.utilization_at_onset, Some(0.99));
    }
}
