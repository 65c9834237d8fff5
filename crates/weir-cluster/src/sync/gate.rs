//! Who gets a bulk, sans-IO: the serving node's side of the join's
//! handshake. A bulk is large (every connection of the table) and a
//! request is one small datagram, so a request alone never earns one:
//!
//! 1. A **request** names its sender. The sender must be a cluster member
//!    (registered in etcd, `nodes/<name>`) and the datagram must come from
//!    that member's registered sync address. The answer is a **challenge**,
//!    a fresh nonce, sent to the registered address only. A member asks
//!    again until it is challenged; while its challenge is fresh, asking
//!    again brings the same nonce, so whichever copy it answers is right.
//! 2. A **proof** echoes the nonce, from the same member and address,
//!    within [`CHALLENGE_TTL`]. The nonce is used up; the bulk goes to the
//!    registered address, at most once per member per [`BULK_INTERVAL`].
//!
//! So a captured request or proof, replayed to this or any other node from
//! any address, brings no record anywhere: a request's challenge goes to
//! the member (which ignores a challenge it is not waiting for), and a
//! proof's nonce is stale everywhere but where it was issued, and there
//! once. Replay windows per receiver are not enough on their own: a
//! datagram first sent to one node is new to every other.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use crate::sync::wire::Nonce;

/// How long a challenge can be answered: a joiner answers within a round
/// trip on the sync network, so this is generous, and short enough that a
/// nonce does not linger.
pub const CHALLENGE_TTL: Duration = Duration::from_secs(2);

/// The least time between two bulks to one member. A member asks once per
/// start, and a bulk costs this node a walk of its whole table; a member
/// that asks more often (a restart loop, a bug, a stolen key) is refused
/// until this passes. It is well inside a join's default time (3 s,
/// `join_timeout_ms`): a node that restarts at once asks again until the
/// interval is over, or asks another peer, and still has its bulk.
pub const BULK_INTERVAL: Duration = Duration::from_secs(1);

/// Why a request or a proof earned nothing. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The sender is not registered in the cluster (or has no sync address).
    UnknownMember,
    /// The datagram did not come from the sender's registered address.
    AddressMismatch,
    /// A proof whose nonce this node did not issue to its sender, was used
    /// already, or expired.
    StaleChallenge,
    /// The member had a bulk less than [`BULK_INTERVAL`] ago.
    RateLimited,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::UnknownMember => "unknown member",
            Refusal::AddressMismatch => "address mismatch",
            Refusal::StaleChallenge => "stale challenge",
            Refusal::RateLimited => "rate limited",
        })
    }
}

/// The challenges this node issued and the bulks it served, per member.
/// Only members get entries, and entries of nodes that left are dropped,
/// so both maps stay as small as the cluster.
#[derive(Debug, Default)]
pub struct BulkGate {
    pending: HashMap<String, (Nonce, Instant)>,
    last_bulk: HashMap<String, Instant>,
}

/// The member's registered address, if `from` is it. The receiver asks
/// this before a request or proof touches the replay window, so datagrams
/// from elsewhere cannot use up a member's sequence numbers.
pub fn registered(
    member: &str,
    from: SocketAddr,
    members: &[(String, SocketAddr)],
) -> Result<SocketAddr, Refusal> {
    let addr = members
        .iter()
        .find(|(n, _)| n == member)
        .map(|(_, a)| *a)
        .ok_or(Refusal::UnknownMember)?;
    if addr != from {
        return Err(Refusal::AddressMismatch);
    }
    Ok(addr)
}

impl BulkGate {
    pub fn new() -> BulkGate {
        BulkGate::default()
    }

    fn rate_limited(&self, member: &str, now: Instant) -> bool {
        self.last_bulk
            .get(member)
            .is_some_and(|t| now.saturating_duration_since(*t) < BULK_INTERVAL)
    }

    /// A verified bulk request from `member`, received from `from`: where
    /// to send a challenge, and its nonce: the member's fresh one if it has
    /// one, else `nonce`.
    pub fn request(
        &mut self,
        member: &str,
        from: SocketAddr,
        members: &[(String, SocketAddr)],
        nonce: Nonce,
        now: Instant,
    ) -> Result<(SocketAddr, Nonce), Refusal> {
        let to = registered(member, from, members)?;
        if self.rate_limited(member, now) {
            return Err(Refusal::RateLimited);
        }
        self.pending.retain(|n, (_, at)| {
            members.iter().any(|(m, _)| m == n)
                && now.saturating_duration_since(*at) <= CHALLENGE_TTL
        });
        self.last_bulk.retain(|n, at| {
            members.iter().any(|(m, _)| m == n)
                && now.saturating_duration_since(*at) < BULK_INTERVAL
        });
        // Expired challenges went above: one left is fresh.
        let (nonce, _) = *self
            .pending
            .entry(member.to_string())
            .or_insert((nonce, now));
        Ok((to, nonce))
    }

