//! `weir kv`'s Prometheus metrics: the proxy's counters and, with the UDP
//! path, the XDP switch's and its cache's, encoded by prometheus-client
//! from one [`Status`] read per scrape (OpenMetrics text; counter samples
//! carry `_total`).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::health::ServerState;
use crate::status::{ServerStatus, Status};

/// The exposition text of `st`.
pub fn render(st: Status) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposed(st)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

#[derive(Debug)]
struct Exposed(Status);

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

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

/// `(server label, count)` for each server, in the configuration's order.
fn per_server<'a>(
    servers: &'a [ServerStatus],
    counts: &'a [u64],
) -> impl Iterator<Item = ([(&'static str, &'a str); 1], u64)> + 'a {
    servers.iter().enumerate().map(|(i, srv)| {
        (
            [("server", srv.name.as_str())],
            counts.get(i).copied().unwrap_or(0),
        )
    })
}

/// The servers' health: a state set (1 on the current state), the time the
/// state began, and failures.
fn server_health(enc: &mut DescriptorEncoder, servers: &[ServerStatus]) -> fmt::Result {
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_state",
        "Each server's state, 1 on the current one (unknown: nothing sent yet).",
        None,
        MetricType::Gauge,
    )?;
    for srv in servers {
        for state in [
            ServerState::Unknown,
            ServerState::Up,
            ServerState::Down,
            ServerState::Ejected,
        ] {
            let labels = [
                ("server", srv.name.as_str()),
                ("address", srv.address.as_str()),
                ("state", state.as_str()),
            ];
            ConstGauge::new(i64::from(srv.health.state == state))
                .encode(fam.encode_family(&labels)?)?;
        }
    }
    let mut fam = enc.encode_descriptor(
        "weir_kv_server_state_since_seconds",
        "When each server's state began (Unix time).",
        None,
        MetricType::Gauge,
    )?;
    for srv in servers {
        if let Some(ms) = srv.health.since_unix_ms {
            ConstGauge::new(ms as f64 / 1e3)
                .encode(fam.encode_family(&[("server", srv.name.as_str())])?)?;
        }
    }
    family(
        enc,
        "weir_kv_server_failures",
        "Connections or requests to each server that failed.",
        servers
            .iter()
            .map(|srv| ([("server", srv.name.as_str())], srv.health.failures)),
    )?;
    family(
        enc,
        "weir_kv_server_ejections",
        "Times each server was ejected (auto_eject_hosts).",
        servers
            .iter()
            .map(|srv| ([("server", srv.name.as_str())], srv.health.ejections)),
    )?;
    family(
        enc,
        "weir_kv_server_returns",
        "Times each ejected server returned to the ring after server_retry_timeout.",
        servers
            .iter()
            .map(|srv| ([("server", srv.name.as_str())], srv.health.returns)),
    )
}

