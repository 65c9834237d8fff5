//! Adaptive distribution (TBTD, seed 003), sans-IO: flow-based until a
//! bucket of flows carries more than one worker can, then that bucket is
//! spread over as many workers as it needs, closest in the cache hierarchy
//! first, and gathered back when it calms down.
//!
//! Our copy of seed 003 ends after its introduction, so the rules below
//! are weir's reading of its idea, stated so they can be checked:
//!
//! - **Inputs**, once per interval, as values: packets per bucket since
//!   the last decision ([`Adaptive::observe`]; in weir the XDP program's
//!   per-CPU bucket counters, read before any worker could drop them, so
//!   they are the offered load), and each worker's window
//!   ([`Adaptive::report`]: packets, and the load of
//!   [`crate::utilization`], HNLB's busy-poll metric).
//! - **Capacity**: what one worker carries, `packets / window / load`,
//!   averaged over the workers (each smoothed over windows, and only from
//!   windows loaded enough to say something). Until one is known, nothing
//!   is decided.
//! - **Spread**: a bucket at rate `r` needs `ceil(r / (spread_load *
//!   capacity))` workers. When that exceeds its workers, it gets them at
//!   once: its home first, then the workers that are not busy (projected
//!   load below `spread_load`), closest to the home's CPU in the cache
//!   hierarchy ([`crate::topology`]), least loaded, lowest index.
//! - **Calm**: a spread bucket is narrowed only to the fewest workers that
//!   would each run at most `calm_load`, and only after `calm_intervals`
//!   decisions in a row agree (to the largest of their counts). The band
//!   between `calm_load` and `spread_load`, and the wait, keep a flow near
//!   a threshold from being moved every interval. Narrowing keeps the
//!   first workers, so the home is always kept.
//! - **Churn**: one decision changes at most `max_changes` buckets,
//!   widening the heaviest first; the rest wait for the next decision.
//!
//! [`Adaptive::decide`] returns the buckets whose worker set changed, with
//! the new set: the entries to write into the data plane's per-bucket
//! table (a set of one worker is the bucket's home: no override). The
//! owner is one control thread; nothing here reads a clock.

use std::collections::BTreeMap;

use super::{home_worker, DistributionConfig, DistributionError, WorkerId, WorkerSet, MAX_SPREAD};
use crate::topology::Topology;

/// Adaptive mode's thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// Spread a bucket when it would load its workers above this fraction
    /// of a worker's capacity, in (0, 1].
    pub spread_load: f64,
    /// Narrow a spread bucket when fewer workers would each run at most
    /// this fraction, in (0, `spread_load`).
    pub calm_load: f64,
    /// Decisions in a row that must find a bucket calm before it narrows.
    pub calm_intervals: u32,
    /// Workers one bucket is spread over at most, from 2 to the workers
    /// (and [`MAX_SPREAD`]); `None` for all of them.
    pub max_spread: Option<u16>,
    /// Buckets one decision changes at most.
    pub max_changes: usize,
    /// A worker window below this load says too little about capacity.
    pub min_sample_load: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            spread_load: 0.9,
            calm_load: 0.5,
            calm_intervals: 5,
            max_spread: None,
            max_changes: 8,
            min_sample_load: 0.05,
        }
    }
}

impl AdaptiveConfig {
    /// Refuses thresholds that cannot work with `workers` workers.
    pub fn validate(&self, workers: u16) -> Result<(), DistributionError> {
        let fraction = |field: &'static str, value: f64| {
            if value > 0.0 && value <= 1.0 {
                Ok(())
            } else {
                Err(DistributionError::Load { field, value })
            }
        };
        fraction("spread_load", self.spread_load)?;
        fraction("calm_load", self.calm_load)?;
        fraction("min_sample_load", self.min_sample_load)?;
        if self.calm_load >= self.spread_load {
            return Err(DistributionError::CalmAboveSpread {
                calm_load: self.calm_load,
                spread_load: self.spread_load,
            });
        }
        if self.calm_intervals == 0 {
            return Err(DistributionError::Zero("calm_intervals"));
        }
        if self.max_changes == 0 {
            return Err(DistributionError::Zero("max_changes"));
        }
        if let Some(max_spread) = self.max_spread {
            if max_spread < 2 || max_spread > workers || usize::from(max_spread) > MAX_SPREAD {
                return Err(DistributionError::MaxSpread {
                    max_spread,
                    workers,
                });
            }
        }
        Ok(())
    }
}

