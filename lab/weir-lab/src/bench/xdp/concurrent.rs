//! The miss path on every CPU at once: one thread per CPU, pinned to it,
//! each sending SYNs of new connections (one test_run call each) into the
//! same `weir_lb`, so that inserts into the connection tables contend as they
//! do when RSS spreads new connections over the cores. The floor runs the
//! same way first, so the row's ratio compares like with like.

use std::os::fd::{AsFd, AsRawFd};

use super::*;

/// One test_run call of the program behind `fd` on `pkt`: its duration in
/// ns, or an error unless it returned `want`. Raw, because a thread of its
/// own runs it (the skeleton's program handle stays on the main thread).
fn run_once(fd: i32, pkt: &[u8], want: XdpAction) -> Result<f64> {
    let mut out = vec![0u8; pkt.len() + 512];
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        data_in: pkt.as_ptr().cast(),
        data_size_in: pkt.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: the buffers outlive the call and their sizes are the ones given.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(fd, &mut opts) };
    ensure!(
        rc == 0,
        "BPF_PROG_TEST_RUN: {}",
        std::io::Error::from_raw_os_error(-rc)
    );
    ensure!(
        XdpAction::from_raw(opts.retval) == Some(want),
        "a concurrent run returned {} instead of {want:?}",
        opts.retval
    );
    Ok(f64::from(opts.duration))
}

/// Mean ns per packet over `cpus`, each CPU running its own packets
/// (`per_cpu[i]` on `cpus[i]`) at the same time as the others.
fn all_at_once(fd: i32, cpus: &[usize], per_cpu: &[Vec<Vec<u8>>], want: XdpAction) -> Result<f64> {
    let means = std::thread::scope(|s| {
        let handles: Vec<_> = per_cpu
            .iter()
            .zip(cpus)
            .map(|(pkts, &cpu)| {
                s.spawn(move || -> Result<f64> {
                    crate::cpus::pin_current(cpu)?;
                    let mut sum = 0.0;
                    for p in pkts {
                        sum += run_once(fd, p, want)?;
                    }
                    Ok(sum / pkts.len() as f64)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Result<Vec<f64>>>()
    })?;
    Ok(means.iter().sum::<f64>() / means.len() as f64)
}

/// `runs` runs of `spread` new connections per CPU on `inst`, the floor on
/// the same packets first in each run; returns the row, checked against the
/// counters (every call a miss installed in the half-open table).
pub(super) fn miss_on_all_cpus(
    inst: &Inst,
    floor: &ProgramMut<'_>,
    mode: Mode,
    runs: u32,
    spread: u32,
    cpus: &[usize],
    next_fresh: &mut u64,
) -> Result<Row> {
    let (lb_fd, floor_fd) = (inst.prog().as_fd().as_raw_fd(), floor.as_fd().as_raw_fd());
    let before = inst.maps.stats()?;
    let (mut lb, mut fl, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let per_cpu: Vec<Vec<Vec<u8>>> = cpus
            .iter()
            .map(|_| {
                (0..spread)
                    .map(|_| {
                        *next_fresh += 1;
                        inst.packet(*next_fresh, TCP_SYN)
                    })
                    .collect()
            })
            .collect();
        let f = all_at_once(floor_fd, cpus, &per_cpu, XdpAction::Tx)?;
        let l = all_at_once(lb_fd, cpus, &per_cpu, XdpAction::Redirect)?;
        fl.push(f);
        lb.push(l);
        ratio.push(l / f.max(1e-9));
    }
    let after = inst.maps.stats()?;
    let calls = u64::from(runs) * u64::from(spread) * cpus.len() as u64;
    check_delta(
        &before,
        &after,
        WEIR_STAT_HALF_OPEN_NEW,
        calls,
        "half-open entries installed",
    )?;
    check_delta(&before, &after, WEIR_STAT_REDIRECT, calls, "XDP_REDIRECT")?;
    let (lo, med, hi) = stats(&lb);
    let (rlo, rmed, rhi) = stats(&ratio);
    Ok(Row {
        family: inst.family,
        path: "miss",
        mode,
        conns: inst.size,
        measure: "allcpus",
        ns_median: med,
        ns_min: lo,
        ns_max: hi,
        floor_ns_median: stats(&fl).1,
        ratio_median: rmed,
        ratio_min: rlo,
        ratio_max: rhi,
        over_hit_min: None,
        runs,
        repeat: 1,
        calls_per_run: spread * cpus.len() as u32,
        distinct_keys: spread * cpus.len() as u32 * runs,
        idle_share: 0.0,
        baseline_ns: None,
        over_baseline: None,
    })
}
