//! The reorder stage before transmit (seed 001, per-packet load balancing),
//! sans-IO: packets of sprayed or spread flows leave in the order they
//! entered, although workers finish them out of order.
//!
//! **Sequence numbers.** Ingress numbers every packet it spreads, in
//! arrival order, from one counter per ingress queue ([`Sequencer`]; in
//! weir the XDP program, a per-CPU counter carried in the packet's XDP
//! metadata, since one CPU serves a queue at a time). One sequence space
//! per ingress queue, not per flow or flow group, because:
//! - the seed's point is that the middlebox knows which packets *it*
//!   received: that is a property of the ingress point. A packet lost
//!   before ingress never gets a number, so nothing ever waits for it;
//! - a per-queue counter is one increment, where per-flow numbers need
//!   per-flow state in XDP;
//! - sprayed, every flow crosses every worker, so per-group sequence
//!   spaces would not keep a stalled worker from blocking other groups.
//!
//! Releasing in sequence order releases every flow in its ingress order.
//! The cost is head-of-line blocking across the flows of one queue while a
//! number is missing, bounded by the hold time. A caller that wants groups
//! isolated (two spread flows on disjoint workers) gives each group its own
//! [`Reorder`] and its own counter.
//!
//! **What the stage learns.** Every number ends in one of three ways, and
//! the stage is told of the first two: a worker finished the packet
//! ([`Reorder::complete`]), a worker dropped it ([`Reorder::discard`]: the
//! load balancer's verdict was drop, so nothing waits for it), or it was
//! lost between ingress and a worker (an AF_XDP ring was full) and nobody
//! can say so. Only the last costs a wait: a missing number is given up
//! once a later packet has been held for `hold_ns`
//! ([`Reorder::poll`]), and once the buffer would exceed its capacity.
//!
//! A worker also says which numbers it has taken off its ring, before it
//! works on them ([`Reorder::claim`]). A claimed number cannot have been
//! lost: its packet will come, finished or dropped, however long its
//! worker is preempted. So the hold time gives up only numbers nobody
//! claimed, and a claimed one is waited for up to [`CLAIM_HOLD_NS`] (a
//! worker that stalls longer is treated as lost). That is the seed's
//! point, that the middlebox knows which packets it received, applied to
//! workers that share their CPUs with other threads and are descheduled
//! for milliseconds.
//!
//! Where ingress assigns numbers round robin (spray: number `seq` goes to
//! worker `seq % workers`, [`Reorder::assign_round_robin`]), the claims
//! say more: a worker's ring is FIFO, so a missing number whose worker has
//! claimed a later one was lost on the way and is given up at once
//! (`lost`), and one whose worker has not got that far is still in its
//! ring and is waited for like a claimed one. The hold time then matters
//! only where the assignment is not known (adaptive's spread sets).
//!
//! **Bounds.** At most `capacity` packets are held: a slot ring indexed by
//! the number modulo the capacity (a power of two, so the mapping survives
//! the 32-bit wrap), allocated once. A number at or past `head + capacity`
//! slides the window forward: the missing numbers it leaves behind are
//! given up (counted in `overflows`) and the packets before them released.
//! No packet is ever dropped here: every packet handed in comes out
//! exactly once, in the caller's `out` vector, which is how a frame handle
//! gets back to its owner. After [`Reorder::new`] nothing allocates, as
//! long as `out` has room for `capacity + 1` packets.
//!
//! **Threading.** A [`Reorder`] has one owner: the thread that transmits
//! for its ingress queue (in weir, the worker that polls that queue's
//! socket). Other workers hand it their finished packets, or the numbers
//! they dropped, over one single-producer queue each, and the owner feeds
//! them in as it drains those queues, in any interleaving (ordering them
//! is this stage's job), then calls [`Reorder::poll`] once per loop
//! iteration. Time is passed in: nanoseconds on one monotonic clock.

use std::collections::VecDeque;
use std::fmt;

pub use weir_core::reorder_bounds::{ReorderConfig, ReorderError, MAX_CAPACITY, MAX_HOLD_NS};

/// A packet's ingress sequence number. It wraps: numbers compare by their
/// distance from the oldest awaited number, so the window must stay below
/// 2^31 (the capacity bound keeps it far below).
pub type Seq = u32;

/// How long a claimed number is waited for (from its claim): its packet is
/// in a worker's hands, so only a worker stalled this long loses it.
pub const CLAIM_HOLD_NS: u64 = MAX_HOLD_NS;

/// Ingress's side: numbers packets in arrival order, from one counter per
/// ingress queue (what weir's XDP program keeps per CPU).
#[derive(Debug, Clone)]
pub struct Sequencer {
    next: Seq,
}

impl Sequencer {
    /// A counter whose first number is `first` (the release stage starts
    /// awaiting the same number).
    pub fn new(first: Seq) -> Sequencer {
        Sequencer { next: first }
    }

    /// The next packet's number.
    pub fn issue(&mut self) -> Seq {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        seq
    }
}

/// What happened to the packets and numbers of one stage.
///
/// Every completed packet is counted once in `in_order`, `late` or
/// `out_of_order`, or is still `buffered`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReorderStats {
    /// Packets handed in by workers ([`Reorder::complete`]).
    pub completed: u64,
    /// Numbers whose packet a worker dropped ([`Reorder::discard`]).
    pub dropped: u64,
    /// Packets that waited for an earlier number.
    pub held: u64,
    /// Packets released once every earlier number was released, dropped
    /// or given up: in ingress order, held or not.
    pub in_order: u64,
    /// Packets released because the stage gave up an earlier missing
    /// number (the hold time passed, the buffer was full, or a flush): in
    /// order, after the longest wait.
    pub late: u64,
    /// Packets whose number had already been given up (or was a
    /// duplicate): released at once, out of ingress order.
    pub out_of_order: u64,
    /// Numbers reported twice (completed or dropped while already held or
    /// dropped): a bug in the numbering, such as two queues on one stage.
    pub duplicates: u64,
    /// Missing numbers given up after a later packet waited `hold_ns`:
    /// packets lost after ingress, or stalled longer than that.
    pub timeouts: u64,
    /// Missing numbers given up at once: their worker had claimed a later
    /// number, so its ring lost them (round-robin assignment only).
    pub lost: u64,
    /// Missing numbers given up to keep the buffer within its capacity.
    pub overflows: u64,
    /// Missing numbers given up by [`Reorder::flush`].
    pub flushed: u64,
    /// Packets held now.
    pub buffered: u64,
    /// The most packets held at once.
    pub max_buffered: u64,
}

