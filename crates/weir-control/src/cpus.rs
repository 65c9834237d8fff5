//! The CPUs weir may pin its software-tier workers to: what the
//! configuration's `workers` is checked against, and where its default
//! comes from.

/// The CPUs this process may run on: its affinity mask, which the kernel
/// reports for online CPUs only (cpusets and `taskset` narrow it).
pub fn usable() -> Vec<u32> {
    // SAFETY: cpu_set_t is plain data, filled in by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c as u32)
            .collect()
    }
}

/// A sorted CPU list in the kernel's format ("0-3,8,10-11"), for messages.
pub fn format(cpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut rest = cpus;
    while let Some((&start, _)) = rest.split_first() {
        let run = rest.windows(2).take_while(|w| w[1] == w[0] + 1).count();
        let end = rest[run];
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        rest = &rest[run + 1..];
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_compress_runs() {
        assert_eq!(format(&[]), "none");
        assert_eq!(format(&[0]), "0");
        assert_eq!(format(&[0, 1]), "0-1");
        assert_eq!(format(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format(&[5, 7]), "5,7");
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let cpus = usable();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]), "{cpus:?}");
    }
}
