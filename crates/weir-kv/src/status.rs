//! What a running `weir kv` reports: the whole [`KvStatus`] (`/status`,
//! read by `weir kv status`), one [`Status`] per pool, their human
//! rendering, and the management API's views of them (pools with per-server
//! requests and health, hit ratios, hot keys).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::KvConfig;
use crate::health::{HealthReport, ServerState};
use crate::proxy::Proxy;
use crate::stats::Snapshot;
use crate::udp::{StatusHandle, UdpStatus};

/// What `/status` returns: every pool the switch runs, in the
/// configuration's order.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct KvStatus {
    pub pools: Vec<Status>,
}

impl KvStatus {
    pub fn of(pools: Vec<Status>) -> KvStatus {
        KvStatus { pools }
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&Status> {
        self.pools.iter().find(|p| p.pool == name)
    }

    /// The hot keys of the pool that runs the UDP path (there is at most
    /// one), or an empty view.
    pub fn hot_keys_view(&self) -> HotKeysView {
        match self.pools.iter().find(|p| p.udp.is_some()) {
            Some(p) => p.hot_keys_view(),
            None => HotKeysView {
                hot_keys: Vec::new(),
                cache_enabled: false,
                cached_keys: 0,
                cache_hits: 0,
                cache_misses: 0,
                cache_hit_ratio: None,
            },
        }
    }
}

/// One pool of a running switch.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Status {
    pub pool: String,
    pub listen: String,
    pub hash: String,
    pub distribution: String,
    /// `auto_eject_hosts`: off, rehash (nutcracker's) or failover (weir's).
    #[serde(default = "eject_off")]
    pub eject: String,
    /// Each server, in the configuration's order.
    pub servers: Vec<ServerStatus>,
    pub stats: Snapshot,
    /// Hot keys of the XDP cache (empty while the UDP path is not loaded).
    pub hot_keys: Vec<String>,
    /// The XDP switch, when `[udp]` is configured.
    #[serde(default)]
    pub udp: Option<UdpStatus>,
}

/// One server of the pool: who it is and whether it answers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The name after `host:port:weight` in the configuration, or
    /// `host:port` when it has none.
    pub name: String,
    /// `host:port`, as the configuration writes it.
    pub address: String,
    pub weight: u32,
    /// `ring`, or `failover` for the pool's failover server (no ring point
    /// of its own; it serves ejected servers' keys).
    #[serde(default = "ring_role")]
    pub role: String,
    /// The ejected servers whose keys this one serves now, by name
    /// (`failover` mode; empty otherwise).
    #[serde(default)]
    pub serving_for: Vec<String>,
    #[serde(flatten)]
    pub health: HealthReport,
}

fn ring_role() -> String {
    "ring".into()
}

fn eject_off() -> String {
    "off".into()
}

/// Reads the status of a running switch.
pub fn status_of(proxy: &Proxy, cfg: &KvConfig, udp: Option<&StatusHandle>) -> Status {
    let udp = udp.map(|h| h.get());
    Status {
        pool: cfg.pool.clone(),
        listen: proxy.local_addr().to_string(),
        hash: cfg.hash.to_string(),
        distribution: cfg.distribution.to_string(),
        eject: cfg.eject.mode.as_str().into(),
        servers: {
            let serving_for = proxy.routing().serving_for();
            cfg.servers
                .iter()
                .zip(proxy.health())
                .enumerate()
                .map(|(i, (s, health))| {
                    let spare = cfg.spare_index() == Some(i);
                    ServerStatus {
                        name: cfg.server_name(i),
                        address: format!("{}:{}", s.addr, s.port),
                        weight: if spare { 0 } else { s.weight },
                        role: if spare { "failover" } else { "ring" }.into(),
                        serving_for: serving_for
                            .get(i)
                            .into_iter()
                            .flatten()
                            .map(|&o| cfg.server_name(o))
                            .collect(),
                        health,
                    }
                })
                .collect()
        },
        stats: proxy.stats(),
        hot_keys: udp.as_ref().map(|u| u.hot_keys.clone()).unwrap_or_default(),
        udp,
    }
}

/// `hits / lookups`, none without lookups.
fn ratio(hits: u64, lookups: u64) -> Option<f64> {
    (lookups > 0).then(|| hits as f64 / lookups as f64)
}

/// One server of a pool (`/api/v1/pools`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ServerView {
    #[serde(flatten)]
    pub server: ServerStatus,
    /// Requests the TCP proxy sent it.
    pub requests: u64,
    /// Requests XDP forwarded to it (none without the UDP path).
    pub udp_requests: Option<u64>,
}

