//! The connection tables of the software tier and the life of an entry,
//! with the rules of `bpf/lib/conntrack.h` (and its user-space twin
//! `weir_dataplane::conntrack`): the same tick clock, idle timeouts by
//! state, atime refreshed at most once per [`ATIME_REFRESH`], FIN and RST
//! close flags, and an expired entry treated as absent.
//!
//! Two tables, as in weir_lb: half-open TCP connections (a SYN seen, or a
//! first non-SYN packet with no entry) and established ones (TCP after the
//! client's next packet, UDP from its first). Each is bounded; a full table
//! evicts its least recently used entry. nat entries carry their reverse
//! entry (the reply's 5-tuple, the VIP and the client's L2 path), indexed
//! by the reply tuple, and the two live and die together.
//!
//! An established table keeps one list per timeout state, each ordered by
//! atime (an entry moves to its list's front exactly when its atime is
//! set), so the oldest entry of a state is its list's tail: expiry checks
//! only tails, and the least recently used entry overall is the oldest of
//! four tails (to atime's resolution of one second).

use std::time::Duration;

use weir_abi::{
    weir_conn, weir_conn_timeouts, weir_flow_key, weir_rev_nat, WEIR_CONN_F_FIN_CLIENT,
    WEIR_CONN_F_FIN_SERVER, WEIR_CONN_F_RST, WEIR_TICK_SHIFT,
};

use super::lru::{Hashed, Lru, Slot, SlotIndex};
use super::packet::{IPPROTO_TCP, TCP_FIN, TCP_RST};

/// `d` in ticks of 2^`WEIR_TICK_SHIFT` ns (about 1.05 ms), saturating: the
/// unit of every timeout and of `weir_conn.atime`.
pub fn ticks(d: Duration) -> u32 {
    u32::try_from(d.as_nanos() >> WEIR_TICK_SHIFT).unwrap_or(u32::MAX)
}

/// The tick of a time in nanoseconds, truncated to 32 bits (wrapping after
/// about 52 days), as weir_lb's `now_ticks()` computes it.
pub fn tick_of(now_ns: u64) -> u32 {
    (now_ns >> WEIR_TICK_SHIFT) as u32
}

/// An entry's atime is rewritten at most this often (conntrack.h).
pub const ATIME_REFRESH: u32 = (1_000_000_000u64 >> WEIR_TICK_SHIFT) as u32;

/// The longest timeout accepted: the 32-bit tick clock must be able to
/// tell an idle entry from a wrapped one (as `ConnTimeouts::MAX`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Idle timeouts by state, in ticks: `weir_conn_timeouts` as a plain
/// struct (weir_dataplane's `ConnTimeouts::ticks()` gives one that
/// converts with `From`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// SYN seen, handshake not complete.
    pub tcp_half_open: u32,
    pub tcp_established: u32,
    /// A FIN seen in one direction.
    pub tcp_closing: u32,
    /// FINs both ways, or a RST: the grace period.
    pub tcp_closed: u32,
    pub udp: u32,
}

impl Default for Timeouts {
    /// conntrack.h's defaults (IPVS's): 30 s half-open, 15 min established,
    /// 2 min closing, 10 s closed, 5 min UDP.
    fn default() -> Timeouts {
        let s = |secs| ticks(Duration::from_secs(secs));
        Timeouts {
            tcp_half_open: s(30),
            tcp_established: s(900),
            tcp_closing: s(120),
            tcp_closed: s(10),
            udp: s(300),
        }
    }
}

impl From<weir_conn_timeouts> for Timeouts {
    fn from(t: weir_conn_timeouts) -> Timeouts {
        Timeouts {
            tcp_half_open: t.tcp_half_open,
            tcp_established: t.tcp_established,
            tcp_closing: t.tcp_closing,
            tcp_closed: t.tcp_closed,
            udp: t.udp,
        }
    }
}

