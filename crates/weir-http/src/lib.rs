//! weir's HTTP server: an axum router served by hyper's HTTP/1.1 connection
//! code on one small tokio runtime (current-thread, on a thread of its own)
//! per server. It carries `/metrics`, the agent's `/load`, the management
//! API and `weir kv`'s `/status`, none of which need more than one thread.
//!
//! The bounds that keep a slow or hostile client from tying it up:
//! - at most [`MAX_CONNS`] connections; more are answered 503 and closed;
//! - a request head (request line and headers) over [`MAX_HEAD`] bytes is
//!   answered 431 (by hyper), a body over [`MAX_BODY`] 413;
//! - each request head must arrive within [`HEAD_TIMEOUT`], and that includes
//!   an idle keep-alive connection waiting for its next request; a body
//!   within [`BODY_TIMEOUT`] (408);
//! - a response write that makes no progress for [`WRITE_STALL`] ends the
//!   connection (a client that stops reading).
//!
//! Every connection ends with a graceful close: FIN, then what the client
//! still sends is read and dropped (for at most [`LINGER`] and
//! [`LINGER_BYTES`]), never a reset that could destroy a response in flight
//! (a kernel resets a connection closed with unread bytes; commit 7aed664).
//! Blocking handlers run on the runtime's blocking pool
//! (`tokio::task::spawn_blocking`, at most [`BLOCKING_THREADS`] threads).

pub mod client;
pub mod dashboard;

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio::time::{sleep, timeout, Sleep};

/// Most connections served at once.
pub const MAX_CONNS: usize = 32;
/// Longest request head (request line and headers); hyper answers 431.
pub const MAX_HEAD: usize = 8192;
/// Longest request body (the API's JSON); answered 413.
pub const MAX_BODY: usize = 64 * 1024;
/// How long a request head may take to arrive, counted from when the
/// server starts waiting for it (so also the idle time of a keep-alive
/// connection between requests).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a request body may take to arrive; answered 408.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a response write may make no progress.
pub const WRITE_STALL: Duration = Duration::from_secs(2);
/// After the last response: how long, and how many bytes, to wait for the
/// client's close while reading what it still sends.
pub const LINGER: Duration = Duration::from_secs(1);
pub const LINGER_BYTES: usize = 64 * 1024;
/// How long a stopping server lets requests in flight finish.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Threads of the blocking pool (handlers that take locks or write files).
pub const BLOCKING_THREADS: usize = 4;

/// The answer to a client over [`MAX_CONNS`], written without waiting.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
Content-Length: 55\r\nConnection: close\r\n\r\n{\"error\":\"too many connections; try again in a moment\"}";

/// A JSON error answer: `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, Json(body)).into_response()
}

