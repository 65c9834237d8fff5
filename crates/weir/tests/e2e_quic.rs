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

use serde_json::Value;
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

mod common;
use common::quic::{backends_of, ngtcp2_get, QuicBackends, QuicClient, QuicConn, QuicLoad};
use common::temp::TempDir;
use common::{dataplane, dip, serial, start_daemon, vip, weir_in};

const PORT: u16 = 4433;
const NAT_VIP: &str = "10.77.100.1:4433";
const DSR_VIP: &str = "10.77.100.2:4433";
const SERVER_ID_LEN: usize = 2;
const CONFIG_ID: u8 = 1;
/// Backend `b`'s server ID is `SERVER_IDS[b - 1]`.
const SERVER_IDS: [&str; 3] = ["0b01", "0b02", "0b03"];

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

/// The server ID (hex) a connection ID (hex) carries under the VIPs'
/// config rotation codepoint, or None for another codepoint.
fn server_id_of(cid: &str) -> Option<&str> {
    let first = u8::from_str_radix(&cid[..2], 16).unwrap();
    (first >> 5 == CONFIG_ID).then(|| &cid[2..2 + 2 * SERVER_ID_LEN])
}

fn backend_of_server_id(sid: &str) -> String {
    let b = SERVER_IDS.iter().position(|s| *s == sid).unwrap() + 1;
    format!("backend-{b}")
}

/// Every connection made all `requests` requests, all answered by one
/// backend, the one whose server ID its connection IDs carry; with
/// `migrated`, from two source ports and two connection IDs.
fn assert_unbroken(what: &str, conns: &[QuicConn], requests: usize, migrated: bool) {
    let broken: Vec<&QuicConn> = conns
        .iter()
        .filter(|c| c.error.is_some() || c.served_by.len() != requests || c.backend().is_none())
        .collect();
    assert!(
        broken.is_empty(),
        "{what}: {} of {} QUIC connections broke or moved: {broken:#?}",
        broken.len(),
        conns.len()
    );
    for c in conns {
        for cid in &c.cids {
            let sid = server_id_of(cid).unwrap_or_else(|| panic!("{what}: CID {cid}: {c:?}"));
            assert_eq!(
                c.backend(),
                Some(backend_of_server_id(sid).as_str()),
                "{what}: a connection ID names another backend than the one serving: {c:?}"
            );
        }
        if migrated {
            assert!(
                c.ports.len() == 2 && c.ports[0] != c.ports[1] && c.cids[0] != c.cids[1],
                "{what}: the connection did not move to a new port and CID: {c:?}"
            );
        }
    }
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

/// The `quic` object of VIP `name`, and of each of its DIPs, in `weir
/// status --json`.
fn quic_status(d: &Daemon, name: &str) -> (Value, Vec<Value>) {
    let st = d.status_json().unwrap();
    let v = st["vips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no VIP {name} in {st}"))
        .clone();
    let dips = v["dips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["quic"].clone())
        .collect();
    (v["quic"].clone(), dips)
}

fn count(q: &Value, name: &str) -> u64 {
    q[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {q}"))
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
    for v in [nat, dsr] {
        assert_eq!(
            backends_of(&QuicClient::run(&lab, v, &new_load(24))).len(),
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
    for v in [nat, dsr] {
        let fresh = QuicClient::run(&lab, v, &new_load(24));
        assert_unbroken("new connections after the drain", &fresh, 1, false);
        assert!(
            !backends_of(&fresh).contains("backend-2"),
            "the drained backend got new connections to {v}: {fresh:?}"
        );
    }

    let nat_conns = live_nat.finish();
    let dsr_conns = live_dsr.finish();
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
