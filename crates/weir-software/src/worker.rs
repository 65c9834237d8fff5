//! One worker: a thread pinned to a core that busy-polls its AF_XDP
//! sockets (one per interface queue it owns) in bursts and runs every frame
//! through its [`Slb`], run to completion. A frame that leaves by the
//! interface it came in on is forwarded in place; one that leaves by
//! another interface is copied into that interface's socket (each socket
//! has a UMEM of its own). The worker never makes a map syscall: it talks
//! to the control thread through channels, which it drains between bursts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_abi::*;
use weir_afxdp::{pin_current_thread, Socket, Verdict};
use weir_core::offload::{FastEntry, Offload};
use weir_core::slb::{Connection, Event, Outcome, Slb};
use weir_core::utilization::UtilizationMeter;

use crate::clock::coarse_now_ns;
use crate::stats::{SocketStats, Traffic, WorkerStats};
use crate::tables::Snapshot;

/// How often the worker looks at its channel, ages entries and reports.
const HOUSEKEEPING: Duration = Duration::from_millis(1);
const STATS_EVERY: Duration = Duration::from_millis(500);
/// Expired entries removed per housekeeping round at most.
const EXPIRE_BUDGET: usize = 256;
/// The largest frame a socket takes (its UMEM frame size bounds it).
const MAX_FRAME: usize = 4096;

/// What the control thread tells a worker.
pub enum ToWorker {
    /// The maps' VIPs, DIPs, tables and nat endpoints, and this host's
    /// addresses.
    Services(Box<Snapshot>, Vec<std::net::IpAddr>),
    /// Resolved next hops by DIP slot (None: not resolved).
    NextHops(Vec<(u32, Option<weir_core::slb::NextHop>)>),
    /// Hybrid: the fast table as read now, for a plan.
    FastView(Vec<FastEntry<weir_flow_key>>),
}

/// What a worker asks of the control thread.
pub enum ToControl {
    /// Write this connection into the fast table (hybrid).
    Install(Connection),
    /// Take it out again (with its reverse entry, nat).
    Remove(weir_flow_key, Option<weir_flow_key>),
    Stats(Box<WorkerStats>),
}

/// A socket and what the worker knows of its interface.
pub struct Port {
    pub socket: Socket,
    pub ifindex: u32,
}

/// Frames to send by another interface than they came in on, copied out of
/// the receiving UMEM during a burst and sent after it.
struct Staged {
    data: Vec<u8>,
    frames: Vec<(usize, usize, usize)>, // (port, offset, length)
}

pub struct Worker {
    pub cpu: usize,
    pub ports: Vec<Port>,
    pub slb: Slb,
    pub meter: UtilizationMeter,
    /// Hybrid: the fast table's offload decision.
    pub offload: Option<Offload<weir_flow_key>>,
    pub rx: Receiver<ToWorker>,
    pub tx: Sender<ToControl>,
    pub stop: Arc<AtomicBool>,
    /// The VIPs of the last snapshot applied (to remove the ones that go).
    pub vips: Vec<weir_vip_key>,
}

impl Worker {
    /// Runs until `stop`; returns its last counters.
    pub fn run(mut self) -> WorkerStats {
        let mut stats = WorkerStats {
            cpu: self.cpu,
            ..WorkerStats::default()
        };
        if let Err(e) = pin_current_thread(self.cpu) {
            stats.error = Some(format!("pinning to CPU {}: {e}", self.cpu));
        }
        let batch = self.ports.iter().map(|p| p.socket.batch_size()).max();
        let mut staged = Staged {
            data: Vec::with_capacity(batch.unwrap_or(64) * MAX_FRAME),
            frames: Vec::with_capacity(batch.unwrap_or(64)),
        };
        let epoch = Instant::now();
        let mut next_housekeeping = epoch;
        let mut next_stats = epoch + STATS_EVERY;
        let ifindexes: Vec<u32> = self.ports.iter().map(|p| p.ifindex).collect();
        while !self.stop.load(Ordering::Relaxed) {
            let now_ns = coarse_now_ns();
            for (i, port) in self.ports.iter_mut().enumerate() {
                let started = Instant::now();
                let ifindex = port.ifindex;
                let (slb, offload) = (&mut self.slb, &mut self.offload);
                let it = port.socket.poll_once(|frame| {
                    handle(
                        frame,
                        ifindex,
                        now_ns,
                        slb,
                        offload,
                        &ifindexes,
                        &mut staged,
                        &mut stats.counters,
                    )
                });
                match it {
                    Ok(it) => {
                        self.meter
                            .record(started.elapsed().as_nanos() as u64, it.received, i)
                    }
                    Err(e) => {
                        stats.error = Some(format!("polling {}: {e}", port.socket.interface()))
                    }
                }
            }
            self.flush(&mut staged, &mut stats);
            self.drain_events();
            let now = Instant::now();
            if now >= next_housekeeping {
                next_housekeeping = now + HOUSEKEEPING;
                self.housekeeping(now_ns, &mut stats);
            }
            if now >= next_stats {
                next_stats = now + STATS_EVERY;
                self.report(&mut stats);
            }
        }
        self.report(&mut stats);
        stats
    }

