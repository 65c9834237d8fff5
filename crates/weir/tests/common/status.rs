//! Reading what the daemon reports: `weir status` (human and JSON) and
//! the workers' report in the run directory.

use std::process::Command;

use serde_json::Value;
use weir_lab::daemon::Daemon;

use super::WEIR;

/// `weir status` of daemon `d` in human form.
pub fn status_text(d: &Daemon) -> String {
    let out = Command::new(WEIR)
        .args(["status", "--run-dir"])
        .arg(d.run_dir())
        .arg("--pin-dir")
        .arg(&d.pin_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The XDP counter `name` of a `weir status --json`.
pub fn counter(status: &Value, name: &str) -> u64 {
    status["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {status}"))
}

/// The workers' load-balancer counter `stat` (index of `enum weir_stat`),
/// summed over the workers of the run directory's workers.json.
pub fn worker_counter(d: &Daemon, stat: u32) -> u64 {
    let workers = weir_control::tier::read_workers(&d.run_dir()).expect("workers.json");
    workers
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["slb"][stat as usize].as_u64().unwrap_or(0))
        .sum()
}
