//! Running an XDP program on one packet with BPF_PROG_TEST_RUN.

use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{ProgramInput, ProgramMut};

/// XDP verdicts as the kernel numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XdpAction {
    Aborted,
    Drop,
    Pass,
    Tx,
    Redirect,
}

impl XdpAction {
    pub fn from_raw(v: u32) -> Option<XdpAction> {
        Some(match v {
            0 => XdpAction::Aborted,
            1 => XdpAction::Drop,
            2 => XdpAction::Pass,
            3 => XdpAction::Tx,
            4 => XdpAction::Redirect,
            _ => return None,
        })
    }
}

/// The outcome of one test run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The raw return value (an XDP action unless the program misbehaves).
    pub raw: u32,
    /// The packet as the program left it.
    pub packet: Vec<u8>,
    /// Mean run time per repetition, as the kernel measured it.
    pub duration: Duration,
}

impl RunResult {
    pub fn action(&self) -> Option<XdpAction> {
        XdpAction::from_raw(self.raw)
    }
}

/// Runs `prog` on `packet`, `repeat` times (>= 1) on the same input.
pub fn run(prog: &ProgramMut<'_>, packet: &[u8], repeat: u32) -> Result<RunResult> {
    // XDP may grow the packet at the head/tail; leave room.
    let mut out = vec![0u8; packet.len() + 512];
    let input = ProgramInput {
        data_in: Some(packet),
        data_out: Some(&mut out),
        repeat: repeat.max(1),
        ..Default::default()
    };
    let output = prog.test_run(input).with_context(|| {
        format!(
            "BPF_PROG_TEST_RUN of {} on a {}-byte packet",
            prog.name().to_string_lossy(),
            packet.len()
        )
    })?;
    let raw = output.return_value;
    let duration = output.duration;
    let len = output.data.map_or(0, |d| d.len());
    out.truncate(len);
    let _ = prog.as_fd();
    Ok(RunResult {
        raw,
        packet: out,
        duration,
    })
}
