//! Whether each server answers, and which servers are ejected: the proxy's
//! workers report every failed connection or request and every read from a
//! server; the status shows the newest state of each server, since when it
//! holds, and the last error.
//!
//! Every worker has its own connection to each server, so the state is the
//! newest report of any worker. A read from a server that is already up
//! costs one relaxed load; only a change of state takes the lock.
//!
//! With `auto_eject_hosts`, a server is ejected as nutcracker ejects it: after
//! `server_failure_limit` failures without an answer in between (the count
//! starts again at each ejection), for `server_retry_timeout`; then it
//! returns to the ring and is tried again. Each change of the ejected set
//! bumps a generation that the routing follows ([`crate::routing`]).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What `auto_eject_hosts` does with a server that keeps failing.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EjectMode {
    /// Never eject (`auto_eject_hosts: false`): a down server's keys get
    /// `SERVER_ERROR` until it answers again.
    Off,
    /// nutcracker's ejection: the continuum is rebuilt over the live servers,
    /// so the ejected server's keys spread over them and, with ketama, a few
    /// keys of live servers move too (modula moves most keys).
    Rehash,
    /// weir's: only the ejected server's keys move, each to the owner of the
    /// next live point of the unchanged continuum; every other key stays.
    Failover,
}

impl EjectMode {
    pub fn as_str(self) -> &'static str {
        match self {
            EjectMode::Off => "off",
            EjectMode::Rehash => "rehash",
            EjectMode::Failover => "failover",
        }
    }
}

impl std::str::FromStr for EjectMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rehash" => Ok(EjectMode::Rehash),
            "failover" => Ok(EjectMode::Failover),
            _ => Err(format!("`{s}` is not rehash or failover")),
        }
    }
}

/// When a server is ejected and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EjectPolicy {
    pub mode: EjectMode,
    /// Failures in a row (no answer in between) that eject a server.
    pub failure_limit: u32,
    /// How long an ejected server stays out of the ring.
    pub retry: Duration,
}

impl Default for EjectPolicy {
    /// nutcracker's defaults (`server_failure_limit: 2`,
    /// `server_retry_timeout: 30000`), ejection off.
    fn default() -> Self {
        EjectPolicy {
            mode: EjectMode::Off,
            failure_limit: 2,
            retry: Duration::from_secs(30),
        }
    }
}

/// A server's state as the proxy last saw it.
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
    /// Out of the ring after too many failures in a row, until its retry
    /// time (only with `auto_eject_hosts`).
    Ejected,
}

