//! Weighted Maglev consistent hashing (Eisenbud et al., NSDI 2016) for the
//! stateless fallback: when connection state is lost, a flow that hashes
//! into the same table finds the same DIP, and removing one DIP moves few
//! flows of the others.
//!
//! Each DIP d has a permutation of the table slots, offset(d) + j * skip(d)
//! mod M, with M prime so every skip walks all slots. DIPs take turns
//! claiming their next free preferred slot until the table is full. Weights
//! enter through credit: every round each DIP earns its weight, and claims
//! one slot per `max weight` of credit, so a DIP's share of the table is
//! proportional to its weight (within a slot or two). Weight 0 drains a DIP.
//!
//! The table depends only on the (DIP id, weight) set and M, never on input
//! order, so the controller and any other builder agree. Lookup is
//! `table[hash % M]`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::dispatch::awfd::DipId;
use crate::splitmix::splitmix64;

/// A prime comfortably above 100 x the DIPs of a large pool.
pub const DEFAULT_TABLE_SIZE: usize = 65_537;

/// Why a Maglev table cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaglevError {
    /// The table size must be prime (so every skip is a full permutation).
    NotPrime(usize),
    /// The table must have at least one slot per weighted DIP.
    TooSmall { size: usize, dips: usize },
    /// A DIP id appears twice.
    DuplicateDip(DipId),
}

impl fmt::Display for MaglevError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaglevError::NotPrime(m) => write!(
                f,
                "Maglev table size {m} is not prime; use a prime such as {DEFAULT_TABLE_SIZE}"
            ),
            MaglevError::TooSmall { size, dips } => write!(
                f,
                "Maglev table size {size} is smaller than the {dips} DIPs it must hold (use ~100x the DIP count)"
            ),
            MaglevError::DuplicateDip(d) => write!(f, "DIP id {d} appears twice"),
        }
    }
}

impl std::error::Error for MaglevError {}

/// True if `n` is prime (trial division; table sizes are small).
#[allow(clippy::manual_is_multiple_of)] // is_multiple_of is newer than the workspace MSRV
pub fn is_prime(n: usize) -> bool {
    if n < 2 {
        return false;
    }
    if n % 2 == 0 {
        return n == 2;
    }
    let mut d = 3;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 2;
    }
    true
}

/// A filled Maglev lookup table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Maglev {
    table: Vec<DipId>,
}

