//! Threads' CPU time to the nanosecond: the run time the scheduler keeps
//! for each thread (`/proc/<pid>/task/<tid>/schedstat`, its first field).
//! `/proc/<pid>/stat` counts in clock ticks (10 ms), too coarse for a
//! daemon thread that runs a few milliseconds a second. The kernel adds a
//! running thread's current stretch when it is switched out (or at a
//! tick): the threads measured here sleep between bursts of work.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

/// Thread `tid`'s run time, ns.
pub fn thread_ns(tid: u32) -> Result<u64> {
    let path = format!("/proc/{tid}/schedstat");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (the thread is gone)"))?;
    first_field(&text).with_context(|| format!("{path}: no run time in {text:?}"))
}

/// Process `pid`'s run time by thread name (threads of one name summed),
/// ns; threads that end while being read are left out.
pub fn threads_ns(pid: u32) -> Result<BTreeMap<String, u64>> {
    let dir = format!("/proc/{pid}/task");
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let t = t?;
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(t.path().join("comm")),
            std::fs::read_to_string(t.path().join("schedstat")),
        ) else {
            continue;
        };
        if let Some(ns) = first_field(&stat) {
            *out.entry(comm.trim().to_string()).or_insert(0) += ns;
        }
    }
    Ok(out)
}

/// schedstat's first field: time on the CPU, ns.
fn first_field(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_time_is_the_first_field() {
        assert_eq!(first_field("269931248 879047704 2048\n"), Some(269_931_248));
        assert_eq!(first_field(""), None);
    }

    /// Clock ticks would show 3 ms of computing as 0 or 10 ms.
    #[test]
    fn a_few_milliseconds_of_computing_show_below_a_clock_tick() {
        let own = || {
            let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
            first_field(&text).unwrap()
        };
        // A sleep before each reading: the kernel adds the stretch before
        // it to the thread's run time when it switches the thread out.
        let nap = || std::thread::sleep(std::time::Duration::from_millis(1));
        nap();
        let before = own();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(3) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        nap();
        let ran = own() - before;
        assert!(ran > 0 && ran < 10_000_000, "{ran} ns ({x} rounds)");
    }

    #[test]
    fn a_process_has_run_time_by_thread_and_its_main_thread_its_own() {
        let threads = threads_ns(std::process::id()).unwrap();
        assert!(threads.values().sum::<u64>() > 0, "{threads:?}");
        assert!(thread_ns(std::process::id()).unwrap() > 0);
        assert!(thread_ns(u32::MAX).is_err());
    }
}
