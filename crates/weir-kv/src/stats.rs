//! Counters of the TCP proxy: one block per worker (relaxed atomics, never
//! contended), summed when read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

/// One worker's counters.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub client_connections: AtomicU64,
    pub client_connections_total: AtomicU64,
    pub requests: AtomicU64,
    pub get_keys: AtomicU64,
    pub get_hits: AtomicU64,
    pub writes: AtomicU64,
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub invalidations: AtomicU64,
    pub invalidation_failures: AtomicU64,
    pub binary_refused: AtomicU64,
    /// Reads and writes of client and server sockets (system calls).
    pub socket_reads: AtomicU64,
    pub socket_writes: AtomicU64,
    /// Reads that found nothing to read.
    pub idle_reads: AtomicU64,
    /// Values moved from a server socket to a client socket through a pipe
    /// (never copied to user space), and their bytes.
    pub spliced_values: AtomicU64,
    pub spliced_bytes: AtomicU64,
    /// requests (fragments) sent to each server
    pub server_requests: Vec<AtomicU64>,
}

impl WorkerStats {
    pub fn new(nservers: usize) -> WorkerStats {
        WorkerStats {
            server_requests: (0..nservers).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        }
    }
}

#[inline]
pub fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A summed snapshot.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Snapshot {
    pub client_connections: u64,
    pub client_connections_total: u64,
    pub requests: u64,
    pub get_keys: u64,
    pub get_hits: u64,
    /// `get_keys - get_hits`, derived here once so that the JSON, the human
    /// status and the metrics all carry the same number.
    pub get_misses: u64,
    pub writes: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    pub timeouts: u64,
    pub invalidations: u64,
    pub invalidation_failures: u64,
    pub binary_refused: u64,
    /// Reads and writes of client and server sockets (system calls), and
    /// the reads among them that found nothing: the proxy's I/O per request.
    #[serde(default)]
    pub socket_reads: u64,
    #[serde(default)]
    pub socket_writes: u64,
    #[serde(default)]
    pub idle_reads: u64,
    /// Values spliced from a server to a client in the kernel, and their
    /// bytes.
    #[serde(default)]
    pub spliced_values: u64,
    #[serde(default)]
    pub spliced_bytes: u64,
    pub server_requests: Vec<u64>,
}

pub fn snapshot(workers: &[Arc<WorkerStats>]) -> Snapshot {
    let mut s = Snapshot::default();
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for w in workers {
        s.client_connections += ld(&w.client_connections);
        s.client_connections_total += ld(&w.client_connections_total);
        s.requests += ld(&w.requests);
        s.get_keys += ld(&w.get_keys);
        s.get_hits += ld(&w.get_hits);
        s.writes += ld(&w.writes);
        s.client_errors += ld(&w.client_errors);
        s.server_errors += ld(&w.server_errors);
        s.timeouts += ld(&w.timeouts);
        s.invalidations += ld(&w.invalidations);
        s.invalidation_failures += ld(&w.invalidation_failures);
        s.binary_refused += ld(&w.binary_refused);
        s.socket_reads += ld(&w.socket_reads);
        s.socket_writes += ld(&w.socket_writes);
        s.idle_reads += ld(&w.idle_reads);
        s.spliced_values += ld(&w.spliced_values);
        s.spliced_bytes += ld(&w.spliced_bytes);
        if s.server_requests.len() < w.server_requests.len() {
            s.server_requests.resize(w.server_requests.len(), 0);
        }
        for (i, c) in w.server_requests.iter().enumerate() {
            s.server_requests[i] += ld(c);
        }
    }
    // A hit is counted when its reply arrives, after the key was counted.
    s.get_misses = s.get_keys.saturating_sub(s.get_hits);
    s
}
