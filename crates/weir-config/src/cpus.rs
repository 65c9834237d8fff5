//! The CPUs weir may pin its software-tier workers to: what the
//! configuration's `workers` is checked against, and where its default
//! comes from.

/// The CPUs this process may run on: its affinity mask, which the kernel
/// reports for online CPUs only (cpusets and `taskset` narrow it).
pub fn usable() -> Vec<u32> {
    weir_sys::allowed_cpus()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c as u32)
        .collect()
}

/// A sorted CPU list in the kernel's format ("0-3,8,10-11"), for messages.
pub fn format(cpus: &[u32]) -> String {
    let cpus: Vec<usize> = cpus.iter().map(|&c| c as usize).collect();
    weir_sys::format_cpu_list(&cpus)
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
