//! One worker: a thread pinned to a core that busy-polls its AF_XDP
//! sockets (one per queue of every interface; each queue's sockets, one
//! per worker, share its UMEM) in bursts, run to completion:
//!
//! 1. receive a burst and read each frame's number (XDP metadata);
//! 2. run the burst through the shared load balancer, under its lock
//!    (see [`crate::balancer`]);
//! 3. the added per-packet cost (`cost_cycles`), outside the lock;
//! 4. unnumbered frames: forward in place, or copy to another interface's
//!    socket, or drop; numbered frames (spray, a spread bucket) go to their
//!    ingress queue's reorder stage (see [`crate::streams`]), and the
//!    streams this worker owns release theirs in ingress order for it to
//!    send.
//!
//! The worker makes no syscall but its sockets' wakeups: it talks to the
//! control thread through channels (the first worker applies what the
//! control thread sends, for all).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_abi::*;
use weir_afxdp::{pin_current_thread, Frame, Socket};
use weir_software_engine::offload::FastEntry;
use weir_software_engine::reorder::Seq;
use weir_software_engine::slb::{Connection, NextHop, Outcome};
use weir_software_engine::utilization::UtilizationMeter;

use crate::balancer::{self, Balancer};
use crate::stats::{ReorderCounters, SocketStats, Traffic, WorkerCounters, WorkerStats};
use crate::streams::{Done, Stream};
use crate::tables::Snapshot;
use weir_sys::monotonic_coarse_ns as coarse_now_ns;

/// How often the worker looks at its channel, ages entries and reports.
const HOUSEKEEPING: Duration = Duration::from_millis(1);
const STATS_EVERY: Duration = Duration::from_millis(500);
/// The largest frame a socket takes (its UMEM frame size bounds it).
const MAX_FRAME: usize = 4096;

/// What the control thread tells the first worker.
pub enum ToWorker {
    /// The maps' VIPs, DIPs, tables and nat endpoints, this host's
    /// addresses, and the next hops resolved with them.
    Services(Box<Services>),
    /// Hybrid: the fast table as read now, for a plan.
    FastView(Vec<FastEntry<weir_flow_key>>),
}

/// One services update, applied under one lock.
pub struct Services {
    pub snapshot: Snapshot,
    pub local: Vec<std::net::IpAddr>,
    /// Resolved next hops by DIP slot (None: not resolved): every live
    /// DIP's on the control thread's full reads, otherwise those of DIPs
    /// at addresses it had not resolved yet.
    pub next_hops: Vec<(u32, Option<NextHop>)>,
}

/// What a worker asks of the control thread.
pub enum ToControl {
    /// Write this connection into the fast table (hybrid).
    Install(Connection),
    /// Take it out again (with its reverse entry, nat).
    Remove(weir_flow_key, Option<weir_flow_key>),
    Stats(Box<WorkerStats>),
}

/// A socket and what the worker knows of its interface. Every worker has
/// the same ports in the same order: port `i` is stream `i`.
pub struct Port {
    pub socket: Socket,
    pub ifindex: u32,
}

/// Frames to send by another interface than they came in on, copied out of
/// the receiving UMEM and sent at the end of the loop.
struct Staged {
    data: Vec<u8>,
    frames: Vec<(usize, usize, usize)>, // (port, offset, length)
}

impl Staged {
    fn push(&mut self, port: usize, frame: &[u8]) {
        let off = self.data.len();
        self.data.extend_from_slice(frame);
        self.frames.push((port, off, frame.len()));
    }
}

/// Where a frame of a burst goes after the load balancer.
#[derive(Clone, Copy)]
enum Next {
    /// Out of this port (the ingress one: in place).
    Port(usize),
    Drop,
}

/// Scratch of one burst, kept between bursts so nothing allocates.
#[derive(Default)]
struct Burst {
    frames: Vec<Frame>,
    /// Each frame's number, if XDP numbered it and reordering is on.
    seqs: Vec<Option<Seq>>,
    next: Vec<Next>,
    /// For the port's stream: finished numbered packets, dropped numbers.
    done: Vec<(Seq, Done)>,
    dropped: Vec<Seq>,
}

