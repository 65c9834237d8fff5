//! A daemon whose XDP program is detached or replaced from outside says so
//! within seconds: a warning in its log naming the interface and what is
//! there, `weir status` (human and JSON), and `weir_xdp_attached` on
//! /metrics. A restart attaches it again and clears all three.

use std::time::Duration;

use weir_lab::daemon::Daemon;
use weir_lab::netns::ip_in;
use weir_lab::topology::{attach_pass, Lab};

mod common;
use common::{assert_within, dataplane, dip, metrics, start_daemon, status_text, vip};

const METRICS_PORT: u16 = 9100;
/// How soon a change shows (the watch checks every second).
const LIMIT: Duration = Duration::from_secs(5);

fn config() -> String {
    let mut s = dataplane(3, "")
        + &format!("\n[metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n")
        + &vip("web", "10.77.100.1", 80, "tcp", "nat");
    for b in 1..=3 {
        s += &dip(b, "weight = 1");
    }
    s
}

/// The JSON status's entry for `iface`.
fn attach_of(d: &Daemon, iface: &str) -> serde_json::Value {
    let status = d.status_json().unwrap();
    status["xdp_attach"]
        .as_array()
        .unwrap_or_else(|| panic!("no xdp_attach in {status}"))
        .iter()
        .find(|a| a["interface"] == iface)
        .cloned()
        .unwrap_or_else(|| panic!("no {iface} in {status}"))
}

#[test]
fn a_detached_or_replaced_program_is_reported_and_a_restart_clears_it() {
    let lab = Lab::build(3).expect("building the lab");
    let mut d = start_daemon(&lab, &config());
    assert_within(LIMIT, "every interface reported attached", || {
        ["wc0", "wb1", "wb2", "wb3"].iter().all(|i| {
            d.status_json().unwrap()["xdp_attach"].is_array()
                && attach_of(&d, i)["attached"] == true
        })
    });
    assert!(status_text(&d).contains("xdp on wb2: attached\n"));

    // Detached from outside.
    ip_in(&lab.lb, &["link", "set", "dev", "wb2", "xdp", "off"]).unwrap();
    assert_within(LIMIT, "the log's warning", || {
        d.new_log().contains(
            "warning: wb2: weir's XDP program is no longer attached (no XDP program is there now)",
        )
    });
    let log = d.new_log();
    assert!(
        log.contains("`weir reload` does not attach again; restart weir"),
        "{log}"
    );
    let wb2 = attach_of(&d, "wb2");
    assert_eq!(wb2["attached"], false, "{wb2}");
    assert!(wb2["other_prog_id"].is_null(), "{wb2}");
    assert_eq!(attach_of(&d, "wb1")["attached"], true);
    let text = status_text(&d);
    assert!(
        text.contains("xdp on wb2: NOT ATTACHED: wb2: weir's XDP program is no longer attached"),
        "{text}"
    );
    assert!(text.contains("xdp on wb1: attached\n"), "{text}");
    let m = metrics(&lab.lb, METRICS_PORT);
    assert!(
        m.contains("weir_xdp_attached{interface=\"wb2\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("weir_xdp_attached{interface=\"wb1\"} 1\n"),
        "{m}"
    );

    // Another program in its place: named with its id.
    attach_pass(&lab.lb, "wb2").unwrap();
    assert_within(LIMIT, "the other program in the status", || {
        attach_of(&d, "wb2")["other_prog_name"] == "xdp_pass"
    });
    let id = attach_of(&d, "wb2")["other_prog_id"].as_u64().unwrap();
    assert_within(LIMIT, "the log naming the other program", || {
        d.new_log()
            .contains(&format!("(program {id} (xdp_pass) is there now)"))
    });
    assert!(d.new_log().contains("after detaching the other program"));

    // The remedy the warning names: the other program off, weir restarted.
    ip_in(&lab.lb, &["link", "set", "dev", "wb2", "xdp", "off"]).unwrap();
    d.stop().unwrap();
    d.start().unwrap();
    assert_within(LIMIT, "wb2 attached again", || {
        d.status_json().unwrap()["xdp_attach"].is_array()
            && attach_of(&d, "wb2")["attached"] == true
    });
    assert!(status_text(&d).contains("xdp on wb2: attached\n"));
    let m = metrics(&lab.lb, METRICS_PORT);
    assert!(
        m.contains("weir_xdp_attached{interface=\"wb2\"} 1\n"),
        "{m}"
    );
    assert!(!d.new_log().contains("warning: wb2"), "{}", d.new_log());
    d.stop().unwrap();
}