impl Maglev {
    /// Builds the table of prime size `size` from (DIP id, weight) pairs.
    /// With no DIP of positive weight the table is empty and every lookup
    /// is `None`.
    pub fn new(dips: &[(DipId, u32)], size: usize) -> Result<Maglev, MaglevError> {
        if !is_prime(size) {
            return Err(MaglevError::NotPrime(size));
        }
        let mut seen = BTreeSet::new();
        for &(d, _) in dips {
            if !seen.insert(d) {
                return Err(MaglevError::DuplicateDip(d));
            }
        }
        let mut live: Vec<(DipId, u64)> = dips
            .iter()
            .filter(|&&(_, w)| w > 0)
            .map(|&(d, w)| (d, u64::from(w)))
            .collect();
        if live.is_empty() {
            return Ok(Maglev { table: Vec::new() });
        }
        if live.len() > size {
            return Err(MaglevError::TooSmall {
                size,
                dips: live.len(),
            });
        }
        live.sort_unstable();
        let m = size as u64;
        let max_w = live.iter().map(|&(_, w)| w).max().unwrap_or(1);
        // Per DIP: current permutation position, skip, credit.
        let mut pos: Vec<u64> = Vec::with_capacity(live.len());
        let mut skip: Vec<u64> = Vec::with_capacity(live.len());
        for &(d, _) in &live {
            let h = splitmix64(u64::from(d) ^ 0x6d61_676c_6576_0001);
            let g = splitmix64(u64::from(d) ^ 0x6d61_676c_6576_0002);
            pos.push(h % m);
            skip.push(g % (m - 1) + 1);
        }
        let mut credit = vec![0u64; live.len()];
        const EMPTY: DipId = DipId::MAX;
        let mut table = vec![EMPTY; size];
        let mut filled = 0usize;
        'fill: loop {
            for i in 0..live.len() {
                credit[i] += live[i].1;
                while credit[i] >= max_w {
                    credit[i] -= max_w;
                    while table[pos[i] as usize] != EMPTY {
                        pos[i] = (pos[i] + skip[i]) % m;
                    }
                    table[pos[i] as usize] = live[i].0;
                    pos[i] = (pos[i] + skip[i]) % m;
                    filled += 1;
                    if filled == size {
                        break 'fill;
                    }
                }
            }
        }
        Ok(Maglev { table })
    }

    /// The DIP for a flow hash, `None` for an empty table.
    pub fn lookup(&self, hash: u32) -> Option<DipId> {
        if self.table.is_empty() {
            return None;
        }
        Some(self.table[hash as usize % self.table.len()])
    }

    /// The table, slot by slot.
    pub fn table(&self) -> &[DipId] {
        &self.table
    }

    /// How many slots each DIP holds.
    pub fn shares(&self) -> BTreeMap<DipId, usize> {
        let mut s = BTreeMap::new();
        for &d in &self.table {
            *s.entry(d).or_insert(0) += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_parameters_are_refused() {
        assert_eq!(Maglev::new(&[(1, 1)], 100), Err(MaglevError::NotPrime(100)));
        assert_eq!(
            Maglev::new(&[(1, 1), (2, 1), (3, 1)], 2),
            Err(MaglevError::TooSmall { size: 2, dips: 3 })
        );
        assert_eq!(
            Maglev::new(&[(1, 1), (1, 2)], 13),
            Err(MaglevError::DuplicateDip(1))
        );
        assert_eq!(Maglev::new(&[(1, 0)], 13).unwrap().lookup(5), None);
        assert!(is_prime(65_537) && !is_prime(65_535) && !is_prime(1));
    }

    #[test]
    fn table_ignores_input_order() {
        let a = Maglev::new(&[(1, 1), (2, 3), (7, 2)], 1009).unwrap();
        let b = Maglev::new(&[(7, 2), (1, 1), (2, 3)], 1009).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn each_dip_share_is_proportional_to_its_weight() {
        let mut rng = 0x1234_5678_u64;
        for _ in 0..20 {
            rng = splitmix64(rng);
            let n = 2 + (rng % 30) as usize;
            let dips: Vec<(DipId, u32)> = (0..n)
                .map(|i| {
                    rng = splitmix64(rng);
                    (1000 + i as u32 * 7, 1 + (rng % 8) as u32)
                })
                .collect();
            let size = 65_537;
            let t = Maglev::new(&dips, size).unwrap();
            let total: u32 = dips.iter().map(|d| d.1).sum();
            let shares = t.shares();
            for &(d, w) in &dips {
                let expect = size as f64 * f64::from(w) / f64::from(total);
                let got = shares[&d] as f64;
                // Every DIP claims ceil/floor of its credit: within n slots.
                assert!(
                    (got - expect).abs() <= n as f64 + 1.0,
                    "{d}: {got} vs {expect}"
                );
            }
        }
    }

    #[test]
    fn removing_a_dip_moves_few_other_slots() {
        let mut rng = 99u64;
        for n in [5usize, 10, 40] {
            let dips: Vec<(DipId, u32)> = (0..n as u32)
                .map(|i| {
                    rng = splitmix64(rng);
                    (i, 1 + (rng % 2) as u32)
                })
                .collect();
            let size = 65_537;
            let before = Maglev::new(&dips, size).unwrap();
            let gone = dips[n / 2].0;
            let rest: Vec<_> = dips.iter().copied().filter(|d| d.0 != gone).collect();
            let after = Maglev::new(&rest, size).unwrap();
            let mut moved = 0usize;
            for (b, a) in before.table().iter().zip(after.table()) {
                assert_ne!(*a, gone);
                if *b != gone && a != b {
                    moved += 1;
                }
            }
            // Maglev's bound is "a few percent" of the table, not zero.
            let frac = moved as f64 / size as f64;
            assert!(frac < 0.1, "n={n}: {frac}");
        }
    }

    #[test]
    fn lookup_is_table_at_hash_mod_size() {
        let t = Maglev::new(&[(3, 1), (4, 1)], 7).unwrap();
        for h in 0..50u32 {
            assert_eq!(t.lookup(h), Some(t.table()[h as usize % 7]));
        }
    }
}
