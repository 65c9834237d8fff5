//! The reorder stage of the software tier (seed 001): one
//! [`weir_software_engine::reorder::Reorder`] per ingress (interface, queue), the
//! sequence space XDP numbers spread packets in.
//!
//! A stream has one owner, the worker that transmits its released
//! packets: one sender per stream is what keeps the order on the wire
//! (two sockets' TX rings are drained in no particular order relative to
//! each other). Every worker hands the stream the numbered packets it
//! finished, and the numbers it dropped, under the stream's lock, once per
//! burst; what that releases queues up in the stream, in order, and the
//! owner takes it, with what the hold time gives up, once per loop.
//! Owners are spread over the workers (stream `i` is worker `i % workers`'s),
//! so a flow's requests and its replies, which arrive on different
//! interfaces, are transmitted by different workers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use weir_afxdp::Frame;
use weir_software_engine::reorder::{Reorder, ReorderConfig, ReorderError, ReorderStats, Seq};

/// A finished packet of a stream: its frame and the port it leaves by.
#[derive(Debug)]
pub struct Done {
    pub frame: Frame,
    /// The worker port (interface and queue) it leaves by.
    pub egress: usize,
}

struct State {
    reorder: Reorder<Done>,
    /// Released, in order, waiting for the owner to send.
    out: Vec<Done>,
}

/// One ingress queue's reorder stage.
pub struct Stream {
    owner: usize,
    state: Mutex<State>,
    /// Whether anything is held or released: the owner skips the lock of a
    /// stream with nothing in it.
    busy: AtomicBool,
}

impl Stream {
    /// XDP numbers each queue from 0 (its counter starts with the program);
    /// `round_robin`: the workers, when number `seq` goes to worker `seq %
    /// workers` (spray).
    pub fn new(
        owner: usize,
        cfg: ReorderConfig,
        round_robin: Option<u32>,
    ) -> Result<Stream, ReorderError> {
        let mut reorder = Reorder::new(cfg, 0)?;
        if let Some(workers) = round_robin {
            reorder.assign_round_robin(workers);
        }
        Ok(Stream {
            owner,
            state: Mutex::new(State {
                reorder,
                out: Vec::with_capacity(cfg.capacity as usize + 1),
            }),
            busy: AtomicBool::new(false),
        })
    }

    pub fn owner(&self) -> usize {
        self.owner
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A worker's burst as it comes off the ring, before any work on it:
    /// the numbers it took. The stage then waits for them however long the
    /// worker takes (up to `CLAIM_HOLD_NS`), and gives up only numbers no
    /// worker took.
    pub fn claim(&self, seqs: impl Iterator<Item = Seq>, now_ns: u64) {
        let mut st = self.lock();
        for seq in seqs {
            st.reorder.claim(seq, now_ns);
        }
    }

    /// A worker's burst: the packets it finished (with their numbers) and
    /// the numbers whose packets it dropped. Drains both.
    pub fn hand_in(&self, done: &mut Vec<(Seq, Done)>, dropped: &mut Vec<Seq>, now_ns: u64) {
        let mut st = self.lock();
        let State { reorder, out } = &mut *st;
        for seq in dropped.drain(..) {
            reorder.discard(seq, out);
        }
        for (seq, d) in done.drain(..) {
            reorder.complete(seq, d, now_ns, out);
        }
        self.busy
            .store(reorder.buffered() > 0 || !out.is_empty(), Ordering::Relaxed);
    }

    /// The owner's turn: gives up what waited `hold_ns` and moves every
    /// released packet, in order, to `into`.
    pub fn take_released(&self, now_ns: u64, into: &mut Vec<Done>) {
        if !self.busy.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.lock();
        let State { reorder, out } = &mut *st;
        reorder.poll(now_ns, out);
        into.append(out);
        self.busy.store(reorder.buffered() > 0, Ordering::Relaxed);
    }

    /// Releases everything held (the owner stops).
    pub fn flush(&self, into: &mut Vec<Done>) {
        let mut st = self.lock();
        let State { reorder, out } = &mut *st;
        reorder.flush(out);
        into.append(out);
        self.busy.store(false, Ordering::Relaxed);
    }

    pub fn stats(&self) -> ReorderStats {
        self.lock().reorder.stats()
    }
}
