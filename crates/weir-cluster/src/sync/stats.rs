//! Connection sync's counters, shared by its threads (relaxed atomics), and
//! the lag histogram: how long after a peer installed a connection this
//! node installed it (the sync window).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The lag histogram is log-linear: lags under 8 µs have a bucket each,
/// then every power of two is split into 8 buckets, so a quantile is known
/// to within 12.5%. The last bucket holds everything longer (hours).
const SUB: u64 = 8;
const BUCKETS: usize = 256;

#[derive(Debug, Default)]
pub struct Stats {
    pub sent_datagrams: AtomicU64,
    pub sent_records: AtomicU64,
    /// Datagrams the socket refused (a full buffer, an unreachable peer).
    pub send_errors: AtomicU64,
    pub received_datagrams: AtomicU64,
    pub received_records: AtomicU64,
    /// Records put in the connection table.
    pub installed: AtomicU64,
    /// Records whose connection the table already held (this node's own
    /// entry wins).
    pub present: AtomicU64,
    /// Records for a VIP or DIP this node does not have.
    pub unknown: AtomicU64,
    /// Records refused because peers' entries filled their share of the table.
    pub dropped_full: AtomicU64,
    /// Records the connection table refused (a map error; logged).
    pub install_errors: AtomicU64,
    pub dropped_malformed: AtomicU64,
    pub dropped_oversized: AtomicU64,
    pub dropped_unauthenticated: AtomicU64,
    pub dropped_replayed: AtomicU64,
    /// Bulk requests this node answered, and the records it sent in them.
    pub bulks_served: AtomicU64,
    pub bulk_records_sent: AtomicU64,
    /// Bulk requests that came while one was being served.
    pub bulks_refused: AtomicU64,
    /// Challenges sent to members that asked for a bulk (`gate`).
    pub bulk_challenges: AtomicU64,
    /// Bulk requests and proofs refused (`gate::Refusal`), by reason.
    pub bulk_refused_unknown_member: AtomicU64,
    pub bulk_refused_address_mismatch: AtomicU64,
    pub bulk_refused_stale_challenge: AtomicU64,
    pub bulk_refused_rate_limited: AtomicU64,
    lag: Histogram,
    lag_max_us: AtomicU64,
    lag_sum_us: AtomicU64,
}

/// The lag histogram's counts, one per bucket.
#[derive(Debug)]
struct Histogram(Vec<AtomicU64>);

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram((0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }
}

