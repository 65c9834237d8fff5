//! AWFD tables (Spotlight, III-B and IV-A) in the layout the data plane reads.
//!
//! DIPs with the same integer weight k form priority class B_k. Stage 1 maps
//! the flow hash to a class with probability k * |B_k| / sum(w) through
//! cumulative ranges; stage 2 picks a member of that class uniformly. Class 0
//! is never stored, so a DIP of weight 0 gets no new flows. The encoding into
//! `weir_class_ranges` / `weir_class_members` and [`AwfdTable::select`] are
//! the exact counterparts of `awfd_select()` in `bpf/lib/dispatch.h`.

use std::collections::BTreeMap;
use std::fmt;

use weir_abi::{weir_class_members, weir_class_ranges, WEIR_MAX_CLASSES, WEIR_MAX_CLASS_MEMBERS};

use crate::flow_hash::rehash;

/// A DIP slot id, the index of the `dips` map.
pub type DipId = u32;

/// Why a set of weights cannot become a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError {
    /// More distinct non-zero weights than the data plane has classes.
    TooManyClasses { classes: usize },
    /// More members in one class than a stage-2 row holds.
    ClassTooLarge { weight: u32, members: usize },
    /// The sum of weights does not fit the 32-bit range bounds.
    WeightOverflow,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::TooManyClasses { classes } => write!(
                f,
                "{classes} distinct weights, but the data plane holds at most {WEIR_MAX_CLASSES} priority classes; use fewer distinct weights (or a smaller m)"
            ),
            TableError::ClassTooLarge { weight, members } => write!(
                f,
                "{members} DIPs share weight {weight}, but a priority class holds at most {WEIR_MAX_CLASS_MEMBERS}"
            ),
            TableError::WeightOverflow => write!(f, "the sum of weights exceeds 2^32 - 1"),
        }
    }
}

impl std::error::Error for TableError {}

/// One priority class: its weight k and its members in a stable order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClass {
    pub weight: u32,
    pub members: Vec<DipId>,
}

/// The two AWFD stages for one VIP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AwfdTable {
    /// Non-empty classes with k > 0, in descending weight.
    pub classes: Vec<PriorityClass>,
    /// Cumulative bounds: `bounds[i]` = sum over classes 0..=i of k * |B_k|.
    pub bounds: Vec<u32>,
}

impl AwfdTable {
    /// Builds the table from each DIP's integer weight; weight 0 drains.
    pub fn from_weights(weights: &[(DipId, u32)]) -> Result<AwfdTable, TableError> {
        Self::build(weights, true)
    }

    /// Like [`AwfdTable::from_weights`] but without the data plane's limits
    /// on classes and members (for simulations with large m or pools);
    /// [`AwfdTable::select`] works the same. Only overflow is refused. Such
    /// a table may not be encodable: `ranges`/`members` panic past the limits.
    pub fn from_weights_unbounded(weights: &[(DipId, u32)]) -> Result<AwfdTable, TableError> {
        Self::build(weights, false)
    }

    fn build(weights: &[(DipId, u32)], bounded: bool) -> Result<AwfdTable, TableError> {
        let mut by_weight: BTreeMap<u32, Vec<DipId>> = BTreeMap::new();
        for &(dip, w) in weights {
            if w > 0 {
                by_weight.entry(w).or_default().push(dip);
            }
        }
        if bounded && by_weight.len() > WEIR_MAX_CLASSES as usize {
            return Err(TableError::TooManyClasses {
                classes: by_weight.len(),
            });
        }
        let mut classes = Vec::with_capacity(by_weight.len());
        let mut bounds = Vec::with_capacity(by_weight.len());
        let mut total: u32 = 0;
        for (weight, mut members) in by_weight.into_iter().rev() {
            if bounded && members.len() > WEIR_MAX_CLASS_MEMBERS as usize {
                return Err(TableError::ClassTooLarge {
                    weight,
                    members: members.len(),
                });
            }
            members.sort_unstable();
            let mass = weight
                .checked_mul(members.len() as u32)
                .ok_or(TableError::WeightOverflow)?;
            total = total.checked_add(mass).ok_or(TableError::WeightOverflow)?;
            bounds.push(total);
            classes.push(PriorityClass { weight, members });
        }
        Ok(AwfdTable { classes, bounds })
    }

    /// Sum of all weights (the range of stage 1).
    pub fn total(&self) -> u32 {
        self.bounds.last().copied().unwrap_or(0)
    }

