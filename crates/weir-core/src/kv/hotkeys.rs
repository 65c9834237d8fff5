//! Hot-key detection for the in-switch cache, sans-IO: a count-min sketch
//! estimates how often each sampled key was requested, a small top-k table
//! keeps the heaviest candidates, and counts decay by half every `window`,
//! so popularity follows the workload. Time is passed in (nanoseconds on
//! any monotonic clock); nothing here reads a clock or does I/O.
//!
//! The `weir kv` loop feeds it the keys XDP samples
//! (`weir_dataplane::kv::LoadedKv::hot_key_samples`), calls [`HotKeys::tick`],
//! and installs [`HotKeys::plan`]'s `insert` keys into the cache (fetching
//! each value after taking a cache ticket) and evicts its `evict` keys.

use std::collections::{HashMap, HashSet};

use crate::splitmix::splitmix64;

/// Parameters of the detector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKeyConfig {
    /// Counters per sketch row (error ~ e / width of the sampled total).
    pub width: usize,
    /// Sketch rows (failure probability ~ e^-depth).
    pub depth: usize,
    /// Candidates kept (the most the cache will be asked to hold).
    pub k: usize,
    /// Counts halve every `window_ns`.
    pub window_ns: u64,
    /// A key is hot when its (decayed) estimate reaches this many samples.
    pub threshold: u64,
}

impl Default for HotKeyConfig {
    fn default() -> Self {
        HotKeyConfig {
            width: 4096,
            depth: 4,
            k: 256,
            window_ns: 1_000_000_000,
            threshold: 8,
        }
    }
}

fn key_hash(key: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// A count-min sketch: estimates never undercount.
#[derive(Debug, Clone)]
pub struct CountMin {
    width: usize,
    depth: usize,
    cells: Vec<u64>,
}

impl CountMin {
    pub fn new(width: usize, depth: usize) -> CountMin {
        let width = width.max(1);
        let depth = depth.max(1);
        CountMin {
            width,
            depth,
            cells: vec![0; width * depth],
        }
    }

    fn index(&self, row: usize, h: u64) -> usize {
        let x = splitmix64(h ^ (row as u64).wrapping_mul(0x5851_f42d_4c95_7f2d));
        row * self.width + (x % self.width as u64) as usize
    }

    /// Adds `n` to `key` and returns its new estimate.
    pub fn add(&mut self, key: &[u8], n: u64) -> u64 {
        let h = key_hash(key);
        let mut est = u64::MAX;
        for row in 0..self.depth {
            let i = self.index(row, h);
            self.cells[i] = self.cells[i].saturating_add(n);
            est = est.min(self.cells[i]);
        }
        est
    }

    pub fn estimate(&self, key: &[u8]) -> u64 {
        let h = key_hash(key);
        (0..self.depth)
            .map(|row| self.cells[self.index(row, h)])
            .min()
            .unwrap_or(0)
    }

    /// Halves every counter (exponential decay).
    pub fn halve(&mut self) {
        for c in &mut self.cells {
            *c >>= 1;
        }
    }
}

/// What the cache should change to follow the hot set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotPlan {
    /// Hot keys not cached yet, hottest first.
    pub insert: Vec<Vec<u8>>,
    /// Cached keys that are no longer hot.
    pub evict: Vec<Vec<u8>>,
}

/// The detector: count-min sketch + top-k with time decay.
#[derive(Debug, Clone)]
pub struct HotKeys {
    cfg: HotKeyConfig,
    sketch: CountMin,
    top: HashMap<Vec<u8>, u64>,
    window_start: u64,
    observed: u64,
}

impl HotKeys {
    pub fn new(cfg: HotKeyConfig, now_ns: u64) -> HotKeys {
        HotKeys {
            sketch: CountMin::new(cfg.width, cfg.depth),
            top: HashMap::new(),
            window_start: now_ns,
            observed: 0,
            cfg,
        }
    }

