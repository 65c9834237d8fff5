//! A fake `weir agent`: an HTTP server on a backend's AGENT_PORT whose
//! answers the test chooses.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use weir_lab::backend::AGENT_PORT;
use weir_lab::netns::enter;

/// A fake agent inside a namespace on AGENT_PORT: `reply(n)` is the n-th
/// answer (raw bytes; `None` = sleep past the controller's timeout).
/// Stopped when dropped.
pub struct FakeAgent {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl FakeAgent {
    pub fn start(ns: &str, reply: impl Fn(u64) -> Option<Vec<u8>> + Send + 'static) -> FakeAgent {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let (st, sv, ns) = (stop.clone(), served.clone(), ns.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter(&ns).unwrap();
            let l = TcpListener::bind(("0.0.0.0", AGENT_PORT)).unwrap();
            l.set_nonblocking(true).unwrap();
            tx.send(()).unwrap();
            while !st.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let n = sv.fetch_add(1, Ordering::Relaxed);
                match reply(n) {
                    Some(bytes) => {
                        let _ = s.write_all(&bytes);
                    }
                    None => std::thread::sleep(Duration::from_millis(250)),
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        FakeAgent {
            stop,
            served,
            thread: Some(thread),
        }
    }

    /// How many requests it answered (or let time out).
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An HTTP 200 answer with a JSON `body`.
pub fn http_ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
