//! The software and hybrid tiers end to end, in namespaces the test builds
//! and always removes: real HTTP over nat and dsr VIPs and UDP through a
//! worker on an AF_XDP socket; in the hybrid tier connections that start in
//! software, are promoted to the XDP fast table, demoted and promoted again
//! keep their backend; the fast table never exceeds its bound; every packet
//! ends in one outcome, in XDP or in the worker.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use weir_lab::backend::Backend;
use weir_lab::client::{http_once, spawn_http, udp_requests};
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

mod common;
use common::{
    assert_nothing_left, counter, dataplane, exe, lab_services, start_backends, start_daemon,
    worker_counter,
};

const NAT_VIP: &str = "10.77.100.1:80";
const DSR_VIP: &str = "10.77.100.2:80";
const UDP_VIP: &str = "10.77.100.1:5353";

/// nat and dsr HTTP VIPs and a nat UDP VIP over backends 1..=3, a worker
/// on CPU 1 and the `keys` of `[dataplane]`.
fn config(keys: &str, weights: [u32; 3]) -> String {
    let dips: Vec<(usize, u32)> = (1..).zip(weights).collect();
    dataplane(3, &format!("workers = [1]\n{keys}")) + &lab_services(&dips)
}

fn start(lab: &Lab, keys: &str) -> (Daemon, Vec<Backend>) {
    let backends = start_backends(lab);
    (start_daemon(lab, &config(keys, [1, 1, 1])), backends)
}

fn check_traffic(lab: &Lab, d: &mut Daemon, dataplane: &str) {
    let (nat, dsr, udp): (SocketAddr, SocketAddr, SocketAddr) = (
        NAT_VIP.parse().unwrap(),
        DSR_VIP.parse().unwrap(),
        UDP_VIP.parse().unwrap(),
    );
    for vip in [nat, dsr] {
        let seen: BTreeSet<String> = (0..30)
            .map(|_| {
                http_once(&lab.client, vip).unwrap_or_else(|e| {
                    panic!(
                        "{vip}: {e:#}\nlog: {}\nstatus: {}\nworkers: {:?}",
                        std::fs::read_to_string(d.log_path()).unwrap_or_default(),
                        d.status_json().map(|s| s.to_string()).unwrap_or_default(),
                        weir_control::tier::read_workers(&d.run_dir())
                    )
                })
            })
            .collect();
        assert!(
            seen.len() >= 2,
            "{vip}: 30 connections reached only {seen:?}"
        );
    }
    let answers = udp_requests(&lab.client, udp, 20, Duration::from_millis(500)).unwrap();
    assert_eq!(answers.iter().flatten().count(), 20, "UDP: {answers:?}");

    // Keep-alive connections through a weight change: each stays on its backend.
    let mut live = spawn_http(&lab.client, nat, 15, 40, Duration::from_millis(50));
    live.extend(spawn_http(
        &lab.client,
        dsr,
        15,
        40,
        Duration::from_millis(50),
    ));
    std::thread::sleep(Duration::from_millis(500));
    let log = d.reload(&config(dataplane, [3, 1, 0])).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    for h in live {
        let r = h.join().unwrap();
        assert!(
            !r.violated() && r.served_by.len() == 40,
            "a connection moved or broke: {r:?}"
        );
    }
    let seen: BTreeSet<String> = (0..20)
        .filter_map(|_| http_once(&lab.client, nat).ok())
        .collect();
    assert!(
        !seen.contains("backend-3"),
        "a drained DIP got new connections: {seen:?}"
    );
}

/// `weir serve --takeover` mid-traffic: the predecessor hands its sockets
/// over, the successor's worker starts with an empty table, and every
/// keep-alive connection stays on its backend (the tables are the same, so
/// a connection the new worker has not seen is dispatched where it was).
/// Requests of each keep-alive connection that lives through a takeover, one
/// every 50 ms: the takeover comes 0.5 s in, and the successor must see
/// enough of them (at least 100 nat replies) whatever the load start-up takes.
const LIVE_REQUESTS: usize = 60;

fn restart_keeps_connections(lab: &Lab, d: &mut Daemon) {
    let (nat, dsr): (SocketAddr, SocketAddr) = (NAT_VIP.parse().unwrap(), DSR_VIP.parse().unwrap());
    let mut live = spawn_http(
        &lab.client,
        nat,
        10,
        LIVE_REQUESTS,
        Duration::from_millis(50),
    );
    live.extend(spawn_http(
        &lab.client,
        dsr,
        10,
        LIVE_REQUESTS,
        Duration::from_millis(50),
    ));
    std::thread::sleep(Duration::from_millis(500));
    d.restart().expect("restart with --takeover");
    for h in live {
        let r = h.join().unwrap();
        assert!(
            !r.violated() && r.served_by.len() == LIVE_REQUESTS,
            "a connection moved or broke across the takeover: {r:?}"
        );
    }
}

