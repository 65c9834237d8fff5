//! The one clock_gettime wrapper: each clock weir reads, in nanoseconds;
//! and the unit of the CPU times /proc reports.

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec; the clocks asked
    // for exist on every kernel weir runs on, so it cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC: what `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_COARSE: what `bpf_ktime_get_coarse_ns` reads, so entries
/// written here age in the data plane exactly as they would there.
pub fn monotonic_coarse_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// CLOCK_BOOTTIME: what `bpf_ktime_get_boot_ns` reads (counts suspend).
pub fn boottime_ns() -> u64 {
    now_ns(libc::CLOCK_BOOTTIME)
}

/// CPU time the calling thread has used.
pub fn thread_cpu_ns() -> u64 {
    now_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Clock ticks per second (USER_HZ), the unit of CPU times in /proc.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // Linux has reported 100 on every architecture since 2.6.
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let (m, c, b) = (monotonic_ns(), monotonic_coarse_ns(), boottime_ns());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(monotonic_ns() > m);
        assert!(monotonic_coarse_ns() > c);
        assert!(boottime_ns() > b);
        assert!(thread_cpu_ns() > 0);
        assert!(clock_ticks_per_second() >= 100);
    }
}
