//! The alias table weir_gen draws Zipf-distributed flows from: flow k (0 is
//! the most popular) has probability (k + 1)^-s / H(n, s). Vose's alias
//! method makes every draw two random numbers and one table read, whatever
//! the number of flows.

use crate::skel::gen::types::weir_gen_alias;

/// The Zipf(s) alias table over `n` flows (n >= 1, s >= 0 finite).
pub fn alias_table(n: u32, s: f64) -> Vec<weir_gen_alias> {
    let weights: Vec<f64> = (1..=n).map(|rank| f64::from(rank).powf(-s)).collect();
    let total: f64 = weights.iter().sum();
    // Scaled so the mean column holds exactly 1.
    let mut p: Vec<f64> = weights.iter().map(|w| w * f64::from(n) / total).collect();
    let mut table: Vec<weir_gen_alias> = (0..n)
        .map(|k| weir_gen_alias {
            keep: u32::MAX,
            alias: k,
        })
        .collect();
    let (mut small, mut large): (Vec<u32>, Vec<u32>) = (0..n).partition(|&k| p[k as usize] < 1.0);
    while let (Some(&s_k), Some(&l_k)) = (small.last(), large.last()) {
        small.pop();
        let (sk, lk) = (s_k as usize, l_k as usize);
        table[sk] = weir_gen_alias {
            keep: threshold(p[sk]),
            alias: l_k,
        };
        // The large column gives away what fills the small one.
        p[lk] -= 1.0 - p[sk];
        if p[lk] < 1.0 {
            large.pop();
            small.push(l_k);
        }
    }
    // What is left holds 1 up to rounding: keep itself (the default entry).
    table
}

/// `keep` for probability p in [0, 1): kept when a uniform u32 is below it.
fn threshold(p: f64) -> u32 {
    (p * 4_294_967_296.0).clamp(0.0, f64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probability of every flow under the table, as weir_gen draws it.
    fn drawn(table: &[weir_gen_alias]) -> Vec<f64> {
        let n = table.len() as f64;
        let mut p = vec![0.0; table.len()];
        for (k, col) in table.iter().enumerate() {
            let keep = f64::from(col.keep) / 4_294_967_296.0;
            p[k] += keep / n;
            p[col.alias as usize] += (1.0 - keep) / n;
        }
        p
    }

    #[test]
    fn draws_the_zipf_law() {
        for (n, s) in [(1, 1.0), (2, 0.5), (100, 0.0), (1000, 0.99), (5000, 1.2)] {
            let h: f64 = (1..=n).map(|r| f64::from(r).powf(-s)).sum();
            let p = drawn(&alias_table(n, s));
            for (k, pk) in p.iter().enumerate() {
                let want = ((k + 1) as f64).powf(-s) / h;
                assert!(
                    (pk - want).abs() < 1e-8,
                    "n={n} s={s} flow {k}: {pk} vs {want}"
                );
            }
        }
    }

    #[test]
    fn skew_zero_is_uniform() {
        assert!(alias_table(64, 0.0)
            .iter()
            .enumerate()
            .all(|(k, c)| c.keep == u32::MAX && c.alias == k as u32));
    }
}
