//! What a reload (or an API edit) can change in a running `weir serve`, key
//! by key. The VIPs and their DIPs and health checks, and `[controller]`
//! (its telemetry included), apply live. `[dataplane]` (sizes, tier,
//! interfaces, timeouts, verdicts: load-time constants of the program and
//! of its maps), `[api]`, `[metrics]` and `[cluster]` (listeners and
//! members started once) and `[bgp]` (the speaker's sessions; only its
//! `min_healthy_dips` and `drain` apply live) need a restart; a reload that changes any of them
//! is refused by name, so the daemon never claims a setting it does not run.

use std::fmt::Debug;

use toml::Spanned;

use weir_config::Config;

/// The value of one setting, comparable across two configurations (spans
/// and defaults aside: a key written with its default value is no change).
/// A size whose default follows another key is compared as written: the
/// key that changed is the one named.
type Getter = fn(&Config) -> String;

fn v<T: Debug>(s: &Spanned<T>) -> String {
    format!("{:?}", s.get_ref())
}

fn o<T: Debug>(s: &Option<Spanned<T>>) -> String {
    format!("{:?}", s.as_ref().map(|x| x.get_ref()))
}

fn p<T: Debug>(x: &T) -> String {
    format!("{x:?}")
}

/// Every setting that only a restart changes.
const RESTART_ONLY: &[(&str, Getter)] = &[
    ("dataplane.interfaces", |c| v(&c.dataplane.interfaces)),
    ("dataplane.xdp_mode", |c| p(&c.dataplane.xdp_mode)),
    ("dataplane.conn_table_size", |c| {
        p(&c.dataplane.conn_table_size)
    }),
    ("dataplane.conn_table_size_v6", |c| {
        o(&c.dataplane.conn_table_size_v6)
    }),
    ("dataplane.conn_lru", |c| p(&c.dataplane.conn_lru)),
    ("dataplane.half_open_table_size", |c| {
        p(&c.dataplane.half_open_table_size)
    }),
    ("dataplane.timeouts.tcp_half_open_s", |c| {
        v(&c.dataplane.timeouts.tcp_half_open_s)
    }),
    ("dataplane.timeouts.tcp_established_s", |c| {
        v(&c.dataplane.timeouts.tcp_established_s)
    }),
    ("dataplane.timeouts.tcp_closing_s", |c| {
        v(&c.dataplane.timeouts.tcp_closing_s)
    }),
    ("dataplane.timeouts.tcp_closed_s", |c| {
        v(&c.dataplane.timeouts.tcp_closed_s)
    }),
    ("dataplane.timeouts.udp_s", |c| {
        v(&c.dataplane.timeouts.udp_s)
    }),
    ("dataplane.max_vips", |c| p(&c.dataplane.max_vips)),
    ("dataplane.max_dips", |c| p(&c.dataplane.max_dips)),
    ("dataplane.not_vip", |c| p(&c.dataplane.not_vip)),
    ("dataplane.icmp", |c| p(&c.dataplane.icmp)),
    ("dataplane.fragments", |c| p(&c.dataplane.fragments)),
    ("dataplane.malformed", |c| p(&c.dataplane.malformed)),
    ("dataplane.tcp_nonsyn_miss", |c| {
        p(&c.dataplane.tcp_nonsyn_miss)
    }),
    ("dataplane.fib_lookup", |c| p(&c.dataplane.fib_lookup)),
    ("dataplane.pin_dir", |c| p(&c.dataplane.pin_dir)),
    ("dataplane.hash_seed", |c| p(&c.dataplane.hash_seed)),
    ("dataplane.tier", |c| p(&c.dataplane.tier)),
    ("dataplane.fast_table_size", |c| {
        o(&c.dataplane.fast_table_size)
    }),
    ("dataplane.offload", |c| v(&c.dataplane.offload)),
    ("dataplane.workers", |c| v(&c.dataplane.workers)),
    ("dataplane.distribution", |c| v(&c.dataplane.distribution)),
    ("dataplane.spray_scope", |c| v(&c.dataplane.spray_scope)),
    ("dataplane.reorder", |c| v(&c.dataplane.reorder)),
    ("dataplane.reorder_hold_us", |c| {
        o(&c.dataplane.reorder_hold_us)
    }),
    ("dataplane.syn_rate", |c| v(&c.dataplane.syn_rate)),
    ("dataplane.syn_burst", |c| v(&c.dataplane.syn_burst)),
    ("dataplane.cost_cycles", |c| o(&c.dataplane.cost_cycles)),
    ("dataplane.encap_mtu", |c| v(&c.dataplane.encap_mtu)),
    ("dataplane.encap_source_v4", |c| {
        o(&c.dataplane.encap_source_v4)
    }),
    ("dataplane.encap_source_v6", |c| {
        o(&c.dataplane.encap_source_v6)
    }),
    ("dataplane.gue_port", |c| v(&c.dataplane.gue_port)),
    ("api.listen", |c| v(&c.api.listen)),
    ("api.token", |c| o(&c.api.token)),
    ("api.token_file", |c| o(&c.api.token_file)),
    ("metrics", |c| p(&c.metrics.is_some())),
    ("metrics.listen", |c| {
        p(&c.metrics.as_ref().map(|m| *m.listen.get_ref()))
    }),
    ("cluster", |c| p(&c.cluster.is_some())),
    ("cluster.node", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.node)))
    }),
    ("cluster.etcd", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.etcd)))
    }),
    ("cluster.prefix", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.prefix)))
    }),
    ("cluster.lease_ttl_s", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.lease_ttl_s)))
    }),
    ("cluster.connection_sync", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.connection_sync)))
    }),
    ("cluster.sync_interface", |c| {
        p(&c.cluster.as_ref().map(|x| o(&x.sync_interface)))
    }),
    ("cluster.sync_port", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.sync_port)))
    }),
    ("cluster.sync_key_file", |c| {
        p(&c.cluster.as_ref().map(|x| o(&x.sync_key_file)))
    }),
    ("cluster.sync_max_entries", |c| {
        p(&c.cluster.as_ref().map(|x| o(&x.sync_max_entries)))
    }),
    ("cluster.join_timeout_ms", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.join_timeout_ms)))
    }),
    ("cluster.realtime", |c| {
        p(&c.cluster.as_ref().map(|x| v(&x.realtime)))
    }),
    ("bgp", |c| p(&c.bgp.is_some())),
    ("bgp.local_as", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.local_as)))
    }),
    ("bgp.router_id", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.router_id)))
    }),
    ("bgp.neighbour", |c| {
        p(&c.bgp.as_ref().map(|x| {
            x.neighbours
                .get_ref()
                .iter()
                .map(|n| (v(&n.address), v(&n.remote_as), v(&n.bfd)))
                .collect::<Vec<_>>()
        }))
    }),
    ("bgp.communities", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.communities)))
    }),
    ("bgp.med", |c| p(&c.bgp.as_ref().map(|x| o(&x.med)))),
    ("bgp.local_pref", |c| {
        p(&c.bgp.as_ref().map(|x| o(&x.local_pref)))
    }),
    ("bgp.hold_time_s", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.hold_time_s)))
    }),
    ("bgp.bfd_interval_ms", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.bfd_interval_ms)))
    }),
    ("bgp.bfd_multiplier", |c| {
        p(&c.bgp.as_ref().map(|x| v(&x.bfd_multiplier)))
    }),
    ("bgp.speaker", |c| p(&c.bgp.as_ref().map(|x| v(&x.speaker)))),
];

