//! `weir-lab sim` as a command-line tool: it stops quietly when the reader
//! of its output goes away, and its JSON records every input of the run.

use std::process::Command;

use weir_testkit::cli::assert_ends_quietly_into_a_closed_pipe;

const WEIR_LAB: &str = env!("CARGO_BIN_EXE_weir-lab");

/// A run small enough to take well under a second.
const SMALL: &[&str] = &["--flows", "2000", "--dips", "4", "--runs", "1", "--quiet"];

#[test]
fn sim_run_into_a_closed_pipe_ends_quietly() {
    let mut args = vec!["sim", "run", "--format", "json"];
    args.extend_from_slice(SMALL);
    // As in `weir-lab sim run --format json | head` once head is done.
    let mut cmd = Command::new(WEIR_LAB);
    cmd.args(&args);
    assert_ends_quietly_into_a_closed_pipe(cmd);
}

#[test]
fn sim_run_records_every_input_and_writes_an_svg_beside_its_json() {
    let dir = std::env::temp_dir().join(format!("weir-sim-cli-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = vec![
        "sim",
        "run",
        "--format",
        "json",
        "--seed",
        "7",
        "--load",
        "0.9",
        "--policies",
        "ecmp,awfd:4",
        "--intervals-ms",
        "10,100",
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(SMALL);
    let o = Command::new(WEIR_LAB).args(&args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sim.json")).unwrap()).unwrap();
    assert_eq!(printed, written);
    let inputs = &printed["inputs"];
    assert_eq!(inputs["command"], "run");
    assert_eq!(inputs["trace"]["seed"], 7);
    assert_eq!(inputs["trace"]["flows"], 2000);
    assert_eq!(inputs["pool"]["load"], 0.9);
    assert_eq!(inputs["pool"]["dips"], 4);
    assert_eq!(inputs["policies"], serde_json::json!(["ecmp", "awfd:4"]));
    assert_eq!(inputs["intervals_ms"], serde_json::json!([10.0, 100.0]));
    assert_eq!(inputs["seeds"], serde_json::json!([7]));
    assert_eq!(printed["points"].as_array().unwrap().len(), 4);
    let svg = std::fs::read_to_string(dir.join("sim.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
    assert!(svg.contains("awfd:4") && svg.contains("ecmp"), "{svg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_run_and_sim_spotlight_name_their_options_alike() {
    for cmd in ["run", "spotlight"] {
        let o = Command::new(WEIR_LAB)
            .args(["sim", cmd, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&o.stdout);
        for option in [
            "--policies <POLICIES>",
            "--intervals-ms <INTERVALS_MS>",
            "--out <OUT>",
        ] {
            assert!(help.contains(option), "sim {cmd}: no {option} in\n{help}");
        }
    }
}