/// One worker's window, from its utilization meter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerSample {
    /// Packets it received in the window.
    pub packets: u64,
    /// Its load over the window, 0 (idle) to 1 (saturated):
    /// [`crate::utilization::Utilization::load`], or `utilization()`
    /// until the load is known.
    pub load: f64,
    /// The window's length in nanoseconds.
    pub window_ns: u64,
}

/// A bucket whose workers changed: write `workers` into the data plane's
/// entry for `bucket` (one worker: the bucket is back on its home).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub bucket: u32,
    pub workers: WorkerSet,
}

/// Counters for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct AdaptiveStats {
    /// Decisions taken.
    pub decisions: u64,
    /// Buckets spread now.
    pub spread: u64,
    /// Times a bucket got more workers.
    pub widened: u64,
    /// Times a bucket gave workers back.
    pub narrowed: u64,
    /// Changes put off to a later decision by `max_changes`.
    pub deferred: u64,
    /// What one worker carries, packets per second (`None`: not known yet).
    pub capacity_pps: Option<f64>,
}

/// A spread bucket.
#[derive(Debug, Clone, Copy)]
struct Spread {
    set: WorkerSet,
    /// Decisions in a row that found it calm.
    calm: u32,
    /// The most workers any of those decisions wanted.
    calm_to: usize,
}

/// The adaptive decision for one software tier.
#[derive(Debug, Clone)]
pub struct Adaptive {
    cfg: AdaptiveConfig,
    workers: u16,
    max_spread: usize,
    cpus: Vec<u32>,
    topology: Topology,
    /// Packets per bucket since the last decision.
    counts: Box<[u64]>,
    spread: BTreeMap<u32, Spread>,
    /// Each worker's smoothed capacity (packets per second).
    capacity: Vec<Option<f64>>,
    /// Each worker's last reported load.
    load: Vec<f64>,
    last_ns: u64,
    stats: AdaptiveStats,
}

impl Adaptive {
    /// The decision for `dist` (its `adaptive` thresholds), whose worker
    /// `i` runs on CPU `worker_cpus[i]`, on a machine of `topology`
    /// ([`Topology::flat`] if unknown). `now_ns` starts the first interval.
    pub fn new(
        dist: &DistributionConfig,
        worker_cpus: &[u32],
        topology: Topology,
        now_ns: u64,
    ) -> Result<Adaptive, DistributionError> {
        dist.validate()?;
        dist.adaptive.validate(dist.workers)?;
        if worker_cpus.len() != usize::from(dist.workers) {
            return Err(DistributionError::WorkerCpus {
                given: worker_cpus.len(),
                workers: dist.workers,
            });
        }
        let workers = usize::from(dist.workers);
        Ok(Adaptive {
            max_spread: dist
                .adaptive
                .max_spread
                .map_or(workers.min(MAX_SPREAD), usize::from),
            cfg: dist.adaptive.clone(),
            workers: dist.workers,
            cpus: worker_cpus.to_vec(),
            topology,
            counts: vec![0; dist.buckets as usize].into_boxed_slice(),
            spread: BTreeMap::new(),
            capacity: vec![None; workers],
            load: vec![0.0; workers],
            last_ns: now_ns,
            stats: AdaptiveStats::default(),
        })
    }

    pub fn stats(&self) -> AdaptiveStats {
        AdaptiveStats {
            spread: self.spread.len() as u64,
            capacity_pps: self.capacity_pps(),
            ..self.stats
        }
    }

    /// `packets` more packets of `bucket` (taken modulo the buckets) since
    /// the last decision: deltas, not running totals.
    pub fn observe(&mut self, bucket: u32, packets: u64) {
        let i = bucket as usize & (self.counts.len() - 1);
        self.counts[i] = self.counts[i].saturating_add(packets);
    }

