//! A network namespace of a test's own: the suites that need interfaces
//! (veths for sockets, routes for the FIB) run in one, on a thread of its
//! own, so nothing touches the host's.

use std::process::Command;

/// Runs `cmd` (words split at white space); panics with its error output
/// when it fails.
pub fn sh(cmd: &str) {
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Runs `f` in a new network namespace with `lo` up, after the `setup`
/// commands, on a thread of its own (namespaces are per thread, and the
/// commands inherit it); the namespace ends with the thread.
pub fn in_new_netns<T: Send>(setup: &[&str], f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare affects only the calling thread's namespaces.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
            sh("ip link set lo up");
            for cmd in setup {
                sh(cmd);
            }
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
