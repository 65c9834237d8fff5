//! The client side of `weir-lab spotlight`: a request schedule (Poisson
//! arrivals, bounded-Pareto file sizes) and a client that plays it against
//! the VIP, one TCP connection per file, recording each flow's completion
//! time (FCT) and how it ended.
//!
//! A connection that is reset or ends short after it was established is a
//! per-connection-consistency (PCC) violation: a backend resets any packet of
//! a connection it does not know, so a connection moved to another backend
//! mid-flight breaks this way.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::netns::enter;

/// Bounded Pareto file sizes: P(X > x) ~ x^-alpha on [min, max] bytes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BoundedPareto {
    pub alpha: f64,
    pub min: f64,
    pub max: f64,
}

impl BoundedPareto {
    pub fn new(alpha: f64, min: f64, max: f64) -> Result<BoundedPareto> {
        if !(alpha > 0.0 && alpha.is_finite() && min >= 1.0 && max > min && max.is_finite()) {
            bail!("bounded Pareto needs alpha > 0 and 1 <= min < max (got {alpha}, {min}, {max})");
        }
        Ok(BoundedPareto { alpha, min, max })
    }

    /// Inverse-CDF sample from a uniform `u` in [0, 1).
    pub fn quantile(&self, u: f64) -> f64 {
        let r = (self.min / self.max).powf(self.alpha);
        let x = self.min / (1.0 - u * (1.0 - r)).powf(1.0 / self.alpha);
        x.clamp(self.min, self.max)
    }

    /// The mean, in closed form.
    pub fn mean(&self) -> f64 {
        let (a, l, h) = (self.alpha, self.min, self.max);
        let r = (l / h).powf(a);
        if (a - 1.0).abs() < 1e-9 {
            l * (h / l).ln() / (1.0 - r)
        } else {
            a / (a - 1.0) * l * (1.0 - (l / h).powf(a - 1.0)) / (1.0 - r)
        }
    }
}

/// One request of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Seconds from the start of the run.
    pub at: f64,
    /// File size in bytes.
    pub size: u64,
}

/// Poisson arrivals at `rate` per second for `duration` seconds, sizes from
/// `sizes`; the same seed gives the same schedule (every policy of one
/// repetition sees the same requests).
pub fn schedule(rate: f64, duration: f64, sizes: &BoundedPareto, seed: u64) -> Vec<Request> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut t = 0.0;
    // Bounded: at most 100x the expected count (and 10M).
    let cap = ((rate * duration * 100.0) as usize).clamp(16, 10_000_000);
    while out.len() < cap {
        let u: f64 = rng.gen();
        t += -(1.0 - u).ln() / rate;
        if t >= duration {
            break;
        }
        let size = sizes.quantile(rng.gen()).round() as u64;
        out.push(Request { at: t, size });
    }
    out
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every byte arrived.
    Done,
    /// Reset, or closed short, after the connection was established: a PCC
    /// violation.
    Broken,
    /// The connection was never established (refused or timed out).
    ConnectFailed,
    /// Still running when the client gave up (the drain deadline).
    Unfinished,
    /// An answer that is not the file asked for.
    BadResponse,
}

/// The record of one request.
#[derive(Debug, Clone)]
pub struct Flow {
    pub req: Request,
    /// Seconds from the scheduled arrival to the last byte (or to the end
    /// for flows that did not finish).
    pub fct: f64,
    pub outcome: Outcome,
    /// Index of the backend that served it (from the X-Backend header).
    pub backend: Option<usize>,
    /// What broke, for the report.
    pub error: Option<String>,
}

/// What the client measured in one run.
#[derive(Debug, Clone)]
pub struct ClientRun {
    pub flows: Vec<Flow>,
    /// Bytes received by all flows between `warmup` and `warmup + measure`.
    pub window_bytes: u64,
    /// The window's real length in seconds.
    pub window_s: f64,
    /// Largest lag of a connection's start behind its schedule, seconds.
    pub max_start_lag: f64,
}

/// Parameters of [`play`].
#[derive(Debug, Clone)]
pub struct PlayOptions {
    pub vip: SocketAddr,
    /// Throughput window: from `warmup` to `warmup + measure` seconds.
    pub warmup: f64,
    pub measure: f64,
    /// After the last arrival, wait at most this long for flows to finish.
    pub drain: f64,
    /// At most this many flows in flight; further arrivals fail at once.
    pub max_in_flight: usize,
}

/// Plays `sched` from namespace `ns` against `opts.vip`. Returns when every
/// flow has ended or the drain deadline passed (then open flows are cut and
/// counted as unfinished). `progress` is called about once a second with
/// (seconds into the run, flows finished, flows in flight).
pub fn play(
    ns: &str,
    sched: &[Request],
    opts: &PlayOptions,
    progress: &mut dyn FnMut(f64, usize, usize),
) -> Result<ClientRun> {
    let ns = ns.to_string();
    let sched = sched.to_vec();
    let opts = opts.clone();
    let (ptx, prx) = std::sync::mpsc::channel::<(f64, usize, usize)>();
    let h = std::thread::Builder::new()
        .name("spot-client".into())
        .spawn(move || -> Result<ClientRun> {
            enter(&ns)?;
            play_here(&sched, &opts, &ptx)
        })?;
    for (t, done, open) in prx {
        progress(t, done, open);
    }
    h.join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
}

