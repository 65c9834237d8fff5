//! What a worker reports twice a second: its sockets' counters and drops,
//! HNLB's utilization metric over the last window, the reorder stages it
//! owns; and, from the first worker only, what the workers share: the load
//! balancer's counters (weir_lb's `enum weir_stat`), connections and
//! traffic, the offload counters, the adaptive decisions. So sums over the
//! workers count everything once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_software_engine::offload::OffloadStats;
use weir_software_engine::utilization::Utilization;

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
    /// Kernel: invalid descriptors on the RX ring (dropped).
    #[serde(default)]
    pub rx_invalid_descs: u64,
    /// Kernel: the fill ring was empty when a packet came (in copy mode
    /// such a packet is in `rx_dropped` too: not a drop of its own).
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

/// The reorder stages a worker owns, added up
/// (`weir_software_engine::reorder::ReorderStats`, whose meanings these are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReorderCounters {
    /// Packets the workers handed in.
    pub completed: u64,
    /// Numbers whose packet a worker dropped.
    pub dropped: u64,
    /// Packets that waited for an earlier number.
    pub held: u64,
    /// Released in ingress order.
    pub in_order: u64,
    /// Released after an earlier missing number was given up.
    pub late: u64,
    /// Came after its number was given up: released out of order.
    pub out_of_order: u64,
    /// Missing numbers given up after the hold time (lost after ingress,
    /// or a worker stalled that long).
    pub timeouts: u64,
    /// Missing numbers given up to stay within the buffer.
    pub overflows: u64,
    /// Missing numbers given up at once, because their worker had taken a
    /// later one (spray: its ring lost them).
    #[serde(default)]
    pub lost: u64,
    /// Held now.
    pub buffered: u64,
}

impl ReorderCounters {
    pub fn add(&mut self, s: &weir_software_engine::reorder::ReorderStats) {
        self.completed += s.completed;
        self.dropped += s.dropped;
        self.held += s.held;
        self.in_order += s.in_order;
        self.late += s.late;
        self.out_of_order += s.out_of_order;
        self.timeouts += s.timeouts + s.flushed;
        self.overflows += s.overflows;
        self.lost += s.lost;
        self.buffered += s.buffered;
    }
}

/// Adaptive distribution's decisions
/// (`weir_software_engine::distribution::adaptive::AdaptiveStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SpreadCounters {
    pub decisions: u64,
    /// Buckets spread over several workers now.
    pub spread: u64,
    pub widened: u64,
    pub narrowed: u64,
    /// What one worker carries, packets per second, once known.
    pub capacity_pps: Option<f64>,
}

impl From<weir_software_engine::distribution::adaptive::AdaptiveStats> for SpreadCounters {
    fn from(s: weir_software_engine::distribution::adaptive::AdaptiveStats) -> Self {
        SpreadCounters {
            decisions: s.decisions,
            spread: s.spread,
            widened: s.widened,
            narrowed: s.narrowed,
            capacity_pps: s.capacity_pps,
        }
    }
}

/// A worker's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerStats {
    pub cpu: usize,
    /// The last error the worker met (it goes on).
    pub error: Option<String>,
    pub counters: WorkerCounters,
    /// The shared load balancer's counters, indexed by `enum weir_stat`
    /// (the first worker's report; empty in the others').
    pub slb: Vec<u64>,
    /// The shared table's connections (first worker; 0 in the others).
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
    /// The reorder stages this worker transmits for (None: reordering off).
    #[serde(default)]
    pub reorder: Option<ReorderCounters>,
    /// Adaptive distribution (first worker's report, adaptive mode only).
    #[serde(default)]
    pub spread: Option<SpreadCounters>,
}
