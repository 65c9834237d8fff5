//! The router's forwarding route to the VIP, watched through a run: a
//! thread reads its next hops from the router's kernel table (what FRR's
//! zebra installed from BGP) every few milliseconds and records every
//! change, on the traffic's clock. Events are timed against this record:
//! when a node left the route or joined it, and whether an upgrade withdrew
//! anything.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::scale::topology::ClusterLab;

/// How often the route is read: the resolution of every time measured.
pub const POLL: Duration = Duration::from_millis(10);

/// One change of the route: from `at_s` on, these next hops.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub at_s: f64,
    pub hops: Vec<Ipv4Addr>,
}

/// The watching thread; stops on drop.
pub struct RouteWatch {
    changes: Arc<Mutex<Vec<Change>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RouteWatch {
    /// Watches `lab`'s router; times are seconds since `start`.
    pub fn start(lab: &ClusterLab, start: Instant) -> RouteWatch {
        let changes = Arc::new(Mutex::new(Vec::<Change>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let router = lab.router.clone();
        let (c, s) = (changes.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let at_s = start.elapsed().as_secs_f64();
                // A read that fails (a busy machine) is skipped, not taken
                // for an empty route.
                if let Ok(hops) = ClusterLab::forwarding_hops_of(&router) {
                    let mut log = c.lock().unwrap_or_else(|e| e.into_inner());
                    if log.last().map(|l| &l.hops) != Some(&hops) {
                        log.push(Change { at_s, hops });
                    }
                }
                std::thread::sleep(POLL);
            }
        });
        RouteWatch {
            changes,
            stop,
            thread: Some(thread),
        }
    }

    /// The route's changes so far.
    pub fn changes(&self) -> Vec<Change> {
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits up to `limit` until `node` is in the route (`present`) or out
    /// of it; then the seconds from `at_s` to the first read that showed it.
    pub fn wait(&self, node: Ipv4Addr, present: bool, at_s: f64, limit: Duration) -> Option<f64> {
        let until = Instant::now() + limit;
        loop {
            if let Some(s) = first_read(&self.changes(), node, present, at_s) {
                return Some(s);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Seconds from `at_s` to the first change at or after it that shows
/// `node` in the route (`present`) or out of it; 0 when it already was.
pub fn first_read(changes: &[Change], node: Ipv4Addr, present: bool, at_s: f64) -> Option<f64> {
    let holds = |c: &Change| c.hops.contains(&node) == present;
    let before = changes.iter().rev().find(|c| c.at_s < at_s);
    if before.is_some_and(holds) {
        return Some(0.0);
    }
    changes
        .iter()
        .find(|c| c.at_s >= at_s && holds(c))
        .map(|c| c.at_s - at_s)
}

/// Changes between `from_s` and `to_s` that took a next hop out of the
/// route.
pub fn withdrawals(changes: &[Change], from_s: f64, to_s: f64) -> usize {
    changes
        .windows(2)
        .filter(|w| w[1].at_s >= from_s && w[1].at_s <= to_s)
        .filter(|w| w[0].hops.iter().any(|h| !w[1].hops.contains(h)))
        .count()
}

impl Drop for RouteWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(at_s: f64, hops: &[u8]) -> Change {
        Change {
            at_s,
            hops: hops.iter().map(|&h| Ipv4Addr::new(10, 0, 0, h)).collect(),
        }
    }

    #[test]
    fn a_node_leaving_and_joining_is_timed_from_the_event() {
        let log = [
            change(1.0, &[1, 2, 3]),
            change(2.5, &[1, 3]),
            change(4.0, &[1, 2, 3]),
        ];
        let n2 = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(first_read(&log, n2, false, 2.0), Some(0.5));
        assert_eq!(first_read(&log, n2, true, 3.0), Some(1.0));
        // Already out when the event came.
        assert_eq!(first_read(&log, n2, false, 3.0), Some(0.0));
        assert_eq!(
            first_read(&log, Ipv4Addr::new(10, 0, 0, 9), true, 0.0),
            None
        );
    }

    #[test]
    fn only_changes_that_remove_a_hop_are_withdrawals() {
        let log = [
            change(1.0, &[1, 2]),
            change(2.0, &[1, 2, 3]),
            change(3.0, &[1, 3]),
            change(3.1, &[1, 2, 3]),
        ];
        assert_eq!(withdrawals(&log, 0.0, 10.0), 1);
        assert_eq!(withdrawals(&log, 3.05, 10.0), 0);
    }
}
