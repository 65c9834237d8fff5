//! Smoke test of `weir-lab bench xdp`, kept short: both families, nat and dsr,
//! two table sizes and the LRU comparison. Checks that every series ran
//! (the bench itself checks the data-plane counters after each) and that
//! the report is well formed; which layout is faster is a benchmark, not a
//! test. Run under `taskset -c 0` so that "all CPUs at once" must reach
//! past the bench's own affinity.
//!
//! Needs root (BPF, a network namespace).

use std::process::Command;

use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

#[test]
fn both_families_and_lru_layouts_are_measured() {
    let json = std::env::temp_dir().join(format!("weir-xdp-test-{}.json", std::process::id()));
    let out = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_weir-lab")])
        .args(["bench", "xdp", "--sizes", "1,2000", "--modes", "nat,dsr"])
        .args([
            "--runs", "2", "--spread", "64", "--repeat", "1000", "--keys", "2",
        ])
        .args(["--compare-lru", "--json"])
        .arg(&json)
        .output()
        .expect("running weir-lab bench xdp under taskset (util-linux)");
    assert!(
        out.status.success(),
        "weir-lab bench xdp failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("LRU layouts at equal capacity"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let cpus = weir_lab::cpus::online().unwrap().len() as u64;
    assert_eq!(
        r["cpus"].as_u64(),
        Some(cpus),
        "online CPUs, not the affinity"
    );

    // Per family, mode and size: hot, hot1 and spread hits, and the miss
    // (into a flooded half-open table) on one CPU and on all of them.
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2 * (3 + 2), "{rows:#?}");
    for row in rows {
        assert!(
            f(row, "ns_median") > 0.0 && f(row, "floor_ns_median") > 0.0,
            "{row:#}"
        );
        if row["measure"] == "allcpus" {
            assert_eq!(row["calls_per_run"].as_u64(), Some(64 * cpus), "{row:#}");
        }
    }

    let lru = r["lru_comparison"].as_array().unwrap();
    let mut seen: Vec<String> = lru
        .iter()
        .map(|row| {
            assert_eq!(row["conns"].as_u64(), Some(2000), "{row:#}");
            assert_eq!(row["runs"].as_u64(), Some(2), "{row:#}");
            for key in ["shared_ns", "per_cpu_ns", "per_cpu_over_shared"] {
                assert!(f(row, key) > 0.0 && f(row, key).is_finite(), "{row:#}");
            }
            format!(
                "{} {} {} {}",
                row["family"].as_str().unwrap(),
                row["mode"].as_str().unwrap(),
                row["path"].as_str().unwrap(),
                row["measure"].as_str().unwrap()
            )
        })
        .collect();
    seen.sort();
    let mut want: Vec<String> = ["v4", "v6"]
        .iter()
        .flat_map(|fam| {
            ["nat", "dsr"].iter().flat_map(move |mode| {
                ["hit hot", "hit spread", "miss spread", "miss allcpus"]
                    .iter()
                    .map(move |m| format!("{fam} {mode} {m}"))
            })
        })
        .collect();
    want.sort();
    assert_eq!(seen, want);
}
