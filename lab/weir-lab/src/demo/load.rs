//! The demo's client load: a fixed number of threads that each open
//! keep-alive connections of a few requests, one after another, for a fixed
//! time, and record when every connection started, which backend answered
//! and how long each response took.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::timed_http;
use crate::netns::enter;

/// One client connection of a run.
#[derive(Debug, Clone)]
pub struct Conn {
    /// When it was opened, seconds after the run's start.
    pub start_s: f64,
    /// Backend and response time of each answered request, in order.
    pub answered: Vec<(String, Duration)>,
    /// Why it ended before its last request, if it did.
    pub error: Option<String>,
}

impl Conn {
    /// The backend that answered its first request.
    pub fn backend(&self) -> Option<&str> {
        self.answered.first().map(|(b, _)| b.as_str())
    }

    /// True when two backends answered on this one connection.
    pub fn moved(&self) -> bool {
        self.answered
            .iter()
            .any(|(b, _)| Some(b.as_str()) != self.backend())
    }
}

/// How the load runs.
#[derive(Debug, Clone, Copy)]
pub struct LoadShape {
    pub threads: usize,
    /// Requests per connection.
    pub per_conn: usize,
    /// Time between the starts of a thread's requests.
    pub pause: Duration,
    /// How long the threads open connections.
    pub duration: Duration,
}

/// Starts the load from namespace `ns` towards `vip`; times are taken
/// against `t0`. Each thread stops opening connections after
/// `shape.duration` and ends within one connect and one response timeout
/// after that. Join the handles for the connections.
pub fn start(
    ns: &str,
    vip: SocketAddr,
    shape: LoadShape,
    t0: Instant,
) -> Vec<JoinHandle<Vec<Conn>>> {
    (0..shape.threads)
        .map(|_| {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                let mut conns = Vec::new();
                let deadline = t0 + shape.duration;
                if let Err(e) = enter(&ns) {
                    conns.push(Conn {
                        start_s: 0.0,
                        answered: Vec::new(),
                        error: Some(format!("{e:#}")),
                    });
                    return conns;
                }
                while Instant::now() < deadline {
                    let start_s = t0.elapsed().as_secs_f64();
                    let (answered, error) = timed_http(vip, shape.per_conn, shape.pause, deadline);
                    if error.is_some() {
                        // A refused connect returns at once: do not spin.
                        std::thread::sleep(shape.pause);
                    }
                    conns.push(Conn {
                        start_s,
                        answered,
                        error,
                    });
                }
                conns
            })
        })
        .collect()
}
