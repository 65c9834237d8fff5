//! Network namespaces: entering one, or a new one, with the calling thread
//! (namespaces are per thread).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Moves the calling thread into the network namespace `ns` is open on
/// (/run/netns/<name>, /proc/<pid>/ns/net).
pub fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: setns on an open descriptor; it affects only this thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread into a new, empty network namespace (only `lo`,
/// down); it goes away with the last thread and interface in it.
pub fn unshare_netns() -> io::Result<()> {
    // SAFETY: unshare affects only the calling thread's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_namespace_has_only_loopback_and_we_can_go_back() {
        std::thread::spawn(|| {
            let home = File::open("/proc/thread-self/ns/net").unwrap();
            let before = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
            unshare_netns().unwrap();
            assert_ne!(
                std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
                before
            );
            assert_eq!(crate::ifindex("lo").unwrap(), Some(1));
            enter_netns(&home).unwrap();
            assert_eq!(
                std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
                before
            );
        })
        .join()
        .unwrap();
    }
}
