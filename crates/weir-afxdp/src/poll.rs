//! The data path of a socket, for a run-to-completion worker: receiving a
//! burst of frames, sending frames in place or as new packets, giving
//! frames back, the ring service that recycles them, and the wakeups
//! need_wakeup and busy polling ask for.
//!
//! Two ways to drive it: [`Socket::poll_once`] runs a handler on each frame
//! of a burst in place (forward or drop); [`Socket::receive`],
//! [`Socket::queue_tx`], [`Socket::release`] and [`Socket::flush`] let the
//! caller keep frames past the burst, hand them to another thread, and
//! send or release them later through any socket of their group.

use crate::error::Result;
use crate::frame::Frame;
use crate::socket::Socket;
use crate::sockopt;
use crate::stats::{Iteration, Verdict};

/// sendto() calls one flush may make in copy mode, where each call sends
/// at most 32 frames (the kernel's TX_BATCH_SIZE): 256 frames a flush.
const MAX_TX_KICKS: u32 = 8;

impl Socket {
    /// One iteration of a worker loop: receives a burst and hands each
    /// frame to `handler` as a mutable slice into the UMEM; frames it
    /// forwards go to the TX ring as they are (no copy), the rest back to
    /// the fill ring. Returns the iteration's numbers; it is busy if it
    /// received anything. Makes a syscall only when the kernel asks for one
    /// (need_wakeup) or busy polling is on.
    pub fn poll_once<F>(&mut self, mut handler: F) -> Result<Iteration>
    where
        F: FnMut(&mut [u8]) -> Verdict,
    {
        let mut burst = std::mem::take(&mut self.burst);
        let received = self.receive(&mut burst);
        let mut it = Iteration {
            received: burst.len() as u32,
            ..Iteration::default()
        };
        for mut frame in burst.drain(..) {
            match handler(self.data_mut(&mut frame)) {
                Verdict::Forward => self.queue_tx(frame),
                Verdict::Drop => {
                    self.release(frame);
                    it.dropped += 1;
                }
            }
        }
        self.burst = burst;
        received?;
        (it.forwarded, it.tx_ring_full) = self.flush()?;
        Ok(it)
    }

    /// Takes up to a batch of received frames off the RX ring and appends
    /// them to `burst`; returns how many. An empty poll sends what waits on
    /// the TX ring, wakes the kernel if it asked (or busy polls) and
    /// services the group's rings if no other socket of the group is at it.
    pub fn receive(&mut self, burst: &mut Vec<Frame>) -> Result<usize> {
        // SAFETY: rx_batch holds descriptors only; the RX ring hands back
        // frames of this socket's UMEM, which consume writes into them.
        let n = unsafe { self.rx.consume(&mut self.rx_batch) };
        if n == 0 {
            // What an earlier flush left on the TX ring (a kick sends a
            // bounded number, and the kernel may stop early) leaves now: on
            // a quiet socket no later flush would send it.
            self.kick_tx()?;
            self.service_rings(false);
            if self.busy_poll.is_some() || self.rx_wakeup {
                self.wake_rx()?;
            }
            return Ok(0);
        }
        if self.busy_poll.is_some() && !self.napi_checked {
            self.check_napi();
        }
        let group = self.group;
        burst.extend(self.rx_batch[..n].iter().map(|&desc| Frame { desc, group }));
        self.counters.rx_packets += n as u64;
        self.counters.rx_bursts += 1;
        Ok(n)
    }

    /// Puts `frame` on the TX ring at the next [`Socket::flush`], as it is.
    /// Any socket of the frame's group may send it, on its own queue.
    ///
    /// # Panics
    /// If `frame` belongs to another group.
    pub fn queue_tx(&mut self, frame: Frame) {
        assert!(self.owns(&frame), "queue_tx: a frame of another UMEM");
        self.tx_batch.push(frame.desc);
    }

    /// Gives `frame` back to the group: it goes to the fill ring at the
    /// next ring service.
    ///
    /// # Panics
    /// If `frame` belongs to another group.
    pub fn release(&mut self, frame: Frame) {
        assert!(self.owns(&frame), "release: a frame of another UMEM");
        self.done.push(frame.desc);
        self.counters.released += 1;
    }

    /// Sends what [`Socket::queue_tx`] queued: puts it on the TX ring
    /// (what does not fit is dropped and counted), kicks the kernel when it
    /// asks, and services the group's rings. Returns (sent, dropped).
    pub fn flush(&mut self) -> Result<(u32, u32)> {
        let counts = self.post_tx();
        self.kick_tx()?;
        self.service_rings(true);
        Ok(counts)
    }

