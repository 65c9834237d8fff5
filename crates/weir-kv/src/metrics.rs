//! `weir kv`'s Prometheus metrics: each pool's proxy counters and, for the
//! pool with the UDP path, the XDP switch's and its cache's, every sample
//! labelled with its `pool`, encoded by prometheus-client from one
//! [`KvStatus`] read per scrape (OpenMetrics text; counter samples carry
//! `_total`).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::health::ServerState;
use crate::stats::Snapshot;
use crate::status::{KvStatus, ServerStatus, Status};
use crate::udp::UdpStatus;

/// The exposition text of `st`: every sample carries its `pool` label.
pub fn render(st: KvStatus) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposed(st)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

#[derive(Debug)]
struct Exposed(KvStatus);

fn family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        ConstCounter::new(v).encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauges<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, i64)>,
) -> fmt::Result {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in samples {
        ConstGauge::new(v).encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The `pool` label of one pool.
fn pool(st: &Status) -> [(&'static str, &str); 1] {
    [("pool", st.pool.as_str())]
}

/// `(pool and server labels, count)` for each server of each pool, in the
/// configuration's order.
fn per_server<'a>(
    pools: impl Iterator<Item = &'a Status> + 'a,
    counts: impl Fn(&'a Status) -> &'a [u64] + 'a,
) -> impl Iterator<Item = ([(&'static str, &'a str); 2], u64)> + 'a {
    pools.flat_map(move |st| {
        let counts = counts(st);
        st.servers.iter().enumerate().map(move |(i, srv)| {
            (
                [("pool", st.pool.as_str()), ("server", srv.name.as_str())],
                counts.get(i).copied().unwrap_or(0),
            )
        })
    })
}

/// `(pool and server labels, value)` for each server of each pool.
fn each_server<'a>(
    pools: &'a [Status],
    value: fn(&ServerStatus) -> u64,
) -> impl Iterator<Item = ([(&'static str, &'a str); 2], u64)> + 'a {
    pools.iter().flat_map(move |st| {
        st.servers.iter().map(move |srv| {
            (
                [("pool", st.pool.as_str()), ("server", srv.name.as_str())],
                value(srv),
            )
        })
    })
}

/// The servers' health: a state set (1 on the current state), the time the
/// state began, and failures.
fn server_health(enc: &mut DescriptorEncoder, pools: &[Status]) -> fmt::Result {
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_state",
        "Each server's state, 1 on the current one (unknown: nothing sent yet).",
        None,
        MetricType::Gauge,
    )?;
    for st in pools {
        for srv in &st.servers {
            for state in [
                ServerState::Unknown,
                ServerState::Up,
                ServerState::Down,
                ServerState::Ejected,
            ] {
                let labels = [
                    ("pool", st.pool.as_str()),
                    ("server", srv.name.as_str()),
                    ("address", srv.address.as_str()),
                    ("state", state.as_str()),
                ];
                ConstGauge::new(i64::from(srv.health.state == state))
                    .encode(fam.encode_family(&labels)?)?;
            }
        }
    }
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_role",
        "Each server's role, 1 on it: ring, or failover (the pool's failover server, no ring point of its own).",
        None,
        MetricType::Gauge,
    )?;
    for st in pools {
        for srv in &st.servers {
            ConstGauge::new(1).encode(fam.encode_family(&[
                ("pool", st.pool.as_str()),
                ("server", srv.name.as_str()),
                ("role", srv.role.as_str()),
            ])?)?;
        }
    }
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_serving_for",
        "1 for each server (server) that now serves keys of an ejected one (ejected), in failover mode.",
        None,
        MetricType::Gauge,
    )?;
    for st in pools {
        for srv in &st.servers {
            for ejected in &srv.serving_for {
                ConstGauge::new(1).encode(fam.encode_family(&[
                    ("pool", st.pool.as_str()),
                    ("server", srv.name.as_str()),
                    ("ejected", ejected.as_str()),
                ])?)?;
            }
        }
    }
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_state_since_seconds",
        "When each server's state began (Unix time).",
        None,
        MetricType::Gauge,
    )?;
    for st in pools {
        for srv in &st.servers {
            if let Some(ms) = srv.health.since_unix_ms {
                ConstGauge::new(ms as f64 / 1e3).encode(fam.encode_family(&[
                    ("pool", st.pool.as_str()),
                    ("server", srv.name.as_str()),
                ])?)?;
            }
        }
    }
    family(
        enc,
        "weir_kv_server_failures",
        "Connections or requests to each server that failed.",
        each_server(pools, |srv| srv.health.failures),
    )?;
    family(
        enc,
        "weir_kv_server_ejections",
        "Times each server was ejected (auto_eject_hosts).",
        each_server(pools, |srv| srv.health.ejections),
    )?;
    family(
        enc,
        "weir_kv_server_returns",
        "Times each ejected server returned to the ring after server_retry_timeout.",
        each_server(pools, |srv| srv.health.returns),
    )
}

