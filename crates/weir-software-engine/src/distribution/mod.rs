//! Which software-tier worker a packet goes to, sans-IO: the policies the
//! XDP program applies per packet, the table it reads, and (in
//! [`adaptive`]) the decisions that rewrite that table.
//!
//! Every flow hash falls in one of `buckets` buckets (its low bits, like a
//! NIC's RSS indirection table), and each bucket has a home worker
//! (`bucket % workers`). The modes ([`Mode`]):
//!
//! - **flow**: a packet goes to its bucket's home worker, so a flow stays
//!   on one worker (RSS). Choose it for many flows of similar rates, or a
//!   middlebox that must see a flow's packets in order on one core. A flow
//!   heavier than one worker is capped at that worker's speed.
//! - **spray** (seed 001): every packet in scope goes to the next worker,
//!   whatever its flow, and the reorder stage ([`crate::reorder`]) restores
//!   each flow's order before transmit. The seed steers by the TCP
//!   checksum's low bits, because a NIC's Flow Director can only match
//!   header fields; XDP can count, so weir picks `seq % workers`, where
//!   `seq` is the packet's ingress sequence number, which a sprayed packet
//!   carries anyway: an exact round robin per ingress queue, at no cost.
//!   The scope is TCP by default ([`SprayScope`]): other protocols stay on
//!   their home worker, as in the seed, unless configured `all`. Choose it
//!   for a few heavy flows through costly per-packet work.
//! - **adaptive** (seed 003, TBTD): flow-based, until a bucket carries more
//!   than one worker can (a dominant flow); then that bucket alone is
//!   spread over as many workers as it needs, closest in the cache
//!   hierarchy first, its packets numbered and reordered like sprayed
//!   ones; it returns to its home worker when it calms down. Choose it when
//!   the mix is unknown: many flows cost nothing extra, a dominant flow
//!   gets the cores it needs.
//!
//! Buckets are the unit of spreading, not flows: the data plane counts
//! packets per bucket in an array (exact, bounded, no per-flow state), and
//! the spread table is an array indexed by bucket. The few light flows that
//! share a dominant flow's bucket (at 4096 buckets and 10,000 flows, about
//! two) are spread with it, and are reordered like it.
//!
//! [`Steering`] is the per-packet choice: the reference the XDP program's
//! choice is tested against, and the user-space path's own.

pub mod adaptive;

use std::fmt;

use crate::reorder::Seq;
pub use weir_core::worker_policy::{Mode, SprayScope, MAX_WORKERS};

/// A worker's index in the software tier's list of workers.
pub type WorkerId = u16;

/// Workers one bucket is spread over at most in adaptive mode (the size of
/// the data plane's per-bucket worker list).
pub const MAX_SPREAD: usize = 16;

/// Buckets by default: few light flows share a dominant one's bucket, and
/// the data plane's tables stay small (4096 entries).
pub const DEFAULT_BUCKETS: u32 = 4096;

/// Buckets at most (a power of two).
pub const MAX_BUCKETS: u32 = 1 << 16;

/// The distribution of one software tier.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributionConfig {
    pub mode: Mode,
    /// Workers in the tier.
    pub workers: u16,
    pub scope: SprayScope,
    /// Buckets of the flow hash: a power of two, at least `workers`.
    pub buckets: u32,
    /// Adaptive mode's thresholds (ignored by the other modes).
    pub adaptive: adaptive::AdaptiveConfig,
}

impl DistributionConfig {
    /// Flow, spray or adaptive over `workers` workers, with the defaults.
    pub fn new(mode: Mode, workers: u16) -> DistributionConfig {
        DistributionConfig {
            mode,
            workers,
            scope: SprayScope::Tcp,
            buckets: DEFAULT_BUCKETS,
            adaptive: adaptive::AdaptiveConfig::default(),
        }
    }

    /// Refuses a distribution the workers cannot carry out, naming the
    /// field and what to change.
    pub fn validate(&self) -> Result<(), DistributionError> {
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(DistributionError::Workers(self.workers));
        }
        if self.mode != Mode::Flow && self.workers < 2 {
            return Err(DistributionError::NeedsTwoWorkers(self.mode));
        }
        if !self.buckets.is_power_of_two()
            || self.buckets > MAX_BUCKETS
            || self.buckets < u32::from(self.workers)
        {
            return Err(DistributionError::Buckets {
                buckets: self.buckets,
                workers: self.workers,
            });
        }
        if self.mode == Mode::Adaptive {
            self.adaptive.validate(self.workers)?;
        }
        Ok(())
    }
}

