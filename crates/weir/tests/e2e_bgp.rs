//! Two weir nodes announce a dsr VIP by BGP (each through its BIRD) to FRR
//! in the router's namespace, which learns the nodes only from BGP (ECMP,
//! BFD) and installs the route; the test reads the router's RIB with
//! `vtysh -c 'show ip route json'`. Namespaces, daemons and files are the
//! test's own and removed on every exit path (weir_lab::scale, weir_lab::frr).
//!
//! - Bad `[bgp]` is refused by `weir check` and `weir serve` with the line
//!   and the field, and nothing is announced.
//! - A node started while its router is down serves, says the neighbour is
//!   not Established, and keeps trying; the route comes once FRR is up.
//! - A node whose DIPs fail their health checks withdraws the VIP, and
//!   announces it again once they pass.
//! - `weir node drain` (`drain = "graceful-shutdown"`, the default) keeps
//!   the node's route but marks it GRACEFUL_SHUTDOWN: the router uses the
//!   other node only, and the drained node's path stays in its table; with
//!   `drain = "withdraw"` the path goes. `undrain` restores it.
//! - An IPv6 VIP is announced as a /128 over IPv6 sessions and installed
//!   by the router (`show ipv6 route json`) with both nodes as next hops.
//! - kill -9 of a node: its route goes with it (the anchor device dies with
//!   the process and BIRD withdraws); the time is printed. The node left is
//!   then drained gracefully: its route never leaves the router, and
//!   traffic still reaches it.
//! - `weir serve --takeover` withdraws nothing while it replaces a node.
//! - A clean stop withdraws too.
//! - With `[cluster]` (etcd tables, connection sync) as well: long-lived
//!   connections run while a node is drained and the router moves its
//!   flows to the other node; none breaks or changes backend.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::backend::Backend;
use weir_lab::backend::BackendOptions;
use weir_lab::client::{http_once, spawn_http};
use weir_lab::daemon::Daemon;
use weir_lab::frr::{BgpPath, Frr};
use weir_lab::netns::ip_in;
use weir_lab::scale::topology::{
    backend_addr, node_addr, ClusterLab, ROUTER_FABRIC, VIP, VIP_PORT,
};

mod common;
use common::{exe, serial, text, wait_for, weir, weir_in, Speakers};

const PREFIX: &str = "10.88.100.1/32";
const ROUTER_AS: u32 = 65000;
const NODE_AS: u32 = 65001;
/// The IPv6 VIP, its route, and the fabric's IPv6 addresses (the test adds
/// them to the lab's namespaces).
const VIP6: &str = "fd88:100::1";
const PREFIX6: &str = "fd88:100::1/128";
const ROUTER_FABRIC6: &str = "fd88:1::1";

fn node_addr6(i: usize) -> Ipv6Addr {
    format!("fd88:1::{}", 10 + i).parse().unwrap()
}

/// Node `i`'s configuration: a dsr VIP over the lab's backends, health
/// checked on `health_port`, announced to the router by BGP with BFD, and
/// an IPv6 VIP (its DIPs unchecked, so counted healthy) announced over an
/// IPv6 session.
fn config(lab: &ClusterLab, i: usize, health_port: u16, bgp_extra: &str) -> String {
    let mut dips = String::new();
    for j in 1..=lab.backends.len() {
        dips.push_str(&format!(
            "\n  [[vip.dip]]\n  address = \"{}\"\n",
            backend_addr(j)
        ));
    }
    format!(
        r#"[dataplane]
interfaces = ["eth0"]
conn_table_size = 65536

[[vip]]
name = "web"
address = "{VIP}"
port = {VIP_PORT}
protocol = "tcp"
mode = "dsr"

  [vip.health]
  kind = "tcp"
  port = {health_port}
  interval_ms = 200
  timeout_ms = 100
  rise = 1
  fall = 2
{dips}
[[vip]]
name = "web6"
address = "{VIP6}"
port = {VIP_PORT}
protocol = "tcp"
mode = "dsr"
  [[vip.dip]]
  address = "fd88:1::101"

[bgp]
local_as = {NODE_AS}
router_id = "{}"
{bgp_extra}
[[bgp.neighbour]]
address = "{ROUTER_FABRIC}"
remote_as = {ROUTER_AS}
bfd = true

[[bgp.neighbour]]
address = "{ROUTER_FABRIC6}"
remote_as = {ROUTER_AS}
"#,
        node_addr(i)
    )
}

