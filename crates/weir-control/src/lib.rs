//! weir's control plane, the daemon `weir serve`: the configuration and its
//! diagnostics, applying it to the data plane without moving established
//! connections, the load-aware controller with its telemetry (polling
//! backends' agents, or passive) and health checks, metrics, status, the
//! watches over the interfaces weir sends by, `weir doctor`, and the
//! management API with the one path (`live`) through which reloads and API
//! writes change what runs. The backends' own tools are in weir-backend.

pub mod api;
pub mod apply;
pub mod bgp;
mod bpffs;
mod cluster;
mod controller;
pub mod doctor;
mod health;
mod live;
pub mod metrics;
pub mod nexthops;
pub mod program;
pub mod redirect_targets;
pub mod reload_outcome;
pub mod reload_scope;
pub mod run_record;
pub mod run_report;
pub mod runtime;
pub mod status;
mod sweeper;
pub use sweeper::SWEEP_INTERVAL;
mod takeover;
pub mod telemetry;
pub mod tier;
mod traffic;
mod xdp_watch;
