//! The file servers of `weir-lab spotlight`: HTTP/1.1, one file per
//! connection (`GET /file/<bytes>`), with a capacity the server enforces by
//! itself.
//!
//! Capacity model: a server has `slots` workers. A request waits (first come,
//! first served) for a free worker, which then sends the file at
//! `slot_rate` bytes per second, so it holds the worker for
//! `size / slot_rate` seconds. The server's capacity is
//! `slots * slot_rate` bytes per second, whatever the network could do; a
//! "fast" server differs from a "slow" one only in `slot_rate`. This is an
//! M/G/k queue per server, which is what Spotlight's I/O-bound file servers
//! are to first order.
//!
//! A packet of a connection the server does not know is reset by its kernel,
//! which is the PCC check the client relies on.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::netns::enter;

/// Port the file servers listen on (nat DIP port and VIP port).
pub const FILE_PORT: u16 = 8000;
/// Largest file a server sends.
pub const MAX_FILE: u64 = 1 << 30;

/// What one server is.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// 1-based backend index, sent back in `X-Backend`.
    pub index: usize,
    pub slots: usize,
    /// Bytes per second one worker sends.
    pub slot_rate: f64,
}

impl ServerSpec {
    /// Capacity in bytes per second.
    pub fn capacity(&self) -> f64 {
        self.slots as f64 * self.slot_rate
    }
}

/// Called for every chunk a worker sends, with the chunk's size and the
/// time the worker spent on it (the in-process agent's meter records
/// through it). Work is reported as it is done, so a long transfer shows up
/// in the load at once rather than when it ends.
pub type Recorder = Arc<dyn Fn(&ServerSpec, u64, Duration) + Send + Sync>;

/// Counters of one server.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub accepted: AtomicU64,
    pub served: AtomicU64,
    pub bytes: AtomicU64,
    /// Connections that ended with an error on the server side.
    pub failed: AtomicU64,
    /// Requests in the server now (waiting or in service).
    pub open: AtomicU64,
}

/// FCFS worker slots. A released worker is handed to the first waiter
/// directly, waking only that one thread: with thousands of queued requests
/// (an overloaded server), waking them all on every release would burn the
/// CPU the experiment runs on.
struct Slots {
    state: Mutex<SlotState>,
}

struct SlotState {
    free: usize,
    waiters: VecDeque<Arc<Waiter>>,
}

#[derive(Default)]
struct Waiter {
    granted: Mutex<bool>,
    cv: Condvar,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            state: Mutex::new(SlotState {
                free: n,
                waiters: VecDeque::new(),
            }),
        }
    }

    /// Waits in line for a worker; false if `stop` was raised first.
    fn acquire(&self, stop: &AtomicBool) -> bool {
        let me = {
            let mut st = self.state.lock().unwrap();
            if st.free > 0 && st.waiters.is_empty() {
                st.free -= 1;
                return true;
            }
            let me = Arc::new(Waiter::default());
            st.waiters.push_back(me.clone());
            me
        };
        let mut granted = me.granted.lock().unwrap();
        loop {
            if *granted {
                return true;
            }
            if stop.load(Ordering::SeqCst) {
                drop(granted);
                let mut st = self.state.lock().unwrap();
                st.waiters.retain(|w| !Arc::ptr_eq(w, &me));
                drop(st);
                // Granted between the check and the removal: pass it on.
                if *me.granted.lock().unwrap() {
                    self.release();
                }
                return false;
            }
            // The timeout only bounds how late a stop is noticed.
            granted = me
                .cv
                .wait_timeout(granted, Duration::from_millis(500))
                .unwrap()
                .0;
        }
    }

    fn release(&self) {
        let mut st = self.state.lock().unwrap();
        match st.waiters.pop_front() {
            Some(w) => {
                drop(st);
                *w.granted.lock().unwrap() = true;
                w.cv.notify_one();
            }
            None => st.free += 1,
        }
    }
}

