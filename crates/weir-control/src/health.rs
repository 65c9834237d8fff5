//! Active health checks (`[vip.health]`): a TCP connect, or an HTTP/1.1 GET
//! whose status must be `expect_status`, every `interval_ms`, each with a
//! `timeout_ms`. A DIP that `weir serve` starts with (or that a reload
//! brings with a new VIP, or a new `[vip.health]`) starts healthy, so a
//! restart or a takeover keeps serving; a DIP added to a VIP that already
//! serves waits for its first passing check, with no new connections until
//! then. `fall` failures in a row make a DIP fail, `rise` passes in a row
//! make it healthy again. A failing DIP gets no new connections (the
//! controller leaves it out of the table); its established connections keep
//! going.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_config::{Health, HealthKind};

/// Rise/fall hysteresis of one DIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    rise: u32,
    fall: u32,
    healthy: bool,
    /// Not yet checked: one pass makes it healthy.
    awaiting_first_pass: bool,
    /// Consecutive results that disagree with `healthy`.
    streak: u32,
}

impl Hysteresis {
    pub fn new(rise: u32, fall: u32) -> Hysteresis {
        Hysteresis {
            rise: rise.max(1),
            fall: fall.max(1),
            healthy: true,
            awaiting_first_pass: false,
            streak: 0,
        }
    }

    /// A DIP that gets no new connections until its first check passes.
    pub fn awaiting_first_pass(rise: u32, fall: u32) -> Hysteresis {
        Hysteresis {
            healthy: false,
            awaiting_first_pass: true,
            ..Hysteresis::new(rise, fall)
        }
    }

    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Folds in one check; returns true when the verdict changed.
    pub fn record(&mut self, pass: bool) -> bool {
        if pass == self.healthy {
            self.streak = 0;
            return false;
        }
        self.streak += 1;
        let need = match (self.healthy, self.awaiting_first_pass) {
            (true, _) => self.fall,
            (false, true) => 1,
            (false, false) => self.rise,
        };
        if self.streak >= need {
            self.healthy = pass;
            self.awaiting_first_pass = false;
            self.streak = 0;
            return true;
        }
        false
    }
}

/// One check of `addr`.
pub fn check(
    kind: HealthKind,
    addr: SocketAddr,
    path: &str,
    expect: u16,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    if kind == HealthKind::Tcp {
        return Ok(());
    }
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    s.set_write_timeout(Some(left()))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: weir-health\r\nConnection: close\r\n\r\n",
        addr.ip()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    // The status line is all we need: read until its end, bounded.
    let mut buf = Vec::with_capacity(128);
    let mut b = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 1024 {
        if Instant::now() >= deadline {
            return Err("timeout".into());
        }
        s.set_read_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(p), Some(code)) if p.starts_with("HTTP/1.") => {
            if code == expect.to_string() {
                Ok(())
            } else {
                Err(format!("status {code}, expected {expect}"))
            }
        }
        _ => Err("not an HTTP reply".into()),
    }
}

/// Shared view of one DIP's health.
#[derive(Debug)]
pub struct DipHealth {
    healthy: AtomicBool,
    pub checks: AtomicU64,
    pub failures: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

impl DipHealth {
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
}

/// What to check: the DIP's identity, where to connect, how.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub key: String,
    pub addr: SocketAddr,
    pub kind: HealthKind,
    pub path: String,
    pub expect: u16,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

impl Target {
    pub fn new(key: String, addr: SocketAddr, h: &Health) -> Target {
        Target {
            key,
            addr,
            kind: h.kind,
            path: h.path().to_string(),
            expect: *h.expect_status.get_ref(),
            interval: Duration::from_millis(*h.interval_ms.get_ref()),
            timeout: Duration::from_millis(*h.timeout_ms.get_ref()),
            rise: *h.rise.get_ref(),
            fall: *h.fall.get_ref(),
        }
    }
}

struct Checker {
    target: Target,
    state: Arc<DipHealth>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One checker thread per DIP with a health section.
#[derive(Default)]
pub struct Monitor {
    checkers: HashMap<String, Checker>,
}

impl Monitor {
    /// Runs exactly these targets: removed ones stop, changed ones restart
    /// with their verdict kept, new ones start healthy unless `awaiting`
    /// names them (then they wait for their first passing check).
    pub fn set_targets(&mut self, targets: Vec<Target>, awaiting: &HashSet<String>) {
        let mut next = HashMap::new();
        for t in targets {
            match self.checkers.remove(&t.key) {
                Some(c) if c.target == t => {
                    next.insert(t.key.clone(), c);
                }
                Some(old) => {
                    let start = match old.state.healthy() {
                        true => Start::Healthy,
                        false => Start::Failing,
                    };
                    drop(old);
                    next.insert(t.key.clone(), spawn(t, start));
                }
                None => {
                    let start = match awaiting.contains(&t.key) {
                        true => Start::AwaitingFirstPass,
                        false => Start::Healthy,
                    };
                    next.insert(t.key.clone(), spawn(t, start));
                }
            }
        }
        self.checkers = next;
    }

