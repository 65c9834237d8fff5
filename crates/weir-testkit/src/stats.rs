//! The names of `enum weir_stat`'s counters, for assertion messages.

use weir_abi::*;

/// Every outcome counter: each packet ends in exactly one of them.
pub const OUTCOMES: std::ops::RangeInclusive<u32> = WEIR_STAT_PASS_NOT_IP..=WEIR_STAT_LAST_OUTCOME;

/// The name of counter `i` (found by constant, not by position).
pub fn stat_name(i: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (WEIR_STAT_RX, "rx"),
        (WEIR_STAT_PASS_NOT_IP, "pass_not_ip"),
        (WEIR_STAT_PASS_NOT_VIP, "pass_not_vip"),
        (WEIR_STAT_PASS_ICMP, "pass_icmp"),
        (WEIR_STAT_PASS_FRAGMENT, "pass_fragment"),
        (WEIR_STAT_PASS_NO_NEIGH, "pass_no_neigh"),
        (WEIR_STAT_DROP_NOT_VIP, "drop_not_vip"),
        (WEIR_STAT_DROP_ICMP, "drop_icmp"),
        (WEIR_STAT_DROP_FRAGMENT, "drop_fragment"),
        (WEIR_STAT_DROP_MALFORMED, "drop_malformed"),
        (WEIR_STAT_PASS_MALFORMED, "pass_malformed"),
        (WEIR_STAT_DROP_NO_BACKEND, "drop_no_backend"),
        (WEIR_STAT_DROP_NONSYN_MISS, "drop_nonsyn_miss"),
        (WEIR_STAT_DROP_NO_ROUTE, "drop_no_route"),
        (WEIR_STAT_TX, "tx"),
        (WEIR_STAT_REDIRECT, "redirect"),
        (WEIR_STAT_DROP_REDIRECT, "drop_redirect"),
        (WEIR_STAT_DROP_REPLY_NO_STATE, "drop_reply_no_state"),
        (WEIR_STAT_TO_SOFTWARE, "to_software"),
        (WEIR_STAT_DROP_NO_WORKER, "drop_no_worker"),
        (WEIR_STAT_DROP_TOO_BIG, "drop_too_big"),
        (WEIR_STAT_DROP_SYN_BUDGET, "drop_syn_budget"),
        (WEIR_STAT_CONN_HIT, "conn_hit"),
        (WEIR_STAT_CONN_MISS, "conn_miss"),
        (WEIR_STAT_CONN_NEW, "conn_new"),
        (WEIR_STAT_CONN_INSTALL_FAIL, "conn_install_fail"),
        (WEIR_STAT_CONN_STALE, "conn_stale"),
        (WEIR_STAT_NONSYN_MISS, "nonsyn_miss"),
        (WEIR_STAT_REV_NAT, "rev_nat"),
        (WEIR_STAT_MAC_FALLBACK, "mac_fallback"),
        (WEIR_STAT_HALF_OPEN_NEW, "half_open_new"),
        (WEIR_STAT_SYN_RETRANSMIT, "syn_retransmit"),
        (WEIR_STAT_CONN_REUSED, "conn_reused"),
        (WEIR_STAT_CONN_EXPIRED, "conn_expired"),
        (WEIR_STAT_CONN_CLOSING, "conn_closing"),
    ];
    NAMES
        .iter()
        .find(|(s, _)| *s == i)
        .map_or_else(|| format!("stat{i}"), |(_, n)| n.to_string())
}

/// The non-zero counters of `s` by name.
pub fn fmt_stats(s: &[u64]) -> String {
    s.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, v)| format!("{}={v}", stat_name(i as u32)))
        .collect::<Vec<_>>()
        .join(" ")
}
