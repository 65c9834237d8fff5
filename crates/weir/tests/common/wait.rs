//! Bounded waits.

use std::time::{Duration, Instant};

/// Polls `cond` every 50 ms until it holds, at most `limit`; whether it
/// held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Asserts that `cond` comes to hold within `limit`; `what` names it.
pub fn assert_within(limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    assert!(wait_for(limit, cond), "not within {limit:?}: {what}");
}
