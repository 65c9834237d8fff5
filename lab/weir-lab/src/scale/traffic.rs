//! The scale lab's traffic, from the client's namespace: long-lived
//! keep-alive connections with lifetimes spread over seconds (so that when a
//! node fails, connections of every age are open), and a steady stream of
//! new one-request connections. Every request records when and by which
//! backend it was served; a connection that breaks or changes backend is a
//! PCC violation, recorded with its age.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::netns::enter;

/// What the traffic does.
#[derive(Debug, Clone, Copy)]
pub struct TrafficOptions {
    /// Long-lived connections open at any time.
    pub conns: usize,
    /// Their lifetimes are uniform in this range (seconds).
    pub lifetime: (f64, f64),
    /// Between two requests of a long-lived connection.
    pub interval: Duration,
    /// New one-request connections per second.
    pub new_per_s: f64,
    pub seed: u64,
}

/// One long-lived connection's life, in seconds since the traffic started.
#[derive(Debug, Clone, Serialize)]
pub struct LongLived {
    pub opened_s: f64,
    pub closed_s: f64,
    pub requests: usize,
    /// It broke (reset, timeout, closed) or moved to another backend.
    pub violated: bool,
    pub error: Option<String>,
}

/// One new connection's fate.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Probe {
    pub at_s: f64,
    pub ok: bool,
}

/// What the traffic saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    pub long_lived: Vec<LongLived>,
    pub probes: Vec<Probe>,
}

/// Running traffic; [`Traffic::stop`] ends it and collects.
pub struct Traffic {
    start: Instant,
    stop: Arc<AtomicBool>,
    outcome: Arc<Mutex<Outcome>>,
    threads: Vec<JoinHandle<()>>,
}

/// A request's read deadline: longer than TCP's first retransmissions.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

impl Traffic {
    pub fn start(ns: &str, vip: SocketAddr, opts: TrafficOptions) -> Traffic {
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let outcome = Arc::new(Mutex::new(Outcome::default()));
        let mut threads = Vec::new();
        for k in 0..opts.conns {
            let (ns, stop, outcome) = (ns.to_string(), stop.clone(), outcome.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ (k as u64) << 20);
                if enter(&ns).is_err() {
                    return;
                }
                // Staggered: the first connections die at spread-out times.
                let first = rng.gen_range(0.0..opts.lifetime.0.max(0.01));
                let mut life = Duration::from_secs_f64(first + opts.lifetime.0);
                while !stop.load(Ordering::Relaxed) {
                    let rec = long_lived(vip, start, life, opts.interval, &stop);
                    outcome
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .long_lived
                        .push(rec);
                    life =
                        Duration::from_secs_f64(rng.gen_range(opts.lifetime.0..=opts.lifetime.1));
                }
            }));
        }
        let (ns2, stop2, outcome2) = (ns.to_string(), stop.clone(), outcome.clone());
        threads.push(std::thread::spawn(move || {
            if enter(&ns2).is_err() {
                return;
            }
            let gap = Duration::from_secs_f64(1.0 / opts.new_per_s.max(0.1));
            let mut next = Instant::now();
            while !stop2.load(Ordering::Relaxed) {
                let at_s = start.elapsed().as_secs_f64();
                let ok = one_request(vip).is_ok();
                outcome2
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .probes
                    .push(Probe { at_s, ok });
                next += gap;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        }));
        Traffic {
            start,
            stop,
            outcome,
            threads,
        }
    }

    /// Seconds since the traffic started (the timeline's clock).
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Ends the traffic (connections finish their current request) and
    /// returns what it saw.
    pub fn stop(mut self) -> Outcome {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        std::mem::take(&mut *self.outcome.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One connection for `life`, a request every `interval`.
fn long_lived(
    vip: SocketAddr,
    start: Instant,
    life: Duration,
    interval: Duration,
    stop: &AtomicBool,
) -> LongLived {
    let opened = Instant::now();
    let mut rec = LongLived {
        opened_s: start.elapsed().as_secs_f64(),
        closed_s: 0.0,
        requests: 0,
        violated: false,
        error: None,
    };
    let result = (|| -> Result<()> {
        let s = TcpStream::connect_timeout(&vip, READ_TIMEOUT).context("connect")?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        let mut w = s.try_clone()?;
        let mut r = BufReader::new(s);
        let mut first: Option<String> = None;
        while opened.elapsed() < life && !stop.load(Ordering::Relaxed) {
            let backend =
                request(&mut w, &mut r).with_context(|| format!("request {}", rec.requests))?;
            match &first {
                None => first = Some(backend),
                Some(b) if *b != backend => bail!("moved from {b} to {backend}"),
                Some(_) => {}
            }
            rec.requests += 1;
            std::thread::sleep(interval);
        }
        Ok(())
    })();
    rec.closed_s = start.elapsed().as_secs_f64();
    if let Err(e) = result {
        // A connection that never got its first answer did not exist yet
        // for PCC (a failed new connection); the prober counts those.
        rec.violated = rec.requests > 0;
        rec.error = Some(format!("{e:#}"));
    }
    rec
}

/// One GET on a keep-alive connection; the backend's name.
fn request(w: &mut TcpStream, r: &mut BufReader<TcpStream>) -> Result<String> {
    write!(w, "GET / HTTP/1.1\r\nHost: weir-lab\r\n\r\n")?;
    let mut len = None;
    let mut backend = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            bail!("connection closed");
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
        if let Some(v) = l.strip_prefix("X-Backend: ") {
            backend = Some(v.to_string());
        }
    }
    let mut body = vec![0u8; len.context("no Content-Length")?];
    r.read_exact(&mut body)?;
    backend.context("no X-Backend")
}

/// A new connection with one request.
fn one_request(vip: SocketAddr) -> Result<String> {
    let s = TcpStream::connect_timeout(&vip, Duration::from_secs(1)).context("connect")?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    request(&mut w, &mut r)
}
