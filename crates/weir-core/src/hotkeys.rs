//! Hot-key detection, sans-IO: a count-min sketch estimates how often each
//! key was seen, a bounded top-k table keeps the heaviest candidates, and
//! counts decay by half every `window`, so popularity follows the workload.
//! Time is passed in (nanoseconds on any monotonic clock); nothing here
//! reads a clock or does I/O.
//!
//! Generic over the key: the kv cache counts memcached keys (`Vec<u8>`, the
//! default), the software tier's offload decision (`crate::offload`) counts
//! connection keys. Both sit on a per-packet or per-sample path, so an
//! observation costs one key hash, `depth` sketch cells and one table
//! lookup; the top-k table is an indexed min-heap, so admitting a heavier
//! key is O(log k), never a scan of the table.
//!
//! The `weir kv` loop feeds it the keys XDP samples
//! (`weir_kv::xdp::LoadedKv::hot_key_samples`), calls [`HotKeys::tick`],
//! and installs [`HotKeys::plan`]'s `insert` keys into the cache (fetching
//! each value after taking a cache ticket) and evicts its `evict` keys.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};

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
    /// Counts halve every `window_ns`; 0 = only when the caller calls
    /// [`HotKeys::halve`].
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

/// The seed [`HotKeys::new`] and [`CountMin::new`] use: deterministic runs.
pub const DEFAULT_SEED: u64 = 0x686f_745f_6b65_7973; // "hot_keys"

/// A seeded [`BuildHasher`] for the sketch and the candidate table: a
/// multiply-rotate word mix (fast on the fixed-size integer fields of
/// connection keys) finished by SplitMix64. The seed keeps senders from
/// choosing keys that collide; it is not a MAC, and both tables are bounded,
/// so a collision costs accuracy, never memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededHash(pub u64);

impl BuildHasher for SeededHash {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

/// The hasher [`SeededHash`] builds.
#[derive(Debug, Clone)]
pub struct KeyHasher(u64);

impl KeyHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            // the length in the (otherwise zero) top byte: "a" != "a\0"
            b[7] = rest.len() as u8;
            self.mix(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        splitmix64(self.0)
    }
}

/// `x` scaled into [0, n) by multiply-shift (no division).
#[inline]
fn reduce(x: u64, n: usize) -> usize {
    ((u128::from(x) * n as u128) >> 64) as usize
}

/// A count-min sketch: estimates never undercount.
#[derive(Debug, Clone)]
pub struct CountMin {
    width: usize,
    depth: usize,
    cells: Vec<u64>,
    hasher: SeededHash,
}

impl CountMin {
    pub fn new(width: usize, depth: usize) -> CountMin {
        CountMin::with_seed(width, depth, DEFAULT_SEED)
    }

    pub fn with_seed(width: usize, depth: usize, seed: u64) -> CountMin {
        let width = width.max(1);
        let depth = depth.max(1);
        CountMin {
            width,
            depth,
            cells: vec![0; width * depth],
            hasher: SeededHash(seed),
        }
    }

    /// The rows' cells of a key hash, by double hashing (Kirsch and
    /// Mitzenmacher): one hash gives every row's index.
    #[inline]
    fn cells_of(&self, h: u64) -> impl Iterator<Item = usize> {
        let step = splitmix64(h) | 1;
        let width = self.width;
        (0..self.depth).map(move |row| {
            row * width + reduce(h.wrapping_add((row as u64).wrapping_mul(step)), width)
        })
    }

    /// Adds `n` to `key` and returns its new estimate.
    pub fn add<Q: Hash + ?Sized>(&mut self, key: &Q, n: u64) -> u64 {
        let h = self.hasher.hash_one(key);
        let mut est = u64::MAX;
        for i in self.cells_of(h) {
            let c = &mut self.cells[i];
            *c = c.saturating_add(n);
            est = est.min(*c);
        }
        est
    }

    pub fn estimate<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        let h = self.hasher.hash_one(key);
        self.cells_of(h).map(|i| self.cells[i]).min().unwrap_or(0)
    }

    /// Halves every counter `times` times (exponential decay).
    pub fn decay(&mut self, times: u32) {
        for c in &mut self.cells {
            *c = c.checked_shr(times).unwrap_or(0);
        }
    }

    /// Halves every counter once.
    pub fn halve(&mut self) {
        self.decay(1);
    }
}

