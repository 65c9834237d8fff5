//! weir's control plane: the configuration and its diagnostics, applying it
//! to the data plane without moving established connections, the load-aware
//! controller with its telemetry (agent and passive) and health checks, the
//! `weir agent` server, `weir decap` for backends, metrics, status, and the
//! management API with the one path (`live`) through which reloads and API
//! writes change what runs.

pub mod agent;
pub mod api;
pub mod apply;
pub mod bpffs;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod cpus;
pub mod decap;
pub mod diag;
pub mod health;
pub mod live;
pub mod metrics;
pub mod nexthops;
pub mod reload_outcome;
pub mod reload_scope;
pub mod run_record;
pub mod runtime;
pub mod status;
pub mod sweeper;
pub mod takeover;
pub mod telemetry;
pub mod tier;
pub mod traffic;
pub mod xdp_watch;
