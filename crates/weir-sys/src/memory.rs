//! Memory sizes: the page and the machine's RAM.

/// The size of a memory page (4096 where sysconf cannot say).
pub fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// The machine's RAM in bytes; `None` if sysinfo fails.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysinfo is plain data; zero is a valid start.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: info is valid for writes.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    Some(info.totalram as u64 * u64::from(info.mem_unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_plausible() {
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
        assert!(physical_memory().unwrap() > 64 << 20);
    }
}
