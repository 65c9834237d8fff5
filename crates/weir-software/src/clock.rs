//! The software tier's clock: CLOCK_MONOTONIC_COARSE, which is what the
//! XDP program reads (`bpf_ktime_get_coarse_ns`), so entries the workers
//! install in the fast table age there exactly as they would here.

/// Nanoseconds of CLOCK_MONOTONIC_COARSE.
pub fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
