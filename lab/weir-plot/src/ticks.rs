//! Where the ticks of an automatic axis go and how they read: "nice"
//! steps of 1, 2, 2.5 or 5 times a power of ten on a linear axis, powers of
//! ten (with 2 and 5 between them over a short range) on a log axis.

/// Ticks covering `[lo, hi]` in about `target` equal steps; the first tick
/// is at or below `lo` and the last at or above `hi`. `lo` and `hi` must be
/// finite with `lo < hi`.
pub fn linear(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step).floor() as i64;
    let last = (hi / step).ceil() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// The step of a tick list (its first gap; 1 for fewer than two ticks).
pub fn step_of(ticks: &[f64]) -> f64 {
    match ticks {
        [a, b, ..] if b > a => b - a,
        _ => 1.0,
    }
}

/// The smallest of 1, 2, 2.5, 5 and 10 times a power of ten that is at
/// least `raw` (positive and finite).
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|k| k * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// Log-axis ticks covering `[10^lo, 10^hi]` (exponents finite, `lo < hi`),
/// as exponents: powers of ten (every k-th over a wide range, at most about
/// ten), with 2 and 5 between them when the range spans less than two
/// decades; from the last tick at or below `lo` to the first at or above
/// `hi`.
pub fn log(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.floor() as i64, hi.ceil() as i64);
    let every = ((b - a) / 10 + 1).max(1);
    let fine = hi - lo < 2.0;
    let mut all = Vec::new();
    let mut e = a.div_euclid(every) * every;
    while e < b + every {
        all.push(e as f64);
        if fine {
            all.extend([e as f64 + 2f64.log10(), e as f64 + 5f64.log10()]);
        }
        e += every;
    }
    let first = all.iter().rposition(|&t| t <= lo + 1e-12).unwrap_or(0);
    let last = all
        .iter()
        .position(|&t| t >= hi - 1e-12)
        .unwrap_or(all.len() - 1);
    all[first..=last.max(first)].to_vec()
}

/// A tick's text with as many decimals as `step` needs (2.5 needs one, 0.05
/// two), never "-0"; very large and very small values in exponent form
/// ("1e9", "2.5e-7").
pub fn label(v: f64, step: f64) -> String {
    let v = if v.abs() < step.abs() * 1e-9 { 0.0 } else { v };
    if v != 0.0 && !(1e-4..1e6).contains(&v.abs()) {
        // Shortest round-trip form, rounded to 3 significant digits first.
        let digits = format!("{v:.2e}").parse::<f64>().unwrap_or(v);
        return format!("{digits:e}");
    }
    let decimals = (0..=6)
        .find(|&d| {
            let s = step.abs() * 10f64.powi(d);
            (s - s.round()).abs() < 1e-6 * s.max(1.0)
        })
        .unwrap_or(6) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_are_nice_and_cover_the_range() {
        assert_eq!(linear(0.0, 9.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            linear(0.0, 430.0, 5),
            vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0]
        );
        let t = linear(0.83, 0.99, 5);
        assert!(t[0] <= 0.83 && *t.last().unwrap() >= 0.99, "{t:?}");
        assert!((step_of(&t) - 0.05).abs() < 1e-12, "{t:?}");
        assert_eq!(linear(0.0, 12.5, 5).len(), 6);
        assert_eq!(step_of(&linear(0.0, 12.5, 5)), 2.5);
    }

    #[test]
    fn log_ticks_are_decades_or_one_two_five() {
        let values = |lo: f64, hi: f64| -> Vec<f64> {
            log(lo.log10(), hi.log10())
                .iter()
                .map(|e| (10f64.powf(*e) * 1e6).round() / 1e6)
                .collect()
        };
        assert_eq!(values(1.0, 1000.0), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(values(2.0, 30.0), vec![2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(values(3.0, 4.0), vec![2.0, 5.0]);
        // 600 decades: a bounded number of ticks, every 60th power.
        let wide = log(-300.0, 300.0);
        assert!(wide.len() <= 12 && wide[0] <= -300.0 && *wide.last().unwrap() >= 300.0);
    }

    #[test]
    fn labels_have_the_decimals_the_step_needs() {
        assert_eq!(label(0.9500000001, 0.05), "0.95");
        assert_eq!(label(5.0, 2.5), "5.0");
        assert_eq!(label(400.0, 100.0), "400");
        assert_eq!(label(-1e-17, 0.1), "0.0");
        assert_eq!(label(0.7, 0.1), "0.7");
        assert_eq!(label(10f64.powf(300.0), 1e299), "1e300");
        assert_eq!(label(1.23456e-7, 1e-7), "1.23e-7");
        assert_eq!(label(2.5e7, 5e6), "2.5e7");
        assert_eq!(label(1000.0000000001, 1000.0), "1000");
    }
}
