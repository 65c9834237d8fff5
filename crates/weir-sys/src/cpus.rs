//! CPU sets: the kernel's CPU list format, the CPUs that exist and the ones
//! this thread may use, and pinning a thread to one.

use std::fs;
use std::io;

/// Pins the calling thread to `cpu`. The caller checks first that `cpu` is
/// online and allowed, to say which ones are when it is not.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    pin_thread(0, cpu)
}

/// Pins thread `tid` (any process's, kernel threads included) to `cpu`.
pub fn pin_thread(tid: u32, cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "CPU {cpu} is beyond the {} a CPU set holds",
                libc::CPU_SETSIZE
            ),
        ));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds (checked above).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPUs the kernel has online; on a system without sysfs, the ones this
/// thread may run on.
pub fn online_cpus() -> Vec<usize> {
    fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(&s))
        .or_else(|| allowed_cpus().ok())
        .unwrap_or_default()
}

/// The calling thread's affinity mask.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, filled in by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// CPU numbers above this are refused (the kernel's largest NR_CPUS).
pub const MAX_CPU: usize = 8191;

/// Parses the kernel's CPU list format ("0-3,8,10-11", surrounding
/// whitespace allowed; an empty list is empty) into sorted, distinct CPUs;
/// `None` for anything else, or a CPU above [`MAX_CPU`].
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let text = s.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    let number = |n: &str| -> Option<usize> {
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok().filter(|&cpu| cpu <= MAX_CPU)
    };
    for part in text.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo > hi {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The inverse of [`parse_cpu_list`], for messages.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        out.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        for s in ["0", "0-1", "0-3,8,10-11", "5,7"] {
            let cpus = parse_cpu_list(&format!("{s}\n")).unwrap();
            assert_eq!(format_cpu_list(&cpus), s);
        }
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("8,0-2,1").unwrap(), vec![0, 1, 2, 8]);
        assert_eq!(parse_cpu_list(" \n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("8191").unwrap(), vec![MAX_CPU]);
        for bad in [
            "x",
            "3-1",
            "1-",
            "-1",
            "0,,a",
            "1,,2",
            "1 2",
            "+1",
            "0x1",
            "1-2-3",
            "8192",
            "0-4294967295",
            "99999999999",
        ] {
            assert!(parse_cpu_list(bad).is_none(), "{bad}");
        }
        assert_eq!(format_cpu_list(&[]), "none");
    }

    #[test]
    fn pins_to_an_allowed_cpu_and_refuses_one_beyond_a_cpu_set() {
        // On a thread of its own: pinning the test harness's would outlive the test.
        std::thread::spawn(|| {
            let cpu = allowed_cpus().unwrap()[0];
            pin_current_thread(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            let err = pin_current_thread(100_000).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        })
        .join()
        .unwrap();
    }
}
