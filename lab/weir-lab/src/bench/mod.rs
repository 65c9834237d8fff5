//! Benchmarks behind `weir-lab bench ...`. They are commands, never timed
//! assertions in tests: the machine is shared and noisy, so every figure is
//! measured side by side with a baseline in the same run and reported as a
//! ratio to it.

pub mod forward;
pub mod katran;
pub mod xdp;
