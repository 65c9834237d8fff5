//! What a running `weir kv` reports: the whole [`Status`] (`/status`, read by
//! `weir kv status`), its human rendering, and the management API's views
//! of it (pools with per-server requests, hit ratios, hot keys).

use serde::{Deserialize, Serialize};

use crate::config::KvConfig;
use crate::proxy::Proxy;
use crate::stats::Snapshot;
use crate::udp::{StatusHandle, UdpStatus};

/// What `/status` returns.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Status {
    pub pool: String,
    pub listen: String,
    pub hash: String,
    pub distribution: String,
    /// `host:port:weight` of each server, in the configuration's order.
    pub servers: Vec<String>,
    pub stats: Snapshot,
    /// Hot keys of the XDP cache (empty while the UDP path is not loaded).
    pub hot_keys: Vec<String>,
    /// The XDP switch, when `[udp]` is configured.
    #[serde(default)]
    pub udp: Option<UdpStatus>,
}

/// Reads the status of a running switch.
pub fn status_of(proxy: &Proxy, cfg: &KvConfig, udp: Option<&StatusHandle>) -> Status {
    let udp = udp.map(|h| h.get());
    Status {
        pool: cfg.pool.clone(),
        listen: proxy.local_addr().to_string(),
        hash: cfg.hash.to_string(),
        distribution: cfg.distribution.to_string(),
        servers: cfg
            .servers
            .iter()
            .map(|s| format!("{}:{}:{}", s.addr, s.port, s.weight))
            .collect(),
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
    /// `host:port:weight`, as the configuration has it.
    pub server: String,
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
                .map(|(i, name)| ServerView {
                    server: name.clone(),
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

/// The human rendering of `weir kv status`.
pub fn render(st: &Status) -> String {
    let s = &st.stats;
    let mut out = format!(
        "pool {} on {} ({} / {})\nclients {} (total {})  requests {}  writes {}\nget keys {}  hits {}  misses {}\nerrors: client {}  server {}  timeouts {}  binary refused {}\ninvalidations {} (failed {})\n",
        st.pool, st.listen, st.hash, st.distribution,
        s.client_connections, s.client_connections_total, s.requests, s.writes,
        s.get_keys, s.get_hits, s.get_misses,
        s.client_errors, s.server_errors, s.timeouts, s.binary_refused,
        s.invalidations, s.invalidation_failures
    );
    out.push_str("server                     requests\n");
    for (i, name) in st.servers.iter().enumerate() {
        out.push_str(&format!(
            "{name:<26} {}\n",
            s.server_requests.get(i).copied().unwrap_or(0)
        ));
    }
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
        for (i, name) in st.servers.iter().enumerate() {
            out.push_str(&format!(
                "{name:<26} {} (udp)\n",
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A status with two servers and, optionally, the UDP path.
    pub(crate) fn sample(udp: bool) -> Status {
        Status {
            pool: "alpha".into(),
            listen: "127.0.0.1:22121".into(),
            hash: "fnv1a_64".into(),
            distribution: "ketama".into(),
            servers: vec!["10.0.0.1:11211:1".into(), "10.0.0.2:11211:1".into()],
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
        let metrics = crate::metrics::render(st);
        assert!(
            metrics.lines().any(|l| l == "weir_kv_get_misses_total 21"),
            "{metrics}"
        );
    }

    #[test]
    fn views_derive_ratios_and_per_server_requests() {
        let p = sample(true).pool_view();
        assert_eq!(p.hit_ratio, Some(0.75));
        assert_eq!(
            p.servers[0],
            ServerView {
                server: "10.0.0.1:11211:1".into(),
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
