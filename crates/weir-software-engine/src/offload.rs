//! Which connections the fast table holds: HNLB's hybrid offload decision
//! (seed 000, section III) and its future work, dynamic offloading, sans-IO.
//!
//! In hybrid mode a bounded fast table (weir_lb's connection table in XDP,
//! like a NIC's Flow Director with 2000-8000 entries) forwards the packets
//! of the connections it holds; every packet of any other connection goes
//! to the software tier, which looks it up in its own large table. This
//! module decides which connections hold a fast entry:
//!
//! - [`OffloadPolicy::First`] is HNLB: a new connection is installed in the
//!   fast table when the software tier dispatches it (step 4b), while there
//!   is room ([`Offload::admit`]). Entries leave only when idle or closed.
//! - [`OffloadPolicy::Heavy`] is dynamic offloading: the software tier
//!   measures the packet rate of the connections it sees
//!   ([`Offload::observe`], a count-min sketch and top-k candidates from
//!   [`weir_core::hotkeys`]), the fast table reports its entries' hit counts,
//!   and each interval the heaviest software connections are promoted into
//!   free room, or in place of the lightest fast entries they outweigh by a
//!   margin (hysteresis). Idle and closed entries are demoted first.
//!
//! Both tiers' counts are decayed the same way, so they compare: at every
//! [`Offload::plan`], a connection's score is half its previous score plus
//! the packets it sent in the interval (about twice its per-interval rate in
//! a steady state). A connection keeps its score when it is promoted.
//!
//! Every plan changes at most `churn` entries (promotions plus demotions),
//! and the fast table never holds more than `capacity` entries once the
//! caller has applied it. The caller owns the tables and the consistency of
//! a connection's DIP across them; this module only names keys. Time is
//! passed in (nanoseconds on any monotonic clock).

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use weir_core::hotkeys::{HotKeyConfig, HotKeys, SeededHash};
use weir_core::splitmix::{splitmix64, SplitMix};
pub use weir_core::worker_policy::OffloadPolicy;

/// Parameters of the offload decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadConfig {
    pub policy: OffloadPolicy,
    /// Fast-table entries at most (`fast_table_size`).
    pub capacity: usize,
    /// Promotions plus demotions one plan returns at most.
    pub churn: usize,
    /// A fast entry not hit for this long is demoted (nanoseconds).
    pub idle_ns: u64,
    /// Heavy: the score a software connection needs to be promoted.
    pub min_score: u64,
    /// Heavy: a candidate replaces a fast entry only if its score exceeds
    /// the entry's by this many percent.
    pub swap_margin_pct: u32,
    /// Heavy: software connections tracked as candidates.
    pub candidates: usize,
    /// Heavy: counters per sketch row, and rows.
    pub sketch_width: usize,
    pub sketch_depth: usize,
    /// Heavy: count one packet in 2^`sample_shift` (0 = every packet).
    pub sample_shift: u32,
    /// Keys the hashes (pick it at random: senders choose the 5-tuples).
    pub seed: u64,
}

impl OffloadConfig {
    /// Defaults for a fast table of `capacity` entries: an eighth of it may
    /// change per interval, candidates as many as entries (up to 4096), a
    /// sketch four times as wide.
    pub fn new(policy: OffloadPolicy, capacity: usize) -> OffloadConfig {
        let candidates = capacity.clamp(1, 4096);
        OffloadConfig {
            policy,
            capacity,
            churn: (capacity / 8).max(16),
            idle_ns: 10_000_000_000,
            min_score: 16,
            swap_margin_pct: 25,
            candidates,
            sketch_width: 4 * candidates,
            sketch_depth: 4,
            sample_shift: 0,
            seed: 0,
        }
    }

