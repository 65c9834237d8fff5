//! The software load balancer: the sans-IO core of the software tier
//! (HNLB's SLB, seed 000 section III), which does exactly what the XDP
//! program `bpf/weir_lb.bpf.c` does, so a connection's DIP never depends on
//! which tier saw its packet.
//!
//! A worker on an AF_XDP socket hands each frame to [`Slb::process`] with
//! the interface it came in by and the time; the frame is rewritten in
//! place and the [`Outcome`] says whether to send it (and by which
//! interface), drop it, or pass it to the kernel. [`Slb::poll_event`]
//! reports what a hybrid tier mirrors into the bounded fast table (a
//! connection installed, closed or removed), and [`Slb::expire`] ages
//! entries out in the background. Nothing here touches a socket or reads a
//! clock, so tests drive it with frames and a fake clock, and the BPF
//! agreement test (`weir-dataplane/tests/slb_agrees.rs`) runs the same
//! frames through both tiers and compares them byte for byte.
//!
//! Shared with the XDP program, so the tiers agree by construction:
//! - the flow key (`weir_flow_key`), the flow hash
//!   ([`weir_core::flow_hash::flow_hash`] with the configured seed) and the AWFD
//!   tables ([`weir_core::dispatch::awfd::AwfdTable`], the controller's, with versions);
//! - the map values: VIP keys and values, DIP slots (`weir_dip`, whose
//!   generation and LIVE flag keep PCC), `weir_conn`, `weir_rev_nat`;
//! - the counters (`enum weir_stat`), the tick clock and the timeouts
//!   (`weir_conn_timeouts`).
//!
//! Time: `now_ns` is nanoseconds of the coarse monotonic clock
//! (CLOCK_MONOTONIC_COARSE, which `bpf_ktime_get_coarse_ns` reads); entries
//! age in its ticks of 2^20 ns, truncated to 32 bits, exactly as in XDP, so
//! an entry the worker installs in the fast table ages there the same way.
//!
//! Where the software tier differs from weir_lb, by design:
//! - next hop: there is no FIB lookup; a DIP's next hop is its resolved
//!   [`NextHop`] if the worker set one, else its configured MAC on the
//!   ingress interface (weir_lb with `fib_lookup = false`). No frame is
//!   passed for the kernel to resolve a neighbour (`pass_no_neigh`);
//! - a reverse entry lives and dies with its connection (weir_lb keeps it
//!   in a separate LRU that may lose it and restores it on one forward
//!   packet in 64); so a reply from a DIP whose connection was
//!   redispatched or forgotten is no longer rewritten;
//! - a stray reply of a nat DIP goes to the kernel if it is addressed to a
//!   local address ([`Services::set_local_addrs`]), and is dropped
//!   otherwise (weir_lb asks the FIB whether the kernel would forward it);
//! - passive telemetry (`req_us`, `dip_telemetry`) is not measured here.

mod config;
mod conntrack;
mod engine;
mod lru;
mod outcome;
mod packet;
mod rewrite;
mod services;

#[cfg(test)]
mod tests;

pub use config::{Action, Config, ConfigError, NonSynMiss};
pub use conntrack::{idle_past, tick_of, ticks, State, Timeouts, ATIME_REFRESH, MAX_TIMEOUT};
pub use engine::Slb;
pub use outcome::{
    Connection, Counters, DropReason, Egress, Event, Forward, Outcome, PassReason, Removal, Side,
};
pub use packet::{parse, Frame, Packet, Parsed, Truncated};
pub use rewrite::{csum_replace2, csum_replace4, rewrite_endpoint, set_macs, End, OutOfBounds};
pub use services::{DipSlot, NextHop, ServiceError, Services};
