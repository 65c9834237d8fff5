//! The TOML configuration of `weir serve`, validated with errors that name
//! the file, the line and the field, and say what to do.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use weir_core::flow::Proto;
use weir_software_engine::distribution::{cost::validate_cost_cycles, DistributionConfig};
pub use weir_software_engine::distribution::{Mode as Distribution, SprayScope};
pub use weir_software_engine::offload::OffloadPolicy;
use weir_software_engine::reorder::ReorderConfig;

pub use crate::diag::ConfigError;
use crate::diag::{key_at, line_of};

/// Forwarding mode of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Nat,
    Dsr,
    /// Encapsulated in IP to the DIP (IPIP, IPv6-in-IPv6); replies direct.
    Ipip,
    /// Encapsulated in IP and UDP (GUE variant 1); replies direct.
    Gue,
}

impl Mode {
    /// The modes that put the packet behind an outer header to the DIP.
    pub fn encapsulates(self) -> bool {
        matches!(self, Mode::Ipip | Mode::Gue)
    }
}

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

/// `[dataplane] tier`: which tier handles the traffic of the VIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Everything in XDP (dispatch, connection table, rewrite).
    #[default]
    Xdp,
    /// XDP steers VIP traffic and nat replies to the workers, which keep
    /// the connections, dispatch and rewrite (HNLB's software LB).
    Software,
    /// XDP forwards the connections its bounded fast table holds; the
    /// workers handle the rest and fill the fast table (HNLB).
    Hybrid,
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
    PathBuf::from(weir_dataplane::DEFAULT_PIN_DIR)
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
fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn encap_mtu() -> Spanned<u32> {
    Spanned::new(0..0, weir_dataplane::loader::Encap::default().mtu)
}
fn syn_rate() -> Spanned<u32> {
    Spanned::new(0..0, weir_dataplane::loader::SynBudget::default().rate)
}
fn syn_burst() -> Spanned<u32> {
    Spanned::new(0..0, weir_dataplane::loader::SynBudget::default().burst)
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
fn given<T>(v: &Spanned<T>) -> bool {
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
        let d = weir_dataplane::loader::ConnTimeouts::default();
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
    fn fields(&self) -> [(&'static str, &Spanned<u64>); 5] {
        [
            ("tcp_half_open_s", &self.tcp_half_open_s),
            ("tcp_established_s", &self.tcp_established_s),
            ("tcp_closing_s", &self.tcp_closing_s),
            ("tcp_closed_s", &self.tcp_closed_s),
            ("udp_s", &self.udp_s),
        ]
    }

    /// As the loader takes them.
    pub fn to_conn_timeouts(&self) -> weir_dataplane::loader::ConnTimeouts {
        let d = |v: &Spanned<u64>| std::time::Duration::from_secs(*v.get_ref());
        weir_dataplane::loader::ConnTimeouts {
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
    pub fn syn_budget(&self) -> weir_dataplane::loader::SynBudget {
        weir_dataplane::loader::SynBudget {
            rate: *self.syn_rate.get_ref(),
            burst: *self.syn_burst.get_ref(),
        }
    }

    /// The workers' distribution as weir-core and the loader take it.
    pub fn distribution_config(&self) -> DistributionConfig {
        let mode = *self.distribution.get_ref();
        DistributionConfig {
            scope: *self.spray_scope.get_ref(),
            ..DistributionConfig::new(mode, self.workers.get_ref().len() as u16)
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

/// `[[vip.dip]]`: one backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dip {
    pub address: Spanned<IpAddr>,
    /// NAT destination port; absent keeps the VIP's port.
    pub port: Option<Spanned<u16>>,
    /// Static AWFD weight: the priority class k. 0 drains.
    #[serde(default = "one")]
    pub weight: Spanned<u32>,
    /// Next-hop MAC to use when the FIB has no neighbour (or is off).
    pub mac: Option<Spanned<String>>,
    /// Where this DIP's `weir agent` answers (`[controller] telemetry = "agent"`).
    pub agent: Option<Spanned<std::net::SocketAddr>>,
}

/// `[[vip]]`: one virtual service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vip {
    pub name: Spanned<String>,
    pub address: Spanned<IpAddr>,
    pub port: Spanned<u16>,
    pub protocol: Proto,
    pub mode: Mode,
    #[serde(default, rename = "dip")]
    pub dips: Vec<Dip>,
    /// Active health checks of this VIP's DIPs.
    pub health: Option<Health>,
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub dataplane: Dataplane,
    /// The load-aware controller; absent = the configured static weights.
    pub controller: Option<ControllerCfg>,
    /// The Prometheus endpoint; absent = none.
    pub metrics: Option<MetricsCfg>,
    /// The management API; absent = on 127.0.0.1:9190 without a token.
    #[serde(default)]
    pub api: ApiCfg,
    /// This node's cluster (shared tables, connection sync); absent = a
    /// single node.
    pub cluster: Option<weir_cluster::config::ClusterCfg>,
    #[serde(default, rename = "vip")]
    pub vips: Vec<Vip>,
    /// What is legal but odd (say a VIP with no DIPs), found at load; the
    /// caller shows them (`weir check`, `weir serve`'s log).
    #[serde(skip)]
    pub warnings: Vec<ConfigWarning>,
}

/// A located remark about a configuration that loads but is probably not
/// what the operator meant; same shape and `file:line: field: message`
/// format as an error.
pub type ConfigWarning = ConfigError;

/// `[controller] policy`: how weights are computed from the estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// The configured weights (health checks still apply).
    Static,
    /// Every eligible DIP weight 1 (AWFD with m = 0).
    Ecmp,
    /// Only the DIP(s) with the largest available capacity (AWFD with m = 1).
    Lcf,
    /// Weights proportional to available capacity, quantized to the data
    /// plane's 16 classes (AWFD with m = 16).
    Weighted,
    /// AWFD with maximum weight `m`.
    Awfd,
}

/// `[controller] telemetry`: where load samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TelemetryKind {
    /// Poll each DIP's `weir agent` (`[[vip.dip]] agent`).
    Agent,
    /// The data plane measures request-to-first-reply delays (nat VIPs only).
    Passive,
}

/// `[controller] on_agent_silent`: a DIP whose agent misses `silent_after`
/// polls in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSilent {
    /// Keep the last estimate; once silent, weigh it like an average DIP.
    Keep,
    /// Once silent, no new connections (weight 0) until it answers again.
    Drain,
}

fn policy_awfd() -> PolicyName {
    PolicyName::Awfd
}
fn m_default() -> Spanned<u32> {
    Spanned::new(0..0, 4)
}
fn interval_default() -> Spanned<u64> {
    Spanned::new(0..0, 100)
}
fn telemetry_agent() -> TelemetryKind {
    TelemetryKind::Agent
}
fn alpha_default() -> Spanned<f64> {
    Spanned::new(0..0, 0.3)
}
fn agent_timeout_default() -> Spanned<u64> {
    Spanned::new(0..0, 50)
}
fn keep() -> OnSilent {
    OnSilent::Keep
}
fn silent_after_default() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}

/// `[controller]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerCfg {
    #[serde(default = "policy_awfd")]
    pub policy: PolicyName,
    /// AWFD's maximum weight (1..=16); used by `policy = "awfd"`.
    #[serde(default = "m_default")]
    pub m: Spanned<u32>,
    #[serde(default = "interval_default")]
    pub update_interval_ms: Spanned<u64>,
    #[serde(default = "telemetry_agent")]
    pub telemetry: TelemetryKind,
    #[serde(default = "alpha_default")]
    pub ewma_alpha: Spanned<f64>,
    #[serde(default = "agent_timeout_default")]
    pub agent_timeout_ms: Spanned<u64>,
    #[serde(default = "keep")]
    pub on_agent_silent: OnSilent,
    /// Consecutive failed polls after which an agent counts as silent.
    #[serde(default = "silent_after_default")]
    pub silent_after: Spanned<u32>,
}

fn metrics_listen() -> Spanned<std::net::SocketAddr> {
    Spanned::new(0..0, std::net::SocketAddr::from(([127, 0, 0, 1], 9100)))
}

/// `[metrics]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsCfg {
    /// Address of the Prometheus text endpoint (`GET /metrics`).
    #[serde(default = "metrics_listen")]
    pub listen: Spanned<std::net::SocketAddr>,
}

/// Where the management API answers unless `[api] listen` says otherwise.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:9190";
/// Tokens shorter than this load with a warning.
const SHORT_TOKEN: usize = 16;

