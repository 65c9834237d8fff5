//! VIPs announced by BGP (`[bgp]`). weir drives a BIRD 2 daemon, a
//! maintained speaker, through a generated configuration and its control
//! socket; it writes no BGP itself.
//!
//! Each VIP is a static route in BIRD through the *anchor*, a TUN device
//! that only `weir serve` holds open. The speaker announces a VIP while the
//! gate ([`gate`]) passes: XDP attached, enough healthy DIPs, the node not
//! drained. A clean stop tells BIRD to close its sessions; when weir dies
//! (kill -9) the kernel removes the anchor with weir's descriptors and BIRD
//! withdraws every VIP at once; a successor taking over holds the anchor
//! before its predecessor lets go, so an upgrade withdraws nothing.

pub mod bird_conf;
pub mod control;
pub mod gate;
mod speaker;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::run_report::RunReport;

pub use gate::VipAnnouncement;
pub use speaker::{hold_anchor, Speaker};

/// The TUN device the VIP routes go through.
pub const ANCHOR: &str = "weir-bgp";

/// One neighbour as the speaker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourState {
    pub address: String,
    pub remote_as: u32,
    /// BGP's state: Established, Active, Connect, Idle, OpenSent, ...
    pub session: String,
    pub established: bool,
    /// BFD's session state (Up, Down, Init, AdminDown); none without BFD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<String>,
    /// BIRD's last word on the session, e.g. "Socket: Connection refused".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// What `/api/v1/bgp`, `weir status` and /metrics show.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpView {
    pub at_unix_ms: u64,
    pub local_as: u32,
    pub router_id: String,
    /// The speaker's process, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker_pid: Option<u32>,
    /// Why the speaker does not run or refused its configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker_error: Option<String>,
    pub drained: bool,
    pub neighbours: Vec<NeighbourState>,
    pub vips: Vec<VipAnnouncement>,
}

/// The speaker's directory: its configuration, control socket, pid and log.
pub fn dir(run_dir: &Path) -> PathBuf {
    run_dir.join("bgp")
}

/// The speaker's view in the run directory (`<run dir>/bgp.json`).
pub const REPORT: RunReport<BgpView> = RunReport::new("bgp.json");

fn drain_file(run_dir: &Path) -> PathBuf {
    dir(run_dir).join("drained")
}

/// Whether `weir node drain` is in force; it outlives restarts and
/// takeovers until `weir node undrain`.
pub fn drained(run_dir: &Path) -> bool {
    drain_file(run_dir).exists()
}

/// Drains (or undrains) this node: the speaker withdraws (or announces
/// again) every VIP within its next period.
pub fn set_drained(run_dir: &Path, on: bool) -> io::Result<()> {
    let f = drain_file(run_dir);
    if on {
        fs::create_dir_all(dir(run_dir))?;
        fs::write(&f, b"drained by weir node drain\n")
    } else {
        match fs::remove_file(&f) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
