//! weir-sim: a flow-level simulator of weir's dispatch policies, after
//! Spotlight section V-A.
//!
//! A trace of flows (synthetic, [`trace::SyntheticParams`], or a CSV,
//! [`trace::parse_csv`]) runs against pools of DIPs behind several VIPs
//! ([`model`]); each VIP dispatches new flows with a dispatcher from
//! `weir_core::dispatch` (the same code the controller uses) and the engine
//! ([`engine::simulate`]) integrates carried traffic to get the service
//! utilization Omega. [`sweep`] runs many simulations in parallel;
//! [`spotlight`] reproduces Fig. 7 and Fig. 9; [`cli`] is the `weir-lab sim` and
//! `weir-lab bench sim` command line. Everything is deterministic per seed.

pub mod bench;
pub mod cli;
pub mod engine;
pub mod model;
pub mod report;
pub mod spotlight;
pub mod sweep;
pub mod trace;