/// (bytes received, seconds into the run) at one edge of the window.
type Mark = Option<(u64, f64)>;

struct Shared {
    bytes: AtomicU64,
    abort: AtomicBool,
    in_flight: AtomicU64,
    done: AtomicU64,
}

fn play_here(
    sched: &[Request],
    opts: &PlayOptions,
    progress: &std::sync::mpsc::Sender<(f64, usize, usize)>,
) -> Result<ClientRun> {
    let shared = Arc::new(Shared {
        bytes: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        in_flight: AtomicU64::new(0),
        done: AtomicU64::new(0),
    });
    let results: Arc<Mutex<Vec<Option<Flow>>>> = Arc::new(Mutex::new(vec![None; sched.len()]));
    let start = Instant::now();
    let end_arrivals = sched.last().map_or(0.0, |r| r.at);
    let (w0, w1) = (opts.warmup, opts.warmup + opts.measure);
    let mut window: [Mark; 2] = [None, None];
    let mut max_lag: f64 = 0.0;
    let mut next_report = 1.0;
    let mut handles = Vec::with_capacity(sched.len());
    let sample_window = |now: f64, window: &mut [Mark; 2]| {
        if window[0].is_none() && now >= w0 {
            window[0] = Some((shared.bytes.load(Ordering::Relaxed), now));
        }
        if window[1].is_none() && now >= w1 {
            window[1] = Some((shared.bytes.load(Ordering::Relaxed), now));
        }
    };
    for (i, req) in sched.iter().enumerate() {
        // Wait for the arrival, sampling the throughput window and
        // reporting progress on the way (sleeps of at most 50 ms).
        loop {
            let now = start.elapsed().as_secs_f64();
            sample_window(now, &mut window);
            if now >= next_report {
                next_report += 1.0;
                let _ = progress.send((
                    now,
                    shared.done.load(Ordering::Relaxed) as usize,
                    shared.in_flight.load(Ordering::Relaxed) as usize,
                ));
            }
            if now >= req.at {
                max_lag = max_lag.max(now - req.at);
                break;
            }
            std::thread::sleep(Duration::from_secs_f64((req.at - now).min(0.05)));
        }
        if shared.in_flight.load(Ordering::Relaxed) as usize >= opts.max_in_flight {
            results.lock().unwrap()[i] = Some(Flow {
                req: *req,
                fct: 0.0,
                outcome: Outcome::ConnectFailed,
                backend: None,
                error: Some(format!("client limit of {} flows", opts.max_in_flight)),
            });
            continue;
        }
        shared.in_flight.fetch_add(1, Ordering::Relaxed);
        let (shared, results, req, vip) = (shared.clone(), results.clone(), *req, opts.vip);
        let at = start + Duration::from_secs_f64(req.at);
        let spawned = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || {
                let flow = fetch(vip, req, at, &shared);
                shared.in_flight.fetch_sub(1, Ordering::Relaxed);
                shared.done.fetch_add(1, Ordering::Relaxed);
                results.lock().unwrap()[i] = Some(flow);
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => bail!("starting a client thread: {e}"),
        }
    }
    // Drain: wait for open flows, then cut the rest.
    let deadline = end_arrivals.max(w1) + opts.drain;
    loop {
        let now = start.elapsed().as_secs_f64();
        sample_window(now, &mut window);
        let open = shared.in_flight.load(Ordering::Relaxed) as usize;
        if now >= next_report {
            next_report += 1.0;
            let _ = progress.send((now, shared.done.load(Ordering::Relaxed) as usize, open));
        }
        if (open == 0 && window[1].is_some()) || now >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    shared.abort.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    let end = start.elapsed().as_secs_f64();
    let (b0, t0) = window[0].unwrap_or((0, 0.0));
    let (b1, t1) = window[1].unwrap_or((shared.bytes.load(Ordering::Relaxed), end));
    let flows = Arc::try_unwrap(results)
        .map_err(|_| anyhow::anyhow!("client results still shared"))?
        .into_inner()
        .unwrap()
        .into_iter()
        .zip(sched)
        .map(|(f, req)| {
            f.unwrap_or(Flow {
                req: *req,
                fct: 0.0,
                outcome: Outcome::Unfinished,
                backend: None,
                error: None,
            })
        })
        .collect();
    Ok(ClientRun {
        flows,
        window_bytes: b1.saturating_sub(b0),
        window_s: (t1 - t0).max(1e-9),
        max_start_lag: max_lag,
    })
}

/// One file over one connection. FCT counts from the scheduled arrival, so
/// a client that falls behind its schedule shows up in the FCTs.
fn fetch(vip: SocketAddr, req: Request, at: Instant, shared: &Shared) -> Flow {
    let mut flow = Flow {
        req,
        fct: 0.0,
        outcome: Outcome::Done,
        backend: None,
        error: None,
    };
    let finish = |flow: &mut Flow, outcome: Outcome, err: Option<String>| {
        flow.fct = at.elapsed().as_secs_f64();
        flow.outcome = outcome;
        flow.error = err;
    };
    let s = match TcpStream::connect_timeout(&vip, Duration::from_secs(3)) {
        Ok(s) => s,
        Err(e) => {
            finish(
                &mut flow,
                Outcome::ConnectFailed,
                Some(format!("connect: {e}")),
            );
            return flow;
        }
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let r = (|| -> std::result::Result<(), (Outcome, String)> {
        let io = |what: &str, e: std::io::Error| (classify(&e), format!("{what}: {e}"));
        (&s).write_all(
            format!("GET /file/{} HTTP/1.1\r\nHost: weir-lab\r\n\r\n", req.size).as_bytes(),
        )
        .map_err(|e| io("request", e))?;
        let mut r = BufReader::with_capacity(64 * 1024, &s);
        let mut len = None;
        let mut header_lines = 0;
        loop {
            let mut line = String::new();
            let n =
                read_retrying(shared, || r.read_line(&mut line)).map_err(|e| io("header", e))?;
            if n == 0 {
                return Err((Outcome::Broken, "closed before the header ended".into()));
            }
            header_lines += 1;
            if header_lines > 32 {
                return Err((Outcome::BadResponse, "header too long".into()));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if header_lines == 1 && !l.starts_with("HTTP/1.1 200") {
                return Err((Outcome::BadResponse, format!("status line {l:?}")));
            }
            if let Some(v) = l.strip_prefix("Content-Length: ") {
                len = v.parse::<u64>().ok();
            }
            if let Some(v) = l.strip_prefix("X-Backend: ") {
                flow.backend = v.parse::<usize>().ok();
            }
        }
        if len != Some(req.size) {
            return Err((
                Outcome::BadResponse,
                format!("Content-Length {len:?} for a {} byte file", req.size),
            ));
        }
        let mut left = req.size;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let want = buf.len().min(left as usize);
            let n =
                read_retrying(shared, || r.read(&mut buf[..want])).map_err(|e| io("body", e))?;
            if n == 0 {
                return Err((
                    Outcome::Broken,
                    format!("closed with {left} of {} bytes missing", req.size),
                ));
            }
            left -= n as u64;
            shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    })();
    match r {
        Ok(()) => finish(&mut flow, Outcome::Done, None),
        Err((o, e)) => finish(&mut flow, o, Some(e)),
    }
    flow
}

/// Retries reads that time out (500 ms) until the run is aborted, which
/// turns into an `Interrupted` error classified as unfinished.
fn read_retrying(
    shared: &Shared,
    mut f: impl FnMut() -> std::io::Result<usize>,
) -> std::io::Result<usize> {
    loop {
        match f() {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if shared.abort.load(Ordering::SeqCst) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::Interrupted,
                        "drain deadline passed",
                    ));
                }
            }
            r => return r,
        }
    }
}

