//! Whether each server answers: the proxy's workers report every failed
//! connection or request and every read from a server; the status shows the
//! newest state of each server, since when it holds, and the last error.
//!
//! Every worker has its own connection to each server, so the state is the
//! newest report of any worker. A read from a server that is already up
//! costs one relaxed load; only a change of state takes the lock.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A server's state as the proxy last saw it. There is no "ejected":
/// `weir kv` refuses `auto_eject_hosts: true` and keeps every key's owner.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// No connection tried yet (nothing was sent to it, and `preconnect`
    /// is off).
    Unknown,
    /// Its last connection or read succeeded.
    Up,
    /// Its last connection failed, broke, timed out or sent garbage.
    Down,
}

impl ServerState {
    fn from_u8(v: u8) -> ServerState {
        match v {
            1 => ServerState::Up,
            2 => ServerState::Down,
            _ => ServerState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Unknown => "unknown",
            ServerState::Up => "up",
            ServerState::Down => "down",
        }
    }
}

/// What the status reports of one server's health.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    pub state: ServerState,
    /// When the state began (ms since the epoch); none while unknown.
    pub since_unix_ms: Option<u64>,
    /// Connections or requests that failed, over the run.
    pub failures: u64,
    /// The newest failure's reason and time (ms since the epoch).
    pub last_error: Option<String>,
    pub last_error_unix_ms: Option<u64>,
}

#[derive(Default)]
struct Record {
    since_unix_ms: Option<u64>,
    failures: u64,
    last_error: Option<(String, u64)>,
}

#[derive(Default)]
struct One {
    state: AtomicU8,
    record: Mutex<Record>,
}

/// The health of every server of the pool, shared by the workers.
pub struct Health(Vec<One>);

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Health {
    pub fn new(servers: usize) -> Health {
        Health((0..servers).map(|_| One::default()).collect())
    }

    /// Server `s` connected or answered.
    pub fn answered(&self, s: usize) {
        let one = &self.0[s];
        if one.state.load(Ordering::Relaxed) == ServerState::Up as u8 {
            return;
        }
        let mut r = one.record.lock().unwrap_or_else(|e| e.into_inner());
        if one.state.swap(ServerState::Up as u8, Ordering::Relaxed) != ServerState::Up as u8 {
            r.since_unix_ms = Some(now_unix_ms());
        }
    }

    /// Server `s` failed: `reason` as the clients' `SERVER_ERROR` says it.
    pub fn failed(&self, s: usize, reason: &str) {
        let one = &self.0[s];
        let now = now_unix_ms();
        let mut r = one.record.lock().unwrap_or_else(|e| e.into_inner());
        if one.state.swap(ServerState::Down as u8, Ordering::Relaxed) != ServerState::Down as u8 {
            r.since_unix_ms = Some(now);
        }
        r.failures += 1;
        r.last_error = Some((reason.to_string(), now));
    }

    pub fn reports(&self) -> Vec<HealthReport> {
        self.0
            .iter()
            .map(|one| {
                let r = one.record.lock().unwrap_or_else(|e| e.into_inner());
                HealthReport {
                    state: ServerState::from_u8(one.state.load(Ordering::Relaxed)),
                    since_unix_ms: r.since_unix_ms,
                    failures: r.failures,
                    last_error: r.last_error.as_ref().map(|(m, _)| m.clone()),
                    last_error_unix_ms: r.last_error.as_ref().map(|(_, t)| *t),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_marks_down_until_the_next_answer_and_keeps_its_reason() {
        let h = Health::new(2);
        assert_eq!(h.reports()[0].state, ServerState::Unknown);
        assert_eq!(h.reports()[0].since_unix_ms, None);
        h.answered(0);
        h.failed(1, "Connection refused");
        h.failed(1, "Connection refused");
        let r = h.reports();
        assert_eq!(r[0].state, ServerState::Up);
        assert!(r[0].since_unix_ms.is_some());
        assert_eq!(
            (r[1].state, r[1].failures, r[1].last_error.as_deref()),
            (ServerState::Down, 2, Some("Connection refused"))
        );
        let down_since = r[1].since_unix_ms;
        h.answered(1);
        let r = h.reports();
        assert_eq!(r[1].state, ServerState::Up);
        assert!(r[1].since_unix_ms >= down_since);
        // The last error stays for the operator to read after recovery.
        assert_eq!(r[1].last_error.as_deref(), Some("Connection refused"));
    }
}