/// A running file server; stops on drop.
pub struct FileServer {
    pub spec: ServerSpec,
    pub stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    /// Starts the server inside namespace `ns`, listening on
    /// 0.0.0.0:[`FILE_PORT`].
    pub fn start(ns: &str, spec: ServerSpec, recorder: Option<Recorder>) -> Result<FileServer> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let (ns2, spec2, stop2, stats2) =
            (ns.to_string(), spec.clone(), stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name(format!("spot-srv{}", spec.index))
            .spawn(move || {
                let l = enter(&ns2).and_then(|_| {
                    let l = TcpListener::bind(("0.0.0.0", FILE_PORT))
                        .with_context(|| format!("binding :{FILE_PORT}"))?;
                    l.set_nonblocking(true)?;
                    Ok(l)
                });
                match l {
                    Ok(l) => {
                        let _ = tx.send(Ok(()));
                        accept_loop(l, spec2, stop2, stats2, recorder);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })?;
        rx.recv()
            .context("file server thread died")?
            .with_context(|| format!("starting file server {} in {ns}", spec.index))?;
        Ok(FileServer {
            spec,
            stats,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    l: TcpListener,
    spec: ServerSpec,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    recorder: Option<Recorder>,
) {
    let slots = Arc::new(Slots::new(spec.slots.max(1)));
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        if !weir_sys::socket::wait_readable(&l, Duration::from_millis(100)).unwrap_or(false) {
            conns.retain(|h| !h.is_finished());
            continue;
        }
        // Accept everything queued.
        while let Ok((s, _)) = l.accept() {
            stats.accepted.fetch_add(1, Ordering::Relaxed);
            stats.open.fetch_add(1, Ordering::Relaxed);
            let (spec, stop, st, slots, rec) = (
                spec.clone(),
                stop.clone(),
                stats.clone(),
                slots.clone(),
                recorder.clone(),
            );
            let h = std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    if serve(s, &spec, &stop, &st, &slots, rec.as_ref()).is_err() {
                        st.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    st.open.fetch_sub(1, Ordering::Relaxed);
                });
            match h {
                Ok(h) => conns.push(h),
                Err(_) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    stats.open.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        if conns.len() > 256 {
            conns.retain(|h| !h.is_finished());
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// True when the client closed or reset the connection (it gave up while
/// the request waited for a worker).
fn peer_gone(s: &TcpStream) -> bool {
    weir_sys::socket::peer_gone(s)
}

/// Reads the request head (at most 4 KiB, 5 s) and returns the file size.
fn read_request(s: &mut TcpStream, stop: &AtomicBool) -> Result<u64> {
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > 4096 || Instant::now() > deadline || stop.load(Ordering::SeqCst) {
            anyhow::bail!("no complete request");
        }
        match s.read(&mut chunk) {
            Ok(0) => anyhow::bail!("closed before the request ended"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let line = head.lines().next().unwrap_or("");
    parse_request_line(line).with_context(|| format!("bad request line {line:?}"))
}

/// `GET /file/<bytes> HTTP/1.x` -> bytes.
pub fn parse_request_line(line: &str) -> Option<u64> {
    let mut it = line.split(' ');
    if it.next()? != "GET" {
        return None;
    }
    let size: u64 = it.next()?.strip_prefix("/file/")?.parse().ok()?;
    it.next()?.starts_with("HTTP/1.").then_some(())?;
    (size <= MAX_FILE).then_some(size)
}

fn serve(
    mut s: TcpStream,
    spec: &ServerSpec,
    stop: &AtomicBool,
    stats: &ServerStats,
    slots: &Slots,
    recorder: Option<&Recorder>,
) -> Result<()> {
    s.set_nonblocking(false)?;
    let _ = s.set_nodelay(true);
    let size = match read_request(&mut s, stop) {
        Ok(n) => n,
        Err(e) => {
            let _ = s.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return Err(e);
        }
    };
    if !slots.acquire(stop) {
        anyhow::bail!("stopped while waiting for a worker");
    }
    if peer_gone(&s) {
        slots.release();
        anyhow::bail!("the client left while the request waited");
    }
    let r = send_file(&mut s, spec, size, stop, recorder);
    slots.release();
    r?;
    stats.served.fetch_add(1, Ordering::Relaxed);
    stats.bytes.fetch_add(size, Ordering::Relaxed);
    // Let the client read to the end before the socket goes.
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Sends the header and `size` bytes paced at the worker's rate: the
/// worker spends `chunk / slot_rate` on every chunk, then writes it. Time
/// lost to a write that blocks (a slow reader, a starved CPU) is not made up
/// for with a burst later: that would report chunks that took no time, and a
/// server that looks infinitely fast to the controller.
fn send_file(
    s: &mut TcpStream,
    spec: &ServerSpec,
    size: u64,
    stop: &AtomicBool,
    recorder: Option<&Recorder>,
) -> Result<()> {
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nX-Backend: {}\r\nConnection: close\r\n\r\n",
        spec.index
    );
    s.write_all(head.as_bytes())?;
    const CHUNK: u64 = 16 * 1024;
    let data = [b'w'; CHUNK as usize];
    let mut sent = 0u64;
    while sent < size {
        if stop.load(Ordering::SeqCst) {
            anyhow::bail!("stopped");
        }
        let n = CHUNK.min(size - sent);
        let began = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(n as f64 / spec.slot_rate));
        s.write_all(&data[..n as usize])?;
        sent += n;
        if let Some(rec) = recorder {
            rec(spec, n, began.elapsed());
        }
    }
    Ok(())
}

/// The address a client uses to reach server `i` directly (bypassing the
/// load balancer), e.g. for checks.
pub fn direct_addr(i: usize) -> SocketAddr {
    SocketAddr::from((crate::topology::backend_addr(i), FILE_PORT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(parse_request_line("GET /file/123 HTTP/1.1"), Some(123));
        assert_eq!(parse_request_line("GET /file/0 HTTP/1.0"), Some(0));
        assert_eq!(parse_request_line("POST /file/1 HTTP/1.1"), None);
        assert_eq!(parse_request_line("GET /file/x HTTP/1.1"), None);
        assert_eq!(parse_request_line("GET /other/1 HTTP/1.1"), None);
        assert_eq!(parse_request_line("GET /file/1"), None);
        assert_eq!(
            parse_request_line(&format!("GET /file/{} HTTP/1.1", MAX_FILE + 1)),
            None
        );
    }

    #[test]
    fn slots_are_first_come_first_served() {
        let slots = Arc::new(Slots::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        assert!(slots.acquire(&stop));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut hs = Vec::new();
        for i in 0..4 {
            let (slots, stop, order) = (slots.clone(), stop.clone(), order.clone());
            hs.push(std::thread::spawn(move || {
                assert!(slots.acquire(&stop));
                order.lock().unwrap().push(i);
                slots.release();
            }));
            // Queue them in a known order.
            std::thread::sleep(Duration::from_millis(30));
        }
        slots.release();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        // A waiter gives up when told to stop.
        assert!(slots.acquire(&stop));
        stop.store(true, Ordering::SeqCst);
        assert!(!slots.acquire(&stop));
    }
}