    /// Worker `worker`'s latest window. A window with no time, a load that
    /// is not a number, or an unknown worker is ignored.
    pub fn report(&mut self, worker: WorkerId, sample: WorkerSample) {
        let w = usize::from(worker);
        if w >= self.load.len() || sample.window_ns == 0 || !sample.load.is_finite() {
            return;
        }
        let load = sample.load.max(0.0);
        self.load[w] = load;
        if load < self.cfg.min_sample_load || sample.packets == 0 {
            return;
        }
        let pps = sample.packets as f64 * 1e9 / sample.window_ns as f64 / load;
        // Half the past, half the new window: capacity moves with the work
        // per packet and with what else runs on the CPU.
        self.capacity[w] = Some(self.capacity[w].map_or(pps, |c| (c + pps) / 2.0));
    }

    /// What one worker carries (the mean over the workers that have
    /// reported a loaded window), packets per second.
    pub fn capacity_pps(&self) -> Option<f64> {
        let (sum, known) = self
            .capacity
            .iter()
            .flatten()
            .fold((0.0, 0u32), |(sum, n), c| (sum + c, n + 1));
        (known > 0).then(|| sum / f64::from(known))
    }

    /// The workers of `bucket` now.
    pub fn workers_of(&self, bucket: u32) -> WorkerSet {
        self.spread.get(&bucket).map_or_else(
            || WorkerSet::one(home_worker(bucket, self.workers)),
            |s| s.set,
        )
    }

    /// Ends the interval at `now_ns`: decides from its counts which buckets
    /// widen or narrow, and returns those changes (at most `max_changes`).
    pub fn decide(&mut self, now_ns: u64) -> Vec<Change> {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        if elapsed == 0 {
            return Vec::new();
        }
        self.last_ns = now_ns;
        self.stats.decisions += 1;
        let mut counts = std::mem::take(&mut self.counts);
        let changes = self.decide_on(&counts, elapsed);
        counts.fill(0);
        self.counts = counts;
        changes
    }

    /// [`Adaptive::decide`] on an interval of `elapsed` ns and its counts.
    fn decide_on(&mut self, counts: &[u64], elapsed: u64) -> Vec<Change> {
        let Some(capacity) = self.capacity_pps() else {
            return Vec::new();
        };
        let rate = |bucket: u32| counts[bucket as usize] as f64 * 1e9 / elapsed as f64;

        // (rate, bucket, workers) to widen; (bucket, workers) to narrow
        let mut widen: Vec<(f64, u32, usize)> = Vec::new();
        let mut narrow: Vec<(u32, usize)> = Vec::new();
        for (b, &count) in counts.iter().enumerate() {
            let b = b as u32;
            if count > 0 && !self.spread.contains_key(&b) {
                let need = needed(rate(b), self.cfg.spread_load * capacity, self.max_spread);
                if need > 1 {
                    widen.push((rate(b), b, need));
                }
            }
        }
        for (&b, s) in self.spread.iter_mut() {
            let r = rate(b);
            let have = s.set.as_slice().len();
            let up = needed(r, self.cfg.spread_load * capacity, self.max_spread);
            if up > have {
                s.calm = 0;
                widen.push((r, b, up));
                continue;
            }
            let down = needed(r, self.cfg.calm_load * capacity, self.max_spread);
            if down >= have {
                s.calm = 0;
                continue;
            }
            s.calm_to = if s.calm == 0 {
                down
            } else {
                s.calm_to.max(down)
            };
            s.calm += 1;
            if s.calm >= self.cfg.calm_intervals {
                narrow.push((b, s.calm_to));
            }
        }
        widen.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

        let mut budget = self.cfg.max_changes;
        let mut changes = Vec::new();
        let mut projected = self.load.clone();
        for (r, b, need) in widen {
            if budget == 0 {
                self.stats.deferred += 1;
                continue;
            }
            budget -= 1;
            let set = self.widened(b, need, r / capacity, &mut projected);
            self.spread.insert(
                b,
                Spread {
                    set,
                    calm: 0,
                    calm_to: 0,
                },
            );
            self.stats.widened += 1;
            changes.push(Change {
                bucket: b,
                workers: set,
            });
        }
        for (b, keep) in narrow {
            if budget == 0 {
                self.stats.deferred += 1;
                continue;
            }
            budget -= 1;
            let s = self.spread.get_mut(&b).expect("narrowing a spread bucket");
            s.set.truncate(keep);
            s.calm = 0;
            let set = s.set;
            if !set.is_spread() {
                self.spread.remove(&b);
            }
            self.stats.narrowed += 1;
            changes.push(Change {
                bucket: b,
                workers: set,
            });
        }
        changes
    }

