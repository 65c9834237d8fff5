//! QUIC VIPs end to end with a real QUIC stack, in namespaces the test
//! builds and always removes (a client, weir and three backends): aioquic
//! HTTP/3 backends (lab/scripts/quic/backend.py) issue connection IDs that
//! carry their QUIC-LB server IDs, and aioquic HTTP/3 clients (client.py)
//! make GET requests on long-lived connections, each answered with status
//! 200 and the backend's name (an `x-backend` header and the body).
//!
//! - A nat and a dsr QUIC VIP: every request of a connection is answered by
//!   one backend while each client moves to a new source port and the next
//!   connection ID mid-connection, a weight change and a drain (through
//!   `weir dip`) and a `weir serve --takeover` happen; the drained backend
//!   keeps its connections and gets no new ones; packets are routed by
//!   connection ID (`cid_routed`) on the VIPs and on every DIP.
//! - Two nodes, no connection sync: connections made through one weir are
//!   carried on by a second one that never saw them (started afresh, with
//!   an empty connection table, after the first stopped), to the same
//!   backends, by the server IDs in their connection IDs alone; the
//!   clients also move to new source ports on the second node, so a
//!   5-tuple dispatch would scatter them.
//!
//! - A second QUIC stack: Debian's ngtcp2 HTTP/3 client against the
//!   aioquic backends, through both VIPs, each client moving to a new
//!   source port and connection ID before its requests are answered.
//!
//! The target is 0 broken connections.

use std::net::SocketAddr;
use std::time::Duration;

use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

mod common;
use common::quic::{
    assert_unbroken, backend_of_server_id, backends_of, count, ngtcp2_get, quic_status,
    server_id_of, QuicBackends, QuicClient, QuicConn, QuicLoad, CONFIG_ID, SERVER_IDS,
    SERVER_ID_LEN,
};
use common::temp::TempDir;
use common::{call, dataplane, dip, metrics, serial, start_daemon, status_text, vip, weir_in};
use weir_http::client::Method;

const PORT: u16 = 4433;
const NAT_VIP: &str = "10.77.100.1:4433";
const DSR_VIP: &str = "10.77.100.2:4433";
const API: &str = "127.0.0.1:9291";
const METRICS_PORT: u16 = 9292;

/// The nat VIP `quic` and the dsr VIP `quic-dsr` over the three backends.
fn config() -> String {
    let mut s = dataplane(3, "conn_table_size = 65536") + "\n[api]\nlisten = \"127.0.0.1:9291\"\n";
    for (name, address, mode) in [
        ("quic", "10.77.100.1", "nat"),
        ("quic-dsr", "10.77.100.2", "dsr"),
    ] {
        s += &vip(name, address, PORT, "udp", mode);
        s += &format!("quic = {{ server_id_len = {SERVER_ID_LEN}, config_id = {CONFIG_ID} }}\n");
        for (b, sid) in (1..).zip(SERVER_IDS) {
            s += &dip(b, &format!("server_id = \"{sid}\""));
        }
    }
    s
}

/// The nat VIP `quic` over backends 1 and 2 only, with the API and the
/// Prometheus metrics.
fn two_dip_config() -> String {
    let mut s = dataplane(3, "conn_table_size = 65536")
        + &format!(
            "\n[api]\nlisten = \"{API}\"\n\n[metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n"
        );
    s += &vip("quic", "10.77.100.1", PORT, "udp", "nat");
    s += &format!("quic = {{ server_id_len = {SERVER_ID_LEN}, config_id = {CONFIG_ID} }}\n");
    for (b, sid) in (1..).zip(&SERVER_IDS[..2]) {
        s += &dip(b, &format!("server_id = \"{sid}\""));
    }
    s
}

/// The value of the Prometheus sample `series` (name and labels) in `text`.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the metrics:\n{text}"))
}

