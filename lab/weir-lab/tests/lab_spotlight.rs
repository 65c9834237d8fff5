//! Smoke test of `weir-lab spotlight` (Spotlight V-B in namespaces): a tiny
//! run, ECMP and AWFD m=4 at 100 ms, one repetition of a few seconds. It
//! checks that the experiment runs end to end and its output is sane, not
//! which policy wins (that is a benchmark, not a test).

use std::process::Command;

#[test]
fn a_tiny_spotlight_run_has_no_pcc_violations_and_sane_figures() {
    let dir = std::env::temp_dir().join(format!("weir-spotlight-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("spotlight.json");
    let svg = dir.join("spotlight.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args([
            "spotlight",
            "--policies",
            "ecmp,awfd4",
            "--intervals",
            "100",
            "--reps",
            "1",
            "--warmup",
            "1",
            "--duration",
            "3",
            "--drain",
            "6",
            "--json",
        ])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .expect("running weir");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weir-lab spotlight failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("AWFD m=4") && stdout.contains("ECMP (m=0)"),
        "{stdout}"
    );
    assert!(stdout.contains("Spotlight V-B (paper)"), "{stdout}");
    assert!(stderr.contains("[2/2]"), "no progress on stderr:\n{stderr}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["total_pcc_violations"], 0, "{report:#}");
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let n = |k: &str| r[k].as_u64().unwrap();
        assert_eq!(n("pcc_violations"), 0, "{r:#}");
        assert_eq!(n("connect_failed"), 0, "{r:#}");
        assert_eq!(n("bad_response"), 0, "{r:#}");
        assert!(n("measured") > 100, "too few flows: {r:#}");
        // Nearly all measured flows completed.
        assert!(n("done") * 10 >= n("measured") * 9, "{r:#}");
        assert!(f("throughput_mb_s") > 1.0, "{r:#}");
        // FCTs: at least the time to send the smallest file at a worker's
        // rate (10 kB / 600 kB/s = 17 ms), at most the whole run.
        let (mean, p99) = (f("mean_fct_s"), f("p99_fct_s"));
        assert!(mean > 0.015 && mean < 10.0, "{r:#}");
        assert!(p99 >= mean && p99 < 20.0, "{r:#}");
        // Every finished flow names its backend.
        let per: Vec<u64> = r["per_backend"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(per.len(), 8);
        let named: u64 = per.iter().sum();
        assert!(named >= n("done") && named <= n("measured"), "{r:#}");
        if r["label"] == "ECMP (m=0)" {
            assert!(per.iter().all(|&c| c > 0), "ECMP skipped a backend: {r:#}");
        }
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    let _ = std::fs::remove_dir_all(&dir);
}
