//! `weir status`'s human table, rendered from the status that
//! weir-control collects (and serves as JSON).

use std::fmt::Write as _;

use serde::Serialize;
use weir_config::PolicyName;
use weir_control::status::{BgpView, ControllerSnapshot, Status, Verdict};

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// A value as the configuration spells it (`awfd`, `keep`, `passive`).
fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// The controller's part of the human output.
fn render_controller(o: &mut String, c: &ControllerSnapshot) {
    let policy = match c.policy {
        // Only AWFD takes m; the other policies are fixed points of it.
        PolicyName::Awfd => format!("policy=awfd m={}", c.m),
        PolicyName::Static => {
            "policy=static (the configured weights, health checks applied)".into()
        }
        p => format!("policy={}", word(&p)),
    };
    let telemetry = c
        .telemetry
        .map_or(String::new(), |t| format!(" telemetry={}", word(&t)));
    let _ = writeln!(
        o,
        "\ncontroller: {policy} interval={}ms{telemetry} on_agent_silent={} tables_published={} entries_written={}",
        c.update_interval_ms,
        word(&c.on_agent_silent),
        c.tables_published,
        c.entries_written
    );
    for v in &c.vips {
        let _ = writeln!(o, "  VIP {} table=v{}", v.name, v.table_version);
        let _ = writeln!(
            o,
            "    {:<22} {:>10} {:>10} {:>10} {:>6} {:>5} {:>6} {:>8} {:>6}  agent errors",
            "DIP", "capacity", "load", "available", "weight", "class", "share", "health", "misses"
        );
        for d in &v.dips {
            let errors: Vec<String> = d
                .agent_errors
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            let _ = writeln!(
                o,
                "    {:<22} {:>10} {:>10} {:>10} {:>6} {:>5} {:>6} {:>8} {:>6}  {}",
                format!("{}:{}", d.address, d.port),
                opt(d.capacity, 1),
                opt(d.load, 1),
                opt(d.available, 1),
                d.weight,
                d.class.map_or("-".into(), |k| format!("B{k}")),
                d.share.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)),
                match d.healthy {
                    None => "-",
                    Some(true) => "up",
                    Some(false) => "FAILING",
                },
                if d.agent_silent {
                    format!("{}!", d.agent_misses)
                } else {
                    d.agent_misses.to_string()
                },
                if errors.is_empty() {
                    "-".into()
                } else {
                    errors.join(" ")
                }
            );
        }
    }
}

/// One line per worker: HNLB's utilization (eq. 2/3) and its parts, the
/// software table, socket drops, and the offload counters (hybrid).
fn render_workers(o: &mut String, workers: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let _ = writeln!(o, "\nworkers:");
    for w in workers.as_array().into_iter().flatten() {
        let u = &w["utilization"];
        let (busy, all) = (n(&u["busy_cycles"]), n(&u["cycles"]).max(1));
        let (pkts, bursts, max) = (n(&u["packets"]), n(&u["bursts"]), n(&u["max_burst"]).max(1));
        let fill = if bursts == 0 {
            0.0
        } else {
            pkts as f64 / bursts as f64 / max as f64
        };
        let sockets = w["sockets"].as_array().cloned().unwrap_or_default();
        let sum = |k: &str| sockets.iter().map(|s| n(&s[k])).sum::<u64>();
        let _ = writeln!(
            o,
            "  cpu {}: utilization {:.1}% (busy {:.1}% x burst fill {:.2}), {} packets in {} bursts, \
             connections {} (half-open {}), rx {} tx {}, drops: rx ring full {} fill ring empty {} \
             tx ring full {}",
            n(&w["cpu"]),
            100.0 * busy as f64 / all as f64 * fill,
            100.0 * busy as f64 / all as f64,
            fill,
            pkts,
            bursts,
            n(&w["connections"]),
            n(&w["half_open"]),
            sum("rx_packets"),
            sum("tx_packets"),
            sum("rx_ring_full"),
            sum("fill_ring_empty"),
            sum("tx_ring_full"),
        );
        let f = &w["offload"];
        if f.is_object() {
            let _ = writeln!(
                o,
                "    fast table {}/{}: admitted {} promoted {} demoted idle {} closed {} light {}",
                n(&f["occupancy"]),
                n(&f["capacity"]),
                n(&f["admitted"]),
                n(&f["promoted"]),
                n(&f["demoted_idle"]),
                n(&f["demoted_closed"]),
                n(&f["demoted_light"]),
            );
        }
        if let Some(e) = w["error"].as_str() {
            let _ = writeln!(o, "    last error: {e}");
        }
    }
}

