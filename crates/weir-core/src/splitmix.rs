//! SplitMix64: the small, fast, deterministic generator and mixer weir uses
//! wherever it needs reproducible pseudo-random numbers from a seed (test
//! vectors, Maglev permutations, sketches, benchmarks).

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 output for state `x`: a well-mixed 64-bit hash of it.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The SplitMix64 generator, seeded by its state.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.0);
        self.0 = self.0.wrapping_add(GOLDEN);
        out
    }

    /// Uniform in [0, n) by multiply-shift (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // SplitMix64 seeded with 0, from the reference implementation
        // (Vigna, splitmix64.c): independent of this code.
        let mut r = SplitMix(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}