fn api_listen() -> Spanned<String> {
    Spanned::new(0..0, DEFAULT_API_LISTEN.to_string())
}

/// `[api]`: the management API of `weir serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiCfg {
    /// `IP:port`, or `"off"`. A non-loopback address needs a token.
    #[serde(default = "api_listen")]
    pub listen: Spanned<String>,
    /// Writes need `Authorization: Bearer <token>`.
    pub token: Option<Spanned<String>>,
    /// A file holding the token (surrounding whitespace is ignored); read
    /// when the API starts, so the token stays out of the configuration.
    pub token_file: Option<Spanned<PathBuf>>,
}

impl Default for ApiCfg {
    fn default() -> ApiCfg {
        ApiCfg {
            listen: api_listen(),
            token: None,
            token_file: None,
        }
    }
}

/// Why `[api] listen` is not an address: what it may be instead.
fn api_listen_of(v: &str) -> Result<Option<std::net::SocketAddr>, String> {
    match v {
        "off" => Ok(None),
        _ => v.parse().map(Some).map_err(|_| {
            format!("`{v}` is not an IP:port (like \"{DEFAULT_API_LISTEN}\") or \"off\"")
        }),
    }
}

impl ApiCfg {
    /// The address to listen on; None when the API is off.
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        api_listen_of(self.listen.get_ref()).unwrap_or(None)
    }

    /// The token writes need, from `token` or `token_file`; None without.
    pub fn token(&self) -> Result<Option<String>, String> {
        if let Some(t) = &self.token {
            return Ok(Some(t.get_ref().clone()));
        }
        let Some(f) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(f.get_ref())
            .map_err(|e| format!("api.token_file {}: {e}", f.get_ref().display()))?;
        match text.trim() {
            "" => Err(format!(
                "api.token_file {} is empty; put the token in it",
                f.get_ref().display()
            )),
            t => Ok(Some(t.to_string())),
        }
    }

    /// Refuses what can never work (an API open to the network without a
    /// token, above all); returns warnings.
    fn validate(&self, ck: &Checker<'_>) -> Result<Vec<ConfigWarning>, ConfigError> {
        let addr = api_listen_of(self.listen.get_ref())
            .map_err(|m| ck.err(Some(self.listen.span()), "api.listen", m))?;
        if let (Some(t), Some(_)) = (&self.token, &self.token_file) {
            return Err(ck.err(
                Some(t.span()),
                "api.token",
                "give token or token_file, not both",
            ));
        }
        if let Some(t) = &self.token {
            let t = t.get_ref();
            if t.trim().is_empty() || t.trim() != t {
                return Err(ck.err(
                    Some(self.token.as_ref().map_or(0..0, |t| t.span())),
                    "api.token",
                    "the token must be non-empty, without surrounding spaces",
                ));
            }
        }
        if let Some(f) = &self.token_file {
            if !f.get_ref().is_absolute() {
                return Err(ck.err(
                    Some(f.span()),
                    "api.token_file",
                    "give an absolute path (weir serve and weir dip read it from anywhere)",
                ));
            }
        }
        let has_token = self.token.is_some() || self.token_file.is_some();
        if let Some(a) = addr {
            if !a.ip().is_loopback() && !has_token {
                return Err(ck.err(
                    Some(self.listen.span()),
                    "api.listen",
                    format!(
                        "{a} is reachable from other hosts, and the API changes the load \
                         balancer: set api.token or api.token_file (writes then need \
                         `Authorization: Bearer <token>`), or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        let mut warnings = Vec::new();
        if let Some(t) = self
            .token
            .as_ref()
            .filter(|t| t.get_ref().len() < SHORT_TOKEN)
        {
            warnings.push(ck.err(
                Some(t.span()),
                "api.token",
                format!(
                    "a token of {} characters is easy to guess; use {SHORT_TOKEN} or more \
                     (e.g. `openssl rand -hex 32`)",
                    t.get_ref().len()
                ),
            ));
        }
        Ok(warnings)
    }
}

/// `[vip.health] kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    /// A TCP connect that completes within the timeout.
    Tcp,
    /// An HTTP/1.1 GET whose status line carries `expect_status`.
    Http,
}

fn health_interval() -> Spanned<u64> {
    Spanned::new(0..0, 500)
}
fn health_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 300)
}
fn status_200() -> Spanned<u16> {
    Spanned::new(0..0, 200)
}
fn two() -> Spanned<u32> {
    Spanned::new(0..0, 2)
}
fn three() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}

/// `[vip.health]`: active checks of every DIP of the VIP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub kind: HealthKind,
    /// Request path (http only; default "/").
    pub path: Option<Spanned<String>>,
    #[serde(default = "status_200")]
    pub expect_status: Spanned<u16>,
    #[serde(default = "health_interval")]
    pub interval_ms: Spanned<u64>,
    #[serde(default = "health_timeout")]
    pub timeout_ms: Spanned<u64>,
    /// Consecutive passes that make a failed DIP healthy again.
    #[serde(default = "two")]
    pub rise: Spanned<u32>,
    /// Consecutive failures that make a healthy DIP fail.
    #[serde(default = "three")]
    pub fall: Spanned<u32>,
    /// Port to check; default: the DIP's port (nat) or the VIP's port.
    pub port: Option<Spanned<u16>>,
}

impl Health {
    pub fn path(&self) -> &str {
        self.path.as_ref().map_or("/", |p| p.get_ref().as_str())
    }
}

impl Dip {
    /// The port the DIP serves on: its own (nat) or the VIP's.
    pub fn service_port(&self, vip: &Vip) -> u16 {
        self.port
            .as_ref()
            .map_or(*vip.port.get_ref(), |p| *p.get_ref())
    }
}

struct Checker<'a> {
    file: String,
    src: &'a str,
}

