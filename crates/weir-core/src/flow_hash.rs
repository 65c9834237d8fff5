//! The flow hash, bit for bit the one in `bpf/lib/hash.h`: Murmur3-32 over
//! the ten little-endian words of `struct weir_flow_key`, and the rehash that
//! gives AWFD's second stage an independent draw.

use weir_abi::{weir_flow_key, AsBytes};

/// The seed the data plane uses unless configured otherwise ("weir").
pub const DEFAULT_SEED: u32 = 0x7765_6972;

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Murmur3-32 with `seed` over the little-endian words of `bytes` (a
/// multiple of 4 long), finished with `len` as the length
/// (`murmur3_block()` and `fmix32()` in bpf/lib/hash.h).
pub fn murmur3_32(bytes: &[u8], seed: u32, len: u32) -> u32 {
    let mut h = seed;
    for chunk in bytes.chunks_exact(4) {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(0xcc9e_2d51);
        k = k.rotate_left(15);
        k = k.wrapping_mul(0x1b87_3593);
        h ^= k;
        h = h.rotate_left(13);
        h = h.wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    fmix32(h ^ len)
}

/// Hash of a flow key, as `weir_flow_hash()` computes it in BPF.
pub fn flow_hash(key: &weir_flow_key, seed: u32) -> u32 {
    let bytes = key.as_bytes();
    murmur3_32(bytes, seed, bytes.len() as u32)
}

/// The stage-2 hash derived from a flow hash (`weir_rehash()` in BPF).
pub fn rehash(h: u32) -> u32 {
    fmix32(h ^ 0x9e37_79b9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference_on_known_input() {
        // Murmur3_x86_32 of 40 zero bytes with seed 0, from the reference
        // implementation (the mmh3 Python package): independent of this code.
        let key = weir_flow_key::default();
        assert_eq!(flow_hash(&key, 0), 0xc206_7ae9);
    }

    #[test]
    fn hash_depends_on_every_field() {
        let base = weir_flow_key::default();
        let h0 = flow_hash(&base, DEFAULT_SEED);
        let mut k = base;
        k.sport = 1;
        assert_ne!(flow_hash(&k, DEFAULT_SEED), h0);
        let mut k = base;
        k.dst[3] = 1;
        assert_ne!(flow_hash(&k, DEFAULT_SEED), h0);
        assert_ne!(flow_hash(&base, 1), h0);
    }
}
