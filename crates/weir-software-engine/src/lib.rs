//! weir-software-engine: the sans-IO engine of weir's software tier, beside
//! the I/O crate `weir-software` (its workers on AF_XDP sockets), as
//! quinn-proto is beside quinn.
//!
//! No sockets, no clocks, no BPF: the caller hands in frames, polls and the
//! time, and gets decisions back, so tests and the simulator drive exactly
//! the code the workers run. The engine builds on weir-core (flow keys, the
//! flow hash, the AWFD tables) so its choices agree with the XDP data plane.
//!
//! - [`slb`]: the software load balancer, weir_lb's twin;
//! - [`distribution`]: which worker a packet goes to, and the adaptive
//!   decisions that rewrite that table;
//! - [`reorder`]: the reorder stage before transmit for spread flows;
//! - [`utilization`]: a busy-polling worker's utilization;
//! - [`offload`]: which connections the hybrid tier's fast table holds;
//! - [`topology`]: which CPUs share a cache.

pub mod distribution;
pub mod offload;
pub mod reorder;
pub mod slb;
pub mod topology;
pub mod utilization;

pub use distribution::{Mode, Steering};
pub use offload::{Offload, OffloadPolicy};
pub use reorder::{Reorder, Sequencer};
pub use slb::{Outcome, Slb};
pub use topology::Topology;
pub use utilization::{Utilization, UtilizationMeter};
