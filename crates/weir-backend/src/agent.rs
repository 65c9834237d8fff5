//! `weir agent`: runs on a backend and reports its load to the controller
//! (Spotlight IV-C): `GET /load` answers
//!
//! ```json
//! {"processing_time_s": 0.0021, "rate_per_s": 153.2, "samples": 77, "window_s": 0.5}
//! ```
//!
//! - `processing_time_s`: mean busy time per request over the window
//!   (0 when `samples` is 0: no request finished in the window);
//! - `rate_per_s`: requests finished per second over the window;
//! - `samples`: requests finished in the window;
//! - `window_s`: the window actually covered (up to the configured one).
//!
//! The numbers come from a [`StatsSource`] of cumulative counters:
//! - a stats file that the service rewrites, JSON `{"requests": N, "busy_s": S}`
//!   (requests finished so far and seconds spent serving them);
//! - or a [`LoadMeter`] that an in-process server records into directly
//!   (the lab's backends do this).
//!
//! A sampler thread snapshots the counters every window/10, so the window
//! is a sliding one with 10% granularity.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use weir_http::Server;
use weir_sys::SignalSet;

/// Cumulative counters of a service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cumulative {
    /// Requests finished so far.
    pub requests: u64,
    /// Seconds spent serving them.
    pub busy_s: f64,
}

/// Records requests of an in-process server; cheap to clone and share.
#[derive(Debug, Clone, Default)]
pub struct LoadMeter {
    requests: Arc<AtomicU64>,
    busy_ns: Arc<AtomicU64>,
}

impl LoadMeter {
    pub fn new() -> LoadMeter {
        LoadMeter::default()
    }

    /// One request finished after `busy` of work.
    pub fn record(&self, busy: Duration) {
        self.busy_ns.fetch_add(
            busy.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cumulative(&self) -> Cumulative {
        Cumulative {
            requests: self.requests.load(Ordering::Relaxed),
            busy_s: self.busy_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// Where the agent reads the service's counters.
#[derive(Debug, Clone)]
pub enum StatsSource {
    /// A JSON file `{"requests": N, "busy_s": S}` the service rewrites
    /// (write a temporary file and rename it over, so reads see a whole one).
    File(PathBuf),
    Meter(LoadMeter),
}

impl StatsSource {
    pub fn read(&self) -> Result<Cumulative> {
        match self {
            StatsSource::Meter(m) => Ok(m.cumulative()),
            StatsSource::File(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading stats file {}", p.display()))?;
                let c: Cumulative = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "{}: expected {{\"requests\": N, \"busy_s\": S}}",
                        p.display()
                    )
                })?;
                if !(c.busy_s.is_finite() && c.busy_s >= 0.0) {
                    bail!("{}: busy_s must be a finite number >= 0", p.display());
                }
                Ok(c)
            }
        }
    }
}

/// The `/load` answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    pub processing_time_s: f64,
    pub rate_per_s: f64,
    pub samples: u64,
    pub window_s: f64,
}

/// Sliding-window view over snapshots of cumulative counters.
#[derive(Debug)]
pub struct Window {
    window: Duration,
    snaps: VecDeque<(Instant, Cumulative)>,
}

impl Window {
    pub fn new(window: Duration) -> Window {
        Window {
            window,
            snaps: VecDeque::new(),
        }
    }

    /// Adds a snapshot taken at `now` and forgets those the window no
    /// longer needs (one older than the window is kept as its start).
    pub fn push(&mut self, now: Instant, c: Cumulative) {
        // Counters that went backwards (a restarted service): start over.
        if self
            .snaps
            .back()
            .is_some_and(|(_, last)| c.requests < last.requests || c.busy_s < last.busy_s)
        {
            self.snaps.clear();
        }
        self.snaps.push_back((now, c));
        while self.snaps.len() > 2 && now.duration_since(self.snaps[1].0) >= self.window {
            self.snaps.pop_front();
        }
    }

    /// The report from the oldest snapshot in the window to the newest.
    pub fn report(&self) -> LoadReport {
        let (Some((t0, a)), Some((t1, b))) = (self.snaps.front(), self.snaps.back()) else {
            return LoadReport {
                processing_time_s: 0.0,
                rate_per_s: 0.0,
                samples: 0,
                window_s: 0.0,
            };
        };
        let dt = t1.duration_since(*t0).as_secs_f64();
        let n = b.requests.saturating_sub(a.requests);
        let busy = (b.busy_s - a.busy_s).max(0.0);
        LoadReport {
            processing_time_s: if n > 0 { busy / n as f64 } else { 0.0 },
            rate_per_s: if dt > 0.0 { n as f64 / dt } else { 0.0 },
            samples: n,
            window_s: dt,
        }
    }
}

/// A running agent; stops on drop.
pub struct Agent {
    pub addr: SocketAddr,
    _server: Server,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<()>>,
}

impl Agent {
    /// Serves `GET /load` on `listen` from `source` over a sliding `window`.
    pub fn start(listen: SocketAddr, source: StatsSource, window: Duration) -> Result<Agent> {
        let l = std::net::TcpListener::bind(listen)
            .with_context(|| format!("weir agent: binding {listen}"))?;
        Agent::on(l, source, window)
    }

