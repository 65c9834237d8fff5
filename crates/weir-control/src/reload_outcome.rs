//! How each reload of `weir serve` ended, published in its run directory
//! (`<run dir>/reload.json`), so that whoever asked for the reload (`weir
//! reload`, systemd's `ExecReload`) gets the daemon's answer and exits on
//! it: a refused file must not look like success.
//!
//! A requester reads the monotonic clock, signals the daemon (SIGHUP), and
//! waits for an outcome of that daemon's pid whose reload started no
//! earlier. A reload that started after the signal was sent read the file
//! as the requester left it; a reload already under way when the signal
//! came does not count, and the daemon runs another one for the signal.
//! Signals that arrive together are one reload, which answers them all.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use weir_sys::process::alive;

use crate::run_record::RunRecord;

/// The outcome of one reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadOutcome {
    /// The daemon that reloaded.
    pub pid: u32,
    /// Counts this daemon's reloads, from 1.
    pub seq: u64,
    /// When the reload started reading the file (CLOCK_MONOTONIC, ns).
    pub started_ns: u64,
    /// Applied (true), or refused with the running configuration kept.
    pub applied: bool,
    /// What changed, or why the file was refused (`file:line: field: ...`).
    pub message: String,
}

impl ReloadOutcome {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("reload.json")
    }

    /// The last outcome published in `run_dir`, if any.
    pub fn read(run_dir: &Path) -> Option<ReloadOutcome> {
        let text = fs::read_to_string(Self::path(run_dir)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Replaces the published outcome; a reader sees the old one or this
    /// one whole, never a mix (a rename).
    pub fn publish(&self, run_dir: &Path) -> io::Result<()> {
        let path = Self::path(run_dir);
        let tmp = run_dir.join(format!(".reload.json.{}", self.pid));
        fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        fs::rename(&tmp, &path)
    }

    /// Whether this answers a request sent at `sent_ns` to daemon `pid`.
    pub fn answers(&self, pid: u32, sent_ns: u64) -> bool {
        self.pid == pid && self.started_ns >= sent_ns
    }
}

/// Asks the daemon recorded in `run_dir` to reload (SIGHUP) and waits up to
/// `timeout` for its answer. A refusal is an error carrying the daemon's
/// message; so is no answer in time.
pub fn reload_and_wait(run_dir: &Path, timeout: Duration) -> Result<(u32, ReloadOutcome)> {
    let rec = RunRecord::read(run_dir)?;
    if !alive(rec.pid) {
        bail!(
            "weir serve (pid {}) recorded in {} is not running; start it again",
            rec.pid,
            run_dir.display()
        );
    }
    let sent_ns = weir_sys::monotonic_ns();
    if let Err(e) = weir_sys::process::send_signal(rec.pid, libc::SIGHUP) {
        bail!("signalling weir serve (pid {}): {e}", rec.pid);
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(o) = ReloadOutcome::read(run_dir).filter(|o| o.answers(rec.pid, sent_ns)) {
            if !o.applied {
                bail!(
                    "weir serve (pid {}) refused {} and keeps running the configuration it \
                     had: {}",
                    rec.pid,
                    rec.config.display(),
                    o.message
                );
            }
            return Ok((rec.pid, o));
        }
        if !alive(rec.pid) {
            bail!(
                "weir serve (pid {}) exited before it answered the reload; see its log",
                rec.pid
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "weir serve (pid {}) did not answer the reload within {} s; whether it applied \
                 {} is unknown: see its log (journalctl -u weir), or run `weir status`",
                rec.pid,
                timeout.as_secs_f64(),
                rec.config.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(pid: u32, started_ns: u64) -> ReloadOutcome {
        ReloadOutcome {
            pid,
            seq: 1,
            started_ns,
            applied: true,
            message: "reloaded".into(),
        }
    }

    #[test]
    fn only_a_reload_of_that_daemon_started_after_the_request_answers_it() {
        assert!(outcome(7, 100).answers(7, 100));
        assert!(outcome(7, 150).answers(7, 100));
        // Started before the signal: it may have read the file before the
        // requester's change.
        assert!(!outcome(7, 99).answers(7, 100));
        // Another daemon's (a predecessor's) outcome.
        assert!(!outcome(8, 150).answers(7, 100));
    }

    #[test]
    fn a_published_outcome_reads_back_whole() {
        let dir = std::env::temp_dir().join(format!("weir-reload-outcome-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(ReloadOutcome::read(&dir), None);
        let o = ReloadOutcome {
            applied: false,
            message: "weir.toml:12: vip[0].dip[1].weight: expected an integer".into(),
            ..outcome(3, 5)
        };
        o.publish(&dir).unwrap();
        assert_eq!(ReloadOutcome::read(&dir), Some(o));
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("reload.json")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_daemon_the_error_says_so() {
        let dir = std::env::temp_dir().join(format!("weir-reload-none-{}", std::process::id()));
        let e = format!(
            "{:#}",
            reload_and_wait(&dir, Duration::from_millis(100)).unwrap_err()
        );
        assert!(e.contains("no running weir recorded"), "{e}");
    }
}
