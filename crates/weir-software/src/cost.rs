//! The per-packet cost of experiments (`cost_cycles`): the busy loop the
//! seeds' middleboxes run for every packet, added to the load balancer's
//! own work in each worker, outside the table's lock (it models work a
//! worker does on its own). The cycles are time-stamp counter cycles: the
//! worker spins until the TSC has advanced by that many, so the cost is the
//! same on every core whatever the clock speed does, and needs no
//! calibration of a loop.

/// Spins for `cycles` TSC cycles.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn spin(cycles: u64) {
    let start = tsc();
    while tsc().wrapping_sub(start) < cycles {
        std::hint::spin_loop();
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// Whether this machine can run an added cost (it needs the TSC).
pub use weir_core::cost::AVAILABLE;

/// Elsewhere the tier refuses `cost_cycles` at start ([`AVAILABLE`]).
#[cfg(not(target_arch = "x86_64"))]
pub fn spin(_cycles: u64) {}

/// The TSC's rate, measured over `window` against the monotonic clock:
/// what a cycle of `cost_cycles` is in time, for reports.
#[cfg(target_arch = "x86_64")]
pub fn tsc_hz(window: std::time::Duration) -> f64 {
    let (t0, c0) = (std::time::Instant::now(), tsc());
    while t0.elapsed() < window {
        std::hint::spin_loop();
    }
    let (dt, dc) = (t0.elapsed(), tsc().wrapping_sub(c0));
    dc as f64 / dt.as_secs_f64()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn spins_for_about_the_cycles_asked() {
        let hz = tsc_hz(Duration::from_millis(20));
        assert!(hz > 1e8 && hz < 1e10, "a TSC of {hz} Hz");
        let cycles = (hz * 0.005) as u64; // 5 ms
        let t = Instant::now();
        spin(cycles);
        let took = t.elapsed();
        // never shorter; longer only by what the scheduler takes
        assert!(took >= Duration::from_micros(4900), "{took:?}");
        assert!(took < Duration::from_millis(200), "{took:?}");
        let t = Instant::now();
        spin(0);
        assert!(t.elapsed() < Duration::from_millis(5));
    }
}
