//! Property tests for the dispatchers: seeded random pools, many hashes.

use super::awfd::table_weights;
use super::*;
use crate::dispatch::awfd::weights_from_capacity;
use crate::splitmix::SplitMix;

/// Test inputs drawn from a seeded SplitMix64.
struct Rng(SplitMix);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn hash(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// An available capacity in [-20, 100), with some exact zeros.
    fn available(&mut self) -> f64 {
        match self.below(6) {
            0 => 0.0,
            1 => -(self.below(20) as f64),
            _ => (self.below(10_000) as f64) / 100.0,
        }
    }
}

fn frequencies(d: &mut dyn Dispatcher, n: usize, draws: usize, rng: &mut Rng) -> Vec<f64> {
    let mut c = vec![0usize; n];
    for _ in 0..draws {
        c[d.pick(rng.hash()).expect("non-empty pool")] += 1;
    }
    c.iter().map(|&x| x as f64 / draws as f64).collect()
}

#[test]
fn awfd_frequencies_converge_to_weight_share() {
    let mut rng = Rng::new(1);
    for _ in 0..30 {
        let n = 1 + rng.below(24) as usize;
        let m = 1 + rng.below(16) as u32;
        let avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        let mut d = AwfdDispatcher::new(n, m);
        d.update(&avail);
        let w = d.weights().to_vec();
        let total: u32 = w.iter().sum();
        assert!(total > 0);
        let draws = 40_000;
        let f = frequencies(&mut d, n, draws, &mut rng);
        for i in 0..n {
            let expect = f64::from(w[i]) / f64::from(total);
            // 5 standard deviations of a binomial share.
            let tol = 5.0 * (expect * (1.0 - expect) / draws as f64).sqrt() + 1e-9;
            assert!(
                (f[i] - expect).abs() <= tol,
                "dip {i}: {} vs {expect} (w={w:?})",
                f[i]
            );
        }
    }
}

#[test]
fn awfd_weights_follow_the_paper_formula() {
    let mut rng = Rng::new(2);
    for _ in 0..200 {
        let n = 1 + rng.below(30) as usize;
        let m = rng.below(17) as u32;
        let avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        let mut d = AwfdDispatcher::new(n, m);
        d.update(&avail);
        let max = avail.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        for (i, &a) in avail.iter().enumerate() {
            let expect = if m == 0 || max <= 0.0 {
                1 // ECMP, or the no-spare-capacity fallback
            } else {
                (f64::from(m) * a.max(0.0) / max).floor() as u32
            };
            assert_eq!(d.weights()[i], expect, "m={m} A={avail:?}");
        }
        assert_eq!(
            d.weights(),
            &table_weights(&avail, m)[..],
            "dispatcher and controller rule agree"
        );
        if max > 0.0 {
            assert_eq!(d.weights(), &weights_from_capacity(&avail, m)[..]);
        }
    }
}

#[test]
fn awfd_class_zero_is_never_chosen() {
    let mut rng = Rng::new(3);
    for _ in 0..50 {
        let n = 2 + rng.below(20) as usize;
        let m = 1 + rng.below(16) as u32;
        let mut avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        avail[0] = 50.0; // at least one DIP with spare capacity
        let mut d = AwfdDispatcher::new(n, m);
        d.update(&avail);
        let zero: Vec<usize> = (0..n).filter(|&i| d.weights()[i] == 0).collect();
        for _ in 0..5_000 {
            let i = d.pick(rng.hash()).unwrap();
            assert!(!zero.contains(&i), "picked class-0 DIP {i}");
            assert!(avail[i] > 0.0);
        }
    }
}

#[test]
fn awfd_m0_is_ecmp() {
    let mut rng = Rng::new(4);
    for _ in 0..10 {
        let n = 1 + rng.below(20) as usize;
        let avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        let mut a = AwfdDispatcher::new(n, 0);
        a.update(&avail);
        assert!(a.weights().iter().all(|&w| w == 1));
        let mut e = Ecmp::new(n);
        e.update(&avail);
        let draws = 40_000;
        let fa = frequencies(&mut a, n, draws, &mut rng);
        let fe = frequencies(&mut e, n, draws, &mut rng);
        let p = 1.0 / n as f64;
        let tol = 5.0 * (p * (1.0 - p) / draws as f64).sqrt() + 1e-9;
        for i in 0..n {
            assert!((fa[i] - p).abs() <= tol && (fe[i] - p).abs() <= tol);
        }
    }
}

#[test]
fn awfd_m1_is_lcf() {
    let mut rng = Rng::new(5);
    for _ in 0..200 {
        let n = 1 + rng.below(20) as usize;
        let avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        let max = avail.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if max <= 0.0 {
            continue; // no spare capacity: AWFD falls back to ECMP by design
        }
        let mut a = AwfdDispatcher::new(n, 1);
        let mut l = Lcf::new(n);
        a.update(&avail);
        l.update(&avail);
        let ties = avail.iter().filter(|&&x| x == max).count();
        for _ in 0..200 {
            let h = rng.hash();
            let pa = a.pick(h).unwrap();
            let pl = l.pick(h).unwrap();
            assert_eq!(avail[pa], max);
            if ties == 1 {
                assert_eq!(pa, pl, "unique maximum: same DIP");
            }
        }
    }
}

