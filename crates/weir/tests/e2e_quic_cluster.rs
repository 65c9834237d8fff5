//! A QUIC VIP served by two weir nodes at once behind a router's ECMP route,
//! in the cluster lab's namespaces (weir_lab::scale), which the test builds
//! and always removes: FRR in the router's namespace learns the VIP from
//! both nodes by BGP and spreads flows over them by their 5-tuple
//! (`fib_multipath_hash_policy = 1`); the nodes share table versions
//! through etcd, with connection sync off; three aioquic HTTP/3 backends
//! (lab/scripts/quic/backend.py, the VIP on their loopback) issue
//! connection IDs that carry their QUIC-LB server IDs.
//!
//! HTTP/3 clients (client.py) move to a new source port and connection ID
//! mid-connection. The router hashes the new 5-tuple afresh, so about half
//! of the connections go on through the node that never saw their
//! handshake. Every request must be answered by the backend that the
//! connection's IDs name, with 0 broken connections; the router's choice
//! for each port (`ip route get`) says which connections changed node, and
//! both nodes must count CID-routed packets to each such connection's
//! backend.
//!
//! dsr only: in this lab a nat VIP's replies would go to the backends'
//! gateway (the router), not back to the node that translated the request
//! (see docs/src/cluster.md).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use weir_core::flow::Proto;
use weir_lab::daemon::Daemon;
use weir_lab::scale::topology::{
    backend_addr, node_addr, ClusterLab, CLIENT_ADDR, ETCD_PORT, LEASE_TTL_S, ROUTER_FABRIC, VIP,
    VIP_PREFIX,
};

mod common;
use common::quic::{
    assert_unbroken, count, quic_status, QuicBackends, QuicClient, QuicConn, QuicLoad, CONFIG_ID,
    SERVER_IDS, SERVER_ID_LEN,
};
use common::{pinned_connections, serial, start_nodes, wait_for, Speakers};

const NODES: usize = 2;
const PORT: u16 = 4433;
const REQUESTS: usize = 30;

/// Node `i`'s configuration: the dsr QUIC VIP `h3` over the three
/// backends, a cluster member with connection sync off, announcing the VIP
/// to the router by BGP with BFD.
fn node_config(lab: &ClusterLab, i: usize) -> String {
    let mut dips = String::new();
    for (j, sid) in (1..).zip(SERVER_IDS) {
        dips.push_str(&format!(
            "\n  [[vip.dip]]\n  address = \"{}\"\n  server_id = \"{sid}\"\n",
            backend_addr(j)
        ));
    }
    format!(
        r#"[dataplane]
interfaces = ["eth0"]
conn_table_size = 65536

[cluster]
node = "n{i}"
etcd = ["http://{ROUTER_FABRIC}:{ETCD_PORT}"]
prefix = "/weir/quic"
lease_ttl_s = {LEASE_TTL_S}
connection_sync = false
sync_interface = "eth0"
sync_key_file = "{key}"

[[vip]]
name = "h3"
address = "{VIP}"
port = {PORT}
protocol = "udp"
mode = "dsr"
quic = {{ server_id_len = {SERVER_ID_LEN}, config_id = {CONFIG_ID} }}
{dips}
{bgp}"#,
        key = lab.key_file().display(),
        bgp = ClusterLab::bgp_section(i),
    )
}

/// The node the router forwards the client's datagrams from `port` to the
/// VIP to: the kernel's own ECMP choice for that 5-tuple.
fn node_for_port(lab: &ClusterLab, port: u16) -> Ipv4Addr {
    let (sport, dport) = (port.to_string(), PORT.to_string());
    let (vip, client) = (VIP.to_string(), CLIENT_ADDR.to_string());
    let args = [
        "-n",
        &lab.router,
        "-j",
        "route",
        "get",
        &vip,
        "from",
        &client,
        "iif",
        "rc0",
        "ipproto",
        "udp",
        "sport",
        &sport,
        "dport",
        &dport,
    ];
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let route: Value = serde_json::from_slice(&out.stdout).unwrap();
    route[0]["gateway"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("ip {args:?}: no gateway in {route}"))
}

/// The client ports of the VIP's UDP entries in the connection table that
/// `d` pinned: the handshakes it dispatched (a packet routed by its
/// connection ID in dsr mode writes no entry).
fn handshake_ports(d: &Daemon) -> BTreeSet<u16> {
    pinned_connections(d, |f| {
        f.proto == Proto::Udp && f.src == CLIENT_ADDR && f.dst == VIP && f.dport == PORT
    })
    .into_iter()
    .map(|f| f.sport)
    .collect()
}

