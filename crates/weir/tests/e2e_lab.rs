//! End to end in network namespaces the test builds (client, weir, four
//! backends) and always removes: real TCP (HTTP) and UDP through nat and dsr
//! VIPs; every connection stays on one backend while weights change, a
//! backend is added, another removed, and the daemon restarts mid-traffic.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use weir_lab::backend::Backend;
use weir_lab::client::{http_once, spawn_http, udp_requests};
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

const NAT_VIP: &str = "10.77.100.1:80";
const DSR_VIP: &str = "10.77.100.2:80";
const UDP_VIP: &str = "10.77.100.1:5353";

/// The lab configuration with the given (backend, weight) DIPs on every VIP.
fn config(dips: &[(usize, u32)]) -> String {
    let mut s = String::from(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\", \"wb4\"]\nconn_table_size = 65536\n",
    );
    for (name, addr, port, proto, mode) in [
        ("web", "10.77.100.1", 80, "tcp", "nat"),
        ("web-dsr", "10.77.100.2", 80, "tcp", "dsr"),
        ("dns", "10.77.100.1", 5353, "udp", "nat"),
    ] {
        s += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nprotocol = \"{proto}\"\nmode = \"{mode}\"\n"
        );
        for (b, w) in dips {
            let dip_port = if name == "web" { "\nport = 8080" } else { "" };
            s += &format!("[[vip.dip]]\naddress = \"10.77.{b}.2\"{dip_port}\nweight = {w}\n");
        }
    }
    s
}

fn backends_of(ns_client: &str, vip: SocketAddr, n: usize) -> BTreeSet<String> {
    (0..n)
        .filter_map(|_| http_once(ns_client, vip).ok())
        .collect()
}

#[test]
fn connections_stay_on_their_backend_through_changes_and_restart() {
    let lab = Lab::build(4).expect("building the lab");
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)).unwrap())
        .collect();
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(&config(&[(1, 1), (2, 1), (3, 1)])).unwrap();
    d.start().unwrap();

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
    let counter = |name: &str| status["counters"][name].as_u64().unwrap();
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
