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
//! - `weir node drain` withdraws the node's VIP; `undrain` announces it.
//! - kill -9 of a node: its route goes with it (the anchor device dies with
//!   the process and BIRD withdraws); the time is printed.
//! - `weir serve --takeover` withdraws nothing while it replaces a node.
//! - A clean stop withdraws too.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::backend::Backend;
use weir_lab::client::http_once;
use weir_lab::daemon::Daemon;
use weir_lab::frr::{Frr, Peer};
use weir_lab::scale::topology::{
    backend_addr, node_addr, ClusterLab, ROUTER_FABRIC, VIP, VIP_PORT,
};

mod common;
use common::{exe, serial, text, wait_for, weir, weir_in};

const PREFIX: &str = "10.88.100.1/32";
const ROUTER_AS: u32 = 65000;
const NODE_AS: u32 = 65001;

/// Node `i`'s configuration: a dsr VIP over the lab's backends, health
/// checked on `health_port`, announced to the router by BGP with BFD.
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
[bgp]
local_as = {NODE_AS}
router_id = "{}"
{bgp_extra}
[[bgp.neighbour]]
address = "{ROUTER_FABRIC}"
remote_as = {ROUTER_AS}
bfd = true
"#,
        node_addr(i)
    )
}

/// BIRDs the nodes started: they outlive a killed weir by design, so the
/// test ends them itself (declared after the daemons: dropped first).
struct Speakers(Vec<PathBuf>);

impl Drop for Speakers {
    fn drop(&mut self) {
        for run_dir in &self.0 {
            let pid = fs::read_to_string(run_dir.join("bgp/bird.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            if let Some(pid) = pid {
                let _ = weir_sys::process::send_signal(pid, libc::SIGKILL);
            }
        }
    }
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
    let frr = Frr::start(
        &lab.router,
        &lab.dir.join("frr"),
        ROUTER_FABRIC,
        ROUTER_AS,
        &[1, 2].map(|i| Peer {
            address: node_addr(i),
            remote_as: NODE_AS,
            bfd: true,
        }),
    )
    .expect("starting FRR");
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

    // Drain and undrain node 2 through its API.
    let run2 = n2.run_dir();
    let run2 = run2.to_str().unwrap();
    let out = weir_in(&lab.nodes[1], &["node", "drain", "--run-dir", run2]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("drained"),
        "{}",
        text(&out.stdout)
    );
    let t = wait_hops(&frr, &[1], "node 2 drained", &[&n2]);
    println!("node 2 out of the route {t:?} after weir node drain");
    assert_eq!(bgp(&n2)["drained"], true);
    let out = weir_in(&lab.nodes[1], &["node", "undrain", "--run-dir", run2]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_hops(&frr, &[1, 2], "node 2 undrained", &[&n2]);

    // kill -9 of node 1: its route goes with the process.
    n1.kill().unwrap();
    let t = wait_hops(&frr, &[2], "node 1 killed", &[&n2]);
    println!("node 1 out of the router's route {t:?} after kill -9");
    assert_eq!(
        frr.bfd_state(node_addr(1)).unwrap().as_deref(),
        Some("up"),
        "the route went with weir, not with the speaker's session"
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