impl From<Timeouts> for weir_conn_timeouts {
    fn from(t: Timeouts) -> weir_conn_timeouts {
        weir_conn_timeouts {
            tcp_half_open: t.tcp_half_open,
            tcp_established: t.tcp_established,
            tcp_closing: t.tcp_closing,
            tcp_closed: t.tcp_closed,
            udp: t.udp,
        }
    }
}

impl Timeouts {
    /// Each field with its name, for validation messages.
    pub fn fields(&self) -> [(&'static str, u32); 5] {
        [
            ("tcp_half_open", self.tcp_half_open),
            ("tcp_established", self.tcp_established),
            ("tcp_closing", self.tcp_closing),
            ("tcp_closed", self.tcp_closed),
            ("udp", self.udp),
        ]
    }

    pub fn of(&self, state: State) -> u32 {
        match state {
            State::Established => self.tcp_established,
            State::Closing => self.tcp_closing,
            State::Closed => self.tcp_closed,
            State::Udp => self.udp,
        }
    }
}

/// The state of an established-table entry, which picks its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Established,
    /// A FIN seen in one direction.
    Closing,
    /// FINs both ways, or a RST.
    Closed,
    Udp,
}

impl State {
    const ALL: [State; 4] = [
        State::Established,
        State::Closing,
        State::Closed,
        State::Udp,
    ];

    /// conntrack.h's `conn_timeout` choice.
    pub fn of(conn: &weir_conn, proto: u8) -> State {
        let both_fins = (WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER) as u8;
        let f = conn.close_flags;
        if proto != IPPROTO_TCP {
            State::Udp
        } else if f & WEIR_CONN_F_RST as u8 != 0 || f & both_fins == both_fins {
            State::Closed
        } else if f != 0 {
            State::Closing
        } else {
            State::Established
        }
    }

    fn class(self) -> usize {
        self as usize
    }
}

/// Ticks an entry last used at `atime` has been idle at `now` (wrapping
/// arithmetic, as the data plane does). An `atime` ahead of `now` is 0:
/// another CPU or worker used the entry after this one read the clock.
pub fn idle_ticks(atime: u32, now: u32) -> u32 {
    let idle = now.wrapping_sub(atime);
    if idle < 1 << 31 {
        idle
    } else {
        0
    }
}

/// Whether an entry last used at `atime` is idle past `limit` at `now`.
pub fn idle_past(atime: u32, limit: u32, now: u32) -> bool {
    idle_ticks(atime, now) > limit
}

/// What [`note_close`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseChange {
    /// The connection's first FIN or RST (weir_lb counts `conn_closing`).
    pub first: bool,
    /// It is closed now (FINs both ways or a RST) and was not before.
    pub closed: bool,
}

/// conntrack.h's `conn_note_close`: a FIN (`fin` says whose) or RST seen;
/// the closing state's timeout runs from now. `None` if nothing changed.
pub fn note_close(c: &mut weir_conn, tcp_flags: u8, fin: u8, now: u32) -> Option<CloseChange> {
    let mut f = c.close_flags;
    if tcp_flags & TCP_RST != 0 {
        f |= WEIR_CONN_F_RST as u8;
    }
    if tcp_flags & TCP_FIN != 0 {
        f |= fin;
    }
    if f == c.close_flags {
        return None;
    }
    let before = State::of(c, IPPROTO_TCP);
    let first = c.close_flags == 0;
    c.close_flags = f;
    c.atime = now;
    Some(CloseChange {
        first,
        closed: before != State::Closed && State::of(c, IPPROTO_TCP) == State::Closed,
    })
}

/// The reverse entry of a nat connection: where its replies come from and
/// how they go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reverse {
    /// The replies' 5-tuple: DIP -> client.
    pub key: weir_flow_key,
    hash: u64,
    pub value: weir_rev_nat,
}