/// One number's place in the window.
enum Slot<P> {
    /// Not reported yet.
    Empty,
    /// Taken off a ring by a worker at this time, not finished yet.
    Claimed(u64),
    /// Finished, waiting for an earlier number.
    Held(P),
    /// Dropped by its worker.
    Dropped,
}

/// Whether number `a` comes after `b` (less than 2^31 ahead, as numbers
/// compare everywhere here).
fn after(a: Seq, b: Seq) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

impl<P> Slot<P> {
    /// Finished or dropped: the number's fate is known.
    fn is_known(&self) -> bool {
        matches!(self, Slot::Held(_) | Slot::Dropped)
    }
}

/// Where a number lies relative to the window `[head, head + capacity)`.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Window,
    /// At or past the window's end (less than 2^31 ahead).
    Ahead,
    /// Before `head`: released, dropped or given up already.
    Behind,
}

/// How a run of packets is counted when it leaves.
#[derive(Clone, Copy)]
enum Release {
    InOrder,
    Late,
}

/// The release stage of one ingress queue, generic over the packet handle
/// (a frame descriptor, a buffer: whatever the caller transmits).
pub struct Reorder<P> {
    hold_ns: u64,
    mask: u32,
    /// The oldest number not yet released, dropped or given up. Its slot
    /// is empty or claimed, never known: a run is released as soon as its
    /// head is known.
    head: Seq,
    slots: Box<[Slot<P>]>,
    /// The held packets' numbers and arrival times, in arrival order. An
    /// entry whose number is behind `head` was released; it is popped when
    /// it reaches the front, which happens before every push. Entries
    /// behind a held front were pushed while `head` was at most the
    /// front's number and at least that minus `capacity - 1`, so they are
    /// distinct numbers within two windows of it: the queue holds fewer
    /// than twice `capacity` entries and never reallocates.
    waiting: VecDeque<(Seq, u64)>,
    /// Round-robin assignment: number `seq` went to worker `seq % n`.
    workers: Option<u32>,
    /// The latest number each worker claimed (round-robin assignment).
    last_taken: Vec<Option<Seq>>,
    stats: ReorderStats,
}

