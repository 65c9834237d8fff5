//! The heuristic optimum of Spotlight V-A: the controller knows the
//! instantaneous available capacity of every DIP when a flow arrives and
//! sends the flow to the largest. It is LCF with updates "done
//! instantaneously"; [`Dispatcher::instantaneous`] tells the caller to
//! update before every pick. It is a baseline, not deployable: no real
//! controller sees every DIP's state at every new connection.

use super::lcf::argmax;
use super::Dispatcher;

#[derive(Debug, Clone)]
pub struct Optimum {
    n: usize,
    best: usize,
}

impl Optimum {
    pub fn new(n: usize) -> Optimum {
        Optimum { n, best: 0 }
    }
}

impl Dispatcher for Optimum {
    fn name(&self) -> String {
        "optimum".into()
    }

    fn update(&mut self, available: &[f64]) {
        self.n = available.len();
        self.best = argmax(available);
    }

    fn pick(&mut self, _flow_hash: u32) -> Option<usize> {
        (self.n > 0).then_some(self.best)
    }

    fn instantaneous(&self) -> bool {
        true
    }
}