impl Checker<'_> {
    fn err(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: span
                .filter(|s| s.end > 0)
                .map(|s| line_of(self.src, s.start)),
            field: field.into(),
            message: msg.into(),
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: None,
            field: "(file)".into(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(&path.display().to_string(), &src)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(file: &str, src: &str) -> Result<Config, ConfigError> {
        let ck = Checker {
            file: file.to_string(),
            src,
        };
        let mut cfg: Config = toml::from_str(src).map_err(|e| {
            let msg = e.message().trim().to_string();
            let field = e
                .span()
                .map_or("(syntax)".into(), |s| key_at(src, line_of(src, s.start)));
            ck.err(e.span(), field, msg)
        })?;
        cfg.warnings = cfg.validate(&ck)?;
        Ok(cfg)
    }

    /// Refuses what can never work; returns warnings for what is legal but odd.
    fn validate(&self, ck: &Checker<'_>) -> Result<Vec<ConfigWarning>, ConfigError> {
        let mut warnings = Vec::new();
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
        self.validate_tier(ck, &mut warnings)?;
        let max_s = weir_dataplane::loader::ConnTimeouts::MAX.as_secs();
        for (name, v) in dp.timeouts.fields() {
            if !(1..=max_s).contains(v.get_ref()) {
                return Err(ck.err(
                    Some(v.span()),
                    format!("dataplane.timeouts.{name}"),
                    format!("must be between 1 and {max_s} seconds (7 days)"),
                ));
            }
        }
        if self.vips.len() > dp.max_vips as usize {
            return Err(ck.err(
                None,
                "vip",
                format!(
                    "{} VIPs but dataplane.max_vips is {}; raise max_vips",
                    self.vips.len(),
                    dp.max_vips
                ),
            ));
        }
        let mut names = HashSet::new();
        let mut keys = HashSet::new();
        let mut total_dips = 0usize;
        let vip_addrs: Vec<(IpAddr, &str)> = self
            .vips
            .iter()
            .map(|v| (*v.address.get_ref(), v.name.get_ref().as_str()))
            .collect();
        for (i, vip) in self.vips.iter().enumerate() {
            let at = |f: &str| format!("vip[{i}].{f}");
            if vip.name.get_ref().is_empty() || !names.insert(vip.name.get_ref().clone()) {
                return Err(ck.err(
                    Some(vip.name.span()),
                    at("name"),
                    "VIP names must be non-empty and unique",
                ));
            }
            if !keys.insert((*vip.address.get_ref(), *vip.port.get_ref(), vip.protocol)) {
                return Err(ck.err(
                    Some(vip.address.span()),
                    at("address"),
                    "another VIP already has this address, port and protocol",
                ));
            }
            if *vip.port.get_ref() == 0 {
                return Err(ck.err(
                    Some(vip.port.span()),
                    at("port"),
                    "port 0 is not a service port",
                ));
            }
            if let Some(why) = not_unicast(vip.address.get_ref()) {
                return Err(ck.err(
                    Some(vip.address.span()),
                    at("address"),
                    format!("{why}; a VIP must be a unicast address that clients can reach"),
                ));
            }
            let mut seen = HashSet::new();
            let mut distinct = HashSet::new();
            for (j, dip) in vip.dips.iter().enumerate() {
                let at = |f: &str| format!("vip[{i}].dip[{j}].{f}");
                let (a, va) = (dip.address.get_ref(), vip.address.get_ref());
                if a.is_ipv4() != va.is_ipv4() && !vip.mode.encapsulates() {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "DIP and VIP must be of the same address family (IPv4 or IPv6); \
                         only mode = \"ipip\" or \"gue\" carries one family inside the other",
                    ));
                }
                if let Some(why) = not_unicast(a) {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        format!("{why}; a DIP must be the unicast address of a backend"),
                    ));
                }
                if a == va {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "the DIP is the VIP's own address, so its traffic would come back to weir; give the backend's address",
                    ));
                }
                if let Some((_, other)) = vip_addrs.iter().find(|(v, _)| v == a) {
                    warnings.push(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        format!("{a} is also the address of VIP `{other}`: this DIP's traffic goes to that VIP, not to a backend"),
                    ));
                }
                if let (Some(p), false) = (&dip.port, vip.mode == Mode::Nat) {
                    return Err(ck.err(
                        Some(p.span()),
                        at("port"),
                        format!(
                            "{} mode does not rewrite ports: remove `port` or use mode = \"nat\"",
                            mode_name(vip.mode)
                        ),
                    ));
                }
                if let Some(p) = &dip.port {
                    if *p.get_ref() == 0 {
                        return Err(ck.err(
                            Some(p.span()),
                            at("port"),
                            "port 0 is not a service port",
                        ));
                    }
                }
                let port = dip
                    .port
                    .as_ref()
                    .map_or(*vip.port.get_ref(), |p| *p.get_ref());
                if !seen.insert((*a, port)) {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "duplicate DIP in this VIP",
                    ));
                }
                let w = *dip.weight.get_ref();
                if w > u32::from(u16::MAX) {
                    return Err(ck.err(
                        Some(dip.weight.span()),
                        at("weight"),
                        "weight must be 0..=65535 (0 drains)",
                    ));
                }
                if w > 0 {
                    distinct.insert(w);
                }
                if let Some(mac) = &dip.mac {
                    if let Err(e) = weir_dataplane::iface::parse_mac(mac.get_ref()) {
                        return Err(ck.err(Some(mac.span()), at("mac"), e.to_string()));
                    }
                }
            }
            // Legal, because an operator may stage a VIP before its backends
            // or drain all of them, but new connections are then dropped.
            if vip.dips.is_empty() {
                warnings.push(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    "no DIPs: new connections to this VIP are dropped (drop_no_backend) until a [[vip.dip]] is added",
                ));
            } else if distinct.is_empty() {
                warnings.push(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    "every DIP has weight 0 (draining): new connections to this VIP are dropped (drop_no_backend)",
                ));
            }
            if distinct.len() > weir_abi::WEIR_MAX_CLASSES as usize {
                return Err(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    format!(
                        "{} distinct weights, but a VIP holds at most {} priority classes; use fewer distinct weights",
                        distinct.len(),
                        weir_abi::WEIR_MAX_CLASSES
                    ),
                ));
            }
            total_dips += vip.dips.len();
        }
        self.validate_nat_endpoints(ck)?;
        self.validate_encap(ck, &mut warnings)?;
        self.validate_controller(ck)?;
        warnings.extend(self.api.validate(ck)?);
        self.validate_cluster(ck, &mut warnings)?;
        if total_dips > dp.max_dips as usize {
            return Err(ck.err(
                None,
                "vip.dip",
                format!(
                    "{total_dips} DIPs in all but dataplane.max_dips is {}; raise max_dips",
                    dp.max_dips
                ),
            ));
        }
        Ok(warnings)
    }
}

/// The name of `m` as the file writes it.
fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Nat => "nat",
        Mode::Dsr => "dsr",
        Mode::Ipip => "ipip",
        Mode::Gue => "gue",
    }
}

/// Why `a` can never be a VIP or a DIP (packets are never sent to it as a
/// unicast destination), or None.
fn not_unicast(a: &IpAddr) -> Option<String> {
    let why = match a {
        IpAddr::V4(v) if v.is_unspecified() => "the unspecified address",
        IpAddr::V4(v) if v.octets()[0] == 0 => {
            "in 0.0.0.0/8 (\"this network\", never a destination)"
        }
        IpAddr::V4(v) if v.is_broadcast() => "the broadcast address",
        IpAddr::V4(v) if v.is_multicast() => "a multicast address",
        IpAddr::V4(v) if v.is_loopback() => "a loopback address (it never arrives on an interface)",
        IpAddr::V6(v) if v.is_unspecified() => "the unspecified address",
        IpAddr::V6(v) if v.is_multicast() => "a multicast address",
        IpAddr::V6(v) if v.is_loopback() => {
            "the loopback address (it never arrives on an interface)"
        }
        IpAddr::V6(v) => {
            let v4 = v.to_ipv4_mapped()?;
            return Some(format!(
                "{a} is an IPv4-mapped IPv6 address, which never appears on the wire; write {v4}"
            ));
        }
        IpAddr::V4(_) => return None,
    };
    Some(format!("{a} is {why}"))
}

impl Config {
    /// Every service endpoint of a nat DIP (address, port, protocol number),
    /// with the nat VIPs that list it, as (VIP index, DIP index) in file
    /// order.
    pub fn nat_endpoint_users(&self) -> BTreeMap<(IpAddr, u16, u8), Vec<(usize, usize)>> {
        let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for (i, v) in self
            .vips
            .iter()
            .enumerate()
            .filter(|(_, v)| v.mode == Mode::Nat)
        {
            for (j, d) in v.dips.iter().enumerate() {
                let port = *d.port.as_ref().unwrap_or(&v.port).get_ref();
                out.entry((*d.address.get_ref(), port, v.protocol.number()))
                    .or_default()
                    .push((i, j));
            }
        }
        out
    }

    /// A nat DIP's replies find their VIP through their endpoint, which
    /// can serve at most WEIR_ENDPOINT_VIPS nat VIPs (weir.h).
    fn validate_nat_endpoints(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        let most = weir_abi::WEIR_ENDPOINT_VIPS as usize;
        for ((addr, port, _), users) in self.nat_endpoint_users() {
            if let Some(&(i, j)) = users.get(most) {
                let dip = &self.vips[i].dips[j];
                return Err(ck.err(
                    Some(dip.address.span()),
                    format!("vip[{i}].dip[{j}].address"),
                    format!(
                        "{} nat VIPs send to {addr} port {port}, but one backend endpoint can \
                         serve at most {most} nat VIPs (its replies are matched to their VIP by \
                         it); give this VIP's backend another port, or use mode = \"dsr\"",
                        users.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The ipip and gue modes and the `[dataplane]` keys of their outer
    /// headers.
    fn validate_encap(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        let mtu = *dp.encap_mtu.get_ref();
        if !(576..=65535).contains(&mtu) {
            return Err(ck.err(
                Some(dp.encap_mtu.span()),
                "dataplane.encap_mtu",
                format!(
                    "{mtu} is not an IP MTU: give the smallest MTU on the way to the DIPs, \
                     576 to 65535 (1500 on Ethernet)"
                ),
            ));
        }
        if *dp.gue_port.get_ref() == 0 {
            return Err(ck.err(
                Some(dp.gue_port.span()),
                "dataplane.gue_port",
                "port 0 is not a UDP port: give the port the DIPs decapsulate GUE on (6080 by \
                 default)",
            ));
        }
        let sources = [
            (
                "encap_source_v4",
                dp.encap_source_v4
                    .as_ref()
                    .map(|a| (IpAddr::V4(*a.get_ref()), a.span())),
            ),
            (
                "encap_source_v6",
                dp.encap_source_v6
                    .as_ref()
                    .map(|a| (IpAddr::V6(*a.get_ref()), a.span())),
            ),
        ];
        for (key, (addr, span)) in sources.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))) {
            if let Some(why) = not_unicast(&addr) {
                return Err(ck.err(
                    Some(span),
                    format!("dataplane.{key}"),
                    format!("{why}; the outer source must be a unicast address of this host"),
                ));
            }
        }
        let encap = self.vips.iter().position(|v| v.mode.encapsulates());
        if let (Some(i), false) = (encap, dp.tier == Tier::Xdp) {
            let v = &self.vips[i];
            return Err(ck.err(
                Some(v.name.span()),
                format!("vip[{i}].mode"),
                format!(
                    "mode = \"{}\" is built by XDP only; the software and hybrid tiers do not \
                     encapsulate: use tier = \"xdp\", or mode = \"dsr\" or \"nat\"",
                    mode_name(v.mode)
                ),
            ));
        }
        if encap.is_none() {
            let given_keys = [
                (
                    "encap_mtu",
                    given(&dp.encap_mtu).then(|| dp.encap_mtu.span()),
                ),
                (
                    "encap_source_v4",
                    dp.encap_source_v4.as_ref().map(|a| a.span()),
                ),
                (
                    "encap_source_v6",
                    dp.encap_source_v6.as_ref().map(|a| a.span()),
                ),
                ("gue_port", given(&dp.gue_port).then(|| dp.gue_port.span())),
            ];
            for (key, span) in given_keys.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "no VIP has mode = \"ipip\" or \"gue\"; this is ignored",
                ));
            }
        }
        Ok(())
    }

