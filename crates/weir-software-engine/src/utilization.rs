//! The utilization of a busy-polling worker (HNLB, seed 000, section IV),
//! sans-IO: the worker reads its own clock (a cycle counter or nanoseconds,
//! any unit) and reports each poll here; nothing here reads a clock.
//!
//! A worker that busy-polls its queues is on the CPU 100% of the time at
//! any load, so the operating system's CPU utilization says nothing about
//! how much more traffic it can take. HNLB counts, over a window, for each
//! poll of a queue (one iteration of the loop):
//!
//! - `c_all`: cycles of all polls; `c_busy`: cycles of polls that received
//!   packets (a burst), including the work on those packets;
//! - `n_bursts`: polls that received packets; `n_pkts`: packets received;
//! - `b_max`: the maximum feasible burst size, by default the most packets
//!   one poll reads from a queue.
//!
//! and defines, with the paper's equation numbers:
//!
//! - (1) `U_c = c_busy / c_all` — [`Utilization::busy_fraction`]. It meets
//!   0 at no load and 1 at saturation, but overestimates in between: a
//!   poll that finds one packet counts as fully busy, and the more queues a
//!   worker polls, the less often a poll finds its queue empty.
//! - (2) `U_{c,b} = U_c * n_pkts / (n_bursts * b_max)` — `U_c` weighted by
//!   the mean burst fill ([`Utilization::burst_fill`]); this is
//!   [`Utilization::utilization`] for a worker with one queue.
//! - (3) several queues per worker: the paper observes that with more than
//!   one queue the mean burst never reaches `b_max` before packets are lost,
//!   and adjusts (2). The typeset equation is missing from our copy of the
//!   seed, so (3) here is our reconstruction, stated so it can be checked:
//!   `U = U_c * max_q n_pkts,q / (n_bursts,q * b_max)`. The worker loses
//!   packets first at the queue that comes back full first, so the burst
//!   fill that matters is the busiest queue's, not the mean over queues that
//!   are emptier (HNLB's default queue, which sees only first packets). With
//!   one queue, (3) is (2). As the paper notes for one connection, a worker
//!   whose traffic sits in one of several queues stays below 1: its other
//!   polls are empty, so `U_c < 1`. `b_max` may also be set to the mean
//!   burst measured at the loss onset, which makes (3) reach 1 there by
//!   definition, as the paper does.
//!
//! (2) is exact at both ends, but in between it is linear in the offered
//! rate only when the per-poll overhead dominates the per-packet cost: for
//! a worker whose poll costs `o` cycles plus `c` per packet, a window with
//! mean burst `m` reads `rate * (o + c * m) / b_max`, while the load is
//! `rate * (o + c * b_max) / b_max`. weir therefore also reports a
//! cost-model load, [`Utilization::load`] (not in the paper): the least
//! squares fit of `cycles = o + c * n` over the window's busy polls gives
//! the cost of a packet in a full burst, `o / b_max + c`, and the load is
//! the packets' cost at that price over all cycles: the offered rate over
//! the worker's capacity, linear by construction, 1 when every poll is full.
//!
//! The per-poll path ([`UtilizationMeter::record`]) only adds and
//! multiplies integers (about 3 ns): no allocation, no division.

use std::fmt;

/// Why a meter could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UtilizationError {
    /// `b_max` must be at least one packet.
    ZeroMaxBurst,
    /// A worker polls at least one queue.
    NoQueues,
}

impl fmt::Display for UtilizationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UtilizationError::ZeroMaxBurst => write!(
                f,
                "the maximum burst size must be at least 1 packet (use the worker's RX batch size)"
            ),
            UtilizationError::NoQueues => {
                write!(f, "a worker must poll at least one queue")
            }
        }
    }
}

impl std::error::Error for UtilizationError {}

/// Bursts and packets of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueBursts {
    /// The queue's index in the worker's list.
    pub queue: usize,
    pub bursts: u64,
    pub packets: u64,
}

impl QueueBursts {
    /// Whether this queue's mean burst is larger than `other`'s (exact
    /// integer comparison of packets / bursts; a queue with no burst is
    /// never the busier).
    fn fuller_than(&self, other: &QueueBursts) -> bool {
        if self.bursts == 0 {
            return false;
        }
        if other.bursts == 0 {
            return true;
        }
        u128::from(self.packets) * u128::from(other.bursts)
            > u128::from(other.packets) * u128::from(self.bursts)
    }
}