    /// `bucket`'s set grown to `need` workers. `share` is its rate in
    /// workers' capacities; `projected` (each worker's load) moves with it.
    fn widened(&self, bucket: u32, need: usize, share: f64, projected: &mut [f64]) -> WorkerSet {
        let mut set = self.workers_of(bucket);
        let have = set.as_slice().len();
        for &w in set.as_slice() {
            projected[usize::from(w)] -= share / have as f64 - share / need as f64;
        }
        let home_cpu = self.cpus[usize::from(set.home())];
        let mut candidates: Vec<WorkerId> =
            (0..self.workers).filter(|&w| !set.contains(w)).collect();
        // Not busy, then closest, then least loaded, then lowest index.
        let key = |w: WorkerId| {
            let load = projected[usize::from(w)];
            let busy = load >= self.cfg.spread_load;
            let closeness = self.topology.closeness(home_cpu, self.cpus[usize::from(w)]);
            (busy, closeness, load)
        };
        candidates.sort_by(|&a, &b| {
            let ((busy_a, close_a, load_a), (busy_b, close_b, load_b)) = (key(a), key(b));
            (busy_a, close_a)
                .cmp(&(busy_b, close_b))
                .then(load_a.total_cmp(&load_b))
                .then(a.cmp(&b))
        });
        for &w in candidates.iter().take(need - have) {
            set.push(w);
            projected[usize::from(w)] += share / need as f64;
        }
        set
    }
}

