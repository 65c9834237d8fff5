//! Weighted flow dispatching: a new flow goes to DIP i with probability
//! max(A_i, 0) / sum_j max(A_j, 0), from the last update. This is AWFD with
//! m = infinity (no quantization). If no DIP has spare capacity, all DIPs
//! are equally likely (the same fallback as [`super::awfd`]).

use super::{finite_or_zero, hash_to_index, Dispatcher};

#[derive(Debug, Clone)]
pub struct Weighted {
    n: usize,
    /// Cumulative positive capacities; empty means "uniform".
    cumulative: Vec<f64>,
}

impl Weighted {
    pub fn new(n: usize) -> Weighted {
        Weighted {
            n,
            cumulative: Vec::new(),
        }
    }

    /// The probability of each DIP for the next new flow.
    pub fn probabilities(&self) -> Vec<f64> {
        if self.cumulative.is_empty() {
            return vec![1.0 / self.n as f64; self.n];
        }
        let total = *self.cumulative.last().unwrap();
        let mut prev = 0.0;
        self.cumulative
            .iter()
            .map(|&c| {
                let p = (c - prev) / total;
                prev = c;
                p
            })
            .collect()
    }
}

impl Dispatcher for Weighted {
    fn name(&self) -> String {
        "weighted".into()
    }

    fn update(&mut self, available: &[f64]) {
        self.n = available.len();
        self.cumulative.clear();
        let mut sum = 0.0;
        for &a in available {
            sum += finite_or_zero(a).max(0.0);
            self.cumulative.push(sum);
        }
        if sum <= 0.0 {
            self.cumulative.clear();
        }
    }

    fn pick(&mut self, flow_hash: u32) -> Option<usize> {
        if self.n == 0 {
            return None;
        }
        let Some(&total) = self.cumulative.last() else {
            return Some(hash_to_index(flow_hash, self.n));
        };
        // u in [0, total): the first DIP whose cumulative bound exceeds u.
        let u = (f64::from(flow_hash) + 0.5) / 4_294_967_296.0 * total;
        let i = self.cumulative.partition_point(|&c| c <= u);
        // A DIP with zero capacity has c == previous c and is never found.
        Some(i.min(self.n - 1))
    }
}
