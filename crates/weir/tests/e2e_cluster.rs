//! Three weir nodes behind a router's ECMP route (L4 hash), sharing table
//! versions through an etcd the test starts, with connection sync on, in
//! namespaces the test builds and always removes (weir_lab::scale). The
//! router is FRR: it learns the VIP only from the nodes' BGP announcements
//! (BFD, ECMP); the test never edits its routes.
//!
//! - The nodes agree on one leader and apply the same table versions, and
//!   the router routes the VIP over all three.
//! - Long-lived connections run while the leader is killed with SIGKILL:
//!   its speaker withdraws the VIP, ECMP moves connections between the
//!   survivors, and every established connection keeps its backend,
//!   because the survivors learnt them from their peers. Another node leads.
//! - Long-lived connections run while a survivor is drained: the router
//!   drops it from the route, and none breaks; new connections succeed.
//! - Connections opened while a node is taken over (`weir serve
//!   --takeover`) reach every node's table: those its peers install reach
//!   the new process, those its own data plane installs reach its peers.
//! - Bad input: a node name in use, a missing sync key, an unreachable etcd:
//!   each a clear error, with nothing attached or pinned.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_core::flow::Proto;
use weir_lab::backend::{Backend, BackendOptions};
use weir_lab::client::{http_once, spawn_http};
use weir_lab::daemon::Daemon;
use weir_lab::frr::Frr;
use weir_lab::scale::topology::{node_addr, ClusterLab, Speakers, VIP, VIP_PORT};

mod common;
use common::{exe, pinned_connections, serial, start_nodes, text, wait_for, weir_in};

const NODES: usize = 3;
const BACKENDS: usize = 3;
/// Long-lived connections, and their requests 100 ms apart: they outlast
/// the kill, the route change and the election.
const CONNS: usize = 60;
const REQUESTS: usize = 70;
/// Requests (100 ms apart) of the connections opened during a takeover:
/// they stay open until every node's table has been read.
const TAKEOVER_REQUESTS: usize = 100;

fn vip() -> SocketAddr {
    SocketAddr::from((VIP, VIP_PORT))
}

/// Waits until the router routes the VIP over exactly `nodes` (1-based),
/// learnt by BGP; panics with its BGP summary otherwise.
fn wait_route(lab: &ClusterLab, frr: &Frr, nodes: &[usize], what: &str) {
    let want: Vec<Ipv4Addr> = nodes.iter().map(|&i| node_addr(i)).collect();
    assert!(
        wait_for(Duration::from_secs(20), || lab
            .forwarding_hops()
            .is_ok_and(|h| h == want)),
        "{what}: the router's route is via {:?}, not {want:?}\n{}",
        lab.forwarding_hops(),
        frr.vtysh("show bgp summary").unwrap_or_default()
    );
}

fn cluster(d: &Daemon) -> Value {
    d.status_json()
        .map(|s| s["cluster"].clone())
        .unwrap_or(Value::Null)
}

/// The version of VIP `web` in force on each daemon.
fn versions(daemons: &[&Daemon]) -> Vec<Option<u64>> {
    daemons
        .iter()
        .map(|d| cluster(d)["this"]["tables"]["web"]["version"].as_u64())
        .collect()
}

/// One backend per backend namespace, each answering with its name.
fn start_backends(lab: &ClusterLab) -> Vec<Backend> {
    lab.backends
        .iter()
        .enumerate()
        .map(|(j, ns)| {
            let opts = BackendOptions {
                agent_window: Some(Duration::from_millis(500)),
                ..Default::default()
            };
            Backend::start_with(ns, &format!("backend-{}", j + 1), &opts).unwrap()
        })
        .collect()
}

/// Waits until every daemon applies the same version of VIP `web`.
fn wait_agreed(daemons: &[&Daemon]) {
    assert!(
        wait_for(Duration::from_secs(10), || {
            let v = versions(daemons);
            v[0].is_some() && v.iter().all(|x| *x == v[0])
        }),
        "the nodes never agreed on a version: {:?}",
        versions(daemons)
    );
}

/// The client tuples of the VIP's connections in the table pinned in
/// `d`'s pin directory.
fn vip_connections(d: &Daemon) -> BTreeSet<(IpAddr, u16)> {
    pinned_connections(d, |f| {
        f.proto == Proto::Tcp && f.dst == VIP && f.dport == VIP_PORT
    })
    .into_iter()
    .map(|f| (f.src, f.sport))
    .collect()
}

