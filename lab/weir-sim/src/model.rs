//! The service model: DIP capacities, the measurement window, and how an
//! instance shares its capacity.
//!
//! Every VIP j has `dips` instances of two types, small and large, with
//! capacity ratio 1 : `capacity_ratio` (even pool indices small, odd large).
//! Capacities are scaled per VIP so that the VIP's mean requested traffic
//! over the measurement window is `load` times its capacity (load slightly
//! above 1 is Spotlight's "requested traffic slightly more than capacity").
//!
//! An instance i with capacity C_i whose flows request d_1..d_n shares C_i
//! max-min fairly ([`max_min_share`]); it carries min(sum d, C_i). Each hop of
//! a chain is served independently: a flow throttled at one VIP still
//! requests its full rate at the next (the simulator does not couple hops).

use serde::Serialize;

use crate::trace::{positive, ParamError, Trace};

/// Pool parameters; defaults are Spotlight V-A.
#[derive(Debug, Clone, Serialize)]
pub struct PoolParams {
    /// DIPs per VIP.
    pub dips: usize,
    /// Large-to-small capacity ratio (2 = 1:2).
    pub capacity_ratio: f64,
    /// Requested traffic / capacity over the measurement window, per VIP.
    pub load: f64,
    /// Seconds after the first arrival before measuring; `None` = twice the
    /// trace's mean flow duration, at most half the trace span.
    pub warmup: Option<f64>,
}

impl Default for PoolParams {
    fn default() -> Self {
        PoolParams {
            dips: 20,
            capacity_ratio: 2.0,
            load: 1.05,
            warmup: None,
        }
    }
}

/// The time interval over which Omega is measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub start: f64,
    pub end: f64,
}

impl Window {
    pub fn len(&self) -> f64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Overlap of [a, b) with the window.
    pub fn overlap(&self, a: f64, b: f64) -> f64 {
        (b.min(self.end) - a.max(self.start)).max(0.0)
    }
}

/// Capacities of every DIP of every VIP, and the window they were scaled on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pool {
    /// `capacity[vip][dip]`, bytes/s.
    pub capacity: Vec<Vec<f64>>,
    /// Mean requested traffic of each VIP over the window, bytes/s.
    pub demand: Vec<f64>,
    pub window: Window,
}

impl PoolParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.dips == 0 || self.dips > 256 {
            return Err(ParamError {
                name: "dips",
                message: format!("must be in 1..=256, got {}", self.dips),
            });
        }
        positive("capacity_ratio", self.capacity_ratio)?;
        positive("load", self.load)?;
        if let Some(w) = self.warmup {
            if !(w.is_finite() && w >= 0.0) {
                return Err(ParamError {
                    name: "warmup",
                    message: format!("must be a finite number of seconds >= 0, got {w}"),
                });
            }
        }
        Ok(())
    }

    /// The measurement window for a trace: from warm-up to the last arrival.
    pub fn window(&self, trace: &Trace) -> Result<Window, ParamError> {
        let first = trace.flows.first().map_or(0.0, |f| f.start);
        let last = trace.flows.last().map_or(0.0, |f| f.start);
        let span = last - first;
        let warm = match self.warmup {
            Some(w) => w,
            None => {
                let n = trace.flows.len().max(1) as f64;
                let mean_d = trace.flows.iter().map(|f| f.duration).sum::<f64>() / n;
                (2.0 * mean_d).min(0.5 * span)
            }
        };
        let w = Window {
            start: first + warm,
            end: last,
        };
        if w.is_empty() {
            return Err(ParamError {
                name: "warmup",
                message: format!(
                    "the measurement window is empty: warm-up {warm:.3} s, trace span {span:.3} s"
                ),
            });
        }
        Ok(w)
    }

    /// Scales capacities to the trace.
    pub fn build(&self, trace: &Trace) -> Result<Pool, ParamError> {
        self.validate()?;
        let window = self.window(trace)?;
        let mut demand = vec![0.0; trace.vips];
        for f in &trace.flows {
            let v = f.rate * window.overlap(f.start, f.end());
            for j in f.chain.vips() {
                demand[j] += v;
            }
        }
        let units: f64 = (0..self.dips)
            .map(|i| if i % 2 == 0 { 1.0 } else { self.capacity_ratio })
            .sum();
        let capacity = demand
            .iter_mut()
            .enumerate()
            .map(|(j, d)| {
                *d /= window.len();
                if *d <= 0.0 {
                    return Err(ParamError {
                        name: "trace",
                        message: format!("VIP {j} has no traffic in the measurement window"),
                    });
                }
                let unit = *d / self.load / units;
                Ok((0..self.dips)
                    .map(|i| unit * if i % 2 == 0 { 1.0 } else { self.capacity_ratio })
                    .collect())
            })
            .collect::<Result<Vec<Vec<f64>>, _>>()?;
        Ok(Pool {
            capacity,
            demand,
            window,
        })
    }
}