/// Gives the router's and the nodes' fabric ports their IPv6 addresses
/// (without duplicate detection, so that they are usable at once).
fn add_ipv6(lab: &ClusterLab) {
    ip_in(
        &lab.router,
        &[
            "addr",
            "add",
            &format!("{ROUTER_FABRIC6}/64"),
            "dev",
            "rf0",
            "nodad",
        ],
    )
    .unwrap();
    for (i, n) in lab.nodes.iter().enumerate() {
        let a = format!("{}/64", node_addr6(i + 1));
        ip_in(n, &["addr", "add", &a, "dev", "eth0", "nodad"]).unwrap();
    }
}

/// The router's BGP path for the VIP from node `i`, if it has one.
fn path_from(frr: &Frr, i: usize) -> Option<BgpPath> {
    frr.bgp_paths(PREFIX)
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.peer == IpAddr::V4(node_addr(i)))
}

fn gracefully_drained(p: &BgpPath) -> bool {
    p.communities.contains("graceful-shutdown") && p.local_pref == Some(0) && !p.used
}

fn bgp(d: &Daemon) -> Value {
    d.status_json()
        .map(|s| s["bgp"].clone())
        .unwrap_or(Value::Null)
}

fn hops(frr: &Frr) -> Vec<Ipv4Addr> {
    frr.next_hops(PREFIX).unwrap_or_default()
}

fn wait_hops(frr: &Frr, want: &[usize], what: &str, logs: &[&Daemon]) -> Duration {
    let want: Vec<Ipv4Addr> = want.iter().map(|&i| node_addr(i)).collect();
    let t0 = Instant::now();
    let ok = wait_for(Duration::from_secs(20), || hops(frr) == want);
    if !ok {
        let logs: Vec<String> = logs.iter().map(|d| d.new_log()).collect();
        panic!(
            "{what}: the router's next hops for {PREFIX} are {:?}, not {want:?}\n{}\nlogs:\n{}",
            hops(frr),
            frr.vtysh("show bgp summary").unwrap_or_default(),
            logs.join("\n----\n")
        );
    }
    t0.elapsed()
}