impl ServerState {
    fn from_u8(v: u8) -> ServerState {
        match v {
            1 => ServerState::Up,
            2 => ServerState::Down,
            3 => ServerState::Ejected,
            _ => ServerState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Unknown => "unknown",
            ServerState::Up => "up",
            ServerState::Down => "down",
            ServerState::Ejected => "ejected",
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
    /// Times it was ejected, and times it returned to the ring.
    #[serde(default)]
    pub ejections: u64,
    #[serde(default)]
    pub returns: u64,
    /// While ejected: when it returns to the ring (ms since the epoch).
    #[serde(default)]
    pub retry_unix_ms: Option<u64>,
}

#[derive(Default)]
struct Record {
    since_unix_ms: Option<u64>,
    failures: u64,
    last_error: Option<(String, u64)>,
    /// Failures since the last answer or ejection.
    in_a_row: u32,
    ejections: u64,
    returns: u64,
    /// While ejected: when it returns (ms since `Health::start`).
    retry_at_ms: Option<u64>,
}

#[derive(Default)]
struct One {
    state: AtomicU8,
    record: Mutex<Record>,
}

/// The health of every server of the pool, shared by the workers.
pub struct Health {
    servers: Vec<One>,
    /// How servers are named in the log.
    names: Vec<String>,
    pool: String,
    policy: EjectPolicy,
    start: Instant,
    /// Bumped at every ejection and return.
    generation: AtomicU64,
    /// The earliest return due (ms since `start`); u64::MAX for none.
    next_return_ms: AtomicU64,
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Health {
    /// `servers` servers that are never ejected.
    pub fn new(servers: usize) -> Health {
        let names = (0..servers).map(|i| format!("server {i}")).collect();
        Health::ejecting("", names, EjectPolicy::default())
    }

    /// The servers `names` (for the log) of `pool`, ejected by `policy`.
    pub fn ejecting(pool: &str, names: Vec<String>, policy: EjectPolicy) -> Health {
        Health {
            servers: names.iter().map(|_| One::default()).collect(),
            names,
            pool: pool.to_string(),
            policy,
            start: Instant::now(),
            generation: AtomicU64::new(0),
            next_return_ms: AtomicU64::new(u64::MAX),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Changes with every ejection and return.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether failing servers are ejected (`auto_eject_hosts`).
    pub fn ejects(&self) -> bool {
        self.policy.mode != EjectMode::Off
    }

    /// Which servers are in the ring (not ejected), in the configuration's order.
    pub fn live(&self) -> Vec<bool> {
        self.servers
            .iter()
            .map(|one| one.state.load(Ordering::Acquire) != ServerState::Ejected as u8)
            .collect()
    }

    /// Server `s` connected or answered.
    pub fn answered(&self, s: usize) {
        let one = &self.servers[s];
        if one.state.load(Ordering::Relaxed) == ServerState::Up as u8 {
            return;
        }
        let mut r = one.record.lock().unwrap_or_else(|e| e.into_inner());
        r.in_a_row = 0;
        // An answer on a connection opened before the ejection does not end
        // it: the server returns at its retry time, as in nutcracker.
        if one.state.load(Ordering::Relaxed) == ServerState::Ejected as u8 {
            return;
        }
        if one.state.swap(ServerState::Up as u8, Ordering::Relaxed) != ServerState::Up as u8 {
            r.since_unix_ms = Some(now_unix_ms());
        }
    }

    /// Server `s` failed: `reason` as the clients' `SERVER_ERROR` says it.
    /// Returns whether this failure ejected it.
    pub fn failed(&self, s: usize, reason: &str) -> bool {
        let one = &self.servers[s];
        let now = now_unix_ms();
        let mut r = one.record.lock().unwrap_or_else(|e| e.into_inner());
        r.failures += 1;
        r.last_error = Some((reason.to_string(), now));
        if one.state.load(Ordering::Relaxed) == ServerState::Ejected as u8 {
            return false;
        }
        if one.state.swap(ServerState::Down as u8, Ordering::Relaxed) != ServerState::Down as u8 {
            r.since_unix_ms = Some(now);
        }
        r.in_a_row += 1;
        if self.policy.mode == EjectMode::Off || r.in_a_row < self.policy.failure_limit {
            return false;
        }
        r.in_a_row = 0;
        r.ejections += 1;
        let retry_at = self.now_ms() + self.policy.retry.as_millis() as u64;
        r.retry_at_ms = Some(retry_at);
        r.since_unix_ms = Some(now);
        one.state
            .store(ServerState::Ejected as u8, Ordering::Release);
        self.next_return_ms.fetch_min(retry_at, Ordering::AcqRel);
        self.generation.fetch_add(1, Ordering::AcqRel);
        eprintln!(
            "weir kv: pool {}: {} ejected after {} failures in a row ({reason}); its keys \
             move ({}) for {} ms",
            self.pool,
            self.names[s],
            self.policy.failure_limit,
            self.policy.mode.as_str(),
            self.policy.retry.as_millis()
        );
        true
    }

    /// Returns the ejected servers whose retry time has come to the ring;
    /// cheap when none is due. Returns whether any returned.
    pub fn tick(&self) -> bool {
        let now = self.now_ms();
        if now < self.next_return_ms.load(Ordering::Acquire) {
            return false;
        }
        let mut next = u64::MAX;
        let mut any = false;
        for (s, one) in self.servers.iter().enumerate() {
            let mut r = one.record.lock().unwrap_or_else(|e| e.into_inner());
            let Some(at) = r.retry_at_ms else {
                continue;
            };
            if at > now {
                next = next.min(at);
                continue;
            }
            r.retry_at_ms = None;
            r.returns += 1;
            r.since_unix_ms = Some(now_unix_ms());
            // Back in the ring, untried: the next request tries it.
            one.state
                .store(ServerState::Unknown as u8, Ordering::Release);
            any = true;
            eprintln!(
                "weir kv: pool {}: {} returns to the ring after {} ms",
                self.pool,
                self.names[s],
                self.policy.retry.as_millis()
            );
        }
        self.next_return_ms.store(next, Ordering::Release);
        if any {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        any
    }

    pub fn reports(&self) -> Vec<HealthReport> {
        let (now_ms, now_unix) = (self.now_ms(), now_unix_ms());
        self.servers
            .iter()
            .map(|one| {
                let r = one.record.lock().unwrap_or_else(|e| e.into_inner());
                HealthReport {
                    state: ServerState::from_u8(one.state.load(Ordering::Relaxed)),
                    since_unix_ms: r.since_unix_ms,
                    failures: r.failures,
                    last_error: r.last_error.as_ref().map(|(m, _)| m.clone()),
                    last_error_unix_ms: r.last_error.as_ref().map(|(_, t)| *t),
                    ejections: r.ejections,
                    returns: r.returns,
                    retry_unix_ms: r.retry_at_ms.map(|at| now_unix + at.saturating_sub(now_ms)),
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

    #[test]
    fn failures_in_a_row_eject_until_the_retry_time_and_an_answer_resets_the_count() {
        let policy = EjectPolicy {
            mode: EjectMode::Rehash,
            failure_limit: 2,
            retry: Duration::from_millis(150),
        };
        let h = Health::ejecting("p", vec!["a".into(), "b".into()], policy);
        assert!(!h.failed(1, "Connection refused"));
        h.answered(1);
        // the answer broke the run: one more failure does not eject
        assert!(!h.failed(1, "Connection refused"));
        assert_eq!(h.generation(), 0);
        assert!(h.failed(1, "Connection refused"));
        assert_eq!(h.generation(), 1);
        assert_eq!(h.live(), vec![true, false]);
        let r = &h.reports()[1];
        assert_eq!(
            (r.state, r.ejections, r.returns),
            (ServerState::Ejected, 1, 0)
        );
        assert!(r.retry_unix_ms.is_some());
        // failures and answers of an ejected server do not end the ejection
        assert!(!h.failed(1, "Connection refused"));
        h.answered(1);
        assert!(!h.tick());
        assert_eq!(h.live(), vec![true, false]);
        std::thread::sleep(Duration::from_millis(200));
        assert!(h.tick());
        assert_eq!(h.generation(), 2);
        assert_eq!(h.live(), vec![true, true]);
        let r = &h.reports()[1];
        assert_eq!(
            (r.state, r.ejections, r.returns),
            (ServerState::Unknown, 1, 1)
        );
        assert_eq!(r.retry_unix_ms, None);
        // the count starts again: one failure after the return is not enough
        assert!(!h.failed(1, "Connection refused"));
        assert!(h.failed(1, "Connection refused"));
    }

    #[test]
    fn without_ejection_a_server_is_never_ejected() {
        let h = Health::new(1);
        for _ in 0..10 {
            assert!(!h.failed(0, "Connection refused"));
        }
        assert_eq!((h.live(), h.generation()), (vec![true], 0));
    }
}
