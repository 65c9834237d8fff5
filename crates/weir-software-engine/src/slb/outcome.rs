//! What the software load balancer reports: the outcome of each packet,
//! the table events a hybrid tier mirrors into the fast table, and the
//! counters, indexed by `enum weir_stat` so they read like weir_lb's.

use weir_abi::*;

use weir_core::dispatch::awfd::DipId;

/// Which way a forwarded packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A client's packet, to its connection's DIP.
    ToDip,
    /// A nat DIP's reply, rewritten back to the VIP, to the client.
    ToClient,
}

/// Where a forwarded frame leaves. Its MACs are already in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Egress {
    pub ifindex: u32,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// Another interface than the one the frame came in on (weir_lb
    /// redirects; counted as `redirect`, else `tx`).
    pub redirect: bool,
}

/// A frame rewritten in place and ready to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub side: Side,
    /// The connection's DIP slot.
    pub dip: DipId,
    pub vip_id: u32,
    /// The connection's 5-tuple as its client sends it (client -> VIP),
    /// also for a reply: the key of the connection tables and of
    /// `crate::offload`.
    pub conn: weir_flow_key,
    pub egress: Egress,
}

/// Why a frame was dropped; each is one of weir_lb's outcome counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Not IP, or IP for no VIP and no known reply (not_vip = drop).
    NotVip,
    Icmp,
    Fragment,
    /// Truncated, inconsistent lengths, or too long an IPv6 extension chain.
    Malformed,
    /// The VIP has no table or no live DIP of the packet's family.
    NoBackend,
    /// A TCP non-SYN without state (nonsyn_miss = drop).
    NonSynMiss,
    /// No next hop: the DIP has no MAC, or its interface is unknown.
    NoRoute,
    /// The reply's interface is not one the load balancer sends by.
    NoRedirectTarget,
    /// A nat DIP's reply with no connection, to an address that is not
    /// local: sent on, it would reach a client with the DIP's address.
    ReplyNoState,
}

/// Why a frame goes to the kernel unchanged; each is one of weir_lb's
/// outcome counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassReason {
    NotIp,
    NotVip,
    Icmp,
    Fragment,
    Malformed,
}

/// What became of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Forward(Forward),
    Drop(DropReason),
    Pass(PassReason),
}

impl Outcome {
    /// The outcome counter (`enum weir_stat`) this frame ends in.
    pub fn stat(&self) -> u32 {
        match self {
            Outcome::Forward(f) if f.egress.redirect => WEIR_STAT_REDIRECT,
            Outcome::Forward(_) => WEIR_STAT_TX,
            Outcome::Drop(r) => match r {
                DropReason::NotVip => WEIR_STAT_DROP_NOT_VIP,
                DropReason::Icmp => WEIR_STAT_DROP_ICMP,
                DropReason::Fragment => WEIR_STAT_DROP_FRAGMENT,
                DropReason::Malformed => WEIR_STAT_DROP_MALFORMED,
                DropReason::NoBackend => WEIR_STAT_DROP_NO_BACKEND,
                DropReason::NonSynMiss => WEIR_STAT_DROP_NONSYN_MISS,
                DropReason::NoRoute => WEIR_STAT_DROP_NO_ROUTE,
                DropReason::NoRedirectTarget => WEIR_STAT_DROP_REDIRECT,
                DropReason::ReplyNoState => WEIR_STAT_DROP_REPLY_NO_STATE,
            },
            Outcome::Pass(r) => match r {
                PassReason::NotIp => WEIR_STAT_PASS_NOT_IP,
                PassReason::NotVip => WEIR_STAT_PASS_NOT_VIP,
                PassReason::Icmp => WEIR_STAT_PASS_ICMP,
                PassReason::Fragment => WEIR_STAT_PASS_FRAGMENT,
                PassReason::Malformed => WEIR_STAT_PASS_MALFORMED,
            },
        }
    }
}

/// An established connection as weir_lb's maps hold it: what a hybrid
/// tier writes into the fast table (`conns`, and `rev_nat` in nat mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    pub key: weir_flow_key,
    pub conn: weir_conn,
    /// nat: the replies' 5-tuple and the reverse entry.
    pub reverse: Option<(weir_flow_key, weir_rev_nat)>,
}

