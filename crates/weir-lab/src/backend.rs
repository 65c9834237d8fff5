//! Lab backends: a small HTTP/1.1 server (keep-alive) and a UDP responder
//! that both answer with the backend's name, so a client can tell which
//! backend served each request. They run as threads inside a namespace.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::netns::enter;

/// TCP ports every backend serves HTTP on (nat DIP port, and the VIP port
/// for dsr, where the destination port is not rewritten).
pub const HTTP_PORTS: [u16; 2] = [8080, 80];
pub const UDP_PORT: u16 = 5353;

/// A running backend; stops on drop.
pub struct Backend {
    pub name: String,
    pub requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Backend {
    /// Starts the servers inside namespace `ns`.
    pub fn start(ns: &str, name: &str) -> Result<Backend> {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let mut threads = Vec::new();
        let ctx = || (name.to_string(), stop.clone(), requests.clone());
        for port in HTTP_PORTS {
            let (name, stop, requests) = ctx();
            threads.push(spawn_in(
                ns,
                tx.clone(),
                move || {
                    let l = TcpListener::bind(("0.0.0.0", port))
                        .with_context(|| format!("binding :{port}"))?;
                    l.set_nonblocking(true)?;
                    Ok(l)
                },
                move |l| serve_http(l, &name, &stop, &requests),
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
        Ok(Backend {
            name: name.to_string(),
            requests,
            stop,
            threads,
        })
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

fn serve_http(l: TcpListener, name: &str, stop: &Arc<AtomicBool>, requests: &Arc<AtomicU64>) {
    while !stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, _)) => {
                let (name, stop, requests) = (name.to_string(), stop.clone(), requests.clone());
                std::thread::spawn(move || {
                    let _ = handle_conn(s, &name, &stop, &requests);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn handle_conn(s: TcpStream, name: &str, stop: &AtomicBool, requests: &AtomicU64) -> Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut in_request = false;
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
                requests.fetch_add(1, Ordering::Relaxed);
                let body = format!("{name}\n");
                write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Backend: {name}\r\n\r\n{body}",
                    body.len()
                )?;
                in_request = false;
            }
        } else {
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
