//! The bounds of the software tier's reorder stage (its buffer and hold
//! time), as plain values: the configuration checks `reorder_hold_us`
//! against them, and the stage (weir-software-engine's `reorder`) keeps
//! them.

use std::fmt;

/// The largest buffer: 65536 packets (4 KiB frames: 256 MiB of UMEM held).
pub const MAX_CAPACITY: u32 = 1 << 16;

/// The longest hold. Linux's minimum TCP retransmission timeout is 200 ms:
/// a packet held near it makes the sender retransmit what it will deliver.
pub const MAX_HOLD_NS: u64 = 100_000_000;

/// The bounds of one release stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Packets held at most: a power of two in [2, [`MAX_CAPACITY`]]. More
    /// than the packets a stalled worker can fall behind by in `hold_ns`,
    /// or the buffer bound gives up numbers before the hold time does.
    pub capacity: u32,
    /// How long a packet waits for a missing earlier number, in [1 µs,
    /// [`MAX_HOLD_NS`]]: longer than the slowest worker's batch takes,
    /// well below the round-trip time.
    pub hold_ns: u64,
}

impl Default for ReorderConfig {
    /// 4096 packets, 1 ms: a batch of 64 packets at 20,000 cycles each
    /// takes about 0.5 ms on a 2.5 GHz core.
    fn default() -> Self {
        ReorderConfig {
            capacity: 4096,
            hold_ns: 1_000_000,
        }
    }
}

impl ReorderConfig {
    /// Refuses bounds the stage cannot keep, naming the field.
    pub fn validate(&self) -> Result<(), ReorderError> {
        if !self.capacity.is_power_of_two() || !(2..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(ReorderError::Capacity(self.capacity));
        }
        if !(1_000..=MAX_HOLD_NS).contains(&self.hold_ns) {
            return Err(ReorderError::Hold(self.hold_ns));
        }
        Ok(())
    }
}

/// Why a reorder configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReorderError {
    /// `capacity` is not a power of two in [2, 65536].
    Capacity(u32),
    /// `hold_ns` is outside [1 µs, 100 ms].
    Hold(u64),
}

impl fmt::Display for ReorderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReorderError::Capacity(c) => write!(
                f,
                "reorder capacity must be a power of two from 2 to {MAX_CAPACITY} packets, \
                 got {c} (try {})",
                (*c).clamp(2, MAX_CAPACITY)
                    .next_power_of_two()
                    .min(MAX_CAPACITY)
            ),
            ReorderError::Hold(ns) => write!(
                f,
                "reorder hold time must be from 1 µs to {} ms, got {ns} ns \
                 (to stop reordering, turn the reorder stage off instead)",
                MAX_HOLD_NS / 1_000_000
            ),
        }
    }
}

impl std::error::Error for ReorderError {}