    /// Like [`Agent::start`] on a bound listener.
    pub fn on(l: std::net::TcpListener, source: StatsSource, window: Duration) -> Result<Agent> {
        if window.is_zero() {
            bail!("the window must be longer than 0");
        }
        let state = Arc::new(Mutex::new((Window::new(window), None::<String>)));
        let stop = Arc::new(AtomicBool::new(false));
        let tick = (window / 10).max(Duration::from_millis(5));
        let sample = {
            let (state, source) = (state.clone(), source.clone());
            move || {
                let r = source.read();
                let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                match r {
                    Ok(c) => {
                        st.0.push(Instant::now(), c);
                        st.1 = None;
                    }
                    Err(e) => st.1 = Some(format!("{e:#}")),
                }
            }
        };
        sample();
        let sampler = {
            let (stop, sample) = (stop.clone(), sample.clone());
            std::thread::Builder::new()
                .name("agent-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        sample();
                    }
                })?
        };
        let load = move || {
            sample();
            let st = state.lock().unwrap_or_else(|e| e.into_inner());
            match &st.1 {
                Some(e) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({ "error": e })),
                ),
                None => (StatusCode::OK, Json(serde_json::json!(st.0.report()))),
            }
        };
        let app = Router::new().route(
            "/load",
            get(move || {
                let load = load.clone();
                // The stats file is read on the blocking pool: a slow disk
                // must not stall the server.
                async move {
                    tokio::task::spawn_blocking(load).await.unwrap_or_else(|_| {
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            Json(serde_json::json!({ "error": "the sampler panicked" })),
                        )
                    })
                }
            }),
        );
        let server = Server::on(l, app)?;
        Ok(Agent {
            addr: server.addr,
            _server: server,
            stop,
            sampler: Some(sampler),
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sampler.take() {
            let _ = t.join();
        }
    }
}

/// `weir agent` in the foreground until SIGINT/SIGTERM.
pub fn run(listen: SocketAddr, stats_file: PathBuf, window: Duration) -> Result<()> {
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM]);
    let source = StatsSource::File(stats_file.clone());
    if let Err(e) = source.read() {
        eprintln!("weir agent: warning: {e:#} (answering 503 until it is readable)");
    }
    let agent = Agent::start(listen, source, window)?;
    eprintln!(
        "weir agent: serving GET /load on {} from {} (window {:?})",
        agent.addr,
        stats_file.display(),
        window
    );
    signals.wait();
    drop(agent);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn c(requests: u64, busy_s: f64) -> Cumulative {
        Cumulative { requests, busy_s }
    }

    #[test]
    fn the_window_reports_means_and_rates_over_its_span() {
        let t = Instant::now();
        let mut w = Window::new(Duration::from_secs(1));
        assert_eq!(w.report().samples, 0);
        w.push(t, c(0, 0.0));
        w.push(t + Duration::from_millis(500), c(10, 0.05));
        let r = w.report();
        assert_eq!(r.samples, 10);
        assert!((r.processing_time_s - 0.005).abs() < 1e-12);
        assert!((r.rate_per_s - 20.0).abs() < 1e-9);
        // Past the window, old requests leave it.
        w.push(t + Duration::from_millis(1500), c(12, 0.25));
        w.push(t + Duration::from_millis(2600), c(12, 0.25));
        let r = w.report();
        assert_eq!((r.samples, r.processing_time_s), (0, 0.0), "{r:?}");
        // A restarted service (counters went back) starts a new window.
        w.push(t + Duration::from_millis(2700), c(1, 0.001));
        assert_eq!(w.report().samples, 0);
    }

    #[test]
    fn the_meter_accumulates() {
        let m = LoadMeter::new();
        m.record(Duration::from_millis(3));
        m.record(Duration::from_millis(1));
        let cum = m.cumulative();
        assert_eq!(cum.requests, 2);
        assert!((cum.busy_s - 0.004).abs() < 1e-12);
    }

    fn get_load(addr: SocketAddr) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /load HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_load_from_a_stats_file_and_503_when_it_is_bad() {
        let dir = std::env::temp_dir().join(format!("weir-agent-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("stats.json");
        std::fs::write(&f, r#"{"requests": 0, "busy_s": 0}"#).unwrap();
        let agent = Agent::start(
            "127.0.0.1:0".parse().unwrap(),
            StatsSource::File(f.clone()),
            Duration::from_millis(400),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(&f, r#"{"requests": 8, "busy_s": 0.016}"#).unwrap();
        let out = get_load(agent.addr);
        let body = out.split("\r\n\r\n").nth(1).unwrap();
        let r: LoadReport = serde_json::from_str(body).unwrap();
        assert_eq!(r.samples, 8, "{out}");
        assert!((r.processing_time_s - 0.002).abs() < 1e-9, "{r:?}");
        assert!(r.rate_per_s > 0.0 && r.window_s > 0.0, "{r:?}");
        // The controller's own poller reads it.
        let polled =
            weir_control::telemetry::agent::poll(agent.addr, Duration::from_secs(2)).unwrap();
        assert!((polled.processing_time_s.unwrap() - 0.002).abs() < 1e-9);
        std::fs::write(&f, "garbage").unwrap();
        let out = get_load(agent.addr);
        assert_eq!(out.split_whitespace().nth(1), Some("503"), "{out}");
        assert!(out.contains("expected {"), "{out}");
        drop(agent);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