/// The `[controller]` settings, applied live (the controller reconfigures;
/// `telemetry` also switches the data plane's timing on or off).
const LIVE_CONTROLLER: &[(&str, Getter)] = &[
    ("controller", |c| p(&c.controller.is_some())),
    ("controller.policy", |c| {
        p(&c.controller.as_ref().map(|x| x.policy))
    }),
    ("controller.m", |c| {
        p(&c.controller.as_ref().map(|x| v(&x.m)))
    }),
    ("controller.update_interval_ms", |c| {
        p(&c.controller.as_ref().map(|x| v(&x.update_interval_ms)))
    }),
    ("controller.telemetry", |c| {
        p(&c.controller.as_ref().map(|x| x.telemetry))
    }),
    ("controller.ewma_alpha", |c| {
        p(&c.controller.as_ref().map(|x| v(&x.ewma_alpha)))
    }),
    ("controller.agent_timeout_ms", |c| {
        p(&c.controller.as_ref().map(|x| v(&x.agent_timeout_ms)))
    }),
    ("controller.on_agent_silent", |c| {
        p(&c.controller.as_ref().map(|x| x.on_agent_silent))
    }),
    ("controller.silent_after", |c| {
        p(&c.controller.as_ref().map(|x| v(&x.silent_after)))
    }),
];