/// A running server; stops (lets requests in flight finish, then joins its
/// thread) on drop.
pub struct Server {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` and serves `app` on it.
    pub fn start(addr: SocketAddr, app: Router) -> Result<Server> {
        let l = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
        Server::on(l, app)
    }

    /// Serves `app` on an already bound listener.
    pub fn on(listener: TcpListener, app: Router) -> Result<Server> {
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(BLOCKING_THREADS)
            .thread_name(format!("http-{}-blocking", addr.port()))
            .build()
            .context("starting the HTTP runtime")?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _in_runtime = rt.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let app = app.layer(middleware::from_fn(read_body));
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(format!("http-{}", addr.port()))
            .spawn(move || rt.block_on(accept_loop(listener, app, stopped)))
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
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNS));
    let mut stop = stopped.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let (app, stopped) = (app.clone(), stopped.clone());
                    tokio::spawn(async move {
                        serve_connection(stream, app, stopped).await;
                        drop(slot);
                    });
                }
                Err(_) => refuse(stream),
            },
            // Out of file descriptors and the like: wait, do not spin.
            Err(_) => sleep(Duration::from_millis(5)).await,
        }
    }
    drop(listener);
    // Every connection saw the stop and finishes its request in flight.
    let _ = timeout(STOP_GRACE + LINGER, slots.acquire_many(MAX_CONNS as u32)).await;
}

async fn serve_connection(mut stream: TcpStream, app: Router, mut stopped: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    {
        let io = TokioIo::new(WriteDeadline::new(&mut stream, WRITE_STALL));
        let mut conn = pin!(http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_header_size(MAX_HEAD)
            .serve_connection(io, TowerToHyperService::new(app)));
        // (The guard wait_for returns is not Send: drop it in the block.)
        let stop = async {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::select! {
            _ = conn.as_mut() => {}
            _ = stop => {
                conn.as_mut().graceful_shutdown();
                let _ = timeout(STOP_GRACE, conn.as_mut()).await;
            }
        }
    }
    close_gracefully(stream).await;
}

/// Over the connection cap: a canned 503, written without waiting (the
/// socket's buffer is empty), then FIN, dropping only what has already
/// arrived; the accept loop must not wait on this client.
fn refuse(stream: TcpStream) {
    let Ok(s) = stream.into_std() else { return };
    use std::io::{Read, Write};
    let _ = (&s).write_all(BUSY);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 4096];
    let mut left = LINGER_BYTES;
    while left > 0 {
        match (&s).read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Ends a connection without a reset: FIN first, then read and drop what
/// the client still sends until it closes, for at most [`LINGER`] and
/// [`LINGER_BYTES`].
async fn close_gracefully(mut s: TcpStream) {
    let _ = s.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = timeout(LINGER, drain).await;
}

/// Reads the whole request body (at most [`MAX_BODY`], within
/// [`BODY_TIMEOUT`]) before the handler runs, so no handler waits on a
/// slow client.
async fn read_body(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    match timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
        Err(_) => error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
        ),
        Ok(Err(e)) if e.is::<LengthLimitError>() => too_large(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
        Ok(Ok(collected)) => {
            let req = Request::from_parts(parts, Body::from(collected.to_bytes()));
            next.run(req).await
        }
    }
}

fn too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is over {MAX_BODY} bytes"),
    )
}

/// A stream whose writes fail with `TimedOut` when they make no progress
/// for `limit`: a client that stops reading cannot hold a connection (and
/// its slot) forever. Reads pass through; hyper bounds those itself.
struct WriteDeadline<'a> {
    io: &'a mut TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<'a> WriteDeadline<'a> {
    fn new(io: &'a mut TcpStream, limit: Duration) -> WriteDeadline<'a> {
        WriteDeadline {
            io,
            limit,
            stalled: None,
        }
    }

    /// Passes `r` on; a pending write arms the stall timer, progress
    /// disarms it, and a timer that fires turns the wait into an error.
    fn watch<T>(
        &mut self,
        cx: &mut TaskContext<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let timer = self.stalled.get_or_insert_with(|| Box::pin(sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.io).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.io).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;
    use std::time::Instant;

    fn server(body_len: usize) -> Server {
        let big = "x".repeat(body_len);
        let app = Router::new()
            .route(
                "/x",
                get(|| async { "hello" }).post(|b: String| async move { b }),
            )
            .route("/big", get(move || async move { big }));
        Server::start("127.0.0.1:0".parse().unwrap(), app).unwrap()
    }

    fn connect(addr: SocketAddr) -> StdStream {
        let s = StdStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Writes `req` and reads until the server closes.
    fn exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = connect(addr);
        s.write_all(req).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("reading the answer: {e}"));
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn serves_routes_and_answers_errors() {
        let srv = server(0);
        let r = exchange(
            srv.addr,
            b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nhello"), "{r}");
        let r = exchange(srv.addr, b"GET /nope HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.0 404 "), "{r}");
        let r = exchange(srv.addr, b"DELETE /x HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.0 405 "), "{r}");
        let r = exchange(srv.addr, b"GARBAGE\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        let r = exchange(srv.addr, b"HEAD /x HTTP/1.0\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.0 200 ") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
        let r = exchange(
            srv.addr,
            b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody",
        );
        assert!(r.ends_with("\r\n\r\nbody"), "{r}");
    }

    /// Keep-alive: several requests on one connection, each answered.
    #[test]
    fn keeps_a_connection_alive_between_requests() {
        let srv = server(0);
        let mut s = connect(srv.addr);
        for i in 0..5 {
            s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).unwrap();
            let r = String::from_utf8_lossy(&buf[..n]);
            assert!(
                r.starts_with("HTTP/1.1 200 ") && r.ends_with("hello"),
                "{i}: {r}"
            );
        }
    }

    /// A head over MAX_HEAD is answered 431, and the answer arrives whole
    /// although the client is still sending (no reset).
    #[test]
    fn an_oversized_head_is_answered_431() {
        let srv = server(0);
        for i in 0..20 {
            let mut req = b"GET /x HTTP/1.1\r\nHost: a\r\n".to_vec();
            req.extend(format!("X-Pad: {}\r\n", "p".repeat(3 * MAX_HEAD)).as_bytes());
            req.extend(b"\r\n");
            let r = exchange(srv.addr, &req);
            assert!(r.starts_with("HTTP/1.1 431 "), "{i}: {r}");
        }
        // Exactly at the bound still works.
        let pad = MAX_HEAD - 200;
        let req = format!(
            "GET /x HTTP/1.1\r\nHost: a\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
            "p".repeat(pad)
        );
        assert!(exchange(srv.addr, req.as_bytes()).starts_with("HTTP/1.1 200 "));
    }

    #[test]
    fn an_oversized_body_is_answered_413() {
        let srv = server(0);
        // Declared up front: refused before it is read.
        let r = exchange(
            srv.addr,
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .as_bytes(),
        );
        assert!(
            r.starts_with("HTTP/1.1 413 ") && r.contains("over 65536 bytes"),
            "{r}"
        );
        // Chunked, found out while reading.
        let mut req = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..(MAX_BODY / 4096 + 2) {
            req.extend(format!("1000\r\n{}\r\n", "b".repeat(4096)).as_bytes());
        }
        req.extend(b"0\r\n\r\n");
        let r = exchange(srv.addr, &req);
        assert!(r.starts_with("HTTP/1.1 413 "), "{r}");
    }

    /// A client that stops in the middle of its head, or of its body, or
    /// after a request on a keep-alive connection, is cut off after about
    /// 2 s, and others are served meanwhile.
    #[test]
    fn slow_clients_are_cut_off() {
        let srv = server(0);
        let partial: [&[u8]; 3] = [
            b"GET /x HTTP/1.1\r\nHost:",
            b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc",
            b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
        ];
        let slow: Vec<_> = partial
            .iter()
            .map(|p| {
                let mut s = connect(srv.addr);
                s.write_all(p).unwrap();
                (s, Instant::now())
            })
            .collect();
        let r = exchange(srv.addr, b"GET /x HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.0 200 "), "{r}");
        for (i, (mut s, t0)) in slow.into_iter().enumerate() {
            let mut out = Vec::new();
            s.read_to_end(&mut out)
                .unwrap_or_else(|e| panic!("slow client {i}: {e}"));
            let waited = t0.elapsed();
            assert!(
                waited >= Duration::from_millis(1500) && waited < Duration::from_secs(6),
                "slow client {i} cut off after {waited:?}"
            );
            let r = String::from_utf8_lossy(&out);
            match i {
                0 => assert!(r.is_empty() || r.contains(" 408 "), "{r}"),
                1 => assert!(r.starts_with("HTTP/1.1 408 "), "{r}"),
                _ => assert!(
                    r.starts_with("HTTP/1.1 200 ") && r.ends_with("hello"),
                    "{r}"
                ),
            }
        }
    }

    /// A client that asks for a large response and never reads it is cut
    /// off once the socket buffers are full and no write progresses.
    #[test]
    fn a_client_that_stops_reading_is_cut_off() {
        let srv = server(64 << 20);
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&srv.addr.into()).unwrap();
        let mut s: StdStream = sock.into();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let t0 = Instant::now();
        // Nothing is read until the server gives up; then what was
        // buffered arrives, followed by the end of the connection.
        std::thread::sleep(WRITE_STALL + Duration::from_secs(2));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("after {total} bytes: {e}"),
            }
        }
        assert!(
            total < 64 << 20,
            "the whole body arrived: the stall was not noticed"
        );
        assert!(t0.elapsed() < Duration::from_secs(20));
    }

    /// MAX_CONNS clients hold every slot; one more is answered 503 at once,
    /// and once the holders are cut off the server answers again.
    #[test]
    fn connections_are_capped() {
        let srv = server(0);
        let holders: Vec<StdStream> = (0..MAX_CONNS)
            .map(|_| {
                let mut s = connect(srv.addr);
                s.write_all(b"GET /x HTTP/1.1\r\nHost:").unwrap();
                s
            })
            .collect();
        // Let the server accept all of them.
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        let r = exchange(srv.addr, b"GET /x HTTP/1.0\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 503 ") && r.contains("too many connections"),
            "{r}"
        );
        assert!(t0.elapsed() < Duration::from_secs(1), "the 503 waited");
        // The busy answer's Content-Length is right.
        let body = r.split_once("\r\n\r\n").unwrap().1;
        assert!(
            r.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{r}"
        );
        drop(holders);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = exchange(srv.addr, b"GET /x HTTP/1.0\r\n\r\n");
            if r.starts_with("HTTP/1.0 200 ") {
                break;
            }
            assert!(Instant::now() < deadline, "still refused: {r}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A request followed by more bytes (a pipelined request the server
    /// does not answer, since the first one closes) still gets its whole
    /// response: the server never closes with those bytes unread.
    #[test]
    fn responses_are_not_reset_by_unread_request_bytes() {
        let srv = server(200_000);
        for i in 0..100 {
            let mut s = connect(srv.addr);
            s.set_nodelay(true).unwrap();
            s.write_all(b"GET /big HTTP/1.1\r\n").unwrap();
            s.write_all(b"Host: a\r\nConnection: close\r\n\r\n")
                .unwrap();
            std::thread::sleep(Duration::from_millis(2));
            s.write_all(b"GET /x HTTP/1.1\r\n\r\n").unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out)
                .unwrap_or_else(|e| panic!("request {i}: reading: {e}"));
            let out = String::from_utf8_lossy(&out);
            assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "request {i}");
            assert!(out.ends_with(&"x".repeat(1000)), "request {i}: cut short");
            assert_eq!(out.matches("HTTP/1.1").count(), 1, "request {i}");
        }
    }

    /// Dropping the server lets a request in flight finish.
    #[test]
    fn stopping_lets_requests_in_flight_finish() {
        let app = Router::new().route(
            "/slow",
            get(|| async {
                sleep(Duration::from_millis(500)).await;
                "done"
            }),
        );
        let srv = Server::start("127.0.0.1:0".parse().unwrap(), app).unwrap();
        let addr = srv.addr;
        let client =
            std::thread::spawn(move || exchange(addr, b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"));
        std::thread::sleep(Duration::from_millis(100));
        drop(srv);
        let r = client.join().unwrap();
        assert!(r.starts_with("HTTP/1.1 200 ") && r.ends_with("done"), "{r}");
        assert!(StdStream::connect(addr).is_err(), "still listening");
    }
}