/// A pool (`/api/v1/pools`, `/api/v1/pools/{pool}`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PoolView {
    pub name: String,
    pub listen: String,
    pub hash: String,
    pub distribution: String,
    pub servers: Vec<ServerView>,
    pub requests: u64,
    pub client_connections: u64,
    /// Keys asked for by get/gets through the TCP proxy, found, and the
    /// ratio (none before the first get).
    pub get_keys: u64,
    pub get_hits: u64,
    pub hit_ratio: Option<f64>,
}

/// The XDP cache and its hot keys (`/api/v1/hot-keys`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HotKeysView {
    /// Hottest first.
    pub hot_keys: Vec<String>,
    /// Whether the UDP path with its cache runs at all.
    pub cache_enabled: bool,
    pub cached_keys: usize,
    /// GETs XDP answered from the cache, and those it could not.
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_hit_ratio: Option<f64>,
}

impl Status {
    pub fn pool_view(&self) -> PoolView {
        let s = &self.stats;
        let udp = self.udp.as_ref();
        PoolView {
            name: self.pool.clone(),
            listen: self.listen.clone(),
            hash: self.hash.clone(),
            distribution: self.distribution.clone(),
            servers: self
                .servers
                .iter()
                .enumerate()
                .map(|(i, server)| ServerView {
                    server: server.clone(),
                    requests: s.server_requests.get(i).copied().unwrap_or(0),
                    udp_requests: udp.map(|u| u.server_requests.get(i).copied().unwrap_or(0)),
                })
                .collect(),
            requests: s.requests,
            client_connections: s.client_connections,
            get_keys: s.get_keys,
            get_hits: s.get_hits,
            hit_ratio: ratio(s.get_hits, s.get_keys),
        }
    }

    pub fn hot_keys_view(&self) -> HotKeysView {
        let u = self.udp.as_ref();
        let (hits, misses) = u.map_or((0, 0), |u| (u.cache_hits, u.cache_misses));
        HotKeysView {
            hot_keys: self.hot_keys.clone(),
            cache_enabled: u.is_some_and(|u| u.cache_enabled),
            cached_keys: u.map_or(0, |u| u.cached_keys),
            cache_hits: hits,
            cache_misses: misses,
            cache_hit_ratio: ratio(hits, hits + misses),
        }
    }
}

/// The human rendering of `weir kv status`: each pool, a blank line between.
pub fn render_all(st: &KvStatus) -> String {
    st.pools.iter().map(render).collect::<Vec<_>>().join("\n")
}

