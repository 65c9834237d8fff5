//! End to end in network namespaces the test builds (client, weir, four
//! backends) and always removes: real TCP (HTTP) and UDP through nat and dsr
//! VIPs; every connection stays on one backend while weights change, a
//! backend is added, another removed, and the daemon restarts mid-traffic.
//! And `weir-lab demo`: the AWFD controller moves new connections off a
//! backend that slows down, where a static split does not.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use weir_lab::client::{http_once, spawn_http, udp_requests};
use weir_lab::demo::DemoArgs;
use weir_lab::topology::Lab;

mod common;
use common::{counter, dataplane, lab_services, serial, start_backends, start_daemon, TempDir};

const NAT_VIP: &str = "10.77.100.1:80";
const DSR_VIP: &str = "10.77.100.2:80";
const UDP_VIP: &str = "10.77.100.1:5353";

/// The lab configuration with the given (backend, weight) DIPs on every VIP.
fn config(dips: &[(usize, u32)]) -> String {
    dataplane(4, "conn_table_size = 65536") + &lab_services(dips)
}

fn backends_of(ns_client: &str, vip: SocketAddr, n: usize) -> BTreeSet<String> {
    (0..n)
        .filter_map(|_| http_once(ns_client, vip).ok())
        .collect()
}

#[test]
fn connections_stay_on_their_backend_through_changes_and_restart() {
    let lab = Lab::build(4).expect("building the lab");
    let _backends = start_backends(&lab);
    let mut d = start_daemon(&lab, &config(&[(1, 1), (2, 1), (3, 1)]));

    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    let dsr: SocketAddr = DSR_VIP.parse().unwrap();
    let udp: SocketAddr = UDP_VIP.parse().unwrap();
    for vip in [nat, dsr] {
        let seen = backends_of(&lab.client, vip, 30);
        assert!(
            seen.len() >= 2,
            "{vip}: 30 new connections reached only {seen:?}"
        );
        assert!(
            !seen.contains("backend-4"),
            "backend-4 is not configured yet: {seen:?}"
        );
    }
    let answers = udp_requests(&lab.client, udp, 30, Duration::from_millis(500)).unwrap();
    let udp_backends: BTreeSet<_> = answers.iter().flatten().cloned().collect();
    assert_eq!(
        answers.iter().flatten().count(),
        30,
        "UDP answers: {answers:?}"
    );
    assert!(udp_backends.len() >= 2, "{udp_backends:?}");

    // Long-lived connections on both TCP VIPs: 45 requests, 100 ms apart.
    let mut live = spawn_http(&lab.client, nat, 20, 45, Duration::from_millis(100));
    live.extend(spawn_http(
        &lab.client,
        dsr,
        20,
        45,
        Duration::from_millis(100),
    ));
    std::thread::sleep(Duration::from_millis(600));

    let log = d.reload(&config(&[(1, 3), (2, 1), (3, 1)])).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    std::thread::sleep(Duration::from_millis(400));

    let log = d
        .reload(&config(&[(1, 3), (2, 1), (3, 1), (4, 1)]))
        .unwrap();
    assert!(log.contains("reloaded"), "{log}");
    let seen = backends_of(&lab.client, nat, 40);
    assert!(
        seen.contains("backend-4"),
        "the added backend gets no new connections: {seen:?}"
    );

    let log = d.reload(&config(&[(1, 3), (2, 1), (4, 1)])).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    let seen = backends_of(&lab.client, nat, 40);
    assert!(
        !seen.contains("backend-3"),
        "the removed backend still gets new connections: {seen:?}"
    );

    // A bad configuration is refused and changes nothing.
    let log = d.reload("[dataplane]\ninterfaces = 7\n").unwrap();
    assert!(log.contains("reload refused"), "{log}");
    d.write_config(&config(&[(1, 3), (2, 1), (4, 1)])).unwrap();

    d.restart().expect("restart with takeover");
    let seen = backends_of(&lab.client, dsr, 20);
    assert!(!seen.is_empty(), "no new connection after the restart");

    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let mut kept = 0;
    for r in &records {
        let first = r.served_by.first().map(String::as_str);
        if first == Some("backend-3") {
            continue; // its DIP was removed: it may break, that is the contract
        }
        assert!(
            !r.violated() && r.served_by.len() == 45,
            "a connection moved or broke: {r:?}"
        );
        kept += 1;
    }
    assert!(kept >= 20, "only {kept} connections were on kept backends");

    let status = d.status_json().unwrap();
    let counter = |name: &str| counter(&status, name);
    assert!(
        counter("redirect") > 1000,
        "XDP redirected too little: {status}"
    );
    assert!(counter("rev_nat") > 500, "{status}");
    assert!(counter("conn_new") >= 40 + 60, "{status}");
    let outcomes: u64 = weir_control::status::outcome_names()
        .iter()
        .map(|n| counter(n))
        .sum();
    assert_eq!(
        outcomes,
        counter("rx"),
        "every packet ends in exactly one outcome: {status}"
    );
    d.stop().unwrap();
}

