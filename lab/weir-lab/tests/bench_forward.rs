//! Smoke test of `weir-lab bench forward` on its newest paths, kept short: one
//! packet-rate trial through a weir ipip VIP (the sinks count IPIP frames
//! by their inner datagram) and one TCP flow through weir ipip (the backend
//! decapsulates with `weir decap`) and HAProxy. Checks that packets and
//! bytes got through each and that the report is well formed; which
//! balancer is faster is a benchmark, not a test.

use std::process::Command;

use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

#[test]
fn ipip_and_haproxy_carry_packets_and_a_tcp_flow() {
    let json = std::env::temp_dir().join(format!("weir-forward-test-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["bench", "forward", "--balancers", "weir-ipip,haproxy"])
        .args(["--flows", "100", "--dips", "2", "--duration", "0.5"])
        .args(["--runs", "1", "--tcp-seconds", "1", "--json"])
        .arg(&json)
        .output()
        .expect("running weir-lab bench forward");
    assert!(
        out.status.success(),
        "weir-lab bench forward failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("One long TCP flow"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);

    // HAProxy does not carry UDP: one packet-rate row, weir ipip's.
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["balancer"], "weir-ipip");
    let t = &r["trials"][0];
    assert!(
        f(t, "received") > 0.0,
        "the sinks counted no IPIP frame: {t:#}"
    );
    // The sinks count over the trial plus a drain: a little over is timing.
    assert!(f(t, "received") <= f(t, "offered") * 1.02, "{t:#}");

    let tcp = r["tcp_trials"].as_array().unwrap();
    let names: Vec<&str> = tcp
        .iter()
        .map(|t| t["balancer"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["weir-ipip", "haproxy"], "{tcp:#?}");
    for t in tcp {
        assert!(f(t, "gbps") > 0.01, "the TCP flow moved nothing: {t:#}");
        assert!(t["retransmits"].is_u64(), "{t:#}");
        assert!(t["drops"].is_object(), "{t:#}");
    }
    assert_eq!(r["tcp_rows"].as_array().unwrap().len(), 2);
}