    /// `tier` and the keys that only some tiers read.
    fn validate_tier(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        // The default is always in range; a given size is checked in any
        // tier, so switching to hybrid later brings no surprise.
        if !(1..=dp.conn_table_size).contains(&dp.fast_size()) {
            return Err(ck.err(
                dp.fast_table_size.as_ref().map(|s| s.span()),
                "dataplane.fast_table_size",
                format!(
                    "must be between 1 and conn_table_size ({}): the fast table holds a part of \
                     the workers' connections",
                    dp.conn_table_size
                ),
            ));
        }
        if dp.tier != Tier::Hybrid {
            let only_hybrid = [
                (
                    "fast_table_size",
                    dp.fast_table_size.as_ref().map(|s| s.span()),
                ),
                ("offload", given(&dp.offload).then(|| dp.offload.span())),
            ];
            for (key, span) in only_hybrid.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "only tier = \"hybrid\" has a fast table; this is ignored",
                ));
            }
        }
        if dp.tier == Tier::Xdp && given(&dp.workers) {
            warnings.push(ck.err(
                Some(dp.workers.span()),
                "dataplane.workers",
                "tier = \"xdp\" runs no workers; this is ignored",
            ));
        }
        let workers = dp.workers.get_ref();
        let err = |msg: String| ck.err(Some(dp.workers.span()), "dataplane.workers", msg);
        if workers.is_empty() {
            return Err(err(
                "list at least one CPU to run a worker on, e.g. [1]".into()
            ));
        }
        let usable = crate::cpus::usable();
        let mut seen = HashSet::new();
        for cpu in workers {
            if !seen.insert(cpu) {
                return Err(err(format!(
                    "CPU {cpu} is listed twice; a worker busy-polls its CPU, list each CPU once"
                )));
            }
            if !usable.contains(cpu) {
                return Err(err(format!(
                    "CPU {cpu} does not exist or weir may not run on it; usable CPUs: {}",
                    crate::cpus::format(&usable)
                )));
            }
        }
        self.validate_distribution(ck, warnings)?;
        self.validate_syn_budget(ck, warnings)
    }

    /// `syn_rate` and `syn_burst`.
    fn validate_syn_budget(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        let keys = [("syn_rate", &dp.syn_rate), ("syn_burst", &dp.syn_burst)];
        let given_keys = keys.iter().filter(|(_, v)| given(v));
        if dp.tier == Tier::Xdp {
            for (key, v) in given_keys {
                warnings.push(ck.err(
                    Some(v.span()),
                    format!("dataplane.{key}"),
                    "tier = \"xdp\" runs no workers and keeps its SYNs in the half-open \
                     table; this is ignored",
                ));
            }
            return Ok(());
        }
        dp.syn_budget().validate().map_err(|e| {
            // The message names the key at fault; point at it if given.
            let (key, v) = if e.starts_with("syn_burst") {
                keys[1]
            } else {
                keys[0]
            };
            ck.err(
                Some(v.span()).filter(|_| given(v)),
                format!("dataplane.{key}"),
                e,
            )
        })?;
        if *dp.syn_rate.get_ref() == 0 && given(&dp.syn_burst) {
            warnings.push(ck.err(
                Some(dp.syn_burst.span()),
                "dataplane.syn_burst",
                "syn_rate = 0 admits every SYN; this is ignored",
            ));
        }
        Ok(())
    }

    /// `distribution`, `spray_scope`, `reorder` and `cost_cycles`.
    fn validate_distribution(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        if let Some(c) = &dp.cost_cycles {
            let field = "dataplane.cost_cycles";
            validate_cost_cycles(*c.get_ref())
                .map_err(|e| ck.err(Some(c.span()), field, e.to_string()))?;
            if !weir_software::cost::AVAILABLE {
                return Err(ck.err(
                    Some(c.span()),
                    field,
                    "the added cost spins on the x86-64 time-stamp counter, which this machine \
                     lacks",
                ));
            }
        }
        if let Some(h) = &dp.reorder_hold_us {
            dp.reorder_config()
                .validate()
                .map_err(|e| ck.err(Some(h.span()), "dataplane.reorder_hold_us", e.to_string()))?;
        }
        let keys = [
            (
                "distribution",
                given(&dp.distribution).then(|| dp.distribution.span()),
            ),
            (
                "spray_scope",
                given(&dp.spray_scope).then(|| dp.spray_scope.span()),
            ),
            ("reorder", given(&dp.reorder).then(|| dp.reorder.span())),
            (
                "reorder_hold_us",
                dp.reorder_hold_us.as_ref().map(|h| h.span()),
            ),
            ("cost_cycles", dp.cost_cycles.as_ref().map(|c| c.span())),
        ];
        if dp.tier == Tier::Xdp {
            for (key, span) in keys.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "tier = \"xdp\" runs no workers; this is ignored",
                ));
            }
            return Ok(());
        }
        let mode = *dp.distribution.get_ref();
        dp.distribution_config().validate().map_err(|e| {
            ck.err(
                Some(dp.distribution.span()).filter(|_| given(&dp.distribution)),
                "dataplane.distribution",
                e.to_string(),
            )
        })?;
        if mode == Distribution::Flow {
            for (key, span) in keys[1..4].iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span.clone(),
                    format!("dataplane.{key}"),
                    "distribution = \"flow\" keeps each flow on one worker; this is ignored",
                ));
            }
        } else if dp.reorders() && dp.xdp_mode == XdpModeCfg::Generic {
            return Err(ck.err(
                Some(dp.reorder.span()).filter(|_| given(&dp.reorder)),
                "dataplane.reorder",
                "generic XDP may run one queue's packets on several CPUs at once, so there is \
                 no ingress order to restore: use xdp_mode = \"native\", or reorder = false",
            ));
        }
        Ok(())
    }

    fn validate_controller(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        for (i, vip) in self.vips.iter().enumerate() {
            let Some(h) = &vip.health else { continue };
            let at = |f: &str| format!("vip[{i}].health.{f}");
            if let (HealthKind::Tcp, Some(p)) = (h.kind, &h.path) {
                return Err(ck.err(
                    Some(p.span()),
                    at("path"),
                    "path is for kind = \"http\" only",
                ));
            }
            if let Some(p) = &h.path {
                let p = p.get_ref();
                if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ck.err(
                        h.path.as_ref().map(|p| p.span()),
                        at("path"),
                        "path must start with / and contain no spaces",
                    ));
                }
            }
            if !(100..=599).contains(h.expect_status.get_ref()) {
                return Err(ck.err(
                    Some(h.expect_status.span()),
                    at("expect_status"),
                    "an HTTP status is 100..=599",
                ));
            }
            for (f, v) in [
                ("interval_ms", &h.interval_ms),
                ("timeout_ms", &h.timeout_ms),
            ] {
                if !(10..=3_600_000).contains(v.get_ref()) {
                    return Err(ck.err(Some(v.span()), at(f), "must be 10..=3600000 ms"));
                }
            }
            if h.timeout_ms.get_ref() > h.interval_ms.get_ref() {
                return Err(ck.err(
                    Some(h.timeout_ms.span()),
                    at("timeout_ms"),
                    "the timeout must not exceed interval_ms",
                ));
            }
            for (f, v) in [("rise", &h.rise), ("fall", &h.fall)] {
                if !(1..=100).contains(v.get_ref()) {
                    return Err(ck.err(Some(v.span()), at(f), "must be 1..=100"));
                }
            }
            if let Some(p) = &h.port {
                if *p.get_ref() == 0 {
                    return Err(ck.err(Some(p.span()), at("port"), "port 0 cannot be checked"));
                }
            }
        }
        let Some(c) = &self.controller else {
            return Ok(());
        };
        let m = *c.m.get_ref();
        if !(1..=weir_abi::WEIR_MAX_CLASSES).contains(&m) {
            return Err(ck.err(
                Some(c.m.span()),
                "controller.m",
                format!(
                    "m must be 1..={} (the data plane's priority classes)",
                    weir_abi::WEIR_MAX_CLASSES
                ),
            ));
        }
        if !(1..=60_000).contains(c.update_interval_ms.get_ref()) {
            return Err(ck.err(
                Some(c.update_interval_ms.span()),
                "controller.update_interval_ms",
                "must be 1..=60000 ms",
            ));
        }
        let a = *c.ewma_alpha.get_ref();
        if !(a > 0.0 && a <= 1.0) {
            return Err(ck.err(
                Some(c.ewma_alpha.span()),
                "controller.ewma_alpha",
                "must be in (0, 1]: the weight of a new sample",
            ));
        }
        if !(1..=10_000).contains(c.agent_timeout_ms.get_ref()) {
            return Err(ck.err(
                Some(c.agent_timeout_ms.span()),
                "controller.agent_timeout_ms",
                "must be 1..=10000 ms",
            ));
        }
        if !(1..=1000).contains(c.silent_after.get_ref()) {
            return Err(ck.err(
                Some(c.silent_after.span()),
                "controller.silent_after",
                "must be 1..=1000 polls",
            ));
        }
        let needs_samples = c.policy != PolicyName::Static;
        for (i, vip) in self.vips.iter().enumerate() {
            match c.telemetry {
                TelemetryKind::Passive if needs_samples && vip.mode != Mode::Nat => {
                    return Err(ck.err(
                        Some(vip.name.span()),
                        format!("vip[{i}].mode"),
                        "telemetry = \"passive\" needs mode = \"nat\" (in dsr the replies bypass weir); use telemetry = \"agent\"",
                    ));
                }
                TelemetryKind::Agent if needs_samples => {
                    for (j, d) in vip.dips.iter().enumerate() {
                        if d.agent.is_none() {
                            return Err(ck.err(
                                Some(d.address.span()),
                                format!("vip[{i}].dip[{j}].agent"),
                                "telemetry = \"agent\" needs the address of each DIP's `weir agent`, e.g. agent = \"10.0.0.2:9300\"",
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// True when the controller thread has work: a `[controller]` section,
    /// any health check, or a cluster (whose leader publishes every table).
    pub fn wants_controller(&self) -> bool {
        self.controller.is_some()
            || self.vips.iter().any(|v| v.health.is_some())
            || self.cluster.is_some()
    }

    /// `[cluster]`; a nat VIP in a cluster is legal but its replies return
    /// through one node only.
    fn validate_cluster(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let dp = &self.dataplane;
        c.validate(dp.conn_table_size, dp.tier == Tier::Xdp)
            .map_err(|(span, field, msg)| ck.err(span, field, msg))?;
        for (i, v) in self.vips.iter().enumerate() {
            if v.mode == Mode::Nat {
                warnings.push(ck.err(
                    Some(v.name.span()),
                    format!("vip[{i}].mode"),
                    "in a cluster, a nat VIP's replies go back through the backend's gateway, \
                     not the node ECMP chose, and only that node reverse-translates them; \
                     behind ECMP use mode = \"dsr\"",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[dataplane]
interfaces = ["veth0"]

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "nat"

  [[vip.dip]]
  address = "10.1.0.1"
  port = 8080

  [[vip.dip]]
  address = "10.1.0.2"
  weight = 2
"#;

    fn err_of(src: &str) -> ConfigError {
        Config::parse("t.toml", src).unwrap_err()
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = Config::parse("t.toml", GOOD).unwrap();
        assert_eq!(c.dataplane.conn_table_size, 1 << 20);
        assert_eq!(c.vips[0].dips.len(), 2);
        assert_eq!(*c.vips[0].dips[0].weight.get_ref(), 1);
        assert_eq!(c.dataplane.not_vip, Verdict::Pass);
    }

    /// A nat VIP on port `port` of 10.0.0.`host` with the one DIP 10.1.0.1:8080.
    fn nat_vip_on_the_shared_backend(host: u8, port: u16) -> String {
        format!(
            "\n[[vip]]\nname = \"v{host}-{port}\"\naddress = \"10.0.0.{host}\"\nport = {port}\n\
             protocol = \"tcp\"\nmode = \"nat\"\n  [[vip.dip]]\n  address = \"10.1.0.1\"\n  \
             port = 8080\n"
        )
    }

    #[test]
    fn one_backend_endpoint_serves_at_most_four_nat_vips() {
        // GOOD's first DIP is 10.1.0.1:8080 already.
        let three_more: String = (1..=3)
            .map(|i| nat_vip_on_the_shared_backend(i, 80))
            .collect();
        let four = format!("{GOOD}{three_more}");
        let c = Config::parse("t.toml", &four).unwrap();
        let users = c.nat_endpoint_users();
        let key = ("10.1.0.1".parse().unwrap(), 8080, 6);
        assert_eq!(users[&key], vec![(0, 0), (1, 0), (2, 0), (3, 0)]);

        let e = err_of(&format!("{four}{}", nat_vip_on_the_shared_backend(4, 80)));
        assert_eq!(e.field, "vip[4].dip[0].address", "{e}");
        assert!(
            e.to_string()
                .contains("5 nat VIPs send to 10.1.0.1 port 8080"),
            "{e}"
        );
        // Another port of the same backend is another endpoint.
        let other_port = four + &nat_vip_on_the_shared_backend(4, 81).replace("8080", "8081");
        Config::parse("t.toml", &other_port).unwrap();
    }

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
    fn errors_name_the_line_and_the_field() {
        let e = err_of(&GOOD.replace("weight = 2", "weight = 70000"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(18), "vip[0].dip[1].weight"),
            "{e}"
        );
        let e = err_of(&GOOD.replace("\"10.1.0.2\"", "\"10.1.0\""));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(17), "vip.dip.address"),
            "{e}"
        );
        let e = err_of(&GOOD.replace("mode = \"nat\"", "mode = \"tunnel\""));
        assert_eq!((e.line, e.field.as_str()), (Some(10), "vip.mode"), "{e}");
        assert!(e.to_string().starts_with("t.toml:10:"), "{e}");
    }

    #[test]
    fn semantic_mistakes_are_refused() {
        let dsr_port = GOOD.replace("mode = \"nat\"", "mode = \"dsr\"");
        assert!(err_of(&dsr_port).message.contains("dsr"));
        let mixed = GOOD.replace("\"10.1.0.2\"", "\"2001:db8::2\"");
        assert!(err_of(&mixed).message.contains("family"));
        let dup = GOOD.replace("\"10.1.0.2\"", "\"10.1.0.1\"\n  port = 8080");
        assert!(err_of(&dup).message.contains("duplicate"));
        let unknown = GOOD.replace("weight = 2", "wieght = 2");
        assert!(err_of(&unknown).message.contains("wieght"));
        let no_if = GOOD.replace("[\"veth0\"]", "[]");
        assert_eq!(err_of(&no_if).field, "dataplane.interfaces");
        let bad_mac = GOOD.replace("weight = 2", "mac = \"zz\"");
        assert_eq!(err_of(&bad_mac).field, "vip[0].dip[1].mac");
    }

    /// GOOD with its VIP and DIPs in IPv6.
    fn good6() -> String {
        GOOD.replace("10.0.0.100", "2001:db8::100")
            .replace("10.1.0.", "2001:db8:1::")
    }

    #[test]
    fn addresses_that_can_never_work_are_refused() {
        let v4 = |vip: &str| GOOD.replace("\"10.0.0.100\"", &format!("\"{vip}\""));
        let v6 = |vip: &str| good6().replace("\"2001:db8::100\"", &format!("\"{vip}\""));
        let dip = |d: &str| GOOD.replace("\"10.1.0.2\"", &format!("\"{d}\""));
        let cases = [
            (v4("0.0.0.0"), "vip[0].address", 7, "unspecified"),
            (v4("0.1.2.3"), "vip[0].address", 7, "0.0.0.0/8"),
            (v4("255.255.255.255"), "vip[0].address", 7, "broadcast"),
            (v4("239.1.2.3"), "vip[0].address", 7, "multicast"),
            (v4("127.0.0.1"), "vip[0].address", 7, "loopback"),
            (v6("::"), "vip[0].address", 7, "unspecified"),
            (v6("ff02::1"), "vip[0].address", 7, "multicast"),
            (v6("::1"), "vip[0].address", 7, "loopback"),
            (
                v6("::ffff:10.0.0.100"),
                "vip[0].address",
                7,
                "write 10.0.0.100",
            ),
            (dip("10.0.0.100"), "vip[0].dip[1].address", 17, "VIP's own"),
            (
                dip("255.255.255.255"),
                "vip[0].dip[1].address",
                17,
                "broadcast",
            ),
            (dip("224.0.0.1"), "vip[0].dip[1].address", 17, "multicast"),
            (dip("0.0.0.0"), "vip[0].dip[1].address", 17, "unspecified"),
            (
                good6().replace("\"2001:db8:1::2\"", "\"2001:db8::100\""),
                "vip[0].dip[1].address",
                17,
                "VIP's own",
            ),
        ];
        for (src, field, line, what) in cases {
            let e = err_of(&src);
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
        // The VIP's address with another port is still the VIP's address.
        let e = err_of(&dip("10.0.0.100\"\n  port = 9090\n  #\""));
        assert!(e.message.contains("VIP's own"), "{e}");
        Config::parse("t.toml", &good6()).unwrap();
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
    fn legal_but_odd_files_load_with_warnings() {
        let warned = |src: &str| Config::parse("t.toml", src).unwrap().warnings;
        assert!(warned(GOOD).is_empty());
        // No DIPs (staged, or every backend removed): it loads, and says so.
        let no_dips = &GOOD[..GOOD.find("  [[vip.dip]]").unwrap()];
        let w = warned(no_dips);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].to_string()
                .starts_with("t.toml:6: vip[0].dip: no DIPs: new connections"),
            "{}",
            w[0]
        );
        let drained = GOOD
            .replace("port = 8080", "port = 8080\n  weight = 0")
            .replace("weight = 2", "weight = 0");
        let w = warned(&drained);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].field.as_str(), w[0].line), ("vip[0].dip", Some(6)));
        assert!(w[0].message.contains("weight 0"), "{}", w[0]);
        // A DIP at another VIP's address.
        let chained = format!(
            "{GOOD}\n[[vip]]\nname = \"api\"\naddress = \"10.1.0.2\"\nport = 443\nprotocol = \"tcp\"\nmode = \"nat\"\n\n  [[vip.dip]]\n  address = \"10.1.0.9\"\n"
        );
        let w = warned(&chained);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (w[0].field.as_str(), w[0].line),
            ("vip[0].dip[1].address", Some(17))
        );
        assert!(w[0].message.contains("VIP `api`"), "{}", w[0]);
    }

    const CONTROLLED: &str = r#"
[dataplane]
interfaces = ["veth0"]

[controller]
policy = "awfd"
m = 4
update_interval_ms = 100
telemetry = "agent"
ewma_alpha = 0.3
agent_timeout_ms = 50
on_agent_silent = "keep"

[metrics]
listen = "127.0.0.1:9100"

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "nat"

  [vip.health]
  kind = "http"
  path = "/"
  expect_status = 200
  interval_ms = 500
  timeout_ms = 300
  rise = 2
  fall = 3

  [[vip.dip]]
  address = "10.1.0.1"
  agent = "10.1.0.1:9300"
"#;

    #[test]
    fn the_controller_format_parses() {
        let c = Config::parse("t.toml", CONTROLLED).unwrap();
        let ctl = c.controller.as_ref().unwrap();
        assert_eq!(ctl.policy, PolicyName::Awfd);
        assert_eq!(*ctl.m.get_ref(), 4);
        assert_eq!(ctl.telemetry, TelemetryKind::Agent);
        assert_eq!(ctl.on_agent_silent, OnSilent::Keep);
        assert_eq!(*ctl.silent_after.get_ref(), 3);
        let h = c.vips[0].health.as_ref().unwrap();
        assert_eq!(
            (h.kind, h.path(), *h.fall.get_ref()),
            (HealthKind::Http, "/", 3)
        );
        assert_eq!(
            c.vips[0].dips[0].agent.as_ref().unwrap().get_ref().port(),
            9300
        );
        assert!(c.wants_controller());
        // Defaults: an empty [controller] is AWFD(4) every 100 ms.
        let minimal = CONTROLLED
            .replace("policy = \"awfd\"\n", "")
            .replace("m = 4\n", "")
            .replace("update_interval_ms = 100\n", "")
            .replace("[metrics]\nlisten = \"127.0.0.1:9100\"", "[metrics]");
        let c = Config::parse("t.toml", &minimal).unwrap();
        let ctl = c.controller.unwrap();
        assert_eq!((ctl.policy, *ctl.m.get_ref()), (PolicyName::Awfd, 4));
        assert_eq!(*ctl.update_interval_ms.get_ref(), 100);
        assert_eq!(
            c.metrics.unwrap().listen.get_ref().to_string(),
            "127.0.0.1:9100"
        );
        assert!(!Config::parse("t.toml", GOOD).unwrap().wants_controller());
    }

    #[test]
    fn controller_mistakes_name_the_field() {
        let cases = [
            ("m = 4", "m = 17", "controller.m"),
            ("m = 4", "m = 0", "controller.m"),
            (
                "ewma_alpha = 0.3",
                "ewma_alpha = 1.5",
                "controller.ewma_alpha",
            ),
            (
                "update_interval_ms = 100",
                "update_interval_ms = 0",
                "controller.update_interval_ms",
            ),
            ("  agent = \"10.1.0.1:9300\"\n", "", "vip[0].dip[0].agent"),
            ("kind = \"http\"", "kind = \"tcp\"", "vip[0].health.path"),
            ("fall = 3", "fall = 0", "vip[0].health.fall"),
            (
                "timeout_ms = 300",
                "timeout_ms = 900",
                "vip[0].health.timeout_ms",
            ),
            (
                "expect_status = 200",
                "expect_status = 2000",
                "vip[0].health.expect_status",
            ),
            ("mode = \"nat\"", "mode = \"dsr\"\n", "vip[0].mode"),
        ];
        for (from, to, field) in cases {
            let mut src = CONTROLLED.replace(from, to);
            if field == "vip[0].mode" {
                src = src.replace("telemetry = \"agent\"", "telemetry = \"passive\"");
            }
            let e = err_of(&src);
            assert_eq!(e.field, field, "{from} -> {to}: {e}");
            assert!(e.line.is_some(), "{e}");
        }
        let e = err_of(&CONTROLLED.replace("policy = \"awfd\"", "policy = \"fastest\""));
        assert!(e.message.contains("unknown variant"), "{e}");
        let e = err_of(
            &CONTROLLED.replace("on_agent_silent = \"keep\"", "on_agent_silent = \"panic\""),
        );
        assert!(e.message.contains("keep"), "{e}");
        // Passive telemetry needs no agents.
        let passive = CONTROLLED
            .replace("telemetry = \"agent\"", "telemetry = \"passive\"")
            .replace("  agent = \"10.1.0.1:9300\"\n", "");
        Config::parse("t.toml", &passive).unwrap();
    }

    #[test]
    fn the_api_is_on_loopback_by_default_and_needs_a_token_elsewhere() {
        let c = Config::parse("t.toml", GOOD).unwrap();
        assert_eq!(c.api.addr(), Some("127.0.0.1:9190".parse().unwrap()));
        assert_eq!(c.api.token(), Ok(None));
        let with = |api: &str| format!("{GOOD}\n[api]\n{api}\n");
        let off = Config::parse("t.toml", &with("listen = \"off\"")).unwrap();
        assert_eq!(off.api.addr(), None);
        for open in ["0.0.0.0:9190", "10.0.0.1:9190", "[::]:9190"] {
            let e = err_of(&with(&format!("listen = \"{open}\"")));
            assert_eq!((e.field.as_str(), e.line), ("api.listen", Some(21)), "{e}");
            assert!(e.message.contains("api.token"), "{e}");
        }
        let c = Config::parse(
            "t.toml",
            &with("listen = \"10.0.0.1:9190\"\ntoken = \"0123456789abcdef0123\""),
        )
        .unwrap();
        assert_eq!(c.api.token(), Ok(Some("0123456789abcdef0123".into())));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let short = Config::parse("t.toml", &with("token = \"abc\"")).unwrap();
        assert_eq!(short.warnings.len(), 1);
        assert!(short.warnings[0].message.contains("easy to guess"));
        let e = err_of(&with("listen = \"localhost:1\""));
        assert!(e.message.contains("\"off\""), "{e}");
        let e = err_of(&with("token = \"\""));
        assert_eq!(e.field, "api.token");
        let e = err_of(&with("token = \"a\"\ntoken_file = \"/x\""));
        assert!(e.message.contains("not both"), "{e}");
        let e = err_of(&with("token_file = \"rel/tok\""));
        assert_eq!(e.field, "api.token_file");
        let e = err_of(&with("tokn = \"a\""));
        assert!(e.message.contains("tokn"), "{e}");
        // The token file is read when asked for, trimmed.
        let dir = std::env::temp_dir().join(format!("weir-cfg-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tok");
        std::fs::write(&f, "  s3cret-token-value\n").unwrap();
        let c = Config::parse(
            "t.toml",
            &with(&format!(
                "listen = \"[::]:1\"\ntoken_file = \"{}\"",
                f.display()
            )),
        )
        .unwrap();
        assert_eq!(c.api.token(), Ok(Some("s3cret-token-value".into())));
        std::fs::write(&f, "\n").unwrap();
        assert!(c.api.token().unwrap_err().contains("is empty"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(c.api.token().unwrap_err().contains("No such file"));
    }

    /// GOOD with `keys` added to its [dataplane] (from line 4 on).
    #[test]
    fn a_cluster_section_is_checked_with_the_line_and_the_field() {
        let cluster = |keys: &str| {
            format!(
                "{GOOD}\n[cluster]\nnode = \"lb-a\"\netcd = [\"10.0.0.9:2379\"]\n\
                 sync_interface = \"eth1\"\nsync_key_file = \"/etc/weir/sync.key\"\n{keys}\n"
            )
        };
        let c = Config::parse("t.toml", &cluster("")).unwrap();
        let cl = c.cluster.as_ref().unwrap();
        assert_eq!(cl.node.get_ref(), "lb-a");
        assert!(
            c.wants_controller(),
            "the leader's controller publishes the tables"
        );
        assert!(
            c.warnings
                .iter()
                .any(|w| w.field == "vip[0].mode" && w.message.contains("dsr")),
            "{:?}",
            c.warnings
        );
        let line_of_last = cluster("").lines().count();
        let e = err_of(&cluster("lease_ttl_s = 0"));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("cluster.lease_ttl_s", Some(line_of_last))
        );
        let e = err_of(&cluster("node2 = 1"));
        assert!(e.message.contains("unknown field `node2`"), "{e}");
        let no_key = cluster("").replace("sync_key_file = \"/etc/weir/sync.key\"\n", "");
        let e = err_of(&no_key);
        assert_eq!(e.field, "cluster.sync_key_file");
        assert!(e.message.contains("openssl rand -hex 32"), "{e}");
        let e = err_of(&cluster("").replace(
            "interfaces = [\"veth0\"]\n",
            "interfaces = [\"veth0\"]\ntier = \"software\"\n",
        ));
        assert_eq!(e.field, "cluster.connection_sync");
        Config::parse(
            "t.toml",
            &cluster("connection_sync = false").replace(
                "interfaces = [\"veth0\"]\n",
                "interfaces = [\"veth0\"]\ntier = \"software\"\n",
            ),
        )
        .unwrap();
    }

    fn dataplane_with(keys: &str) -> String {
        GOOD.replace(
            "interfaces = [\"veth0\"]\n",
            &format!("interfaces = [\"veth0\"]\n{keys}\n"),
        )
    }

    #[test]
    fn conn_lru_takes_per_cpu() {
        let dp = Config::parse("t.toml", &dataplane_with("conn_lru = \"per-cpu\""))
            .unwrap()
            .dataplane;
        assert_eq!(dp.conn_lru, ConnLru::PerCpu);
    }

    #[test]
    fn the_tier_is_xdp_unless_asked_and_its_keys_default() {
        let last = *crate::cpus::usable().last().unwrap();
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(dp.tier, Tier::Xdp);
        assert_eq!(dp.conn_lru, ConnLru::Shared);
        assert_eq!(dp.fast_size(), 8192);
        assert_eq!(*dp.offload.get_ref(), OffloadPolicy::Heavy);
        assert_eq!(dp.workers.get_ref(), &vec![last]);

        let src = dataplane_with(&format!(
            "tier = \"hybrid\"\nfast_table_size = 2000\noffload = \"first\"\nworkers = [{last}]"
        ));
        let c = Config::parse("t.toml", &src).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let dp = c.dataplane;
        assert_eq!((dp.tier, dp.fast_size()), (Tier::Hybrid, 2000));
        assert_eq!(*dp.offload.get_ref(), OffloadPolicy::First);
        let sw = dataplane_with("tier = \"software\"");
        assert_eq!(
            Config::parse("t.toml", &sw).unwrap().dataplane.tier,
            Tier::Software
        );
        // A connection table smaller than the default fast table caps it.
        let small = dataplane_with("tier = \"hybrid\"\nconn_table_size = 4096");
        let dp = Config::parse("t.toml", &small).unwrap().dataplane;
        assert_eq!(dp.fast_size(), 4096);
    }

    #[test]
    fn tier_mistakes_name_the_field_and_the_line() {
        let last = *crate::cpus::usable().last().unwrap();
        let cases = [
            (
                "tier = \"hybrid\"\nfast_table_size = 0".to_string(),
                "dataplane.fast_table_size",
                5,
                "between 1 and conn_table_size (1048576)",
            ),
            (
                "tier = \"hybrid\"\nconn_table_size = 1000\nfast_table_size = 2000".into(),
                "dataplane.fast_table_size",
                6,
                "between 1 and conn_table_size (1000)",
            ),
            (
                "fast_table_size = 0".into(),
                "dataplane.fast_table_size",
                4,
                "between 1 and conn_table_size",
            ),
            (
                "conn_lru = \"percpu\"".into(),
                "dataplane.conn_lru",
                4,
                "unknown variant `percpu`, expected `shared` or `per-cpu`",
            ),
            (
                "tier = \"fpga\"".into(),
                "dataplane.tier",
                4,
                "unknown variant `fpga`",
            ),
            (
                "offload = \"all\"".into(),
                "dataplane.offload",
                4,
                "unknown variant `all`",
            ),
            (
                "tier = \"software\"\nworkers = [100000]".into(),
                "dataplane.workers",
                5,
                "CPU 100000 does not exist or weir may not run on it; usable CPUs: ",
            ),
            (
                "tier = \"software\"\nworkers = []".into(),
                "dataplane.workers",
                5,
                "at least one CPU",
            ),
            (
                format!("tier = \"hybrid\"\nworkers = [{last}, {last}]"),
                "dataplane.workers",
                5,
                "listed twice",
            ),
        ];
        for (keys, field, line, what) in cases {
            let e = err_of(&dataplane_with(&keys));
            assert_eq!(
                (e.field.as_str(), e.line),
                (field, Some(line)),
                "{keys}: {e}"
            );
            assert!(e.message.contains(what), "{keys}: {e}");
        }
    }

    #[test]
    fn keys_the_tier_does_not_read_are_warned_about() {
        let last = *crate::cpus::usable().last().unwrap();
        let warned = |keys: &str| {
            let w = Config::parse("t.toml", &dataplane_with(keys))
                .unwrap()
                .warnings;
            w.iter()
                .map(|w| (w.field.clone(), w.line.unwrap()))
                .collect::<Vec<_>>()
        };
        let field = |f: &str, l: usize| (f.to_string(), l);
        assert_eq!(
            warned("fast_table_size = 100"),
            [field("dataplane.fast_table_size", 4)]
        );
        assert_eq!(
            warned(&format!("workers = [{last}]\noffload = \"first\"")),
            [field("dataplane.offload", 5), field("dataplane.workers", 4)]
        );
        assert_eq!(
            warned("tier = \"software\"\noffload = \"heavy\""),
            [field("dataplane.offload", 5)]
        );
    }

    #[test]
    fn the_syn_budget_is_checked_with_the_field_and_the_line() {
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(
            dp.syn_budget(),
            weir_dataplane::loader::SynBudget {
                rate: 10_000,
                burst: 1_000
            }
        );
        let sw = "tier = \"software\"";
        let c = Config::parse(
            "t.toml",
            &dataplane_with(&format!("{sw}\nsyn_rate = 5000\nsyn_burst = 50")),
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(
            (
                c.dataplane.syn_budget().rate,
                c.dataplane.syn_budget().burst
            ),
            (5000, 50)
        );
        let cases = [
            (
                "syn_rate = 100000001",
                "dataplane.syn_rate",
                5,
                "beyond 100000000",
            ),
            ("syn_rate = -1", "dataplane.syn_rate", 5, "invalid value"),
            ("syn_burst = 0", "dataplane.syn_burst", 5, "admit no SYN"),
            (
                "syn_rate = 10\nsyn_burst = 101",
                "dataplane.syn_burst",
                6,
                "more than 10 s",
            ),
            // The default rate, a burst beyond 10 s of it.
            (
                "syn_burst = 100001",
                "dataplane.syn_burst",
                5,
                "at most 100000",
            ),
        ];
        for (keys, field, line, what) in cases {
            let e = err_of(&dataplane_with(&format!("{sw}\n{keys}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                (field, Some(line)),
                "{keys}: {e}"
            );
            assert!(e.message.contains(what), "{keys}: {e}");
        }
        let warned = |keys: &str| {
            Config::parse("t.toml", &dataplane_with(keys))
                .unwrap()
                .warnings
                .iter()
                .map(|w| (w.field.clone(), w.line.unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            warned("syn_rate = 100"),
            [("dataplane.syn_rate".to_string(), 4)]
        );
        assert_eq!(
            warned(&format!("{sw}\nsyn_rate = 0\nsyn_burst = 5")),
            [("dataplane.syn_burst".to_string(), 6)]
        );
    }

    #[test]
    fn distribution_reorder_and_cost_are_checked_with_the_field_and_the_line() {
        let cpus = crate::cpus::usable();
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(*dp.distribution.get_ref(), Distribution::Flow);
        assert_eq!(*dp.spray_scope.get_ref(), SprayScope::Tcp);
        assert!(*dp.reorder.get_ref() && !dp.reorders());
        assert!(dp.cost_cycles.is_none());
        let one = "tier = \"software\"";
        let e = err_of(&dataplane_with(&format!("{one}\ndistribution = \"spray\"")));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("dataplane.distribution", Some(5))
        );
        assert!(e.message.contains("at least 2 workers"), "{e}");
        let e = err_of(&dataplane_with(&format!("{one}\ndistribution = \"rss\"")));
        assert_eq!(e.field, "dataplane.distribution");
        assert!(e.message.contains("unknown variant `rss`"), "{e}");
        for (cost, what) in [
            ("0", "remove cost_cycles"),
            ("2000000", "more than 1000000"),
        ] {
            let e = err_of(&dataplane_with(&format!("{one}\ncost_cycles = {cost}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                ("dataplane.cost_cycles", Some(5))
            );
            assert!(e.message.contains(what), "{e}");
        }
        // A bad cost is refused in any tier; other keys of the workers only
        // warn in the xdp tier.
        assert_eq!(
            err_of(&dataplane_with("cost_cycles = 0")).field,
            "dataplane.cost_cycles"
        );
        let w = Config::parse("t.toml", &dataplane_with("distribution = \"spray\""))
            .unwrap()
            .warnings;
        assert_eq!(w[0].field, "dataplane.distribution", "{w:?}");
        let flow = Config::parse(
            "t.toml",
            &dataplane_with(&format!("{one}\nreorder = false")),
        );
        assert_eq!(flow.unwrap().warnings[0].field, "dataplane.reorder");
        for hold in ["0", "200000"] {
            let e = err_of(&dataplane_with(&format!("{one}\nreorder_hold_us = {hold}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                ("dataplane.reorder_hold_us", Some(5))
            );
            assert!(
                e.message.contains("hold time must be from 1 µs to 100 ms"),
                "{e}"
            );
        }
        let [a, b] = cpus[..] else {
            return; // spreading needs two CPUs
        };
        let two = format!("tier = \"software\"\nworkers = [{a}, {b}]");
        let spray = format!("{two}\ndistribution = \"spray\"\ncost_cycles = 10000");
        let c = Config::parse("t.toml", &dataplane_with(&spray)).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(c.dataplane.reorders());
        assert_eq!(c.dataplane.reorder_config(), ReorderConfig::default());
        let held = format!("{spray}\nreorder_hold_us = 20000");
        let dp = Config::parse("t.toml", &dataplane_with(&held))
            .unwrap()
            .dataplane;
        assert_eq!(dp.reorder_config().hold_ns, 20_000_000);
        assert_eq!(c.dataplane.distribution_config().workers, 2);
        let generic = format!("{spray}\nxdp_mode = \"generic\"");
        let e = err_of(&dataplane_with(&generic));
        assert_eq!(e.field, "dataplane.reorder");
        assert!(e.message.contains("reorder = false"), "{e}");
        let unordered = format!("{generic}\nreorder = false\nspray_scope = \"all\"");
        let dp = Config::parse("t.toml", &dataplane_with(&unordered))
            .unwrap()
            .dataplane;
        assert_eq!(dp.distribution_config().scope, SprayScope::All);
        assert!(!dp.reorders());
    }

    fn encap_mode(mode: &str, keys: &str) -> String {
        dataplane_with(keys)
            .replace("mode = \"nat\"", &format!("mode = \"{mode}\""))
            .replace("  port = 8080\n", "")
    }

    #[test]
    fn encap_modes_and_their_keys_parse() {
        let c = Config::parse("t.toml", &encap_mode("ipip", "")).unwrap();
        assert_eq!(c.vips[0].mode, Mode::Ipip);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let dp = &c.dataplane;
        assert_eq!(
            (*dp.encap_mtu.get_ref(), *dp.gue_port.get_ref()),
            (1500, 6080)
        );
        assert!(dp.encap_source_v4.is_none() && dp.encap_source_v6.is_none());
        let keys = "encap_mtu = 9000\nencap_source_v4 = \"10.9.9.9\"\n\
                    encap_source_v6 = \"2001:db8::9\"\ngue_port = 7000";
        let c = Config::parse("t.toml", &encap_mode("gue", keys)).unwrap();
        assert_eq!(c.vips[0].mode, Mode::Gue);
        let dp = &c.dataplane;
        assert_eq!(
            (*dp.encap_mtu.get_ref(), *dp.gue_port.get_ref()),
            (9000, 7000)
        );
        assert_eq!(
            dp.encap_source_v4.as_ref().map(|a| a.get_ref().to_string()),
            Some("10.9.9.9".into())
        );
        // The keys without an encap VIP are legal but do nothing.
        let c = Config::parse("t.toml", &dataplane_with("gue_port = 7000")).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert_eq!(
            (c.warnings[0].field.as_str(), c.warnings[0].line),
            ("dataplane.gue_port", Some(4))
        );
    }

    #[test]
    fn encap_mistakes_name_the_field_and_the_line() {
        let cases = [
            (
                "ipip",
                "encap_mtu = 100",
                "dataplane.encap_mtu",
                4,
                "576 to 65535",
            ),
            ("gue", "gue_port = 0", "dataplane.gue_port", 4, "port 0"),
            (
                "ipip",
                "encap_source_v4 = \"224.0.0.1\"",
                "dataplane.encap_source_v4",
                4,
                "multicast",
            ),
            (
                "gue",
                "encap_source_v6 = \"::\"",
                "dataplane.encap_source_v6",
                4,
                "unspecified",
            ),
            (
                "ipip",
                "encap_source_v4 = \"2001:db8::1\"",
                "dataplane.encap_source_v4",
                4,
                "IPv4",
            ),
            (
                "gue",
                "tier = \"software\"",
                "vip[0].mode",
                7,
                "built by XDP only",
            ),
        ];
        for (mode, keys, field, line, what) in cases {
            let e = err_of(&encap_mode(mode, keys));
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
        // Only encapsulation carries one family inside the other.
        let mixed = encap_mode("ipip", "").replace("\"10.1.0.2\"", "\"2001:db8::2\"");
        Config::parse("t.toml", &mixed).unwrap();
        let e = err_of(&GOOD.replace("\"10.1.0.2\"", "\"2001:db8::2\""));
        assert!(e.message.contains("only mode = \"ipip\" or \"gue\""), "{e}");
        // Encapsulation keeps the port, so a DIP port is a mistake.
        let e = err_of(&GOOD.replace("mode = \"nat\"", "mode = \"gue\""));
        assert_eq!(e.field, "vip[0].dip[0].port", "{e}");
        assert!(e.message.contains("gue mode does not rewrite ports"), "{e}");
    }

    #[test]
    fn the_shipped_example_is_valid() {
        let src = include_str!("../../../examples/weir.toml");
        Config::parse("examples/weir.toml", src).unwrap();
    }
}
