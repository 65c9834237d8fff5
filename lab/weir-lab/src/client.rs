//! Lab clients: long-lived HTTP/1.1 keep-alive connections that record which
//! backend served every request (a connection served by two backends, or
//! broken, is a per-connection-consistency violation), a bounded load of
//! keep-alive connections that counts what it was served, and UDP requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use crate::netns::enter;

/// The life of one client connection.
#[derive(Debug, Clone, Serialize)]
pub struct ConnRecord {
    /// Backend name of each answered request, in order.
    pub served_by: Vec<String>,
    /// Why the connection ended early, if it did.
    pub error: Option<String>,
}

impl ConnRecord {
    /// The single backend that served it, if it was consistent and whole.
    pub fn backend(&self) -> Option<&str> {
        let first = self.served_by.first()?;
        self.served_by
            .iter()
            .all(|b| b == first)
            .then_some(first.as_str())
    }

    /// True when the connection moved between backends or broke.
    pub fn violated(&self) -> bool {
        self.error.is_some() || self.backend().is_none()
    }
}

/// Starts `conns` connections from namespace `ns` to `vip`, each sending
/// `requests` requests `interval` apart; join the handles for the records.
pub fn spawn_http(
    ns: &str,
    vip: SocketAddr,
    conns: usize,
    requests: usize,
    interval: Duration,
) -> Vec<JoinHandle<ConnRecord>> {
    (0..conns)
        .map(|_| {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                let mut rec = ConnRecord {
                    served_by: Vec::new(),
                    error: None,
                };
                if let Err(e) =
                    enter(&ns).and_then(|_| http_session(vip, requests, interval, &mut rec))
                {
                    rec.error = Some(format!("{e:#}"));
                }
                rec
            })
        })
        .collect()
}

fn http_session(
    vip: SocketAddr,
    requests: usize,
    interval: Duration,
    rec: &mut ConnRecord,
) -> Result<()> {
    let s = TcpStream::connect_timeout(&vip, CONNECT_TIMEOUT).context("connect")?;
    http_requests(s, requests, interval, rec)
}

/// How long a lab client waits for a connection, and for each response.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A keep-alive connection's two halves.
struct Session {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Session {
    fn open(vip: SocketAddr) -> Result<Session> {
        let s = TcpStream::connect_timeout(&vip, CONNECT_TIMEOUT).context("connect")?;
        Session::on(s)
    }

    fn on(s: TcpStream) -> Result<Session> {
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        // A request is complete when written: send it now, not after an ACK.
        s.set_nodelay(true)?;
        Ok(Session {
            w: s.try_clone()?,
            r: BufReader::new(s),
        })
    }

    /// Request `i` of the connection; the backend that answered.
    fn get(&mut self, i: usize) -> Result<String> {
        self.w
            .write_all(b"GET / HTTP/1.1\r\nHost: weir-lab\r\n\r\n")
            .with_context(|| format!("request {i}"))?;
        let mut len = None;
        let mut backend = None;
        loop {
            let mut line = String::new();
            if self
                .r
                .read_line(&mut line)
                .with_context(|| format!("response {i}"))?
                == 0
            {
                bail!("connection closed after {i} responses");
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
        let mut body = vec![0u8; len.context("response without Content-Length")?];
        self.r.read_exact(&mut body)?;
        backend.context("response without X-Backend")
    }
}

fn http_requests(
    s: TcpStream,
    requests: usize,
    interval: Duration,
    rec: &mut ConnRecord,
) -> Result<()> {
    let mut session = Session::on(s)?;
    for i in 0..requests {
        if i > 0 {
            std::thread::sleep(interval);
        }
        rec.served_by.push(session.get(i)?);
    }
    Ok(())
}

/// What one thread of [`http_load`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadRecord {
    /// Requests answered.
    pub served: u64,
    /// Connections that could not be opened or broke before their last
    /// request, each with why.
    pub failed: Vec<String>,
}

/// A bounded HTTP load from namespace `ns` to `vip`: `threads` threads,
/// each starting a request every `pause` (or at once when the previous
/// response came later; missed starts are not made up) on keep-alive
/// connections of `per_conn` requests (then a new connection, so
/// connections are set up all along) until `duration` has passed. Starting
/// on a schedule, not `pause` after each response, keeps the rate the same
/// when a busy machine delays responses by less than `pause`, while a
/// stall longer than that still costs requests. A connection that fails is
/// recorded and replaced. Each thread ends by `duration` plus one
/// connect and one response timeout at most. Join the handles for the
/// records.
pub fn http_load(
    ns: &str,
    vip: SocketAddr,
    threads: usize,
    per_conn: usize,
    pause: Duration,
    duration: Duration,
) -> Vec<JoinHandle<LoadRecord>> {
    (0..threads)
        .map(|_| {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                let mut rec = LoadRecord::default();
                if let Err(e) = enter(&ns) {
                    rec.failed.push(format!("{e:#}"));
                    return rec;
                }
                let deadline = Instant::now() + duration;
                let mut next = Instant::now();
                while Instant::now() < deadline {
                    let done = Session::open(vip).and_then(|mut s| {
                        for i in 0..per_conn.max(1) {
                            if Instant::now() >= deadline {
                                break;
                            }
                            s.get(i)?;
                            rec.served += 1;
                            next = (next + pause).max(Instant::now());
                            std::thread::sleep(next.saturating_duration_since(Instant::now()));
                        }
                        Ok(())
                    });
                    if let Err(e) = done {
                        rec.failed.push(format!("{e:#}"));
                        // A refused connect returns at once: do not spin.
                        std::thread::sleep(pause);
                    }
                }
                rec
            })
        })
        .collect()
}