fn classify(e: &std::io::Error) -> Outcome {
    use std::io::ErrorKind::*;
    match e.kind() {
        Interrupted => Outcome::Unfinished,
        _ => Outcome::Broken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_pareto_stays_in_bounds_and_matches_its_mean() {
        let d = BoundedPareto::new(1.2, 10_000.0, 2_000_000.0).unwrap();
        assert_eq!(d.quantile(0.0), 10_000.0);
        assert!((d.quantile(0.999_999_999) - 2_000_000.0).abs() / 2e6 < 0.01);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 400_000;
        let mean: f64 = (0..n).map(|_| d.quantile(rng.gen())).sum::<f64>() / n as f64;
        assert!(
            (mean - d.mean()).abs() / d.mean() < 0.03,
            "{mean} vs {}",
            d.mean()
        );
        // alpha = 1 has its own closed form.
        let d1 = BoundedPareto::new(1.0, 1000.0, 100_000.0).unwrap();
        let m1: f64 = (0..n).map(|_| d1.quantile(rng.gen())).sum::<f64>() / n as f64;
        assert!((m1 - d1.mean()).abs() / d1.mean() < 0.03);
        assert!(BoundedPareto::new(1.2, 10.0, 5.0).is_err());
        assert!(BoundedPareto::new(0.0, 10.0, 50.0).is_err());
    }

    #[test]
    fn schedule_is_poisson_and_reproducible() {
        let d = BoundedPareto::new(1.2, 1000.0, 100_000.0).unwrap();
        let a = schedule(200.0, 50.0, &d, 3);
        let b = schedule(200.0, 50.0, &d, 3);
        assert_eq!(a, b);
        assert_ne!(a, schedule(200.0, 50.0, &d, 4));
        // 10000 expected arrivals; a Poisson count is within 5 sd.
        assert!((a.len() as f64 - 10_000.0).abs() < 500.0, "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(a.iter().all(|r| r.at < 50.0 && r.size >= 1000));
        // Exponential gaps: the coefficient of variation is about 1.
        let gaps: Vec<f64> = a.windows(2).map(|w| w[1].at - w[0].at).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((sd / m - 1.0).abs() < 0.05, "cv {}", sd / m);
    }
}
