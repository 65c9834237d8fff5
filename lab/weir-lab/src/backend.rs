//! Lab backends: a small HTTP/1.1 server (keep-alive) and a UDP responder
//! that both answer with the backend's name, so a client can tell which
//! backend served each request. They run as threads inside a namespace.
//!
//! [`Backend::start_with`] adds a service delay per HTTP request (changeable
//! while it runs, to make a backend slow) and an embedded `weir agent` that
//! reports the backend's processing time and rate from a [`LoadMeter`].

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_backend::agent::{Agent, LoadMeter, StatsSource};

use crate::netns::enter;

/// TCP ports every backend serves HTTP on (nat DIP port, and the VIP port
/// for dsr, where the destination port is not rewritten).
pub const HTTP_PORTS: [u16; 2] = [8080, 80];
pub const UDP_PORT: u16 = 5353;

/// Port of the embedded agent of [`Backend::start_with`].
pub const AGENT_PORT: u16 = 9300;

/// Extras of [`Backend::start_with`].
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// Service time added to every HTTP request, in microseconds.
    pub delay_us: u64,
    /// Run a `weir agent` on [`AGENT_PORT`] with this sliding window.
    pub agent_window: Option<Duration>,
}

/// A running backend; stops on drop.
pub struct Backend {
    pub name: String,
    pub requests: Arc<AtomicU64>,
    /// Service delay per HTTP request in microseconds; store to change it.
    pub delay_us: Arc<AtomicU64>,
    /// Every HTTP request's service time (what the agent reports).
    pub meter: LoadMeter,
    agent: Option<Agent>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// What an HTTP server thread needs.
#[derive(Clone)]
struct HttpCtx {
    name: String,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    delay_us: Arc<AtomicU64>,
    meter: LoadMeter,
}

impl Backend {
    /// Starts the servers inside namespace `ns`.
    pub fn start(ns: &str, name: &str) -> Result<Backend> {
        Backend::start_with(ns, name, &BackendOptions::default())
    }

    /// Starts the servers, with a service delay and optionally an agent.
    pub fn start_with(ns: &str, name: &str, opts: &BackendOptions) -> Result<Backend> {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let delay_us = Arc::new(AtomicU64::new(opts.delay_us));
        let meter = LoadMeter::new();
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let mut threads = Vec::new();
        let ctx = || (name.to_string(), stop.clone(), requests.clone());
        for port in HTTP_PORTS {
            let hc = HttpCtx {
                name: name.to_string(),
                stop: stop.clone(),
                requests: requests.clone(),
                delay_us: delay_us.clone(),
                meter: meter.clone(),
            };
            threads.push(spawn_in(
                ns,
                tx.clone(),
                move || {
                    let l = TcpListener::bind(("0.0.0.0", port))
                        .with_context(|| format!("binding :{port}"))?;
                    l.set_nonblocking(true)?;
                    Ok(l)
                },
                move |l| serve_http(l, &hc),
            ));
        }
        let (udp_name, udp_stop, udp_requests) = ctx();
        threads.push(spawn_in(
            ns,
            tx,
            || {
                let s = UdpSocket::bind(("0.0.0.0", UDP_PORT)).context("binding udp")?;
                s.set_read_timeout(Some(Duration::from_millis(100)))?;
                Ok(s)
            },
            move |s| serve_udp(s, &udp_name, &udp_stop, &udp_requests),
        ));
        for r in rx.iter().take(threads.len()) {
            r.with_context(|| format!("starting backend {name}"))?;
        }
        let mut b = Backend {
            name: name.to_string(),
            requests,
            delay_us,
            meter,
            agent: None,
            stop,
            threads,
        };
        if let Some(window) = opts.agent_window {
            b.start_agent(ns, window)?;
        }
        Ok(b)
    }

    /// Starts the embedded agent on [`AGENT_PORT`] inside `ns`.
    pub fn start_agent(&mut self, ns: &str, window: Duration) -> Result<()> {
        let ns = ns.to_string();
        let l = std::thread::spawn(move || -> Result<TcpListener> {
            enter(&ns)?;
            TcpListener::bind(("0.0.0.0", AGENT_PORT))
                .with_context(|| format!("binding the agent on :{AGENT_PORT}"))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("agent bind thread panicked"))??;
        self.agent = Some(Agent::on(
            l,
            StatsSource::Meter(self.meter.clone()),
            window,
        )?);
        Ok(())
    }

    /// Stops the embedded agent: polls of it are refused from now on.
    pub fn stop_agent(&mut self) {
        self.agent = None;
    }

    /// Sets the service delay of every later HTTP request.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Runs `setup` then `serve` on a thread inside namespace `ns`, reporting
/// whether setup worked on `ready`.
fn spawn_in<T, S, F>(ns: &str, ready: Sender<Result<()>>, setup: S, serve: F) -> JoinHandle<()>
where
    S: FnOnce() -> Result<T> + Send + 'static,
    F: FnOnce(T) + Send + 'static,
{
    let ns = ns.to_string();
    std::thread::spawn(move || match enter(&ns).and_then(|_| setup()) {
        Ok(t) => {
            let _ = ready.send(Ok(()));
            serve(t);
        }
        Err(e) => {
            let _ = ready.send(Err(e));
        }
    })
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve_http(l: TcpListener, hc: &HttpCtx) {
    while !hc.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, _)) => {
                let hc = hc.clone();
                std::thread::spawn(move || {
                    let _ = handle_conn(s, &hc);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn handle_conn(s: TcpStream, hc: &HttpCtx) -> Result<()> {
    let (name, stop, requests) = (hc.name.as_str(), &hc.stop, &hc.requests);
    s.set_nonblocking(false)?;
    // A response is complete when written: send it now, not after an ACK.
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut in_request = false;
    let mut started = std::time::Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        }
        if line == "\r\n" || line == "\n" {
            if in_request {
                let delay = hc.delay_us.load(Ordering::Relaxed);
                if delay > 0 {
                    std::thread::sleep(Duration::from_micros(delay));
                }
                hc.meter.record(started.elapsed());
                requests.fetch_add(1, Ordering::Relaxed);
                let body = format!("{name}\n");
                // One write: `write!` on the socket would send each piece of
                // the format on its own, and with Nagle the pieces after the
                // first wait for the client's delayed ACK (40 ms).
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: {name}\r\n\r\n{body}",
                    body.len()
                );
                w.write_all(response.as_bytes())?;
                in_request = false;
            }
        } else {
            if !in_request {
                started = std::time::Instant::now();
            }
            in_request = true;
        }
    }
}

fn serve_udp(s: UdpSocket, name: &str, stop: &AtomicBool, requests: &AtomicU64) {
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::SeqCst) {
        if let Ok((_, from)) = s.recv_from(&mut buf) {
            requests.fetch_add(1, Ordering::Relaxed);
            let _ = s.send_to(name.as_bytes(), from);
        }
    }
}