impl Reverse {
    pub fn new(key: &Hashed, value: weir_rev_nat) -> Reverse {
        Reverse {
            key: key.key,
            hash: key.hash,
            value,
        }
    }
}

/// A table entry: `weir_conn` as weir_lb keeps it, and its reverse entry
/// in nat mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub conn: weir_conn,
    pub reverse: Option<Reverse>,
}

/// Which of the two tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HalfOpen,
    Established,
}

/// An entry's reverse entry, as the hot part of a node knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rev {
    /// dsr: none.
    None,
    /// The reverse index points at this entry.
    Linked,
    /// Another connection with the same reply tuple (the same client
    /// address and port to two VIPs on one DIP) took the index over, as in
    /// weir_lb's map; this entry takes it back once that one is gone.
    Unlinked,
}

/// What a forwarded packet reads: the node holds only this (with the key),
/// so a hit touches two cache lines; the reverse entry lives apart.
#[derive(Debug, Clone, Copy)]
struct Hot {
    conn: weir_conn,
    rev: Rev,
}

/// One connection table with its reverse index.
#[derive(Debug, Clone)]
pub struct Table {
    kind: Kind,
    lru: Lru<Hot>,
    /// Reverse entries by slot (valid where the node's `rev` is not None);
    /// filled as slots are first used.
    cold: Vec<Reverse>,
    /// Reply tuple -> slot, the key being the slot's reverse key.
    reverse: SlotIndex,
}

impl Table {
    pub fn new(kind: Kind, capacity: usize) -> Table {
        let classes = match kind {
            Kind::HalfOpen => 1,
            Kind::Established => State::ALL.len(),
        };
        Table {
            kind,
            lru: Lru::new(capacity, classes),
            cold: Vec::with_capacity(capacity),
            reverse: SlotIndex::with_capacity(capacity),
        }
    }

    pub fn len(&self) -> usize {
        self.lru.len()
    }

    pub fn find(&self, key: &Hashed) -> Option<Slot> {
        self.lru.find(key)
    }

    pub fn key(&self, slot: Slot) -> &weir_flow_key {
        self.lru.key(slot)
    }

    pub fn conn(&self, slot: Slot) -> &weir_conn {
        &self.lru.get(slot).conn
    }

    pub fn reverse_of(&self, slot: Slot) -> Option<Reverse> {
        match self.lru.get(slot).rev {
            Rev::None => None,
            Rev::Linked | Rev::Unlinked => Some(self.cold[slot.0 as usize]),
        }
    }

    pub fn entry(&self, slot: Slot) -> Entry {
        Entry {
            conn: *self.conn(slot),
            reverse: self.reverse_of(slot),
        }
    }

    /// Whether slot `s` is an entry whose replies have the tuple `reply`.
    fn replies_with(&self, s: u32, reply: &weir_flow_key) -> bool {
        self.lru.get(Slot(s)).rev != Rev::None && self.cold[s as usize].key == *reply
    }

    /// The entry whose replies have this 5-tuple, and its reverse entry.
    pub fn by_reply(&self, reply: &Hashed) -> Option<(Slot, Reverse)> {
        let s = self
            .reverse
            .find(reply.hash, |s| self.replies_with(s, &reply.key))?;
        Some((Slot(s), self.cold[s as usize]))
    }

    fn class_of(&self, key: &weir_flow_key, conn: &weir_conn) -> usize {
        match self.kind {
            Kind::HalfOpen => 0,
            Kind::Established => State::of(conn, key.proto).class(),
        }
    }

    fn timeout(&self, slot: Slot, t: &Timeouts) -> u32 {
        match self.kind {
            Kind::HalfOpen => t.tcp_half_open,
            Kind::Established => t.of(State::ALL[self.lru.class(slot)]),
        }
    }

    /// Idle past its state's timeout: weir_lb treats it as absent.
    pub fn expired(&self, slot: Slot, now: u32, t: &Timeouts) -> bool {
        idle_past(self.conn(slot).atime, self.timeout(slot, t), now)
    }

