//! One run of the scale experiment: a cluster of nodes behind FRR, which
//! learns the VIP only from the nodes' BGP announcements (BFD 300 ms x 3,
//! ECMP), under steady traffic with load-aware tables, through ten events,
//! each followed by a phase of traffic:
//!
//! 1. **kill -9**: a follower's weir dies; its speaker withdraws the VIP
//!    (the machine is then replaced: data plane, pins and speaker gone);
//! 2. **node back**: it starts again from nothing and learns its peers'
//!    connections; 3. **node added**: a fourth node joins the same way;
//! 4. **link cut**: a follower's interface goes down; BFD takes it out
//!    (the machine is then replaced and stays out);
//! 5. **drain**: `weir node drain` on a follower; 6. **undrain**;
//! 7. **DIP failure**: every DIP fails its health checks on one node only;
//!    that node withdraws the VIP; 8. **DIP recovered**;
//! 9. **rolling upgrade**: every node in turn replaced by
//!    `weir serve --takeover`; 10. **leader kill -9**: another node leads.
//!
//! The lab never edits the router's routes: every time is measured from
//! the event to the first read of the router's kernel route ([`RouteWatch`],
//! every 10 ms) that shows the node out of it (or in it).

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
use crate::scale::routes::{withdrawals, RouteWatch};
use crate::scale::topology::{node_addr, ClusterLab, Speakers, HEALTH_PORT, VIP, VIP_PORT};
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
    /// The node it happened to (none: every node, the upgrade).
    pub node: Option<String>,
    /// When it happened, s since the traffic started.
    pub at_s: f64,
    /// From the event to the first read of the router's forwarding route
    /// without the node (it left) or with it (it joined).
    pub route_out_s: Option<f64>,
    pub route_in_s: Option<f64>,
    /// Rolling upgrade: changes of the router's route that took a next hop
    /// out, from its start to a second after its last takeover.
    pub withdrawals: Option<usize>,
    /// Broken connections in the phase after it, by age at the event
    /// against the sync window.
    pub broken_older: usize,
    pub broken_younger: usize,
    /// Connections opened after the event that broke in its phase.
    pub broken_after: usize,
    pub new_conn_failures: usize,
    pub new_conns: usize,
    /// New connections of its phase that failed after the router's route
    /// had changed (after the event itself when the route does not change).
    pub failed_after_converged: usize,
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
#[derive(Default)]
struct Happened {
    name: &'static str,
    node: Option<String>,
    at_s: f64,
    route_out_s: Option<f64>,
    route_in_s: Option<f64>,
    withdrawals: Option<usize>,
    join_s: Option<f64>,
    learnt: Option<u64>,
    leader_moved_s: Option<f64>,
}

impl Happened {
    fn new(name: &'static str, node: usize, at_s: f64) -> Happened {
        Happened {
            name,
            node: Some(format!("n{}", node + 1)),
            at_s,
            ..Happened::default()
        }
    }