/// The fitted cost of a busy poll: `cycles = burst_cycles + packet_cycles * n`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CostModel {
    /// Fixed cycles of a poll that received packets.
    pub burst_cycles: f64,
    /// Cycles per packet received.
    pub packet_cycles: f64,
}

impl CostModel {
    /// Cycles per packet when every poll reads `max_burst` packets.
    pub fn full_burst_cycles_per_packet(&self, max_burst: u32) -> f64 {
        self.burst_cycles / f64::from(max_burst) + self.packet_cycles
    }
}

/// Least-squares sums of busy polls (n = packets, y = cycles).
#[derive(Debug, Clone, Copy, Default)]
struct Fit {
    polls: u64,
    n: u64,
    nn: u128,
    y: u128,
    ny: u128,
}

impl Fit {
    #[inline]
    fn add(&mut self, packets: u64, cycles: u64) {
        self.polls += 1;
        self.n += packets;
        self.nn += u128::from(packets) * u128::from(packets);
        self.y += u128::from(cycles);
        self.ny += u128::from(packets) * u128::from(cycles);
    }

    /// The fitted line; `None` unless at least two burst sizes were seen and
    /// both costs come out non-negative.
    fn model(&self) -> Option<CostModel> {
        let k = i128::from(self.polls);
        let n = i128::from(self.n);
        let nn = i128::try_from(self.nn).ok()?;
        let y = i128::try_from(self.y).ok()?;
        let ny = i128::try_from(self.ny).ok()?;
        let den = k.checked_mul(nn)?.checked_sub(n.checked_mul(n)?)?;
        if den <= 0 {
            return None;
        }
        let num = k.checked_mul(ny)?.checked_sub(n.checked_mul(y)?)?;
        let packet_cycles = num as f64 / den as f64;
        let burst_cycles = (y as f64 - packet_cycles * n as f64) / k as f64;
        (packet_cycles >= 0.0 && burst_cycles >= 0.0).then_some(CostModel {
            burst_cycles,
            packet_cycles,
        })
    }

    /// Halves the weight of the past, so a fit survives windows that see
    /// one burst size only (idle, or saturated).
    fn decay(&mut self) {
        self.polls >>= 1;
        self.n >>= 1;
        self.nn >>= 1;
        self.y >>= 1;
        self.ny >>= 1;
    }
}

/// One window of a worker: the counts and the metrics derived from them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Utilization {
    /// `b_max` of equations (2) and (3).
    pub max_burst: u32,
    /// `c_all`: cycles of all polls.
    pub cycles: u64,
    /// `c_busy`: cycles of polls that received packets.
    pub busy_cycles: u64,
    /// Polls (loop iterations), empty or not.
    pub polls: u64,
    /// `n_bursts`: polls that received packets.
    pub bursts: u64,
    /// `n_pkts`: packets received.
    pub packets: u64,
    /// The queue with the largest mean burst (queue 0 if none had a burst).
    pub busiest_queue: QueueBursts,
    /// The fitted poll cost behind [`Utilization::load`], if known.
    pub cost: Option<CostModel>,
}

impl Utilization {
    /// Equation (1), `U_c = c_busy / c_all`; 0 for an empty window.
    pub fn busy_fraction(&self) -> f64 {
        ratio(self.busy_cycles, self.cycles)
    }

    /// Mean packets per burst, `n_pkts / n_bursts`.
    pub fn mean_burst(&self) -> f64 {
        ratio(self.packets, self.bursts)
    }

    /// The weight of equation (2): the mean burst over `b_max`.
    pub fn burst_fill(&self) -> f64 {
        self.mean_burst() / f64::from(self.max_burst)
    }

    /// The weight of equation (3): the busiest queue's mean burst over
    /// `b_max` (equal to [`Utilization::burst_fill`] for one queue).
    pub fn busiest_queue_fill(&self) -> f64 {
        ratio(self.busiest_queue.packets, self.busiest_queue.bursts) / f64::from(self.max_burst)
    }

    /// HNLB's utilization: equation (2) for a worker with one queue, (3)
    /// for several.
    pub fn utilization(&self) -> f64 {
        self.busy_fraction() * self.busiest_queue_fill()
    }

