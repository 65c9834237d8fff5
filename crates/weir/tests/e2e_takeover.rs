//! `kill -9` of `weir serve`, then `weir serve --takeover`, in namespaces the
//! test builds (a client, weir and three backends) and always removes. The
//! orphaned program keeps forwarding; a plain start on its interfaces is
//! refused with a message that names it and leaves nothing behind; the
//! takeover adopts it with its pinned state, so established keep-alive
//! connections keep their backend, and the new daemon controls the tables.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::pinned_map_ids;
use weir_lab::backend::Backend;
use weir_lab::client::{http_once, spawn_http};
use weir_lab::daemon::Daemon;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

const NAT_VIP: &str = "10.77.100.1:80";
/// Requests per long-lived connection, 100 ms apart: they outlast the kill,
/// the refused start, the takeover and the reload.
const REQUESTS: usize = 100;

/// One nat VIP over backends 1..=3 with the given weights.
fn config(weights: [u32; 3]) -> String {
    let mut s = String::from(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\"]\nconn_table_size = 65536\n\
         \n[[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\n\
         mode = \"nat\"\n",
    );
    for (i, w) in weights.iter().enumerate() {
        s += &format!(
            "[[vip.dip]]\naddress = \"10.77.{}.2\"\nport = 8080\nweight = {w}\n",
            i + 1
        );
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

/// Backends that `n` new connections reached; every one must be answered.
fn new_connections(lab: &Lab, n: usize) -> BTreeSet<String> {
    let vip: SocketAddr = NAT_VIP.parse().unwrap();
    (0..n)
        .map(|i| http_once(&lab.client, vip).unwrap_or_else(|e| panic!("new connection {i}: {e}")))
        .collect()
}

#[test]
fn takeover_adopts_an_orphan_after_kill_9_without_breaking_connections() {
    let lab = Lab::build(3).expect("building the lab");
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)).unwrap())
        .collect();
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(&config([1, 1, 1])).unwrap();
    d.start().unwrap();
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    assert_eq!(new_connections(&lab, 30).len(), 3, "all backends serve");

    let live = spawn_http(&lab.client, nat, 24, REQUESTS, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(500));

    // kill -9: the program stays attached, with no process holding it.
    d.kill().unwrap();
    let orphan = prog_ids(&lab);
    assert!(orphan[0].is_some(), "the program went with the daemon");
    assert!(orphan.iter().all(|id| *id == orphan[0]), "{orphan:?}");
    let orphan_id = orphan[0].unwrap();
    let seen = new_connections(&lab, 10);
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
    let seen = new_connections(&lab, 30);
    assert_eq!(
        seen,
        BTreeSet::from(["backend-2".to_string(), "backend-3".to_string()]),
        "new connections after draining backend-1"
    );

    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == REQUESTS,
            "a connection moved or broke: {r:?}"
        );
    }
    assert!(
        records.iter().any(|r| r.backend() == Some("backend-1")),
        "no long-lived connection on the drained backend-1 to keep"
    );
    d.stop().unwrap();
    assert_eq!(prog_ids(&lab)[0], None, "stop left XDP attached");
}