type Field<T> = fn(&T) -> u64;

impl Collector for Exposed {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let pools = &self.0.pools;
        let proxy: [(&str, &str, Field<Snapshot>); 16] = [
            ("weir_kv_requests", "Requests received from clients.", |s| {
                s.requests
            }),
            ("weir_kv_writes", "Mutating requests.", |s| s.writes),
            ("weir_kv_get_keys", "Keys asked for by get/gets.", |s| {
                s.get_keys
            }),
            ("weir_kv_get_hits", "Keys found.", |s| s.get_hits),
            ("weir_kv_get_misses", "Keys not found.", |s| s.get_misses),
            (
                "weir_kv_client_errors",
                "Bad requests answered with an error.",
                |s| s.client_errors,
            ),
            ("weir_kv_server_errors", "SERVER_ERROR replies.", |s| {
                s.server_errors
            }),
            ("weir_kv_timeouts", "Requests timed out.", |s| s.timeouts),
            ("weir_kv_invalidations", "Cache invalidations.", |s| {
                s.invalidations
            }),
            (
                "weir_kv_invalidation_failures",
                "Failed invalidations (write refused).",
                |s| s.invalidation_failures,
            ),
            (
                "weir_kv_client_connections",
                "Client connections accepted.",
                |s| s.client_connections_total,
            ),
            (
                "weir_kv_socket_reads",
                "Reads of client and server sockets (system calls).",
                |s| s.socket_reads,
            ),
            (
                "weir_kv_socket_writes",
                "Writes to client and server sockets (system calls).",
                |s| s.socket_writes,
            ),
            (
                "weir_kv_idle_reads",
                "Socket reads that found nothing to read.",
                |s| s.idle_reads,
            ),
            (
                "weir_kv_spliced_values",
                "Values moved from a server socket to a client socket in the kernel (splice).",
                |s| s.spliced_values,
            ),
            (
                "weir_kv_spliced_bytes",
                "Bytes of the spliced values.",
                |s| s.spliced_bytes,
            ),
        ];
        for (name, help, field) in proxy {
            family(
                &mut enc,
                name,
                help,
                pools.iter().map(|st| (pool(st), field(&st.stats))),
            )?;
        }
        gauges(
            &mut enc,
            "weir_kv_client_connections_open",
            "Open client connections.",
            pools
                .iter()
                .map(|st| (pool(st), st.stats.client_connections as i64)),
        )?;
        family(
            &mut enc,
            "weir_kv_server_requests",
            "Requests sent to each server.",
            per_server(pools.iter(), |st| &st.stats.server_requests),
        )?;
        server_health(&mut enc, pools)?;
        let udp: Vec<(&Status, &UdpStatus)> = pools
            .iter()
            .filter_map(|st| st.udp.as_ref().map(|u| (st, u)))
            .collect();
        if udp.is_empty() {
            return Ok(());
        }
        let xdp: [(&str, &str, Field<UdpStatus>); 8] = [
            (
                "weir_kv_udp_cache_hits",
                "GETs answered by XDP from the in-switch cache.",
                |u| u.cache_hits,
            ),
            (
                "weir_kv_udp_cache_misses",
                "Single-key GETs the cache could not answer.",
                |u| u.cache_misses,
            ),
            ("weir_kv_udp_cache_installs", "Hot values installed.", |u| {
                u.installs
            }),
            (
                "weir_kv_udp_cache_install_races",
                "Installs refused because a write came after the ticket.",
                |u| u.install_races,
            ),
            (
                "weir_kv_udp_cache_evictions",
                "Keys evicted as no longer hot.",
                |u| u.evictions,
            ),
            (
                "weir_kv_udp_hotkey_fetch_errors",
                "Failed fetches of hot values.",
                |u| u.fetch_errors,
            ),
            ("weir_kv_udp_samples", "Keys sampled by XDP.", |u| u.samples),
            (
                "weir_kv_bpf_run_time_ns",
                "BPF run time of weir_kv (kernel.bpf_stats_enabled=1).",
                |u| u.bpf_run_time_ns,
            ),
        ];
        for (name, help, field) in xdp {
            family(
                &mut enc,
                name,
                help,
                udp.iter().map(|(st, u)| (pool(st), field(u))),
            )?;
        }
        gauges(
            &mut enc,
            "weir_kv_udp_hot_keys",
            "Hot keys now.",
            udp.iter()
                .map(|(st, u)| (pool(st), u.hot_keys.len() as i64)),
        )?;
        gauges(
            &mut enc,
            "weir_kv_udp_cached_keys",
            "Keys in the cache map.",
            udp.iter().map(|(st, u)| (pool(st), u.cached_keys as i64)),
        )?;
        family(
            &mut enc,
            "weir_kv_xdp",
            "XDP counters of weir_kv by name.",
            udp.iter().flat_map(|(st, u)| {
                u.xdp
                    .iter()
                    .map(|(k, v)| ([("pool", st.pool.as_str()), ("counter", k.as_str())], *v))
            }),
        )?;
        family(
            &mut enc,
            "weir_kv_udp_server_requests",
            "Requests XDP forwarded to each server.",
            per_server(udp.iter().map(|(st, _)| *st), |st| {
                st.udp
                    .as_ref()
                    .map_or(&[][..], |u| u.server_requests.as_slice())
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::tests::sample;

    #[test]
    fn every_counter_is_exposed_under_its_name() {
        let t = render(KvStatus::of(vec![sample(true)]));
        for line in [
            "weir_kv_requests_total{pool=\"alpha\"} 10",
            "weir_kv_get_misses_total{pool=\"alpha\"} 2",
            "weir_kv_client_connections_open{pool=\"alpha\"} 2",
            "weir_kv_server_requests_total{pool=\"alpha\",server=\"cache-a\"} 7",
            "weir_kv_server_state{pool=\"alpha\",server=\"10.0.0.2:11211\",address=\"10.0.0.2:11211\",state=\"down\"} 1",
            "weir_kv_server_state{pool=\"alpha\",server=\"cache-a\",address=\"10.0.0.1:11211\",state=\"down\"} 0",
            "weir_kv_server_state_since_seconds{pool=\"alpha\",server=\"10.0.0.2:11211\"} 50.0",
            "weir_kv_server_failures_total{pool=\"alpha\",server=\"10.0.0.2:11211\"} 3",
            "weir_kv_udp_cache_hits_total{pool=\"alpha\"} 3",
            "weir_kv_udp_cached_keys{pool=\"alpha\"} 1",
            "weir_kv_xdp_total{pool=\"alpha\",counter=\"rx\"} 9",
            "weir_kv_udp_server_requests_total{pool=\"alpha\",server=\"10.0.0.2:11211\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
        let plain = render(KvStatus::of(vec![sample(false)]));
        assert!(!plain.contains("weir_kv_udp"), "{plain}");
        assert!(plain.ends_with("# EOF\n"));
    }

    #[test]
    fn each_pool_has_its_own_samples_under_one_name() {
        let mut beta = sample(false);
        beta.pool = "beta".into();
        beta.stats.requests = 4;
        let t = render(KvStatus::of(vec![sample(false), beta]));
        let requests: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("weir_kv_requests_total"))
            .collect();
        assert_eq!(
            requests,
            [
                "weir_kv_requests_total{pool=\"alpha\"} 10",
                "weir_kv_requests_total{pool=\"beta\"} 4"
            ],
            "{t}"
        );
        assert_eq!(
            t.matches("# TYPE weir_kv_requests counter").count(),
            1,
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l == "weir_kv_server_requests_total{pool=\"beta\",server=\"cache-a\"} 7"),
            "{t}"
        );
    }
}
