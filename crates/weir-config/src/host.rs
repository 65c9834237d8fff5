//! What the host offers the data plane's maps: the facts
//! [`crate::limits`] checks a configuration against, read from /proc and
//! /sys.

use std::path::Path;

/// The memory and CPUs the kernel would build the maps with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostFacts {
    /// Bytes the kernel could still give without swapping (MemAvailable).
    pub mem_available: u64,
    /// Bytes left under this process's memory cgroup's limit (cgroup v2
    /// `memory.max` less `memory.current`); None without a limit. Since
    /// Linux 5.11 map memory is charged here, not to RLIMIT_MEMLOCK.
    pub memcg_room: Option<u64>,
    /// CPUs the kernel may ever bring up: per-CPU maps allocate for each.
    pub possible_cpus: u32,
}

impl HostFacts {
    /// The facts of this host, or what could not be read.
    pub fn read() -> Result<HostFacts, String> {
        let meminfo = read("/proc/meminfo")?;
        let mem_available = mem_available(&meminfo)
            .ok_or("/proc/meminfo has no MemAvailable line (Linux >= 3.14 has one)")?;
        let possible_cpus = match read("/sys/devices/system/cpu/possible") {
            Ok(possible) => weir_sys::parse_cpu_list(possible.trim())
                .map(|c| c.len() as u32)
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    format!("cannot parse /sys/devices/system/cpu/possible: {possible:?}")
                })?,
            // Without sysfs (a chroot, a container that hides it) the CPUs
            // this process may run on stand in: enough to check a file
            // there; `weir serve` itself needs sysfs and says so.
            Err(_) => match weir_sys::online_cpus().len() {
                0 => return Err("neither /sys/devices/system/cpu/possible nor this process's CPU affinity can be read".into()),
                n => n as u32,
            },
        };
        Ok(HostFacts {
            mem_available,
            memcg_room: memcg_room(),
            possible_cpus,
        })
    }

    /// The bytes maps may take: the smaller of what the host and the
    /// memory cgroup have left.
    pub fn room(&self) -> u64 {
        self.memcg_room
            .map_or(self.mem_available, |r| r.min(self.mem_available))
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))
}

/// MemAvailable of /proc/meminfo, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Room under this process's cgroup v2 memory limit, the tightest of its
/// own and its ancestors'; None without a limit or on cgroup v1.
fn memcg_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let mut room: Option<u64> = None;
    loop {
        let max = std::fs::read_to_string(dir.join("memory.max")).ok();
        let current = std::fs::read_to_string(dir.join("memory.current")).ok();
        if let (Some(max), Some(current)) = (max, current) {
            if let (Ok(max), Ok(current)) =
                (max.trim().parse::<u64>(), current.trim().parse::<u64>())
            {
                let here = max.saturating_sub(current);
                room = Some(room.map_or(here, |r| r.min(here)));
            }
        }
        if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
            return room;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo =
            "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   24000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(24_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn this_host_has_memory_and_cpus() {
        let h = HostFacts::read().unwrap();
        assert!(h.mem_available > 0 && h.possible_cpus > 0, "{h:?}");
        assert!(h.room() <= h.mem_available);
    }
}
