//! The software tier's policies as plain values, shared by the
//! configuration (which names them) and the engine (which carries them
//! out): how packets reach the workers ([`Mode`], [`SprayScope`]) and
//! which connections the hybrid tier's fast table holds
//! ([`OffloadPolicy`]).

use std::fmt;

/// Workers at most: one per RX queue, as XDP steers (`WEIR_MAX_QUEUES`).
pub const MAX_WORKERS: u16 = weir_abi::WEIR_MAX_QUEUES as u16;

/// How packets are distributed to workers (`distribution` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One worker per flow (its bucket's home).
    Flow,
    /// Every packet in scope to the next worker, then reordered.
    Spray,
    /// Flow, except for dominant buckets, spread over just enough workers.
    Adaptive,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Flow => "flow",
            Mode::Spray => "spray",
            Mode::Adaptive => "adaptive",
        })
    }
}

/// Which packets spray and adaptive may spread over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SprayScope {
    /// TCP only (the seed): other protocols keep their flow's worker.
    #[default]
    Tcp,
    /// Every protocol.
    All,
}

/// How the fast table is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffloadPolicy {
    /// Install new connections while there is room (HNLB).
    First,
    /// Keep the heaviest connections in the fast table (dynamic offloading).
    Heavy,
}