/// Why a distribution was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum DistributionError {
    /// `workers` is 0 or above [`MAX_WORKERS`].
    Workers(u16),
    /// Spray and adaptive spread packets over at least two workers.
    NeedsTwoWorkers(Mode),
    /// `buckets` is not a power of two in [workers, [`MAX_BUCKETS`]].
    Buckets { buckets: u32, workers: u16 },
    /// Adaptive `max_spread` asks for more workers than there are, or
    /// more than [`MAX_SPREAD`], or fewer than two.
    MaxSpread { max_spread: u16, workers: u16 },
    /// A load threshold outside its range; names the field.
    Load { field: &'static str, value: f64 },
    /// `calm_load` must stay below `spread_load`, or a bucket flaps.
    CalmAboveSpread { calm_load: f64, spread_load: f64 },
    /// The named field must be at least 1.
    Zero(&'static str),
    /// `worker_cpus` must name one CPU per worker.
    WorkerCpus { given: usize, workers: u16 },
}

impl fmt::Display for DistributionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistributionError::Workers(n) => {
                write!(f, "workers must be from 1 to {MAX_WORKERS}, got {n}")
            }
            DistributionError::NeedsTwoWorkers(mode) => write!(
                f,
                "distribution = \"{mode}\" spreads packets over several workers, but only \
                 1 worker is configured: configure at least 2 workers, or use \
                 distribution = \"flow\""
            ),
            DistributionError::Buckets { buckets, workers } => write!(
                f,
                "distribution buckets must be a power of two from the number of workers \
                 ({workers}) to {MAX_BUCKETS}, got {buckets} (the default is {DEFAULT_BUCKETS})"
            ),
            DistributionError::MaxSpread {
                max_spread,
                workers,
            } => write!(
                f,
                "adaptive max_spread = {max_spread} needs {max_spread} workers, but {workers} \
                 are configured: set max_spread from 2 to {} or add workers",
                (*workers).min(MAX_SPREAD as u16)
            ),
            DistributionError::Load { field, value } => write!(
                f,
                "adaptive {field} must be a fraction of a worker's capacity in (0, 1], got {value}"
            ),
            DistributionError::CalmAboveSpread {
                calm_load,
                spread_load,
            } => write!(
                f,
                "adaptive calm_load ({calm_load}) must be below spread_load ({spread_load}), \
                 or a flow near the threshold is spread and gathered again every interval"
            ),
            DistributionError::Zero(field) => write!(f, "adaptive {field} must be at least 1"),
            DistributionError::WorkerCpus { given, workers } => write!(
                f,
                "{given} worker CPUs given for {workers} workers: name one CPU per worker"
            ),
        }
    }
}

impl std::error::Error for DistributionError {}

/// The bucket of a flow hash (its low bits; `buckets` a power of two).
#[inline]
pub fn bucket_of(flow_hash: u32, buckets: u32) -> u32 {
    flow_hash & (buckets - 1)
}

/// The worker a bucket's flows go to when it is not spread.
#[inline]
pub fn home_worker(bucket: u32, workers: u16) -> WorkerId {
    (bucket % u32::from(workers)) as WorkerId
}

/// The workers a spread bucket's packets go to, home worker first: a
/// packet numbered `seq` goes to the `seq % len`-th. Never empty.
#[derive(Clone, Copy)]
pub struct WorkerSet {
    len: u8,
    ids: [WorkerId; MAX_SPREAD],
}

impl WorkerSet {
    /// Just `home`: the bucket is not spread.
    pub fn one(home: WorkerId) -> WorkerSet {
        let mut ids = [0; MAX_SPREAD];
        ids[0] = home;
        WorkerSet { len: 1, ids }
    }

    /// The workers, home first.
    pub fn as_slice(&self) -> &[WorkerId] {
        &self.ids[..usize::from(self.len)]
    }

    pub fn home(&self) -> WorkerId {
        self.ids[0]
    }

    /// More than one worker: packets need sequence numbers.
    pub fn is_spread(&self) -> bool {
        self.len > 1
    }

    pub fn contains(&self, worker: WorkerId) -> bool {
        self.as_slice().contains(&worker)
    }

    /// The worker of the packet numbered `seq`.
    #[inline]
    pub fn pick(&self, seq: Seq) -> WorkerId {
        self.ids[(seq % u32::from(self.len)) as usize]
    }

    /// Adds a worker (callers keep the set below [`MAX_SPREAD`] and
    /// free of duplicates).
    fn push(&mut self, worker: WorkerId) {
        self.ids[usize::from(self.len)] = worker;
        self.len += 1;
    }

    /// Keeps the first `len` workers (at least the home).
    fn truncate(&mut self, len: usize) {
        self.len = len.clamp(1, usize::from(self.len)) as u8;
    }
}