    /// The DIP a new flow with this hash goes to, or `None` if no DIP has
    /// a weight above zero. Mirrors `awfd_select()` in BPF exactly.
    pub fn select(&self, hash: u32) -> Option<DipId> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let scaled = ((u64::from(hash) * u64::from(total)) >> 32) as u32;
        let range = self
            .bounds
            .iter()
            .position(|&b| scaled < b)
            .unwrap_or(self.bounds.len() - 1);
        let members = &self.classes[range].members;
        Some(members[(rehash(hash) % members.len() as u32) as usize])
    }

    /// Stage 1 as the data plane stores it.
    pub fn ranges(&self) -> weir_class_ranges {
        let mut r = weir_class_ranges {
            nr: self.classes.len() as u32,
            total: self.total(),
            ..Default::default()
        };
        for (i, (class, bound)) in self.classes.iter().zip(&self.bounds).enumerate() {
            r.bound[i] = *bound;
            r.class_weight[i] = class.weight;
        }
        r
    }

    /// Stage-2 row `range` as the data plane stores it.
    pub fn members(&self, range: usize) -> Option<weir_class_members> {
        let class = self.classes.get(range)?;
        let mut m = weir_class_members {
            nr: class.members.len() as u32,
            ..Default::default()
        };
        m.dip_id[..class.members.len()].copy_from_slice(&class.members);
        Some(m)
    }
}

/// AWFD weights from available capacities: w_i = floor(m * A_i / max A).
/// Negative or non-finite capacities count as zero; m = 0 gives everyone
/// weight 1 (ECMP).
pub fn weights_from_capacity(available: &[f64], m: u32) -> Vec<u32> {
    if m == 0 {
        return vec![1; available.len()];
    }
    let clean = |a: f64| if a.is_finite() && a > 0.0 { a } else { 0.0 };
    let max = available.iter().copied().map(clean).fold(0.0, f64::max);
    if max <= 0.0 {
        return vec![0; available.len()];
    }
    available
        .iter()
        .map(|&a| ((f64::from(m) * clean(a) / max).floor() as u32).min(m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_grouped_by_weight_and_class_zero_is_dropped() {
        let t = AwfdTable::from_weights(&[(1, 2), (2, 0), (3, 2), (4, 1)]).unwrap();
        assert_eq!(t.classes.len(), 2);
        assert_eq!(
            t.classes[0],
            PriorityClass {
                weight: 2,
                members: vec![1, 3]
            }
        );
        assert_eq!(
            t.classes[1],
            PriorityClass {
                weight: 1,
                members: vec![4]
            }
        );
        assert_eq!(t.bounds, vec![4, 5]);
        for h in (0..u32::MAX).step_by(9_999_991) {
            assert_ne!(t.select(h), Some(2));
        }
    }

    #[test]
    fn selection_frequency_is_proportional_to_weight() {
        let t = AwfdTable::from_weights(&[(0, 4), (1, 2), (2, 2), (3, 1)]).unwrap();
        let mut counts = [0u32; 4];
        let n = 200_000u32;
        for i in 0..n {
            let h = crate::flow_hash::rehash(i.wrapping_mul(2_654_435_761));
            counts[t.select(h).unwrap() as usize] += 1;
        }
        let expect = [4.0 / 9.0, 2.0 / 9.0, 2.0 / 9.0, 1.0 / 9.0];
        for (c, e) in counts.iter().zip(expect) {
            let f = f64::from(*c) / f64::from(n);
            assert!((f - e).abs() < 0.01, "{counts:?}");
        }
    }

    #[test]
    fn empty_table_selects_nothing() {
        let t = AwfdTable::from_weights(&[(1, 0)]).unwrap();
        assert_eq!(t.select(123), None);
        assert_eq!(t.ranges().nr, 0);
    }

    #[test]
    fn too_many_classes_is_refused() {
        let w: Vec<_> = (0..=WEIR_MAX_CLASSES).map(|i| (i, i + 1)).collect();
        assert!(matches!(
            AwfdTable::from_weights(&w),
            Err(TableError::TooManyClasses { .. })
        ));
    }

    #[test]
    fn encoding_matches_the_selection() {
        let t = AwfdTable::from_weights(&[(5, 3), (6, 1), (7, 1)]).unwrap();
        let r = t.ranges();
        assert_eq!((r.nr, r.total), (2, 5));
        assert_eq!(&r.bound[..2], &[3, 5]);
        let m = t.members(1).unwrap();
        assert_eq!((m.nr, &m.dip_id[..2]), (2, &[6, 7][..]));
        assert!(t.members(2).is_none());
    }

    #[test]
    fn capacity_weights_follow_the_paper() {
        // Figure 3 of Spotlight with m = 2: A = (0, 1, 1) -> (0, 2, 2).
        assert_eq!(weights_from_capacity(&[0.0, 1.0, 1.0], 2), vec![0, 2, 2]);
        assert_eq!(weights_from_capacity(&[3.0, 1.0], 0), vec![1, 1]);
        assert_eq!(weights_from_capacity(&[3.0, 1.0, -2.0], 1), vec![1, 0, 0]);
        assert_eq!(weights_from_capacity(&[0.0, 0.0], 4), vec![0, 0]);
    }
}