/// The `share` of `backend` in phase `phase` of the demo run `policy`.
fn demo_share(report: &Value, policy: &str, phase: &str, backend: &str) -> f64 {
    let run = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == policy)
        .unwrap_or_else(|| panic!("no {policy} run: {report:#}"));
    let p = run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == phase)
        .unwrap_or_else(|| panic!("no {phase} phase in {policy}: {report:#}"));
    p["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["backend"] == backend)
        .unwrap_or_else(|| panic!("no {backend} in {policy} {phase}: {report:#}"))["share"]
        .as_f64()
        .unwrap()
}

#[test]
fn demo_moves_new_connections_off_a_slowed_backend_under_awfd_but_not_static() {
    let _g = serial();
    let dir = TempDir::new("weir-demo");
    let json = dir.path().join("demo.json");
    let args = DemoArgs {
        threads: 6,
        requests: 2,
        pause_ms: 25,
        warmup: 3.0,
        before: 5.0,
        after: 6.0,
        config: None,
        json: json.clone(),
        screenshot: dir.path().join("dashboard.png"),
        no_screenshot: true,
    };
    weir_lab::demo::run(&args).expect("weir-lab demo");
    let text = std::fs::read_to_string(&json).expect("the demo writes its JSON");
    let report: Value = serde_json::from_str(&text).expect("well-formed JSON");
    for field in [
        "backends",
        "slowed_backend",
        "warmup_s",
        "before_s",
        "after_s",
        "client_threads",
        "requests_per_connection",
        "runs",
        "wall_s",
    ] {
        assert!(!report[field].is_null(), "no {field}: {report:#}");
    }
    let slowed = report["slowed_backend"].as_str().unwrap();
    let backends: Vec<&str> = report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(backends.len(), 3, "{report:#}");
    assert!(backends.contains(&slowed), "{report:#}");
    let runs = report["runs"].as_array().unwrap();
    let policies: Vec<&str> = runs.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["awfd", "static"], "{report:#}");
    for run in runs {
        let phases: Vec<&str> = run["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["before", "after"], "{report:#}");
        for p in run["phases"].as_array().unwrap() {
            for field in [
                "connections",
                "requests",
                "p50_ms",
                "p99_ms",
                "failed_requests",
                "moved_connections",
            ] {
                assert!(p[field].is_number(), "no {field}: {p:#}");
            }
            assert!(
                p["connections"].as_u64().unwrap() >= 100,
                "too little traffic: {p:#}"
            );
            assert!(
                p["failed_requests"].as_u64().unwrap() * 50 <= p["requests"].as_u64().unwrap(),
                "too many failed requests: {p:#}"
            );
            assert_eq!(p["moved_connections"], 0, "{p:#}");
            let shares: f64 = backends
                .iter()
                .map(|b| {
                    let s = demo_share(
                        &report,
                        run["policy"].as_str().unwrap(),
                        p["phase"].as_str().unwrap(),
                        b,
                    );
                    assert!((0.0..=1.0).contains(&s), "{p:#}");
                    s
                })
                .sum();
            assert!((shares - 1.0).abs() < 1e-6, "shares add to {shares}: {p:#}");
        }
    }
    let awfd_before = demo_share(&report, "awfd", "before", slowed);
    let awfd_after = demo_share(&report, "awfd", "after", slowed);
    let static_before = demo_share(&report, "static", "before", slowed);
    let static_after = demo_share(&report, "static", "after", slowed);
    eprintln!(
        "{slowed}'s share of new connections: awfd {:.0}% -> {:.0}%, static {:.0}% -> {:.0}%",
        100.0 * awfd_before,
        100.0 * awfd_after,
        100.0 * static_before,
        100.0 * static_after
    );
    assert!(
        awfd_before > 0.05,
        "AWFD gave {slowed} nothing before it slowed down: {report:#}"
    );
    assert!(
        awfd_after < awfd_before / 2.0,
        "AWFD kept {slowed} at {awfd_after} after the slowdown (from {awfd_before}): {report:#}"
    );
    assert!(
        awfd_after < static_after,
        "AWFD gave the slowed {slowed} no less than the static split: {report:#}"
    );
    for s in [static_before, static_after] {
        assert!(
            (0.2..0.47).contains(&s),
            "the static split gave {slowed} {s}, not about a third: {report:#}"
        );
    }
}
