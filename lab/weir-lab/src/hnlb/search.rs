//! The highest loss-free rate (HNLB Fig. 4 and 5): a search over the
//! offered rate, bounded in trials and in time.
//!
//! A trial offers traffic at a rate for a fixed time and counts what the
//! backends received; it is loss-free when `(offered - received) / offered`
//! is at most the threshold. The search:
//!
//! 1. offers as fast as the generator goes. Loss-free there means the load
//!    balancer kept up with the generator: the result is the generator's
//!    rate, marked *generator-bound* (a lower bound of the load balancer's).
//! 2. Otherwise what the backends received at full speed estimates the
//!    capacity. It tries just under it, and halves ([`STEP_DOWN`]) until a
//!    rate is loss-free.
//! 3. Bisects between the highest loss-free and the lowest lossy rate until
//!    they are within the resolution of each other, or the trials or the
//!    time run out.
//!
//! The result is the highest loss-free trial's measured offered rate (not
//! the rate asked for: a paced generator may fall a little short).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::rig::Trial;

/// The first paced try, as a share of the throughput at full speed.
const FIRST_TRY: f64 = 0.97;
/// How far a lossy try steps down before bisection has a bracket.
const STEP_DOWN: f64 = 0.5;
/// Below this rate (packets per second) the search gives up.
const MIN_RATE: f64 = 1000.0;

/// The bounds of one search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// The largest loss, as a fraction of the offered packets, that still
    /// counts as loss-free.
    pub loss_threshold: f64,
    /// Trials, the full-speed one included (at least 2).
    pub max_trials: usize,
    /// Time for all trials; a trial that would end past it is not started.
    #[serde(rename = "max_time_s", serialize_with = "secs")]
    pub max_time: Duration,
    /// Bisection stops when (lossy - loss-free) / lossy is at most this.
    pub resolution: f64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// Loss-free at full speed: the generator, not the load balancer, is
    /// the limit.
    GeneratorBound,
    /// The bracket is within the resolution.
    Converged,
    /// The trial budget ran out first.
    Trials,
    /// The time budget ran out first.
    Time,
    /// Every rate tried down to the minimum lost packets.
    NoLossFreeRate,
}

impl Ended {
    pub fn describe(self) -> &'static str {
        match self {
            Ended::GeneratorBound => "generator-bound",
            Ended::Converged => "converged",
            Ended::Trials => "trial limit",
            Ended::Time => "time limit",
            Ended::NoLossFreeRate => "no loss-free rate",
        }
    }
}

/// What a search found.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    /// The highest loss-free trial's offered rate, packets per second (0
    /// if none was loss-free).
    pub loss_free_pps: f64,
    /// What the backends received in that trial, per second.
    pub loss_free_received_pps: f64,
    /// The lowest offered rate that lost more than the threshold, if any.
    pub first_loss_pps: Option<f64>,
    /// The generator's rate at full speed.
    pub full_speed_offered_pps: f64,
    /// What the backends received at full speed: the throughput under
    /// overload.
    pub full_speed_received_pps: f64,
    pub ended: Ended,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
}