    /// Refuses a configuration that could not work, naming the field.
    pub fn validate(&self) -> Result<(), OffloadError> {
        let zero = |field: &'static str, v: usize| {
            if v == 0 {
                Err(OffloadError::Zero(field))
            } else {
                Ok(())
            }
        };
        zero("capacity", self.capacity)?;
        zero("churn", self.churn)?;
        if self.policy == OffloadPolicy::Heavy {
            zero("candidates", self.candidates)?;
            zero("sketch_width", self.sketch_width)?;
            zero("sketch_depth", self.sketch_depth)?;
            if self.sample_shift > 16 {
                return Err(OffloadError::SampleShift(self.sample_shift));
            }
        }
        Ok(())
    }
}

/// Why an offload configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    /// The named field must be at least 1.
    Zero(&'static str),
    /// Sampling one packet in more than 65536 finds no heavy connection.
    SampleShift(u32),
}

impl fmt::Display for OffloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffloadError::Zero(field) => write!(f, "offload {field} must be at least 1"),
            OffloadError::SampleShift(s) => write!(
                f,
                "offload sample_shift must be at most 16 (one packet in 65536), got {s}"
            ),
        }
    }
}

impl std::error::Error for OffloadError {}

/// One fast-table entry as the caller read it from the XDP map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastEntry<K> {
    pub key: K,
    /// Packets the fast tier forwarded for it since it was installed (a
    /// counter that only grows; a lost update costs accuracy only). Heavy
    /// ranks fast entries by it.
    pub hits: u64,
    /// When the fast tier last forwarded a packet of it, or installed it.
    pub last_seen_ns: u64,
    /// The connection is closed (FINs both ways or a RST).
    pub closed: bool,
}

/// What the caller should change in the fast table (and nothing else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<K> {
    /// Software connections to install in the fast table, heaviest first.
    pub promote: Vec<K>,
    /// Fast entries to remove (the software tier keeps the connection).
    pub demote: Vec<K>,
}

/// Counters for `weir status` and /metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffloadStats {
    /// Fast-table entries after the last plan, plus admissions since.
    pub occupancy: usize,
    pub capacity: usize,
    /// Packets the software tier reported ([`Offload::observe`]).
    pub observed: u64,
    /// New connections installed at dispatch ([`Offload::admit`]).
    pub admitted: u64,
    pub promoted: u64,
    pub demoted_idle: u64,
    pub demoted_closed: u64,
    /// Demoted for a heavier connection, or over capacity.
    pub demoted_light: u64,
}

/// A fast entry's state between plans.
#[derive(Debug, Clone, Copy)]
struct Resident {
    hits: u64,
    score: u64,
}

/// The offload decision for one fast table.
#[derive(Debug, Clone)]
pub struct Offload<K> {
    cfg: OffloadConfig,
    /// Heavy only: software-side rates.
    sketch: Option<HotKeys<K>>,
    sample_mask: u64,
    rng: SplitMix,
    residents: HashMap<K, Resident, SeededHash>,
    /// Scores of the keys promoted by the last plan, until they show up.
    promoted: HashMap<K, u64, SeededHash>,
    stats: OffloadStats,
}

impl<K: Hash + Eq + Clone> Offload<K> {
    pub fn new(cfg: OffloadConfig) -> Result<Offload<K>, OffloadError> {
        cfg.validate()?;
        let sketch = (cfg.policy == OffloadPolicy::Heavy).then(|| {
            HotKeys::with_seed(
                HotKeyConfig {
                    width: cfg.sketch_width,
                    depth: cfg.sketch_depth,
                    k: cfg.candidates,
                    window_ns: 0, // plan() decays
                    threshold: 0,
                },
                cfg.seed,
                0,
            )
        });
        let hasher = SeededHash(splitmix64(cfg.seed ^ 0x6f66_666c_6f61_6421));
        Ok(Offload {
            sketch,
            sample_mask: (1u64 << cfg.sample_shift) - 1,
            rng: SplitMix(cfg.seed),
            residents: HashMap::with_hasher(hasher),
            promoted: HashMap::with_hasher(hasher),
            stats: OffloadStats {
                capacity: cfg.capacity,
                ..OffloadStats::default()
            },
            cfg,
        })
    }

