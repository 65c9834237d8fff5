//! Traffic for the labs: a packet generator that offers millions of packets
//! a second from a namespace's interface, and sinks that count what reaches
//! the backends.
//!
//! - [`offer`] / [`start`]: weir_gen (BPF_PROG_TEST_RUN on live frames)
//!   from threads that enter the namespace, one per CPU, paced to a rate or
//!   as fast as possible, bounded by a duration and a count.
//! - [`Sink`]: weir_sink on a backend's interface: packets, bytes, SYNs and
//!   optionally packets per flow, counted in XDP and dropped (or passed on).
//! - [`lab`]: `weir-lab gen`, the generator and one sink across a veth pair
//!   ([`lab::Pair`], also for tests).
//!
//! A SYN flood from spoofed sources while real connections run:
//! ```no_run
//! # use std::time::Duration;
//! # use weir_lab::traffic::*;
//! # fn main() -> anyhow::Result<()> {
//! # let (client_ns, lb_ns) = ("w1-0-client", "w1-0-lb");
//! let vip = "10.77.100.1:80".parse()?;
//! let mut syns = GenSpec::syn_flood("198.18.0.0".parse()?, 15, vip, 1);
//! syns.dst_mac = mac_in(lb_ns, "wc0")?; // the load balancer's end of the client's link
//! let flood = start(client_ns, "eth0", &OfferSpec {
//!     rate: Some(100_000.0),
//!     count: Some(1_000_000),
//!     ..OfferSpec::new(syns, Duration::from_secs(12))
//! })?;
//! // ... real TCP connections through the VIP ...
//! let offered = flood.wait()?;
//! assert_eq!(offered.sent, 1_000_000);
//! # Ok(()) }
//! ```

pub mod lab;
mod offer;
mod sink;

pub use offer::{offer, start, OfferSpec, Offered, Offering};
pub use sink::Sink;
pub use weir_traffic::gen::{tcp_flags, FlowDist, GenSpec, Sources, L4};
pub use weir_traffic::sink::{SinkOptions, SinkStats};

use anyhow::{anyhow, Context, Result};

/// The MAC address of `iface` in namespace `ns`: the `dst_mac` of packets
/// offered to that interface's peer.
pub fn mac_in(ns: &str, iface: &str) -> Result<[u8; 6]> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<[u8; 6]> {
            crate::netns::enter(ns)?;
            Ok(weir_dataplane::iface::Iface::by_name(iface)?.mac)
        })
        .join()
        .map_err(|_| anyhow!("the MAC lookup thread panicked"))?
    })
    .with_context(|| format!("reading the MAC address of {iface} in namespace {ns}"))
}

/// Frames the generator's XDP_TX out of `iface` (in `ns`) found the veth
/// peer's ring full and lost: the sum of its `tx_queue_N_xdp_xmit_errors`.
/// A veth gives XDP no backpressure, so when the receiving CPU falls behind
/// (a busy machine) this is where offered packets go missing.
pub fn ring_full_drops(ns: &str, iface: &str) -> Result<u64> {
    Ok(crate::topology::ethtool_stats(ns, iface)?
        .into_iter()
        .filter(|(k, _)| k.starts_with("tx_queue_") && k.ends_with("_xdp_xmit_errors"))
        .map(|(_, n)| n)
        .sum())
}