/// `weir dip <args> --run-dir <d's>` in the load balancer's namespace.
fn weir_dip(lab: &Lab, d: &Daemon, args: &[&str]) -> String {
    let run_dir = d.run_dir();
    let mut all = vec!["dip"];
    all.extend_from_slice(args);
    all.extend(["--run-dir", run_dir.to_str().unwrap()]);
    let out = weir_in(&lab.lb, &all);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "weir {all:?}: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Long-lived connections: 100 requests 100 ms apart outlast the weight
/// change, the drain, the takeover and the new connections.
fn live_load(connections: usize) -> QuicLoad {
    QuicLoad {
        connections,
        requests: 100,
        interval: Duration::from_millis(100),
        migrate_after: 10,
        timeout: Duration::from_secs(3),
    }
}

/// New connections of one request each.
fn new_load(connections: usize) -> QuicLoad {
    QuicLoad {
        connections,
        requests: 1,
        interval: Duration::ZERO,
        migrate_after: 0,
        timeout: Duration::from_secs(3),
    }
}

#[test]
fn quic_connections_keep_their_backend_through_migration_weight_change_drain_and_takeover() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    let mut backends = QuicBackends::start(&lab, &SERVER_IDS, CONFIG_ID, PORT);
    let mut d = start_daemon(&lab, &config());
    let (nat, dsr): (SocketAddr, SocketAddr) = (NAT_VIP.parse().unwrap(), DSR_VIP.parse().unwrap());
    // New connections to every backend: a client port one of them used may
    // come back, while its 5-tuple entry lives, in a new connection after
    // the drain, which must not follow that entry to the drained backend.
    for v in [nat, dsr] {
        let conns = QuicClient::run(&lab, v, &new_load(24));
        assert_eq!(
            backends_of(&conns).len(),
            3,
            "new connections to {v} reach every backend"
        );
    }

    let mut live_nat = QuicClient::start(&lab, nat, &live_load(24));
    let mut live_dsr = QuicClient::start(&lab, dsr, &live_load(12));
    live_nat.wait_established();
    live_dsr.wait_established();
    // Past the clients' move to new ports (after request 10).
    std::thread::sleep(Duration::from_millis(1500));

    for vip in ["quic", "quic-dsr"] {
        let said = weir_dip(&lab, &d, &["weight", vip, "10.77.1.2", "3"]);
        assert!(said.contains("weight 1 -> 3"), "{said}");
        let said = weir_dip(&lab, &d, &["drain", vip, "10.77.2.2"]);
        assert!(said.contains("drained DIP 10.77.2.2"), "{said}");
    }
    d.restart().expect("weir serve --takeover");
    assert!(
        live_nat.running() && live_dsr.running(),
        "the live connections ended before the takeover; the test proves nothing"
    );
    let fresh: Vec<_> = [nat, dsr]
        .into_iter()
        .map(|v| (v, QuicClient::run(&lab, v, &new_load(24))))
        .collect();

    let nat_conns = live_nat.finish();
    let dsr_conns = live_dsr.finish();
    for (v, fresh) in &fresh {
        assert_unbroken("new connections after the drain", fresh, 1, false);
        let drained: Vec<_> = fresh
            .iter()
            .filter(|c| c.backend() == Some("backend-2"))
            .collect();
        assert!(
            drained.is_empty(),
            "the drained backend got new connections to {v}: {drained:?}"
        );
    }
    assert_unbroken("nat", &nat_conns, 100, true);
    assert_unbroken("dsr", &dsr_conns, 100, true);
    for (what, conns) in [("nat", &nat_conns), ("dsr", &dsr_conns)] {
        assert!(
            backends_of(conns).contains("backend-2"),
            "no {what} connection was on the drained backend to keep: {conns:?}"
        );
    }
    assert!(backends.all_running(), "a backend died");

    for vip in ["quic", "quic-dsr"] {
        let (q, dips) = quic_status(&d, vip);
        assert!(count(&q, "cid_routed") > 0, "{vip}: {q}");
        for (b, dq) in (1..).zip(&dips) {
            assert!(count(dq, "cid_routed") > 0, "{vip}, backend-{b}: {dq}");
        }
        // A new connection on a reused client port is counted for the VIP
        // and for the DIP whose entry it took; no DIP was removed here.
        let taken: u64 = dips.iter().map(|dq| count(dq, "reused_tuple")).sum();
        assert_eq!(count(&q, "reused_tuple"), taken, "{vip}: {q} {dips:?}");
    }
}

#[test]
fn a_second_node_without_connection_sync_routes_quic_connections_to_the_same_backends() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = QuicBackends::start(&lab, &SERVER_IDS, CONFIG_ID, PORT);
    let node_a = start_daemon(&lab, &config());
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    // The move to new ports comes on the second node, well after the switch.
    let load = QuicLoad {
        connections: 18,
        requests: 60,
        interval: Duration::from_millis(100),
        migrate_after: 45,
        timeout: Duration::from_secs(8),
    };
    let mut live = QuicClient::start(&lab, nat, &load);
    live.wait_established();
    std::thread::sleep(Duration::from_millis(500));

    // Node A goes with its state (pins, connection table); node B starts
    // from the same configuration and nothing else.
    drop(node_a);
    let node_b = start_daemon(&lab, &config());
    assert!(
        live.running(),
        "the connections ended before the second node took them; the test proves nothing"
    );
    let conns = live.finish();
    assert_unbroken("second node", &conns, 60, true);
    assert_eq!(backends_of(&conns).len(), 3, "{conns:?}");
    let (q, dips) = quic_status(&node_b, "quic");
    assert!(count(&q, "cid_routed") > 0, "{q}");
    for (b, dq) in (1..).zip(&dips) {
        assert!(count(dq, "cid_routed") > 0, "backend-{b}: {dq}");
    }
}