impl<P> fmt::Debug for Reorder<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reorder")
            .field("head", &self.head)
            .field("capacity", &self.slots.len())
            .field("hold_ns", &self.hold_ns)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<P> Reorder<P> {
    /// A stage that awaits `first` (the ingress counter's first number).
    pub fn new(cfg: ReorderConfig, first: Seq) -> Result<Reorder<P>, ReorderError> {
        cfg.validate()?;
        let capacity = cfg.capacity as usize;
        Ok(Reorder {
            hold_ns: cfg.hold_ns,
            mask: cfg.capacity - 1,
            head: first,
            slots: (0..capacity).map(|_| Slot::Empty).collect(),
            waiting: VecDeque::with_capacity(2 * capacity),
            workers: None,
            last_taken: Vec::new(),
            stats: ReorderStats::default(),
        })
    }

    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Ingress sends number `seq` to worker `seq % workers` (spray), and
    /// the workers claim what they take: see the module docs.
    pub fn assign_round_robin(&mut self, workers: u32) {
        let workers = workers.max(1);
        self.workers = Some(workers);
        self.last_taken = vec![None; workers as usize];
    }

    /// Packets held now.
    pub fn buffered(&self) -> usize {
        self.stats.buffered as usize
    }

    /// The oldest number the stage still awaits.
    pub fn awaiting(&self) -> Seq {
        self.head
    }

    /// No later than the time at which [`Reorder::poll`] next has
    /// something to give up (`None` while nothing is held): a worker with
    /// no traffic may sleep until then.
    pub fn next_deadline(&self) -> Option<u64> {
        self.waiting
            .front()
            .map(|&(_, at)| at.saturating_add(self.hold_ns))
    }

    /// A worker finished packet `seq` at `now_ns`. Whatever can leave now
    /// (this packet and the run it completes) is appended to `out` in
    /// order.
    pub fn complete(&mut self, seq: Seq, packet: P, now_ns: u64, out: &mut Vec<P>) {
        self.stats.completed += 1;
        match self.place(seq) {
            Place::Behind => {
                self.stats.out_of_order += 1;
                out.push(packet);
                return;
            }
            Place::Ahead => self.slide_to(self.window_start_for(seq), out),
            Place::Window => {}
        }
        if seq == self.head {
            self.stats.in_order += 1;
            out.push(packet);
            self.slots[(seq & self.mask) as usize] = Slot::Empty;
            self.head = seq.wrapping_add(1);
            self.release_run(Release::InOrder, out);
            return;
        }
        let slot = &mut self.slots[(seq & self.mask) as usize];
        if slot.is_known() {
            self.stats.duplicates += 1;
            self.stats.out_of_order += 1;
            out.push(packet);
            return;
        }
        *slot = Slot::Held(packet);
        self.prune_waiting();
        debug_assert!(self.waiting.len() < self.waiting.capacity());
        self.waiting.push_back((seq, now_ns));
        self.stats.held += 1;
        self.stats.buffered += 1;
        self.stats.max_buffered = self.stats.max_buffered.max(self.stats.buffered);
    }

    /// A worker dropped packet `seq`: nothing waits for it. Whatever that
    /// unblocks is appended to `out`.
    pub fn discard(&mut self, seq: Seq, out: &mut Vec<P>) {
        self.stats.dropped += 1;
        match self.place(seq) {
            Place::Behind => return,
            Place::Ahead => self.slide_to(self.window_start_for(seq), out),
            Place::Window => {}
        }
        if seq == self.head {
            self.slots[(seq & self.mask) as usize] = Slot::Empty;
            self.head = seq.wrapping_add(1);
            self.release_run(Release::InOrder, out);
            return;
        }
        let slot = &mut self.slots[(seq & self.mask) as usize];
        if slot.is_known() {
            self.stats.duplicates += 1;
        } else {
            *slot = Slot::Dropped;
        }
    }

    /// A worker took packet `seq` off its ring at `now_ns` and will finish
    /// or drop it: the hold time does not give it up (see the module
    /// docs). A number outside the window, or already reported, is left
    /// as it is.
    pub fn claim(&mut self, seq: Seq, now_ns: u64) {
        if let Some(workers) = self.workers {
            let last = &mut self.last_taken[(seq % workers) as usize];
            if last.is_none_or(|l| after(seq, l)) {
                *last = Some(seq);
            }
        }
        if self.place(seq) != Place::Window {
            return;
        }
        let slot = &mut self.slots[(seq & self.mask) as usize];
        if matches!(slot, Slot::Empty) {
            *slot = Slot::Claimed(now_ns);
        }
    }

    /// Gives up every missing number that a packet held since `now_ns -
    /// hold_ns` or earlier waits for, unless a worker claimed it less than
    /// [`CLAIM_HOLD_NS`] ago (then the release stops there), and appends
    /// the packets that frees to `out`, in order. Call it once per loop
    /// iteration.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<P>) {
        self.give_up_lost(out);
        loop {
            self.prune_waiting();
            let Some(&(oldest, at)) = self.waiting.front() else {
                return;
            };
            if now_ns.saturating_sub(at) < self.hold_ns {
                return;
            }
            // Everything before the oldest held packet goes: held packets
            // that came later, and the missing numbers nobody claimed and
            // no worker's ring still holds.
            while self.head != oldest {
                let waiting = match self.slots[(self.head & self.mask) as usize] {
                    Slot::Claimed(claimed) => now_ns.saturating_sub(claimed) < CLAIM_HOLD_NS,
                    Slot::Empty => {
                        self.in_a_ring(self.head) && now_ns.saturating_sub(at) < CLAIM_HOLD_NS
                    }
                    Slot::Held(_) | Slot::Dropped => false,
                };
                if waiting {
                    return;
                }
                if !self.take_head(Release::Late, out) {
                    self.stats.timeouts += 1;
                }
            }
            self.release_run(Release::Late, out);
            self.give_up_lost(out);
        }
    }

    /// Gives up, at once, the missing numbers at the head that their
    /// worker's ring lost (round-robin assignment), and releases what that
    /// frees.
    fn give_up_lost(&mut self, out: &mut Vec<P>) {
        let mut gave_up = false;
        while matches!(self.slots[(self.head & self.mask) as usize], Slot::Empty)
            && self.lost_in_a_ring(self.head)
        {
            self.take_head(Release::Late, out);
            self.stats.lost += 1;
            gave_up = true;
        }
        if gave_up {
            self.release_run(Release::Late, out);
        }
    }

    /// Whether missing number `seq`'s worker has claimed a later one: its
    /// FIFO ring lost `seq`.
    fn lost_in_a_ring(&self, seq: Seq) -> bool {
        self.workers.is_some_and(|w| {
            self.last_taken[(seq % w) as usize].is_some_and(|last| after(last, seq))
        })
    }

    /// Whether missing number `seq` is still in its worker's ring: its
    /// worker is known and has not claimed past it.
    fn in_a_ring(&self, seq: Seq) -> bool {
        self.workers.is_some() && !self.lost_in_a_ring(seq)
    }

    /// Releases every held packet in order, giving up the missing numbers
    /// between them (when the stage is turned off or its owner stops).
    /// Numbers after the last held packet are still awaited.
    pub fn flush(&mut self, out: &mut Vec<P>) {
        while self.stats.buffered > 0 {
            if !self.take_head(Release::Late, out) {
                self.stats.flushed += 1;
            }
        }
        self.release_run(Release::Late, out);
        self.waiting.clear();
    }

    /// Pops the packets already released off the front of `waiting`, so
    /// that its front is the oldest packet still held.
    fn prune_waiting(&mut self) {
        while let Some(&(seq, _)) = self.waiting.front() {
            if self.place(seq) == Place::Window {
                return;
            }
            self.waiting.pop_front();
        }
    }

    fn place(&self, seq: Seq) -> Place {
        let d = seq.wrapping_sub(self.head);
        if d <= self.mask {
            Place::Window
        } else if d < 1 << 31 {
            Place::Ahead
        } else {
            Place::Behind
        }
    }

    /// The window start that makes `seq` its last number.
    fn window_start_for(&self, seq: Seq) -> Seq {
        seq.wrapping_sub(self.mask)
    }

    /// Moves the window to start at `start` (ahead of `head`), releasing
    /// the packets it passes and giving up the missing numbers.
    fn slide_to(&mut self, start: Seq, out: &mut Vec<P>) {
        let span = start.wrapping_sub(self.head);
        // Past the window's end no slot holds anything for these numbers.
        let visit = span.min(self.mask + 1);
        let mut given_up = u64::from(span - visit);
        for _ in 0..visit {
            if !self.take_head(Release::Late, out) {
                given_up += 1;
            }
        }
        self.stats.overflows += given_up;
        self.head = start;
        self.release_run(Release::Late, out);
    }

    /// Empties the head slot and moves past it: a held packet goes to
    /// `out`. Returns whether the number was accounted for (held or
    /// dropped) rather than missing.
    fn take_head(&mut self, how: Release, out: &mut Vec<P>) -> bool {
        let slot = std::mem::replace(
            &mut self.slots[(self.head & self.mask) as usize],
            Slot::Empty,
        );
        self.head = self.head.wrapping_add(1);
        match slot {
            Slot::Held(packet) => {
                self.emit(packet, how, out);
                true
            }
            Slot::Dropped => true,
            Slot::Empty | Slot::Claimed(_) => false,
        }
    }

    /// Releases the run of held or dropped numbers starting at `head`.
    fn release_run(&mut self, how: Release, out: &mut Vec<P>) {
        while self.slots[(self.head & self.mask) as usize].is_known() {
            self.take_head(how, out);
        }
    }

    fn emit(&mut self, packet: P, how: Release, out: &mut Vec<P>) {
        self.stats.buffered -= 1;
        match how {
            Release::InOrder => self.stats.in_order += 1,
            Release::Late => self.stats.late += 1,
        }
        out.push(packet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::splitmix::SplitMix;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn stage(capacity: u32, hold_ns: u64, first: Seq) -> Reorder<u32> {
        Reorder::new(ReorderConfig { capacity, hold_ns }, first).unwrap()
    }

    /// Every packet handed in is released, still held, or nothing else.
    fn assert_conserved(r: &Reorder<u32>) {
        let s = r.stats();
        assert_eq!(
            s.completed,
            s.in_order + s.late + s.out_of_order + s.buffered,
            "{s:?}"
        );
        assert!(s.buffered <= r.slots.len() as u64);
        assert_eq!(
            r.waiting.capacity(),
            2 * r.slots.len(),
            "the arrival queue reallocated"
        );
    }

    #[test]
    fn refuses_bounds_it_cannot_keep() {
        let ok = ReorderConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        for capacity in [0, 1, 1000, MAX_CAPACITY * 2] {
            let bad = ReorderConfig { capacity, ..ok };
            assert_eq!(bad.validate(), Err(ReorderError::Capacity(capacity)));
        }
        assert_eq!(
            ReorderError::Capacity(1000).to_string(),
            "reorder capacity must be a power of two from 2 to 65536 packets, got 1000 (try 1024)"
        );
        assert!(ReorderError::Capacity(0).to_string().ends_with("(try 2)"));
        for hold_ns in [0, 999, MAX_HOLD_NS + 1] {
            let bad = ReorderConfig { hold_ns, ..ok };
            assert_eq!(
                Reorder::<u32>::new(bad, 0).unwrap_err(),
                ReorderError::Hold(hold_ns)
            );
        }
        assert!(ReorderError::Hold(0)
            .to_string()
            .contains("turn the reorder stage off"));
    }

    #[test]
    fn packets_in_order_pass_at_once() {
        let mut r = stage(8, MS, 0);
        let mut out = Vec::new();
        for seq in 0..100 {
            r.complete(seq, seq, 0, &mut out);
            assert_eq!(out, [seq], "released as it arrives");
            out.clear();
        }
        let s = r.stats();
        assert_eq!((s.in_order, s.held, s.max_buffered), (100, 0, 0));
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn a_gap_holds_later_packets_until_it_is_filled_or_dropped() {
        let mut r = stage(8, MS, 10);
        let mut out = Vec::new();
        r.complete(12, 12, 0, &mut out);
        r.complete(13, 13, 1, &mut out);
        r.complete(11, 11, 2, &mut out);
        assert!(out.is_empty(), "10 is missing");
        assert_eq!(r.buffered(), 3);
        assert_eq!(r.next_deadline(), Some(MS));
        r.poll(MS - 1, &mut out);
        assert!(out.is_empty(), "not yet");
        r.complete(10, 10, 3, &mut out);
        assert_eq!(out, [10, 11, 12, 13]);
        out.clear();
        // a worker drops 14: 15 leaves without waiting for it
        r.complete(15, 15, 4, &mut out);
        r.discard(14, &mut out);
        assert_eq!(out, [15]);
        assert_eq!(r.awaiting(), 16);
        let s = r.stats();
        assert_eq!((s.held, s.in_order, s.late, s.dropped), (4, 5, 0, 1));
        assert_conserved(&r);
    }

    #[test]
    fn a_number_dropped_ahead_is_skipped_when_reached() {
        let mut r = stage(8, MS, 0);
        let mut out = Vec::new();
        r.discard(1, &mut out);
        r.discard(2, &mut out);
        r.complete(3, 3, 0, &mut out);
        assert!(out.is_empty());
        r.complete(0, 0, 1, &mut out);
        assert_eq!(out, [0, 3]);
        assert_eq!(r.awaiting(), 4);
    }

    #[test]
    fn the_hold_time_gives_up_a_missing_number() {
        let mut r = stage(8, 100 * US, 0);
        let mut out = Vec::new();
        // 0 and 2 were lost after ingress; 1 and 3 wait, then 4 arrives later
        r.complete(1, 1, 10 * US, &mut out);
        r.complete(3, 3, 20 * US, &mut out);
        r.complete(4, 4, 50 * US, &mut out);
        r.poll(109 * US, &mut out);
        assert!(out.is_empty());
        // 1 has waited 100 µs: 0 is given up; 3 waits its own 100 µs
        r.poll(110 * US, &mut out);
        assert_eq!(out, [1]);
        assert_eq!(r.next_deadline(), Some(120 * US));
        r.poll(120 * US, &mut out);
        assert_eq!(out, [1, 3, 4], "2 given up; 4 follows 3 in order");
        let s = r.stats();
        assert_eq!((s.timeouts, s.late, s.in_order, s.buffered), (2, 3, 0, 0));
        // 2 turns up after all: it leaves at once, out of order
        out.clear();
        r.complete(2, 2, 200 * US, &mut out);
        assert_eq!(out, [2]);
        assert_eq!(r.stats().out_of_order, 1);
        assert_conserved(&r);
    }

    #[test]
    fn a_later_arrival_with_a_lower_number_leaves_with_the_oldest() {
        // 3 arrives first and waits longest; 2 arrives later but precedes
        // it: both leave when 3's hold runs out, 2 first.
        let mut r = stage(8, 100 * US, 0);
        let mut out = Vec::new();
        r.complete(3, 3, 0, &mut out);
        r.complete(2, 2, 90 * US, &mut out);
        r.poll(100 * US, &mut out);
        assert_eq!(out, [2, 3]);
        assert_eq!(r.stats().timeouts, 2);
        assert_conserved(&r);
    }

    #[test]
    fn a_full_buffer_slides_the_window_and_counts_it() {
        let mut r = stage(4, MS, 0);
        let mut out = Vec::new();
        r.complete(1, 1, 0, &mut out);
        r.complete(2, 2, 0, &mut out);
        r.complete(3, 3, 0, &mut out);
        assert_eq!(r.buffered(), 3);
        // 4 does not fit while 0 is awaited: 0 is given up
        r.complete(4, 4, 0, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
        let s = r.stats();
        assert_eq!((s.overflows, s.late, s.in_order), (1, 3, 1));
        // a number far ahead: the whole window goes, without visiting
        // every number in between
        out.clear();
        r.complete(7, 7, 0, &mut out);
        r.complete(1_000_006, 1_000_006, 0, &mut out);
        assert_eq!(out, [7]);
        assert_eq!(r.awaiting(), 1_000_003);
        // all of 5..1_000_003 but 7
        assert_eq!(r.stats().overflows, 1 + (1_000_003 - 5 - 1));
        assert_conserved(&r);
        assert!(r.stats().max_buffered <= 4);
    }

    #[test]
    fn duplicates_are_released_and_counted() {
        let mut r = stage(8, MS, 0);
        let mut out = Vec::new();
        r.complete(2, 20, 0, &mut out);
        r.complete(2, 21, 0, &mut out);
        r.discard(2, &mut out);
        assert_eq!(out, [21]);
        assert_eq!(r.stats().duplicates, 2);
        r.complete(0, 0, 0, &mut out);
        r.complete(0, 1, 0, &mut out); // behind head: like a straggler
        r.discard(1, &mut out);
        assert_eq!(out, [21, 0, 1, 20]);
        assert_conserved(&r);
    }

    #[test]
    fn flush_releases_everything_held() {
        let mut r = stage(16, MS, 0);
        let mut out = Vec::new();
        for seq in [3, 5, 6, 9] {
            r.complete(seq, seq, 0, &mut out);
        }
        r.discard(7, &mut out);
        r.flush(&mut out);
        assert_eq!(out, [3, 5, 6, 9]);
        assert_eq!(r.awaiting(), 10);
        assert_eq!(r.stats().flushed, 5, "0, 1, 2, 4 and 8");
        assert_eq!(r.next_deadline(), None);
        assert_conserved(&r);
    }

    #[test]
    fn numbers_wrap_around() {
        let first = u32::MAX - 2;
        let mut r = stage(8, MS, first);
        let mut out = Vec::new();
        for seq in [1, u32::MAX, 0, u32::MAX - 1] {
            r.complete(seq, seq, 0, &mut out);
        }
        assert!(out.is_empty());
        r.complete(first, first, 0, &mut out);
        assert_eq!(out, [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1]);
        // a number just behind the window after the wrap is a straggler
        r.complete(u32::MAX, 7, 0, &mut out);
        assert_eq!(r.stats().out_of_order, 1);
        assert_conserved(&r);
    }

    /// Shuffles `items` within consecutive blocks of random sizes up to
    /// `max_block`: no item overtakes one more than a block before it.
    fn shuffle_blocks<T>(items: &mut [T], max_block: usize, rng: &mut SplitMix) {
        let mut rest = items;
        while !rest.is_empty() {
            let size = 1 + rng.below(max_block.min(rest.len()) as u64) as usize;
            let (block, tail) = rest.split_at_mut(size);
            for i in (1..block.len()).rev() {
                block.swap(i, rng.below(i as u64 + 1) as usize);
            }
            rest = tail;
        }
    }

    #[test]
    fn random_arrival_orders_come_out_in_ingress_order() {
        for case in 0..300u64 {
            let mut rng = SplitMix(case);
            let capacity = 1 << (1 + rng.below(10));
            let first = rng.next_u64() as u32;
            let n = 1 + rng.below(3000) as u32;
            let drop_pct = rng.below(30);
            // (seq, dropped by its worker)
            let mut events: Vec<(Seq, bool)> = (0..n)
                .map(|i| (first.wrapping_add(i), rng.below(100) < drop_pct))
                .collect();
            // a block of `capacity` numbers fits the window once the block
            // before it is through
            shuffle_blocks(&mut events, capacity as usize, &mut rng);
            let mut r = stage(capacity, MAX_HOLD_NS, first);
            let mut out = Vec::new();
            for (i, &(seq, dropped)) in events.iter().enumerate() {
                if dropped {
                    r.discard(seq, &mut out);
                } else {
                    r.complete(seq, seq, i as u64, &mut out);
                }
                r.poll(i as u64, &mut out);
                assert_conserved(&r);
            }
            let expected: Vec<Seq> = (0..n)
                .map(|i| first.wrapping_add(i))
                .filter(|seq| !events.iter().any(|&(s, d)| s == *seq && d))
                .collect();
            assert_eq!(out, expected, "case {case}");
            let s = r.stats();
            assert_eq!(
                (s.late, s.out_of_order, s.timeouts, s.overflows, s.buffered),
                (0, 0, 0, 0, 0),
                "case {case}"
            );
        }
    }

    /// A packet of the worker model: its flow, its number if ingress
    /// numbered it, and what its worker did with it.
    #[derive(Debug, Clone, Copy)]
    struct Packet {
        flow: u32,
        seq: Seq,
        /// When its worker took it off the ring (before any stall).
        taken_at: u64,
        done_at: u64,
        fate: Fate,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fate {
        Completed,
        /// The load balancer dropped it: the worker says so.
        Dropped,
        /// Lost between ingress and the worker (a full ring): silence.
        Lost,
    }

    /// Knobs of one run of the worker model.
    #[derive(Debug, Clone, Copy)]
    struct Run {
        packets: u32,
        flows: u32,
        workers: u32,
        /// Percent lost before ingress (never numbered).
        lost_before_pct: u64,
        dropped_pct: u64,
        /// Percent lost after ingress.
        lost_after_pct: u64,
        /// One worker stops for this long, once (0: never), after taking
        /// a packet off its ring.
        stall_ns: u64,
        /// Workers claim each packet they take ([`Reorder::claim`]).
        claims: bool,
        /// Ingress sends number `seq` to worker `seq % workers`, and the
        /// stage knows it ([`Reorder::assign_round_robin`]; implies claims).
        assigned: bool,
        capacity: u32,
        hold_ns: u64,
        seed: u64,
    }

    const GAP_NS: u64 = 100;
    const POLL_NS: u64 = 2 * US;

    /// Packets arrive every 100 ns, ingress numbers those it receives and
    /// sprays them round robin over workers that each finish their
    /// packets in order, 100-300 ns each (plus a stall), and the
    /// release stage's owner takes completions in time order and polls
    /// every 2 µs. Returns the packets and what came out, with the time.
    fn simulate(run: Run) -> (Vec<Packet>, Vec<(u64, u32)>, Reorder<u32>) {
        let mut rng = SplitMix(run.seed);
        let first = rng.next_u64() as u32;
        let mut ingress = Sequencer::new(first);
        let mut free_at = vec![0u64; run.workers as usize];
        let stalled = rng.below(u64::from(run.workers)) as usize;
        let stall_from = u64::from(run.packets) * GAP_NS / 3;
        let mut stall_left = run.stall_ns;
        let mut packets = Vec::new();
        for i in 0..u64::from(run.packets) {
            let flow = rng.below(u64::from(run.flows)) as u32;
            if rng.below(100) < run.lost_before_pct {
                continue;
            }
            let seq = ingress.issue();
            let w = if run.assigned {
                (seq % run.workers) as usize
            } else {
                (seq.wrapping_sub(first) % run.workers) as usize
            };
            let arrival = i * GAP_NS;
            let taken_at = free_at[w].max(arrival);
            let mut start = taken_at;
            if w == stalled && stall_left > 0 && start >= stall_from {
                start += stall_left;
                stall_left = 0;
            }
            let done_at = start + 100 + rng.below(200);
            free_at[w] = done_at;
            let roll = rng.below(100);
            let fate = if roll < run.dropped_pct {
                Fate::Dropped
            } else if roll < run.dropped_pct + run.lost_after_pct {
                Fate::Lost
            } else {
                Fate::Completed
            };
            packets.push(Packet {
                flow,
                seq,
                taken_at,
                done_at,
                fate,
            });
        }
        let mut events: Vec<Packet> = packets
            .iter()
            .copied()
            .filter(|p| p.fate != Fate::Lost)
            .collect();
        events.sort_by_key(|p| p.done_at);
        let mut claims: Vec<Packet> = if run.claims || run.assigned {
            events.clone()
        } else {
            Vec::new()
        };
        claims.sort_by_key(|p| p.taken_at);
        let mut claims = claims.into_iter().peekable();
        let mut r = stage(run.capacity, run.hold_ns, first);
        if run.assigned {
            r.assign_round_robin(run.workers);
        }
        let mut out = Vec::new();
        let mut released = Vec::new();
        let mut events = events.into_iter().peekable();
        // A number lost at the very end, which no later claim shows lost,
        // is waited for as if in its worker's ring.
        let longest = if run.assigned {
            CLAIM_HOLD_NS
        } else {
            run.hold_ns
        };
        let end = packets.iter().map(|p| p.done_at).max().unwrap_or(0) + longest;
        let mut now = 0;
        while now <= end + POLL_NS {
            while let Some(p) = claims.next_if(|p| p.taken_at <= now) {
                r.claim(p.seq, p.taken_at);
            }
            while let Some(p) = events.next_if(|p| p.done_at <= now) {
                match p.fate {
                    Fate::Completed => r.complete(p.seq, p.seq, p.done_at, &mut out),
                    Fate::Dropped => r.discard(p.seq, &mut out),
                    Fate::Lost => unreachable!(),
                }
            }
            r.poll(now, &mut out);
            released.extend(out.drain(..).map(|seq| (now, seq)));
            assert!(r.buffered() <= run.capacity as usize);
            now += POLL_NS;
        }
        assert_conserved(&r);
        (packets, released, r)
    }

    /// How many of `seqs` (numbered from `base`) come after a higher one.
    fn backwards(seqs: &[Seq], base: Seq) -> u64 {
        let mut max = None;
        let mut n = 0;
        for rel in seqs.iter().map(|seq| seq.wrapping_sub(base)) {
            match max {
                Some(m) if rel < m => n += 1,
                _ => max = Some(rel),
            }
        }
        n
    }

    fn base(seed: u64) -> Run {
        Run {
            packets: 40_000,
            flows: 8,
            workers: 4,
            lost_before_pct: 0,
            dropped_pct: 0,
            lost_after_pct: 0,
            stall_ns: 0,
            claims: false,
            assigned: false,
            capacity: 1024,
            hold_ns: 200 * US,
            seed,
        }
    }

    /// The flow of each number.
    fn flows_of(packets: &[Packet]) -> std::collections::HashMap<Seq, u32> {
        packets.iter().map(|p| (p.seq, p.flow)).collect()
    }

    /// How long each released packet waited after its worker completed
    /// it, in release order.
    fn waits<'a>(
        packets: &[Packet],
        released: &'a [(u64, u32)],
    ) -> impl Iterator<Item = (Seq, u64)> + 'a {
        let done: std::collections::HashMap<Seq, u64> =
            packets.iter().map(|p| (p.seq, p.done_at)).collect();
        released.iter().map(move |&(t, seq)| (seq, t - done[&seq]))
    }

    /// Each flow's packets, in the order they were released.
    fn per_flow(packets: &[Packet], released: &[(u64, u32)]) -> Vec<Vec<Seq>> {
        let flow_of = flows_of(packets);
        let flows = packets.iter().map(|p| p.flow).max().unwrap_or(0) as usize + 1;
        let mut by_flow = vec![Vec::new(); flows];
        for &(_, seq) in released {
            by_flow[flow_of[&seq] as usize].push(seq);
        }
        by_flow
    }

    /// Each flow's completed packets in ingress order.
    fn ingress_order(packets: &[Packet]) -> Vec<Vec<Seq>> {
        let flows = packets.iter().map(|p| p.flow).max().unwrap_or(0) as usize + 1;
        let mut by_flow = vec![Vec::new(); flows];
        for p in packets.iter().filter(|p| p.fate == Fate::Completed) {
            by_flow[p.flow as usize].push(p.seq);
        }
        by_flow
    }

    #[test]
    fn sprayed_flows_leave_in_ingress_order_with_drops_and_losses_before_ingress() {
        for seed in 0..20 {
            let run = Run {
                lost_before_pct: 30,
                dropped_pct: 10,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            assert_eq!(
                per_flow(&packets, &released),
                ingress_order(&packets),
                "seed {seed}"
            );
            let s = r.stats();
            assert!(s.held > 1000, "the workers do reorder: {s:?}");
            // numbers lost before ingress were never issued, so nothing
            // waited for them: no number was given up
            assert_eq!(
                (s.timeouts, s.overflows, s.late, s.out_of_order),
                (0, 0, 0, 0)
            );
            // and no packet waited longer than the workers' skew
            let worst = waits(&packets, &released).map(|(_, w)| w).max().unwrap();
            assert!(worst < 20 * US, "seed {seed}: waited {worst} ns");
        }
    }

    #[test]
    fn packets_lost_after_ingress_cost_at_most_the_hold_time() {
        for seed in 0..20 {
            let run = Run {
                lost_after_pct: 1,
                dropped_pct: 5,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            let lost = packets.iter().filter(|p| p.fate == Fate::Lost).count() as u64;
            assert!(lost > 0);
            assert!(s.timeouts >= 1 && s.timeouts <= lost, "{s:?} lost {lost}");
            assert!(s.late > 0);
            assert_eq!(s.out_of_order, 0, "a lost packet never turns up");
            assert_eq!(s.buffered, 0);
            // still in ingress order, every flow
            assert_eq!(per_flow(&packets, &released), ingress_order(&packets));
            for (seq, w) in waits(&packets, &released) {
                assert!(
                    w <= run.hold_ns + POLL_NS,
                    "seed {seed}: {seq} waited {w} ns"
                );
            }
        }
    }

    #[test]
    fn a_stalled_worker_delays_the_others_by_the_hold_time_at_most() {
        for seed in 0..10 {
            let run = Run {
                stall_ns: MS,
                capacity: 1 << 14,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            // the stalled worker's packets were given up and released when
            // they came, out of order; everything else waited at most the
            // hold time (plus one poll)
            assert!(s.timeouts > 0, "{s:?}");
            assert!(s.late > 0, "{s:?}");
            assert_eq!(s.out_of_order, s.timeouts, "each given-up packet came late");
            assert_eq!(s.overflows, 0);
            for (_, w) in waits(&packets, &released) {
                assert!(w <= run.hold_ns + POLL_NS);
            }
            // apart from the given-up packets, every flow is in order
            let base = packets.first().map_or(0, |p| p.seq);
            let all: Vec<Seq> = released.iter().map(|&(_, seq)| seq).collect();
            assert_eq!(backwards(&all, base), s.out_of_order);
            for seqs in per_flow(&packets, &released) {
                assert!(backwards(&seqs, base) <= s.out_of_order);
            }
            assert_eq!(released.len() as u64, s.completed);
        }
    }

    /// The same stall, with the workers claiming what they take: the
    /// stalled worker's packets are waited for, nothing leaves out of
    /// order, and only the stall delays the others.
    #[test]
    fn a_stalled_worker_s_claimed_packets_are_waited_for() {
        for seed in 0..10 {
            let run = Run {
                stall_ns: MS,
                claims: true,
                capacity: 1 << 14,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            assert_eq!(
                (s.timeouts, s.out_of_order, s.overflows),
                (0, 0, 0),
                "{s:?}"
            );
            assert_eq!(released.len() as u64, s.completed);
            assert_eq!(per_flow(&packets, &released), ingress_order(&packets));
            let worst = waits(&packets, &released).map(|(_, w)| w).max();
            assert!(worst.unwrap() <= run.stall_ns + run.hold_ns + POLL_NS);
        }
    }

    /// Round-robin assignment: a stalled worker's ring is known to hold
    /// its numbers, so nothing is given up and nothing leaves out of order;
    /// a number lost on the way is given up as soon as its worker claims a
    /// later one, long before the hold time.
    #[test]
    fn with_the_assignment_known_only_lost_numbers_are_given_up_and_at_once() {
        for seed in 0..10 {
            let run = Run {
                stall_ns: MS,
                assigned: true,
                hold_ns: 20 * US,
                capacity: 1 << 14,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            assert_eq!(
                (s.timeouts, s.lost, s.out_of_order, s.overflows),
                (0, 0, 0, 0),
                "a 1 ms stall against a 20 µs hold: {s:?}"
            );
            assert_eq!(per_flow(&packets, &released), ingress_order(&packets));

            let run = Run {
                lost_after_pct: 2,
                assigned: true,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            let lost = packets.iter().filter(|p| p.fate == Fate::Lost).count() as u64;
            assert!(lost > 0);
            assert_eq!(s.lost + s.timeouts, lost, "{s:?}");
            assert!(s.lost + u64::from(run.workers) >= lost, "{s:?} lost {lost}");
            assert_eq!(s.out_of_order, 0);
            assert_eq!(per_flow(&packets, &released), ingress_order(&packets));
            let slow = waits(&packets, &released)
                .filter(|&(_, w)| w > run.hold_ns)
                .count();
            assert!(
                slow as u64 <= u64::from(run.workers) * 64,
                "seed {seed}: {slow} packets waited past the hold time"
            );
        }
    }

    /// Claims change nothing for numbers nobody took: a packet lost
    /// between ingress and its worker is still given up after the hold.
    #[test]
    fn claims_do_not_wait_for_packets_lost_before_a_worker() {
        for seed in 0..10 {
            let run = Run {
                lost_after_pct: 1,
                claims: true,
                ..base(seed)
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            let lost = packets.iter().filter(|p| p.fate == Fate::Lost).count() as u64;
            assert!(s.timeouts >= 1 && s.timeouts <= lost, "{s:?} lost {lost}");
            assert_eq!(s.out_of_order, 0);
            assert_eq!(per_flow(&packets, &released), ingress_order(&packets));
        }
    }

    /// A claim bounds its own wait: a worker that never reports back is
    /// given up after CLAIM_HOLD_NS, and a claim outside the window or on
    /// a reported number changes nothing.
    #[test]
    fn a_claim_is_waited_for_at_most_claim_hold() {
        let mut r = stage(16, 100 * US, 0);
        let mut out = Vec::new();
        r.claim(0, 0);
        r.claim(40, 0); // ahead of the window: ignored
        r.complete(1, 1, 0, &mut out);
        r.claim(1, 0); // already held: ignored
        assert!(out.is_empty());
        r.poll(MS, &mut out);
        assert!(out.is_empty(), "claimed 0 is still awaited");
        r.poll(CLAIM_HOLD_NS - 1, &mut out);
        assert!(out.is_empty());
        r.poll(CLAIM_HOLD_NS, &mut out);
        assert_eq!(out, [1]);
        assert_eq!(r.stats().timeouts, 1);
        // the claimed number came after all: out of order, counted
        r.complete(0, 0, CLAIM_HOLD_NS, &mut out);
        assert_eq!(out, [1, 0]);
        assert_eq!(r.stats().out_of_order, 1);
        // a claim at the head that completes leaves no mark in its slot:
        // 18, the slot's next number, is missing unclaimed and is given up
        // after the hold time, not after CLAIM_HOLD_NS
        r.claim(2, 0);
        r.complete(2, 2, 0, &mut out);
        for seq in 3..18 {
            r.complete(seq, seq, 0, &mut out);
        }
        r.complete(19, 19, 0, &mut out);
        out.clear();
        r.poll(100 * US, &mut out);
        assert_eq!(out, [19]);
        assert_eq!(r.stats().timeouts, 2, "{:?}", r.stats());
        assert_eq!(r.stats().duplicates, 0);
        assert_conserved(&r);
    }

    #[test]
    fn a_small_buffer_overflows_instead_of_growing() {
        for seed in 0..10 {
            let run = Run {
                stall_ns: MS,
                capacity: 64,
                ..base(seed)
            };
            let (_, released, r) = simulate(run);
            let s = r.stats();
            assert!(s.overflows > 0, "{s:?}");
            assert!(s.max_buffered <= 64, "{s:?}");
            assert_eq!(released.len() as u64, s.completed, "no packet lost");
        }
    }

    #[test]
    fn random_runs_keep_every_invariant() {
        for seed in 0..200 {
            let mut rng = SplitMix(seed ^ 0xfeed);
            let run = Run {
                packets: 1 + rng.below(5000) as u32,
                flows: 1 + rng.below(64) as u32,
                workers: 1 + rng.below(8) as u32,
                lost_before_pct: rng.below(50),
                dropped_pct: rng.below(20),
                lost_after_pct: rng.below(5),
                stall_ns: if rng.below(2) == 0 {
                    0
                } else {
                    rng.below(3 * MS)
                },
                claims: rng.below(2) == 0,
                assigned: rng.below(3) == 0,
                capacity: 1 << (1 + rng.below(12)),
                hold_ns: US + rng.below(500 * US),
                seed,
            };
            let (packets, released, r) = simulate(run);
            let s = r.stats();
            let completed = packets.iter().filter(|p| p.fate == Fate::Completed).count();
            assert_eq!(s.completed, completed as u64, "{run:?}");
            // every packet out exactly once (simulate's assert_conserved
            // checks the counters; this checks the packets)
            let mut out: Vec<Seq> = released.iter().map(|&(_, seq)| seq).collect();
            out.sort_unstable();
            let mut expected: Vec<Seq> = packets
                .iter()
                .filter(|p| p.fate == Fate::Completed)
                .map(|p| p.seq)
                .collect();
            expected.sort_unstable();
            assert_eq!(out, expected, "{run:?}");
            // what was not released out of order left in ingress order
            let all: Vec<Seq> = released.iter().map(|&(_, seq)| seq).collect();
            assert!(
                backwards(&all, packets.first().map_or(0, |p| p.seq)) <= s.out_of_order,
                "{run:?} {s:?}"
            );
            if run.stall_ns == 0 && run.lost_after_pct == 0 && run.capacity >= 1024 {
                assert_eq!(s.out_of_order, 0, "{run:?}");
            }
        }
    }
}
