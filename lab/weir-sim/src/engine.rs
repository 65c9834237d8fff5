//! The event loop: arrivals, departures and controller updates in time
//! order, with carried traffic integrated exactly between events.
//!
//! State per DIP is its requested traffic D_i (sum of the rates of the flows
//! it serves). It carries min(D_i, C_i) (max-min sharing, see
//! [`crate::model`]), and the controller's view of it is the available
//! capacity A_i = C_i - D_i, polled every update interval (A_i < 0 when the
//! DIP is overloaded). Each VIP has its own dispatcher from
//! [`weir_core::dispatch`]; a flow takes one dispatch decision per VIP of its
//! chain, with a per-VIP hash derived from its flow hash. The optimum
//! dispatcher is updated with the exact state right before every decision;
//! ECMP ignores updates. At t = 0 every dispatcher is updated with A = C.
//!
//! Omega over the window W = [w0, w1] (see `docs/src/simulator.md`):
//! Omega_j = integral over W of sum_i min(D_i, C_i) dt / (C_j |W|), and the
//! overall Omega is the same ratio summed over all VIPs.
//!
//! Cost: O(log n) per arrival and departure (a binary heap of departures),
//! O(DIPs) per update tick that precedes an arrival (ticks with no arrival
//! before the next tick are skipped: nobody reads them), and one dispatcher
//! update per VIP per used tick.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;
use weir_core::dispatch::{Dispatcher, Policy};
use weir_core::flow_hash::rehash;

use crate::model::Pool;
use crate::trace::{Trace, MAX_CHAIN};

/// The outcome of one simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    pub policy: String,
    /// Controller update interval in ms (informational for interval-free
    /// policies: ECMP, AWFD with m = 0, optimum).
    pub interval_ms: f64,
    /// Overall service utilization: carried / capacity.
    pub omega: f64,
    pub omega_per_vip: Vec<f64>,
    /// Requested traffic / capacity over the window (the load parameter).
    pub offered: f64,
    /// Carried / requested traffic.
    pub served: f64,
    /// Controller updates that reached a dispatcher.
    pub updates: u64,
    /// Arrivals + departures processed.
    pub events: u64,
}

/// The per-VIP hash of a flow for dispatch at VIP `vip`.
#[inline]
pub fn hop_hash(flow_hash: u32, vip: usize) -> u32 {
    rehash(flow_hash ^ (vip as u32).wrapping_mul(0x9e37_79b1))
}