impl Collector for Exposed {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let st = &self.0;
        let s = &st.stats;
        for (name, help, v) in [
            (
                "weir_kv_requests",
                "Requests received from clients.",
                s.requests,
            ),
            ("weir_kv_writes", "Mutating requests.", s.writes),
            (
                "weir_kv_get_keys",
                "Keys asked for by get/gets.",
                s.get_keys,
            ),
            ("weir_kv_get_hits", "Keys found.", s.get_hits),
            ("weir_kv_get_misses", "Keys not found.", s.get_misses),
            (
                "weir_kv_client_errors",
                "Bad requests answered with an error.",
                s.client_errors,
            ),
            (
                "weir_kv_server_errors",
                "SERVER_ERROR replies.",
                s.server_errors,
            ),
            ("weir_kv_timeouts", "Requests timed out.", s.timeouts),
            (
                "weir_kv_invalidations",
                "Cache invalidations.",
                s.invalidations,
            ),
            (
                "weir_kv_invalidation_failures",
                "Failed invalidations (write refused).",
                s.invalidation_failures,
            ),
            (
                "weir_kv_client_connections",
                "Client connections accepted.",
                s.client_connections_total,
            ),
            (
                "weir_kv_socket_reads",
                "Reads of client and server sockets (system calls).",
                s.socket_reads,
            ),
            (
                "weir_kv_socket_writes",
                "Writes to client and server sockets (system calls).",
                s.socket_writes,
            ),
            (
                "weir_kv_idle_reads",
                "Socket reads that found nothing to read.",
                s.idle_reads,
            ),
        ] {
            counter(&mut enc, name, help, v)?;
        }
        gauge(
            &mut enc,
            "weir_kv_client_connections_open",
            "Open client connections.",
            s.client_connections as i64,
        )?;
        family(
            &mut enc,
            "weir_kv_server_requests",
            "Requests sent to each server.",
            per_server(&st.servers, &s.server_requests),
        )?;
        server_health(&mut enc, &st.servers)?;
        let Some(u) = &st.udp else { return Ok(()) };
        for (name, help, v) in [
            (
                "weir_kv_udp_cache_hits",
                "GETs answered by XDP from the in-switch cache.",
                u.cache_hits,
            ),
            (
                "weir_kv_udp_cache_misses",
                "Single-key GETs the cache could not answer.",
                u.cache_misses,
            ),
            (
                "weir_kv_udp_cache_installs",
                "Hot values installed.",
                u.installs,
            ),
            (
                "weir_kv_udp_cache_install_races",
                "Installs refused because a write came after the ticket.",
                u.install_races,
            ),
            (
                "weir_kv_udp_cache_evictions",
                "Keys evicted as no longer hot.",
                u.evictions,
            ),
            (
                "weir_kv_udp_hotkey_fetch_errors",
                "Failed fetches of hot values.",
                u.fetch_errors,
            ),
            ("weir_kv_udp_samples", "Keys sampled by XDP.", u.samples),
            (
                "weir_kv_bpf_run_time_ns",
                "BPF run time of weir_kv (kernel.bpf_stats_enabled=1).",
                u.bpf_run_time_ns,
            ),
        ] {
            counter(&mut enc, name, help, v)?;
        }
        gauge(
            &mut enc,
            "weir_kv_udp_hot_keys",
            "Hot keys now.",
            u.hot_keys.len() as i64,
        )?;
        gauge(
            &mut enc,
            "weir_kv_udp_cached_keys",
            "Keys in the cache map.",
            u.cached_keys as i64,
        )?;
        family(
            &mut enc,
            "weir_kv_xdp",
            "XDP counters of weir_kv by name.",
            u.xdp.iter().map(|(k, v)| ([("counter", k.as_str())], *v)),
        )?;
        family(
            &mut enc,
            "weir_kv_udp_server_requests",
            "Requests XDP forwarded to each server.",
            per_server(&st.servers, &u.server_requests),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::tests::sample;

    #[test]
    fn every_counter_is_exposed_under_its_name() {
        let t = render(sample(true));
        for line in [
            "weir_kv_requests_total 10",
            "weir_kv_get_misses_total 2",
            "weir_kv_client_connections_open 2",
            "weir_kv_server_requests_total{server=\"cache-a\"} 7",
            "weir_kv_server_state{server=\"10.0.0.2:11211\",address=\"10.0.0.2:11211\",state=\"down\"} 1",
            "weir_kv_server_state{server=\"cache-a\",address=\"10.0.0.1:11211\",state=\"down\"} 0",
            "weir_kv_server_state_since_seconds{server=\"10.0.0.2:11211\"} 50.0",
            "weir_kv_server_failures_total{server=\"10.0.0.2:11211\"} 3",
            "weir_kv_udp_cache_hits_total 3",
            "weir_kv_udp_cached_keys 1",
            "weir_kv_xdp_total{counter=\"rx\"} 9",
            "weir_kv_udp_server_requests_total{server=\"10.0.0.2:11211\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "no `{line}` in\n{t}");
        }
        let plain = render(sample(false));
        assert!(!plain.contains("weir_kv_udp"), "{plain}");
        assert!(plain.ends_with("# EOF\n"));
    }
}