/// One candidate: its key, count and place in the heap.
#[derive(Debug, Clone)]
struct Slot<K> {
    key: K,
    count: u64,
    heap_pos: usize,
}

/// The top-k candidates: an indexed binary min-heap over `slots`, so the
/// lightest candidate is at `heap[0]` and a count changes in O(log k).
/// `index` maps a key to its slot; slots never move, only heap positions.
#[derive(Debug, Clone)]
struct TopK<K> {
    k: usize,
    slots: Vec<Slot<K>>,
    heap: Vec<usize>,
    index: HashMap<K, usize, SeededHash>,
}

impl<K: Hash + Eq + Clone> TopK<K> {
    fn new(k: usize, hasher: SeededHash) -> TopK<K> {
        TopK {
            k,
            slots: Vec::with_capacity(k),
            heap: Vec::with_capacity(k),
            index: HashMap::with_capacity_and_hasher(k, hasher),
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn count_at(&self, heap_pos: usize) -> u64 {
        self.slots[self.heap[heap_pos]].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.slots[self.heap[a]].heap_pos = a;
        self.slots[self.heap[b]].heap_pos = b;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.count_at(l) < self.count_at(least) {
                least = l;
            }
            if r < self.heap.len() && self.count_at(r) < self.count_at(least) {
                least = r;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }

    fn set_count(&mut self, slot: usize, count: u64) {
        let old = self.slots[slot].count;
        self.slots[slot].count = count;
        let pos = self.slots[slot].heap_pos;
        if count > old {
            self.sift_down(pos);
        } else {
            self.sift_up(pos);
        }
    }

    /// Records `count` for `key`: updates a candidate, adds one while there
    /// is room, or replaces the lightest candidate if `key` is heavier.
    fn offer<Q>(&mut self, key: &Q, count: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(&slot) = self.index.get(key) {
            self.set_count(slot, count);
            return;
        }
        if self.k == 0 {
            return;
        }
        if self.slots.len() < self.k {
            let slot = self.slots.len();
            self.slots.push(Slot {
                key: key.to_owned(),
                count,
                heap_pos: self.heap.len(),
            });
            self.heap.push(slot);
            self.index.insert(key.to_owned(), slot);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        let slot = self.heap[0];
        if count <= self.slots[slot].count {
            return;
        }
        let old = std::mem::replace(&mut self.slots[slot].key, key.to_owned());
        self.index.remove::<K>(&old);
        self.index.insert(key.to_owned(), slot);
        self.slots[slot].count = count;
        self.sift_down(0);
    }

    fn get<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index.get(key).map(|&slot| self.slots[slot].count)
    }

    /// Halves every count `times` times and drops the candidates that reach
    /// zero. Halving keeps the order, so the heap is rebuilt only when some
    /// candidate leaves.
    fn decay(&mut self, times: u32) {
        for s in &mut self.slots {
            s.count = s.count.checked_shr(times).unwrap_or(0);
        }
        if self.slots.iter().all(|s| s.count > 0) {
            return;
        }
        let kept: Vec<Slot<K>> = std::mem::take(&mut self.slots)
            .into_iter()
            .filter(|s| s.count > 0)
            .collect();
        self.heap.clear();
        self.index.clear();
        for (i, mut s) in kept.into_iter().enumerate() {
            s.heap_pos = i;
            self.heap.push(i);
            self.index.insert(s.key.clone(), i);
            self.slots.push(s);
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&K, u64)> {
        self.slots.iter().map(|s| (&s.key, s.count))
    }
}

/// What the cache should change to follow the hot set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotPlan<K = Vec<u8>> {
    /// Hot keys not cached yet, hottest first.
    pub insert: Vec<K>,
    /// Cached keys that are no longer hot.
    pub evict: Vec<K>,
}

/// The detector: count-min sketch + top-k with time decay.
#[derive(Debug, Clone)]
pub struct HotKeys<K = Vec<u8>> {
    cfg: HotKeyConfig,
    sketch: CountMin,
    top: TopK<K>,
    window_start: u64,
    observed: u64,
}

impl<K: Hash + Eq + Clone> HotKeys<K> {
    pub fn new(cfg: HotKeyConfig, now_ns: u64) -> HotKeys<K> {
        HotKeys::with_seed(cfg, DEFAULT_SEED, now_ns)
    }

    /// A detector whose hashes are keyed by `seed` (pick it at random where
    /// senders choose the keys).
    pub fn with_seed(cfg: HotKeyConfig, seed: u64, now_ns: u64) -> HotKeys<K> {
        HotKeys {
            sketch: CountMin::with_seed(cfg.width, cfg.depth, seed),
            top: TopK::new(cfg.k, SeededHash(splitmix64(seed))),
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
    pub fn observe<Q>(&mut self, key: &Q, now_ns: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.tick(now_ns);
        self.observed += 1;
        let est = self.sketch.add(key, 1);
        self.top.offer(key, est);
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
        self.decay(windows.min(64) as u32);
        self.window_start += windows * self.cfg.window_ns;
    }

    /// Halves every count now (for callers that decay on their own beat,
    /// with `window_ns` 0).
    pub fn halve(&mut self) {
        self.decay(1);
    }

    fn decay(&mut self, times: u32) {
        self.sketch.decay(times);
        self.top.decay(times);
    }

    /// Estimated (decayed) samples of `key`.
    pub fn estimate<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.sketch.estimate(key)
    }

    /// The candidate count of `key`, if it is a candidate.
    pub fn candidate<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.top.get(key)
    }

    /// The candidates and their counts, in no particular order.
    pub fn candidates(&self) -> impl Iterator<Item = (&K, u64)> {
        self.top.iter()
    }

    /// How many candidates there are (at most `k`).
    pub fn len(&self) -> usize {
        self.top.len()
    }

    pub fn is_empty(&self) -> bool {
        self.top.len() == 0
    }
}

impl<K: Hash + Eq + Clone + Ord> HotKeys<K> {
    /// The candidates, heaviest first (ties by key, so the order is stable).
    pub fn top(&self) -> Vec<(K, u64)> {
        let mut v: Vec<_> = self.top.iter().map(|(k, c)| (k.clone(), c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Candidates at or over the threshold, heaviest first.
    pub fn hot(&self) -> Vec<K> {
        self.top()
            .into_iter()
            .filter(|(_, c)| *c >= self.cfg.threshold)
            .map(|(k, _)| k)
            .collect()
    }

    /// What to insert and evict, given the keys cached now (at most
    /// `capacity` keys stay cached).
    pub fn plan<S: BuildHasher>(&self, cached: &HashSet<K, S>, capacity: usize) -> HotPlan<K> {
        let hot: Vec<K> = self.hot().into_iter().take(capacity).collect();
        let hot_set: HashSet<&K> = hot.iter().collect();
        let mut evict: Vec<K> = cached
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
    use crate::splitmix::SplitMix;

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

    /// The heap invariant and the index agree with the slots.
    fn check_top<K: Hash + Eq + Clone + std::fmt::Debug>(t: &TopK<K>) {
        assert!(t.len() <= t.k);
        assert_eq!(t.heap.len(), t.slots.len());
        assert_eq!(t.index.len(), t.slots.len());
        for (pos, &slot) in t.heap.iter().enumerate() {
            assert_eq!(t.slots[slot].heap_pos, pos);
            assert_eq!(t.index[&t.slots[slot].key], slot);
            if pos > 0 {
                assert!(t.count_at((pos - 1) / 2) <= t.count_at(pos), "heap order");
            }
        }
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
    fn a_borrowed_key_hashes_like_the_owned_one() {
        // The kv loop observes `&Vec<u8>`, tests and callers may pass `&[u8]`.
        let s = SeededHash(7);
        assert_eq!(s.hash_one(b"abc".to_vec()), s.hash_one(&b"abc"[..]));
        let raw = |bytes: &[u8]| {
            let mut h = s.build_hasher();
            h.write(bytes);
            h.finish()
        };
        assert_ne!(raw(b"a"), raw(b"a\0"), "a short tail's length counts");
        assert_ne!(raw(b"12345678"), raw(b"12345678\0"));
        assert_ne!(SeededHash(8).hash_one(&b"abc"[..]), s.hash_one(&b"abc"[..]));
    }

    #[test]
    fn finds_the_heavy_keys_of_a_skewed_stream() {
        let mut hk = HotKeys::new(cfg(), 0);
        for (i, k) in zipf_stream(2000, 20_000).iter().enumerate() {
            hk.observe(k, i as u64); // all within one window
        }
        check_top(&hk.top);
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
    fn works_for_integer_keys() {
        let mut hk: HotKeys<u64> = HotKeys::with_seed(
            HotKeyConfig {
                k: 4,
                window_ns: 0,
                threshold: 1,
                ..cfg()
            },
            99,
            0,
        );
        for i in 0..1000u64 {
            hk.observe(&(i % 50), 0); // 20 each
            hk.observe(&7, 0); // 1020 in all
        }
        assert_eq!(hk.top()[0], (7, 1020));
        assert_eq!(hk.candidate(&7), Some(1020));
        assert_eq!(hk.len(), 4);
        hk.tick(u64::MAX); // window 0: no time decay
        assert_eq!(hk.candidate(&7), Some(1020));
        hk.halve();
        assert_eq!(hk.candidate(&7), Some(510));
        assert_eq!(hk.estimate(&7), 510);
    }

    #[test]
    fn counts_decay_with_time_passed_in() {
        let mut hk = HotKeys::new(cfg(), 100);
        let key = &b"hot"[..];
        for _ in 0..40 {
            hk.observe(key, 100);
        }
        assert_eq!(hk.estimate(key), 40);
        assert_eq!(hk.hot(), vec![b"hot".to_vec()]);
        hk.tick(100 + SEC - 1);
        assert_eq!(hk.estimate(key), 40, "no decay inside the window");
        hk.tick(100 + SEC);
        assert_eq!(hk.estimate(key), 20);
        assert_eq!(hk.hot(), vec![b"hot".to_vec()]);
        hk.tick(100 + 2 * SEC);
        assert_eq!(hk.estimate(key), 10);
        assert!(hk.hot().is_empty(), "below the threshold after decay");
        hk.tick(100 + 70 * SEC);
        assert_eq!(hk.estimate(key), 0);
        assert!(hk.top().is_empty(), "decayed candidates leave the table");
        // time going backwards is ignored
        hk.tick(5);
        hk.observe(&b"x"[..], 5);
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
        hk.observe(&b"a"[..], 0);
        hk.observe(&b"b"[..], 0);
        for _ in 0..5 {
            hk.observe(&b"c"[..], 0);
        }
        let keys: Vec<Vec<u8>> = hk.top().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0], b"c".to_vec());
    }

    #[test]
    fn the_heap_stays_consistent_under_random_streams_and_decay() {
        for seed in 0..20u64 {
            let mut rng = SplitMix(seed);
            let k = 1 + rng.below(32) as usize;
            let mut hk: HotKeys<u32> = HotKeys::with_seed(
                HotKeyConfig {
                    width: 256,
                    k,
                    window_ns: 0,
                    ..cfg()
                },
                seed,
                0,
            );
            let mut exact: HashMap<u32, u64> = HashMap::new();
            for step in 0..3000 {
                // half the traffic on 4 keys, half spread over 500
                let key = if rng.below(2) == 0 {
                    rng.below(4) as u32
                } else {
                    rng.below(500) as u32
                };
                hk.observe(&key, 0);
                *exact.entry(key).or_default() += 1;
                if step % 1000 == 999 {
                    hk.halve();
                    exact.values_mut().for_each(|c| *c /= 2);
                }
            }
            check_top(&hk.top);
            for (key, count) in hk.candidates() {
                assert!(count <= hk.estimate(key), "candidate counts are estimates");
                assert!(count >= exact[key], "estimates never undercount");
                assert!(count > 0, "zero counts leave the table");
            }
            if k >= 4 {
                let mut heavy: Vec<u32> = hk.top().into_iter().take(4).map(|(k, _)| k).collect();
                heavy.sort();
                assert_eq!(heavy, vec![0, 1, 2, 3], "seed {seed}");
            }
        }
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
            hk.observe(&b"h1"[..], 0);
        }
        for _ in 0..5 {
            hk.observe(&b"h2"[..], 0);
        }
        hk.observe(&b"cold"[..], 0);
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
