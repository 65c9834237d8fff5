//! weir's control plane: the configuration, applying it to the data plane
//! without moving established connections, and reading status back.

pub mod agent;
pub mod apply;
pub mod config;
pub mod controller;
pub mod health;
pub mod http;
pub mod metrics;
pub mod runtime;
pub mod status;
pub mod telemetry;
