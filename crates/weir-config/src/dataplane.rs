//! `[dataplane]`: where and how the data plane runs, the sizes of its
//! tables, the connection timeouts, and what it does with traffic that is
//! not a VIP's.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;
use weir_core::conn_timeouts::ConnTimeouts;
use weir_core::reorder_bounds::ReorderConfig;
use weir_core::syn_budget::SynBudget;
use weir_core::worker_policy::{Mode as Distribution, OffloadPolicy, SprayScope};

use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;
use crate::tier::Tier;

/// Where a running weir keeps its pinned maps unless `pin_dir` says
/// otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/weir";

/// Pass to the kernel or drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Drop,
}

/// What a non-SYN TCP packet that misses the connection table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonSynMiss {
    Dispatch,
    Drop,
}

/// `[dataplane] conn_lru`: how the connection tables' LRU lists are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnLru {
    /// One list for all CPUs: any free entry serves any CPU.
    #[default]
    Shared,
    /// One list per CPU: no shared lock on insert, but each CPU evicts only
    /// from its own share of the entries.
    PerCpu,
}

/// XDP attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpModeCfg {
    Native,
    Generic,
}

fn default_conn_table() -> u32 {
    1 << 20
}
fn default_max_vips() -> u32 {
    256
}
fn default_max_dips() -> u32 {
    4096
}
fn default_pin_dir() -> PathBuf {
    PathBuf::from(DEFAULT_PIN_DIR)
}
fn yes() -> bool {
    true
}
fn pass() -> Verdict {
    Verdict::Pass
}
fn drop_() -> Verdict {
    Verdict::Drop
}
fn dispatch() -> NonSynMiss {
    NonSynMiss::Dispatch
}
fn native() -> XdpModeCfg {
    XdpModeCfg::Native
}
fn encap_mtu() -> Spanned<u32> {
    Spanned::new(0..0, weir_core::wire::DEFAULT_ENCAP_MTU)
}
fn syn_rate() -> Spanned<u32> {
    Spanned::new(0..0, SynBudget::default().rate)
}
fn syn_burst() -> Spanned<u32> {
    Spanned::new(0..0, SynBudget::default().burst)
}
fn gue_port() -> Spanned<u16> {
    Spanned::new(0..0, weir_abi::WEIR_GUE_PORT as u16)
}
fn seed() -> u32 {
    weir_core::flow_hash::DEFAULT_SEED
}
fn heavy() -> Spanned<OffloadPolicy> {
    Spanned::new(0..0, OffloadPolicy::Heavy)
}
fn flow() -> Spanned<Distribution> {
    Spanned::new(0..0, Distribution::Flow)
}
fn tcp_scope() -> Spanned<SprayScope> {
    Spanned::new(0..0, SprayScope::Tcp)
}
fn reorder_on() -> Spanned<bool> {
    Spanned::new(0..0, true)
}
/// One worker on the last CPU weir may use (the first ones usually take
/// the interrupts and everything else).
fn last_cpu() -> Spanned<Vec<u32>> {
    Spanned::new(
        0..0,
        crate::cpus::usable()
            .last()
            .map(|&c| vec![c])
            .unwrap_or_default(),
    )
}
/// A defaulted Spanned has an empty span: the key is absent from the file.
pub(crate) fn given<T>(v: &Spanned<T>) -> bool {
    v.span().end > 0
}

