//! What one socket counts: the worker's own counters (plain integers, owned
//! by the one thread that polls), the kernel's XDP_STATISTICS, and the
//! numbers of one poll iteration, which the utilization metric consumes.

/// What the handler decided for a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send the (rewritten) frame back out of the same interface and queue.
    Forward,
    /// Return the frame to the fill ring.
    Drop,
}

/// One [`poll_once`](crate::Socket::poll_once).
/// `received == forwarded + dropped + tx_ring_full`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iteration {
    /// Packets taken off the RX ring: the burst size.
    pub received: u32,
    /// Frames put on the TX ring.
    pub forwarded: u32,
    /// Frames the handler dropped.
    pub dropped: u32,
    /// Frames to forward that found the TX ring full (dropped).
    pub tx_ring_full: u32,
}

impl Iteration {
    /// Busy iterations are the ones that received something (HNLB's
    /// definition: an empty poll is idle however long it took).
    pub fn is_busy(&self) -> bool {
        self.received > 0
    }
}

/// The worker's counters, since the socket was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    /// Polls that received at least one packet.
    pub rx_bursts: u64,
    /// Frames put on the TX ring (forwarded and newly transmitted).
    pub tx_packets: u64,
    /// Frames given back unsent: the handler's drops, [`Socket::release`].
    ///
    /// [`Socket::release`]: crate::Socket::release
    pub released: u64,
    /// Frames to send that found the TX ring full, dropped by the worker.
    pub tx_ring_full: u64,
    /// recvfrom() calls made because need_wakeup or busy polling asked.
    pub rx_wakeups: u64,
    /// sendto() calls made because need_wakeup or busy polling asked.
    pub tx_wakeups: u64,
}

/// The kernel's counters for the socket (XDP_STATISTICS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets dropped for any other reason than an invalid descriptor
    /// (e.g. too long for a frame, or no frame to copy into).
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring.
    pub tx_invalid_descs: u64,
    /// Packets dropped because the RX ring was full: the worker fell behind.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty: no frame to receive into.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when asked to send (every
    /// send call that drains the ring ends so; not a loss).
    pub tx_ring_empty_descs: u64,
}

impl From<xsk_rs::socket::XdpStatistics> for KernelStats {
    fn from(s: xsk_rs::socket::XdpStatistics) -> Self {
        KernelStats {
            rx_dropped: s.rx_dropped(),
            rx_invalid_descs: s.rx_invalid_descs(),
            tx_invalid_descs: s.tx_invalid_descs(),
            rx_ring_full: s.rx_ring_full(),
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs(),
            tx_ring_empty_descs: s.tx_ring_empty_descs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_iterations_that_received_are_busy() {
        assert!(!Iteration::default().is_busy());
        let it = Iteration {
            received: 3,
            forwarded: 1,
            dropped: 1,
            tx_ring_full: 1,
        };
        assert!(it.is_busy());
    }
}
