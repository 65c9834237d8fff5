//! weir's control plane: the configuration and its diagnostics, applying it
//! to the data plane without moving established connections, the load-aware
//! controller with its telemetry (agent and passive) and health checks, the
//! `weir agent` server, metrics and status.

pub mod agent;
pub mod apply;
pub mod bpffs;
pub mod config;
pub mod controller;
pub mod cpus;
pub mod diag;
pub mod health;
pub mod http;
pub mod metrics;
pub mod runtime;
pub mod signals;
pub mod status;
pub mod sweeper;
pub mod takeover;
pub mod telemetry;
