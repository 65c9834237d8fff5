//! Least-Congested First (Spotlight III-A2): every new flow goes to the DIP
//! that had the largest available capacity at the last update, until the
//! next update.

use super::{finite_or_zero, Dispatcher};

/// LCF on the polled view. Ties go to the lowest pool index.
#[derive(Debug, Clone)]
pub struct Lcf {
    n: usize,
    best: usize,
}

impl Lcf {
    pub fn new(n: usize) -> Lcf {
        Lcf { n, best: 0 }
    }

    /// The DIP that currently receives every new flow.
    pub fn target(&self) -> Option<usize> {
        (self.n > 0).then_some(self.best)
    }
}

/// Index of the largest finite value (NaN counts as 0); ties to the lowest.
pub(crate) fn argmax(available: &[f64]) -> usize {
    let mut best = 0;
    let mut best_a = f64::NEG_INFINITY;
    for (i, &a) in available.iter().enumerate() {
        let a = finite_or_zero(a);
        if a > best_a {
            best = i;
            best_a = a;
        }
    }
    best
}

impl Dispatcher for Lcf {
    fn name(&self) -> String {
        "lcf".into()
    }

    fn update(&mut self, available: &[f64]) {
        self.n = available.len();
        self.best = argmax(available);
    }

    fn pick(&mut self, _flow_hash: u32) -> Option<usize> {
        self.target()
    }
}
