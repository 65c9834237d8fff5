//! BPF run-time statistics of a program: the kernel's `run_time_ns` and
//! `run_cnt`, which count only while statistics are enabled
//! (BPF_ENABLE_STATS, or sysctl kernel.bpf_stats_enabled=1). Benchmarks hold
//! a [`StatsEnabled`] while they measure; /metrics reads what is there.
//!
//! The `unsafe` here is libbpf's BPF syscalls on program ids and fds, which
//! libbpf-rs does not wrap; BPF objects stay with the data plane.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use anyhow::{bail, Result};
use libbpf_rs::libbpf_sys;

/// What the kernel has counted for one program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    pub id: u32,
    /// Nanoseconds spent in the program.
    pub run_time_ns: u64,
    /// Runs.
    pub run_cnt: u64,
}

impl RunStats {
    /// The program behind `fd`.
    pub fn of(fd: BorrowedFd<'_>) -> Result<RunStats> {
        // SAFETY: bpf_prog_info is plain data; zero is valid.
        let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: a valid fd and a buffer of `len` bytes.
        let rc =
            unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
        if rc != 0 {
            bail!(
                "bpf_prog_get_info_by_fd: {}",
                std::io::Error::from_raw_os_error(-rc)
            );
        }
        Ok(RunStats {
            id: info.id,
            run_time_ns: info.run_time_ns,
            run_cnt: info.run_cnt,
        })
    }

    /// The program with this id (another process's, e.g. `weir serve`'s).
    pub fn of_id(id: u32) -> Result<RunStats> {
        // SAFETY: a plain syscall wrapper; the fd is owned below.
        let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
        if fd < 0 {
            bail!(
                "BPF program {id}: {}",
                std::io::Error::from_raw_os_error(-fd)
            );
        }
        // SAFETY: a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        RunStats::of(fd.as_fd())
    }

    /// Mean nanoseconds per run since `before`; None without runs.
    pub fn ns_per_run_since(&self, before: &RunStats) -> Option<f64> {
        let runs = self.run_cnt.checked_sub(before.run_cnt)?;
        (runs > 0).then(|| self.run_time_ns.saturating_sub(before.run_time_ns) as f64 / runs as f64)
    }
}

/// Run-time statistics stay on while this lives (BPF_ENABLE_STATS).
pub struct StatsEnabled(#[allow(dead_code)] OwnedFd);

impl StatsEnabled {
    pub fn new() -> Result<StatsEnabled> {
        // SAFETY: a plain syscall wrapper; the fd is owned below.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            bail!(
                "BPF_ENABLE_STATS: {} (it needs CAP_SYS_ADMIN)",
                std::io::Error::from_raw_os_error(-fd)
            );
        }
        // SAFETY: a new fd we own.
        Ok(StatsEnabled(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_counts_its_runs_while_statistics_are_on() {
        let skel = weir_traffic::minimal::load().expect("loading the minimal program");
        let before = RunStats::of(skel.progs.xdp_pass.as_fd()).unwrap();
        let _on = StatsEnabled::new().unwrap();
        let frame = [0u8; 64];
        crate::testrun::run(&skel.progs.xdp_pass, &frame, 3).unwrap();
        let after = RunStats::of_id(before.id).unwrap();
        assert_eq!(after.id, before.id);
        assert_eq!(after.run_cnt - before.run_cnt, 3, "{before:?} -> {after:?}");
        assert!(after.ns_per_run_since(&before).is_some());
        assert_eq!(after.ns_per_run_since(&after), None);
    }

    #[test]
    fn an_unknown_id_is_an_error_naming_it() {
        let e = RunStats::of_id(u32::MAX).unwrap_err().to_string();
        assert!(e.contains(&u32::MAX.to_string()), "{e}");
    }
}