#[test]
fn vips_follow_health_drain_and_the_nodes_life() {
    let _serial = serial();
    let lab = ClusterLab::build(2, 2).expect("building the lab");
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(j, ns)| Backend::start(ns, &format!("backend-{}", j + 1)).unwrap())
        .collect();
    let mut n1 = Daemon::new(exe(), &lab.nodes[0]).unwrap();
    let mut n2 = Daemon::new(exe(), &lab.nodes[1]).unwrap();
    let _speakers = Speakers(vec![n1.run_dir(), n2.run_dir()]);
    add_ipv6(&lab);

    // Bad [bgp]: refused by check and by serve, with the line; no speaker.
    let bad = config(&lab, 1, 80, "").replace(&format!("local_as = {NODE_AS}"), "local_as = 0");
    n1.write_config(&bad).unwrap();
    // As written (the lab adds the daemon's own keys).
    let written = fs::read_to_string(n1.config_path()).unwrap();
    let line = written.lines().position(|l| l == "local_as = 0").unwrap() + 1;
    let out = weir(&["check", n1.config_path().to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "weir check accepted local_as = 0");
    assert!(
        err.contains(&format!(":{line}: bgp.local_as:")) && err.contains("reserved"),
        "{err}"
    );
    let e = n1.start().unwrap_err().to_string();
    assert!(e.contains("bgp.local_as"), "{e}");
    n1.write_config(&config(&lab, 1, 80, "speaker = \"/nonexistent/bird\""))
        .unwrap();
    let e = n1.start().unwrap_err().to_string();
    assert!(
        e.contains("bgp.speaker") && e.contains("apt install bird2"),
        "{e}"
    );
    assert!(
        !n1.run_dir().join("bgp/bird.pid").exists(),
        "a refused start ran a speaker"
    );

    // The router is down: node 1 serves anyway, and says why nothing is
    // Established.
    n1.write_config(&config(&lab, 1, 80, "")).unwrap();
    n1.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || {
            let b = bgp(&n1);
            b["neighbours"][0]["established"] == false && b["speaker_pid"].is_u64()
        }),
        "no neighbour state: {}",
        bgp(&n1)
    );
    assert!(
        wait_for(Duration::from_secs(5), || n1
            .new_log()
            .contains("the speaker keeps trying")),
        "{}",
        n1.new_log()
    );
    let frr = lab.start_router().expect("starting FRR");
    for i in [1, 2] {
        frr.add_peer6(node_addr6(i), NODE_AS)
            .expect("adding an IPv6 neighbour to FRR");
    }
    n2.write_config(&config(&lab, 2, 80, "")).unwrap();
    n2.start().unwrap();
    let t = wait_hops(&frr, &[1, 2], "both nodes up", &[&n1, &n2]);
    println!("both nodes in the router's ECMP route {t:?} after node 2 started");
    // The nodes' view follows within a second (the speaker reads BIRD's
    // state once a second).
    for d in [&n1, &n2] {
        assert!(
            wait_for(Duration::from_secs(5), || {
                let b = bgp(d);
                b["neighbours"][0]["session"] == "Established"
                    && b["neighbours"][0]["bfd"] == "Up"
                    && b["vips"][0]["announced"] == true
            }),
            "{}",
            bgp(d)
        );
    }
    for i in 0..10 {
        http_once(&lab.client, SocketAddr::from((VIP, VIP_PORT)))
            .unwrap_or_else(|e| panic!("connection {i} through the BGP route: {e:#}"));
    }
    // The IPv6 VIP: a /128 over the IPv6 sessions, both nodes next hops.
    assert!(
        wait_for(Duration::from_secs(20), || frr
            .next_hops6(PREFIX6)
            .unwrap_or(0)
            == 2),
        "the router's IPv6 route to {PREFIX6} has {:?} next hops, not 2\n{}\n{}",
        frr.next_hops6(PREFIX6),
        frr.vtysh("show bgp ipv6 unicast summary")
            .unwrap_or_default(),
        n1.new_log()
    );
    assert_eq!(bgp(&n1)["vips"][1]["prefix"], PREFIX6);
    assert_eq!(bgp(&n1)["vips"][1]["announced"], true);

    // Node 1's DIPs fail their checks (nothing answers on port 81): it
    // withdraws; they pass again: it announces.
    let log = n1.reload(&config(&lab, 1, 81, "")).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    let t = wait_hops(&frr, &[2], "node 1's DIPs failing", &[&n1]);
    println!("node 1 withdrawn {t:?} after its DIPs' checks started failing");
    let why = bgp(&n1)["vips"][0]["why_not"].to_string();
    assert!(why.contains("healthy DIPs"), "{why}");
    n1.reload(&config(&lab, 1, 80, "")).unwrap();
    wait_hops(&frr, &[1, 2], "node 1's DIPs passing again", &[&n1]);

    // Drain node 2 through its API (graceful-shutdown, the default): the
    // router uses node 1 only, and still has node 2's path, de-preferred.
    let run_dirs = [n1.run_dir(), n2.run_dir()];
    let node_cmd = |i: usize, what: &str| {
        let run = run_dirs[i - 1].to_str().unwrap();
        let out = weir_in(&lab.nodes[i - 1], &["node", what, "--run-dir", run]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let said = node_cmd(2, "drain");
    assert!(
        said.contains("drained") && said.contains("de-preferred"),
        "{said}"
    );
    let t = wait_hops(&frr, &[1], "node 2 drained gracefully", &[&n2]);
    println!("node 2 out of the router's ECMP route {t:?} after weir node drain");
    assert!(
        wait_for(Duration::from_secs(5), || path_from(&frr, 2)
            .is_some_and(|p| gracefully_drained(&p))),
        "node 2's path should stay, GRACEFUL_SHUTDOWN and not used: {:?}",
        frr.bgp_paths(PREFIX)
    );
    let p1 = path_from(&frr, 1).expect("node 1's path");
    assert!(
        p1.used && !p1.communities.contains("graceful-shutdown"),
        "{p1:?}"
    );
    let b = bgp(&n2);
    assert_eq!(b["drained"], true);
    assert_eq!(
        (&b["vips"][0]["announced"], &b["vips"][0]["depreferred"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{b}"
    );
    node_cmd(2, "undrain");
    wait_hops(&frr, &[1, 2], "node 2 undrained", &[&n2]);
    assert!(
        wait_for(Duration::from_secs(5), || path_from(&frr, 2).is_some_and(
            |p| p.used && !p.communities.contains("graceful-shutdown")
        )),
        "{:?}",
        frr.bgp_paths(PREFIX)
    );

    // drain = "withdraw" (applied by a reload): node 1's path leaves the
    // router's table.
    let log = n1
        .reload(&config(&lab, 1, 80, "drain = \"withdraw\""))
        .unwrap();
    assert!(log.contains("reloaded"), "{log}");
    let said = node_cmd(1, "drain");
    assert!(said.contains("withdrawn"), "{said}");
    wait_hops(&frr, &[2], "node 1 drained by withdrawal", &[&n1]);
    assert!(
        wait_for(Duration::from_secs(5), || path_from(&frr, 1).is_none()),
        "{:?}",
        frr.bgp_paths(PREFIX)
    );
    node_cmd(1, "undrain");
    wait_hops(&frr, &[1, 2], "node 1 undrained", &[&n1]);

    // kill -9 of node 1: its route goes with the process.
    n1.kill().unwrap();
    let t = wait_hops(&frr, &[2], "node 1 killed", &[&n2]);
    println!("node 1 out of the router's route {t:?} after kill -9");
    assert_eq!(
        frr.bfd_state(node_addr(1)).unwrap().as_deref(),
        Some("up"),
        "the route went with weir, not with the speaker's session"
    );
    assert_eq!(frr.next_hops6(PREFIX6).unwrap(), 1, "IPv6 after kill -9");

    // The node left is drained gracefully: it is the only path, so the
    // router keeps using it (read every 20 ms: never a moment without the
    // route), and connections still reach it.
    let watching = std::sync::atomic::AtomicBool::new(true);
    let gaps = std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut gaps = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                if hops(&frr) != [node_addr(2)] {
                    gaps += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            gaps
        });
        node_cmd(2, "drain");
        let marked = wait_for(Duration::from_secs(10), || {
            path_from(&frr, 2).is_some_and(|p| p.communities.contains("graceful-shutdown"))
        });
        std::thread::sleep(Duration::from_millis(500));
        watching.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(marked, "{:?}\n{}", frr.bgp_paths(PREFIX), n2.new_log());
        w.join().unwrap()
    });
    assert_eq!(
        gaps, 0,
        "the graceful drain of the last node left the router without a route"
    );
    for i in 0..10 {
        http_once(&lab.client, SocketAddr::from((VIP, VIP_PORT)))
            .unwrap_or_else(|e| panic!("connection {i} to the drained last node: {e:#}"));
    }
    node_cmd(2, "undrain");
    assert!(
        wait_for(Duration::from_secs(5), || path_from(&frr, 2)
            .is_some_and(|p| !p.communities.contains("graceful-shutdown"))),
        "{:?}",
        frr.bgp_paths(PREFIX)
    );

    // An upgrade (--takeover) keeps the route: the router's next hops are
    // read every 20 ms throughout.
    let speaker = bgp(&n2)["speaker_pid"]
        .as_u64()
        .expect("node 2's speaker runs");
    let watching = std::sync::atomic::AtomicBool::new(true);
    let gaps = std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut gaps = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                if hops(&frr) != [node_addr(2)] {
                    gaps += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            gaps
        });
        let restarted = n2.restart();
        std::thread::sleep(Duration::from_millis(1500));
        watching.store(false, std::sync::atomic::Ordering::Relaxed);
        restarted.unwrap();
        w.join().unwrap()
    });
    assert_eq!(
        gaps,
        0,
        "the takeover withdrew the route:\n{}",
        n2.new_log()
    );
    // The successor adopted the running speaker: its sessions never closed.
    assert!(
        wait_for(Duration::from_secs(5), || bgp(&n2)["speaker_pid"].as_u64()
            == Some(speaker)),
        "{}\n{}",
        bgp(&n2),
        n2.new_log()
    );

    // A clean stop withdraws too.
    n2.stop().unwrap();
    wait_hops(&frr, &[], "node 2 stopped", &[]);
}

