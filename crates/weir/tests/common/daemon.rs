//! Starting the lab's backends and `weir serve` in it, or on the cluster
//! lab's nodes.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use weir_lab::backend::{Backend, BackendOptions};
use weir_lab::daemon::Daemon;
use weir_lab::scale::topology::ClusterLab;
use weir_lab::topology::Lab;

/// The `weir` binary under test.
pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

pub fn exe() -> &'static Path {
    Path::new(WEIR)
}

/// One heavy test of a file at a time: the ones that load the CPU (floods,
/// timed reactions, a browser) starve each other's clients otherwise, which
/// is not what they test.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An HTTP backend `backend-{i}` in each of the lab's backend namespaces.
pub fn start_backends(lab: &Lab) -> Vec<Backend> {
    start_backends_with(lab, &BackendOptions::default())
}

/// [`start_backends`] with `opts`.
pub fn start_backends_with(lab: &Lab, opts: &BackendOptions) -> Vec<Backend> {
    lab.backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start_with(ns, &format!("backend-{}", i + 1), opts).unwrap())
        .collect()
}

/// `weir serve` in the lab's load-balancer namespace with `config`,
/// started (ready); stopped when dropped.
pub fn start_daemon(lab: &Lab, config: &str) -> Daemon {
    let mut d = Daemon::new(exe(), &lab.lb).unwrap();
    d.write_config(config).unwrap();
    d.start().unwrap();
    d
}

/// `weir serve` on nodes 1..=`count` of the cluster lab, node `i` with
/// `config(i)`, started one after the other (each ready).
pub fn start_nodes(
    lab: &ClusterLab,
    count: usize,
    config: impl Fn(usize) -> String,
) -> Vec<Daemon> {
    (1..=count)
        .map(|i| {
            let mut d = Daemon::new(exe(), &lab.nodes[i - 1]).unwrap();
            d.write_config(&config(i)).unwrap();
            d.start().unwrap_or_else(|e| panic!("node {i}: {e:#}"));
            d
        })
        .collect()
}

/// The BGP speakers (BIRD) the daemons with these run directories started:
/// they outlive a killed weir by design, so a test ends them itself
/// (declared after the daemons: dropped first).
pub struct Speakers(pub Vec<PathBuf>);

impl Drop for Speakers {
    fn drop(&mut self) {
        for run_dir in &self.0 {
            let pid = fs::read_to_string(run_dir.join("bgp/bird.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            if let Some(pid) = pid {
                let _ = weir_sys::process::send_signal(pid, libc::SIGKILL);
            }
        }
    }
}