/// One keep-alive connection to `vip`, from the calling thread's namespace:
/// up to `requests` requests started `pause` apart, none after `deadline`.
/// Returns the backend and response time of every answered request, and
/// why the connection ended early, if it did.
pub fn timed_http(
    vip: SocketAddr,
    requests: usize,
    pause: Duration,
    deadline: Instant,
) -> (Vec<(String, Duration)>, Option<String>) {
    let mut answered = Vec::new();
    let mut session = match Session::open(vip) {
        Ok(s) => s,
        Err(e) => return (answered, Some(format!("{e:#}"))),
    };
    let mut next = Instant::now();
    for i in 0..requests.max(1) {
        if i > 0 && Instant::now() >= deadline {
            break;
        }
        let sent = Instant::now();
        match session.get(i) {
            Ok(b) => answered.push((b, sent.elapsed())),
            Err(e) => return (answered, Some(format!("{e:#}"))),
        }
        next = (next + pause).max(Instant::now());
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    (answered, None)
}

/// One HTTP request on a fresh connection; returns the backend's name.
pub fn http_once(ns: &str, vip: SocketAddr) -> Result<String> {
    let h = spawn_http(ns, vip, 1, 1, Duration::ZERO).pop().unwrap();
    let rec = h
        .join()
        .map_err(|_| anyhow::anyhow!("client thread panicked"))?;
    match (rec.error, rec.served_by.first()) {
        (None, Some(b)) => Ok(b.clone()),
        (Some(e), _) => bail!(e),
        (None, None) => bail!("no response"),
    }
}

/// One HTTP request on a connection from the fixed local `port` (what a
/// client that reuses its ports does); the connection then ends with a RST
/// (SO_LINGER 0), so the port is free again at once. Returns the backend.
pub fn http_from_port(ns: &str, vip: SocketAddr, port: u16) -> Result<String> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<String> {
        enter(&ns)?;
        let sock = Socket::new(Domain::for_address(vip), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.set_linger(Some(Duration::ZERO))?;
        let local: SocketAddr = match vip {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, port).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, port).into(),
        };
        sock.bind(&local.into())
            .with_context(|| format!("binding local port {port}"))?;
        sock.connect_timeout(&vip.into(), CONNECT_TIMEOUT)
            .with_context(|| format!("connect from port {port}"))?;
        let mut rec = ConnRecord {
            served_by: Vec::new(),
            error: None,
        };
        http_requests(sock.into(), 1, Duration::ZERO, &mut rec)?;
        rec.served_by.pop().context("no response")
    })
    .join()
    .map_err(|_| anyhow::anyhow!("client thread panicked"))?
}

/// `n` UDP requests from `ns` to `vip`, each from its own socket (so each is
/// a new flow); returns the answering backend per request, None on timeout.
pub fn udp_requests(
    ns: &str,
    vip: SocketAddr,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Option<String>>> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<Vec<Option<String>>> {
        enter(&ns)?;
        let mut out = Vec::with_capacity(n);
        let deadline = Instant::now() + timeout * n as u32;
        for i in 0..n {
            if Instant::now() > deadline {
                break;
            }
            let s = UdpSocket::bind("0.0.0.0:0")?;
            s.set_read_timeout(Some(timeout))?;
            s.send_to(format!("req {i}").as_bytes(), vip)?;
            let mut buf = [0u8; 256];
            out.push(match s.recv_from(&mut buf) {
                Ok((len, from)) if from == vip => {
                    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
                }
                _ => None,
            });
        }
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("udp client thread panicked"))?
}