    /// Adds an entry for a key that has none, evicting the least recently
    /// used entry if the table is full; returns the evicted one.
    pub fn insert(
        &mut self,
        key: &Hashed,
        entry: Entry,
        now: u32,
    ) -> Option<(weir_flow_key, Entry)> {
        let evicted = self.lru.is_full().then(|| self.evict(now));
        let class = self.class_of(&key.key, &entry.conn);
        let hot = Hot {
            conn: entry.conn,
            rev: Rev::None,
        };
        let slot = self.lru.insert(key, hot, class);
        self.set_reverse(slot, entry.reverse);
        evicted
    }

    /// Replaces the entry at `slot` (same key) by a new one, at the front.
    pub fn replace(&mut self, slot: Slot, entry: Entry) {
        self.unlink(slot);
        self.lru.get_mut(slot).conn = entry.conn;
        let class = self.class_of(self.lru.key(slot), &entry.conn);
        self.lru.move_to_front(slot, class);
        self.set_reverse(slot, entry.reverse);
    }

    pub fn remove(&mut self, slot: Slot) -> (weir_flow_key, Entry) {
        let entry = self.entry(slot);
        self.unlink(slot);
        let (key, _) = self.lru.remove(slot);
        (key, entry)
    }

    /// conntrack.h's `conn_touch`: atime follows the clock at most once per
    /// [`ATIME_REFRESH`] (and only then does the entry move: lists stay in
    /// atime order, and a hit writes no other entry's memory).
    pub fn touch(&mut self, slot: Slot, now: u32) {
        let c = &mut self.lru.get_mut(slot).conn;
        if now.wrapping_sub(c.atime) >= ATIME_REFRESH {
            c.atime = now;
            let class = self.lru.class(slot);
            self.lru.move_to_front(slot, class);
        }
    }

    /// The connection was used at tick `at` where this table did not see
    /// it (a fast-table hit): atime moves up to it, if that is later, and
    /// the entry counts as just used. An entry moved to the front with an
    /// atime older than its neighbour's is swept up to that much later;
    /// expiry itself is exact.
    pub fn seen(&mut self, slot: Slot, at: u32) {
        let c = &mut self.lru.get_mut(slot).conn;
        let ahead = at.wrapping_sub(c.atime);
        if ahead != 0 && ahead < 1 << 31 {
            c.atime = at;
            let class = self.lru.class(slot);
            self.lru.move_to_front(slot, class);
        }
    }

    /// [`note_close`] on an entry, moving it to its new state's list.
    pub fn note_close(
        &mut self,
        slot: Slot,
        tcp_flags: u8,
        fin: u8,
        now: u32,
    ) -> Option<CloseChange> {
        let change = note_close(&mut self.lru.get_mut(slot).conn, tcp_flags, fin, now)?;
        let class = self.class_of(self.lru.key(slot), self.conn(slot));
        self.lru.move_to_front(slot, class);
        Some(change)
    }

    /// Points the reverse index back at an entry that lost it to another
    /// connection with the same reply tuple, once that one is gone. Free
    /// unless it was lost: one flag of the node.
    pub fn relink(&mut self, slot: Slot) {
        if self.lru.get(slot).rev != Rev::Unlinked {
            return;
        }
        let r = self.cold[slot.0 as usize];
        if self
            .reverse
            .find(r.hash, |s| self.replies_with(s, &r.key))
            .is_none()
        {
            self.link(slot);
        }
    }

    /// Removes one expired entry (the oldest of its state), or `None` when
    /// no entry has expired: each state's list is in atime order, so only
    /// its tail needs a look.
    pub fn pop_expired(&mut self, now: u32, t: &Timeouts) -> Option<(weir_flow_key, Entry)> {
        let slot = (0..self.classes())
            .filter_map(|c| self.lru.oldest(c))
            .find(|&s| self.expired(s, now, t))?;
        Some(self.remove(slot))
    }

