//! Where lab threads run and what they cost: the CPUs this process may use,
//! pinning a thread (ours, or a kernel thread such as a threaded NAPI
//! context) to one, the real-time class, and a thread's CPU time.

use anyhow::{bail, Context, Result};

/// The CPUs the calling thread may run on, in order.
pub fn allowed() -> Result<Vec<usize>> {
    weir_sys::allowed_cpus().context("sched_getaffinity")
}

/// The machine's online CPUs, in order, whatever this process's affinity
/// (`/sys/devices/system/cpu/online`).
pub fn online() -> Result<Vec<usize>> {
    let path = "/sys/devices/system/cpu/online";
    let list = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    parse_cpu_list(&list).with_context(|| format!("{path}: {:?}", list.trim()))
}

/// A kernel CPU list ("0-3,8,10-11"), not empty.
fn parse_cpu_list(list: &str) -> Result<Vec<usize>> {
    match weir_sys::parse_cpu_list(list) {
        Some(cpus) if !cpus.is_empty() => Ok(cpus),
        _ => bail!("{:?} is not a CPU list like 0-3,8", list.trim()),
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current(cpu: usize) -> Result<()> {
    pin(0, cpu)
}

/// Pins thread `tid` (any process's, kernel threads included) to `cpu`.
pub fn pin(tid: u32, cpu: usize) -> Result<()> {
    weir_sys::pin_thread(tid, cpu).with_context(|| format!("pinning thread {tid} to CPU {cpu}"))
}

/// Gives thread `tid` the real-time FIFO class at `priority` (1..=99), so
/// that ordinary work on its CPU cannot preempt it. The kernel's RT
/// throttling still leaves others 5% of the CPU.
pub fn realtime(tid: u32, priority: i32) -> Result<()> {
    weir_sys::process::set_realtime(tid, priority)
        .with_context(|| format!("SCHED_FIFO {priority} for thread {tid}"))
}

/// Thread `tid` of process `pid`'s CPU time (utime + stime), in clock
/// ticks. (`/proc/<tid>/stat` would be the whole process's: the kernel
/// shows a thread's own times only under its process's `task/`.) A kernel
/// thread is its own process: `pid` = `tid`.
pub fn thread_cpu_ticks(pid: u32, tid: u32) -> Result<u64> {
    stat_cpu_ticks(&format!("/proc/{pid}/task/{tid}/stat"))
}

/// utime + stime of a `stat` file of /proc, in clock ticks.
fn stat_cpu_ticks(path: &str) -> Result<u64> {
    let stat = std::fs::read_to_string(path)
        .with_context(|| format!("reading {path} (the thread or process is gone)"))?;
    // proc(5): utime and stime are fields 14 and 15; fields from the third
    // on follow the command's closing parenthesis.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')').map_or(0, |i| i + 2)..)
        .unwrap_or("")
        .split(' ')
        .collect();
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("{path}: no field {}", i + 3))
    };
    Ok(field(11)? + field(12)?)
}

/// Thread ids of process `pid` whose name starts with `prefix`.
pub fn threads_named(pid: u32, prefix: &str) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// CPU time (user and system) the threads of process `pid` whose name
/// starts with `prefix` have had; None if it has none.
pub fn threads_cpu_time(pid: u32, prefix: &str) -> Option<std::time::Duration> {
    let tids = threads_named(pid, prefix);
    if tids.is_empty() {
        return None;
    }
    let ticks: u64 = tids
        .into_iter()
        .filter_map(|tid| thread_cpu_ticks(pid, tid).ok())
        .sum();
    Some(std::time::Duration::from_secs_f64(
        ticks as f64 / ticks_per_second(),
    ))
}

/// Clock ticks per second (USER_HZ), the unit of /proc CPU times.
pub fn ticks_per_second() -> f64 {
    weir_sys::clock_ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_where_it_was_pinned() {
        let cpus = allowed().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_current(last).unwrap();
            allowed().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![last]);
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,8").unwrap(), vec![0, 2, 3, 8]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("").is_err());
        let online = online().unwrap();
        assert!(allowed().unwrap().iter().all(|c| online.contains(c)));
    }

    #[test]
    fn a_spinning_thread_accumulates_cpu_time() {
        let tid = weir_sys::process::current_tid();
        let pid = std::process::id();
        let before = thread_cpu_ticks(pid, tid).unwrap();
        let process_before = thread_cpu_ticks(pid, pid).unwrap();
        // Another thread of this process spins too: its time is not ours.
        let other = std::thread::spawn(|| {
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(300) {
                std::hint::spin_loop();
            }
        });
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(100) {
            std::hint::spin_loop();
        }
        // A 100 ms spin gets at least one 10 ms tick, even mostly preempted.
        let mine = thread_cpu_ticks(pid, tid).unwrap() - before;
        assert!(mine > 0);
        other.join().unwrap();
        let others = threads_cpu_time(pid, "").unwrap();
        assert!(others.as_secs_f64() * ticks_per_second() >= mine as f64);
        // The main thread's own times leave out the spinning threads'.
        let main = thread_cpu_ticks(pid, pid).unwrap() - process_before;
        assert!(
            main < 20,
            "the main thread's time counted others': {main} ticks"
        );
        assert!(thread_cpu_ticks(pid, u32::MAX).is_err());
    }

    #[test]
    fn a_cpu_that_does_not_exist_is_an_error_naming_it() {
        let missing = libc::CPU_SETSIZE as usize - 1;
        assert!(!allowed().unwrap().contains(&missing));
        let e = std::thread::spawn(move || pin_current(missing))
            .join()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("CPU {missing}")), "{e}");
    }
}
