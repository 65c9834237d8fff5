//! ECMP: every DIP equally likely, whatever its load (Spotlight III-A1).

use super::{hash_to_index, Dispatcher};

/// Uniform dispatch over the pool; updates only change the pool size.
#[derive(Debug, Clone)]
pub struct Ecmp {
    n: usize,
}

impl Ecmp {
    pub fn new(n: usize) -> Ecmp {
        Ecmp { n }
    }
}

impl Dispatcher for Ecmp {
    fn name(&self) -> String {
        "ecmp".into()
    }

    fn update(&mut self, available: &[f64]) {
        self.n = available.len();
    }

    fn pick(&mut self, flow_hash: u32) -> Option<usize> {
        (self.n > 0).then(|| hash_to_index(flow_hash, self.n))
    }
}
