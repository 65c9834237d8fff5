//! weir's control plane: the configuration, applying it to the data plane
//! without moving established connections, and reading status back.

pub mod apply;
pub mod config;
pub mod runtime;
pub mod status;