/// Max-min fair sharing of `capacity` among requests `demands`: returns the
/// water level L (every flow gets min(d_k, L)) and the allocations. If the
/// requests fit, L is infinite and everybody gets what they ask. The total
/// allocated is always min(sum d, capacity), which is why the simulator can
/// account carried traffic per instance without tracking every flow's share.
pub fn max_min_share(demands: &[f64], capacity: f64) -> (f64, Vec<f64>) {
    let total: f64 = demands.iter().sum();
    if total <= capacity {
        return (f64::INFINITY, demands.to_vec());
    }
    let mut sorted: Vec<f64> = demands.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut left = capacity;
    let mut level = 0.0;
    for (k, &d) in sorted.iter().enumerate() {
        let share = left / (sorted.len() - k) as f64;
        if d >= share {
            level = share;
            break;
        }
        left -= d;
        level = d;
    }
    (level, demands.iter().map(|&d| d.min(level)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::SyntheticParams;

    #[test]
    fn max_min_gives_small_flows_all_and_splits_the_rest() {
        let (l, a) = max_min_share(&[1.0, 5.0, 10.0], 9.0);
        assert_eq!(l, 4.0);
        assert_eq!(a, vec![1.0, 4.0, 4.0]);
        let (l, a) = max_min_share(&[1.0, 2.0], 9.0);
        assert!(l.is_infinite());
        assert_eq!(a, vec![1.0, 2.0]);
        // Total carried is min(sum, capacity) for any input.
        let mut x = 7u64;
        for _ in 0..200 {
            let n = 1 + (x % 9) as usize;
            let d: Vec<f64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 40) as f64 / 1e3
                })
                .collect();
            let c = (x >> 44) as f64 / 1e3;
            let (_, a) = max_min_share(&d, c);
            let s: f64 = d.iter().sum();
            assert!((a.iter().sum::<f64>() - s.min(c)).abs() < 1e-6 * (1.0 + s));
        }
    }

    #[test]
    fn capacities_follow_type_ratio_and_load() {
        let t = SyntheticParams {
            flows: 20_000,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let p = PoolParams::default();
        let pool = p.build(&t).unwrap();
        assert_eq!(pool.capacity.len(), 4);
        for (j, caps) in pool.capacity.iter().enumerate() {
            assert_eq!(caps.len(), 20);
            assert!((caps[1] / caps[0] - 2.0).abs() < 1e-12);
            let c: f64 = caps.iter().sum();
            assert!((pool.demand[j] / c - 1.05).abs() < 1e-9);
        }
        assert!((pool.window.start - t.flows[0].start - 10.0).abs() < 1.0);
    }

    #[test]
    fn nonsense_pool_parameters_are_refused() {
        let t = SyntheticParams {
            flows: 100,
            ..Default::default()
        }
        .generate()
        .unwrap();
        for (p, name) in [
            (
                PoolParams {
                    load: -1.0,
                    ..Default::default()
                },
                "load",
            ),
            (
                PoolParams {
                    capacity_ratio: 0.0,
                    ..Default::default()
                },
                "capacity_ratio",
            ),
            (
                PoolParams {
                    dips: 0,
                    ..Default::default()
                },
                "dips",
            ),
            (
                PoolParams {
                    warmup: Some(-2.0),
                    ..Default::default()
                },
                "warmup",
            ),
            (
                PoolParams {
                    warmup: Some(1e6),
                    ..Default::default()
                },
                "warmup",
            ),
        ] {
            assert_eq!(p.build(&t).unwrap_err().name, name);
        }
    }
}
