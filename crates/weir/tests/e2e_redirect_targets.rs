//! A veth whose peer has neither an XDP program nor GRO on drops every
//! frame weir redirects to it, while weir's own counters say `redirect`.
//! The daemon says so within seconds: a warning in its log naming the peer,
//! its namespace and the fix, `weir status` (human and JSON), and
//! `weir_redirect_target_ok` on /metrics.
//! GRO or an XDP program on the peer clears all three, and traffic flows.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use weir_lab::backend::Backend;
use weir_lab::client::http_once;
use weir_lab::daemon::Daemon;
use weir_lab::netns::ip_in;
use weir_lab::topology::{attach_pass, ethtool_in, Lab};

mod common;
use common::{assert_within, metrics, status_text};

const METRICS_PORT: u16 = 9101;
/// How soon a change shows (the check runs every 3 s).
const LIMIT: Duration = Duration::from_secs(10);
const VIP: &str = "10.77.100.1:80";

fn config() -> String {
    format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\"]\n\n\
         [metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n\n\
         [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
         [[vip.dip]]\naddress = \"10.77.1.2\"\nport = 8080\n"
    )
}

/// The JSON status's entry for `iface`, once the daemon wrote one.
fn target_of(d: &Daemon, iface: &str) -> Option<serde_json::Value> {
    let status = d.status_json().ok()?;
    status["redirect_targets"]
        .as_array()?
        .iter()
        .find(|t| t["interface"] == iface)
        .cloned()
}

fn verdict(d: &Daemon, iface: &str) -> String {
    target_of(d, iface).map_or(String::new(), |t| t["verdict"].as_str().unwrap().into())
}

#[test]
fn a_veth_peer_without_xdp_or_gro_is_reported_until_gro_or_xdp_on_it_lets_traffic_flow() {
    let lab = Lab::build(1).expect("building the lab");
    let backend_ns = lab.backends[0].clone();
    let _backend = Backend::start(&backend_ns, "backend-1").unwrap();
    // The trap: the backend's end has neither XDP nor GRO (a veth's
    // default).
    ip_in(&backend_ns, &["link", "set", "dev", "eth0", "xdp", "off"]).unwrap();
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(&config()).unwrap();
    d.start().unwrap();
    let vip: SocketAddr = VIP.parse().unwrap();

    let warning = format!(
        "warning: wb1 is a veth whose peer eth0 (in namespace {backend_ns}) has neither an XDP \
         program nor GRO on"
    );
    assert_within(LIMIT, "the log's warning", || {
        d.new_log().contains(&warning)
    });
    let log = d.new_log();
    assert!(
        log.contains(&format!(
            "`ip netns exec {backend_ns} ethtool -K eth0 gro on`"
        )),
        "{log}"
    );
    assert!(!log.contains("warning: wc0"), "{log}");
    assert_eq!(verdict(&d, "wb1"), "drops");
    assert_eq!(verdict(&d, "wc0"), "ok");
    let m = metrics(&lab.lb, METRICS_PORT);
    assert!(
        m.contains("weir_redirect_target_ok{interface=\"wb1\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("weir_redirect_target_ok{interface=\"wc0\"} 1\n"),
        "{m}"
    );

    // Connections through the VIP get nothing.
    for _ in 0..3 {
        assert!(
            http_once(&lab.client, vip).is_err(),
            "a connection went through a veth that drops"
        );
    }
    let text = status_text(&d);
    assert!(
        text.contains("send by wb1: FRAMES DROPPED: wb1 is a veth whose peer eth0"),
        "{text}"
    );
    assert!(text.contains("; fix: `ip netns exec"), "{text}");
    assert!(!text.contains("send by wc0"), "{text}");

    // GRO on the peer: the check flips and traffic flows.
    ethtool_in(&backend_ns, &["-K", "eth0", "gro", "on"]).unwrap();
    assert_within(LIMIT, "wb1 ok with GRO on its peer", || {
        verdict(&d, "wb1") == "ok"
    });
    assert!(
        d.new_log()
            .contains("wb1: frames sent out by it leave again"),
        "{}",
        d.new_log()
    );
    assert_eq!(http_once(&lab.client, vip).unwrap(), "backend-1");
    assert!(
        metrics(&lab.lb, METRICS_PORT).contains("weir_redirect_target_ok{interface=\"wb1\"} 1\n"),
        "{}",
        metrics(&lab.lb, METRICS_PORT)
    );
    assert!(!status_text(&d).contains("send by wb1"));

    // GRO off again, then an XDP program on the peer instead.
    ethtool_in(&backend_ns, &["-K", "eth0", "gro", "off"]).unwrap();
    assert_within(LIMIT, "wb1 drops again", || verdict(&d, "wb1") == "drops");
    attach_pass(&backend_ns, "eth0").unwrap();
    assert_within(LIMIT, "wb1 ok with XDP on its peer", || {
        verdict(&d, "wb1") == "ok"
    });
    assert_eq!(http_once(&lab.client, vip).unwrap(), "backend-1");
    d.stop().unwrap();
}
