//! A minimal HTTP/1.x server for weir's small read-only endpoints (the
//! agent's `/load`, Prometheus `/metrics`): GET only, one response per
//! connection, bounded request size, read timeouts, and a cap on concurrent
//! connections so a slow or hostile client cannot pile up threads. Every
//! response ends with a graceful close (FIN, then the client's leftovers
//! read), never a reset that could destroy it in flight.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Most connections served at once; more are answered 503 and closed.
const MAX_CONNS: usize = 32;
/// Longest request head read.
const MAX_HEAD: u64 = 8192;
/// After a response: how long, and how many bytes, to wait for the client's
/// close while reading what it still sends.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// What a handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
        }
    }

    pub fn not_found() -> Response {
        Response::new(404, "text/plain", "not found\n")
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A running server; stops (and joins its accept thread) on drop.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` and serves `handler(path)` for every GET on a thread.
    pub fn start<H>(addr: SocketAddr, handler: H) -> Result<Server>
    where
        H: Fn(&str) -> Response + Send + Sync + 'static,
    {
        let l = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
        Server::on(l, handler)
    }

    /// Serves on an already bound listener.
    pub fn on<H>(l: TcpListener, handler: H) -> Result<Server>
    where
        H: Fn(&str) -> Response + Send + Sync + 'static,
    {
        let addr = l.local_addr()?;
        l.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let live = Arc::new(AtomicUsize::new(0));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("http-{}", addr.port()))
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((s, _)) => {
                            if live.load(Ordering::Relaxed) >= MAX_CONNS {
                                // The accept thread must not wait: drop only
                                // what has already arrived.
                                let _ = respond(&s, &Response::new(503, "text/plain", "busy\n"));
                                close_gracefully(&s, None);
                                continue;
                            }
                            live.fetch_add(1, Ordering::Relaxed);
                            let h = handler.clone();
                            let live2 = live.clone();
                            let spawned = std::thread::Builder::new().spawn(move || {
                                if serve_one(&s, &*h).is_ok() {
                                    close_gracefully(&s, Some(LINGER));
                                }
                                live2.fetch_sub(1, Ordering::Relaxed);
                            });
                            if spawned.is_err() {
                                live.fetch_sub(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
            .context("starting the HTTP thread")?;
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(s: &TcpStream, handler: &dyn Fn(&str) -> Response) -> Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut r = BufReader::new(s.take(MAX_HEAD));
    let mut first = String::new();
    r.read_line(&mut first)?;
    if first.trim().is_empty() {
        return respond(s, &Response::new(400, "text/plain", "bad request\n"));
    }
    // Read (and ignore) the headers up to the blank line.
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let resp = match method {
        "GET" => handler(target.split('?').next().unwrap_or("")),
        "HEAD" => {
            let mut r = handler(target.split('?').next().unwrap_or(""));
            r.body.clear();
            r
        }
        "" => Response::new(400, "text/plain", "bad request\n"),
        _ => Response::new(405, "text/plain", "GET only\n"),
    };
    respond(s, &resp)
}

fn respond(mut s: &TcpStream, r: &Response) -> Result<()> {
    write!(
        s,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        r.body
    )?;
    s.flush()?;
    Ok(())
}

/// Ends a response without a reset. Closing a socket with unread bytes makes
/// the kernel send RST, which can destroy the response before the client has
/// read it, and fails a client still writing its request. So: FIN first,
/// then read and drop what the client still sends until it closes, for at
/// most `linger` (None: only what has already arrived) and LINGER_BYTES.
fn close_gracefully(mut s: &TcpStream, linger: Option<Duration>) {
    let _ = s.shutdown(Shutdown::Write);
    let ready = match linger {
        Some(t) => s.set_read_timeout(Some(t)),
        None => s.set_nonblocking(true),
    };
    if ready.is_err() {
        return;
    }
    let deadline = Instant::now() + linger.unwrap_or_default();
    let mut buf = [0u8; 4096];
    let mut left = LINGER_BYTES;
    while left > 0 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
        if linger.is_some() && Instant::now() >= deadline {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_get_and_refuses_other_methods() {
        let srv = Server::start("127.0.0.1:0".parse().unwrap(), |p| match p {
            "/x" => Response::new(200, "text/plain", "hello"),
            _ => Response::not_found(),
        })
        .unwrap();
        let r = get(srv.addr, "GET /x?y=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nhello"), "{r}");
        assert!(get(srv.addr, "GET /nope HTTP/1.0\r\n\r\n").contains(" 404 "));
        assert!(get(srv.addr, "POST /x HTTP/1.0\r\n\r\n").contains(" 405 "));
        assert!(get(srv.addr, "\r\n").contains(" 400 "));
    }

    /// A client that sends its request in pieces and more after the head (a
    /// second, pipelined request) still reads the whole response: the server
    /// never closes with its bytes unread, which would reset the connection.
    #[test]
    fn responses_are_not_reset_by_unread_request_bytes() {
        let body = "x".repeat(200_000);
        let b = body.clone();
        let srv = Server::start("127.0.0.1:0".parse().unwrap(), move |_| {
            Response::new(200, "text/plain", b.clone())
        })
        .unwrap();
        for i in 0..100 {
            let mut s = TcpStream::connect(srv.addr).unwrap();
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut send = |piece: &str| {
                s.write_all(piece.as_bytes())
                    .unwrap_or_else(|e| panic!("request {i}: writing: {e}"))
            };
            send("GET /x HTTP/1.1\r\n");
            send("Host: a\r\n\r\n");
            // Arrives after the server has read the head.
            std::thread::sleep(Duration::from_millis(5));
            send("GET /y HTTP/1.1\r\n\r\n");
            let mut out = String::new();
            s.read_to_string(&mut out)
                .unwrap_or_else(|e| panic!("request {i}: reading: {e}"));
            assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "request {i}");
            assert!(
                out.ends_with(&format!("\r\n\r\n{body}")),
                "request {i}: cut short"
            );
        }
    }
}
