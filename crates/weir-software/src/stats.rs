//! What a worker reports twice a second: its load balancer's counters
//! (weir_lb's `enum weir_stat`), its sockets' counters and drops, HNLB's
//! utilization metric over the last window, and the offload counters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_core::offload::OffloadStats;
use weir_core::utilization::Utilization;

/// The worker's own counters, beyond the load balancer's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCounters {
    /// Frames copied to another interface's socket and sent.
    pub cross_sent: u64,
    /// Frames for another interface that found its TX ring or free frames
    /// exhausted.
    pub cross_dropped: u64,
    /// Frames for an interface the worker has no socket on.
    pub no_egress_socket: u64,
    /// Frames the load balancer would pass to the kernel, which a socket
    /// cannot do.
    pub pass_dropped: u64,
}

/// One socket: the worker's counters and the kernel's XDP_STATISTICS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketStats {
    pub interface: String,
    pub queue: u32,
    pub rx_packets: u64,
    pub rx_bursts: u64,
    pub tx_packets: u64,
    /// Frames to forward that found the TX ring full.
    pub tx_ring_full: u64,
    /// Kernel: packets dropped (no frame, too long, ...).
    pub rx_dropped: u64,
    /// Kernel: the RX ring was full.
    pub rx_ring_full: u64,
    /// Kernel: the fill ring was empty when a packet came.
    pub fill_ring_empty: u64,
}

/// Traffic of a VIP or a DIP slot that the worker handled (what XDP
/// forwarded itself, it counts in its own maps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
    pub new_conns: u64,
}

/// A worker's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerStats {
    pub cpu: usize,
    /// The last error the worker met (it goes on).
    pub error: Option<String>,
    pub counters: WorkerCounters,
    /// The load balancer's counters, indexed by `enum weir_stat`.
    pub slb: Vec<u64>,
    pub connections: usize,
    pub half_open: usize,
    /// By VIP id, those with traffic.
    #[serde(default)]
    pub vip_traffic: BTreeMap<u32, Traffic>,
    /// By DIP slot, those with traffic.
    #[serde(default)]
    pub dip_traffic: BTreeMap<u32, Traffic>,
    /// The last window's utilization (HNLB eq. 2/3) and its parts.
    pub utilization: Option<Utilization>,
    pub offload: Option<OffloadStats>,
    pub sockets: Vec<SocketStats>,
}