    /// Sends up to `count` new frames (at most a batch, and as many as
    /// there are free frames and TX ring slots). `write` gets each frame's
    /// whole buffer and returns the packet's length; 0 keeps the frame
    /// unsent. Returns how many frames went on the TX ring.
    pub fn transmit<F>(&mut self, count: usize, mut write: F) -> Result<usize>
    where
        F: FnMut(&mut [u8]) -> usize,
    {
        let want = count.min(self.batch);
        let want = want.min(self.tx.nb_free(want as u32) as usize);
        let mut frames = std::mem::take(&mut self.spare);
        self.rings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_free(want, &mut frames);
        for mut desc in frames.drain(..) {
            let len = {
                // SAFETY: a free frame is in no ring and referenced nowhere else.
                let mut data = unsafe { self.umem.data_mut(&mut desc) };
                let mut cursor = data.cursor();
                let capacity = cursor.buf_len();
                cursor.set_pos(capacity);
                let len = write(data.contents_mut());
                assert!(
                    len <= capacity,
                    "transmit: {len} bytes claimed of a {capacity}-byte frame"
                );
                data.cursor().set_pos(len);
                len
            };
            if len == 0 {
                self.done.push(desc);
            } else {
                self.tx_batch.push(desc);
            }
        }
        self.spare = frames;
        let (sent, _) = self.post_tx();
        self.kick_tx()?;
        self.service_rings(true);
        Ok(sent as usize)
    }

    /// Puts `tx_batch` on the TX ring; frames that do not fit go back to
    /// the group. Returns (sent, dropped).
    fn post_tx(&mut self) -> (u32, u32) {
        let want = self.tx_batch.len();
        if want == 0 {
            return (0, 0);
        }
        let room = want.min(self.tx.nb_free(want as u32) as usize);
        // SAFETY: these frames are this UMEM's and the caller's alone
        // (received, kept or free): in no ring, referenced nowhere else.
        // Reservation is all or nothing, so `produced` is 0 or `room`.
        let produced = unsafe { self.tx.produce(&self.tx_batch[..room]) };
        self.done.extend_from_slice(&self.tx_batch[produced..]);
        self.tx_batch.clear();
        self.tx_posted += produced as u32;
        let dropped = (want - produced) as u64;
        self.counters.tx_packets += produced as u64;
        self.counters.tx_ring_full += dropped;
        (produced as u32, dropped as u32)
    }

    /// Frames the kernel has not yet taken off the TX ring?
    fn tx_pending(&mut self) -> bool {
        self.tx.nb_free_exact() < self.ring_size
    }

    /// sendto() while the kernel asks for it (need_wakeup, or always under
    /// busy polling) and frames wait on the TX ring. Copy mode sends in
    /// the call, a bounded number per call; zero-copy only wakes the driver.
    fn kick_tx(&mut self) -> Result<()> {
        for _ in 0..MAX_TX_KICKS {
            if !self.tx_pending() || !(self.busy_poll.is_some() || self.tx.needs_wakeup()) {
                break;
            }
            self.counters.tx_wakeups += 1;
            sockopt::wake_tx(self.fd()).map_err(|e| self.socket_error("sendto (TX wakeup)", e))?;
            // Completions free room the kernel needs to send more.
            self.service_rings(true);
            if self.zero_copy {
                break;
            }
        }
        Ok(())
    }

    /// Busy polling drives the NAPI context the socket's packets come from,
    /// which the kernel learns from the first packet. A driver that gives
    /// its XDP RX queues no NAPI id (veth) leaves nothing to drive: then the
    /// busy-poll syscalls are pure cost, and polling goes on without them.
    fn check_napi(&mut self) {
        self.napi_checked = true;
        if let Ok(0) = sockopt::napi_id(self.fd()) {
            eprintln!(
                "weir-afxdp: {} queue {}: the driver gives this queue no NAPI context to \
                 busy-poll; polling without busy polling",
                self.iface.name, self.queue
            );
            self.busy_poll = None;
        }
    }

    fn wake_rx(&mut self) -> Result<()> {
        self.counters.rx_wakeups += 1;
        sockopt::wake_rx(self.fd()).map_err(|e| self.socket_error("recvfrom (RX wakeup)", e))
    }
}
