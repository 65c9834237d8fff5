//! One run of the scale experiment: a cluster of three nodes under steady
//! traffic with load-aware tables, through four events, each followed by a
//! phase of traffic:
//!
//! 1. **node removal**: a follower dies (SIGKILL); the router drops it;
//! 2. **node back**: it starts again from nothing (a replaced machine),
//!    learns its peers' connections, and the router adds it;
//! 3. **fourth node**: a new node joins the same way;
//! 4. **leader loss**: the leader dies; another node must take the lead.
//!
//! The router converges at once (a real one adds its failure detection,
//! during which the dead node's packets are lost and TCP retransmits).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use weir_cluster::view::ClusterView;
use weir_control::status::read_cluster;
use weir_progress::Progress;

use crate::backend::{Backend, BackendOptions};
use crate::daemon::Daemon;
use crate::scale::topology::{ClusterLab, VIP, VIP_PORT};
use crate::scale::traffic::{Outcome, Traffic, TrafficOptions};

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub sync: bool,
    pub backends: usize,
    /// Traffic before the first event, and after each.
    pub phase: Duration,
    pub traffic: TrafficOptions,
    /// How often each backend's service delay changes (so its load, its
    /// available capacity and the tables change).
    pub load_every: Duration,
}

/// One event and what followed it.
#[derive(Debug, Clone, Serialize)]
pub struct EventResult {
    pub name: &'static str,
    /// When it took effect (the route changed), s since the traffic started.
    pub at_s: f64,
    /// Broken connections in the phase after it, by age at the event
    /// against the sync window.
    pub broken_older: usize,
    pub broken_younger: usize,
    /// Connections opened after the event that broke in its phase.
    pub broken_after: usize,
    pub new_conn_failures: usize,
    pub new_conns: usize,
    /// From the event to its phase's last failure (new or broken); 0: none.
    pub recover_s: f64,
    /// Node addition: from its start to ready (tables, peers' connections).
    pub join_s: Option<f64>,
    /// Node addition: connections it learnt from a peer.
    pub learnt: Option<u64>,
    /// Leader loss: from the kill until another node leads.
    pub leader_moved_s: Option<f64>,
}

/// A node's report at the end of a run.
#[derive(Debug, Clone, Serialize)]
pub struct NodeEnd {
    pub name: String,
    pub apply_delay_max_ms: Option<f64>,
    pub lag_p50_us: Option<u64>,
    pub lag_p99_us: Option<u64>,
    pub lag_max_us: Option<u64>,
    pub installed: u64,
    pub dropped: u64,
}

/// A run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub sync: bool,
    pub events: Vec<EventResult>,
    /// The sync window: the largest p99 lag of any node (ms), and the
    /// largest lag seen.
    pub sync_window_ms: Option<f64>,
    pub sync_lag_max_ms: Option<f64>,
    /// The largest median lag of any node (ms).
    pub sync_lag_p50_ms: Option<f64>,
    /// The longest any node took to apply a version after its publication.
    pub apply_delay_max_ms: Option<f64>,
    /// Table versions the leaders published per second.
    pub versions_per_s: f64,
    pub long_lived: usize,
    pub new_conns: usize,
    pub nodes: Vec<NodeEnd>,
}

struct Node {
    daemon: Daemon,
    up: bool,
}

/// An event as it happened, before its phase is judged.
struct Happened {
    name: &'static str,
    at_s: f64,
    join_s: Option<f64>,
    learnt: Option<u64>,
    leader_moved_s: Option<f64>,
}

impl Happened {
    fn new(name: &'static str, at_s: f64) -> Happened {
        Happened {
            name,
            at_s,
            join_s: None,
            learnt: None,
            leader_moved_s: None,
        }
    }
}

fn view(d: &Daemon) -> Option<ClusterView> {
    read_cluster(&d.run_dir())
}

fn leader_of(nodes: &[Node]) -> Option<usize> {
    nodes
        .iter()
        .position(|n| n.up && view(&n.daemon).is_some_and(|v| v.is_leader))
}