    /// Sends the staged frames by their interfaces; what does not fit is
    /// dropped and counted.
    fn flush(&mut self, staged: &mut Staged, stats: &mut WorkerStats) {
        if staged.frames.is_empty() {
            return;
        }
        for (p, port) in self.ports.iter_mut().enumerate() {
            let mut mine = staged.frames.iter().filter(|(q, _, _)| *q == p).peekable();
            if mine.peek().is_none() {
                continue;
            }
            let want = staged.frames.iter().filter(|(q, _, _)| *q == p).count();
            let data = &staged.data;
            let sent = port
                .socket
                .transmit(want, |buf| match mine.next() {
                    Some(&(_, off, len)) if len <= buf.len() => {
                        buf[..len].copy_from_slice(&data[off..off + len]);
                        len
                    }
                    _ => 0,
                })
                .unwrap_or(0);
            stats.counters.cross_sent += sent as u64;
            stats.counters.cross_dropped += (want - sent) as u64;
        }
        staged.data.clear();
        staged.frames.clear();
    }

    fn housekeeping(&mut self, now_ns: u64, stats: &mut WorkerStats) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                ToWorker::Services(snapshot, local) => {
                    if let Err(e) = apply_snapshot(&mut self.slb, &mut self.vips, &snapshot, local)
                    {
                        stats.error = Some(e);
                    }
                }
                ToWorker::NextHops(hops) => {
                    for (id, hop) in hops {
                        let _ = self.slb.services_mut().set_next_hop(id, hop);
                    }
                }
                ToWorker::FastView(view) => self.plan(now_ns, &view),
            }
        }
        self.slb.expire(now_ns, EXPIRE_BUDGET);
        self.drain_events();
    }

    /// After every round of bursts: the event queue is bounded.
    fn drain_events(&mut self) {
        while let Some(ev) = self.slb.poll_event() {
            self.mirror(ev);
        }
    }

    /// Hybrid: a connection event of the software table, mirrored into the
    /// fast table as the policy says. The software entry always comes first
    /// (HNLB 4a before 4b), so a packet that races the install still finds
    /// its DIP here.
    fn mirror(&mut self, ev: Event) {
        let Some(offload) = self.offload.as_mut() else {
            return;
        };
        match ev {
            Event::Installed(conn) => {
                if offload.admit() {
                    let _ = self.tx.send(ToControl::Install(conn));
                }
            }
            Event::Closed(key) => {
                let rkey = reverse_key_of(&self.slb, &key);
                let _ = self.tx.send(ToControl::Remove(key, rkey));
            }
            // The connection is gone from the software table: its event
            // carries the reverse key.
            Event::Removed { key, reverse, .. } => {
                let _ = self.tx.send(ToControl::Remove(key, reverse));
            }
        }
    }

    /// Hybrid: one plan over the fast table's current view.
    fn plan(&mut self, now_ns: u64, view: &[FastEntry<weir_flow_key>]) {
        let Some(offload) = self.offload.as_mut() else {
            return;
        };
        // Offloaded connections send nothing through this table: keep
        // their software entries as fresh as their fast ones.
        for e in view {
            let _ = self.slb.refresh(&e.key, e.last_seen_ns);
        }
        let plan = offload.plan(now_ns, view);
        for key in plan.demote {
            let rkey = reverse_key_of(&self.slb, &key);
            let _ = self.tx.send(ToControl::Remove(key, rkey));
        }
        for key in plan.promote {
            if let Some(conn) = self.slb.connection(&key) {
                let _ = self.tx.send(ToControl::Install(conn));
            }
        }
    }

    fn report(&mut self, stats: &mut WorkerStats) {
        stats.slb = self.slb.counters().stats().to_vec();
        stats.connections = self.slb.conn_count();
        stats.half_open = self.slb.half_open_count();
        let (vips, dips) = self.slb.all_traffic();
        stats.vip_traffic = active_traffic(vips);
        stats.dip_traffic = active_traffic(dips);
        stats.utilization = Some(self.meter.take());
        stats.offload = self.offload.as_ref().map(|o| o.stats());
        stats.sockets = self
            .ports
            .iter()
            .map(|p| {
                let c = p.socket.counters();
                let k = p.socket.kernel_stats().unwrap_or_default();
                SocketStats {
                    interface: p.socket.interface().to_string(),
                    queue: p.socket.queue(),
                    rx_packets: c.rx_packets,
                    rx_bursts: c.rx_bursts,
                    tx_packets: c.tx_packets,
                    tx_ring_full: c.tx_ring_full,
                    rx_dropped: k.rx_dropped,
                    rx_ring_full: k.rx_ring_full,
                    fill_ring_empty: k.rx_fill_ring_empty_descs,
                }
            })
            .collect();
        let _ = self.tx.send(ToControl::Stats(Box::new(stats.clone())));
    }
}

