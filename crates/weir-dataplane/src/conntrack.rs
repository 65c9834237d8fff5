//! The user-space half of connection aging (bpf/lib/conntrack.h): the same
//! clock, the same expiry rule, and a sweep that deletes what has expired.
//!
//! The data plane already treats an expired entry as absent, so the sweep
//! changes no forwarding decision: it frees the slots (closed connections
//! would otherwise compete with live idle ones for LRU space) and keeps
//! `weir status` honest. It reads with the data plane's own clock
//! (CLOCK_MONOTONIC_COARSE is `bpf_ktime_get_coarse_ns`), and the data plane
//! never refreshes an entry once it has expired, so an entry seen expired
//! here stays expired; each one is read again right before its deletion, and
//! only an entry that is still the same one (same creation time) is removed.
//!
//! In the hybrid tier the software tier writes the connection table (the
//! fast table) with [`new_entry`]s; XDP and the sweep age them by the same
//! rules.

use std::collections::HashMap;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use weir_abi::*;

use crate::flow_table::{unsupported, FlowTable};
use crate::loader::ConnTimeouts;
use crate::maps::{read_all, Maps};

const TCP: u8 = 6;

pub use weir_core::conn_timeouts::ticks;

/// Now, in the data plane's ticks (the coarse monotonic clock).
pub fn now_ticks() -> u32 {
    (weir_sys::monotonic_coarse_ns() >> WEIR_TICK_SHIFT) as u32
}

/// A new entry for a connection dispatched to DIP slot `dip_id` (of
/// generation `dip_gen`) by table `table_version`, created and used now:
/// what the software tier installs in the hybrid tier's fast table.
pub fn new_entry(dip_id: u32, dip_gen: u32, table_version: u32) -> weir_conn {
    weir_conn {
        dip_id,
        dip_gen,
        table_version,
        created_ns: weir_sys::monotonic_ns(),
        atime: now_ticks(),
        ..Default::default()
    }
}

/// FINs both ways, or a RST: the connection is over (its entry lives out
/// the short closed timeout).
pub fn closed(conn: &weir_conn) -> bool {
    let both_fins = (WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER) as u8;
    let f = conn.close_flags;
    f & WEIR_CONN_F_RST as u8 != 0 || f & both_fins == both_fins
}

/// The idle timeout of an established-table entry in its state, in ticks
/// (the twin of `conn_timeout` in conntrack.h).
pub fn timeout(conn: &weir_conn, proto: u8, t: &weir_conn_timeouts) -> u32 {
    if proto != TCP {
        t.udp
    } else if closed(conn) {
        t.tcp_closed
    } else if conn.close_flags != 0 {
        t.tcp_closing
    } else {
        t.tcp_established
    }
}

/// The data plane's idle test (conntrack.h's `conn_expired`), one
/// implementation with the software tier's.
pub use weir_software_engine::slb::idle_past;

/// What one sweep found and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub established: usize,
    pub established_expired: usize,
    pub half_open: usize,
    pub half_open_expired: usize,
}

/// Deletes the expired entries of both connection tables (and their
/// reverse entries in nat mode).
///
/// Per expired connection the sweep makes one call (a lookup-and-delete,
/// which checks the very entry it removes) and its reverse entries go in
/// batches: a sweep of N closed nat connections costs about N + N/4096
/// map calls, not 3N.
pub fn sweep(maps: &Maps, timeouts: &ConnTimeouts) -> Result<SweepReport> {
    let t = timeouts.ticks();
    let dips = live_dips(maps)?;
    let mut report = SweepReport::default();
    let now = now_ticks();
    // dsr and ipip VIPs install no reverse entries. With none in the table
    // (checked once per sweep), the closed connections' reverse keys are
    // not even collected; an entry expired before this check cannot gain a
    // reverse entry after it (a new connection on its tuple is a new entry,
    // which this sweep does not delete).
    let reverses = !maps.rev_nat.is_empty();
    let mut reverse_keys = Vec::new();
    let (n, expired) = sweep_table(
        &maps.conns,
        &dips,
        |key, c| idle_past(c.atime, timeout(c, key.proto, &t), now),
        |rkey| {
            if reverses {
                reverse_keys.push(rkey);
            }
        },
    )?;
    report.established = n;
    report.established_expired = expired;
    if !reverse_keys.is_empty() {
        maps.rev_nat.delete_batch(&reverse_keys)?;
    }
    // A half-open entry carries its reverse entry (weir_half_open).
    let (n, expired) = sweep_table(
        &HalfOpen(&maps.half_open),
        &dips,
        |_, c| idle_past(c.atime, t.tcp_half_open, now),
        |_| {},
    )?;
    report.half_open = n;
    report.half_open_expired = expired;
    Ok(report)
}