/// `[dataplane]`: where and how the XDP program runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataplane {
    pub interfaces: Spanned<Vec<String>>,
    #[serde(default = "native")]
    pub xdp_mode: XdpModeCfg,
    /// Connections the xdp tier holds, IPv4 (and the workers' table, both
    /// families, in the software and hybrid tiers).
    #[serde(default = "default_conn_table")]
    pub conn_table_size: u32,
    /// IPv6 connections the xdp tier holds; default an eighth of
    /// `conn_table_size` (README, "The connection table").
    pub conn_table_size_v6: Option<Spanned<u32>>,
    /// The LRU layout of the connection tables (`shared` or `per-cpu`).
    #[serde(default)]
    pub conn_lru: ConnLru,
    /// Entries for TCP connections whose handshake is not done; default a
    /// quarter of `conn_table_size`.
    pub half_open_table_size: Option<u32>,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default = "default_max_vips")]
    pub max_vips: u32,
    #[serde(default = "default_max_dips")]
    pub max_dips: u32,
    #[serde(default = "pass")]
    pub not_vip: Verdict,
    #[serde(default = "pass")]
    pub icmp: Verdict,
    #[serde(default = "pass")]
    pub fragments: Verdict,
    #[serde(default = "drop_")]
    pub malformed: Verdict,
    #[serde(default = "dispatch")]
    pub tcp_nonsyn_miss: NonSynMiss,
    #[serde(default = "yes")]
    pub fib_lookup: bool,
    #[serde(default = "default_pin_dir")]
    pub pin_dir: PathBuf,
    #[serde(default = "seed")]
    pub hash_seed: u32,
    #[serde(default)]
    pub tier: Tier,
    /// Hybrid: entries of the XDP fast table (a NIC Flow Director holds
    /// 2000 to 8000); at most `conn_table_size`, the workers' table.
    /// Default 8192, or `conn_table_size` if that is smaller.
    pub fast_table_size: Option<Spanned<u32>>,
    /// Hybrid: which connections the fast table holds.
    #[serde(default = "heavy")]
    pub offload: Spanned<OffloadPolicy>,
    /// Software and hybrid: one worker thread pinned to each of these CPUs.
    #[serde(default = "last_cpu")]
    pub workers: Spanned<Vec<u32>>,
    /// Software and hybrid: how XDP hands packets to the workers (flow,
    /// spray, adaptive).
    #[serde(default = "flow")]
    pub distribution: Spanned<Distribution>,
    /// Spray and adaptive: the protocols they spread (`tcp`, or `all`).
    #[serde(default = "tcp_scope")]
    pub spray_scope: Spanned<SprayScope>,
    /// Spray and adaptive: restore each ingress queue's order before
    /// transmit (the reorder stage).
    #[serde(default = "reorder_on")]
    pub reorder: Spanned<bool>,
    /// How long a released packet may wait for a missing earlier one, in
    /// microseconds (the reorder stage's hold time).
    pub reorder_hold_us: Option<Spanned<u64>>,
    /// Software and hybrid: SYNs a second each receiving CPU hands to the
    /// workers; XDP drops the rest (`drop_syn_budget`), so a flood cannot
    /// crowd established packets out of the workers' rings. 0: no budget.
    #[serde(default = "syn_rate")]
    pub syn_rate: Spanned<u32>,
    /// Software and hybrid: SYNs that pass at once after a quiet spell.
    #[serde(default = "syn_burst")]
    pub syn_burst: Spanned<u32>,
    /// Experiments: TSC cycles of busy work added per packet in each worker.
    pub cost_cycles: Option<Spanned<u64>>,
    /// ipip and gue: the largest outer IP datagram weir sends (the smallest
    /// MTU on the way to the DIPs); a bigger one is dropped, `drop_too_big`.
    #[serde(default = "encap_mtu")]
    pub encap_mtu: Spanned<u32>,
    /// ipip and gue: the outer source address towards IPv4 DIPs; absent,
    /// one derived from the flow in 172.16.0.0/16 (RSS entropy at the DIP).
    pub encap_source_v4: Option<Spanned<std::net::Ipv4Addr>>,
    /// ipip and gue: the outer source address towards IPv6 DIPs; absent,
    /// one derived from the flow in fd77:6569:7200::/96.
    pub encap_source_v6: Option<Spanned<std::net::Ipv6Addr>>,
    /// gue: the UDP destination port the DIPs decapsulate on.
    #[serde(default = "gue_port")]
    pub gue_port: Spanned<u16>,
}

/// `[dataplane.timeouts]`: idle timeouts of connection entries, in seconds,
/// by state (defaults as IPVS's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// A SYN seen, the handshake not done: a retransmitted SYN keeps its DIP.
    pub tcp_half_open_s: Spanned<u64>,
    pub tcp_established_s: Spanned<u64>,
    /// A FIN seen in one direction.
    pub tcp_closing_s: Spanned<u64>,
    /// FINs both ways or a RST: the grace period before the entry goes.
    pub tcp_closed_s: Spanned<u64>,
    pub udp_s: Spanned<u64>,
}

impl Default for Timeouts {
    fn default() -> Self {
        let d = ConnTimeouts::default();
        let s = |v: std::time::Duration| Spanned::new(0..0, v.as_secs());
        Timeouts {
            tcp_half_open_s: s(d.tcp_half_open),
            tcp_established_s: s(d.tcp_established),
            tcp_closing_s: s(d.tcp_closing),
            tcp_closed_s: s(d.tcp_closed),
            udp_s: s(d.udp),
        }
    }
}

impl Timeouts {
    pub(crate) fn fields(&self) -> [(&'static str, &Spanned<u64>); 5] {
        [
            ("tcp_half_open_s", &self.tcp_half_open_s),
            ("tcp_established_s", &self.tcp_established_s),
            ("tcp_closing_s", &self.tcp_closing_s),
            ("tcp_closed_s", &self.tcp_closed_s),
            ("udp_s", &self.udp_s),
        ]
    }

    /// As the loader takes them.
    pub fn to_conn_timeouts(&self) -> ConnTimeouts {
        let d = |v: &Spanned<u64>| std::time::Duration::from_secs(*v.get_ref());
        ConnTimeouts {
            tcp_half_open: d(&self.tcp_half_open_s),
            tcp_established: d(&self.tcp_established_s),
            tcp_closing: d(&self.tcp_closing_s),
            tcp_closed: d(&self.tcp_closed_s),
            udp: d(&self.udp_s),
        }
    }
}

impl Dataplane {
    /// `conn_table_size_v6`, or its default.
    pub fn conn_size_v6(&self) -> u32 {
        self.conn_table_size_v6
            .as_ref()
            .map_or((self.conn_table_size / 8).max(1), |s| *s.get_ref())
    }