/// Node `i` of a cluster (etcd tables, connection sync, agents) that also
/// announces the VIP by BGP: the scale lab's node, which has both; its API
/// is on, for `weir node drain`.
fn cluster_config(lab: &ClusterLab, i: usize) -> String {
    let cfg = lab.node_config(i, true);
    assert!(
        cfg.contains("[bgp]") && !cfg.contains("listen = \"off\""),
        "{cfg}"
    );
    cfg
}

#[test]
fn a_drain_with_connection_sync_breaks_no_connection() {
    const CONNS: usize = 24;
    const REQUESTS: usize = 50;
    let _serial = serial();
    let lab = ClusterLab::build(2, 2).expect("building the lab");
    let opts = BackendOptions {
        agent_window: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(j, ns)| Backend::start_with(ns, &format!("backend-{}", j + 1), &opts).unwrap())
        .collect();
    let frr = lab.start_router().expect("starting FRR");
    let mut daemons = Vec::new();
    for i in 1..=2 {
        let mut d = Daemon::new(exe(), &lab.nodes[i - 1]).unwrap();
        d.write_config(&cluster_config(&lab, i)).unwrap();
        d.start().unwrap_or_else(|e| panic!("node {i}: {e:#}"));
        daemons.push(d);
    }
    let _speakers = Speakers(daemons.iter().map(|d| d.run_dir()).collect());
    let all: Vec<&Daemon> = daemons.iter().collect();
    wait_hops(&frr, &[1, 2], "both cluster nodes up", &all);
    let vip = SocketAddr::from((VIP, VIP_PORT));
    for i in 0..10 {
        http_once(&lab.client, vip).unwrap_or_else(|e| panic!("new connection {i}: {e:#}"));
    }

    // Long-lived connections over both nodes, established (and synced to
    // the other node) well before the drain.
    let live = spawn_http(
        &lab.client,
        vip,
        CONNS,
        REQUESTS,
        Duration::from_millis(100),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let sync = daemons[1]
        .status_json()
        .map(|s| s["cluster"]["this"]["sync"].clone())
        .unwrap_or(Value::Null);
    assert!(
        sync["installed"].as_u64().unwrap_or(0) > 0,
        "node 2 installed no connection of node 1's: {sync}"
    );
    let out = weir_in(
        &lab.nodes[0],
        &[
            "node",
            "drain",
            "--run-dir",
            daemons[0].run_dir().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = wait_hops(&frr, &[2], "node 1 drained", &all);
    println!("node 1 out of the router's ECMP route {t:?} after weir node drain");

    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let broken: Vec<_> = records.iter().filter(|r| r.violated()).collect();
    assert!(
        broken.is_empty(),
        "{} of {CONNS} established connections broke or moved backend through the drain: {:?}",
        broken.len(),
        broken.first()
    );
    assert!(records.iter().all(|r| r.served_by.len() == REQUESTS));
    for i in 0..10 {
        http_once(&lab.client, vip)
            .unwrap_or_else(|e| panic!("new connection {i} after the drain: {e:#}"));
    }
}