fn version_of(d: &Daemon) -> Option<u32> {
    view(d)?.this.tables.get("web")?.version
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Changes every backend's service delay now and then, so the controller's
/// estimates, weights and tables keep changing; stops on drop.
struct LoadChanger {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoadChanger {
    fn start(delays: Vec<Arc<std::sync::atomic::AtomicU64>>, every: Duration, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            while !s.load(Ordering::Relaxed) {
                for d in &delays {
                    d.store(rng.gen_range(0..5000), Ordering::Relaxed);
                }
                std::thread::sleep(every);
            }
        });
        LoadChanger {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for LoadChanger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the four events on a fresh lab.
pub fn run(exe: &Path, opts: &RunOptions, progress: &Progress) -> Result<RunResult> {
    let lab = ClusterLab::build(4, opts.backends)?;
    let backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(j, ns)| {
            let o = BackendOptions {
                // A short window: the estimates follow the delays quickly.
                agent_window: Some(Duration::from_millis(200)),
                ..Default::default()
            };
            Backend::start_with(ns, &format!("backend-{}", j + 1), &o)
        })
        .collect::<Result<_>>()?;
    let _load = LoadChanger::start(
        backends.iter().map(|b| b.delay_us.clone()).collect(),
        opts.load_every,
        opts.traffic.seed,
    );
    let mut nodes: Vec<Node> = Vec::new();
    for i in 1..=4 {
        let d = Daemon::new(exe, &lab.nodes[i - 1])?;
        d.write_config(&lab.node_config(i, opts.sync))?;
        nodes.push(Node {
            daemon: d,
            up: false,
        });
    }
    for n in nodes.iter_mut().take(3) {
        n.daemon.start()?;
        n.up = true;
    }
    lab.route_via(&[1, 2, 3])?;
    let agreed = wait_for(Duration::from_secs(15), || {
        let v: Vec<Option<u32>> = nodes
            .iter()
            .take(3)
            .map(|n| version_of(&n.daemon))
            .collect();
        v[0].is_some() && v.iter().all(|x| *x == v[0]) && leader_of(&nodes).is_some()
    });
    if !agreed {
        bail!("the three nodes did not agree on a leader and a table version in 15 s");
    }
    let first_version = nodes
        .iter()
        .find_map(|n| version_of(&n.daemon))
        .unwrap_or(0);
    let vip = SocketAddr::from((VIP, VIP_PORT));
    let traffic = Traffic::start(&lab.client, vip, opts.traffic);
    let started = Instant::now();
    let phase = |what: &str| {
        progress.set_message(format!(
            "sync {}: {what}",
            if opts.sync { "on" } else { "off" }
        ));
        std::thread::sleep(opts.phase);
        progress.inc(1);
    };
    phase("warm-up");
    let up = |nodes: &[Node]| -> Vec<usize> {
        (0..nodes.len())
            .filter(|&i| nodes[i].up)
            .map(|i| i + 1)
            .collect()
    };
    let mut events: Vec<Happened> = Vec::new();

    // 1. A follower dies.
    let leader = leader_of(&nodes).context("no leader")?;
    let victim = (0..3).rev().find(|&i| i != leader).expect("two followers");
    nodes[victim].daemon.kill()?;
    nodes[victim].up = false;
    lab.route_via(&up(&nodes))?;
    lab.wipe(victim + 1, &nodes[victim].daemon.pin_dir)?;
    events.push(Happened::new("node removal", traffic.now_s()));
    phase("node removed");

    // 2. It comes back from nothing; 3. a fourth node joins.
    for (name, i) in [("node back", victim), ("fourth node", 3)] {
        let t0 = Instant::now();
        let since = unix_ms();
        nodes[i].daemon.start()?;
        nodes[i].up = true;
        let join_s = t0.elapsed().as_secs_f64();
        // The view this start wrote (the node rewrites it every 250 ms).
        let d = &nodes[i].daemon;
        wait_for(Duration::from_secs(2), || {
            view(d).is_some_and(|v| v.at_unix_ms >= since && v.this.ready)
        });
        let learnt = view(d)
            .filter(|v| v.at_unix_ms >= since)
            .and_then(|v| v.join.map(|j| j.received));
        lab.route_via(&up(&nodes))?;
        events.push(Happened {
            join_s: Some(join_s),
            learnt,
            ..Happened::new(name, traffic.now_s())
        });
        phase(name);
    }

    // 4. The leader dies.
    let leader = leader_of(&nodes).context("no leader before the leader loss")?;
    let t0 = Instant::now();
    nodes[leader].daemon.kill()?;
    nodes[leader].up = false;
    lab.route_via(&up(&nodes))?;
    lab.wipe(leader + 1, &nodes[leader].daemon.pin_dir)?;
    let at = traffic.now_s();
    let moved = wait_for(Duration::from_secs(10), || leader_of(&nodes).is_some())
        .then(|| t0.elapsed().as_secs_f64());
    events.push(Happened {
        leader_moved_s: moved,
        ..Happened::new("leader loss", at)
    });
    phase("leader lost");

    let elapsed = started.elapsed().as_secs_f64();
    let last_version = nodes
        .iter()
        .filter(|n| n.up)
        .filter_map(|n| version_of(&n.daemon))
        .max()
        .unwrap_or(first_version);
    let ends: Vec<NodeEnd> = nodes
        .iter()
        .filter_map(|n| {
            let v = view(&n.daemon)?;
            let s = v.this.sync.clone().unwrap_or_default();
            Some(NodeEnd {
                name: v.node.clone(),
                apply_delay_max_ms: v.this.apply_delay_max_ms,
                lag_p50_us: s.lag_p50_us,
                lag_p99_us: s.lag_p99_us,
                lag_max_us: s.lag_max_us,
                installed: s.installed,
                dropped: s.dropped(),
            })
        })
        .collect();
    let outcome = traffic.stop();
    let window_ms = ends
        .iter()
        .filter_map(|n| n.lag_p99_us)
        .max()
        .map(|us| us as f64 / 1000.0);
    Ok(RunResult {
        sync: opts.sync,
        events: judge(&events, &outcome, window_ms.unwrap_or(0.0), elapsed),
        sync_window_ms: window_ms,
        sync_lag_p50_ms: ends
            .iter()
            .filter_map(|n| n.lag_p50_us)
            .max()
            .map(|us| us as f64 / 1000.0),
        sync_lag_max_ms: ends
            .iter()
            .filter_map(|n| n.lag_max_us)
            .max()
            .map(|us| us as f64 / 1000.0),
        apply_delay_max_ms: ends
            .iter()
            .filter_map(|n| n.apply_delay_max_ms)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        versions_per_s: f64::from(last_version.wrapping_sub(first_version)) / elapsed,
        long_lived: outcome.long_lived.len(),
        new_conns: outcome.probes.len(),
        nodes: ends,
    })
}

/// Blames each failure on the event whose phase it fell in.
fn judge(events: &[Happened], out: &Outcome, window_ms: f64, end_s: f64) -> Vec<EventResult> {
    events
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let at_s = h.at_s;
            let until = events.get(k + 1).map_or(end_s + 60.0, |e| e.at_s);
            let within = |t: f64| t >= at_s && t < until;
            let broken: Vec<_> = out
                .long_lived
                .iter()
                .filter(|c| c.violated && within(c.closed_s) && c.opened_s < at_s)
                .collect();
            let after = out
                .long_lived
                .iter()
                .filter(|c| c.violated && within(c.closed_s) && c.opened_s >= at_s)
                .count();
            let older = broken
                .iter()
                .filter(|c| (at_s - c.opened_s) * 1000.0 > window_ms)
                .count();
            let failed: Vec<f64> = out
                .probes
                .iter()
                .filter(|p| within(p.at_s) && !p.ok)
                .map(|p| p.at_s)
                .collect();
            let last = broken
                .iter()
                .map(|c| c.closed_s)
                .chain(failed.iter().copied())
                .fold(at_s, f64::max);
            EventResult {
                name: h.name,
                at_s,
                broken_older: older,
                broken_younger: broken.len() - older,
                broken_after: after,
                new_conn_failures: failed.len(),
                new_conns: out.probes.iter().filter(|p| within(p.at_s)).count(),
                recover_s: last - at_s,
                join_s: h.join_s,
                learnt: h.learnt,
                leader_moved_s: h.leader_moved_s,
            }
        })
        .collect()
}