impl PartialEq for WorkerSet {
    fn eq(&self, other: &WorkerSet) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for WorkerSet {}

impl fmt::Debug for WorkerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Where one packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// To this worker, without a sequence number.
    Flow(WorkerId),
    /// Round robin over all `workers`: number the packet, send it to
    /// `seq % workers`.
    Spray { workers: u16 },
    /// Number the packet and send it to `set.pick(seq)`.
    Spread(&'a WorkerSet),
}

impl Route<'_> {
    /// Whether the packet needs an ingress sequence number (and goes
    /// through the reorder stage).
    pub fn numbered(&self) -> bool {
        !matches!(self, Route::Flow(_))
    }

    /// The worker of a packet numbered `seq` (ignored for [`Route::Flow`]).
    #[inline]
    pub fn worker(&self, seq: Seq) -> WorkerId {
        match *self {
            Route::Flow(w) => w,
            Route::Spray { workers } => (seq % u32::from(workers)) as WorkerId,
            Route::Spread(set) => set.pick(seq),
        }
    }
}

/// The per-packet choice: what the data plane holds (the mode, and in
/// adaptive mode a worker set per bucket) and how it picks a worker.
#[derive(Debug, Clone)]
pub struct Steering {
    mode: Mode,
    workers: u16,
    scope: SprayScope,
    buckets: u32,
    /// Adaptive only: each bucket's workers (its home alone, or spread).
    sets: Box<[WorkerSet]>,
}

impl Steering {
    pub fn new(cfg: &DistributionConfig) -> Result<Steering, DistributionError> {
        cfg.validate()?;
        let sets = if cfg.mode == Mode::Adaptive {
            (0..cfg.buckets)
                .map(|b| WorkerSet::one(home_worker(b, cfg.workers)))
                .collect()
        } else {
            Box::default()
        };
        Ok(Steering {
            mode: cfg.mode,
            workers: cfg.workers,
            scope: cfg.scope,
            buckets: cfg.buckets,
            sets,
        })
    }

