//! The per-packet processing cost of experiments (`cost_cycles`): the
//! busy loop that seeds 001 and 003 put in their middleboxes to model
//! costly per-packet work, which the software tier's workers add to the
//! load balancer's own work. The cycles are TSC cycles (the worker spins
//! until the time-stamp counter has advanced by that many), so the cost is
//! the same on every core and needs no calibration of a loop's speed.

use std::fmt;

/// Whether this machine can run an added cost: the busy loop spins on the
/// x86-64 time-stamp counter.
pub const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// The most cycles per packet: at about 2.5 GHz, 400 µs a packet or 2,500
/// packets per second per worker. The seeds go up to 20,000.
pub const MAX_COST_CYCLES: u64 = 1_000_000;

/// Why a `cost_cycles` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostError {
    /// 0 adds nothing: leave the field out instead.
    Zero,
    /// More than [`MAX_COST_CYCLES`].
    Absurd(u64),
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostError::Zero => write!(
                f,
                "cost_cycles = 0 adds no work: remove cost_cycles to run without an added cost"
            ),
            CostError::Absurd(c) => write!(
                f,
                "cost_cycles = {c} is more than {MAX_COST_CYCLES} cycles a packet (about \
                 0.4 ms): the workers would carry a few thousand packets a second; \
                 the seeds' experiments go up to 20000"
            ),
        }
    }
}

impl std::error::Error for CostError {}

/// Checks an added per-packet cost: from 1 to [`MAX_COST_CYCLES`] cycles.
pub fn validate_cost_cycles(cycles: u64) -> Result<u64, CostError> {
    match cycles {
        0 => Err(CostError::Zero),
        c if c > MAX_COST_CYCLES => Err(CostError::Absurd(c)),
        c => Ok(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_seeds_costs_and_refuses_zero_or_absurd_ones() {
        for c in [1, 500, 1_000, 2_000, 5_000, 10_000, 20_000, MAX_COST_CYCLES] {
            assert_eq!(validate_cost_cycles(c), Ok(c));
        }
        assert_eq!(validate_cost_cycles(0), Err(CostError::Zero));
        assert!(CostError::Zero.to_string().contains("remove cost_cycles"));
        assert_eq!(
            validate_cost_cycles(MAX_COST_CYCLES + 1),
            Err(CostError::Absurd(MAX_COST_CYCLES + 1))
        );
        assert!(validate_cost_cycles(u64::MAX)
            .unwrap_err()
            .to_string()
            .starts_with("cost_cycles = 18446744073709551615 is more than 1000000"));
    }
}
