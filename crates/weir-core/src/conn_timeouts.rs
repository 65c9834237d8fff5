//! Idle timeouts of connection entries, by state, and the data plane's
//! clock they are counted in (conntrack.h): shared by the configuration,
//! the XDP loader and the sweeper.

use std::time::Duration;

use weir_abi::WEIR_TICK_SHIFT;

/// `d` in the data plane's ticks of 2^WEIR_TICK_SHIFT ns.
pub fn ticks(d: Duration) -> u32 {
    let t = d.as_nanos() >> WEIR_TICK_SHIFT;
    u32::try_from(t).unwrap_or(u32::MAX)
}

/// Idle timeouts of connection entries, by state (conntrack.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnTimeouts {
    /// A SYN seen, the handshake not complete.
    pub tcp_half_open: Duration,
    pub tcp_established: Duration,
    /// A FIN seen in one direction.
    pub tcp_closing: Duration,
    /// FINs in both directions, or a RST: the grace period before the entry goes.
    pub tcp_closed: Duration,
    pub udp: Duration,
}

impl Default for ConnTimeouts {
    /// IPVS's defaults: 15 min established, 2 min closing, 5 min UDP.
    fn default() -> Self {
        ConnTimeouts {
            tcp_half_open: Duration::from_secs(30),
            tcp_established: Duration::from_secs(900),
            tcp_closing: Duration::from_secs(120),
            tcp_closed: Duration::from_secs(10),
            udp: Duration::from_secs(300),
        }
    }
}

impl ConnTimeouts {
    /// The longest timeout the data plane's 32-bit tick clock can hold with
    /// room to spare (ticks wrap after about 52 days).
    pub const MAX: Duration = Duration::from_secs(7 * 24 * 3600);

    /// In the data plane's units (conntrack.h).
    pub fn ticks(&self) -> weir_abi::weir_conn_timeouts {
        weir_abi::weir_conn_timeouts {
            tcp_half_open: ticks(self.tcp_half_open),
            tcp_established: ticks(self.tcp_established),
            tcp_closing: ticks(self.tcp_closing),
            tcp_closed: ticks(self.tcp_closed),
            udp: ticks(self.udp),
        }
    }
}