    /// `half_open_table_size`, or its default.
    pub fn half_open_size(&self) -> u32 {
        self.half_open_table_size
            .unwrap_or((self.conn_table_size / 4).max(1))
    }

    /// The SYN budget as the loader takes it.
    pub fn syn_budget(&self) -> SynBudget {
        SynBudget {
            rate: *self.syn_rate.get_ref(),
            burst: *self.syn_burst.get_ref(),
        }
    }

    /// Spray and adaptive with the reorder stage on.
    pub fn reorders(&self) -> bool {
        *self.distribution.get_ref() != Distribution::Flow && *self.reorder.get_ref()
    }

    /// The reorder stage's bounds: weir-core's defaults, and the hold time
    /// if given.
    pub fn reorder_config(&self) -> ReorderConfig {
        let d = ReorderConfig::default();
        ReorderConfig {
            hold_ns: self
                .reorder_hold_us
                .as_ref()
                .map_or(d.hold_ns, |h| h.get_ref().saturating_mul(1000)),
            ..d
        }
    }

    /// `fast_table_size`, or its default.
    pub fn fast_size(&self) -> u32 {
        self.fast_table_size
            .as_ref()
            .map_or(8192.min(self.conn_table_size), |s| *s.get_ref())
    }
}

impl Config {
    /// The interfaces, the table sizes and the timeouts (and, through
    /// `validate_tier`, the keys of the tiers).
    pub(crate) fn validate_dataplane(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        if dp.interfaces.get_ref().is_empty() {
            return Err(ck.err(
                Some(dp.interfaces.span()),
                "dataplane.interfaces",
                "list at least one interface to attach to, e.g. [\"eth0\"]",
            ));
        }
        let mut ifaces = HashSet::new();
        if let Some(twice) = dp.interfaces.get_ref().iter().find(|n| !ifaces.insert(*n)) {
            return Err(ck.err(
                Some(dp.interfaces.span()),
                "dataplane.interfaces",
                format!("`{twice}` is listed twice; list each interface once"),
            ));
        }
        for (field, v, min) in [
            ("dataplane.conn_table_size", dp.conn_table_size, 1),
            ("dataplane.max_vips", dp.max_vips, 1),
            ("dataplane.max_dips", dp.max_dips, 1),
        ] {
            if v < min {
                return Err(ck.err(None, field, "must be at least 1"));
            }
        }
        if dp.conn_size_v6() == 0 {
            return Err(ck.err(
                dp.conn_table_size_v6.as_ref().map(|s| s.span()),
                "dataplane.conn_table_size_v6",
                "must be at least 1: it holds the xdp tier's IPv6 connections",
            ));
        }
        if dp.half_open_size() == 0 || dp.half_open_size() > dp.conn_table_size {
            return Err(ck.err(
                None,
                "dataplane.half_open_table_size",
                format!(
                    "must be between 1 and conn_table_size ({}); it holds only TCP connections \
                     whose handshake is not done",
                    dp.conn_table_size
                ),
            ));
        }
        self.validate_tier(ck, warnings)?;
        let max_s = ConnTimeouts::MAX.as_secs();
        for (name, v) in dp.timeouts.fields() {
            if !(1..=max_s).contains(v.get_ref()) {
                return Err(ck.err(
                    Some(v.span()),
                    format!("dataplane.timeouts.{name}"),
                    format!("must be between 1 and {max_s} seconds (7 days)"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;

    #[test]
    fn the_ipv6_table_defaults_to_an_eighth_and_a_zero_names_its_line() {
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(dp.conn_size_v6(), 1 << 17);
        let given = dataplane_with("conn_table_size_v6 = 5000");
        let dp = Config::parse("t.toml", &given).unwrap().dataplane;
        assert_eq!(dp.conn_size_v6(), 5000);
        let e = err_of(&dataplane_with("conn_table_size_v6 = 0"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(4), "dataplane.conn_table_size_v6"),
            "{e}"
        );
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn an_interface_listed_twice_is_refused() {
        let e = err_of(&GOOD.replace("[\"veth0\"]", "[\"veth0\", \"veth1\", \"veth0\"]"));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("dataplane.interfaces", Some(3))
        );
        assert!(e.message.contains("`veth0` is listed twice"), "{e}");
    }

    #[test]
    fn conn_lru_takes_per_cpu() {
        let dp = Config::parse("t.toml", &dataplane_with("conn_lru = \"per-cpu\""))
            .unwrap()
            .dataplane;
        assert_eq!(dp.conn_lru, ConnLru::PerCpu);
    }
}