#[test]
fn an_ngtcp2_http3_client_is_served_through_quic_vips_by_one_backend_across_its_move() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = QuicBackends::start(&lab, &SERVER_IDS, CONFIG_ID, PORT);
    let d = start_daemon(&lab, &config());
    let dumps = TempDir::new("weir-e2e-quic-ngtcp2");
    const REQUESTS: usize = 4;
    for (name, v) in [("quic", NAT_VIP), ("quic-dsr", DSR_VIP)] {
        let vip: SocketAddr = v.parse().unwrap();
        for i in 0..6 {
            let run = ngtcp2_get(
                &lab,
                vip,
                REQUESTS,
                &dumps.path().join(format!("{name}-{i}")),
            );
            assert_eq!(run.exit, Some(0), "gtlsclient to {vip}: {run:?}");
            assert_eq!(run.statuses, vec!["200"; REQUESTS], "{vip}: {run:?}");
            assert_eq!(run.backends.len(), REQUESTS, "{vip}: {run:?}");
            assert!(
                run.backends.iter().all(|b| *b == run.backends[0]),
                "{vip}: the requests of one connection were served by several backends: {run:?}"
            );
            assert!(
                run.ports.len() >= 2 && run.cids.len() >= 2,
                "{vip}: the client did not move to a new port and connection ID: {run:?}"
            );
            for cid in &run.cids {
                let sid = server_id_of(cid).unwrap_or_else(|| panic!("{vip}: CID {cid}: {run:?}"));
                assert_eq!(
                    run.backends[0],
                    backend_of_server_id(sid),
                    "{vip}: a connection ID names another backend than the one serving: {run:?}"
                );
            }
        }
        let (q, _) = quic_status(&d, name);
        assert!(count(&q, "cid_routed") > 0, "{name}: {q}");
    }
}

#[test]
fn a_dip_added_with_its_server_id_is_routed_by_it_and_a_removed_dips_ids_are_counted_unknown() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = QuicBackends::start(&lab, &SERVER_IDS, CONFIG_ID, PORT);
    let d = start_daemon(&lab, &two_dip_config());
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    let api: SocketAddr = API.parse().unwrap();

    let said = weir_dip(
        &lab,
        &d,
        &["add", "quic", "10.77.3.2", "--server-id", "0b03"],
    );
    assert!(said.contains("added DIP 10.77.3.2"), "{said}");
    let vips = call(&lab.lb, api, Method::GET, "/api/v1/vips", None)
        .json()
        .unwrap();
    let ids: Vec<&str> = vips[0]["dips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["quic"]["server_id"]
                .as_str()
                .unwrap_or_else(|| panic!("{d}"))
        })
        .collect();
    assert_eq!(ids, SERVER_IDS, "GET /api/v1/vips: {vips}");

    // Long-lived connections over all three; each moves to a new port after
    // its 5th request, then the added DIP is removed while they go on.
    let load = QuicLoad {
        connections: 24,
        requests: 40,
        interval: Duration::from_millis(100),
        migrate_after: 5,
        timeout: Duration::from_secs(2),
    };
    let mut live = QuicClient::start(&lab, nat, &load);
    live.wait_established();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        live.running(),
        "the connections ended before the removal; the test proves nothing"
    );
    let said = weir_dip(&lab, &d, &["remove", "quic", "10.77.3.2"]);
    assert!(said.contains("removed DIP 10.77.3.2"), "{said}");
    let conns = live.finish();

    let (on_removed, kept): (Vec<QuicConn>, Vec<QuicConn>) = conns
        .into_iter()
        .partition(|c| c.served_by.first().map(String::as_str) == Some("backend-3"));
    assert!(
        !on_removed.is_empty(),
        "no connection was on the added DIP; the test proves nothing: {kept:?}"
    );
    assert_unbroken("the DIPs that stayed", &kept, 40, true);
    for c in &on_removed {
        assert!(
            c.error.is_some() && c.served_by.len() < 40,
            "a connection of the removed DIP went on: {c:?}"
        );
        assert!(
            c.served_by.iter().all(|b| b == "backend-3"),
            "a connection of the removed DIP was re-routed to another backend: {c:?}"
        );
    }

    let (q, dips) = quic_status(&d, "quic");
    assert_eq!(dips.len(), 2, "{dips:?}");
    assert!(count(&q, "cid_routed") > 0, "{q}");
    assert!(
        count(&q, "cid_unknown") > 0,
        "the removed DIP's connection IDs were not counted unknown: {q}"
    );
    let text = status_text(&d);
    assert!(
        text.contains("quic: server_id_len=2 config_id=1 cid_routed=")
            && text.contains(" reused_tuple="),
        "weir status: {text}"
    );
    let m = metrics(&lab.lb, METRICS_PORT);
    for series in [
        "weir_vip_quic_cid_routed_total{vip=\"quic\"}",
        "weir_vip_quic_cid_unknown_total{vip=\"quic\"}",
        "weir_dip_quic_cid_routed_total{vip=\"quic\",dip=\"10.77.1.2:4433\"}",
        "weir_dip_quic_cid_routed_total{vip=\"quic\",dip=\"10.77.2.2:4433\"}",
    ] {
        assert!(sample(&m, series) > 0, "{series}:\n{m}");
    }
    // Present whether or not a client port was reused in this run.
    sample(&m, "weir_vip_quic_reused_tuple_total{vip=\"quic\"}");
    sample(
        &m,
        "weir_dip_quic_reused_tuple_total{vip=\"quic\",dip=\"10.77.1.2:4433\"}",
    );
}
