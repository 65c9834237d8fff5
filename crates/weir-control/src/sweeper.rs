//! The connection-table sweeper of `weir serve`: a thread that deletes
//! expired connection entries every [`SWEEP_INTERVAL`]
//! (weir_dataplane::conntrack says why that is safe).

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use weir_dataplane::conntrack::sweep;
use weir_dataplane::loader::ConnTimeouts;
use weir_dataplane::maps::Maps;

/// How often expired entries are deleted: `weir status` may count an
/// expired entry for at most this long.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The running sweeper; stops (and joins) when dropped.
pub struct Sweeper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Sweeps the tables pinned in `pin_dir` with `timeouts`.
    pub fn start(pin_dir: &Path, timeouts: ConnTimeouts) -> Result<Sweeper> {
        let maps = Maps::pinned(pin_dir)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weir-sweeper".into())
            .spawn(move || {
                let mut failing = false;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(SWEEP_INTERVAL) {
                    match sweep(&maps, &timeouts) {
                        Ok(_) => failing = false,
                        // Once per failure streak: the data plane still
                        // ignores expired entries, only the counts lag.
                        Err(e) if !failing => {
                            failing = true;
                            eprintln!("weir: sweeping expired connections failed: {e:#}");
                        }
                        Err(_) => {}
                    }
                }
            })?;
        Ok(Sweeper {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
