//! The features weir_lb carries, end to end, in namespaces the test builds
//! and always removes (a client, weir and two backends): a dsr-only
//! configuration runs a dsr-only program; a reload that adds a nat VIP, and
//! then a QUIC VIP, swaps in a program that carries them on every interface,
//! while connections made before keep their backend and the new VIP
//! answers; a change whose wider program cannot be swapped in is refused
//! and leaves the running program and configuration.

use std::net::SocketAddr;
use std::time::Duration;

use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_lab::client::spawn_http;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

mod common;
use common::quic::{CONFIG_ID, SERVER_IDS, SERVER_ID_LEN};
use common::{
    assert_some_on, dataplane, dip, join_unbroken, new_connections, serial, start_backends,
    start_daemon, vip,
};

const DSR_VIP: &str = "10.77.100.2:80";
const NAT_VIP: &str = "10.77.100.1:80";
const IFACES: [&str; 3] = ["wc0", "wb1", "wb2"];
/// Long-lived connections through the swap: a request every 100 ms for 4 s.
const REQUESTS: usize = 40;

/// The dsr VIP over both backends; with `nat`, the nat VIP too; with
/// `quic`, a QUIC VIP (dsr, UDP 443); then the `extra` text.
fn config(nat: bool, quic: bool, extra: &str) -> String {
    let mut s = dataplane(2, "");
    s += &vip("web-dsr", "10.77.100.2", 80, "tcp", "dsr");
    s += &dip(1, "");
    s += &dip(2, "");
    if nat {
        s += &vip("web", "10.77.100.1", 80, "tcp", "nat");
        s += &dip(1, "port = 8080");
        s += &dip(2, "port = 8080");
    }
    if quic {
        s += &vip("quic", "10.77.100.2", 443, "udp", "dsr");
        s += &format!("quic = {{ server_id_len = {SERVER_ID_LEN}, config_id = {CONFIG_ID} }}\n");
        for (b, sid) in (1..=2).zip(SERVER_IDS) {
            s += &dip(b, &format!("server_id = \"{sid}\""));
        }
    }
    s + extra
}

/// The id of the XDP program on each of weir's interfaces in `ns`.
fn attached(ns: &str) -> Vec<Option<u32>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        IFACES
            .iter()
            .map(|i| attached_prog_id(Iface::by_name(i).unwrap().ifindex))
            .collect()
    })
    .join()
    .unwrap()
}

/// One program, the same on every interface.
fn one_program(ns: &str, what: &str) -> u32 {
    let ids = attached(ns);
    assert!(
        ids[0].is_some() && ids.iter().all(|i| *i == ids[0]),
        "{what}: programs on {IFACES:?}: {ids:?}"
    );
    ids[0].unwrap()
}

#[test]
fn a_change_that_needs_more_features_swaps_the_program_and_keeps_connections() {
    let _g = serial();
    let lab = Lab::build(2).expect("building the lab");
    let _backends = start_backends(&lab);
    let mut d = start_daemon(&lab, &config(false, false, ""));
    let log = d.new_log();
    assert!(
        log.contains("weir_lb carries dsr\n"),
        "a dsr-only configuration loads a dsr-only program:\n{log}"
    );
    let dsr_only = one_program(&lab.lb, "started");
    let dsr: SocketAddr = DSR_VIP.parse().unwrap();
    let nat: SocketAddr = NAT_VIP.parse().unwrap();

    // The dsr VIP answers; then connections made before the swap.
    assert!(!new_connections(&lab.client, dsr, 4).is_empty());
    let live = spawn_http(&lab.client, dsr, 8, REQUESTS, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(800));
    let said = d.reload(&config(true, false, "")).unwrap();
    assert!(
        said.contains("weir_lb now carries dsr, nat") && said.contains("reloaded: +1 -0 VIPs"),
        "{said}"
    );
    let with_nat = one_program(&lab.lb, "nat added");
    assert_ne!(with_nat, dsr_only, "the program was not swapped");
    // The new VIP answers, through the program that carries nat.
    assert!(!new_connections(&lab.client, nat, 6).is_empty());

    // A QUIC VIP: the program carries QUIC too.
    let said = d.reload(&config(true, true, "")).unwrap();
    assert!(
        said.contains("weir_lb now carries dsr, nat, quic")
            && said.contains("reloaded: +1 -0 VIPs"),
        "{said}"
    );
    let with_quic = one_program(&lab.lb, "QUIC added");
    assert_ne!(with_quic, with_nat, "the program was not swapped");

    // Every connection made before the swaps kept its backend.
    let records = join_unbroken(live, REQUESTS);
    assert_some_on(&records, "backend-1");
    assert_some_on(&records, "backend-2");

    // Another tool took weir's program off wb2: a change that needs a wider
    // program cannot swap it in there. It is refused, the interfaces that
    // had the program keep it, and the configuration stays.
    std::thread::spawn({
        let ns = lab.lb.clone();
        move || {
            enter(&ns).unwrap();
            for mode in ["xdp", "xdpgeneric"] {
                let _ = std::process::Command::new("ip")
                    .args(["link", "set", "dev", "wb2", mode, "off"])
                    .status();
            }
        }
    })
    .join()
    .unwrap();
    let telemetry = "\n[controller]\npolicy = \"static\"\ntelemetry = \"passive\"\n";
    let said = d.reload(&config(true, true, telemetry)).unwrap();
    assert!(
        said.contains("reload refused")
            && said.contains("needs weir_lb to carry dsr, nat, quic, telemetry")
            && said.contains("wb2")
            && said.contains("the running program and configuration stay"),
        "{said}"
    );
    assert_eq!(
        attached(&lab.lb),
        vec![Some(with_quic), Some(with_quic), None],
        "the refused change moved a program"
    );
    let st = d.status_json().unwrap();
    assert!(
        st["controller"].is_null() || st["controller"]["telemetry"] != "passive",
        "the refused configuration is in force: {st:#}"
    );
    assert!(!new_connections(&lab.client, dsr, 4).is_empty());
    d.stop().unwrap();
}