fn bucket_of(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let octave = u64::from(u64::BITS - 1 - us.leading_zeros()); // >= 3
    let sub = (us >> (octave - 3)) & (SUB - 1);
    ((SUB + (octave - 3) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The (exclusive) upper bound of bucket `i`, in µs.
fn bucket_top(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i + 1;
    }
    let (octave, sub) = (3 + (i - SUB) / SUB, (i - SUB) % SUB);
    (SUB + sub + 1) << (octave - 3)
}

impl Stats {
    pub fn add(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self, c: &AtomicU64) {
        self.add(c, 1);
    }

    /// One live record's lag: from its install on the peer to its install here.
    pub fn lag(&self, us: u64) {
        self.lag.0[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        self.lag_max_us.fetch_max(us, Ordering::Relaxed);
        self.lag_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Counters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let hist: Vec<u64> = self.lag.0.iter().map(get).collect();
        let n: u64 = hist.iter().sum();
        let quantile = |q: f64| -> Option<u64> {
            if n == 0 {
                return None;
            }
            let want = ((n as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            hist.iter().enumerate().find_map(|(i, c)| {
                seen += c;
                (seen >= want).then(|| bucket_top(i))
            })
        };
        Counters {
            sent_datagrams: get(&self.sent_datagrams),
            sent_records: get(&self.sent_records),
            send_errors: get(&self.send_errors),
            received_datagrams: get(&self.received_datagrams),
            received_records: get(&self.received_records),
            installed: get(&self.installed),
            present: get(&self.present),
            unknown: get(&self.unknown),
            dropped_full: get(&self.dropped_full),
            install_errors: get(&self.install_errors),
            dropped_malformed: get(&self.dropped_malformed),
            dropped_oversized: get(&self.dropped_oversized),
            dropped_unauthenticated: get(&self.dropped_unauthenticated),
            dropped_replayed: get(&self.dropped_replayed),
            bulks_served: get(&self.bulks_served),
            bulk_records_sent: get(&self.bulk_records_sent),
            bulks_refused: get(&self.bulks_refused),
            bulk_challenges: get(&self.bulk_challenges),
            bulk_refused_unknown_member: get(&self.bulk_refused_unknown_member),
            bulk_refused_address_mismatch: get(&self.bulk_refused_address_mismatch),
            bulk_refused_stale_challenge: get(&self.bulk_refused_stale_challenge),
            bulk_refused_rate_limited: get(&self.bulk_refused_rate_limited),
            lag_samples: n,
            lag_mean_us: (n > 0).then(|| get(&self.lag_sum_us) as f64 / n as f64),
            lag_p50_us: quantile(0.5),
            lag_p99_us: quantile(0.99),
            lag_max_us: (n > 0).then(|| get(&self.lag_max_us)),
            announced: 0,
            announce_lost: 0,
            peer_entries: 0,
        }
    }
}

/// What `weir status`, the API and `/metrics` show of connection sync.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub sent_datagrams: u64,
    pub sent_records: u64,
    pub send_errors: u64,
    pub received_datagrams: u64,
    pub received_records: u64,
    pub installed: u64,
    pub present: u64,
    pub unknown: u64,
    pub dropped_full: u64,
    pub install_errors: u64,
    pub dropped_malformed: u64,
    pub dropped_oversized: u64,
    pub dropped_unauthenticated: u64,
    pub dropped_replayed: u64,
    pub bulks_served: u64,
    pub bulk_records_sent: u64,
    pub bulks_refused: u64,
    /// Challenges sent to members that asked for a bulk, and the bulk
    /// requests and proofs refused, by reason (absent from an older node's
    /// status: zero).
    #[serde(default)]
    pub bulk_challenges: u64,
    #[serde(default)]
    pub bulk_refused_unknown_member: u64,
    #[serde(default)]
    pub bulk_refused_address_mismatch: u64,
    #[serde(default)]
    pub bulk_refused_stale_challenge: u64,
    #[serde(default)]
    pub bulk_refused_rate_limited: u64,
    /// Live records whose lag was measured.
    pub lag_samples: u64,
    pub lag_mean_us: Option<f64>,
    /// Upper bounds of the histogram buckets the quantiles fall in.
    pub lag_p50_us: Option<u64>,
    pub lag_p99_us: Option<u64>,
    pub lag_max_us: Option<u64>,
    /// Installs the data plane put in its ring, and those it lost (ring full).
    pub announced: u64,
    pub announce_lost: u64,
    /// Peers' entries this node holds (at most `sync_max_entries`).
    pub peer_entries: u64,
}

impl Counters {
    /// Every datagram or record dropped, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_full
            + self.install_errors
            + self.dropped_malformed
            + self.dropped_oversized
            + self.dropped_unauthenticated
            + self.dropped_replayed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_lag_within_an_eighth() {
        for us in (0..100_000u64).chain([1 << 20, 3 << 30, u64::MAX / 2]) {
            let b = bucket_of(us);
            let top = bucket_top(b);
            if b < BUCKETS - 1 {
                assert!(us < top, "{us} not below its bucket's top {top}");
                assert!(b == 0 || us >= bucket_top(b - 1), "{us} above bucket {b}");
                assert!(top - us <= us / 8 + 1, "{us}: bucket too wide ({top})");
            }
        }
    }

    #[test]
    fn lag_quantiles_come_from_the_histogram() {
        let s = Stats::default();
        assert_eq!(s.snapshot().lag_p50_us, None);
        for us in [100, 120, 125, 140, 5000] {
            s.lag(us);
        }
        let c = s.snapshot();
        assert_eq!(c.lag_samples, 5);
        assert_eq!(
            c.lag_p50_us,
            Some(128),
            "the third of five, 125, is in [120, 128)"
        );
        assert_eq!(c.lag_p99_us, Some(5120), "5000 is in [4608, 5120)");
        assert_eq!(c.lag_max_us, Some(5000));
        assert!((c.lag_mean_us.unwrap() - 1097.0).abs() < 1e-9);
        s.inc(&s.dropped_replayed);
        s.add(&s.dropped_full, 2);
        assert_eq!(s.snapshot().dropped(), 3);
    }
}