    pub fn config(&self) -> &OffloadConfig {
        &self.cfg
    }

    pub fn stats(&self) -> OffloadStats {
        self.stats
    }

    /// The software tier handled a packet of `key` (a connection without a
    /// fast entry). Cheap: a counter under `First`; under `Heavy` a sampled
    /// sketch update.
    #[inline]
    pub fn observe(&mut self, key: &K) {
        self.stats.observed += 1;
        let Some(sketch) = self.sketch.as_mut() else {
            return;
        };
        if self.sample_mask != 0 && self.rng.next_u64() & self.sample_mask != 0 {
            return;
        }
        sketch.observe(key, 0); // no time decay: plan() halves
    }

    /// The software tier just dispatched a new connection: install it in
    /// the fast table too (HNLB step 4b)? `First`: while there is
    /// room. `Heavy`: never; connections earn their place by rate.
    pub fn admit(&mut self) -> bool {
        if self.cfg.policy != OffloadPolicy::First || self.stats.occupancy >= self.cfg.capacity {
            return false;
        }
        self.stats.occupancy += 1;
        self.stats.admitted += 1;
        true
    }

    /// One control-loop interval: `fast` is the fast table as read now
    /// (each key once). Returns what to change; the caller applies all of
    /// it before the next plan.
    pub fn plan(&mut self, now_ns: u64, fast: &[FastEntry<K>]) -> Plan<K> {
        let scores = self.update_residents(fast);
        let mut budget = self.cfg.churn;
        let mut demoted = vec![false; fast.len()];
        let mut demote = Vec::new();

        // Closed entries first, then the longest idle.
        let mut forced: Vec<usize> = (0..fast.len())
            .filter(|&i| {
                fast[i].closed || now_ns.saturating_sub(fast[i].last_seen_ns) >= self.cfg.idle_ns
            })
            .collect();
        forced.sort_by_key(|&i| (!fast[i].closed, fast[i].last_seen_ns));
        for &i in forced.iter().take(budget) {
            demoted[i] = true;
            demote.push(fast[i].key.clone());
            if fast[i].closed {
                self.stats.demoted_closed += 1;
            } else {
                self.stats.demoted_idle += 1;
            }
        }
        budget -= demote.len();

        // The live entries, lightest first: over capacity (the caller
        // installed more than it was told) they go, and Heavy swaps them.
        let mut light: Vec<usize> = (0..fast.len()).filter(|&i| !demoted[i]).collect();
        light.sort_by_key(|&i| (scores[i], fast[i].last_seen_ns));
        let mut light = light.into_iter().peekable();
        let mut live = fast.len() - demote.len();
        while live > self.cfg.capacity && budget > 0 {
            let i = light.next().expect("more live entries than capacity");
            demote.push(fast[i].key.clone());
            self.stats.demoted_light += 1;
            live -= 1;
            budget -= 1;
        }

        let mut promote = Vec::new();
        if let Some(sketch) = self.sketch.as_mut() {
            let shift = self.cfg.sample_shift;
            let mut candidates: Vec<(&K, u64)> = sketch
                .candidates()
                .map(|(k, c)| (k, c << shift))
                .filter(|(k, c)| *c >= self.cfg.min_score && !self.residents.contains_key(*k))
                .collect();
            candidates.sort_by_key(|&(_, score)| std::cmp::Reverse(score));
            let mut candidates = candidates.into_iter().peekable();
            // free room first
            while live + promote.len() < self.cfg.capacity && budget > 0 {
                let Some((k, score)) = candidates.next() else {
                    break;
                };
                self.promoted.insert(k.clone(), score);
                promote.push(k.clone());
                budget -= 1;
            }
            // then a candidate for the lightest entry it clearly outweighs
            while budget >= 2 {
                let (Some(&(k, score)), Some(&i)) = (candidates.peek(), light.peek()) else {
                    break;
                };
                let margin = u128::from(100 + self.cfg.swap_margin_pct);
                if u128::from(score) * 100 <= u128::from(scores[i]) * margin {
                    break; // the heaviest left does not beat the lightest left
                }
                candidates.next();
                light.next();
                demote.push(fast[i].key.clone());
                self.stats.demoted_light += 1;
                self.promoted.insert(k.clone(), score);
                promote.push(k.clone());
                budget -= 2;
            }
            sketch.halve();
        }
        self.stats.promoted += promote.len() as u64;
        self.stats.occupancy = fast.len() + promote.len() - demote.len();
        Plan { promote, demote }
    }

