//! The HTTP traffic of `weir-lab bench forward`: a small HTTP/1.1 server at
//! each backend (a pool of threads on one listener, as a pre-forked server
//! works) and a bounded load of concurrent clients, each thread one
//! connection at a time, in one of two modes:
//!
//! - keep-alive: every thread keeps one connection and sends its requests
//!   on it back to back (wrk's default);
//! - close: every request opens a connection, sends `Connection: close`
//!   and reads to the end; the server closes after its response, as nginx
//!   does, so the server side keeps the TIME_WAIT (wrk with
//!   `-H 'Connection: close'`). A request's latency then includes its
//!   connection's setup.
//!
//! Every thread stops at the deadline or after [`MAX_REQUESTS_PER_THREAD`],
//! whichever comes first.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use crate::netns::enter;

/// The cap on one client thread's requests, whatever the duration.
pub const MAX_REQUESTS_PER_THREAD: u64 = 2_000_000;
/// The longest a connect or a response may take before the request counts
/// as failed.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an idle server thread looks at its stop flag.
const SERVER_POLL: Duration = Duration::from_millis(200);
const BODY: &[u8] = b"weir-lab\n";

/// How the clients use their connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum HttpMode {
    /// One connection per client, every request on it.
    KeepAlive,
    /// A connection per request (`Connection: close`).
    Close,
}

impl HttpMode {
    pub fn label(self) -> &'static str {
        match self {
            HttpMode::KeepAlive => "keep-alive",
            HttpMode::Close => "Connection: close",
        }
    }

    fn request(self) -> &'static [u8] {
        match self {
            HttpMode::KeepAlive => b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n",
            HttpMode::Close => b"GET / HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n",
        }
    }
}

/// The HTTP server of one backend namespace; stops on drop.
pub struct HttpServer {
    listener: Socket,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl HttpServer {
    /// Listens on `port` in `ns` with `workers` threads pinned to `cpu`.
    pub fn start(ns: &str, port: u16, workers: usize, cpu: usize) -> Result<HttpServer> {
        let ns_owned = ns.to_string();
        let listener = std::thread::spawn(move || -> Result<Socket> {
            enter(&ns_owned)?;
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            let addr: SocketAddr = ([0, 0, 0, 0], port).into();
            s.bind(&addr.into())
                .with_context(|| format!("binding :{port}"))?;
            s.listen(4096)?;
            Ok(s)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the listener's thread panicked"))?
        .with_context(|| format!("the HTTP server in {ns}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..workers {
            let l = listener.try_clone()?;
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                if crate::cpus::pin_current(cpu).is_err() {
                    return;
                }
                while !stop.load(Ordering::Relaxed) {
                    // A shut-down listener fails accept: the stop.
                    let Ok((s, _)) = l.accept() else { break };
                    let _ = serve(s.into(), &stop);
                }
            }));
        }
        Ok(HttpServer {
            listener,
            stop,
            threads,
        })
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes every thread blocked in accept (Linux).
        let _ = self.listener.shutdown(Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Answers the requests on one connection until the client closes it, a
/// request asks to close, or the server stops.
fn serve(mut s: TcpStream, stop: &AtomicBool) -> Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(SERVER_POLL))?;
    let mut buf = vec![0u8; 4096];
    let mut have = 0;
    loop {
        let Some(end) = find(&buf[..have], b"\r\n\r\n") else {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            ensure!(have < buf.len(), "a request header over 4 KiB");
            match s.read(&mut buf[have..]) {
                Ok(0) => return Ok(()),
                Ok(n) => have += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        };
        let close = find(&buf[..end], b"Connection: close").is_some();
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            BODY.len(),
            if close { "close" } else { "keep-alive" }
        );
        // One write: with Nagle off, pieces would go as segments of their own.
        let mut out = response.into_bytes();
        out.extend_from_slice(BODY);
        s.write_all(&out)?;
        if close {
            return Ok(());
        }
        buf.copy_within(end + 4..have, 0);
        have -= end + 4;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What one client thread did.
#[derive(Debug, Default)]
pub struct ClientRecord {
    /// Every answered request's latency, microseconds.
    pub latencies_us: Vec<u32>,
    /// Connections opened.
    pub connections: u64,
    pub failed: u64,
    pub first_error: Option<String>,
}

/// `threads` clients in `ns` (pinned to `cpu`) sending to `vip` in `mode`
/// until `duration` has passed; join the handles for the records.
pub fn load(
    ns: &str,
    cpu: usize,
    vip: SocketAddr,
    mode: HttpMode,
    threads: usize,
    duration: Duration,
) -> Vec<JoinHandle<ClientRecord>> {
    let deadline = Instant::now() + duration;
    (0..threads)
        .map(|_| {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                let mut rec = ClientRecord::default();
                if let Err(e) = enter(&ns).and_then(|_| crate::cpus::pin_current(cpu)) {
                    rec.failed += 1;
                    rec.first_error = Some(format!("{e:#}"));
                    return rec;
                }
                let mut conn: Option<TcpStream> = None;
                let mut n = 0u64;
                while n < MAX_REQUESTS_PER_THREAD && Instant::now() < deadline {
                    n += 1;
                    let started = Instant::now();
                    match request(vip, mode, &mut conn, &mut rec.connections) {
                        Ok(()) => rec
                            .latencies_us
                            .push(started.elapsed().as_micros().min(u32::MAX as u128) as u32),
                        Err(e) => {
                            conn = None;
                            rec.failed += 1;
                            rec.first_error.get_or_insert_with(|| format!("{e:#}"));
                            // A refused connect returns at once: do not spin.
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                rec
            })
        })
        .collect()
}

/// One request: on the kept connection (opened if there is none) or, to
/// close, on a connection of its own.
fn request(
    vip: SocketAddr,
    mode: HttpMode,
    conn: &mut Option<TcpStream>,
    connections: &mut u64,
) -> Result<()> {
    if conn.is_none() {
        let s = TcpStream::connect_timeout(&vip, IO_TIMEOUT)
            .with_context(|| format!("connecting to {vip}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        *connections += 1;
        *conn = Some(s);
    }
    let s = conn.as_mut().expect("opened above");
    s.write_all(mode.request()).context("sending the request")?;
    read_response(s, mode)?;
    if mode == HttpMode::Close {
        *conn = None;
    }
    Ok(())
}

/// Reads one response: its header and body, and in close mode on to the
/// server's close.
fn read_response(s: &mut TcpStream, mode: HttpMode) -> Result<()> {
    let mut buf = [0u8; 1024];
    let mut have = 0;
    let want = loop {
        let n = s.read(&mut buf[have..]).context("reading the response")?;
        if n == 0 {
            bail!("the server closed before its response");
        }
        have += n;
        if let Some(end) = find(&buf[..have], b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).context("a response header not UTF-8")?;
            ensure!(head.starts_with("HTTP/1.1 200 "), "the response: {head}");
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .context("a response without Content-Length")?;
            break end + 4 + length;
        }
        ensure!(have < buf.len(), "a response header over 1 KiB");
    };
    while have < want {
        ensure!(want <= buf.len(), "a response over 1 KiB");
        let n = s.read(&mut buf[have..]).context("reading the body")?;
        ensure!(n > 0, "the server closed within the body");
        have += n;
    }
    if mode == HttpMode::Close {
        let n = s.read(&mut buf).context("waiting for the server's close")?;
        ensure!(n == 0, "data after the response on a closing connection");
    }
    Ok(())
}
