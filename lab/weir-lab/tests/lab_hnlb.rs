//! Smoke test of `weir-lab hnlb --quick` (HNLB Fig. 4, 5 and 7 in
//! namespaces): the lab runs end to end for every variant this weir runs,
//! and its report is well formed: every row of every figure is there,
//! no trial received more than it offered, and the xdp tier's loss-free
//! rates are above zero. Which tier wins is a benchmark, not a test.

use std::process::Command;

use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

/// A searched row: trials that add up, and a loss-free rate.
fn check_search_row(row: &Value) {
    let trials = row["trials"].as_array().expect("trials");
    assert!(!trials.is_empty(), "{row:#}");
    for t in trials {
        assert!(u(t, "offered") > 0, "{t:#}");
        assert!(u(t, "received") <= u(t, "offered"), "{t:#}");
        assert!((0.0..=1.0).contains(&f(t, "loss")), "{t:#}");
    }
    // The first trial runs at the generator's full speed.
    assert!(trials[0]["requested_pps"].is_null(), "{row:#}");
    // The xdp tier always finds one; a worker on a CPU the rest of the
    // machine shares (the test suite, other builds) may not, in --quick's
    // few trials: that is a benchmark's finding, not a broken lab.
    if row["series"]["variant"] == "xdp" {
        assert!(f(row, "loss_free_pps") > 0.0, "no loss-free rate: {row:#}");
    }
    assert!(f(row, "loss_free_pps") >= 0.0, "{row:#}");
    assert!(f(row, "loss_free_pps") <= f(row, "full_speed_offered_pps") * 1.5);
    assert!(f(row, "full_speed_received_pps") > 0.0, "{row:#}");
}

#[test]
fn a_quick_hnlb_run_reports_every_figure_with_sane_rates() {
    let dir = std::env::temp_dir().join(format!("weir-hnlb-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("hnlb.json");
    let svgs = dir.join("svg");
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["hnlb", "--quick", "--json"])
        .arg(&json)
        .arg("--svg-dir")
        .arg(&svgs)
        .output()
        .expect("running weir");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weir-lab hnlb failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("Fig. 4:") && stdout.contains("Fig. 5:"),
        "{stdout}"
    );
    assert!(
        stderr.contains("[fig 4 1/"),
        "no progress on stderr:\n{stderr}"
    );

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    // xdp is weir's default tier: it always runs.
    assert!(!skipped.contains(&"xdp"), "{report:#}");
    let ran: Vec<&str> = report["plan"]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .filter(|v| !skipped.contains(v))
        .collect();

    // Fig. 4: one row per variant that ran, one flow, one DIP.
    let fig4 = report["fig4"].as_array().unwrap();
    let fig4_variants: Vec<&str> = fig4
        .iter()
        .map(|r| r["series"]["variant"].as_str().unwrap())
        .collect();
    assert_eq!(fig4_variants, ran, "{report:#}");
    for row in fig4 {
        assert_eq!((u(row, "connections"), u(row, "dips")), (1, 1), "{row:#}");
        check_search_row(row);
    }

    // Fig. 5: every series of a variant that ran, at every connection count:
    // software and hybrid-first with equal and Zipf connections, xdp with
    // equal ones, hybrid-heavy under Zipf.
    let series_per_variant = |v: &str| {
        if v == "software" || v == "hybrid-first" {
            2
        } else {
            1
        }
    };
    let series: usize = ran.iter().map(|v| series_per_variant(v)).sum();
    let connections = report["plan"]["connections"].as_array().unwrap().len();
    let fig5 = report["fig5"].as_array().unwrap();
    assert_eq!(fig5.len(), series * connections, "{report:#}");
    for row in fig5 {
        assert!(ran.contains(&row["series"]["variant"].as_str().unwrap()));
        check_search_row(row);
    }

    // Fig. 7: software and hybrid-first, at every connection count.
    let workers = ran
        .iter()
        .filter(|v| ["software", "hybrid-first"].contains(v))
        .count();
    let fig7 = report["fig7"].as_array().unwrap();
    assert_eq!(
        fig7.len(),
        workers
            * report["plan"]["utilization_connections"]
                .as_array()
                .unwrap()
                .len(),
        "{report:#}"
    );
    for row in fig7 {
        // The capacity comes from a full-speed trial, then fractions of it.
        let full = &row["full_speed"];
        assert!(u(full, "received") <= u(full, "offered"), "{row:#}");
        assert!(f(full, "received_pps") > 0.0, "{row:#}");
        let points = row["points"].as_array().unwrap();
        assert!(!points.is_empty(), "{row:#}");
        for p in points.iter().chain([full]) {
            assert!(u(p, "received") <= u(p, "offered"), "{p:#}");
            // A trial may end before a whole worker window: no value then.
            if let Some(util) = p["utilization"].as_f64() {
                assert!((0.0..=1.5).contains(&util), "{p:#}");
            }
        }
        assert!(
            points
                .iter()
                .chain([full])
                .any(|p| p["windows"].as_u64() > Some(0)),
            "no worker window in any trial: {row:#}"
        );
    }
    if !fig7.is_empty() {
        assert!(stdout.contains("Fig. 7:"), "{stdout}");
    }

    for (name, wanted) in [
        ("hnlb-fig4.svg", true),
        ("hnlb-fig5.svg", true),
        ("hnlb-fig7.svg", !fig7.is_empty()),
    ] {
        let path = svgs.join(name);
        assert_eq!(path.exists(), wanted, "{}", path.display());
        if wanted {
            let picture = std::fs::read_to_string(&path).unwrap();
            assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