    fn classes(&self) -> usize {
        match self.kind {
            Kind::HalfOpen => 1,
            Kind::Established => State::ALL.len(),
        }
    }

    /// Removes the entry idle longest: the oldest of the lists' tails.
    fn evict(&mut self, now: u32) -> (weir_flow_key, Entry) {
        let slot = (0..self.classes())
            .filter_map(|c| self.lru.oldest(c))
            .max_by_key(|&s| idle_ticks(self.conn(s).atime, now))
            .expect("a full table has entries");
        self.remove(slot)
    }

    /// Stores a (new) slot's reverse entry and points the index at it.
    fn set_reverse(&mut self, slot: Slot, reverse: Option<Reverse>) {
        let Some(r) = reverse else {
            self.lru.get_mut(slot).rev = Rev::None;
            return;
        };
        let i = slot.0 as usize;
        if i >= self.cold.len() {
            // A slot's first use (slots before it may have had no reverse
            // entry): within the capacity reserved, no reallocation.
            self.cold.resize(i + 1, r);
        }
        self.cold[i] = r;
        self.lru.get_mut(slot).rev = Rev::Unlinked;
        self.link(slot);
    }

    fn link(&mut self, at: Slot) {
        let r = self.cold[at.0 as usize];
        let Table {
            lru, cold, reverse, ..
        } = self;
        let before = reverse.set(
            r.hash,
            at.0,
            |s| lru.get(Slot(s)).rev != Rev::None && cold[s as usize].key == r.key,
            |s| cold[s as usize].hash,
        );
        if let Some(other) = before.filter(|&o| o != at.0) {
            lru.get_mut(Slot(other)).rev = Rev::Unlinked;
        }
        lru.get_mut(at).rev = Rev::Linked;
    }