fn changed(keys: &[(&'static str, Getter)], a: &Config, b: &Config) -> Vec<&'static str> {
    keys.iter()
        .filter(|(_, get)| get(a) != get(b))
        .map(|(k, _)| *k)
        .collect()
}

/// The restart-only settings `next` changes from `running`.
pub fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    changed(RESTART_ONLY, running, next)
}

/// The `[controller]` settings `next` changes from `running`.
pub fn controller_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    changed(LIVE_CONTROLLER, running, next)
}

/// Why a reload that changes `keys` is refused, and what to do.
pub fn refusal(keys: &[&str]) -> String {
    format!(
        "{} cannot change while weir serve runs; restart with `weir serve --takeover` to apply \
         {}",
        keys.join(", "),
        if keys.len() == 1 { "it" } else { "them" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[dataplane]\ninterfaces = [\"a\"]\n\n[[vip]]\nname = \"web\"\n\
                        address = \"10.0.0.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
                        [[vip.dip]]\naddress = \"10.0.1.2\"\n";

    fn cfg(text: &str) -> Config {
        Config::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn vips_and_the_controller_change_live_and_the_rest_needs_a_restart() {
        let base = cfg(BASE);
        // A moved line, or a default written out, is no change.
        let same = cfg(&BASE.replace(
            "interfaces = [\"a\"]\n",
            "\nconn_table_size = 1048576\ninterfaces = [\"a\"]\n",
        ));
        assert_eq!(base.dataplane.conn_table_size, 1 << 20, "the default moved");
        assert!(restart_only_changes(&base, &same).is_empty());
        // More DIPs and a controller: all live.
        let live = cfg(&format!(
            "{BASE}[[vip.dip]]\naddress = \"10.0.2.2\"\n\n[controller]\ntelemetry = \"passive\"\n"
        ));
        assert!(restart_only_changes(&base, &live).is_empty());
        assert_eq!(
            controller_changes(&base, &live),
            vec![
                "controller",
                "controller.policy",
                "controller.m",
                "controller.update_interval_ms",
                "controller.telemetry",
                "controller.ewma_alpha",
                "controller.agent_timeout_ms",
                "controller.on_agent_silent",
                "controller.silent_after"
            ]
        );
        // Sizes, interfaces, the API: named, each.
        let restart = cfg(&BASE.replace(
            "interfaces = [\"a\"]\n",
            "interfaces = [\"a\", \"b\"]\nconn_table_size = 1024\n\n[api]\nlisten = \"off\"\n",
        ));
        assert_eq!(
            restart_only_changes(&base, &restart),
            vec![
                "dataplane.interfaces",
                "dataplane.conn_table_size",
                "api.listen"
            ]
        );
        let e = refusal(&["dataplane.tier"]);
        assert!(
            e.starts_with("dataplane.tier cannot change while weir serve runs")
                && e.contains("restart with `weir serve --takeover` to apply it"),
            "{e}"
        );
    }

    #[test]
    fn bgp_needs_a_restart_but_its_health_minimum() {
        let bgp = |keys: &str| {
            cfg(&format!(
                "{BASE}\n[bgp]\nlocal_as = 65001\nrouter_id = \"10.0.0.11\"\n{keys}\n\
                 [[bgp.neighbour]]\naddress = \"10.0.0.254\"\nremote_as = 65000\n"
            ))
        };
        let base = bgp("");
        assert!(restart_only_changes(&base, &bgp("min_healthy_dips = 2")).is_empty());
        assert_eq!(
            restart_only_changes(&base, &bgp("hold_time_s = 30\nmed = 5")),
            vec!["bgp.med", "bgp.hold_time_s"]
        );
        assert_eq!(
            restart_only_changes(&cfg(BASE), &base),
            vec![
                "bgp",
                "bgp.local_as",
                "bgp.router_id",
                "bgp.neighbour",
                "bgp.communities",
                "bgp.med",
                "bgp.local_pref",
                "bgp.hold_time_s",
                "bgp.bfd_interval_ms",
                "bgp.bfd_multiplier",
                "bgp.speaker"
            ]
        );
    }
}
