//! Smoke test of `weir-lab cores --quick` (seed 001 Fig. 2 and 3, seed
//! 003's mixes, on the software tier's two workers, in namespaces): the lab
//! runs end to end and its report is well formed: every point of every
//! figure is there, no trial received more than it offered, the workers'
//! CPU shares fit the machine, iperf3 moved data through every setting, and
//! the tables, JSON and SVGs are written. Which distribution wins is a
//! benchmark, not a test.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

fn setting_name(p: &Value) -> String {
    let s = &p["setting"];
    format!(
        "{} reorder={} hold={} cost={}",
        s["mode"], s["reorder"], s["hold_us"], s["cost_cycles"]
    )
}

/// A rate point: trials that add up, a best rate, and CPU shares the
/// machine can give (the workers cannot have had more CPUs than exist).
fn check_rate_point(p: &Value, cpus: f64) {
    let trials = p["trials"].as_array().expect("trials");
    assert!(!trials.is_empty(), "{p:#}");
    for t in trials {
        assert!(f(t, "offered_pps") > 0.0, "{t:#}");
        // The sink counts packets over the trial plus a drain: a few more
        // than offered in the trial's own time is timing, not duplication.
        assert!(f(t, "received_pps") <= f(t, "offered_pps") * 1.02, "{t:#}");
        assert!((0.0..=1.0).contains(&f(t, "loss")), "{t:#}");
        let cpu = f(t, "workers_cpu");
        assert!(
            (0.0..=cpus * 1.05).contains(&cpu),
            "workers had {cpu} CPUs of {cpus}: {t:#}"
        );
    }
    assert!(f(p, "received_pps") > 0.0, "nothing got through: {p:#}");
}

#[test]
fn a_quick_cores_run_reports_every_figure() {
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    let dir = std::env::temp_dir().join(format!("weir-cores-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("cores.json");
    let svgs = dir.join("svg");
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["cores", "--quick", "--json"])
        .arg(&json)
        .arg("--svg-dir")
        .arg(&svgs)
        .output()
        .expect("running weir");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weir-lab cores failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for table in ["Seed 001 Fig. 2", "Seed 001 Fig. 3", "Seed 003"] {
        assert!(stdout.contains(table), "no {table} table:\n{stdout}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let costs: Vec<u64> = report["plan"]["costs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(costs, [0, 10_000], "--quick's costs");

    // Fig. 2: flow, spray and adaptive at every cost.
    let fig2 = report["fig2"].as_array().unwrap();
    assert_eq!(fig2.len(), 3 * costs.len(), "{fig2:#?}");
    for p in fig2 {
        check_rate_point(p, cpus);
    }
    let modes: BTreeSet<String> = fig2
        .iter()
        .map(|p| p["setting"]["mode"].to_string())
        .collect();
    assert_eq!(modes.len(), 3, "{modes:?}");

    // Fig. 3: four lines (flow; spray with the default hold and a longer
    // one; spray without reordering) at every cost, each a distinct
    // setting, each with data through.
    let fig3 = report["fig3"].as_array().unwrap();
    assert_eq!(fig3.len(), 4 * costs.len(), "{fig3:#?}");
    let settings: BTreeSet<String> = fig3.iter().map(setting_name).collect();
    assert_eq!(settings.len(), fig3.len(), "{settings:#?}");
    for p in fig3 {
        assert!(f(&p["iperf"], "received_gbps") > 0.0, "{p:#}");
        assert!(p["iperf"]["retransmits"].is_u64(), "{p:#}");
        assert!(p["iperf"]["receiver_out_of_order"].is_u64(), "{p:#}");
        // Without reordering, weir holds nothing back.
        if p["setting"]["reorder"] == false {
            assert_eq!(p["reordering"]["held"], 0, "{p:#}");
        }
    }

    // Seed 003: both mixes, three modes each.
    let tbtd = report["tbtd"].as_array().unwrap();
    assert_eq!(tbtd.len(), 6, "{tbtd:#?}");
    for p in tbtd {
        check_rate_point(p, cpus);
    }
    let mixes: BTreeSet<&str> = tbtd
        .iter()
        .map(|p| p["traffic"].as_str().unwrap())
        .collect();
    assert_eq!(mixes.len(), 2, "{mixes:?}");
    // Flow distribution never numbers a packet, so it never reorders.
    for p in tbtd.iter().filter(|p| p["setting"]["mode"] == "flow") {
        assert_eq!(p["reordering"]["out_of_order"], 0, "{p:#}");
    }

    for svg in ["cores-fig2.svg", "cores-fig3.svg", "cores-tbtd.svg"] {
        let text = std::fs::read_to_string(svgs.join(svg)).unwrap_or_default();
        assert!(text.contains("<svg"), "{svg} not written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
