//! Connections through the lab's VIPs: new ones, and the long-lived ones
//! that must keep their backend (per-connection consistency).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use weir_lab::client::{http_once, ConnRecord};

/// The backends that `n` new connections from namespace `ns` to `vip`
/// reached; every one must be answered.
pub fn new_connections(ns: &str, vip: SocketAddr, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|i| http_once(ns, vip).unwrap_or_else(|e| panic!("new connection {i}: {e}")))
        .collect()
}

/// Joins long-lived connections (`weir_lab::client::spawn_http`) and
/// checks that each got all its `requests` replies from one backend.
pub fn join_unbroken(live: Vec<JoinHandle<ConnRecord>>, requests: usize) -> Vec<ConnRecord> {
    let records: Vec<ConnRecord> = live.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == requests,
            "a connection moved or broke ({requests} replies from one backend expected): {r:?}"
        );
    }
    records
}

/// Some of the long-lived connections were on `backend`: the test kept
/// what it says it kept.
pub fn assert_some_on(records: &[ConnRecord], backend: &str) {
    assert!(
        records.iter().any(|r| r.backend() == Some(backend)),
        "no long-lived connection was on {backend} to keep"
    );
}