#[test]
fn lcf_and_optimum_send_everything_to_the_largest() {
    let avail = [3.0, -1.0, 9.0, 9.0, f64::NAN];
    let mut l = Lcf::new(5);
    let mut o = Optimum::new(5);
    l.update(&avail);
    o.update(&avail);
    assert!(o.instantaneous() && !l.instantaneous());
    for h in [0, 1, u32::MAX] {
        assert_eq!(l.pick(h), Some(2));
        assert_eq!(o.pick(h), Some(2));
    }
    // Everyone overloaded: the least overloaded.
    l.update(&[-5.0, -1.0, -3.0]);
    assert_eq!(l.pick(7), Some(1));
}

#[test]
fn weighted_frequencies_follow_available_capacity() {
    let mut rng = Rng::new(6);
    for _ in 0..20 {
        let n = 1 + rng.below(20) as usize;
        let mut avail: Vec<f64> = (0..n).map(|_| rng.available()).collect();
        avail[0] = 10.0;
        let mut d = Weighted::new(n);
        d.update(&avail);
        let total: f64 = avail.iter().map(|a| a.max(0.0)).sum();
        let draws = 40_000;
        let f = frequencies(&mut d, n, draws, &mut rng);
        for i in 0..n {
            let p = avail[i].max(0.0) / total;
            let tol = 5.0 * (p * (1.0 - p) / draws as f64).sqrt() + 1e-9;
            assert!((f[i] - p).abs() <= tol, "{i}: {} vs {p}", f[i]);
            if avail[i] <= 0.0 {
                assert_eq!(f[i], 0.0);
            }
        }
        let probs = d.probabilities();
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}

#[test]
fn weighted_is_awfd_with_large_m() {
    // With m large, AWFD's quantized shares approach the weighted shares.
    let avail = [1.0, 2.5, 7.25, 0.0, 4.0];
    let mut w = Weighted::new(5);
    w.update(&avail);
    let mut a = AwfdDispatcher::new(5, 1 << 16);
    a.update(&avail);
    assert!(!a.fits_data_plane() || a.weights().iter().filter(|&&x| x > 0).count() <= 16);
    let total: u32 = a.weights().iter().sum();
    for (i, p) in w.probabilities().iter().enumerate() {
        assert!((f64::from(a.weights()[i]) / f64::from(total) - p).abs() < 1e-3);
    }
}

#[test]
fn no_spare_capacity_falls_back_to_ecmp() {
    let mut d = AwfdDispatcher::new(3, 4);
    d.update(&[-1.0, 0.0, -3.0]);
    assert_eq!(d.weights(), &[1, 1, 1]);
    let mut w = Weighted::new(3);
    w.update(&[0.0, 0.0, -3.0]);
    assert_eq!(w.probabilities(), vec![1.0 / 3.0; 3]);
}

#[test]
fn empty_pools_pick_nothing() {
    for p in [
        Policy::Ecmp,
        Policy::Weighted,
        Policy::Lcf,
        Policy::Optimum,
        Policy::Awfd(MaxWeight::Finite(4)),
    ] {
        let mut d = p.build(0);
        assert_eq!(d.pick(1), None, "{p}");
        d.update(&[]);
        assert_eq!(d.pick(1), None, "{p}");
        let mut d = p.build(3);
        assert!(d.pick(1).unwrap() < 3, "{p} before any update");
    }
}

#[test]
fn large_m_beyond_the_data_plane_still_dispatches() {
    let avail: Vec<f64> = (1..=40).map(f64::from).collect();
    let mut d = AwfdDispatcher::new(40, 64);
    d.update(&avail);
    assert!(!d.fits_data_plane());
    assert!(d.pick(12345).is_some());
    d.update(&[1.0; 40]);
    assert!(d.fits_data_plane());
}

#[test]
fn policies_parse_and_refuse_nonsense() {
    assert_eq!("ecmp".parse::<Policy>(), Ok(Policy::Ecmp));
    assert_eq!(
        "AWFD:8".parse::<Policy>(),
        Ok(Policy::Awfd(MaxWeight::Finite(8)))
    );
    assert_eq!(
        "awfd=inf".parse::<Policy>(),
        Ok(Policy::Awfd(MaxWeight::Infinite))
    );
    assert_eq!(
        "awfd".parse::<Policy>(),
        Ok(Policy::Awfd(MaxWeight::Finite(awfd::DEFAULT_M)))
    );
    let e = "awfd:-1".parse::<Policy>().unwrap_err();
    assert!(e.to_string().contains("non-negative"), "{e}");
    assert!("lcf:3".parse::<Policy>().is_err());
    assert!("rr"
        .parse::<Policy>()
        .unwrap_err()
        .to_string()
        .contains("unknown"));
    for p in ["ecmp", "weighted", "lcf", "optimum", "awfd:3", "awfd:inf"] {
        assert_eq!(p.parse::<Policy>().unwrap().to_string(), p);
    }
}