/// A node's daemon that must fail to start with `config`: the error names
/// the problem, and nothing is attached to its interface or pinned.
fn refused(lab: &ClusterLab, node: usize, config: &str, expect: &str) {
    let mut d = Daemon::new(exe(), &lab.nodes[node - 1]).unwrap();
    d.write_config(config).unwrap();
    let e = d.start().unwrap_err().to_string();
    assert!(e.contains(expect), "expected {expect:?} in:\n{e}");
    assert!(!d.pin_dir.exists(), "a refused start left pins: {e}");
    let out = std::process::Command::new("ip")
        .args(["-n", &lab.nodes[node - 1], "link", "show", "eth0"])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&out.stdout);
    assert!(
        !link.contains("xdp"),
        "a refused start left XDP attached:\n{link}"
    );
}

#[test]
fn a_killed_node_leaves_established_connections_intact_and_the_leader_moves() {
    let _serial = serial();
    let lab = ClusterLab::build(NODES + 1, BACKENDS).expect("building the cluster lab");
    let frr = lab.start_router().expect("starting FRR");
    let _backends = start_backends(&lab);
    let mut daemons = start_nodes(&lab, NODES, |i| lab.node_config(i, true));
    // Declared after the daemons: their speakers end first, on every path.
    let _speakers = Speakers(daemons.iter().map(Daemon::run_dir).collect());
    wait_route(&lab, &frr, &[1, 2, 3], "three nodes announcing");

    // One leader; every node applies the leader's versions.
    let all: Vec<&Daemon> = daemons.iter().collect();
    wait_agreed(&all);
    let leaders: Vec<usize> = (0..NODES)
        .filter(|&i| cluster(&daemons[i])["is_leader"] == true)
        .collect();
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    let leader = leaders[0];
    let view = cluster(&daemons[(leader + 1) % NODES]);
    assert_eq!(view["nodes"].as_array().unwrap().len(), NODES, "{view}");
    assert_eq!(view["leader"], format!("n{}", leader + 1));
    assert_eq!(view["etcd_ok"], true);
    for i in 0..20 {
        http_once(&lab.client, vip()).unwrap_or_else(|e| panic!("new connection {i}: {e:#}"));
    }

    // Long-lived connections, established well before the kill (and so
    // announced to every node).
    let live = spawn_http(
        &lab.client,
        vip(),
        CONNS,
        REQUESTS,
        Duration::from_millis(100),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let survivors: Vec<usize> = (1..=NODES).filter(|&i| i != leader + 1).collect();
    for &i in &survivors {
        let sync = &cluster(&daemons[i - 1])["this"]["sync"];
        assert!(
            sync["installed"].as_u64().unwrap_or(0) > 0,
            "node {i} installed nothing: {sync}"
        );
    }

    // The leader dies; its speaker withdraws the VIP and the router drops
    // it from the route; the machine is then gone with its data plane.
    let mut dead = daemons.remove(leader);
    dead.kill().unwrap();
    wait_route(&lab, &frr, &survivors, "the leader killed");
    lab.wipe(leader + 1, &dead).unwrap();

    // Another node leads, and the survivors agree on which.
    let rest: Vec<&Daemon> = daemons.iter().collect();
    let leader_now = || -> Option<String> {
        let views: Vec<Value> = rest.iter().map(|d| cluster(d)).collect();
        let leads: Vec<&Value> = views.iter().filter(|v| v["is_leader"] == true).collect();
        let name = leads.first()?["node"].as_str()?.to_string();
        (leads.len() == 1 && views.iter().all(|v| v["leader"] == name.as_str())).then_some(name)
    };
    assert!(
        wait_for(Duration::from_secs(10), || leader_now().is_some()),
        "no node took the lead that the others follow"
    );
    assert_ne!(leader_now().unwrap(), format!("n{}", leader + 1));

    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let broken: Vec<_> = records.iter().filter(|r| r.violated()).collect();
    assert!(
        broken.is_empty(),
        "{} of {CONNS} established connections broke or moved: {:?}",
        broken.len(),
        broken.first()
    );
    assert!(records.iter().all(|r| r.served_by.len() == REQUESTS));
    for i in 0..20 {
        http_once(&lab.client, vip()).unwrap_or_else(|e| panic!("new connection {i} after: {e:#}"));
    }

    // A survivor is drained while long-lived connections run: the router
    // takes it out of the route, the connections it carried move to the
    // other survivor, which knows them; none breaks.
    let live = spawn_http(
        &lab.client,
        vip(),
        CONNS,
        REQUESTS / 2,
        Duration::from_millis(100),
    );
    std::thread::sleep(Duration::from_millis(1000));
    let (drained, kept) = (survivors[1], survivors[0]);
    // The daemons left are the survivors', in order.
    let run_dir = daemons[1].run_dir();
    let out = weir_in(
        &lab.nodes[drained - 1],
        &["node", "drain", "--run-dir", run_dir.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_route(&lab, &frr, &[kept], "a node drained");
    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let broken: Vec<_> = records.iter().filter(|r| r.violated()).collect();
    assert!(
        broken.is_empty(),
        "{} of {CONNS} established connections broke or moved through the drain: {:?}",
        broken.len(),
        broken.first()
    );
    for i in 0..20 {
        http_once(&lab.client, vip())
            .unwrap_or_else(|e| panic!("new connection {i} after the drain: {e:#}"));
    }

    // Bad input on the spare node: each refused before anything is loaded.
    let spare = NODES + 1;
    let twin = lab.node_config(spare, true).replace(
        &format!("node = \"n{spare}\""),
        &format!("node = \"n{}\"", survivors[0]),
    );
    refused(&lab, spare, &twin, "in use by a live node");
    let keyless = lab.node_config(spare, true).replace(
        &lab.key_file().display().to_string(),
        "/nonexistent/sync.key",
    );
    refused(&lab, spare, &keyless, "openssl rand -hex 32");
    let no_etcd = lab
        .node_config(spare, true)
        .replace("http://10.88.1.1:2379", "http://10.88.1.250:2379");
    refused(&lab, spare, &no_etcd, "does not answer");
}

#[test]
fn connections_opened_during_a_takeover_reach_every_node() {
    let _serial = serial();
    let lab = ClusterLab::build(NODES, BACKENDS).expect("building the cluster lab");
    let frr = lab.start_router().expect("starting FRR");
    let _backends = start_backends(&lab);
    let mut daemons = start_nodes(&lab, NODES, |i| lab.node_config(i, true));
    let _speakers = Speakers(daemons.iter().map(Daemon::run_dir).collect());
    wait_route(&lab, &frr, &[1, 2, 3], "three nodes announcing");
    wait_agreed(&daemons.iter().collect::<Vec<_>>());

    // A node that does not lead is upgraded in place (`--takeover`) while
    // the client opens long-lived connections, two every 20 ms: ECMP
    // spreads them over all three nodes throughout the handover.
    let taken = (0..NODES)
        .find(|&i| cluster(&daemons[i])["is_leader"] != true)
        .expect("a node that does not lead");
    let mut upgraded = daemons.remove(taken);
    let handover = std::thread::spawn(move || {
        let done = upgraded.restart();
        (upgraded, done)
    });
    let started = Instant::now();
    let mut live = Vec::new();
    while !handover.is_finished() && started.elapsed() < Duration::from_secs(30) {
        live.extend(spawn_http(
            &lab.client,
            vip(),
            2,
            TAKEOVER_REQUESTS,
            Duration::from_millis(100),
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (upgraded, done) = handover.join().expect("the takeover's thread");
    done.unwrap_or_else(|e| panic!("node {}'s takeover: {e:#}", taken + 1));
    // The lab reaps the predecessor only once its successor is up: the
    // successor must see it exit all the same, not wait it out.
    let log = upgraded.new_log();
    assert!(
        !log.contains("did not exit"),
        "the successor waited for its exited predecessor:\n{log}"
    );
    daemons.insert(taken, upgraded);
    // The last connections are established and announced.
    std::thread::sleep(Duration::from_millis(1500));

    let tables: Vec<BTreeSet<(IpAddr, u16)>> = daemons.iter().map(vip_connections).collect();
    let every: BTreeSet<(IpAddr, u16)> = tables.iter().flatten().copied().collect();
    assert!(
        every.len() >= live.len(),
        "{} connections opened, {} in the nodes' tables",
        live.len(),
        every.len()
    );
    let missing: Vec<(usize, usize)> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| (i + 1, every.difference(t).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(
        missing.is_empty(),
        "of {} connections opened while node {} was taken over, (node, how many) are missing \
         from these nodes' tables: {missing:?}",
        every.len(),
        taken + 1
    );
    let opened = live.len();
    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let broken: Vec<_> = records.iter().filter(|r| r.violated()).collect();
    assert!(
        broken.is_empty(),
        "{} of {opened} connections opened during the takeover broke or moved: {:?}",
        broken.len(),
        broken.first()
    );
}