    /// A verified proof from `member`, received from `from`: where to send
    /// the bulk. The nonce is used up only when the bulk is granted, so a
    /// forged proof from elsewhere cannot spoil the member's own.
    pub fn proof(
        &mut self,
        member: &str,
        from: SocketAddr,
        members: &[(String, SocketAddr)],
        nonce: &Nonce,
        now: Instant,
    ) -> Result<SocketAddr, Refusal> {
        let to = registered(member, from, members)?;
        let fresh = self.pending.get(member).is_some_and(|(issued, at)| {
            bool::from(issued.ct_eq(nonce)) && now.saturating_duration_since(*at) <= CHALLENGE_TTL
        });
        if !fresh {
            return Err(Refusal::StaleChallenge);
        }
        if self.rate_limited(member, now) {
            return Err(Refusal::RateLimited);
        }
        self.pending.remove(member);
        self.last_bulk.insert(member.to_string(), now);
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    fn members() -> Vec<(String, SocketAddr)> {
        vec![("a".into(), addr(1)), ("b".into(), addr(2))]
    }

    #[test]
    fn a_member_at_its_address_gets_one_bulk_per_echoed_nonce() {
        let (m, t0) = (members(), Instant::now());
        let mut g = BulkGate::new();
        assert_eq!(
            g.request("a", addr(1), &m, [1; 16], t0),
            Ok((addr(1), [1; 16]))
        );
        assert_eq!(
            g.proof("a", addr(1), &m, &[2; 16], t0),
            Err(Refusal::StaleChallenge),
            "not the nonce issued"
        );
        assert_eq!(
            g.proof("b", addr(2), &m, &[1; 16], t0),
            Err(Refusal::StaleChallenge),
            "another member's nonce"
        );
        assert_eq!(g.proof("a", addr(1), &m, &[1; 16], t0), Ok(addr(1)));
        assert_eq!(
            g.proof("a", addr(1), &m, &[1; 16], t0),
            Err(Refusal::StaleChallenge),
            "a nonce is used once"
        );
    }

    #[test]
    fn strangers_and_other_addresses_are_refused() {
        let (m, t0) = (members(), Instant::now());
        let mut g = BulkGate::new();
        assert_eq!(
            g.request("x", addr(1), &m, [1; 16], t0),
            Err(Refusal::UnknownMember)
        );
        assert_eq!(
            g.request("a", addr(2), &m, [1; 16], t0),
            Err(Refusal::AddressMismatch)
        );
        assert_eq!(
            g.request("a", addr(1), &[], [1; 16], t0),
            Err(Refusal::UnknownMember),
            "a node that left"
        );
        g.request("a", addr(1), &m, [3; 16], t0).unwrap();
        // The right nonce from the wrong address is refused and does not
        // use the nonce up: the member's own proof still works.
        assert_eq!(
            g.proof("a", addr(9), &m, &[3; 16], t0),
            Err(Refusal::AddressMismatch)
        );
        assert_eq!(
            g.proof("x", addr(1), &m, &[3; 16], t0),
            Err(Refusal::UnknownMember)
        );
        assert_eq!(g.proof("a", addr(1), &m, &[3; 16], t0), Ok(addr(1)));
    }

    #[test]
    fn challenges_expire_and_bulks_are_rate_limited() {
        let (m, t0) = (members(), Instant::now());
        let mut g = BulkGate::new();
        g.request("a", addr(1), &m, [1; 16], t0).unwrap();
        let late = t0 + CHALLENGE_TTL + Duration::from_millis(1);
        assert_eq!(
            g.proof("a", addr(1), &m, &[1; 16], late),
            Err(Refusal::StaleChallenge)
        );
        // An expired challenge is replaced; a fresh one is sent again.
        assert_eq!(
            g.request("a", addr(1), &m, [2; 16], late),
            Ok((addr(1), [2; 16]))
        );
        assert_eq!(
            g.request("a", addr(1), &m, [3; 16], late),
            Ok((addr(1), [2; 16]))
        );
        assert_eq!(
            g.proof("a", addr(1), &m, &[3; 16], late),
            Err(Refusal::StaleChallenge)
        );
        assert_eq!(g.proof("a", addr(1), &m, &[2; 16], late), Ok(addr(1)));
        // Within the interval: no challenge, and an outstanding one earns
        // nothing either.
        let soon = late + BULK_INTERVAL - Duration::from_millis(1);
        assert_eq!(
            g.request("a", addr(1), &m, [4; 16], soon),
            Err(Refusal::RateLimited)
        );
        // Another member is not limited by a's bulk.
        assert_eq!(
            g.request("b", addr(2), &m, [5; 16], soon),
            Ok((addr(2), [5; 16]))
        );
        assert_eq!(g.proof("b", addr(2), &m, &[5; 16], soon), Ok(addr(2)));
        let after = late + BULK_INTERVAL;
        g.request("a", addr(1), &m, [6; 16], after).unwrap();
        assert_eq!(g.proof("a", addr(1), &m, &[6; 16], after), Ok(addr(1)));
    }

    #[test]
    fn a_challenge_issued_before_a_bulk_cannot_fetch_a_second_one() {
        let (m, t0) = (members(), Instant::now());
        let mut g = BulkGate::new();
        g.request("a", addr(1), &m, [1; 16], t0).unwrap();
        assert_eq!(g.proof("a", addr(1), &m, &[1; 16], t0), Ok(addr(1)));
        // Requests are refused now, so no fresh nonce exists; the old one
        // is gone.
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(
            g.request("a", addr(1), &m, [2; 16], t1),
            Err(Refusal::RateLimited)
        );
        assert_eq!(
            g.proof("a", addr(1), &m, &[1; 16], t1),
            Err(Refusal::StaleChallenge)
        );
    }

    #[test]
    fn entries_of_departed_members_are_dropped() {
        let (m, t0) = (members(), Instant::now());
        let mut g = BulkGate::new();
        g.request("a", addr(1), &m, [1; 16], t0).unwrap();
        g.proof("a", addr(1), &m, &[1; 16], t0).unwrap();
        g.request("b", addr(2), &m, [2; 16], t0).unwrap();
        // a leaves; b asks again (and has its fresh nonce again).
        let only_b = vec![("b".to_string(), addr(2))];
        assert_eq!(
            g.request("b", addr(2), &only_b, [3; 16], t0),
            Ok((addr(2), [2; 16]))
        );
        assert!(!g.pending.contains_key("a") && !g.last_bulk.contains_key("a"));
        assert_eq!(g.pending.len(), 1);
    }
}