/// The DIP index (0-based) of the backend that served `c`.
fn dip_of(c: &QuicConn) -> usize {
    let name = c.backend().unwrap();
    name.strip_prefix("backend-")
        .and_then(|b| b.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("backend name {name:?}"))
        - 1
}

#[test]
fn quic_connections_moved_by_ecmp_to_the_other_node_keep_their_backend_without_connection_sync() {
    let _serial = serial();
    let lab = ClusterLab::build(NODES, SERVER_IDS.len()).expect("building the cluster lab");
    let frr = lab.start_router().expect("starting FRR");
    let listen = vec![vec![VIP]; lab.backends.len()];
    let mut backends = QuicBackends::start_in(&lab.backends, &listen, &SERVER_IDS, CONFIG_ID, PORT);
    let nodes = start_nodes(&lab, NODES, |i| node_config(&lab, i));
    // Declared after the daemons: their speakers end first, on every path.
    let _speakers = Speakers(nodes.iter().map(Daemon::run_dir).collect());
    let both: Vec<Ipv4Addr> = (1..=NODES).map(node_addr).collect();
    assert!(
        wait_for(Duration::from_secs(20), || lab
            .forwarding_hops()
            .is_ok_and(|h| h == both)),
        "the router's route to {VIP_PREFIX} is via {:?}, not both nodes\n{}",
        lab.forwarding_hops(),
        frr.vtysh("show bgp summary").unwrap_or_default()
    );

    let vip = SocketAddr::from((VIP, PORT));
    // The route is in; the path through each node may still be settling
    // (next hops, BFD): the test starts once short connections get through.
    let probe = QuicLoad {
        connections: 4,
        requests: 1,
        interval: Duration::ZERO,
        migrate_after: 0,
        timeout: Duration::from_secs(2),
    };
    assert!(
        wait_for(Duration::from_secs(20), || QuicClient::start_in(
            &lab.client,
            vip,
            &probe
        )
        .finish()
        .iter()
        .all(|c| c.error.is_none())),
        "short QUIC connections through the two nodes do not get through"
    );
    let load = QuicLoad {
        connections: 24,
        requests: REQUESTS,
        interval: Duration::from_millis(100),
        migrate_after: 10,
        timeout: Duration::from_secs(3),
    };
    let conns = QuicClient::start_in(&lab.client, vip, &load).finish();
    assert_unbroken("two nodes behind ECMP", &conns, REQUESTS, true);
    assert!(backends.all_running(), "a backend died");

    // Which connections the router moved to the other node with their port.
    let moved: Vec<(&QuicConn, Ipv4Addr, Ipv4Addr)> = conns
        .iter()
        .map(|c| {
            (
                c,
                node_for_port(&lab, c.ports[0]),
                node_for_port(&lab, c.ports[1]),
            )
        })
        .filter(|(_, before, after)| before != after)
        .collect();
    assert!(
        !moved.is_empty(),
        "ECMP kept every connection on its node across the move; the test proves nothing: {conns:?}"
    );
    // The router's answer is what it did: each handshake is in the table of
    // the node it names for the connection's first port, and only there.
    let handshakes: Vec<BTreeSet<u16>> = nodes.iter().map(handshake_ports).collect();
    for c in &conns {
        let first = node_for_port(&lab, c.ports[0]);
        for (i, ports) in handshakes.iter().enumerate() {
            assert_eq!(
                ports.contains(&c.ports[0]),
                both[i] == first,
                "node {} and the router disagree on where port {} went: {ports:?}",
                i + 1,
                c.ports[0]
            );
        }
    }
    let routed: Vec<(Value, Vec<Value>)> = nodes.iter().map(|d| quic_status(d, "h3")).collect();
    let node_index = |addr: Ipv4Addr| both.iter().position(|n| *n == addr).unwrap();
    for (i, (q, _)) in routed.iter().enumerate() {
        assert!(count(q, "cid_routed") > 0, "node {}: {q}", i + 1);
    }
    let mut checked = BTreeSet::new();
    for (c, before, after) in &moved {
        let dip = dip_of(c);
        for node in [before, after] {
            let n = node_index(*node);
            let dq = &routed[n].1[dip];
            assert!(
                count(dq, "cid_routed") > 0,
                "node {} routed nothing by CID to backend-{} of a connection that the router \
                 sent through it: {dq}; {c:?}",
                n + 1,
                dip + 1
            );
            checked.insert((n, dip));
        }
    }
    println!(
        "{} of {} QUIC connections changed node with their port, 0 broken; \
         (node, DIP) pairs checked: {checked:?}",
        moved.len(),
        conns.len()
    );
}