/// Why a connection left the established table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Idle past its state's timeout (found by a packet or by a sweep).
    Expired,
    /// A SYN on its 5-tuple opened a new connection.
    Reused,
    /// The table was full and it was the least recently used.
    Evicted,
}

/// A change of the established table that a fast table mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A connection was confirmed (TCP: the client's packet after its SYN;
    /// UDP: its first datagram) or redispatched because its DIP went away.
    /// It replaces any entry of the same key.
    Installed(Connection),
    /// A connection saw FINs both ways or a RST: it stays for the closed
    /// timeout's grace period, but no longer needs a fast entry.
    Closed(weir_flow_key),
    /// A connection left the table; `reverse` is its replies' 5-tuple (nat),
    /// the key of its fast reverse entry.
    Removed {
        key: weir_flow_key,
        reverse: Option<weir_flow_key>,
        reason: Removal,
    },
}

/// Counters of one software load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Indexed by `enum weir_stat`, with weir_lb's meaning: `rx` is the sum
    /// of the outcome counters, the rest are events (names in
    /// weir_control's `STAT_NAMES`).
    stats: [u64; WEIR_STAT_MAX as usize],
    /// Established entries pushed out by new ones (the table was full).
    pub evicted: u64,
    /// Half-open entries pushed out by new SYNs.
    pub half_open_evicted: u64,
    /// Expired entries removed by [`super::Slb::expire`].
    pub swept: u64,
    /// Events dropped because the caller let the queue fill up.
    pub events_lost: u64,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            stats: [0; WEIR_STAT_MAX as usize],
            evicted: 0,
            half_open_evicted: 0,
            swept: 0,
            events_lost: 0,
        }
    }
}

impl Counters {
    /// One counter of `enum weir_stat` (0 past its end).
    pub fn get(&self, stat: u32) -> u64 {
        self.stats.get(stat as usize).copied().unwrap_or(0)
    }

    /// All of `enum weir_stat`, in order: the layout of weir_lb's `stats`.
    pub fn stats(&self) -> &[u64; WEIR_STAT_MAX as usize] {
        &self.stats
    }

    /// The sum of the outcome counters (equal to `rx`).
    pub fn outcomes(&self) -> u64 {
        self.stats[WEIR_STAT_PASS_NOT_IP as usize..=WEIR_STAT_DROP_REPLY_NO_STATE as usize]
            .iter()
            .sum()
    }

    #[inline]
    pub(crate) fn bump(&mut self, stat: u32) {
        self.stats[stat as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_one_outcome_counter() {
        let fwd = |redirect| {
            Outcome::Forward(Forward {
                side: Side::ToDip,
                dip: 1,
                vip_id: 0,
                conn: weir_flow_key::default(),
                egress: Egress {
                    ifindex: 1,
                    dst_mac: [0; 6],
                    src_mac: [0; 6],
                    redirect,
                },
            })
        };
        use DropReason as D;
        use PassReason as P;
        let all = [
            fwd(false),
            fwd(true),
            Outcome::Drop(D::NotVip),
            Outcome::Drop(D::Icmp),
            Outcome::Drop(D::Fragment),
            Outcome::Drop(D::Malformed),
            Outcome::Drop(D::NoBackend),
            Outcome::Drop(D::NonSynMiss),
            Outcome::Drop(D::NoRoute),
            Outcome::Drop(D::NoRedirectTarget),
            Outcome::Drop(D::ReplyNoState),
            Outcome::Pass(P::NotIp),
            Outcome::Pass(P::NotVip),
            Outcome::Pass(P::Icmp),
            Outcome::Pass(P::Fragment),
            Outcome::Pass(P::Malformed),
        ];
        let mut c = Counters::default();
        for o in &all {
            let s = o.stat();
            assert!((WEIR_STAT_PASS_NOT_IP..=WEIR_STAT_DROP_REPLY_NO_STATE).contains(&s));
            c.bump(s);
        }
        // Distinct counters, all but pass_no_neigh (no FIB in software).
        assert_eq!(c.outcomes(), all.len() as u64);
        assert!(c.stats().iter().all(|&v| v <= 1));
        assert_eq!(c.get(WEIR_STAT_PASS_NO_NEIGH), 0);
        assert_eq!(c.get(WEIR_STAT_MAX), 0);
    }
}