    /// The cost-model load (weir's, see the module docs): the packets' cost
    /// at the full-burst price over all cycles: 0 with no packet. When every burst was full,
    /// that cost is `c_busy` itself, so the load is (1). Otherwise `None`
    /// until the worker has seen two burst sizes (until then only (2) and
    /// (3) are available).
    pub fn load(&self) -> Option<f64> {
        if self.packets == 0 {
            return Some(0.0);
        }
        if self.packets >= self.bursts * u64::from(self.max_burst) {
            return Some(self.busy_fraction());
        }
        let cost = self.cost?;
        Some(
            self.packets as f64 * cost.full_burst_cycles_per_packet(self.max_burst)
                / self.cycles as f64,
        )
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The per-worker accumulator. Call [`UtilizationMeter::record`] once per
/// poll and [`UtilizationMeter::take`] once per reporting window.
#[derive(Debug, Clone)]
pub struct UtilizationMeter {
    max_burst: u32,
    cycles: u64,
    busy_cycles: u64,
    polls: u64,
    queues: Box<[QueueBursts]>,
    fit: Fit,
}

impl UtilizationMeter {
    /// A meter for a worker that polls `queues` queues and reads at most
    /// `max_burst` packets per poll (or whose `b_max` was calibrated).
    pub fn new(max_burst: u32, queues: usize) -> Result<UtilizationMeter, UtilizationError> {
        if max_burst == 0 {
            return Err(UtilizationError::ZeroMaxBurst);
        }
        if queues == 0 {
            return Err(UtilizationError::NoQueues);
        }
        Ok(UtilizationMeter {
            max_burst,
            cycles: 0,
            busy_cycles: 0,
            polls: 0,
            queues: (0..queues)
                .map(|queue| QueueBursts {
                    queue,
                    ..QueueBursts::default()
                })
                .collect(),
            fit: Fit::default(),
        })
    }

    pub fn max_burst(&self) -> u32 {
        self.max_burst
    }

    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// One poll of queue `queue` (an index below [`UtilizationMeter::queues`];
    /// panics otherwise) that took `cycles` (measured from the start of this
    /// poll to the start of the next, so the work on its packets and any
    /// wait count) and received `packets`. Record every poll, empty ones
    /// too: they are the idle time.
    #[inline]
    pub fn record(&mut self, cycles: u64, packets: u32, queue: usize) {
        let q = &mut self.queues[queue];
        self.cycles += cycles;
        self.polls += 1;
        if packets > 0 {
            q.bursts += 1;
            q.packets += u64::from(packets);
            self.busy_cycles += cycles;
            self.fit.add(u64::from(packets), cycles);
        }
    }

    /// The window so far, without resetting it.
    pub fn snapshot(&self) -> Utilization {
        let mut busiest = self.queues[0];
        let (mut bursts, mut packets) = (0, 0);
        for q in self.queues.iter() {
            bursts += q.bursts;
            packets += q.packets;
            if q.fuller_than(&busiest) {
                busiest = *q;
            }
        }
        Utilization {
            max_burst: self.max_burst,
            cycles: self.cycles,
            busy_cycles: self.busy_cycles,
            polls: self.polls,
            bursts,
            packets,
            busiest_queue: busiest,
            cost: self.fit.model(),
        }
    }

    /// The window so far, and a new window starts. The cost fit carries
    /// over at half weight per window.
    pub fn take(&mut self) -> Utilization {
        let u = self.snapshot();
        self.cycles = 0;
        self.busy_cycles = 0;
        self.polls = 0;
        for q in self.queues.iter_mut() {
            q.bursts = 0;
            q.packets = 0;
        }
        self.fit.decay();
        u
    }
}

/// A model busy-polling worker on a fake clock, for tests: a poll that
/// finds its queue empty costs `empty_poll` cycles; one that reads `n`
/// packets costs `burst + n * packet`. Packets arrive (Poisson or evenly
/// spaced) at a given rate, are spread over the queues by weight, wait in
/// rings of `ring` descriptors (dropped when full), and the worker polls
/// the queues round robin, reading at most `max_burst` per poll. This is
/// the worker HNLB's Fig. 7 assumes: a fixed per-packet cost plus a fixed
/// per-poll overhead.
#[cfg(test)]
pub(crate) mod model {
    use super::{Utilization, UtilizationMeter};
    use weir_core::splitmix::SplitMix;

    #[derive(Debug, Clone)]
    pub struct ModelWorker {
        pub empty_poll: u64,
        pub burst: u64,
        pub packet: u64,
        pub max_burst: u32,
        pub ring: u32,
        /// Relative share of the arrivals per queue.
        pub queue_weights: Vec<u32>,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Arrivals {
        Poisson,
        Even,
    }

    #[derive(Debug, Clone)]
    pub struct ModelRun {
        pub window: Utilization,
        pub offered: u64,
        pub dropped: u64,
    }

    impl ModelWorker {
        /// One queue, `ring` 4096.
        pub fn new(empty_poll: u64, burst: u64, packet: u64, max_burst: u32) -> ModelWorker {
            ModelWorker {
                empty_poll,
                burst,
                packet,
                max_burst,
                ring: 4096,
                queue_weights: vec![1],
            }
        }

        /// The most packets per cycle it can take with one queue: every
        /// poll reads a full burst.
        pub fn capacity(&self) -> f64 {
            f64::from(self.max_burst)
                / (self.burst + u64::from(self.max_burst) * self.packet) as f64
        }

        /// Runs for `cycles` at `rate` packets per cycle; the window is
        /// everything the meter saw.
        pub fn run(&self, rate: f64, cycles: u64, arrivals: Arrivals, seed: u64) -> ModelRun {
            let queues = self.queue_weights.len();
            let mut meter = UtilizationMeter::new(self.max_burst, queues).expect("valid model");
            let total_weight: u64 = self.queue_weights.iter().map(|&w| u64::from(w)).sum();
            let mut rng = SplitMix(seed);
            let next_gap = |rng: &mut SplitMix| match arrivals {
                Arrivals::Even => 1.0 / rate,
                Arrivals::Poisson => {
                    // 1 - u in (0, 1]: ln is finite
                    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    -(1.0 - u).ln() / rate
                }
            };
            let mut backlog = vec![0u32; queues];
            let (mut offered, mut dropped) = (0u64, 0u64);
            let mut next_arrival = if rate > 0.0 {
                next_gap(&mut rng)
            } else {
                f64::INFINITY
            };
            let (mut now, mut turn) = (0u64, 0usize);
            while now < cycles {
                while next_arrival <= now as f64 {
                    offered += 1;
                    let mut pick = rng.below(total_weight);
                    let q = self
                        .queue_weights
                        .iter()
                        .position(|&w| {
                            let hit = pick < u64::from(w);
                            pick = pick.saturating_sub(u64::from(w));
                            hit
                        })
                        .expect("weights sum to the total");
                    if backlog[q] < self.ring {
                        backlog[q] += 1;
                    } else {
                        dropped += 1;
                    }
                    next_arrival += next_gap(&mut rng);
                }
                let q = turn % queues;
                turn += 1;
                let n = backlog[q].min(self.max_burst);
                backlog[q] -= n;
                let cost = if n == 0 {
                    self.empty_poll
                } else {
                    self.burst + u64::from(n) * self.packet
                };
                meter.record(cost, n, q);
                now += cost;
            }
            ModelRun {
                window: meter.take(),
                offered,
                dropped,
            }
        }
    }

    /// R² of the least-squares line through `(x, y)`.
    pub fn r_squared(points: &[(f64, f64)]) -> f64 {
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
        sxy * sxy / (sxx * syy)
    }
}

#[cfg(test)]
mod tests {
    use super::model::{r_squared, Arrivals, ModelWorker};
    use super::*;

    const WINDOW: u64 = 4_000_000;

    /// Workers whose per-packet cost dominates, whose poll overhead
    /// dominates, and AF_XDP-like ones (an expensive TX kick per burst,
    /// a cheap empty poll).
    fn workers() -> Vec<ModelWorker> {
        vec![
            ModelWorker::new(100, 100, 20, 32),
            ModelWorker::new(50, 50, 50, 32),
            ModelWorker::new(40, 1000, 50, 64),
            ModelWorker::new(2000, 2000, 10, 32),
        ]
    }

    /// (offered load as a fraction of capacity, metric) below saturation.
    fn sweep(w: &ModelWorker, metric: impl Fn(&Utilization) -> f64) -> Vec<(f64, f64)> {
        (1..20u32)
            .map(|i| {
                let x = f64::from(i) / 20.0;
                let run = w.run(x * w.capacity(), WINDOW, Arrivals::Poisson, i.into());
                assert_eq!(run.dropped, 0, "below saturation nothing is lost");
                (x, metric(&run.window))
            })
            .collect()
    }

    #[test]
    fn refuses_a_zero_burst_or_no_queue() {
        assert_eq!(
            UtilizationMeter::new(0, 1).unwrap_err(),
            UtilizationError::ZeroMaxBurst
        );
        assert_eq!(
            UtilizationMeter::new(32, 0).unwrap_err(),
            UtilizationError::NoQueues
        );
        assert!(UtilizationError::ZeroMaxBurst
            .to_string()
            .contains("batch size"));
    }

    #[test]
    fn an_idle_worker_reads_zero() {
        let mut m = UtilizationMeter::new(32, 2).unwrap();
        for i in 0..10_000 {
            m.record(40, 0, i % 2);
        }
        let u = m.take();
        assert_eq!(
            (u.cycles, u.polls, u.bursts, u.packets),
            (400_000, 10_000, 0, 0)
        );
        assert_eq!(u.busy_fraction(), 0.0);
        assert_eq!(u.utilization(), 0.0);
        assert_eq!(u.load(), Some(0.0));
        assert_eq!(u.cost, None, "no burst, no cost fit");
        // the model agrees
        let idle = ModelWorker::new(40, 500, 30, 32).run(0.0, WINDOW, Arrivals::Poisson, 1);
        assert_eq!(idle.window.utilization(), 0.0);
    }

    #[test]
    fn a_saturated_worker_with_full_bursts_reads_one() {
        let mut m = UtilizationMeter::new(32, 1).unwrap();
        for _ in 0..1000 {
            m.record(800, 32, 0);
        }
        let u = m.snapshot();
        assert_eq!(u.busy_fraction(), 1.0);
        assert_eq!(u.burst_fill(), 1.0);
        assert_eq!(u.utilization(), 1.0);
        // the model, offered more than it can take, reads one and drops
        for w in workers() {
            let run = w.run(2.0 * w.capacity(), WINDOW, Arrivals::Poisson, 7);
            let lost = run.dropped as f64 / run.offered as f64;
            assert!((0.4..0.5).contains(&lost), "{w:?}: lost {lost}");
            // (a few partial bursts while the backlog builds up)
            let u = run.window.utilization();
            assert!(u > 0.99 && u <= 1.0, "{w:?}: {u}");
            let load = run.window.load().expect("full bursts or two burst sizes");
            assert!((load - 1.0).abs() < 0.02, "{w:?}: {load}");
        }
    }

    #[test]
    fn the_equations_on_hand_made_polls() {
        let mut m = UtilizationMeter::new(32, 1).unwrap();
        m.record(100, 0, 0); // empty
        m.record(300, 8, 0); // busy: 100 + 25 * 8
        m.record(500, 16, 0); // busy: 100 + 25 * 16
        let u = m.take();
        assert_eq!(u.busy_fraction(), 800.0 / 900.0); // (1)
        assert_eq!(u.mean_burst(), 12.0);
        assert_eq!(u.utilization(), 800.0 / 900.0 * 12.0 / 32.0); // (2)
        let cost = u.cost.unwrap();
        assert!((cost.packet_cycles - 25.0).abs() < 1e-9);
        assert!((cost.burst_cycles - 100.0).abs() < 1e-9);
        // 24 packets at 100 / 32 + 25 cycles each, over 900 cycles
        assert!((u.load().unwrap() - 24.0 * (100.0 / 32.0 + 25.0) / 900.0).abs() < 1e-9);
        // take() starts a new window; the fit carries over
        let next = m.take();
        assert_eq!(
            (next.cycles, next.packets, next.busiest_queue.bursts),
            (0, 0, 0)
        );
        assert_eq!(next.utilization(), 0.0);
        assert_eq!(next.load(), Some(0.0));
        assert!(next.cost.is_some());
    }

    #[test]
    fn several_queues_take_the_busiest_queue_fill() {
        // Equation (3): queue 1 comes back full, queue 0 (first packets
        // only) with one packet a poll.
        let mut m = UtilizationMeter::new(32, 3).unwrap();
        for _ in 0..100 {
            m.record(130, 1, 0);
            m.record(900, 32, 1);
            m.record(20, 0, 2);
        }
        let u = m.take();
        assert_eq!(u.busiest_queue.queue, 1);
        assert_eq!(u.busiest_queue_fill(), 1.0);
        assert!(
            (u.burst_fill() - 16.5 / 32.0).abs() < 1e-12,
            "(2) mixes the queues"
        );
        assert_eq!(u.busy_fraction(), 1030.0 / 1050.0);
        assert_eq!(u.utilization(), u.busy_fraction());
    }

    #[test]
    fn one_loaded_queue_of_several_stays_below_one_at_saturation() {
        // The paper's remark on one connection: the other queues' polls are
        // empty, so U_c < 1 even while the loaded queue drops packets.
        let w = ModelWorker {
            queue_weights: vec![1, 0, 0, 0],
            ..ModelWorker::new(100, 100, 20, 32)
        };
        let run = w.run(1.5 * w.capacity(), WINDOW, Arrivals::Even, 3);
        assert!(run.dropped > 0);
        let u = &run.window;
        assert_eq!(u.busiest_queue.queue, 0);
        assert!(u.busiest_queue_fill() > 0.999);
        let expected = (100.0 + 32.0 * 20.0) / (100.0 + 32.0 * 20.0 + 3.0 * 100.0);
        assert!(
            (u.utilization() - expected).abs() < 1e-3,
            "{}",
            u.utilization()
        );
    }

    #[test]
    fn the_busy_fraction_alone_reads_near_full_at_moderate_load() {
        // The naive reading of a busy-polling worker: its CPU time is 100%
        // at any load, and the cycle count of busy polls (1) is not much
        // better once a burst costs more than the gap between packets. The
        // burst-weighted metric (2) and the cost-model load do track it.
        let w = ModelWorker::new(40, 1000, 50, 64);
        let run = w.run(0.3 * w.capacity(), WINDOW, Arrivals::Poisson, 11);
        let u = &run.window;
        assert!(u.busy_fraction() > 0.75, "U_c {}", u.busy_fraction());
        assert!(u.utilization() < 0.2, "U_c,b {}", u.utilization());
        let load = u.load().unwrap();
        assert!((load - 0.3).abs() < 0.02, "load {load}");
    }

    #[test]
    fn the_load_is_linear_in_offered_rate_and_one_at_saturation() {
        for w in workers() {
            let points = sweep(&w, |u| u.load().expect("two burst sizes seen"));
            let r2 = r_squared(&points);
            assert!(r2 >= 0.98, "{w:?}: R² {r2}");
            for (x, y) in &points {
                assert!((y - x).abs() < 0.03, "{w:?}: load {y} at {x}");
            }
            // the saturation point: offered exactly the capacity
            let at = w.run(w.capacity(), WINDOW, Arrivals::Poisson, 99).window;
            let load = at.load().unwrap();
            assert!((0.9..=1.1).contains(&load), "{w:?}: {load}");
        }
    }

    #[test]
    fn equation_two_is_linear_when_poll_overhead_dominates() {
        // Fig. 7's claim holds for a worker whose polls cost far more than
        // their packets: the mean burst then grows in proportion to the rate.
        let w = ModelWorker::new(2000, 2000, 10, 32);
        let points = sweep(&w, Utilization::utilization);
        let r2 = r_squared(&points);
        assert!(r2 >= 0.98, "R² {r2}");
        let at = w.run(w.capacity(), WINDOW, Arrivals::Even, 5).window;
        assert!(
            (0.9..=1.1).contains(&at.utilization()),
            "{}",
            at.utilization()
        );
    }

    #[test]
    fn equation_two_bends_when_packet_cost_dominates() {
        // Where per-packet work dominates, bursts stay small until close to
        // saturation, and (2) reads far below the load in between (the
        // reason weir also reports the cost-model load).
        let w = ModelWorker::new(50, 50, 50, 32);
        let points = sweep(&w, Utilization::utilization);
        assert!(r_squared(&points) < 0.9, "R² {}", r_squared(&points));
        let (x, y) = points[9];
        assert_eq!(x, 0.5);
        assert!(y < 0.1, "U_c,b {y} at half load");
    }
}
