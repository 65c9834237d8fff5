//! Smoke test of `weir-lab bench xdp --lifecycle`, kept short: a small
//! table, both families, nat and dsr. The bench checks the data-plane
//! counters after every step (each SYN installed a half-open entry, each
//! ACK promoted it, ...); this test checks that every step of both modes
//! was measured and that a forward report's packets per connection are
//! priced with them, and that a forward report without them is refused.
//!
//! Needs root (BPF, a network namespace).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

fn lifecycle(forward: &Path, out_json: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["bench", "xdp", "--lifecycle", "--sizes", "2000"])
        .args(["--runs", "2", "--spread", "64", "--forward"])
        .arg(forward)
        .arg("--json")
        .arg(out_json)
        .output()
        .expect("running weir-lab bench xdp --lifecycle")
}

/// A forward report's close row of weir in `mode` (the fields the
/// reconciliation reads).
fn close_row(balancer: &str, with_mix: bool) -> Value {
    let mut row = json!({
        "balancer": balancer,
        "mode": "close",
        "bpf_ns_per_request": 6000.0,
    });
    if with_mix {
        row["packets_per_connection"] = json!({
            "xdp_runs": 10.0, "syns": 1.0, "syn_retransmits": 0.0, "promotions": 1.0,
            "hits": 4.0, "reverse_nats": 4.0, "closing": 1.0,
        });
    }
    row
}

#[test]
fn every_step_of_a_connection_is_timed_and_priced() {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let forward = dir.join(format!("weir-lifecycle-forward-{pid}.json"));
    let report = dir.join(format!("weir-lifecycle-{pid}.json"));
    let rows = json!({ "http_rows": [close_row("weir-nat", true), close_row("weir-dsr", true)] });
    std::fs::write(&forward, rows.to_string()).unwrap();
    let out = lifecycle(&forward, &report);
    assert!(
        out.status.success(),
        "weir-lab bench xdp --lifecycle failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ACK (promote)"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let _ = std::fs::remove_file(&report);

    // Per family: nat's eight steps, dsr's six (its replies pass by).
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * (8 + 6), "{rows:#?}");
    for row in rows {
        assert!(
            f(row, "ns_median") > 0.0 && f(row, "floor_ns_median") > 0.0,
            "{row:#}"
        );
        assert_eq!(row["calls_per_run"].as_u64(), Some(64), "{row:#}");
    }
    assert!(
        f(&r, "half_open_before") > 0.9 * f(&r, "half_open_capacity"),
        "the half-open table is full before the first SYN: {r:#}"
    );

    let rec = r["reconciliation"].as_array().unwrap();
    assert_eq!(rec.len(), 2, "{rec:#?}");
    for c in rec {
        let predicted = f(c, "predicted_bpf_ns");
        assert!(predicted > 0.0, "{c:#}");
        assert_eq!(f(c, "measured_bpf_ns"), 6000.0, "{c:#}");
        assert!(
            (f(c, "predicted_over_measured") - predicted / 6000.0).abs() < 1e-9,
            "{c:#}"
        );
        let kinds = c["packets"].as_array().unwrap().len();
        let want = if c["mode"] == "nat" { 7 } else { 5 };
        assert_eq!(kinds, want, "{c:#}");
    }

    // A forward report from before the packet counts: a clear refusal.
    let old = json!({ "http_rows": [close_row("weir-nat", false)] });
    std::fs::write(&forward, old.to_string()).unwrap();
    let out = lifecycle(&forward, &report);
    let _ = std::fs::remove_file(&forward);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("packets_per_connection") && stderr.contains("rerun"),
        "{stderr}"
    );
}
