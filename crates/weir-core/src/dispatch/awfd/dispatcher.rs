//! AWFD(m) as a [`Dispatcher`] (Spotlight III-B): weights
//! w_i = floor(m * A_i / max A), priority classes B_k of equal weight, class
//! chosen with probability k |B_k| / sum(w), member uniformly. The choice is
//! made by [`AwfdTable::select`], bit for bit what the XDP data plane does
//! with the same table and the same flow hash.
//!
//! Limiting cases: m = 0 gives every DIP weight 1 (ECMP); m = 1 leaves only
//! the DIP(s) with the largest available capacity (LCF).
//!
//! When no DIP has spare capacity (max A <= 0) the paper's weights are all
//! zero and the data plane would have no table; weir then gives every DIP
//! weight 1 (ECMP) until the next update, so new flows still find a DIP and
//! no DIP is preferred without evidence. [`table_weights`] is that rule, for
//! the controller to use too.

use super::table::{weights_from_capacity, AwfdTable, DipId, TableError};

use crate::dispatch::{hash_to_index, Dispatcher};

/// The m used when a policy says just `awfd`.
pub const DEFAULT_M: u32 = 4;

/// AWFD weights for a table, with the all-zero case turned into ECMP.
pub fn table_weights(available: &[f64], m: u32) -> Vec<u32> {
    let mut w = weights_from_capacity(available, m);
    if !w.is_empty() && w.iter().all(|&x| x == 0) {
        w.iter_mut().for_each(|x| *x = 1);
    }
    w
}

/// The AWFD dispatcher of one VIP. DIP ids in its table are pool indices.
#[derive(Debug, Clone)]
pub struct AwfdDispatcher {
    m: u32,
    weights: Vec<u32>,
    table: AwfdTable,
    fits_data_plane: bool,
}

impl AwfdDispatcher {
    /// AWFD with maximum weight `m` over `n` DIPs, all equal until updated.
    pub fn new(n: usize, m: u32) -> AwfdDispatcher {
        let mut d = AwfdDispatcher {
            m,
            weights: Vec::new(),
            table: AwfdTable::default(),
            fits_data_plane: true,
        };
        d.set_weights(vec![1; n]);
        d
    }

    pub fn m(&self) -> u32 {
        self.m
    }

    /// The current weight of every DIP in pool order.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// The current two-stage table (DIP ids are pool indices).
    pub fn table(&self) -> &AwfdTable {
        &self.table
    }

    /// False if the current weights need more classes or members than the
    /// data plane holds (`WEIR_MAX_CLASSES`, `WEIR_MAX_CLASS_MEMBERS`); the
    /// dispatcher still works, with the same selection arithmetic.
    pub fn fits_data_plane(&self) -> bool {
        self.fits_data_plane
    }

    fn set_weights(&mut self, weights: Vec<u32>) {
        if weights == self.weights && (!self.table.classes.is_empty() || weights.is_empty()) {
            return;
        }
        let pairs: Vec<(DipId, u32)> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| (i as DipId, w))
            .collect();
        match AwfdTable::from_weights(&pairs) {
            Ok(t) => {
                self.table = t;
                self.fits_data_plane = true;
            }
            Err(TableError::TooManyClasses { .. } | TableError::ClassTooLarge { .. }) => {
                self.table = AwfdTable::from_weights_unbounded(&pairs)
                    .expect("weights of a pool never overflow 32 bits");
                self.fits_data_plane = false;
            }
            Err(TableError::WeightOverflow) => {
                // m * pool size beyond 2^32: cannot happen for u32 m and any
                // real pool; fall back to equal weights.
                self.table = AwfdTable::from_weights(
                    &pairs.iter().map(|&(d, _)| (d, 1)).collect::<Vec<_>>(),
                )
                .unwrap_or_default();
                self.fits_data_plane = false;
            }
        }
        self.weights = weights;
    }
}

impl Dispatcher for AwfdDispatcher {
    fn name(&self) -> String {
        format!("awfd(m={})", self.m)
    }

    fn update(&mut self, available: &[f64]) {
        let w = table_weights(available, self.m);
        self.set_weights(w);
    }

    fn pick(&mut self, flow_hash: u32) -> Option<usize> {
        match self.table.select(flow_hash) {
            Some(dip) => Some(dip as usize),
            None if !self.weights.is_empty() => Some(hash_to_index(flow_hash, self.weights.len())),
            None => None,
        }
    }
}