/// The human rendering of one pool.
pub fn render(st: &Status) -> String {
    let s = &st.stats;
    let mut out = format!(
        "pool {} on {} ({} / {}, ejection {})\nclients {} (total {})  requests {}  writes {}\nget keys {}  hits {}  misses {}\nerrors: client {}  server {}  timeouts {}  binary refused {}\ninvalidations {} (failed {})\n",
        st.pool, st.listen, st.hash, st.distribution, st.eject,
        s.client_connections, s.client_connections_total, s.requests, s.writes,
        s.get_keys, s.get_hits, s.get_misses,
        s.client_errors, s.server_errors, s.timeouts, s.binary_refused,
        s.invalidations, s.invalidation_failures
    );
    out.push_str(&servers_table(st, now_unix_ms()));
    out.push_str(&format!(
        "hot keys: {}\n",
        if st.hot_keys.is_empty() {
            "-".into()
        } else {
            st.hot_keys.join(" ")
        }
    ));
    if let Some(u) = &st.udp {
        let x = |n: &str| u.xdp.get(n).copied().unwrap_or(0);
        let passed: u64 = u
            .xdp
            .iter()
            .filter(|(k, _)| k.starts_with("pass_"))
            .map(|(_, v)| *v)
            .sum();
        out.push_str(&format!(
            "udp (XDP, prog {}) on {} port {} {}: rx {}  forwarded {}  to kernel {}  writes {}\n\
             cache {}: hits {}  misses {}  cached {}  installs {}  races {}  settle skips {}  \
             evictions {}  fetch errors {}  too large {}\n",
            u.prog_id,
            u.interfaces.join(","),
            u.port,
            u.forward,
            x("rx"),
            x("tx") + x("redirect"),
            passed,
            x("write"),
            if u.cache_enabled { "on" } else { "off" },
            u.cache_hits,
            u.cache_misses,
            u.cached_keys,
            u.installs,
            u.install_races,
            u.settle_skips,
            u.evictions,
            u.fetch_errors,
            u.too_large
        ));
        for (i, server) in st.servers.iter().enumerate() {
            out.push_str(&format!(
                "{:<26} {} (udp)\n",
                server.name,
                u.server_requests.get(i).copied().unwrap_or(0)
            ));
        }
        if u.bpf_run_cnt > 0 {
            out.push_str(&format!(
                "bpf: {} runs, {:.0} ns/run\n",
                u.bpf_run_cnt,
                u.bpf_run_time_ns as f64 / u.bpf_run_cnt as f64
            ));
        }
    }
    out
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `12s`, `5m03s`, `2h10m`: how long ago `then` was.
fn age(then_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// One line per server: name, address, state and for how long, requests,
/// failures and the newest error.
fn servers_table(st: &Status, now_ms: u64) -> String {
    let mut out = format!(
        "{:<20} {:<22} {:>6} {:<14} {:>10} {:>8} {:>8}  last error\n",
        "server", "address", "weight", "state", "requests", "failures", "ejected"
    );
    for (i, srv) in st.servers.iter().enumerate() {
        let h = &srv.health;
        let state = match (h.state, h.since_unix_ms) {
            (ServerState::Unknown, _) | (_, None) => h.state.as_str().to_string(),
            (state, Some(t)) => format!("{} {}", state.as_str(), age(t, now_ms)),
        };
        let error = match (&h.last_error, h.last_error_unix_ms) {
            (Some(e), Some(t)) => format!("{e} ({} ago)", age(t, now_ms)),
            (Some(e), None) => e.clone(),
            (None, _) => "-".into(),
        };
        let weight = if srv.role == "failover" {
            "-".to_string()
        } else {
            srv.weight.to_string()
        };
        out.push_str(&format!(
            "{:<20} {:<22} {:>6} {:<14} {:>10} {:>8} {:>8}  {error}\n",
            srv.name,
            srv.address,
            weight,
            state,
            st.stats.server_requests.get(i).copied().unwrap_or(0),
            h.failures,
            h.ejections,
        ));
    }
    for srv in st.servers.iter().filter(|s| s.role == "failover") {
        out.push_str(&format!("failover server: {}\n", srv.name));
    }
    for srv in st.servers.iter().filter(|s| !s.serving_for.is_empty()) {
        out.push_str(&format!(
            "{} serves the keys of {}\n",
            srv.name,
            srv.serving_for.join(", ")
        ));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn server(name: &str, address: &str, health: HealthReport) -> ServerStatus {
        ServerStatus {
            name: name.into(),
            address: address.into(),
            weight: 1,
            role: "ring".into(),
            serving_for: Vec::new(),
            health,
        }
    }

    /// A status with two servers (one named and up, one down) and,
    /// optionally, the UDP path.
    pub(crate) fn sample(udp: bool) -> Status {
        Status {
            pool: "alpha".into(),
            listen: "127.0.0.1:22121".into(),
            hash: "fnv1a_64".into(),
            distribution: "ketama".into(),
            eject: "off".into(),
            servers: vec![
                server(
                    "cache-a",
                    "10.0.0.1:11211",
                    HealthReport {
                        state: ServerState::Up,
                        since_unix_ms: Some(1_000),
                        failures: 0,
                        last_error: None,
                        last_error_unix_ms: None,
                        ejections: 0,
                        returns: 0,
                        retry_unix_ms: None,
                    },
                ),
                server(
                    "10.0.0.2:11211",
                    "10.0.0.2:11211",
                    HealthReport {
                        state: ServerState::Down,
                        since_unix_ms: Some(50_000),
                        failures: 3,
                        last_error: Some("Connection refused".into()),
                        last_error_unix_ms: Some(62_000),
                        ejections: 0,
                        returns: 0,
                        retry_unix_ms: None,
                    },
                ),
            ],
            stats: Snapshot {
                requests: 10,
                get_keys: 8,
                get_hits: 6,
                get_misses: 2,
                client_connections: 2,
                server_requests: vec![7, 3],
                ..Snapshot::default()
            },
            hot_keys: if udp { vec!["k1".into()] } else { vec![] },
            udp: udp.then(|| UdpStatus {
                cache_enabled: true,
                cache_hits: 3,
                cache_misses: 1,
                cached_keys: 1,
                server_requests: vec![5],
                hot_keys: vec!["k1".into()],
                xdp: [("rx".to_string(), 9)].into_iter().collect(),
                ..UdpStatus::default()
            }),
        }
    }

    #[test]
    fn json_human_and_metrics_report_the_same_get_misses() {
        let worker = std::sync::Arc::new(crate::stats::WorkerStats::new(2));
        crate::stats::inc(&worker.get_keys, 25);
        crate::stats::inc(&worker.get_hits, 4);
        let st = Status {
            stats: crate::stats::snapshot(&[worker]),
            ..sample(false)
        };
        let json: serde_json::Value = serde_json::to_value(&st).unwrap();
        assert_eq!(json["stats"]["get_misses"], 21);
        assert!(render(&st).contains("misses 21"), "{}", render(&st));
        let metrics = crate::metrics::render(KvStatus::of(vec![st]));
        assert!(
            metrics
                .lines()
                .any(|l| l == "weir_kv_get_misses_total{pool=\"alpha\"} 21"),
            "{metrics}"
        );
    }

    #[test]
    fn each_server_shows_its_name_address_state_and_last_error() {
        let st = sample(false);
        let text = servers_table(&st, 65_000);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("cache-a "), "{text}");
        assert!(lines[1].contains("10.0.0.1:11211"), "{text}");
        assert!(lines[1].contains("up 1m04s"), "{text}");
        assert!(lines[2].contains("down 15s"), "{text}");
        assert!(lines[2].ends_with("Connection refused (3s ago)"), "{text}");
        let json = serde_json::to_value(&st).unwrap();
        let down = &json["servers"][1];
        assert_eq!(
            (&down["state"], &down["since_unix_ms"], &down["last_error"]),
            (
                &serde_json::json!("down"),
                &serde_json::json!(50_000),
                &serde_json::json!("Connection refused")
            )
        );
        let api = serde_json::to_value(st.pool_view()).unwrap();
        assert_eq!(api["servers"][0]["name"], "cache-a");
        assert_eq!(api["servers"][1]["state"], "down");
    }

    #[test]
    fn an_ejected_server_shows_its_state_and_ejections() {
        let mut st = sample(false);
        st.eject = "rehash".into();
        let h = &mut st.servers[1].health;
        (h.state, h.ejections, h.returns, h.retry_unix_ms) =
            (ServerState::Ejected, 2, 1, Some(90_000));
        let head = render(&st);
        assert!(
            head.starts_with("pool alpha on 127.0.0.1:22121 (fnv1a_64 / ketama, ejection rehash)"),
            "{head}"
        );
        let text = servers_table(&st, 65_000);
        let line = text
            .lines()
            .find(|l| l.starts_with("10.0.0.2:11211"))
            .unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        // name, address, weight, state, age, requests, failures, ejections
        assert_eq!(&cols[3..8], ["ejected", "15s", "3", "3", "2"], "{text}");
        let json = serde_json::to_value(&st).unwrap();
        let s = &json["servers"][1];
        assert_eq!(
            (
                &s["state"],
                &s["ejections"],
                &s["returns"],
                &s["retry_unix_ms"]
            ),
            (
                &serde_json::json!("ejected"),
                &serde_json::json!(2),
                &serde_json::json!(1),
                &serde_json::json!(90_000)
            )
        );
        assert_eq!(json["eject"], "rehash");
    }

    #[test]
    fn the_human_status_shows_every_pool_in_order() {
        let mut beta = sample(false);
        beta.pool = "beta".into();
        beta.listen = "127.0.0.1:22122".into();
        let text = render_all(&KvStatus::of(vec![sample(false), beta]));
        let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("pool ")).collect();
        assert_eq!(heads.len(), 2, "{text}");
        assert!(
            heads[0].starts_with("pool alpha on 127.0.0.1:22121"),
            "{text}"
        );
        assert!(
            heads[1].starts_with("pool beta on 127.0.0.1:22122"),
            "{text}"
        );
    }

    #[test]
    fn views_derive_ratios_and_per_server_requests() {
        let p = sample(true).pool_view();
        assert_eq!(p.hit_ratio, Some(0.75));
        assert_eq!(
            p.servers[0],
            ServerView {
                server: sample(true).servers[0].clone(),
                requests: 7,
                udp_requests: Some(5)
            }
        );
        assert_eq!(p.servers[1].udp_requests, Some(0));
        let h = sample(true).hot_keys_view();
        assert_eq!((h.cache_hit_ratio, h.cached_keys), (Some(0.75), 1));
        let plain = sample(false);
        assert_eq!(plain.pool_view().servers[0].udp_requests, None);
        let h = plain.hot_keys_view();
        assert_eq!((h.cache_enabled, h.cache_hit_ratio), (false, None));
    }
}