pub struct Worker {
    /// The worker's index: the XDP program's worker number.
    pub id: usize,
    pub cpu: usize,
    pub ports: Vec<Port>,
    pub balancer: balancer::Shared,
    /// Every ingress queue's reorder stage, by port; empty when reordering
    /// is off.
    pub streams: Arc<[Stream]>,
    /// `cost_cycles`: TSC cycles spun for every packet.
    pub cost_cycles: u64,
    pub meter: UtilizationMeter,
    /// The first worker's: what the control thread sends.
    pub rx: Option<Receiver<ToWorker>>,
    pub tx: Sender<ToControl>,
    /// Where the first worker says what it has applied.
    pub shared: Arc<crate::control::Shared>,
    pub stop: Arc<AtomicBool>,
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
        let batch = batch.unwrap_or(64);
        let mut staged = Staged {
            data: Vec::with_capacity(batch * MAX_FRAME),
            frames: Vec::with_capacity(batch),
        };
        let mut burst = Burst::default();
        let mut released = Vec::new();
        let epoch = Instant::now();
        let mut next_housekeeping = epoch;
        let mut next_stats = epoch + STATS_EVERY;
        let egress: BTreeMap<u32, usize> = self
            .ports
            .iter()
            .enumerate()
            .rev()
            .map(|(i, p)| (p.ifindex, i))
            .collect();
        self.wait_for_services(&mut stats);
        // The poll before this one: it is recorded when the next starts, so
        // that its time covers what its packets cost after the poll too
        // (reorder, transmit, housekeeping), as the meter expects.
        let mut last_poll: Option<(Instant, u32, usize)> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let now_ns = coarse_now_ns();
            for p in 0..self.ports.len() {
                let started = Instant::now();
                if let Some((at, n, q)) = last_poll.take() {
                    let took = started.duration_since(at).as_nanos() as u64;
                    self.meter.record(took, n, q);
                }
                let fine_ns = started.duration_since(epoch).as_nanos() as u64;
                let n = match self.poll_port(p, now_ns, fine_ns, &egress, &mut burst, &mut staged) {
                    Ok((n, c)) => {
                        add_counters(&mut stats.counters, c);
                        n as u32
                    }
                    Err(e) => {
                        stats.error =
                            Some(format!("polling {}: {e}", self.ports[p].socket.interface()));
                        0
                    }
                };
                last_poll = Some((started, n, p));
            }
            let fine_ns = epoch.elapsed().as_nanos() as u64;
            self.send_released(fine_ns, &mut released, &mut staged, &mut stats);
            self.flush_staged(&mut staged, &mut stats);
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
        // What the owned streams still hold leaves now, in order.
        let owned: Vec<usize> = self.owned().collect();
        for s in owned {
            self.streams[s].flush(&mut released);
            self.send_stream(s, &mut released, &mut staged, &mut stats);
        }
        self.flush_staged(&mut staged, &mut stats);
        self.report(&mut stats);
        stats
    }

    /// One burst of port `p`. Returns the packets received and the
    /// worker counters it moved.
    fn poll_port(
        &mut self,
        p: usize,
        now_ns: u64,
        fine_ns: u64,
        egress: &BTreeMap<u32, usize>,
        b: &mut Burst,
        staged: &mut Staged,
    ) -> weir_afxdp::Result<(usize, WorkerCounters)> {
        let mut c = WorkerCounters::default();
        let port = &mut self.ports[p];
        let n = port.socket.receive(&mut b.frames)?;
        if n == 0 {
            return Ok((0, c));
        }
        // Numbers matter only to the reorder stage; without one, the
        // metadata is left alone (XDP rewrites it for every packet).
        let reorder = !self.streams.is_empty();
        b.seqs.clear();
        for f in &mut b.frames {
            let seq = reorder
                .then(|| port.socket.take_meta::<8>(f))
                .flatten()
                .and_then(|m| weir_xsk_meta::from_bytes(&m))
                .filter(|m| m.mark == WEIR_XSK_META_NUMBERED)
                .map(|m| m.seq);
            b.seqs.push(seq);
        }
        if b.seqs.iter().any(Option::is_some) {
            self.streams[p].claim(b.seqs.iter().flatten().copied(), fine_ns);
        }
        // The table's work, once per burst under its lock.
        b.next.clear();
        {
            let mut lb = balancer::lock(&self.balancer);
            for f in &mut b.frames {
                let next = match lb.process(port.socket.data_mut(f), port.ifindex, now_ns) {
                    Outcome::Forward(fw) if fw.egress.ifindex == port.ifindex => Next::Port(p),
                    Outcome::Forward(fw) => match egress.get(&fw.egress.ifindex) {
                        Some(&e) => Next::Port(e),
                        None => {
                            c.no_egress_socket += 1;
                            Next::Drop
                        }
                    },
                    Outcome::Drop(_) => Next::Drop,
                    // A socket cannot hand a frame to the kernel: XDP steers
                    // only what the software tier must see.
                    Outcome::Pass(_) => {
                        c.pass_dropped += 1;
                        Next::Drop
                    }
                };
                b.next.push(next);
            }
            lb.drain_events();
        }
        if self.cost_cycles > 0 {
            crate::cost::spin(self.cost_cycles * n as u64);
        }
        for ((frame, seq), next) in b.frames.drain(..).zip(&b.seqs).zip(&b.next) {
            match (*seq, *next) {
                (Some(seq), Next::Port(e)) => b.done.push((seq, Done { frame, egress: e })),
                (Some(seq), Next::Drop) => {
                    b.dropped.push(seq);
                    port.socket.release(frame);
                }
                (None, Next::Port(e)) if e == p => port.socket.queue_tx(frame),
                (None, Next::Port(e)) => {
                    let data = port.socket.data(&frame);
                    if data.len() <= MAX_FRAME {
                        staged.push(e, data);
                    } else {
                        c.cross_dropped += 1;
                    }
                    port.socket.release(frame);
                }
                (None, Next::Drop) => port.socket.release(frame),
            }
        }
        if !b.done.is_empty() || !b.dropped.is_empty() {
            self.streams[p].hand_in(&mut b.done, &mut b.dropped, fine_ns);
        }
        port.socket.flush()?;
        Ok((n, c))
    }

    /// The streams this worker sends for.
    fn owned(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.streams.len()).filter(|&s| self.streams[s].owner() == self.id)
    }

    /// Takes what the owned streams released (and what their hold time
    /// gives up) and sends it, in order.
    fn send_released(
        &mut self,
        fine_ns: u64,
        released: &mut Vec<Done>,
        staged: &mut Staged,
        stats: &mut WorkerStats,
    ) {
        for s in 0..self.streams.len() {
            if self.streams[s].owner() != self.id {
                continue;
            }
            self.streams[s].take_released(fine_ns, released);
            if !released.is_empty() {
                self.send_stream(s, released, staged, stats);
            }
        }
    }

    /// Sends a stream's released packets by its port's socket (in place)
    /// or, for another interface, copied to that one's.
    fn send_stream(
        &mut self,
        s: usize,
        released: &mut Vec<Done>,
        staged: &mut Staged,
        stats: &mut WorkerStats,
    ) {
        let port = &mut self.ports[s];
        for d in released.drain(..) {
            if d.egress == s {
                port.socket.queue_tx(d.frame);
                continue;
            }
            let data = port.socket.data(&d.frame);
            if data.len() <= MAX_FRAME {
                staged.push(d.egress, data);
            } else {
                stats.counters.cross_dropped += 1;
            }
            port.socket.release(d.frame);
        }
        if let Err(e) = port.socket.flush() {
            stats.error = Some(format!("sending on {}: {e}", port.socket.interface()));
        }
    }

    /// Sends the staged frames by their interfaces; what does not fit is
    /// dropped and counted.
    fn flush_staged(&mut self, staged: &mut Staged, stats: &mut WorkerStats) {
        if staged.frames.is_empty() {
            return;
        }
        for (p, port) in self.ports.iter_mut().enumerate() {
            let want = staged.frames.iter().filter(|(q, _, _)| *q == p).count();
            if want == 0 {
                continue;
            }
            let mut mine = staged.frames.iter().filter(|(q, _, _)| *q == p);
            let data = &staged.data;
            let mut sent = 0;
            // A batch per call: send until done or the socket has no room.
            while sent < want {
                let n = port
                    .socket
                    .transmit(want - sent, |buf| match mine.next() {
                        Some(&(_, off, len)) if len <= buf.len() => {
                            buf[..len].copy_from_slice(&data[off..off + len]);
                            len
                        }
                        _ => 0,
                    })
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                sent += n;
            }
            stats.counters.cross_sent += sent as u64;
            stats.counters.cross_dropped += (want - sent) as u64;
        }
        staged.data.clear();
        staged.frames.clear();
    }

    /// Until the first services snapshot is applied, polls nothing: what
    /// arrives waits in the sockets' rings.
    fn wait_for_services(&mut self, stats: &mut WorkerStats) {
        while !self.shared.ready.services.load(Ordering::Acquire)
            && !self.stop.load(Ordering::Relaxed)
        {
            self.housekeeping(coarse_now_ns(), stats);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The first worker applies what the control thread sent, for all;
    /// every worker ages the table a little.
    fn housekeeping(&mut self, now_ns: u64, stats: &mut WorkerStats) {
        if let Some(rx) = &self.rx {
            while let Ok(msg) = rx.try_recv() {
                let mut lb = balancer::lock(&self.balancer);
                match msg {
                    ToWorker::Services(update) => {
                        let Services {
                            snapshot,
                            local,
                            next_hops,
                        } = *update;
                        if let Err(e) = lb.apply_snapshot(&snapshot, local, &next_hops) {
                            stats.error = Some(e);
                        }
                        let unresolved = lb.slb.services().unresolved_dips();
                        let ready = &self.shared.ready;
                        ready.unresolved.store(unresolved, Ordering::Relaxed);
                        ready.next_hops.store(unresolved == 0, Ordering::Release);
                        ready.services.store(true, Ordering::Release);
                    }
                    ToWorker::FastView(view) => lb.plan(now_ns, &view),
                }
            }
            balancer::lock(&self.balancer).expire(now_ns);
        }
    }

    fn report(&mut self, stats: &mut WorkerStats) {
        if self.rx.is_some() {
            shared_part(&balancer::lock(&self.balancer), stats);
        }
        stats.utilization = Some(self.meter.take());
        if !self.streams.is_empty() {
            let mut r = ReorderCounters::default();
            for s in self.owned() {
                r.add(&self.streams[s].stats());
            }
            stats.reorder = Some(r);
        }
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
                    rx_invalid_descs: k.rx_invalid_descs,
                    fill_ring_empty: k.rx_fill_ring_empty_descs,
                }
            })
            .collect();
        let _ = self.tx.send(ToControl::Stats(Box::new(stats.clone())));
    }
}

/// What the workers share, in the first worker's report.
fn shared_part(lb: &Balancer, stats: &mut WorkerStats) {
    stats.slb = lb.slb.counters().stats().to_vec();
    stats.connections = lb.slb.conn_count();
    stats.half_open = lb.slb.half_open_count();
    let (vips, dips) = lb.slb.all_traffic();
    stats.vip_traffic = active_traffic(vips);
    stats.dip_traffic = active_traffic(dips);
    stats.offload = lb.offload.as_ref().map(|o| o.stats());
}

fn add_counters(sum: &mut WorkerCounters, c: WorkerCounters) {
    sum.cross_sent += c.cross_sent;
    sum.cross_dropped += c.cross_dropped;
    sum.no_egress_socket += c.no_egress_socket;
    sum.pass_dropped += c.pass_dropped;
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
