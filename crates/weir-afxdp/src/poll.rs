//! The data path of a socket, for a run-to-completion worker: one poll
//! (reclaim completions, receive a burst, handle each packet in place,
//! forward without copying, refill), sending new frames, and the wakeups
//! need_wakeup and busy polling ask for.

use xsk_rs::FrameDesc;

use crate::error::Result;
use crate::socket::Socket;
use crate::sockopt;
use crate::stats::{Iteration, Verdict};

/// sendto() calls one poll may make in copy mode, where each call sends at
/// most 32 frames (the kernel's TX_BATCH_SIZE): 256 frames a poll.
const MAX_TX_KICKS: u32 = 8;

impl Socket {
    /// One iteration of a worker loop. Takes up to a batch of packets off
    /// the RX ring and hands each to `handler` as a mutable slice into the
    /// UMEM; frames it forwards go to the TX ring as they are (no copy),
    /// the rest back to the fill ring. Returns the iteration's numbers; it
    /// is busy if it received anything. Makes a syscall only when the
    /// kernel asks for one (need_wakeup) or busy polling is on.
    pub fn poll_once<F>(&mut self, mut handler: F) -> Result<Iteration>
    where
        F: FnMut(&mut [u8]) -> Verdict,
    {
        self.reclaim_completions();
        // SAFETY: rx_batch holds descriptors only; the RX ring hands back
        // frames of this socket's UMEM, which consume writes into them.
        let n = unsafe { self.rx.consume(&mut self.rx_batch) };
        let mut it = Iteration::default();
        if n == 0 {
            if self.busy_poll.is_some() || self.fill.needs_wakeup() {
                self.wake_rx()?;
            }
            self.refill();
            return Ok(it);
        }
        it.received = n as u32;
        if self.busy_poll.is_some() && !self.napi_checked {
            self.check_napi();
        }
        self.tx_batch.clear();
        for desc in &mut self.rx_batch[..n] {
            let verdict = {
                // SAFETY: the kernel handed this frame back on the RX ring,
                // and no ring or other reference holds it until we post it.
                let mut data = unsafe { self.umem.data_mut(desc) };
                handler(data.contents_mut())
            };
            match verdict {
                Verdict::Forward => self.tx_batch.push(*desc),
                Verdict::Drop => {
                    self.free.push(*desc);
                    it.dropped += 1;
                }
            }
        }
        (it.forwarded, it.tx_ring_full) = self.post_tx();
        self.kick_tx()?;
        self.refill();
        self.counters.rx_packets += u64::from(it.received);
        self.counters.rx_bursts += 1;
        self.counters.handler_drops += u64::from(it.dropped);
        Ok(it)
    }

    /// Sends up to `count` new frames (at most a batch, and as many as there
    /// are free frames and TX ring slots). `write` gets each frame's whole
    /// buffer and returns the packet's length; 0 keeps the frame unsent.
    /// Returns how many frames went on the TX ring.
    pub fn transmit<F>(&mut self, count: usize, mut write: F) -> Result<usize>
    where
        F: FnMut(&mut [u8]) -> usize,
    {
        self.reclaim_completions();
        let want = count.min(self.batch).min(self.free.len());
        let n = want.min(self.tx.nb_free(want as u32) as usize);
        self.tx_batch.clear();
        for _ in 0..n {
            let Some(mut desc) = self.free.pop() else {
                break;
            };
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
                self.free.push(desc);
            } else {
                self.tx_batch.push(desc);
            }
        }
        let (sent, _) = self.post_tx();
        self.kick_tx()?;
        Ok(sent as usize)
    }

    /// Puts `tx_batch` on the TX ring; frames that do not fit are dropped
    /// back to the free list. Returns (sent, dropped).
    fn post_tx(&mut self) -> (u32, u32) {
        let want = self.tx_batch.len();
        if want == 0 {
            return (0, 0);
        }
        let room = want.min(self.tx.nb_free(want as u32) as usize);
        // SAFETY: these frames are this UMEM's and ours alone (just received
        // or free): in no ring, referenced nowhere else. Reservation is all
        // or nothing, so `produced` is 0 or `room`.
        let produced = unsafe { self.tx.produce(&self.tx_batch[..room]) };
        self.free.extend_from_slice(&self.tx_batch[produced..]);
        self.tx_outstanding += produced as u32;
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
            self.reclaim_completions();
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

    /// Takes sent frames back from the completion ring into the free list.
    fn reclaim_completions(&mut self) {
        if self.tx_outstanding == 0 {
            return;
        }
        let start = self.free.len();
        // Within capacity: the free list can hold every frame of the UMEM.
        self.free
            .resize(start + self.tx_outstanding as usize, FrameDesc::default());
        // SAFETY: the completion ring returns frames of this UMEM that we
        // sent; consume only writes the descriptors.
        let n = unsafe { self.comp.consume(&mut self.free[start..]) };
        self.free.truncate(start + n);
        self.tx_outstanding -= n as u32;
    }

    /// Gives free frames to the fill ring, as many as it has room for.
    pub(crate) fn refill(&mut self) {
        let have = self.free.len();
        if have == 0 {
            return;
        }
        let n = have.min(self.fill.nb_free(have as u32) as usize);
        if n == 0 {
            return;
        }
        // SAFETY: free frames are this UMEM's, in no ring, referenced
        // nowhere else. Reservation is all or nothing.
        let produced = unsafe { self.fill.produce(&self.free[have - n..]) };
        self.free.truncate(have - produced);
    }
}