    /// The route of a packet of the flow with hash `flow_hash`; `tcp` says
    /// whether it is TCP (for the spray scope).
    #[inline]
    pub fn route(&self, flow_hash: u32, tcp: bool) -> Route<'_> {
        let bucket = bucket_of(flow_hash, self.buckets);
        let home = Route::Flow(home_worker(bucket, self.workers));
        if !tcp && self.scope == SprayScope::Tcp {
            return home;
        }
        match self.mode {
            Mode::Flow => home,
            Mode::Spray => Route::Spray {
                workers: self.workers,
            },
            Mode::Adaptive => {
                let set = &self.sets[bucket as usize];
                if set.is_spread() {
                    Route::Spread(set)
                } else {
                    home
                }
            }
        }
    }

    /// Applies one of [`adaptive::Adaptive::decide`]'s changes (adaptive
    /// mode only; ignored otherwise).
    pub fn apply(&mut self, change: &adaptive::Change) {
        if let Some(set) = self.sets.get_mut(change.bucket as usize) {
            *set = change.workers;
        }
    }

    /// A bucket's workers (adaptive mode), or its home worker alone.
    pub fn workers_of(&self, bucket: u32) -> WorkerSet {
        self.sets
            .get(bucket as usize)
            .copied()
            .unwrap_or_else(|| WorkerSet::one(home_worker(bucket, self.workers)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::splitmix::SplitMix;

    #[test]
    fn refuses_distributions_the_workers_cannot_carry_out() {
        let ok = DistributionConfig::new(Mode::Adaptive, 2);
        assert_eq!(ok.validate(), Ok(()));
        let one = DistributionConfig::new(Mode::Spray, 1);
        assert_eq!(
            one.validate(),
            Err(DistributionError::NeedsTwoWorkers(Mode::Spray))
        );
        assert_eq!(
            one.validate().unwrap_err().to_string(),
            "distribution = \"spray\" spreads packets over several workers, but only 1 worker \
             is configured: configure at least 2 workers, or use distribution = \"flow\""
        );
        assert_eq!(DistributionConfig::new(Mode::Flow, 1).validate(), Ok(()));
        assert_eq!(
            DistributionConfig::new(Mode::Flow, 0).validate(),
            Err(DistributionError::Workers(0))
        );
        assert_eq!(
            DistributionConfig::new(Mode::Flow, 300).validate(),
            Err(DistributionError::Workers(300))
        );
        for buckets in [0, 3, 1 << 17] {
            let bad = DistributionConfig {
                buckets,
                ..ok.clone()
            };
            assert_eq!(
                bad.validate(),
                Err(DistributionError::Buckets {
                    buckets,
                    workers: 2
                })
            );
        }
        let few_buckets = DistributionConfig {
            buckets: 4,
            ..DistributionConfig::new(Mode::Flow, 8)
        };
        assert!(few_buckets.validate().is_err(), "a worker with no bucket");
        // adaptive's own fields are checked too
        let mut wide = ok.clone();
        wide.adaptive.max_spread = Some(4);
        assert_eq!(
            wide.validate().unwrap_err().to_string(),
            "adaptive max_spread = 4 needs 4 workers, but 2 are configured: set max_spread \
             from 2 to 2 or add workers"
        );
        // but not in the other modes
        wide.mode = Mode::Spray;
        assert_eq!(wide.validate(), Ok(()));
    }

    #[test]
    fn the_mode_reads_as_the_config_spells_it() {
        #[derive(serde::Deserialize)]
        struct C {
            distribution: Mode,
            scope: SprayScope,
        }
        let c: C = serde_json::from_str(r#"{"distribution": "adaptive", "scope": "all"}"#).unwrap();
        assert_eq!((c.distribution, c.scope), (Mode::Adaptive, SprayScope::All));
        assert!(serde_json::from_str::<Mode>(r#""rss""#).is_err());
        assert_eq!(Mode::Spray.to_string(), "spray");
    }

    #[test]
    fn flow_keeps_a_flow_on_its_home_worker() {
        let s = Steering::new(&DistributionConfig::new(Mode::Flow, 3)).unwrap();
        let mut rng = SplitMix(1);
        let mut per_worker = [0u32; 3];
        for _ in 0..30_000 {
            let h = rng.next_u64() as u32;
            let route = s.route(h, true);
            assert!(!route.numbered());
            let w = route.worker(0);
            assert_eq!(route.worker(12345), w, "the number does not matter");
            assert_eq!(w, home_worker(bucket_of(h, DEFAULT_BUCKETS), 3));
            per_worker[usize::from(w)] += 1;
        }
        // 4096 buckets over 3 workers: 1366, 1365, 1365
        for n in per_worker {
            assert!((9_500..10_500).contains(&n), "{per_worker:?}");
        }
    }

    #[test]
    fn spray_round_robins_tcp_and_keeps_other_protocols_home() {
        let cfg = DistributionConfig::new(Mode::Spray, 2);
        let s = Steering::new(&cfg).unwrap();
        let h = 0xdead_beef;
        let tcp = s.route(h, true);
        assert!(tcp.numbered());
        let picks: Vec<WorkerId> = (0..6).map(|seq| tcp.worker(seq)).collect();
        assert_eq!(picks, [0, 1, 0, 1, 0, 1]);
        let udp = s.route(h, false);
        assert_eq!(udp, Route::Flow(home_worker(bucket_of(h, 4096), 2)));
        let all = Steering::new(&DistributionConfig {
            scope: SprayScope::All,
            ..cfg
        })
        .unwrap();
        assert_eq!(all.route(h, false), Route::Spray { workers: 2 });
    }

    #[test]
    fn adaptive_spreads_only_the_buckets_it_was_told_to() {
        let cfg = DistributionConfig::new(Mode::Adaptive, 4);
        let mut s = Steering::new(&cfg).unwrap();
        let h = 0x1234_5007;
        let b = bucket_of(h, cfg.buckets);
        assert_eq!(s.route(h, true), Route::Flow(home_worker(b, 4)));
        let mut set = WorkerSet::one(home_worker(b, 4));
        set.push(2);
        s.apply(&adaptive::Change {
            bucket: b,
            workers: set,
        });
        let route = s.route(h, true);
        assert!(route.numbered());
        assert_eq!(
            (0..4).map(|seq| route.worker(seq)).collect::<Vec<_>>(),
            [3, 2, 3, 2]
        );
        assert!(!s.route(h, false).numbered(), "UDP is out of scope");
        assert!(!s.route(h ^ 1, true).numbered(), "another bucket");
        assert_eq!(s.workers_of(b), set);
    }

    #[test]
    fn worker_sets_keep_their_home_first() {
        let mut set = WorkerSet::one(5);
        assert!(!set.is_spread());
        set.push(1);
        set.push(7);
        assert_eq!(set.as_slice(), [5, 1, 7]);
        assert_eq!(format!("{set:?}"), "[5, 1, 7]");
        assert_eq!(set.pick(4), 1);
        let mut shorter = set;
        shorter.truncate(2);
        assert_eq!(shorter.as_slice(), [5, 1]);
        assert_ne!(shorter, set);
        shorter.truncate(0);
        assert_eq!(shorter.as_slice(), [5], "never empty");
        assert_eq!(
            shorter,
            WorkerSet::one(5),
            "what is past the end does not count"
        );
        assert_eq!(shorter.home(), 5);
    }
}