/// Workers a bucket at `rate` needs so that each carries at most
/// `per_worker`, from 1 to `max`.
fn needed(rate: f64, per_worker: f64, max: usize) -> usize {
    let n = (rate / per_worker).ceil();
    if n.is_finite() && n > 1.0 {
        (n as usize).min(max)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::super::{bucket_of, Mode, Steering};
    use super::*;
    use crate::topology::CacheIndex;
    use weir_core::splitmix::SplitMix;

    const INTERVAL: u64 = 100_000_000;
    const CAP: f64 = 1_000_000.0;

    /// 4 CPUs: 0-1 and 2-3 share an L2, all share the L3.
    fn four_cpus() -> Topology {
        let mut caches = Vec::new();
        for cpu in 0..4u32 {
            let pair = if cpu < 2 { vec![0, 1] } else { vec![2, 3] };
            caches.push(CacheIndex::parse("1", "Data", vec![cpu]).unwrap());
            caches.push(CacheIndex::parse("2", "Unified", pair).unwrap());
            caches.push(CacheIndex::parse("3", "Unified", vec![0, 1, 2, 3]).unwrap());
        }
        Topology::new(caches)
    }

    /// A flow hash whose bucket is `bucket`, with other bits set.
    fn hash_in(bucket: u32) -> u32 {
        0xabc0_0000 | bucket
    }

    /// Workers of capacity `CAP` fed by flows of given rates, through a
    /// Steering that applies every decision: one interval per `step`.
    struct Model {
        adaptive: Adaptive,
        steering: Steering,
        cfg: DistributionConfig,
        now: u64,
        log: Vec<Vec<Change>>,
    }

    impl Model {
        fn new(cfg: DistributionConfig, topology: Topology) -> Model {
            let cpus: Vec<u32> = (0..u32::from(cfg.workers)).collect();
            Model {
                adaptive: Adaptive::new(&cfg, &cpus, topology, 0).unwrap(),
                steering: Steering::new(&cfg).unwrap(),
                cfg,
                now: 0,
                log: Vec::new(),
            }
        }

        /// One interval of `flows` (hash, packets per second).
        fn step(&mut self, flows: &[(u32, f64)]) -> Vec<Change> {
            let secs = INTERVAL as f64 / 1e9;
            let mut offered = vec![0.0; usize::from(self.cfg.workers)];
            for &(h, pps) in flows {
                let b = bucket_of(h, self.cfg.buckets);
                self.adaptive.observe(b, (pps * secs).round() as u64);
                let set = self.steering.workers_of(b);
                for &w in set.as_slice() {
                    offered[usize::from(w)] += pps / set.as_slice().len() as f64;
                }
            }
            for (w, &pps) in offered.iter().enumerate() {
                let carried = pps.min(CAP);
                self.adaptive.report(
                    w as WorkerId,
                    WorkerSample {
                        packets: (carried * secs).round() as u64,
                        load: carried / CAP,
                        window_ns: INTERVAL,
                    },
                );
            }
            self.now += INTERVAL;
            let changes = self.adaptive.decide(self.now);
            assert!(changes.len() <= self.cfg.adaptive.max_changes);
            for c in &changes {
                let ws = c.workers.as_slice();
                assert_eq!(ws[0], home_worker(c.bucket, self.cfg.workers), "home first");
                assert!(ws.len() <= self.adaptive.max_spread);
                let mut distinct = ws.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), ws.len(), "{ws:?}");
                assert_ne!(self.steering.workers_of(c.bucket), c.workers, "a change");
                self.steering.apply(c);
                assert_eq!(self.adaptive.workers_of(c.bucket), c.workers);
            }
            self.log.push(changes.clone());
            changes
        }

        fn changes(&self) -> usize {
            self.log.iter().map(Vec::len).sum()
        }
    }

    fn adaptive(workers: u16) -> DistributionConfig {
        DistributionConfig::new(Mode::Adaptive, workers)
    }

    /// `n` flows of random hashes at `pps` each.
    fn backbone(n: usize, pps: f64, seed: u64) -> Vec<(u32, f64)> {
        let mut rng = SplitMix(seed);
        (0..n).map(|_| (rng.next_u64() as u32, pps)).collect()
    }

    #[test]
    fn refuses_thresholds_that_cannot_work() {
        let ok = AdaptiveConfig::default();
        assert_eq!(ok.validate(2), Ok(()));
        for (field, bad) in [
            (
                "spread_load",
                AdaptiveConfig {
                    spread_load: 1.5,
                    ..ok.clone()
                },
            ),
            (
                "calm_load",
                AdaptiveConfig {
                    calm_load: 0.0,
                    ..ok.clone()
                },
            ),
            (
                "min_sample_load",
                AdaptiveConfig {
                    min_sample_load: f64::NAN,
                    ..ok.clone()
                },
            ),
        ] {
            match bad.validate(2) {
                Err(DistributionError::Load { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let flapping = AdaptiveConfig {
            calm_load: 0.9,
            ..ok.clone()
        };
        assert!(flapping
            .validate(2)
            .unwrap_err()
            .to_string()
            .contains("must be below spread_load"));
        let zero = AdaptiveConfig {
            max_changes: 0,
            ..ok.clone()
        };
        assert_eq!(
            zero.validate(2),
            Err(DistributionError::Zero("max_changes"))
        );
        for max_spread in [1, 3, 17] {
            let bad = AdaptiveConfig {
                max_spread: Some(max_spread),
                ..ok.clone()
            };
            let workers = if max_spread == 17 { 32 } else { 2 };
            assert_eq!(
                bad.validate(workers),
                Err(DistributionError::MaxSpread {
                    max_spread,
                    workers
                })
            );
        }
        assert_eq!(
            Adaptive::new(&adaptive(4), &[0, 1], Topology::flat(), 0).unwrap_err(),
            DistributionError::WorkerCpus {
                given: 2,
                workers: 4
            }
        );
    }

    #[test]
    fn nothing_is_decided_before_a_capacity_is_known() {
        let mut a = Adaptive::new(&adaptive(2), &[0, 1], Topology::flat(), 0).unwrap();
        a.observe(0, 10_000_000);
        a.report(
            0,
            WorkerSample {
                packets: 10,
                load: 0.01,
                window_ns: INTERVAL,
            },
        );
        assert_eq!(a.decide(INTERVAL), []);
        assert_eq!(a.capacity_pps(), None, "an idle window says nothing");
        assert_eq!(a.decide(INTERVAL), [], "no time passed");
        // the counts of that interval were dropped with it
        a.report(
            1,
            WorkerSample {
                packets: 50_000,
                load: 0.5,
                window_ns: INTERVAL,
            },
        );
        assert_eq!(a.capacity_pps(), Some(CAP));
        assert_eq!(a.decide(2 * INTERVAL), []);
        assert_eq!(a.stats().decisions, 2);
    }

    #[test]
    fn many_similar_flows_are_never_spread() {
        // The backbone mix: 2000 flows, 0.75 and then 1.5 of the workers'
        // capacity in all.
        for (total, seed) in [(3.0, 1), (6.0, 2)] {
            let mut m = Model::new(adaptive(4), four_cpus());
            let flows = backbone(2000, total * CAP / 2000.0, seed);
            for _ in 0..30 {
                m.step(&flows);
            }
            assert_eq!(m.changes(), 0, "{:?}", m.adaptive.stats());
            assert!(m.adaptive.capacity_pps().is_some());
        }
    }

    #[test]
    fn a_dominant_flow_spreads_to_the_workers_it_needs_closest_first() {
        let mut cfg = adaptive(4);
        cfg.adaptive.spread_load = 1.0; // exactly ceil(rate / capacity)
        let mut m = Model::new(cfg, four_cpus());
        let background = backbone(200, 1000.0, 3);
        let dominant = hash_in(4); // home worker 0
        let mut flows = background.clone();
        flows.push((dominant, 1.7 * CAP));
        let first = m.step(&flows);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].bucket, 4);
        assert_eq!(first[0].workers.as_slice(), [0, 1], "1 shares 0's L2");
        for _ in 0..10 {
            assert_eq!(m.step(&flows), [], "stable");
        }
        // it grows to four workers: the first two stay where they are
        *flows.last_mut().unwrap() = (dominant, 3.5 * CAP);
        let grown = m.step(&flows);
        let mut workers = grown[0].workers.as_slice().to_vec();
        assert_eq!(workers[..2], [0, 1]);
        workers.sort_unstable();
        assert_eq!(workers, [0, 1, 2, 3]);
        // a flow at home on worker 2 pairs with 3
        let mut other = background;
        other.push((hash_in(6), 1.2 * CAP));
        let mut m = Model::new(m.cfg.clone(), four_cpus());
        let c = m.step(&other);
        assert_eq!(c[0].workers.as_slice(), [2, 3]);
    }

    #[test]
    fn a_busy_neighbour_is_passed_over() {
        // Worker 1 (0's L2 sibling) is loaded to 95% by its own flows.
        let mut m = Model::new(adaptive(4), four_cpus());
        let mut flows: Vec<(u32, f64)> = (0..19).map(|i| (hash_in(1 + 4 * i), 50_000.0)).collect();
        m.step(&flows);
        flows.push((hash_in(0), 1.5 * CAP));
        let c = m.step(&flows);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].workers.as_slice(), [0, 2]);
    }

    #[test]
    fn a_calm_flow_goes_home_after_the_hysteresis() {
        let cfg = adaptive(4);
        let wait = cfg.adaptive.calm_intervals as usize;
        let mut m = Model::new(cfg, four_cpus());
        let busy = [(hash_in(8), 3.0 * CAP)];
        m.step(&busy);
        assert_eq!(m.adaptive.workers_of(8).as_slice().len(), 4, "3 / 0.9 -> 4");
        // down to 1.2 workers' worth: 3 workers would each run at 0.4
        let calmer = [(hash_in(8), 1.2 * CAP)];
        for _ in 1..wait {
            assert_eq!(m.step(&calmer), []);
        }
        let c = m.step(&calmer);
        assert_eq!(c[0].workers.as_slice(), [0, 1, 2], "the first ones kept");
        // quiet: back to its home, again only after the wait
        let quiet = [(hash_in(8), 0.1 * CAP)];
        for _ in 1..wait {
            assert_eq!(m.step(&quiet), []);
        }
        let c = m.step(&quiet);
        assert_eq!(c[0].workers.as_slice(), [0]);
        assert!(!c[0].workers.is_spread());
        assert_eq!(m.adaptive.stats().spread, 0);
        let stats = m.adaptive.stats();
        assert_eq!((stats.widened, stats.narrowed), (1, 2));
    }

    #[test]
    fn a_flow_near_the_thresholds_is_not_moved_back_and_forth() {
        for low in [0.6, 0.2] {
            let mut m = Model::new(adaptive(2), Topology::flat());
            for i in 0..60 {
                let pps = if i % 2 == 0 { 0.95 * CAP } else { low * CAP };
                m.step(&[(hash_in(0), pps)]);
            }
            // spread once; the quiet intervals never come 5 in a row
            assert_eq!(m.changes(), 1, "low {low}: {:?}", m.log);
        }
        // A flow that comes and goes for 5 intervals each: it is spread
        // when it comes, and gathered only after 5 calm decisions.
        let mut m = Model::new(adaptive(2), Topology::flat());
        for i in 0..60 {
            let pps = if (i / 5) % 2 == 0 {
                0.95 * CAP
            } else {
                0.1 * CAP
            };
            m.step(&[(hash_in(0), pps)]);
        }
        let moves: Vec<(usize, bool)> = m
            .log
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.first().map(|c| (i, c.workers.is_spread())))
            .collect();
        assert_eq!(moves.len(), 12, "{moves:?}");
        for pair in moves.chunks(2) {
            let [(spread_at, true), (gathered_at, false)] = pair else {
                panic!("{moves:?}");
            };
            assert!(gathered_at - spread_at >= 5, "{moves:?}");
        }
    }

    #[test]
    fn one_decision_changes_at_most_max_changes_buckets() {
        let mut cfg = adaptive(8);
        cfg.adaptive.max_changes = 3;
        let mut m = Model::new(cfg, Topology::flat());
        let flows: Vec<(u32, f64)> = (0..20).map(|i| (hash_in(i), 1.2 * CAP)).collect();
        let mut steps = 0;
        while m.adaptive.stats().spread < 20 {
            let c = m.step(&flows);
            assert!(c.len() <= 3);
            steps += 1;
            assert!(steps <= 7, "20 buckets at 3 a decision");
        }
        assert_eq!(steps, 7);
        assert!(m.adaptive.stats().deferred > 0);
        // the heaviest go first
        let mut m = Model::new(m.cfg.clone(), Topology::flat());
        let mut flows: Vec<(u32, f64)> = (0..5).map(|i| (hash_in(i), 1.2 * CAP)).collect();
        flows.push((hash_in(9), 3.0 * CAP));
        let c = m.step(&flows);
        assert_eq!(c[0].bucket, 9);
    }

    #[test]
    fn decisions_are_deterministic() {
        let run = |seed: u64| {
            let mut m = Model::new(adaptive(4), four_cpus());
            let mut rng = SplitMix(seed);
            let mut flows = backbone(300, 2000.0, seed);
            for _ in 0..40 {
                let i = rng.below(flows.len() as u64) as usize;
                flows[i].1 = rng.below(3_000_000) as f64;
                m.step(&flows);
            }
            m.log
        };
        assert_eq!(run(5), run(5));
        assert!(run(5).iter().any(|c| !c.is_empty()), "the run spreads");
    }

    #[test]
    fn random_mixes_keep_every_invariant() {
        // Model::step checks each change: home first, distinct workers,
        // within max_spread and max_changes, Steering and Adaptive agree.
        let (mut widened, mut narrowed, mut deferred) = (0, 0, 0);
        for seed in 0..100 {
            let mut rng = SplitMix(seed);
            let workers = 2 + rng.below(15) as u16;
            let mut cfg = adaptive(workers);
            cfg.buckets = 1 << (5 + rng.below(8));
            cfg.adaptive.max_changes = 1 + rng.below(8) as usize;
            cfg.adaptive.calm_intervals = 1 + rng.below(6) as u32;
            cfg.adaptive.spread_load = 0.5 + rng.below(50) as f64 / 100.0;
            cfg.adaptive.calm_load = cfg.adaptive.spread_load * (0.2 + rng.below(7) as f64 / 10.0);
            if rng.below(2) == 0 {
                cfg.adaptive.max_spread = Some(2 + rng.below(u64::from(workers) - 1) as u16);
            }
            let mut m = Model::new(cfg, Topology::flat());
            let mut flows = backbone(1 + rng.below(500) as usize, 1000.0, seed);
            for _ in 0..50 {
                for _ in 0..rng.below(4) {
                    let i = rng.below(flows.len() as u64) as usize;
                    flows[i].1 = rng.below(u64::from(workers) * 1_200_000) as f64;
                }
                m.step(&flows);
            }
            let stats = m.adaptive.stats();
            let spread = (0..m.cfg.buckets)
                .filter(|&b| m.steering.workers_of(b).is_spread())
                .count();
            assert_eq!(stats.spread, spread as u64, "seed {seed}");
            widened += stats.widened;
            narrowed += stats.narrowed;
            deferred += stats.deferred;
        }
        // the runs did exercise all of it
        assert!(
            widened > 100 && narrowed > 100 && deferred > 0,
            "{widened} {narrowed} {deferred}"
        );
    }
}
