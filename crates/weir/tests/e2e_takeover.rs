//! `kill -9` of `weir serve`, then `weir serve --takeover`, in namespaces the
//! test builds (a client, weir and three backends) and always removes. The
//! orphaned program keeps forwarding; a plain start on its interfaces is
//! refused with a message that names it and leaves nothing behind; the
//! takeover adopts it with its pinned state, so established keep-alive
//! connections keep their backend, and the new daemon controls the tables.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::pinned_map_ids;
use weir_lab::client::spawn_http;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

mod common;
use common::{
    assert_some_on, dataplane, dip, join_unbroken, new_connections, start_backends, start_daemon,
    vip,
};

const NAT_VIP: &str = "10.77.100.1:80";
/// Requests per long-lived connection, 100 ms apart: they outlast the kill,
/// the refused start, the takeover and the reload.
const REQUESTS: usize = 100;

/// One nat VIP over backends 1..=3 with the given weights.
fn config(weights: [u32; 3]) -> String {
    let mut s =
        dataplane(3, "conn_table_size = 65536") + &vip("web", "10.77.100.1", 80, "tcp", "nat");
    for (b, w) in (1..).zip(weights) {
        s += &dip(b, &format!("port = 8080\nweight = {w}"));
    }
    s
}

/// The XDP program id on each of the load balancer's interfaces.
fn prog_ids(lab: &Lab) -> Vec<Option<u32>> {
    let (ns, names) = (lab.lb.clone(), lab.lb_interfaces());
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        names
            .iter()
            .map(|n| attached_prog_id(Iface::by_name(n).unwrap().ifindex))
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
fn takeover_adopts_an_orphan_after_kill_9_without_breaking_connections() {
    let lab = Lab::build(3).expect("building the lab");
    let _backends = start_backends(&lab);
    let mut d = start_daemon(&lab, &config([1, 1, 1]));
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    assert_eq!(
        new_connections(&lab.client, nat, 30).len(),
        3,
        "all backends serve"
    );

    let live = spawn_http(&lab.client, nat, 24, REQUESTS, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(500));

    // kill -9: the program stays attached, with no process holding it.
    d.kill().unwrap();
    let orphan = prog_ids(&lab);
    assert!(orphan[0].is_some(), "the program went with the daemon");
    assert!(orphan.iter().all(|id| *id == orphan[0]), "{orphan:?}");
    let orphan_id = orphan[0].unwrap();
    let seen = new_connections(&lab.client, nat, 10);
    assert!(seen.len() >= 2, "the orphan forwards: {seen:?}");
    let pins = pinned_map_ids(&d.pin_dir).unwrap();
    assert!(pins.iter().any(|(n, _)| *n == "conns"), "{pins:?}");

    // A plain start names the orphan and what to run, and leaves nothing.
    let e = format!("{:#}", d.start().unwrap_err());
    assert!(
        e.contains("exited (exit status: 1)")
            && e.contains("wc0 already has an XDP program")
            && e.contains(&format!("id {orphan_id}, name weir_lb"))
            && e.contains("orphaned weir")
            && e.contains("weir serve --takeover"),
        "{e}"
    );
    assert_eq!(prog_ids(&lab), orphan, "the refused start changed XDP");
    assert_eq!(
        pinned_map_ids(&d.pin_dir).unwrap(),
        pins,
        "the refused start changed the pins"
    );

    // --takeover adopts it: a new program on every interface, same maps.
    d.adopt().expect("--takeover of the orphan");
    assert!(
        d.new_log().contains(&format!(
            "adopted the orphaned weir program (id {orphan_id})"
        )),
        "{}",
        d.new_log()
    );
    let adopted = prog_ids(&lab);
    assert!(
        adopted[0].is_some_and(|id| id != orphan_id) && adopted.iter().all(|id| *id == adopted[0]),
        "orphan {orphan_id}, now {adopted:?}"
    );
    assert_eq!(
        pinned_map_ids(&d.pin_dir).unwrap(),
        pins,
        "the takeover did not reuse the orphan's maps"
    );
    assert!(
        live.iter().all(|h| !h.is_finished()),
        "connections ended before the takeover; the test proves nothing"
    );

    // The new daemon controls the tables: drain backend-1.
    let log = d.reload(&config([0, 1, 1])).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    let seen = new_connections(&lab.client, nat, 30);
    assert_eq!(
        seen,
        BTreeSet::from(["backend-2".to_string(), "backend-3".to_string()]),
        "new connections after draining backend-1"
    );

    let records = join_unbroken(live, REQUESTS);
    assert_some_on(&records, "backend-1");
    d.stop().unwrap();
    assert_eq!(prog_ids(&lab)[0], None, "stop left XDP attached");
}