/// The BGP part: the speaker, each neighbour's session and BFD, and each
/// VIP announced or why not.
fn render_bgp(o: &mut String, b: &BgpView) {
    let _ = writeln!(
        o,
        "\nbgp: AS {}, router id {}, speaker {}{}",
        b.local_as,
        b.router_id,
        match (&b.speaker_pid, &b.speaker_error) {
            (_, Some(e)) => format!("NOT RUNNING ({e})"),
            (Some(pid), None) => format!("pid {pid}"),
            (None, None) => "starting".to_string(),
        },
        if b.drained { ", node DRAINED" } else { "" }
    );
    for n in &b.neighbours {
        let _ = writeln!(
            o,
            "  neighbour {:<24} AS {:<10} {}{}{}",
            n.address,
            n.remote_as,
            n.session,
            n.bfd
                .as_ref()
                .map_or(String::new(), |s| format!(", BFD {s}")),
            if n.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", n.detail)
            }
        );
    }
    for v in &b.vips {
        let _ = writeln!(
            o,
            "  vip {:<16} {:<24} {}",
            v.name,
            v.prefix,
            match &v.why_not {
                None if v.announced && v.depreferred => {
                    "announced de-preferred (node drained)".to_string()
                }
                None if v.announced => "announced".to_string(),
                None => "withdrawn".to_string(),
                Some(why) => format!("withdrawn: {why}"),
            }
        );
    }
}

/// The cluster's part: etcd, the leader, each node's table versions and
/// connection sync, and what this node could not apply.
fn render_cluster(o: &mut String, c: &weir_cluster::view::ClusterView) {
    let etcd = match (c.etcd_ok, c.etcd_down_since_unix_ms) {
        (true, _) => "etcd ok".to_string(),
        (false, since) => format!(
            "etcd UNREACHABLE{}: every node keeps its tables ({})",
            since.map_or(String::new(), |t| format!(
                " for {:.1} s",
                c.at_unix_ms.saturating_sub(t) as f64 / 1000.0
            )),
            c.etcd_error.as_deref().unwrap_or("no answer")
        ),
    };
    let _ = writeln!(
        o,
        "\ncluster {}: node {}{}, leader {}, {etcd}",
        c.prefix,
        c.node,
        if c.is_leader { " (leads)" } else { "" },
        c.leader
            .as_deref()
            .unwrap_or("NONE (an election is under way)"),
    );
    for t in &c.tables {
        let _ = writeln!(
            o,
            "  VIP {} table=v{} published by {} {:.1} s ago",
            t.vip,
            t.version,
            t.leader,
            c.at_unix_ms.saturating_sub(t.published_unix_ms) as f64 / 1000.0
        );
    }
    let _ = writeln!(
        o,
        "  {:<16} {:>6} {:>5} {:<24} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "node",
        "leader",
        "ready",
        "tables",
        "apply max",
        "sent",
        "received",
        "installed",
        "dropped",
        "lag p99"
    );
    for n in &c.nodes {
        let st = n.status.as_ref();
        let tables = st.map_or("?".to_string(), |s| {
            s.tables
                .iter()
                .map(|(v, a)| format!("{v}={}", a.version.map_or("-".into(), |x| format!("v{x}"))))
                .collect::<Vec<_>>()
                .join(" ")
        });
        let sync = st.and_then(|s| s.sync.as_ref());
        let num = |f: fn(&weir_cluster::sync::stats::Counters) -> u64| {
            sync.map_or("-".to_string(), |c| f(c).to_string())
        };
        let _ = writeln!(
            o,
            "  {:<16} {:>6} {:>5} {:<24} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
            n.name,
            if n.leader { "*" } else { "" },
            st.map_or("?", |s| if s.ready { "yes" } else { "no" }),
            tables,
            st.and_then(|s| s.apply_delay_max_ms)
                .map_or("-".into(), |d| format!("{d:.0} ms")),
            num(|c| c.sent_records),
            num(|c| c.received_records),
            num(|c| c.installed),
            num(|c| c.dropped()),
            sync.and_then(|c| c.lag_p99_us)
                .map_or("-".into(), |us| format!("<{us} us")),
        );
    }
    if let Some(j) = &c.join {
        let _ = writeln!(
            o,
            "  joined: {} established connections from {} ({} received) in {} ms",
            j.total,
            j.from.as_deref().unwrap_or("no peer"),
            j.received,
            j.took_ms
        );
    }
    if let Some(s) = &c.this.sync {
        let _ = writeln!(
            o,
            "  sync here: announced={} lost={} peer_entries={} present={} unknown={} \
             dropped: full={} install_error={} malformed={} oversized={} unauthenticated={} \
             replayed={}",
            s.announced,
            s.announce_lost,
            s.peer_entries,
            s.present,
            s.unknown,
            s.dropped_full,
            s.install_errors,
            s.dropped_malformed,
            s.dropped_oversized,
            s.dropped_unauthenticated,
            s.dropped_replayed
        );
        let _ = writeln!(
            o,
            "  bulks here: served={} records={} challenges={} refused: busy={} unknown_member={} \
             address_mismatch={} stale_challenge={} rate_limited={}",
            s.bulks_served,
            s.bulk_records_sent,
            s.bulk_challenges,
            s.bulks_refused,
            s.bulk_refused_unknown_member,
            s.bulk_refused_address_mismatch,
            s.bulk_refused_stale_challenge,
            s.bulk_refused_rate_limited
        );
    }
    for (vip, a) in &c.this.tables {
        if let Some(why) = &a.skew {
            let _ = writeln!(o, "  NOT APPLIED here, VIP {vip}: {why}");
        }
    }
}