    fn unlink(&mut self, at: Slot) {
        if self.lru.get(at).rev == Rev::Linked {
            self.reverse.remove(self.cold[at.0 as usize].hash, at.0);
        }
        self.lru.get_mut(at).rev = Rev::None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slb::lru::KeyHasher;

    const TCP: u8 = 6;
    const UDP: u8 = 17;

    /// Keys hashed by one hasher for the whole test binary's tables.
    fn key(port: u16, proto: u8) -> Hashed {
        thread_local!(static H: KeyHasher = KeyHasher::new());
        let k = weir_flow_key {
            sport: port,
            proto,
            family: 2,
            ..Default::default()
        };
        H.with(|h| h.hashed(&k))
    }

    fn entry(atime: u32, reply: Option<u16>) -> Entry {
        Entry {
            conn: weir_conn {
                dip_id: 1,
                atime,
                created_ns: 1,
                ..Default::default()
            },
            reverse: reply.map(|p| Reverse::new(&key(p, TCP), weir_rev_nat::default())),
        }
    }

    #[test]
    fn timeouts_default_to_conntrack_h_and_convert() {
        let t = Timeouts::default();
        // SECS_TO_TICKS(s) = s * 1e9 >> 20.
        assert_eq!(t.tcp_established, 858_306);
        assert_eq!(t.tcp_half_open, 28_610);
        assert_eq!(ATIME_REFRESH, 953);
        assert_eq!(Timeouts::from(weir_conn_timeouts::from(t)), t);
        assert_eq!(ticks(MAX_TIMEOUT * 1000), u32::MAX);
        assert_eq!(tick_of(3 << WEIR_TICK_SHIFT), 3);
        assert_eq!(tick_of((1u64 << 32 | 5) << WEIR_TICK_SHIFT), 5);
    }

    #[test]
    fn state_picks_the_timeout() {
        let t = Timeouts::default();
        let c = |f: u32| weir_conn {
            close_flags: f as u8,
            ..Default::default()
        };
        let both = WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER;
        assert_eq!(t.of(State::of(&c(0), TCP)), t.tcp_established);
        assert_eq!(
            t.of(State::of(&c(WEIR_CONN_F_FIN_SERVER), TCP)),
            t.tcp_closing
        );
        assert_eq!(t.of(State::of(&c(both), TCP)), t.tcp_closed);
        assert_eq!(t.of(State::of(&c(WEIR_CONN_F_RST), TCP)), t.tcp_closed);
        assert_eq!(t.of(State::of(&c(0), UDP)), t.udp);
        assert!(!idle_past(u32::MAX - 10, 50, 20));
        assert!(idle_past(100, 50, 151));
    }

    #[test]
    fn close_flags_count_the_first_fin_and_the_close() {
        let mut c = weir_conn::default();
        let fin_c = WEIR_CONN_F_FIN_CLIENT as u8;
        let fin_s = WEIR_CONN_F_FIN_SERVER as u8;
        assert_eq!(note_close(&mut c, 0x10, fin_c, 5), None);
        let ch = note_close(&mut c, TCP_FIN | 0x10, fin_c, 7).unwrap();
        assert_eq!((ch.first, ch.closed, c.atime), (true, false, 7));
        assert_eq!(note_close(&mut c, TCP_FIN, fin_c, 8), None);
        let ch = note_close(&mut c, TCP_FIN, fin_s, 9).unwrap();
        assert_eq!((ch.first, ch.closed), (false, true));
        let ch = note_close(&mut c, TCP_RST, fin_s, 10).unwrap();
        assert_eq!((ch.first, ch.closed), (false, false), "already closed");
    }

    #[test]
    fn eviction_takes_the_oldest_tail_of_any_state() {
        let mut t = Table::new(Kind::Established, 3);
        t.insert(&key(1, TCP), entry(100, None), 100);
        t.insert(&key(2, UDP), entry(50, None), 100);
        t.insert(&key(3, TCP), entry(120, None), 120);
        let (k, _) = t.insert(&key(4, TCP), entry(130, None), 130).unwrap();
        assert_eq!(k.sport, 2, "the UDP entry was idle longest");
        // A touch within ATIME_REFRESH keeps the order; past it, moves.
        let s1 = t.find(&key(1, TCP)).unwrap();
        t.touch(s1, 130);
        assert_eq!(t.entry(s1).conn.atime, 100);
        t.touch(s1, 100 + ATIME_REFRESH);
        assert_eq!(t.entry(s1).conn.atime, 100 + ATIME_REFRESH);
        let (k, _) = t.insert(&key(5, TCP), entry(2000, None), 2000).unwrap();
        assert_eq!(k.sport, 3);
    }

    #[test]
    fn expiry_follows_each_state_s_timeout() {
        let to = Timeouts {
            tcp_half_open: 5,
            tcp_established: 100,
            tcp_closing: 50,
            tcp_closed: 10,
            udp: 30,
        };
        let mut t = Table::new(Kind::Established, 8);
        t.insert(&key(1, TCP), entry(0, None), 0);
        t.insert(&key(2, UDP), entry(0, None), 0);
        t.insert(&key(3, TCP), entry(0, None), 0);
        let s3 = t.find(&key(3, TCP)).unwrap();
        t.note_close(s3, TCP_RST, 0, 20);
        assert!(t.pop_expired(30, &to).is_none());
        assert_eq!(
            t.pop_expired(31, &to).unwrap().0.sport,
            3,
            "closed at 20 + 10"
        );
        assert_eq!(t.pop_expired(31, &to).unwrap().0.sport, 2, "UDP after 30");
        assert!(t.pop_expired(100, &to).is_none());
        assert_eq!(t.pop_expired(101, &to).unwrap().0.sport, 1);
        assert_eq!(t.len(), 0);
        let mut h = Table::new(Kind::HalfOpen, 2);
        h.insert(&key(9, TCP), entry(0, None), 0);
        let s = h.find(&key(9, TCP)).unwrap();
        assert!(!h.expired(s, 5, &to) && h.expired(s, 6, &to));
    }

    /// Several workers share a table, each with the clock it read at the
    /// start of its burst: one may sweep with a clock older than another's
    /// last use of an entry, which must not make the entry look idle for
    /// the whole 32-bit range.
    #[test]
    fn an_entry_used_after_the_sweeper_read_the_clock_stays() {
        let to = Timeouts {
            tcp_half_open: 5,
            tcp_established: 100,
            tcp_closing: 50,
            tcp_closed: 10,
            udp: 30,
        };
        let mut t = Table::new(Kind::Established, 4);
        t.insert(&key(1, TCP), entry(1000, None), 1000);
        let s = t.find(&key(1, TCP)).unwrap();
        assert!(!t.expired(s, 999, &to));
        assert!(t.pop_expired(990, &to).is_none());
        assert!(t.pop_expired(1100, &to).is_none());
        assert!(t.pop_expired(1101, &to).is_some());
        let mut h = Table::new(Kind::HalfOpen, 2);
        h.insert(&key(9, TCP), entry(u32::MAX, None), 0);
        let s = h.find(&key(9, TCP)).unwrap();
        assert!(!h.expired(s, u32::MAX - 3, &to));
        assert!(!h.expired(s, 4, &to) && h.expired(s, 5, &to));
        assert_eq!(idle_ticks(u32::MAX, 4), 5);
        assert_eq!(idle_ticks(7, 3), 0);
    }

    #[test]
    fn dsr_and_nat_entries_share_a_table() {
        let mut t = Table::new(Kind::Established, 4);
        t.insert(&key(1, TCP), entry(0, None), 0);
        t.insert(&key(2, UDP), entry(0, None), 0);
        t.insert(&key(3, TCP), entry(0, Some(903)), 0);
        let s3 = t.find(&key(3, TCP)).unwrap();
        assert_eq!(t.by_reply(&key(903, TCP)).map(|r| r.0), Some(s3));
        let s1 = t.find(&key(1, TCP)).unwrap();
        assert_eq!(t.reverse_of(s1), None);
        t.remove(s1);
        t.insert(&key(4, TCP), entry(1, Some(904)), 1);
        assert_eq!(
            t.by_reply(&key(904, TCP)).map(|r| t.key(r.0).sport),
            Some(4)
        );
    }

    #[test]
    fn reverse_entries_live_and_die_with_their_connection() {
        let mut t = Table::new(Kind::Established, 2);
        t.insert(&key(1, TCP), entry(0, Some(901)), 0);
        let a = t.find(&key(1, TCP)).unwrap();
        assert_eq!(t.by_reply(&key(901, TCP)).map(|r| r.0), Some(a));
        // Another connection with the same reply tuple takes the index ...
        t.insert(&key(2, TCP), entry(1, Some(901)), 1);
        let b = t.find(&key(2, TCP)).unwrap();
        assert_eq!(t.by_reply(&key(901, TCP)).map(|r| r.0), Some(b));
        // ... and when it goes, the first one takes it back on its next packet.
        t.remove(b);
        assert_eq!(t.by_reply(&key(901, TCP)), None);
        t.relink(a);
        assert_eq!(t.by_reply(&key(901, TCP)).map(|r| r.0), Some(a));
        // Replacing an entry moves its reverse entry with it.
        t.replace(a, entry(5, Some(902)));
        assert_eq!(t.by_reply(&key(901, TCP)), None);
        assert_eq!(t.by_reply(&key(902, TCP)).map(|r| r.0), Some(a));
        // Eviction takes the reverse entry along.
        t.insert(&key(3, TCP), entry(6, None), 6);
        t.insert(&key(4, TCP), entry(7, None), 7);
        assert_eq!(t.by_reply(&key(902, TCP)), None);
        assert_eq!(t.find(&key(1, TCP)), None);
    }
}
