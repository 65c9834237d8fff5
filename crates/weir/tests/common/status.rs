//! Reading what the daemon reports: `weir status --json` and the workers'
//! report in the run directory.

use serde_json::Value;
use weir_lab::daemon::Daemon;

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