/// DIP slots by id, to find reverse keys.
fn live_dips(maps: &Maps) -> Result<HashMap<u32, weir_dip>> {
    let mut out = HashMap::new();
    for id in 0..maps.dip_slots() {
        if let Some(d) = maps.dip(id)? {
            out.insert(id, d);
        }
    }
    Ok(out)
}

/// A table of connection entries the sweep walks: the established one,
/// split by family, or the half-open one, which holds both.
trait ConnEntries {
    /// What the table stores per tuple: a connection, or one with more.
    type Entry: Copy;
    fn conn(entry: &Self::Entry) -> &weir_conn;
    fn entries(&self) -> Result<Vec<(weir_flow_key, Self::Entry)>>;
    /// Deletes `key`'s entry and returns it (the one deleted).
    fn take(&self, key: &weir_flow_key) -> Result<Option<Self::Entry>>;
    /// Puts back an entry [`ConnEntries::take`] should have left, unless
    /// the data plane wrote a newer one meanwhile.
    fn restore(&self, key: &weir_flow_key, entry: &Self::Entry) -> Result<()>;
}

impl ConnEntries for FlowTable<weir_conn> {
    type Entry = weir_conn;

    fn conn(entry: &weir_conn) -> &weir_conn {
        entry
    }

    fn entries(&self) -> Result<Vec<(weir_flow_key, weir_conn)>> {
        FlowTable::entries(self)
    }

    fn take(&self, key: &weir_flow_key) -> Result<Option<weir_conn>> {
        FlowTable::take(self, key)
    }

    fn restore(&self, key: &weir_flow_key, entry: &weir_conn) -> Result<()> {
        self.insert_new(key, entry).map(drop)
    }
}

/// The half-open table, whose entries carry their reverse entry
/// (weir_half_open): the sweep reads their connections.
struct HalfOpen<'a>(&'a MapHandle);

impl ConnEntries for HalfOpen<'_> {
    type Entry = weir_half_open;

    fn conn(entry: &weir_half_open) -> &weir_conn {
        &entry.conn
    }

    fn entries(&self) -> Result<Vec<(weir_flow_key, weir_half_open)>> {
        read_all(self.0)
    }

    fn take(&self, key: &weir_flow_key) -> Result<Option<weir_half_open>> {
        let taken = match self.0.lookup_and_delete(key.as_bytes()) {
            Err(e) if unsupported(&e) => {
                let v = self.0.lookup(key.as_bytes(), MapFlags::ANY)?;
                if v.is_some() {
                    let _ = MapCore::delete(self.0, key.as_bytes());
                }
                v
            }
            taken => taken.context("taking from the half-open table")?,
        };
        Ok(taken.and_then(|v| weir_half_open::from_bytes(&v)))
    }

    fn restore(&self, key: &weir_flow_key, entry: &weir_half_open) -> Result<()> {
        match self
            .0
            .update(key.as_bytes(), entry.as_bytes(), MapFlags::NO_EXIST)
        {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::AlreadyExists => {
                Err(e).context("restoring a half-open entry")
            }
            _ => Ok(()),
        }
    }
}

/// Deletes the expired entries of `table` and hands `reverse` the reverse
/// key of each deleted connection whose DIP slot still holds its DIP.
///
/// An entry seen expired in the walk is taken out in one step and checked
/// again: if it is not the same, still expired entry (a new connection on
/// the tuple since the walk), it goes back unless the data plane has
/// written the tuple again meanwhile.
fn sweep_table<T: ConnEntries>(
    table: &T,
    dips: &HashMap<u32, weir_dip>,
    expired: impl Fn(&weir_flow_key, &weir_conn) -> bool,
    mut reverse: impl FnMut(weir_flow_key),
) -> Result<(usize, usize)> {
    let entries = table.entries()?;
    let seen = entries.len();
    let victims: Vec<_> = entries
        .into_iter()
        .filter(|(key, e)| expired(key, T::conn(e)))
        .collect();
    let mut removed = 0;
    for (key, seen) in victims {
        let Some(taken) = table.take(&key)? else {
            continue;
        };
        let now = T::conn(&taken);
        if now.created_ns != T::conn(&seen).created_ns || !expired(&key, now) {
            table.restore(&key, &taken)?;
            continue;
        }
        removed += 1;
        if let Some(dip) = dips.get(&now.dip_id).filter(|d| d.gen == now.dip_gen) {
            reverse(reverse_key(&key, dip));
        }
    }
    Ok((seen, removed))
}

