//! Available-capacity estimation from polled samples (Spotlight IV-C, IV-E1).
//!
//! The controller polls each DIP for its mean processing time t (seconds of
//! work per unit of load) and its load R (units per second). Then
//! C = 1 / mean(t) and A = C - R. Both inputs are smoothed with an
//! exponentially weighted moving average: x <- alpha * sample + (1 - alpha) * x,
//! the first sample taken as is. alpha = 1 keeps only the latest sample.
//!
//! A may be negative: an overloaded DIP has less than no spare capacity, and
//! the dispatchers clamp or rank it accordingly. Invalid *inputs* (NaN,
//! infinities, negative numbers, a zero processing time) are refused and
//! leave the estimate unchanged.

use std::fmt;

/// Why a sample or a parameter was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EstimateError {
    /// The EWMA factor must be in (0, 1].
    BadAlpha(f64),
    /// A processing time must be finite and > 0.
    BadProcessingTime(f64),
    /// A load must be finite and >= 0.
    BadLoad(f64),
}

impl fmt::Display for EstimateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EstimateError::BadAlpha(a) => {
                write!(f, "EWMA factor must be in (0, 1], got {a}")
            }
            EstimateError::BadProcessingTime(t) => write!(
                f,
                "processing time must be a finite number > 0 seconds, got {t}"
            ),
            EstimateError::BadLoad(r) => {
                write!(f, "load must be a finite number >= 0, got {r}")
            }
        }
    }
}

impl std::error::Error for EstimateError {}

/// An exponentially weighted moving average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// `alpha` is the weight of a new sample, in (0, 1].
    pub fn new(alpha: f64) -> Result<Ewma, EstimateError> {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(EstimateError::BadAlpha(alpha));
        }
        Ok(Ewma { alpha, value: None })
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Folds in a sample (the caller validates it) and returns the average.
    pub fn push(&mut self, sample: f64) -> f64 {
        let v = match self.value {
            None => sample,
            Some(v) => self.alpha * sample + (1.0 - self.alpha) * v,
        };
        self.value = Some(v);
        v
    }

    /// The current average, `None` before the first sample.
    pub fn value(&self) -> Option<f64> {
        self.value
    }
}

/// One DIP's capacity estimator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityEstimator {
    processing_time: Ewma,
    load: Ewma,
}

impl CapacityEstimator {
    /// `alpha` is the EWMA factor for both processing time and load.
    pub fn new(alpha: f64) -> Result<CapacityEstimator, EstimateError> {
        Ok(CapacityEstimator {
            processing_time: Ewma::new(alpha)?,
            load: Ewma::new(alpha)?,
        })
    }

    /// Folds in one poll: mean processing time `t` (seconds per unit) and
    /// load `r` (units per second). A refused sample changes nothing.
    pub fn observe(&mut self, t: f64, r: f64) -> Result<(), EstimateError> {
        if !(t.is_finite() && t > 0.0) {
            return Err(EstimateError::BadProcessingTime(t));
        }
        if !(r.is_finite() && r >= 0.0) {
            return Err(EstimateError::BadLoad(r));
        }
        self.processing_time.push(t);
        self.load.push(r);
        Ok(())
    }

    /// C = 1 / mean processing time; `None` before the first sample.
    pub fn capacity(&self) -> Option<f64> {
        self.processing_time.value().map(|t| 1.0 / t)
    }

    /// The smoothed load R.
    pub fn load(&self) -> Option<f64> {
        self.load.value()
    }

    /// A = C - R (negative when overloaded); `None` before the first sample.
    pub fn available(&self) -> Option<f64> {
        Some(self.capacity()? - self.load()?)
    }
}

/// A = C - R for a whole pool; DIPs without a sample yet count as 0.
pub fn available_capacities(pool: &[CapacityEstimator]) -> Vec<f64> {
    pool.iter().map(|e| e.available().unwrap_or(0.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_the_inverse_of_mean_processing_time() {
        let mut e = CapacityEstimator::new(1.0).unwrap();
        assert_eq!(e.available(), None);
        e.observe(0.001, 300.0).unwrap();
        assert!((e.capacity().unwrap() - 1000.0).abs() < 1e-9);
        assert!((e.available().unwrap() - 700.0).abs() < 1e-9);
        e.observe(0.002, 600.0).unwrap();
        assert!((e.capacity().unwrap() - 500.0).abs() < 1e-9);
        assert!(
            (e.available().unwrap() + 100.0).abs() < 1e-9,
            "overload is negative"
        );
    }

    #[test]
    fn ewma_smooths_with_the_given_factor() {
        let mut m = Ewma::new(0.25).unwrap();
        assert_eq!(m.push(8.0), 8.0);
        assert_eq!(m.push(0.0), 6.0);
        assert_eq!(m.push(6.0), 6.0);
        let mut e = CapacityEstimator::new(0.5).unwrap();
        e.observe(0.001, 0.0).unwrap();
        e.observe(0.003, 100.0).unwrap();
        assert!((e.capacity().unwrap() - 500.0).abs() < 1e-9);
        assert!((e.load().unwrap() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn bad_inputs_are_refused_and_change_nothing() {
        for a in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(Ewma::new(a), Err(EstimateError::BadAlpha(_))));
        }
        let mut e = CapacityEstimator::new(0.5).unwrap();
        e.observe(0.01, 10.0).unwrap();
        let before = e;
        for (t, r) in [
            (f64::NAN, 1.0),
            (-0.01, 1.0),
            (0.0, 1.0),
            (f64::INFINITY, 1.0),
            (0.01, -1.0),
            (0.01, f64::NAN),
            (0.01, f64::INFINITY),
        ] {
            let err = e.observe(t, r).unwrap_err();
            assert!(!err.to_string().is_empty());
            assert_eq!(e, before);
        }
    }

    #[test]
    fn pool_view_defaults_to_zero() {
        let mut a = CapacityEstimator::new(1.0).unwrap();
        a.observe(0.5, 1.0).unwrap();
        let b = CapacityEstimator::new(1.0).unwrap();
        assert_eq!(available_capacities(&[a, b]), vec![1.0, 0.0]);
    }
}