    pub fn config(&self) -> &HotKeyConfig {
        &self.cfg
    }

    /// Samples seen since creation.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// One sampled request for `key` at `now_ns`.
    pub fn observe(&mut self, key: &[u8], now_ns: u64) {
        self.tick(now_ns);
        self.observed += 1;
        let est = self.sketch.add(key, 1);
        if let Some(c) = self.top.get_mut(key) {
            *c = est;
            return;
        }
        if self.top.len() < self.cfg.k {
            self.top.insert(key.to_vec(), est);
            return;
        }
        // replace the lightest candidate if this key is heavier
        if let Some((min_key, min)) = self
            .top
            .iter()
            .min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)))
            .map(|(k, v)| (k.clone(), *v))
        {
            if est > min {
                self.top.remove(&min_key);
                self.top.insert(key.to_vec(), est);
            }
        }
    }

    /// Applies the decay for every whole window that passed by `now_ns`.
    pub fn tick(&mut self, now_ns: u64) {
        if self.cfg.window_ns == 0 || now_ns < self.window_start {
            return;
        }
        let windows = (now_ns - self.window_start) / self.cfg.window_ns;
        if windows == 0 {
            return;
        }
        for _ in 0..windows.min(64) {
            self.sketch.halve();
        }
        let shift = windows.min(63) as u32;
        self.top.retain(|_, c| {
            *c >>= shift;
            *c > 0
        });
        self.window_start += windows * self.cfg.window_ns;
    }

    /// Estimated (decayed) samples of `key`.
    pub fn estimate(&self, key: &[u8]) -> u64 {
        self.sketch.estimate(key)
    }

    /// The candidates, heaviest first (ties by key, so the order is stable).
    pub fn top(&self) -> Vec<(Vec<u8>, u64)> {
        let mut v: Vec<_> = self.top.iter().map(|(k, c)| (k.clone(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Candidates at or over the threshold, heaviest first.
    pub fn hot(&self) -> Vec<Vec<u8>> {
        self.top()
            .into_iter()
            .filter(|(_, c)| *c >= self.cfg.threshold)
            .map(|(k, _)| k)
            .collect()
    }

    /// What to insert and evict, given the keys cached now (at most
    /// `capacity` keys stay cached).
    pub fn plan(&self, cached: &HashSet<Vec<u8>>, capacity: usize) -> HotPlan {
        let hot: Vec<Vec<u8>> = self.hot().into_iter().take(capacity).collect();
        let hot_set: HashSet<&Vec<u8>> = hot.iter().collect();
        let mut evict: Vec<Vec<u8>> = cached
            .iter()
            .filter(|k| !hot_set.contains(k))
            .cloned()
            .collect();
        evict.sort();
        let insert = hot.into_iter().filter(|k| !cached.contains(k)).collect();
        HotPlan { insert, evict }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn cfg() -> HotKeyConfig {
        HotKeyConfig {
            width: 1024,
            depth: 4,
            k: 16,
            window_ns: SEC,
            threshold: 20,
        }
    }

    /// A deterministic skewed stream: key i appears about n / (i + 1) times.
    fn zipf_stream(keys: usize, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut x = 1u64;
        let h: f64 = (1..=keys).map(|i| 1.0 / i as f64).sum();
        for _ in 0..n {
            x = splitmix64(x);
            let mut u = (x >> 11) as f64 / (1u64 << 53) as f64 * h;
            let mut i = 0;
            while i + 1 < keys {
                u -= 1.0 / (i + 1) as f64;
                if u <= 0.0 {
                    break;
                }
                i += 1;
            }
            out.push(format!("key:{i}").into_bytes());
        }
        out
    }

    #[test]
    fn count_min_never_undercounts() {
        let mut cm = CountMin::new(64, 3);
        let stream = zipf_stream(500, 5000);
        let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
        for k in &stream {
            cm.add(k, 1);
            *exact.entry(k.clone()).or_default() += 1;
        }
        for (k, n) in &exact {
            assert!(cm.estimate(k) >= *n, "{k:?}");
        }
        // with room to spare, the heavy key is exact
        let mut big = CountMin::new(1 << 16, 4);
        for k in &stream {
            big.add(k, 1);
        }
        assert_eq!(big.estimate(b"key:0"), exact[&b"key:0".to_vec()]);
        assert_eq!(big.estimate(b"never"), 0);
    }

    #[test]
    fn finds_the_heavy_keys_of_a_skewed_stream() {
        let mut hk = HotKeys::new(cfg(), 0);
        for (i, k) in zipf_stream(2000, 20_000).iter().enumerate() {
            hk.observe(k, i as u64); // all within one window
        }
        let top: Vec<Vec<u8>> = hk.top().into_iter().take(5).map(|(k, _)| k).collect();
        for i in 0..5 {
            assert!(
                top.contains(&format!("key:{i}").into_bytes()),
                "key:{i} in {:?}",
                top.iter()
                    .map(|k| String::from_utf8_lossy(k))
                    .collect::<Vec<_>>()
            );
        }
        let hot = hk.hot();
        assert!(hot.len() <= 16);
        assert_eq!(hot[0], b"key:0".to_vec());
        assert_eq!(hk.observed(), 20_000);
    }

    #[test]
    fn counts_decay_with_time_passed_in() {
        let mut hk = HotKeys::new(cfg(), 100);
        for _ in 0..40 {
            hk.observe(b"hot", 100);
        }
        assert_eq!(hk.estimate(b"hot"), 40);
        assert_eq!(hk.hot(), vec![b"hot".to_vec()]);
        hk.tick(100 + SEC - 1);
        assert_eq!(hk.estimate(b"hot"), 40, "no decay inside the window");
        hk.tick(100 + SEC);
        assert_eq!(hk.estimate(b"hot"), 20);
        assert_eq!(hk.hot(), vec![b"hot".to_vec()]);
        hk.tick(100 + 2 * SEC);
        assert_eq!(hk.estimate(b"hot"), 10);
        assert!(hk.hot().is_empty(), "below the threshold after decay");
        hk.tick(100 + 70 * SEC);
        assert_eq!(hk.estimate(b"hot"), 0);
        assert!(hk.top().is_empty(), "decayed candidates leave the table");
        // time going backwards is ignored
        hk.tick(5);
        hk.observe(b"x", 5);
        assert_eq!(hk.estimate(b"x"), 1);
    }

    #[test]
    fn a_new_hot_key_displaces_a_cold_candidate() {
        let mut hk = HotKeys::new(
            HotKeyConfig {
                k: 2,
                threshold: 1,
                ..cfg()
            },
            0,
        );
        hk.observe(b"a", 0);
        hk.observe(b"b", 0);
        for _ in 0..5 {
            hk.observe(b"c", 0);
        }
        let keys: Vec<Vec<u8>> = hk.top().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0], b"c".to_vec());
    }

    #[test]
    fn plan_inserts_hot_and_evicts_cold() {
        let mut hk = HotKeys::new(
            HotKeyConfig {
                threshold: 3,
                ..cfg()
            },
            0,
        );
        for _ in 0..10 {
            hk.observe(b"h1", 0);
        }
        for _ in 0..5 {
            hk.observe(b"h2", 0);
        }
        hk.observe(b"cold", 0);
        let cached: HashSet<Vec<u8>> = [b"h2".to_vec(), b"old".to_vec()].into();
        let p = hk.plan(&cached, 10);
        assert_eq!(p.insert, vec![b"h1".to_vec()]);
        assert_eq!(p.evict, vec![b"old".to_vec()]);
        // capacity 1 keeps only the hottest
        let p = hk.plan(&cached, 1);
        assert_eq!(p.insert, vec![b"h1".to_vec()]);
        assert_eq!(p.evict, vec![b"h2".to_vec(), b"old".to_vec()]);
    }
}