/// The tuple of the DIP's replies to the client tuple `key` (the twin of
/// `reverse_key` in conntrack.h).
pub fn reverse_key(key: &weir_flow_key, dip: &weir_dip) -> weir_flow_key {
    weir_flow_key {
        src: dip.addr,
        dst: key.src,
        sport: if dip.port != 0 { dip.port } else { key.dport },
        dport: key.sport,
        proto: key.proto,
        family: key.family,
        pad: [0; 2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn conn(flags: u32) -> weir_conn {
        weir_conn {
            close_flags: flags as u8,
            ..Default::default()
        }
    }

    #[test]
    fn state_picks_the_timeout() {
        let t = ConnTimeouts::default().ticks();
        assert_eq!(timeout(&conn(0), TCP, &t), t.tcp_established);
        assert_eq!(
            timeout(&conn(WEIR_CONN_F_FIN_CLIENT), TCP, &t),
            t.tcp_closing
        );
        assert_eq!(
            timeout(&conn(WEIR_CONN_F_FIN_SERVER), TCP, &t),
            t.tcp_closing
        );
        let both = WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER;
        assert_eq!(timeout(&conn(both), TCP, &t), t.tcp_closed);
        assert_eq!(timeout(&conn(WEIR_CONN_F_RST), TCP, &t), t.tcp_closed);
        assert_eq!(timeout(&conn(0), 17, &t), t.udp);
    }

    #[test]
    fn closed_means_fins_both_ways_or_a_rst() {
        assert!(!closed(&conn(0)));
        assert!(!closed(&conn(WEIR_CONN_F_FIN_CLIENT)));
        assert!(!closed(&conn(WEIR_CONN_F_FIN_SERVER)));
        assert!(closed(&conn(
            WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER
        )));
        assert!(closed(&conn(WEIR_CONN_F_RST)));
    }

    #[test]
    fn a_new_entry_is_fresh_and_unclosed() {
        let t = ConnTimeouts::default().ticks();
        let e = new_entry(7, 3, 12);
        assert_eq!((e.dip_id, e.dip_gen, e.table_version), (7, 3, 12));
        assert_eq!((e.hits, e.close_flags, e.req_us), (0, 0, 0));
        assert_ne!(e.created_ns, 0);
        assert!(!idle_past(e.atime, timeout(&e, TCP, &t), now_ticks()));
    }

    #[test]
    fn ticks_are_about_a_millisecond_and_saturate() {
        assert_eq!(ticks(Duration::from_secs(1)), 953);
        assert_eq!(ticks(Duration::from_secs(900)), 858_306);
        assert_eq!(ticks(Duration::from_secs(u64::MAX / 4)), u32::MAX);
        assert!(ticks(ConnTimeouts::MAX) < u32::MAX / 2);
    }

    #[test]
    fn idle_time_wraps() {
        assert!(!idle_past(100, 50, 150));
        assert!(idle_past(100, 50, 151));
        // atime just before the 32-bit wrap, now just after it.
        assert!(!idle_past(u32::MAX - 10, 50, 20));
        assert!(idle_past(u32::MAX - 10, 20, 20));
        // Used by another CPU after this one read the clock: not idle.
        assert!(!idle_past(151, 50, 150));
        assert!(!idle_past(5, 0, u32::MAX - 5));
    }

    #[test]
    fn clock_moves_forward_in_ticks() {
        let a = now_ticks();
        std::thread::sleep(Duration::from_millis(30));
        let b = now_ticks();
        assert!(
            b.wrapping_sub(a) >= 10 && b.wrapping_sub(a) < 10_000,
            "{a} -> {b}"
        );
    }
}
