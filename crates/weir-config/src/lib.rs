//! weir-config: the configuration file of `weir serve` (weir.toml), parsed
//! and checked with errors that name the file, the line and the field and
//! say what to do; its defaults; and the limits of the host it is about to
//! run on (what the kernel would refuse to create), checked before anything
//! is created.
//!
//! Light by design: no BPF, no engine. `weir check` and every crate that
//! reads the file use it; the plain values it shares with the data plane
//! and the software tier (timeouts, the SYN budget, the workers' policies)
//! are weir-core's.

pub mod api;
pub mod bgp;
pub mod cluster;
pub mod controller;
pub mod cpus;
pub mod dataplane;
mod encap;
pub mod error;
pub mod host;
pub mod limits;
mod load;
pub mod quic;
pub mod service;
pub mod tier;

#[cfg(test)]
mod test_files;

pub use api::{ApiCfg, MetricsCfg, DEFAULT_API_LISTEN};
pub use bgp::{BgpCfg, DrainMode, Neighbour as BgpNeighbour};
pub use cluster::{ClusterCfg, DEFAULT_SYNC_PORT};
pub use controller::{ControllerCfg, OnSilent, PolicyName, TelemetryKind};
pub use dataplane::{
    ConnLru, Dataplane, NonSynMiss, Timeouts, Verdict, XdpModeCfg, DEFAULT_PIN_DIR,
};
pub use error::{ConfigError, ConfigWarning};
pub use host::HostFacts;
pub use load::Config;
pub use quic::Quic;
pub use service::{Dip, Health, HealthKind, Mode, Vip};
pub use tier::Tier;
pub use weir_core::worker_policy::{Mode as Distribution, OffloadPolicy, SprayScope};