/// One frame: the software load balancer decides, the worker carries it out.
#[allow(clippy::too_many_arguments)]
fn handle(
    frame: &mut [u8],
    ifindex: u32,
    now_ns: u64,
    slb: &mut Slb,
    offload: &mut Option<Offload<weir_flow_key>>,
    port_ifindexes: &[u32],
    staged: &mut Staged,
    counters: &mut crate::stats::WorkerCounters,
) -> Verdict {
    match slb.process(frame, ifindex, now_ns) {
        Outcome::Forward(f) => {
            if let Some(o) = offload.as_mut() {
                o.observe(&f.conn);
            }
            if f.egress.ifindex == ifindex {
                return Verdict::Forward;
            }
            match port_ifindexes.iter().position(|&i| i == f.egress.ifindex) {
                Some(p) if frame.len() <= MAX_FRAME => {
                    let off = staged.data.len();
                    staged.data.extend_from_slice(frame);
                    staged.frames.push((p, off, frame.len()));
                }
                _ => counters.no_egress_socket += 1,
            }
            Verdict::Drop
        }
        Outcome::Drop(_) => Verdict::Drop,
        // A socket cannot hand a frame to the kernel: XDP steers only what
        // the software tier must see, so these are counted and dropped.
        Outcome::Pass(_) => {
            counters.pass_dropped += 1;
            Verdict::Drop
        }
    }
}

/// The entries of `counters` with packets, by index.
fn active_traffic(counters: &[weir_traffic]) -> BTreeMap<u32, Traffic> {
    counters
        .iter()
        .enumerate()
        .filter(|(_, t)| t.packets > 0)
        .map(|(i, t)| {
            let traffic = Traffic {
                packets: t.packets,
                bytes: t.bytes,
                new_conns: t.new_conns,
            };
            (i as u32, traffic)
        })
        .collect()
}

fn reverse_key_of(slb: &Slb, key: &weir_flow_key) -> Option<weir_flow_key> {
    slb.connection(key).and_then(|c| c.reverse.map(|(k, _)| k))
}

/// Brings the load balancer's services in line with the maps.
fn apply_snapshot(
    slb: &mut Slb,
    applied: &mut Vec<weir_vip_key>,
    snapshot: &Snapshot,
    local: Vec<std::net::IpAddr>,
) -> Result<(), String> {
    let services = slb.services_mut();
    for (id, dip) in &snapshot.dips {
        // An unchanged slot keeps its resolved next hop.
        if services.dip(*id).map(|d| d.dip) != Some(*dip) {
            services
                .set_dip(*id, *dip)
                .map_err(|e| format!("DIP slot {id}: {e:?}"))?;
        }
    }
    let current: Vec<weir_vip_key> = snapshot.vips.iter().map(|v| v.key).collect();
    for v in &snapshot.vips {
        services
            .set_vip(v.key, v.vip)
            .map_err(|e| format!("VIP {}: {e:?}", v.vip.vip_id))?;
        let stale = services
            .table(v.vip.vip_id)
            .is_none_or(|(version, _)| version != v.version);
        if stale {
            services
                .publish_table(v.vip.vip_id, v.version, Arc::new(v.table.clone()))
                .map_err(|e| format!("table of VIP {}: {e:?}", v.vip.vip_id))?;
        }
    }
    for gone in applied.iter().filter(|k| !current.contains(k)) {
        services.remove_vip(gone);
    }
    *applied = current;
    services.set_nat_endpoints(snapshot.nat_endpoints.iter().copied());
    services.set_local_addrs(local);
    Ok(())
}