    /// When the router's route had followed the event (s since the start).
    fn converged_s(&self) -> f64 {
        self.at_s
            + self
                .route_out_s
                .or(self.route_in_s)
                .unwrap_or(if self.withdrawals.is_some() {
                    0.0
                } else {
                    f64::INFINITY
                })
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

/// An up node that does not lead, other than `not`.
fn follower(nodes: &[Node], not: &[usize]) -> Result<usize> {
    let leader = leader_of(nodes).context("no leader")?;
    (0..nodes.len())
        .rev()
        .find(|&i| nodes[i].up && i != leader && !not.contains(&i))
        .context("no follower left for the event")
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

/// `weir node drain` or `undrain` of the daemon `d` in namespace `ns`.
fn node_command(exe: &Path, ns: &str, d: &Daemon, what: &str) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["node", what, "--run-dir"])
        .arg(d.run_dir())
        .output()
        .with_context(|| format!("running weir node {what}"))?;
    if !out.status.success() {
        bail!(
            "weir node {what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
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

/// How long the router may take to follow an event before the run gives
/// up on timing it (BGP's hold time, 9 s, is the slowest path).
const ROUTE_LIMIT: Duration = Duration::from_secs(12);

/// The events of a run (each followed by a phase of traffic).
pub const EVENTS: u64 = 10;

/// Runs the events on a fresh lab.
pub fn run(exe: &Path, opts: &RunOptions, progress: &Progress) -> Result<RunResult> {
    let lab = ClusterLab::build(4, opts.backends)?;
    let _router = lab.start_router()?;
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
    // Declared after the daemons: their speakers end first, on every path.
    let _speakers = Speakers(nodes.iter().map(|n| n.daemon.run_dir()).collect());
    for n in nodes.iter_mut().take(3) {
        n.daemon.start()?;
        n.up = true;
    }
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
    let announced = [1, 2, 3].map(node_addr);
    if !wait_for(Duration::from_secs(20), || {
        lab.forwarding_hops().is_ok_and(|h| h == announced)
    }) {
        bail!(
            "the router did not learn the three nodes by BGP in 20 s: its route is via {:?}\n{}",
            lab.forwarding_hops().unwrap_or_default(),
            _router.vtysh("show bgp summary").unwrap_or_default()
        );
    }
    let first_version = nodes
        .iter()
        .find_map(|n| version_of(&n.daemon))
        .unwrap_or(0);
    let vip = SocketAddr::from((VIP, VIP_PORT));
    let traffic = Traffic::start(&lab.client, vip, opts.traffic);
    let started = Instant::now();
    let routes = RouteWatch::start(&lab, started);
    let phase = |what: &str, since: f64| {
        progress.set_message(format!(
            "sync {}: {what}",
            if opts.sync { "on" } else { "off" }
        ));
        // The phase runs from the event, whatever the event's own steps took.
        let left = opts.phase.as_secs_f64() - (traffic.now_s() - since);
        std::thread::sleep(Duration::from_secs_f64(left.max(0.0)));
        progress.inc(1);
    };
    phase("warm-up", traffic.now_s());
    let mut events: Vec<Happened> = Vec::new();
    let out = |i: usize, at: f64| routes.wait(node_addr(i + 1), false, at, ROUTE_LIMIT);
    let into = |i: usize, at: f64| routes.wait(node_addr(i + 1), true, at, ROUTE_LIMIT);

    // 1. A follower's weir dies; the machine is then replaced.
    let victim = follower(&nodes, &[])?;
    nodes[victim].daemon.kill()?;
    nodes[victim].up = false;
    let at = traffic.now_s();
    let route_out_s = out(victim, at);
    lab.wipe(victim + 1, &nodes[victim].daemon)?;
    events.push(Happened {
        route_out_s,
        ..Happened::new("kill -9", victim, at)
    });
    phase("kill -9", at);

    // 2. It comes back from nothing; 3. a fourth node joins.
    for (name, i) in [("node back", victim), ("node added", 3)] {
        let t0 = Instant::now();
        let at = traffic.now_s();
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
        events.push(Happened {
            route_in_s: into(i, at),
            join_s: Some(join_s),
            learnt,
            ..Happened::new(name, i, at)
        });
        phase(name, at);
    }

    // 4. A follower's link is cut; BFD takes it out. The machine is then
    // replaced, and stays out of the cluster.
    let cut = follower(&nodes, &[])?;
    lab.cut_link(cut + 1)?;
    let at = traffic.now_s();
    events.push(Happened {
        route_out_s: out(cut, at),
        ..Happened::new("link cut", cut, at)
    });
    phase("link cut", at);
    nodes[cut].daemon.kill()?;
    nodes[cut].up = false;
    lab.wipe(cut + 1, &nodes[cut].daemon)?;

    // 5. A follower is drained; 6. undrained.
    let drained = follower(&nodes, &[])?;
    for (name, what, leaves) in [("drain", "drain", true), ("undrain", "undrain", false)] {
        let d = &nodes[drained].daemon;
        node_command(exe, &lab.nodes[drained], d, what)?;
        let at = traffic.now_s();
        let moved = if leaves {
            out(drained, at)
        } else {
            into(drained, at)
        };
        events.push(Happened {
            route_out_s: moved.filter(|_| leaves),
            route_in_s: moved.filter(|_| !leaves),
            ..Happened::new(name, drained, at)
        });
        phase(name, at);
    }

    // 7. Every DIP fails its health checks on one node only (they check a
    // port where nothing answers); 8. they pass again.
    let failing = follower(&nodes, &[drained])?;
    for (name, port, leaves) in [
        ("DIP failure", HEALTH_PORT + 1, true),
        ("DIP recovered", HEALTH_PORT, false),
    ] {
        let cfg = lab.node_config_checking(failing + 1, opts.sync, port);
        let log = nodes[failing].daemon.reload(&cfg)?;
        if !log.contains("reloaded") {
            bail!(
                "n{} refused the health checks' new port:\n{log}",
                failing + 1
            );
        }
        let at = traffic.now_s();
        let moved = if leaves {
            out(failing, at)
        } else {
            into(failing, at)
        };
        events.push(Happened {
            route_out_s: moved.filter(|_| leaves),
            route_in_s: moved.filter(|_| !leaves),
            ..Happened::new(name, failing, at)
        });
        phase(name, at);
    }

    // 9. Every node replaced in turn by `weir serve --takeover`.
    let at = traffic.now_s();
    for n in nodes.iter_mut().filter(|n| n.up) {
        n.daemon.restart()?;
        std::thread::sleep(Duration::from_millis(300));
    }
    let done = traffic.now_s();
    std::thread::sleep(Duration::from_secs(1));
    events.push(Happened {
        name: "rolling upgrade",
        at_s: at,
        withdrawals: Some(withdrawals(&routes.changes(), at, done + 1.0)),
        ..Happened::default()
    });
    phase("rolling upgrade", at);

    // 10. The leader dies.
    let leader = leader_of(&nodes).context("no leader before the leader's kill")?;
    let t0 = Instant::now();
    nodes[leader].daemon.kill()?;
    nodes[leader].up = false;
    let at = traffic.now_s();
    let route_out_s = out(leader, at);
    lab.wipe(leader + 1, &nodes[leader].daemon)?;
    let moved = wait_for(Duration::from_secs(10), || leader_of(&nodes).is_some())
        .then(|| t0.elapsed().as_secs_f64());
    events.push(Happened {
        route_out_s,
        leader_moved_s: moved,
        ..Happened::new("leader kill -9", leader, at)
    });
    phase("leader killed", at);

    let elapsed = started.elapsed().as_secs_f64();
    let last_version = nodes
        .iter()
        .filter(|n| n.up)
        .filter_map(|n| version_of(&n.daemon))
        .max()
        .unwrap_or(first_version);
    let ends: Vec<NodeEnd> = nodes
        .iter()
        .filter(|n| n.up)
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
    drop(routes);
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
            let converged = h.converged_s();
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
                node: h.node.clone(),
                at_s,
                route_out_s: h.route_out_s,
                route_in_s: h.route_in_s,
                withdrawals: h.withdrawals,
                failed_after_converged: failed.iter().filter(|&&t| t >= converged).count(),
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
