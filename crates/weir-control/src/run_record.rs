//! The record `weir serve` keeps of itself in its run directory, read by
//! `weir status`, `weir reload` and a successor taking over.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Where `weir serve` records itself for `weir status` and `weir reload`.
pub const DEFAULT_RUN_DIR: &str = "/run/weir";

/// The record of a running daemon (`<run dir>/serve.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub pid: u32,
    pub config: PathBuf,
    pub pin_dir: PathBuf,
    pub interfaces: Vec<String>,
    /// Where the management API answers (none: off, or it did not start).
    #[serde(default)]
    pub api: Option<SocketAddr>,
}

impl RunRecord {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("serve.json")
    }

    /// Where a daemon that stopped leaves its record (`weir status` then
    /// still reads the pins it used).
    pub fn last_path(run_dir: &Path) -> PathBuf {
        run_dir.join("last-run.json")
    }

    /// At a clean exit: the record becomes the last run's.
    pub fn retire(run_dir: &Path) -> std::io::Result<()> {
        fs::rename(Self::path(run_dir), Self::last_path(run_dir))
    }

    /// The record of the last daemon that stopped in `run_dir`, if any.
    pub fn read_last(run_dir: &Path) -> Option<RunRecord> {
        let text = fs::read_to_string(Self::last_path(run_dir)).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn read(run_dir: &Path) -> Result<RunRecord> {
        let p = Self::path(run_dir);
        let text = fs::read_to_string(&p).with_context(|| {
            format!(
                "no running weir recorded in {} (start `weir serve`)",
                p.display()
            )
        })?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is corrupt; remove it", p.display()))
    }
}