/// The human table.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    for a in s.xdp_attach.iter().flatten() {
        let _ = if a.attached {
            writeln!(o, "xdp on {}: attached", a.interface)
        } else {
            writeln!(o, "xdp on {}: NOT ATTACHED: {}", a.interface, a.warning())
        };
    }
    for t in s.redirect_targets.iter().flatten() {
        let problem = t.problem.as_deref().unwrap_or("");
        let fix = t.fix.as_deref().unwrap_or("");
        let _ = match t.verdict {
            Verdict::Ok => Ok(()),
            Verdict::Drops => writeln!(
                o,
                "send by {}: FRAMES DROPPED: {problem}; fix: {fix}",
                t.interface
            ),
            Verdict::Unchecked => {
                writeln!(o, "send by {}: unchecked: {problem}; {fix}", t.interface)
            }
        };
    }
    let c = &s.connections;
    let _ = writeln!(
        o,
        "connections: {} established, {} closing, {} half-open",
        c.established, c.closing, c.half_open
    );
    for v in &s.vips {
        let _ = writeln!(
            o,
            "\nVIP {} {}:{}/{} mode={} table=v{} classes={:?} packets={} new_conns={}",
            v.name.as_deref().unwrap_or("-"),
            v.address,
            v.port,
            v.protocol,
            v.mode,
            v.table_version,
            v.classes,
            v.packets,
            v.new_conns
        );
        let _ = writeln!(
            o,
            "  {:>5}  {:<40} {:>6} {:>6} {:>12} {:>10}",
            "slot", "DIP", "port", "weight", "packets", "new_conns"
        );
        for d in &v.dips {
            let _ = writeln!(
                o,
                "  {:>5}  {:<40} {:>6} {:>6} {:>12} {:>10}",
                d.slot,
                d.address,
                d.port.map_or("-".into(), |p| p.to_string()),
                d.weight,
                d.packets,
                d.new_conns
            );
        }
        if let Some(q) = &v.quic {
            let c = &q.counters;
            let _ = writeln!(
                o,
                "  quic: server_id_len={} config_id={} cid_routed={} cid_fallback={} cid_unknown={} \
                 reused_tuple={}",
                q.server_id_len,
                q.config_id,
                c.cid_routed,
                c.cid_fallback,
                c.cid_unknown,
                c.reused_tuple
            );
            for d in &v.dips {
                if let Some(c) = &d.quic {
                    let _ = writeln!(
                        o,
                        "  {:>5}  quic: cid_routed={} cid_fallback={} cid_unknown={} reused_tuple={}",
                        d.slot, c.cid_routed, c.cid_fallback, c.cid_unknown, c.reused_tuple
                    );
                }
            }
        }
    }
    match &s.controller {
        Some(c) => render_controller(&mut o, c),
        None => {
            let _ = writeln!(o, "\ncontroller: none");
        }
    }
    if let Some(a) = &s.software_accounting {
        let _ = writeln!(
            o,
            "\nsoftware tier: XDP steered {} since start: received {}, dropped by the kernel {}, \
             unaccounted {} (in flight while traffic runs)",
            a.steered, a.received, a.kernel_dropped, a.unaccounted
        );
    }
    if let Some(w) = &s.workers {
        render_workers(&mut o, w);
    }
    if let Some(c) = &s.cluster {
        render_cluster(&mut o, c);
    }
    if let Some(b) = &s.bgp {
        render_bgp(&mut o, b);
    }
    let _ = writeln!(o, "\ncounters:");
    for (name, v) in &s.counters {
        if *v > 0 {
            let _ = writeln!(o, "  {name:<20} {v}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_of(text: &str, needle: &str) -> String {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
            .to_string()
    }
    use weir_config::{OnSilent, PolicyName, TelemetryKind};
    use weir_control::status::{
        Connections, ControllerSnapshot as Snapshot, DipSnapshot, IfaceAttach, VipSnapshot,
    };

    #[test]
    fn the_human_output_shows_the_controller_view() {
        let dip = |addr: &str, weight, healthy, silent| DipSnapshot {
            slot: 0,
            address: addr.into(),
            port: 8080,
            capacity: Some(200.0),
            load: Some(50.0),
            available: Some(150.0),
            weight,
            class: (weight > 0).then_some(weight),
            share: Some(0.25),
            healthy,
            health_checks: 4,
            health_failures: 0,
            agent_misses: if silent { 5 } else { 0 },
            agent_silent: silent,
            agent_errors: if silent {
                [("timeout".to_string(), 5)].into_iter().collect()
            } else {
                Default::default()
            },
            last_error: None,
        };
        let st = Status {
            connections: Connections {
                established: 3,
                half_open: 1,
                closing: 2,
                counted_at_unix_ms: 0,
            },
            vips: Vec::new(),
            counters: vec![("rx".into(), 9)],
            controller: Some(Snapshot {
                policy: PolicyName::Awfd,
                m: 4,
                update_interval_ms: 100,
                telemetry: Some(TelemetryKind::Agent),
                on_agent_silent: OnSilent::Drain,
                at_unix_ms: 0,
                ticks: 10,
                tables_published: 3,
                entries_written: 7,
                vips: vec![VipSnapshot {
                    name: "web".into(),
                    vip_id: 0,
                    table_version: 4,
                    dips: vec![
                        dip("10.0.0.1", 4, Some(true), false),
                        dip("10.0.0.2", 0, Some(false), true),
                    ],
                }],
            }),
            workers: Some(serde_json::json!([{
                "cpu": 1,
                "error": null,
                "connections": 7,
                "half_open": 2,
                "utilization": {"cycles": 1000, "busy_cycles": 500, "packets": 64,
                                "bursts": 4, "max_burst": 32},
                "sockets": [{"rx_packets": 60, "tx_packets": 50, "rx_ring_full": 3,
                             "fill_ring_empty": 0, "tx_ring_full": 1}],
                "offload": {"occupancy": 5, "capacity": 16, "admitted": 5, "promoted": 2,
                            "demoted_idle": 1, "demoted_closed": 0, "demoted_light": 0}
            }])),
            cluster: None,
            software_accounting: None,
            xdp_attach: None,
            redirect_targets: None,
            bgp: None,
        };
        let text = render(&st);
        // 50% busy, bursts of 16 of 32: HNLB's utilization reads 25%.
        let worker = row_of(&text, "cpu 1:");
        assert!(
            worker.contains("utilization 25.0%")
                && worker.contains("busy 50.0%")
                && worker.contains("burst fill 0.50")
                && worker.contains("rx ring full 3"),
            "{worker}"
        );
        assert!(
            row_of(&text, "fast table 5/16").contains("promoted 2"),
            "{text}"
        );
        // The configuration's words, not Rust's names.
        assert!(
            text.contains(
                "controller: policy=awfd m=4 interval=100ms telemetry=agent on_agent_silent=drain"
            ),
            "{text}"
        );
        assert!(
            text.contains("connections: 3 established, 2 closing, 1 half-open"),
            "{text}"
        );
        let row = |a: &str| row_of(&text, a);
        let up = row("10.0.0.1:8080");
        assert!(
            up.contains("200.0") && up.contains("B4") && up.contains("25%") && up.contains(" up "),
            "{up}"
        );
        let down = row("10.0.0.2:8080");
        assert!(
            down.contains("FAILING") && down.contains("5!") && down.contains("timeout=5"),
            "{down}"
        );
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(
            json["controller"]["vips"][0]["dips"][1]["agent_silent"],
            true
        );
        // The API's shape: counters by name, connections by kind.
        assert_eq!(json["counters"], serde_json::json!({"rx": 9}));
        assert_eq!(json["connections"]["closing"], 2);
        // Health checks only: no m; no controller at all: "none".
        let mut st = st;
        if let Some(c) = st.controller.as_mut() {
            c.policy = PolicyName::Static;
            c.m = 0;
            c.telemetry = None;
        }
        let text = render(&st);
        let line = row_of(&text, "controller:");
        assert!(
            line.contains("policy=static") && !line.contains("m=") && !line.contains("telemetry"),
            "{line}"
        );
        st.controller = None;
        assert_eq!(row_of(&render(&st), "controller:"), "controller: none");
    }
    #[test]
    fn the_human_output_shows_the_cluster() {
        use weir_cluster::sync::stats::Counters;
        use weir_cluster::view::*;
        let applied = |v| AppliedTable {
            version: Some(v),
            applied_unix_ms: Some(9_000),
            delay_ms: Some(2.0),
            skew: None,
        };
        let status = |name: &str, v, sync| NodeStatus {
            name: name.into(),
            at_unix_ms: 9_000,
            tables: [("web".to_string(), applied(v))].into_iter().collect(),
            apply_delay_max_ms: Some(3.0),
            sync,
            ready: true,
        };
        let counters = Counters {
            sent_records: 120,
            received_records: 340,
            installed: 338,
            dropped_replayed: 2,
            bulk_refused_address_mismatch: 3,
            lag_p99_us: Some(512),
            ..Default::default()
        };
        let mut this = status("lb-a", 12, Some(counters));
        this.tables.insert(
            "api".into(),
            AppliedTable {
                version: None,
                applied_unix_ms: None,
                delay_ms: None,
                skew: Some("the leader's table names DIP 10.0.0.9".into()),
            },
        );
        let view = ClusterView {
            node: "lb-a".into(),
            prefix: "/weir/prod".into(),
            etcd: vec!["10.0.0.1:2379".parse().unwrap()],
            etcd_ok: false,
            etcd_error: Some("etcd unreachable (connection refused)".into()),
            etcd_down_since_unix_ms: Some(6_000),
            leader: Some("lb-b".into()),
            is_leader: false,
            terms_won: 0,
            nodes: vec![
                NodeView {
                    name: "lb-a".into(),
                    sync: None,
                    leader: false,
                    status: Some(this.clone()),
                },
                NodeView {
                    name: "lb-b".into(),
                    sync: None,
                    leader: true,
                    status: Some(status("lb-b", 12, None)),
                },
            ],
            tables: vec![TableView {
                vip: "web".into(),
                version: 12,
                leader: "lb-b".into(),
                published_unix_ms: 8_500,
            }],
            this,
            join: Some(JoinView {
                from: Some("lb-b".into()),
                total: 300,
                received: 300,
                took_ms: 45,
            }),
            at_unix_ms: 9_000,
        };
        let mut st = collect_empty();
        st.cluster = Some(view);
        let text = render(&st);
        let head = row_of(&text, "cluster /weir/prod");
        assert!(
            head.contains("leader lb-b") && head.contains("etcd UNREACHABLE for 3.0 s"),
            "{head}"
        );
        assert!(head.contains("keeps its tables"), "{head}");
        let a = row_of(&text, "  lb-a ");
        assert!(
            a.contains("web=v12")
                && a.contains("api=-")
                && a.contains("120")
                && a.contains("<512 us"),
            "{a}"
        );
        assert!(a.contains(" 2 "), "dropped: {a}");
        assert!(row_of(&text, "  lb-b ").contains('*'));
        assert!(row_of(&text, "VIP web table=v12").contains("0.5 s ago"));
        assert!(row_of(&text, "joined: 300").contains("from lb-b"));
        let bulks = row_of(&text, "  bulks here:");
        assert!(
            bulks.contains("address_mismatch=3") && bulks.contains("rate_limited=0"),
            "{bulks}"
        );
        assert!(row_of(&text, "NOT APPLIED here, VIP api").contains("10.0.0.9"));
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["cluster"]["leader"], "lb-b");
    }

    fn collect_empty() -> Status {
        Status {
            connections: Connections {
                established: 0,
                half_open: 0,
                closing: 0,
                counted_at_unix_ms: 0,
            },
            vips: Vec::new(),
            counters: Vec::new(),
            controller: None,
            workers: None,
            cluster: None,
            software_accounting: None,
            xdp_attach: None,
            redirect_targets: None,
            bgp: None,
        }
    }

    #[test]
    fn a_detached_interface_is_a_line_of_its_own() {
        let mut st = collect_empty();
        st.xdp_attach = Some(vec![
            IfaceAttach::of("wc0", 5, Some(5), |_| None),
            IfaceAttach::of("wb1", 5, None, |_| None),
        ]);
        let text = render(&st);
        assert!(text.contains("xdp on wc0: attached\n"), "{text}");
        assert!(
            text.contains(
                "xdp on wb1: NOT ATTACHED: wb1: weir's XDP program is no longer attached"
            ),
            "{text}"
        );
    }
}