/// Simulates `trace` on `pool` under `policy` with the given controller
/// update interval (seconds, > 0).
pub fn simulate(trace: &Trace, pool: &Pool, policy: Policy, interval: f64) -> RunResult {
    assert!(
        interval > 0.0 && interval.is_finite(),
        "interval must be > 0"
    );
    assert_eq!(
        pool.capacity.len(),
        trace.vips,
        "pool and trace disagree on VIPs"
    );
    let nv = trace.vips;
    let mut base = Vec::with_capacity(nv + 1);
    let mut cap = Vec::new();
    for caps in &pool.capacity {
        base.push(cap.len());
        cap.extend_from_slice(caps);
    }
    base.push(cap.len());
    let ndips = cap.len();
    let mut dem = vec![0.0f64; ndips];
    let mut count = vec![0u32; ndips];
    let mut carried = vec![0.0f64; nv];
    let mut offered = vec![0.0f64; nv];
    let mut acc_c = vec![0.0f64; nv];
    let mut acc_d = vec![0.0f64; nv];
    let cap_vip: Vec<f64> = pool.capacity.iter().map(|c| c.iter().sum()).collect();

    let mut disp: Vec<Box<dyn Dispatcher>> = pool
        .capacity
        .iter()
        .map(|c| {
            let mut d = policy.build(c.len());
            d.update(c);
            d
        })
        .collect();
    let instant = disp.first().is_some_and(|d| d.instantaneous());
    let ticking = !instant && !policy.interval_independent();
    let mut pending: Vec<Vec<f64>> = pool.capacity.clone();
    let mut dirty = vec![false; nv];

    let flows = &trace.flows;
    let mut assign: Vec<[u8; MAX_CHAIN]> = vec![[0; MAX_CHAIN]; flows.len()];
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(1024);
    let w = pool.window;
    let mut t_prev = f64::NEG_INFINITY;
    let mut next = 0usize;
    let mut tick: u64 = 1;
    let mut updates = 0u64;
    let mut events = 0u64;

    macro_rules! advance {
        ($t:expr) => {{
            let t: f64 = $t;
            let lo = t_prev.max(w.start);
            let hi = t.min(w.end);
            if hi > lo {
                let dt = hi - lo;
                for j in 0..nv {
                    acc_c[j] += carried[j] * dt;
                    acc_d[j] += offered[j] * dt;
                }
            }
            t_prev = t;
        }};
    }

    while next < flows.len() {
        let ta = flows[next].start;
        let td = heap
            .peek()
            .map_or(f64::INFINITY, |Reverse((bits, _))| f64::from_bits(*bits));
        let tt = if ticking {
            tick as f64 * interval
        } else {
            f64::INFINITY
        };
        if td <= tt && td <= ta {
            // Departure.
            let Reverse((bits, idx)) = heap.pop().expect("peeked");
            advance!(f64::from_bits(bits));
            events += 1;
            let f = &flows[idx as usize];
            for (h, j) in f.chain.vips().enumerate() {
                let g = base[j] + usize::from(assign[idx as usize][h]);
                let old = dem[g];
                count[g] -= 1;
                let new = if count[g] == 0 { 0.0 } else { old - f.rate };
                dem[g] = new;
                carried[j] += new.min(cap[g]) - old.min(cap[g]);
                offered[j] += new - old;
            }
        } else if tt <= ta {
            // Controller poll. Skip it if another poll comes before the next
            // arrival: no dispatch decision would see it.
            let following = (tick + 1) as f64 * interval;
            if ta >= following {
                tick = (tick + 1).max((ta / interval).floor() as u64);
                continue;
            }
            for j in 0..nv {
                let (b, e) = (base[j], base[j + 1]);
                for (a, g) in pending[j].iter_mut().zip(b..e) {
                    *a = cap[g] - dem[g];
                }
                dirty[j] = true;
            }
            tick += 1;
        } else {
            // Arrival.
            let idx = next;
            next += 1;
            let f = &flows[idx];
            advance!(f.start);
            events += 1;
            for (h, j) in f.chain.vips().enumerate() {
                let (b, e) = (base[j], base[j + 1]);
                if instant {
                    for (a, g) in pending[j].iter_mut().zip(b..e) {
                        *a = cap[g] - dem[g];
                    }
                    disp[j].update(&pending[j]);
                    updates += 1;
                } else if dirty[j] {
                    disp[j].update(&pending[j]);
                    dirty[j] = false;
                    updates += 1;
                }
                let i = disp[j]
                    .pick(hop_hash(f.hash, j))
                    .unwrap_or(0)
                    .min(e - b - 1);
                assign[idx][h] = i as u8;
                let g = b + i;
                let old = dem[g];
                let new = old + f.rate;
                dem[g] = new;
                count[g] += 1;
                carried[j] += new.min(cap[g]) - old.min(cap[g]);
                offered[j] += new - old;
            }
            heap.push(Reverse((f.end().to_bits(), idx as u32)));
        }
    }
    advance!(w.end);
    debug_assert!(t_prev >= w.end);

    let wl = w.len();
    let omega_per_vip: Vec<f64> = (0..nv).map(|j| acc_c[j] / (cap_vip[j] * wl)).collect();
    let total_c: f64 = acc_c.iter().sum();
    let total_d: f64 = acc_d.iter().sum();
    let total_cap: f64 = cap_vip.iter().sum::<f64>() * wl;
    RunResult {
        policy: policy.to_string(),
        interval_ms: interval * 1e3,
        omega: total_c / total_cap,
        omega_per_vip,
        offered: total_d / total_cap,
        served: if total_d > 0.0 {
            total_c / total_d
        } else {
            1.0
        },
        updates,
        events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PoolParams, Window};
    use crate::trace::{Chain, Flow, SyntheticParams};
    use weir_core::dispatch::MaxWeight;

    fn small() -> (Trace, Pool) {
        let t = SyntheticParams {
            flows: 20_000,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let p = PoolParams::default().build(&t).unwrap();
        (t, p)
    }

    #[test]
    fn hand_computed_two_dips() {
        // One VIP, DIPs of capacity 1 and 3; three flows all to DIP 1 under
        // LCF with no update in between (interval 100 s).
        let chain = Chain::new(&[0]).unwrap();
        let flow = |start, duration, rate| Flow {
            start,
            duration,
            rate,
            chain,
            hash: 0,
        };
        let trace = Trace {
            flows: vec![
                flow(0.0, 10.0, 2.0),
                flow(1.0, 10.0, 2.0),
                flow(2.0, 1.0, 2.0),
            ],
            vips: 1,
        };
        let pool = Pool {
            capacity: vec![vec![1.0, 3.0]],
            demand: vec![0.0],
            window: Window {
                start: 0.0,
                end: 2.0,
            },
        };
        let r = simulate(&trace, &pool, Policy::Lcf, 100.0);
        // [0,1): DIP1 carries 2; [1,2): min(4, 3) = 3. Omega = 5 / (4 * 2).
        assert!((r.omega - 5.0 / 8.0).abs() < 1e-12, "{r:?}");
        assert!((r.offered - 6.0 / 8.0).abs() < 1e-12);
        // The optimum: flow 1 to DIP 1 (A = 3 > 1), flow 2 to DIP 0 (tie
        // A = 1, 1 goes to the lowest index): [1,2) carries 2 + 1.
        let r = simulate(&trace, &pool, Policy::Optimum, 1.0);
        assert!((r.omega - 5.0 / 8.0).abs() < 1e-12, "{r:?}");
        // With a tie-free start the optimum strictly beats LCF.
        let pool2 = Pool {
            capacity: vec![vec![2.0, 3.0]],
            ..pool
        };
        let lcf = simulate(&trace, &pool2, Policy::Lcf, 100.0).omega;
        let opt = simulate(&trace, &pool2, Policy::Optimum, 1.0).omega;
        // LCF: both to DIP 1: 2 + 3 = 5; optimum: DIP 1 then DIP 0: 2 + 4.
        assert!((lcf - 5.0 / 10.0).abs() < 1e-12 && (opt - 6.0 / 10.0).abs() < 1e-12);
    }

    #[test]
    fn omega_is_bounded_and_deterministic() {
        let (t, p) = small();
        for pol in [
            Policy::Ecmp,
            Policy::Lcf,
            Policy::Weighted,
            Policy::Optimum,
            Policy::Awfd(MaxWeight::Finite(4)),
        ] {
            let a = simulate(&t, &p, pol, 0.1);
            let b = simulate(&t, &p, pol, 0.1);
            assert_eq!(a, b);
            assert!(a.omega > 0.3 && a.omega <= 1.0 + 1e-9, "{a:?}");
            assert!((a.offered - 1.05).abs() < 1e-6, "{a:?}");
            assert!(a.served <= 1.0 + 1e-9);
        }
    }

    #[test]
    fn awfd_m0_and_ecmp_agree_in_distribution() {
        let (t, p) = small();
        let e = simulate(&t, &p, Policy::Ecmp, 0.1);
        let a = simulate(&t, &p, Policy::Awfd(MaxWeight::Finite(0)), 0.1);
        assert!((e.omega - a.omega).abs() < 0.03, "{e:?} {a:?}");
    }

    #[test]
    fn load_aware_policies_beat_ecmp_and_lcf_degrades() {
        let (t, p) = small();
        let ecmp = simulate(&t, &p, Policy::Ecmp, 0.1).omega;
        let opt = simulate(&t, &p, Policy::Optimum, 0.1).omega;
        let awfd = simulate(&t, &p, Policy::Awfd(MaxWeight::Finite(4)), 0.1).omega;
        let lcf_fast = simulate(&t, &p, Policy::Lcf, 0.001).omega;
        let lcf_slow = simulate(&t, &p, Policy::Lcf, 2.0).omega;
        assert!(
            opt > ecmp && awfd > ecmp,
            "ecmp {ecmp} awfd {awfd} opt {opt}"
        );
        assert!(lcf_fast > lcf_slow, "lcf {lcf_fast} -> {lcf_slow}");
    }
}
