//! `weir-lab gen` end to end: a short paced run whose JSON says every
//! offered packet arrived at the sink, over the flows asked for; and bad
//! input refused before any namespace exists.
//!
//! Needs root (namespaces, BPF).

use std::process::{Command, Output};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(args)
        .output()
        .expect("running weir")
}

#[test]
fn a_paced_run_reports_offered_and_received_packets() {
    let json = std::env::temp_dir().join(format!("weir-lab-gen-{}.json", std::process::id()));
    let out = weir(&[
        "gen",
        "--proto",
        "tcp",
        "--tcp-flags",
        "syn",
        "--flows",
        "300",
        "--dist",
        "uniform",
        "--rate",
        "100000",
        "--count",
        "30000",
        "--duration",
        "10",
        "--track-flows",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("offered") && stdout.contains("received"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(report["offered"]["sent"], 30000, "{report}");
    assert_eq!(report["received"], 30000, "{report}");
    assert_eq!(report["syns"], 30000, "{report}");
    assert_eq!(report["frame_bytes"], 60, "{report}");
    // 30000 uniform draws over 300 flows miss none of them.
    assert_eq!(report["flows_seen"], 300, "{report}");
    let secs = report["offered"]["elapsed_s"].as_f64().unwrap();
    assert!(
        (0.2..5.0).contains(&secs),
        "30000 packets at 100k pps took {secs} s"
    );
}

#[test]
fn bad_input_is_refused_before_the_lab_is_built() {
    for (args, want) in [
        (&["--cpus", "64"][..], "CPUs"),
        (&["--frame-size", "40"], "64 bytes"),
        (&["--flows", "0"], "flows"),
        (&["--dist", "zipf", "--zipf-s", "nan"], "Zipf skew"),
        (&["--duration", "0"], "--duration"),
    ] {
        let out = weir(&[&["gen"][..], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("weir-lab gen:"),
            "{args:?} built a lab: {stderr}"
        );
    }
}