/// Searches with `trial(rate)`: `None` offers as fast as possible, `Some(r)`
/// paces to r packets per second. `trial_time` is how long one trial takes,
/// for the time budget.
pub fn search(
    limits: &Limits,
    trial_time: Duration,
    mut trial: impl FnMut(Option<f64>) -> Result<Trial>,
) -> Result<Found> {
    let t0 = Instant::now();
    let mut trials: Vec<Trial> = Vec::new();
    let lossless = |t: &Trial| t.loss <= limits.loss_threshold;
    // Room for one more trial?
    let room = |n: usize| {
        if n >= limits.max_trials.max(2) {
            Some(Ended::Trials)
        } else if t0.elapsed() + trial_time > limits.max_time {
            Some(Ended::Time)
        } else {
            None
        }
    };

    let full = trial(None)?;
    trials.push(full.clone());
    let found = |trials: Vec<Trial>, best: Option<usize>, lossy: Option<f64>, ended| {
        let best = best.map(|i| &trials[i]);
        Found {
            loss_free_pps: best.map_or(0.0, |t| t.offered_pps),
            loss_free_received_pps: best.map_or(0.0, |t| t.received_pps),
            first_loss_pps: lossy,
            full_speed_offered_pps: full.offered_pps,
            full_speed_received_pps: full.received_pps,
            ended,
            trials,
        }
    };
    if lossless(&full) {
        return Ok(found(trials, Some(0), None, Ended::GeneratorBound));
    }

    // Rates asked for: `lo` was loss-free (trial `best`), `hi` was not.
    let mut hi = full.offered_pps;
    let mut lossy_measured = full.offered_pps;
    let mut lo = None;
    let mut best = None;
    let mut rate = full.received_pps.min(hi) * FIRST_TRY;
    while lo.is_none() {
        if rate < MIN_RATE {
            return Ok(found(
                trials,
                None,
                Some(lossy_measured),
                Ended::NoLossFreeRate,
            ));
        }
        if let Some(ended) = room(trials.len()) {
            return Ok(found(trials, None, Some(lossy_measured), ended));
        }
        let t = trial(Some(rate))?;
        if lossless(&t) {
            lo = Some(rate);
            best = Some(trials.len());
        } else {
            hi = rate;
            lossy_measured = t.offered_pps;
            // Under the throughput this trial saw, and at least a step down.
            rate = (rate * STEP_DOWN).min(t.received_pps * FIRST_TRY);
        }
        trials.push(t);
    }

    let mut lo = lo.expect("the loop above ends with a loss-free rate");
    loop {
        if (hi - lo) / hi <= limits.resolution {
            return Ok(found(trials, best, Some(lossy_measured), Ended::Converged));
        }
        if let Some(ended) = room(trials.len()) {
            return Ok(found(trials, best, Some(lossy_measured), ended));
        }
        let mid = (lo + hi) / 2.0;
        let t = trial(Some(mid))?;
        if lossless(&t) {
            lo = mid;
            best = Some(trials.len());
        } else {
            hi = mid;
            lossy_measured = t.offered_pps;
        }
        trials.push(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load balancer that forwards up to `capacity` pps, fed by a
    /// generator that reaches `generator` pps.
    fn model(generator: f64, capacity: f64) -> impl FnMut(Option<f64>) -> Result<Trial> {
        move |rate| {
            let offered = rate.unwrap_or(generator).min(generator);
            let received = offered.min(capacity);
            Ok(Trial::for_rates(rate, offered, received))
        }
    }

    fn limits() -> Limits {
        Limits {
            loss_threshold: 0.001,
            max_trials: 12,
            max_time: Duration::from_secs(3600),
            resolution: 0.02,
        }
    }

    #[test]
    fn a_load_balancer_faster_than_the_generator_is_generator_bound() {
        let f = search(&limits(), Duration::ZERO, model(4e6, 9e6)).unwrap();
        assert_eq!(f.ended, Ended::GeneratorBound);
        assert_eq!(f.loss_free_pps, 4e6);
        assert_eq!(f.trials.len(), 1);
        assert_eq!(f.first_loss_pps, None);
    }

    #[test]
    fn the_search_brackets_the_capacity_within_the_resolution() {
        for capacity in [0.3e6, 1.234e6, 3.9e6] {
            let f = search(&limits(), Duration::ZERO, model(4e6, capacity)).unwrap();
            assert_eq!(f.ended, Ended::Converged, "{capacity}: {f:?}");
            assert!(f.loss_free_pps <= capacity, "{capacity}: {f:?}");
            assert!(f.loss_free_pps >= capacity * 0.98, "{capacity}: {f:?}");
            let lossy = f.first_loss_pps.unwrap();
            assert!(lossy > capacity && lossy <= 4e6, "{capacity}: {f:?}");
            assert_eq!(f.full_speed_received_pps, capacity);
            // Every trial past the first asked for a rate.
            assert!(f.trials[1..].iter().all(|t| t.requested_pps.is_some()));
        }
    }

    #[test]
    fn loss_below_the_full_speed_throughput_steps_down_until_loss_free() {
        // Loses 5% at every rate above 1 Mpps although 2 Mpps get through
        // at full speed (a bursty overload, say).
        let mut lb = |rate: Option<f64>| {
            let offered = rate.unwrap_or(4e6);
            let received = if rate.is_none() {
                2e6
            } else if offered > 1e6 {
                offered * 0.95
            } else {
                offered
            };
            Ok(Trial::for_rates(rate, offered, received))
        };
        let f = search(&limits(), Duration::ZERO, &mut lb).unwrap();
        assert!(f.loss_free_pps <= 1e6 && f.loss_free_pps > 0.97e6, "{f:?}");
    }

    #[test]
    fn the_trial_budget_bounds_the_search() {
        let l = Limits {
            max_trials: 4,
            ..limits()
        };
        let f = search(&l, Duration::ZERO, model(4e6, 1e6)).unwrap();
        assert_eq!(f.trials.len(), 4);
        assert_eq!(f.ended, Ended::Trials);
        assert!(f.loss_free_pps > 0.0 && f.loss_free_pps <= 1e6, "{f:?}");
    }

    #[test]
    fn the_time_budget_bounds_the_search() {
        let l = Limits {
            max_time: Duration::from_millis(50),
            ..limits()
        };
        // Trials of 20 ms: the full-speed one and at most two more fit.
        let mut lb = model(4e6, 1e6);
        let f = search(&l, Duration::from_millis(20), |rate| {
            std::thread::sleep(Duration::from_millis(20));
            lb(rate)
        })
        .unwrap();
        assert_eq!(f.ended, Ended::Time, "{f:?}");
        assert!(f.trials.len() <= 3, "{f:?}");
    }

    #[test]
    fn a_load_balancer_that_always_loses_has_no_loss_free_rate() {
        let l = Limits {
            max_trials: 100,
            ..limits()
        };
        let f = search(&l, Duration::ZERO, |rate| {
            let offered = rate.unwrap_or(4e6);
            Ok(Trial::for_rates(rate, offered, offered * 0.5))
        })
        .unwrap();
        assert_eq!(f.ended, Ended::NoLossFreeRate);
        assert_eq!(f.loss_free_pps, 0.0);
        // Each step at least halves: from 4 Mpps to 1000 pps in at most 14.
        assert!(f.trials.len() <= 14, "{}", f.trials.len());
    }
}
