//! Signals for daemons: block them in every thread, then take them one at a
//! time in one place (no async signal handlers).

use std::time::Duration;

/// A set of signals blocked in the calling thread and every thread it
/// starts afterwards; call [`SignalSet::block`] before starting threads.
pub struct SignalSet(libc::sigset_t);

impl SignalSet {
    pub fn block(signals: &[libc::c_int]) -> SignalSet {
        // SAFETY: sigset manipulation on a local, then blocking it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            SignalSet(set)
        }
    }

    /// Waits for one of the signals.
    pub fn wait(&self) -> libc::c_int {
        let mut sig = 0;
        // SAFETY: valid set and out pointer.
        unsafe { libc::sigwait(&self.0, &mut sig) };
        sig
    }

    /// Waits for one of the signals for at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<libc::c_int> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: valid set, a zeroed siginfo out buffer and a timeout.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigtimedwait(&self.0, &mut info, &ts)
        };
        (sig > 0).then_some(sig)
    }
}

/// Gives SIGPIPE back its default action (end the process quietly), as a
/// command that prints and exits wants: `weir status --json | head -1` then
/// stops like any Unix tool instead of failing a write. Rust's runtime
/// ignores SIGPIPE at start; daemons keep it ignored, so that a peer that
/// goes away is an error on one socket, not the end of the process. The
/// signal is unblocked too: a mask inherited from the parent would leave it
/// pending and the write failing.
pub fn restore_default_sigpipe() {
    // SAFETY: installs the default disposition (no handler code runs), then
    // unblocks the signal in a sigset built on the stack.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_taken_by_wait() {
        // Runs on its own thread so the mask does not leak into other tests.
        std::thread::spawn(|| {
            let set = SignalSet::block(&[libc::SIGUSR2]);
            assert_eq!(set.wait_timeout(Duration::from_millis(10)), None);
            // SAFETY: signal this very thread.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
            assert_eq!(
                set.wait_timeout(Duration::from_secs(1)),
                Some(libc::SIGUSR2)
            );
        })
        .join()
        .unwrap();
    }
}
