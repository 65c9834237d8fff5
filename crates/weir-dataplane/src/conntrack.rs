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

use anyhow::Result;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use weir_abi::*;

use crate::flow_table::FlowTable;
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
pub fn sweep(maps: &Maps, timeouts: &ConnTimeouts) -> Result<SweepReport> {
    let t = timeouts.ticks();
    let dips = live_dips(maps)?;
    let mut report = SweepReport::default();
    let now = now_ticks();
    // dsr and ipip VIPs install no reverse entries. With none in the table
    // (checked once per sweep), deleting each closed connection's reverse
    // key would be a failed syscall per connection; an entry expired before
    // this check cannot gain a reverse entry after it (a new connection on
    // its tuple is a new entry, which this sweep does not delete).
    let reverses = !maps.rev_nat.is_empty();
    let (n, expired) = sweep_table(
        &maps.conns,
        |rkey| {
            if reverses {
                let _ = maps.rev_nat.delete(rkey);
            }
        },
        &dips,
        |key, c| idle_past(c.atime, timeout(c, key.proto, &t), now),
    )?;
    report.established = n;
    report.established_expired = expired;
    // A half-open entry carries its reverse entry (weir_half_open).
    let (n, expired) = sweep_table(
        &HalfOpen(&maps.half_open),
        |_| {},
        &dips,
        |_, c| idle_past(c.atime, t.tcp_half_open, now),
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
    fn entries(&self) -> Result<Vec<(weir_flow_key, weir_conn)>>;
    fn get(&self, key: &weir_flow_key) -> Result<Option<weir_conn>>;
    fn delete(&self, key: &weir_flow_key) -> bool;
}

impl ConnEntries for FlowTable<weir_conn> {
    fn entries(&self) -> Result<Vec<(weir_flow_key, weir_conn)>> {
        FlowTable::entries(self)
    }

    fn get(&self, key: &weir_flow_key) -> Result<Option<weir_conn>> {
        FlowTable::get(self, key)
    }

    fn delete(&self, key: &weir_flow_key) -> bool {
        matches!(FlowTable::delete(self, key), Ok(true))
    }
}

/// The half-open table, whose entries carry their reverse entry
/// (weir_half_open): the sweep reads their connections.
struct HalfOpen<'a>(&'a MapHandle);

impl ConnEntries for HalfOpen<'_> {
    fn entries(&self) -> Result<Vec<(weir_flow_key, weir_conn)>> {
        let entries: Vec<(weir_flow_key, weir_half_open)> = read_all(self.0)?;
        Ok(entries.into_iter().map(|(k, h)| (k, h.conn)).collect())
    }

    fn get(&self, key: &weir_flow_key) -> Result<Option<weir_conn>> {
        Ok(self
            .0
            .lookup(key.as_bytes(), MapFlags::ANY)?
            .and_then(|v| weir_half_open::from_bytes(&v))
            .map(|h| h.conn))
    }

    fn delete(&self, key: &weir_flow_key) -> bool {
        MapCore::delete(self.0, key.as_bytes()).is_ok()
    }
}

/// Deletes the expired entries of `table` and, through `delete_reverse`,
/// their reverse entries (absent in dsr mode, so a failed delete is no
/// error).
fn sweep_table(
    table: &impl ConnEntries,
    delete_reverse: impl Fn(&weir_flow_key),
    dips: &HashMap<u32, weir_dip>,
    expired: impl Fn(&weir_flow_key, &weir_conn) -> bool,
) -> Result<(usize, usize)> {
    let entries = table.entries()?;
    let seen = entries.len();
    let victims: Vec<_> = entries
        .into_iter()
        .filter(|(key, c)| expired(key, c))
        .collect();
    let mut removed = 0;
    for (key, seen) in victims {
        // Read again: only the same, still expired entry goes.
        let Some(now) = table.get(&key)? else {
            continue;
        };
        if now.created_ns != seen.created_ns || !expired(&key, &now) {
            continue;
        }
        if table.delete(&key) {
            removed += 1;
        }
        if let Some(dip) = dips.get(&now.dip_id).filter(|d| d.gen == now.dip_gen) {
            delete_reverse(&reverse_key(&key, dip));
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