#[test]
fn software_tier_serves_nat_dsr_and_udp() {
    let lab = Lab::build(3).expect("building the lab");
    let dp = "tier = \"software\"";
    let (mut d, _b) = start(&lab, dp);
    check_traffic(&lab, &mut d, dp);
    restart_keeps_connections(&lab, &mut d);
    std::thread::sleep(Duration::from_millis(1200));
    let status = d.status_json().unwrap();
    assert!(counter(&status, "to_software") > 500, "{status}");
    assert_eq!(
        counter(&status, "conn_new"),
        0,
        "XDP installs nothing: {status}"
    );
    // Only in the takeover's hand-over gap (a few ms at 20 connections).
    assert!(counter(&status, "drop_no_worker") < 500, "{status}");
    // The successor's worker took over the 20 keep-alive connections.
    assert!(worker_counter(&d, weir_abi::WEIR_STAT_CONN_NEW) >= 20);
    let rev_nat = worker_counter(&d, weir_abi::WEIR_STAT_REV_NAT);
    assert!(
        rev_nat > 100,
        "the successor's workers rewrote {rev_nat} replies"
    );
    // Every frame the worker took ended in one of its outcome counters.
    let rx = worker_counter(&d, weir_abi::WEIR_STAT_RX);
    let outcomes: u64 = (weir_abi::WEIR_STAT_PASS_NOT_IP..=weir_abi::WEIR_STAT_DROP_REPLY_NO_STATE)
        .map(|s| worker_counter(&d, s))
        .sum();
    assert_eq!(rx, outcomes);
    d.stop().unwrap();
}

#[test]
fn hybrid_tier_promotes_demotes_and_keeps_every_connection_on_its_backend() {
    let lab = Lab::build(3).expect("building the lab");
    let dp = "tier = \"hybrid\"\nfast_table_size = 16\noffload = \"first\"";
    let (mut d, _b) = start(&lab, dp);
    check_traffic(&lab, &mut d, dp);
    restart_keeps_connections(&lab, &mut d);
    std::thread::sleep(Duration::from_millis(1200));
    let status = d.status_json().unwrap();
    // First: the fast table filled up, and hits were forwarded in XDP: each
    // of its 16 connections sends at least its request and its FIN after
    // the packet that admitted it.
    assert!(counter(&status, "conn_hit") >= 2 * 16, "{status}");
    assert!(counter(&status, "to_software") > 100, "{status}");
    assert!(
        status["connections"]["established"].as_u64().unwrap() <= 16,
        "{status}"
    );
    d.stop().unwrap();

    // Heavy: two groups of keep-alive connections take turns being busy;
    // the busy group is promoted, the idle one demoted, and back.
    // (The same fast_table_size: the pinned tables keep their sizes.)
    let dp = "tier = \"hybrid\"\nfast_table_size = 16\noffload = \"heavy\"";
    d.write_config(&config(dp, [1, 1, 1])).unwrap();
    d.start().unwrap();
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    let fast = spawn_http(&lab.client, nat, 20, 150, Duration::from_millis(20));
    let slow = spawn_http(&lab.client, nat, 10, 6, Duration::from_millis(500));
    for h in fast.into_iter().chain(slow) {
        let r = h.join().unwrap();
        assert!(!r.violated(), "a connection moved or broke: {r:?}");
    }
    std::thread::sleep(Duration::from_millis(1200));
    let workers = weir_control::tier::read_workers(&d.run_dir()).unwrap();
    let offload = &workers[0]["offload"];
    assert!(offload["promoted"].as_u64().unwrap() >= 6, "{offload}");
    assert!(
        offload["demoted_idle"].as_u64().unwrap()
            + offload["demoted_closed"].as_u64().unwrap()
            + offload["demoted_light"].as_u64().unwrap()
            > 0,
        "{offload}"
    );
    let status = d.status_json().unwrap();
    assert!(
        status["connections"]["established"].as_u64().unwrap() <= 16,
        "{status}"
    );
    d.stop().unwrap();
}

/// A queue that cannot take the worker's AF_XDP socket (another socket
/// holds it): `weir serve` says so, exits non-zero, and leaves no program
/// attached and nothing pinned.
#[test]
fn a_queue_that_takes_no_socket_fails_the_start_cleanly() {
    let lab = Lab::build(3).expect("building the lab");
    let ns = lab.lb.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        weir_lab::netns::enter(&ns).unwrap();
        let s = weir_afxdp::Socket::new("wc0", 0, &weir_afxdp::Config::default());
        held_tx.send(s.is_ok()).unwrap();
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
        drop(s);
    });
    assert!(
        held_rx.recv().unwrap(),
        "the test could not take wc0's queue"
    );
    let mut d = Daemon::new(exe(), &lab.lb).unwrap();
    d.write_config(&config("tier = \"software\"", [1, 1, 1]))
        .unwrap();
    let err = d.start().expect_err("weir serve started on a taken queue");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("starting the software tier") && msg.contains("wc0"),
        "{msg}"
    );
    assert_nothing_left(&d, &lab.lb, &["wc0", "wb1", "wb2", "wb3"], "a taken queue");
    done_tx.send(()).unwrap();
    holder.join().unwrap();
}