    /// Carries each fast entry's score over to this interval and returns
    /// the scores in `fast`'s order. Entries that left the table are
    /// forgotten; a promoted key starts from its software score.
    fn update_residents(&mut self, fast: &[FastEntry<K>]) -> Vec<u64> {
        let mut residents = HashMap::with_capacity_and_hasher(fast.len(), *self.residents.hasher());
        let scores = fast
            .iter()
            .map(|e| {
                let (prev_hits, prev_score) = match self.residents.get(&e.key) {
                    Some(r) => (r.hits, r.score),
                    None => (0, self.promoted.get(&e.key).copied().unwrap_or(0)),
                };
                // a counter below its last reading was reinstalled
                let delta = e.hits.checked_sub(prev_hits).unwrap_or(e.hits);
                let score = prev_score / 2 + delta;
                residents.insert(
                    e.key.clone(),
                    Resident {
                        hits: e.hits,
                        score,
                    },
                );
                score
            })
            .collect();
        self.residents = residents;
        self.promoted.clear();
        scores
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    const MS: u64 = 1_000_000;
    const INTERVAL: u64 = 100 * MS;

    /// A simulated fast table that applies plans and counts hits, with a
    /// software tier that reports every packet it handles.
    struct Hybrid {
        offload: Offload<u32>,
        fast: HashMap<u32, FastEntry<u32>>,
        now: u64,
        fast_packets: u64,
        soft_packets: u64,
    }

    impl Hybrid {
        fn new(cfg: OffloadConfig) -> Hybrid {
            Hybrid {
                offload: Offload::new(cfg).unwrap(),
                fast: HashMap::new(),
                now: 0,
                fast_packets: 0,
                soft_packets: 0,
            }
        }

        fn packet(&mut self, key: u32) {
            if let Some(e) = self.fast.get_mut(&key) {
                e.hits += 1;
                e.last_seen_ns = self.now;
                self.fast_packets += 1;
            } else {
                self.offload.observe(&key);
                self.soft_packets += 1;
            }
        }

        /// A new connection's first packet, dispatched by the software tier.
        fn open(&mut self, key: u32) {
            self.soft_packets += 1;
            self.offload.observe(&key);
            if self.offload.admit() {
                self.install(key);
            }
        }

        fn install(&mut self, key: u32) {
            let e = FastEntry {
                key,
                hits: 0,
                last_seen_ns: self.now,
                closed: false,
            };
            assert!(self.fast.insert(key, e).is_none(), "{key} installed twice");
        }

        /// Ends the interval: plans, checks the plan, applies it.
        fn plan(&mut self) -> Plan<u32> {
            self.now += INTERVAL;
            let mut view: Vec<FastEntry<u32>> = self.fast.values().cloned().collect();
            view.sort_by_key(|e| e.key);
            let plan = self.offload.plan(self.now, &view);
            let cfg = self.offload.config().clone();
            assert!(
                plan.promote.len() + plan.demote.len() <= cfg.churn,
                "churn {} + {} > {}",
                plan.promote.len(),
                plan.demote.len(),
                cfg.churn
            );
            let promote: HashSet<u32> = plan.promote.iter().copied().collect();
            let demote: HashSet<u32> = plan.demote.iter().copied().collect();
            assert_eq!(promote.len(), plan.promote.len(), "promotes a key twice");
            assert_eq!(demote.len(), plan.demote.len(), "demotes a key twice");
            for k in &plan.demote {
                assert!(
                    self.fast.remove(k).is_some(),
                    "demotes {k}, not in the table"
                );
            }
            for &k in &plan.promote {
                self.install(k);
            }
            assert!(
                self.fast.len() <= cfg.capacity,
                "{} entries",
                self.fast.len()
            );
            assert_eq!(self.offload.stats().occupancy, self.fast.len());
            self.fast_packets = 0;
            self.soft_packets = 0;
            plan
        }

        fn fast_share(&self) -> f64 {
            self.fast_packets as f64 / (self.fast_packets + self.soft_packets) as f64
        }
    }

    /// Connection ranks drawn from a Zipf(s) law over `n` connections.
    struct Zipf {
        cdf: Vec<f64>,
    }

    impl Zipf {
        fn new(n: usize, s: f64) -> Zipf {
            let mut acc = 0.0;
            let mut cdf: Vec<f64> = (1..=n)
                .map(|i| {
                    acc += (i as f64).powf(-s);
                    acc
                })
                .collect();
            cdf.iter_mut().for_each(|c| *c /= acc);
            Zipf { cdf }
        }

        fn sample(&self, rng: &mut SplitMix) -> u32 {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u32
        }

        /// The share of packets the `top` heaviest connections carry.
        fn share(&self, top: usize) -> f64 {
            self.cdf[top - 1]
        }
    }

    fn heavy(capacity: usize) -> OffloadConfig {
        OffloadConfig {
            churn: 256,
            seed: 42,
            ..OffloadConfig::new(OffloadPolicy::Heavy, capacity)
        }
    }

    #[test]
    fn refuses_zero_sizes_and_wild_sampling() {
        let ok = OffloadConfig::new(OffloadPolicy::Heavy, 8192);
        assert_eq!(ok.validate(), Ok(()));
        let bad = OffloadConfig {
            capacity: 0,
            ..ok.clone()
        };
        assert_eq!(
            Offload::<u32>::new(bad).unwrap_err().to_string(),
            "offload capacity must be at least 1"
        );
        let bad = OffloadConfig {
            churn: 0,
            ..ok.clone()
        };
        assert_eq!(bad.validate(), Err(OffloadError::Zero("churn")));
        let bad = OffloadConfig {
            sample_shift: 17,
            ..ok.clone()
        };
        assert_eq!(bad.validate(), Err(OffloadError::SampleShift(17)));
        // First has no sketch to size
        let first = OffloadConfig {
            candidates: 0,
            ..OffloadConfig::new(OffloadPolicy::First, 4)
        };
        assert_eq!(first.validate(), Ok(()));
    }

    #[test]
    fn first_fills_to_the_bound_and_demotes_only_idle_or_closed() {
        let mut h = Hybrid::new(OffloadConfig {
            churn: 4,
            idle_ns: 5 * INTERVAL,
            ..OffloadConfig::new(OffloadPolicy::First, 10)
        });
        for k in 0..25 {
            h.open(k);
        }
        assert_eq!(h.fast.len(), 10, "installed while there was room");
        assert!((0..10).all(|k| h.fast.contains_key(&k)), "first come");
        assert_eq!(h.offload.stats().admitted, 10);
        // the offloaded ones are quiet, the rest heavy: First never swaps
        for _ in 0..3 {
            for _ in 0..100 {
                (10..25).for_each(|k| h.packet(k));
            }
            (0..10).for_each(|k| h.packet(k));
            assert_eq!(
                h.plan(),
                Plan {
                    promote: vec![],
                    demote: vec![]
                }
            );
        }
        // 0..3 close, 3..10 go silent: closed first, then idle, 4 a plan
        for k in 0..3 {
            h.fast.get_mut(&k).unwrap().closed = true;
        }
        let mut demoted = Vec::new();
        for _ in 0..8 {
            (10..25).for_each(|k| h.packet(k));
            let plan = h.plan();
            assert!(plan.promote.is_empty());
            demoted.extend(plan.demote);
        }
        assert_eq!(&demoted[..3], &[0, 1, 2], "closed first");
        demoted.sort();
        assert_eq!(demoted, (0..10).collect::<Vec<u32>>());
        let stats = h.offload.stats();
        assert_eq!((stats.demoted_closed, stats.demoted_idle), (3, 7));
        assert_eq!(stats.demoted_light, 0);
        // room again for new connections, up to the bound
        for k in 100..120 {
            h.open(k);
        }
        assert_eq!(h.fast.len(), 10);
        assert!(!h.offload.admit());
    }

    #[test]
    fn heavy_offloads_the_heavy_connections_of_a_zipf_mix() {
        let (conns, capacity) = (20_000, 1000);
        let zipf = Zipf::new(conns, 1.3);
        let ideal = zipf.share(capacity);
        assert!(ideal > 0.92, "the top {capacity} carry {ideal}");
        let mut h = Hybrid::new(heavy(capacity));
        let mut rng = SplitMix(7);
        let mut shares = Vec::new();
        for _ in 0..12 {
            for _ in 0..200_000 {
                let k = zipf.sample(&mut rng);
                h.packet(k);
            }
            shares.push(h.fast_share());
            h.plan();
        }
        // four plans to fill 1000 entries at 256 a plan; then steady
        // the first plan promoted the heaviest it could (256)
        assert!(shares[1] >= zipf.share(256) - 0.03, "{shares:.3?}");
        let last = *shares.last().unwrap();
        assert!(last >= 0.9, "fast-table share {last:.3} ({shares:.3?})");
        assert!(last >= ideal - 0.03, "{last:.3} vs ideal {ideal:.3}");
        for k in 0..200 {
            assert!(h.fast.contains_key(&k), "connection {k} not offloaded");
        }
        let stats = h.offload.stats();
        assert_eq!(stats.occupancy, capacity);
        assert!(stats.promoted >= capacity as u64);
    }

    #[test]
    fn heavy_finds_them_sampling_one_packet_in_eight() {
        let zipf = Zipf::new(20_000, 1.3);
        let mut h = Hybrid::new(OffloadConfig {
            sample_shift: 3,
            ..heavy(1000)
        });
        let mut rng = SplitMix(8);
        for _ in 0..12 {
            for _ in 0..200_000 {
                let k = zipf.sample(&mut rng);
                h.packet(k);
            }
            if h.offload.stats().promoted >= 1000 {
                assert!(h.fast_share() >= 0.88, "{}", h.fast_share());
            }
            h.plan();
        }
        assert!((0..100).all(|k| h.fast.contains_key(&k)));
    }

    #[test]
    fn heavy_replaces_idle_entries_with_new_heavy_connections() {
        let mut h = Hybrid::new(OffloadConfig {
            idle_ns: 3 * INTERVAL,
            churn: 8,
            ..heavy(8)
        });
        for _ in 0..3 {
            for _ in 0..50 {
                (0..8).for_each(|k| h.packet(k));
            }
            h.plan();
        }
        assert_eq!(
            h.fast.keys().copied().collect::<HashSet<_>>(),
            (0..8).collect()
        );
        // 0..8 stop, 100..108 start
        for _ in 0..6 {
            for _ in 0..50 {
                (100..108).for_each(|k| h.packet(k));
            }
            h.plan();
        }
        assert_eq!(
            h.fast.keys().copied().collect::<HashSet<_>>(),
            (100..108).collect()
        );
        assert!(h.offload.stats().demoted_idle + h.offload.stats().demoted_light >= 8);
    }

    #[test]
    fn a_promoted_connection_keeps_its_score() {
        // 4 entries; a steady heavy set, then one heavier newcomer swaps in
        // and is not swapped out again the next interval.
        let mut h = Hybrid::new(OffloadConfig {
            churn: 2,
            ..heavy(4)
        });
        let rates = [(1u32, 100), (2, 90), (3, 80), (4, 70)];
        for _ in 0..6 {
            for &(k, r) in &rates {
                (0..r).for_each(|_| h.packet(k));
            }
            h.plan();
        }
        let mut plans = Vec::new();
        for _ in 0..6 {
            for &(k, r) in rates.iter().chain(&[(9, 200)]) {
                (0..r).for_each(|_| h.packet(k));
            }
            plans.push(h.plan());
        }
        assert!(h.fast.contains_key(&9));
        assert!(!h.fast.contains_key(&4), "the lightest made room");
        let swaps: usize = plans.iter().map(|p| p.promote.len()).sum();
        assert_eq!(swaps, 1, "{plans:?}");
    }

    #[test]
    fn equal_rates_do_not_thrash() {
        // Twice as many equally busy connections as entries: the margin
        // keeps swaps rare once the table is full.
        let mut h = Hybrid::new(OffloadConfig {
            churn: 64,
            ..heavy(100)
        });
        let mut rng = SplitMix(3);
        let mut churn = Vec::new();
        for _ in 0..15 {
            for _ in 0..40_000 {
                let k = rng.below(200) as u32;
                h.packet(k);
            }
            let p = h.plan();
            churn.push(p.promote.len() + p.demote.len());
        }
        let late: usize = churn[5..].iter().sum();
        assert!(late <= 20, "{churn:?}");
        assert_eq!(h.fast.len(), 100);
    }

    #[test]
    fn invariants_hold_for_random_streams() {
        for seed in 0..60u64 {
            let mut rng = SplitMix(seed);
            let policy = if seed % 2 == 0 {
                OffloadPolicy::Heavy
            } else {
                OffloadPolicy::First
            };
            let capacity = 1 + rng.below(64) as usize;
            let cfg = OffloadConfig {
                churn: 1 + rng.below(16) as usize,
                idle_ns: (1 + rng.below(5)) * INTERVAL,
                min_score: rng.below(8),
                swap_margin_pct: rng.below(50) as u32,
                candidates: 1 + rng.below(128) as usize,
                sketch_width: 1 + rng.below(512) as usize,
                sketch_depth: 1 + rng.below(4) as usize,
                sample_shift: rng.below(3) as u32,
                seed,
                ..OffloadConfig::new(policy, capacity)
            };
            let mut h = Hybrid::new(cfg);
            let keys = 1 + rng.below(500);
            for _ in 0..30 {
                let open = rng.below(20);
                for _ in 0..open {
                    let k = rng.below(keys) as u32;
                    if !h.fast.contains_key(&k) {
                        h.open(k);
                    }
                }
                // skewed: a random key, or one of a few
                for _ in 0..rng.below(3000) {
                    let k = if rng.below(3) == 0 {
                        rng.below(4)
                    } else {
                        rng.below(keys)
                    };
                    h.packet(k as u32);
                }
                // some entries close
                let closing: Vec<u32> = h
                    .fast
                    .keys()
                    .copied()
                    .filter(|_| rng.below(10) == 0)
                    .collect();
                for k in closing {
                    h.fast.get_mut(&k).unwrap().closed = true;
                }
                // Hybrid::plan checks the bound, the churn, and that every
                // promotion is new and every demotion resident
                let plan = h.plan();
                if policy == OffloadPolicy::First {
                    assert!(plan.promote.is_empty(), "First installs at dispatch only");
                }
            }
        }
    }

    #[test]
    fn a_table_over_its_bound_is_trimmed_lightest_first() {
        let mut o: Offload<u32> = Offload::new(OffloadConfig {
            churn: 3,
            ..OffloadConfig::new(OffloadPolicy::First, 2)
        })
        .unwrap();
        let view: Vec<FastEntry<u32>> = (0..5)
            .map(|k| FastEntry {
                key: k,
                hits: u64::from(k) * 10,
                last_seen_ns: 0,
                closed: false,
            })
            .collect();
        let plan = o.plan(1, &view);
        assert_eq!(plan.demote, vec![0, 1, 2]);
        assert_eq!(o.stats().occupancy, 2);
    }
}