    /// The health of a DIP, `None` when it has no checks.
    pub fn get(&self, key: &str) -> Option<Arc<DipHealth>> {
        self.checkers.get(key).map(|c| c.state.clone())
    }
}

/// The verdict a checker starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Healthy,
    Failing,
    AwaitingFirstPass,
}

fn spawn(target: Target, start: Start) -> Checker {
    let state = Arc::new(DipHealth {
        healthy: AtomicBool::new(start == Start::Healthy),
        checks: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        last_error: Mutex::new(None),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (t, st, sp) = (target.clone(), state.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("health".into())
        .spawn(move || {
            let mut h = match start {
                Start::Healthy => Hysteresis::new(t.rise, t.fall),
                Start::Failing => Hysteresis {
                    healthy: false,
                    ..Hysteresis::new(t.rise, t.fall)
                },
                Start::AwaitingFirstPass => Hysteresis::awaiting_first_pass(t.rise, t.fall),
            };
            let mut next = Instant::now();
            while !sp.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now < next {
                    std::thread::sleep((next - now).min(Duration::from_millis(50)));
                    continue;
                }
                next = now + t.interval;
                let r = check(t.kind, t.addr, &t.path, t.expect, t.timeout);
                st.checks.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = &r {
                    st.failures.fetch_add(1, Ordering::Relaxed);
                    *st.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                }
                if h.record(r.is_ok()) {
                    st.healthy.store(h.healthy(), Ordering::Relaxed);
                    eprintln!(
                        "weir: health: {} is now {}{}",
                        t.key,
                        if h.healthy() { "healthy" } else { "failing" },
                        r.err().map_or(String::new(), |e| format!(" ({e})"))
                    );
                }
            }
        })
        .expect("starting a health-check thread");
    Checker {
        target,
        state,
        stop,
        thread: Some(thread),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn rise_and_fall_need_streaks() {
        let mut h = Hysteresis::new(2, 3);
        assert!(h.healthy());
        assert!(!h.record(false));
        assert!(!h.record(false));
        assert!(!h.record(true), "a pass resets the failure streak");
        assert!(!h.record(false));
        assert!(!h.record(false));
        assert!(h.record(false), "third failure in a row");
        assert!(!h.healthy());
        assert!(!h.record(true));
        assert!(!h.record(false), "a failure resets the pass streak");
        assert!(!h.record(true));
        assert!(h.record(true));
        assert!(h.healthy());
        let mut once = Hysteresis::new(1, 1);
        assert!(once.record(false) && once.record(true));
    }

    #[test]
    fn a_new_dip_is_healthy_after_its_first_pass_only() {
        let mut h = Hysteresis::awaiting_first_pass(3, 2);
        assert!(!h.healthy());
        assert!(!h.record(false), "a failure keeps it out");
        assert!(!h.record(false));
        assert!(!h.healthy());
        assert!(h.record(true), "one pass is enough for a DIP never checked");
        assert!(h.healthy());
        // From then on, the usual streaks.
        assert!(!h.record(false));
        assert!(h.record(false));
        assert!(!h.record(true) && !h.record(true));
        assert!(h.record(true), "a DIP that failed needs `rise` passes");
    }

    fn http_server(status: &'static str) -> (SocketAddr, JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 512];
            let _ = s.read(&mut b);
            let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        });
        (addr, t)
    }

    #[test]
    fn tcp_and_http_checks() {
        let t = Duration::from_millis(500);
        let (ok, h) = http_server("200 OK");
        check(HealthKind::Http, ok, "/", 200, t).unwrap();
        h.join().unwrap();
        let (bad, h) = http_server("503 Unavailable");
        let e = check(HealthKind::Http, bad, "/health", 200, t).unwrap_err();
        assert!(e.contains("503"), "{e}");
        h.join().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        check(HealthKind::Tcp, addr, "/", 200, t).unwrap();
        drop(l);
        assert!(check(HealthKind::Tcp, addr, "/", 200, t).is_err());
        // A listener that never answers HTTP: the check times out.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let start = Instant::now();
        assert!(check(
            HealthKind::Http,
            l.local_addr().unwrap(),
            "/",
            200,
            Duration::from_millis(150)
        )
        .is_err());
        assert!(start.elapsed() < Duration::from_millis(600));
    }

    #[test]
    fn the_monitor_fails_a_dead_dip_and_revives_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let t = Target {
            key: "v/dip".into(),
            addr,
            kind: HealthKind::Tcp,
            path: "/".into(),
            expect: 200,
            interval: Duration::from_millis(20),
            timeout: Duration::from_millis(20),
            rise: 2,
            fall: 2,
        };
        let mut m = Monitor::default();
        m.set_targets(vec![t.clone()], &HashSet::new());
        let h = m.get("v/dip").unwrap();
        let wait = |want: bool| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while h.healthy() != want {
                assert!(Instant::now() < deadline, "health never became {want}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait(false);
        // Something listens on the port again (if it is still free).
        if let Ok(_l) = TcpListener::bind(addr) {
            wait(true);
        }
        m.set_targets(vec![], &HashSet::new());
        assert!(m.get("v/dip").is_none());
    }
}
