//! The software tier's control thread: everything that needs a syscall, so
//! the workers never make one. It follows the maps (a VIP's table version
//! every few milliseconds, everything else every second), resolves the
//! DIPs' next hops, in the hybrid tier applies the workers' fast-table
//! decisions and reads the fast table back for the `heavy` policy, and in
//! adaptive distribution decides which buckets to spread.
//!
//! Next hops: every live DIP's is resolved again on each full read (routes
//! and neighbours change), and a DIP at an address not resolved before
//! (a new DIP, a slot given to another address) is resolved at once, with
//! the snapshot that brings it. A slot whose address stays keeps its next
//! hop in the workers (`Services::set_dip`), so weight changes, which come
//! with every reload and every controller interval, cost nothing here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_abi::*;
use weir_dataplane::conntrack::now_ticks;
use weir_dataplane::maps::Maps;
use weir_software_engine::offload::{FastEntry, OffloadPolicy};
use weir_software_engine::slb::NextHop;

use crate::spread::Spreader;
use crate::stats::WorkerStats;
use crate::tables::Snapshot;
use crate::worker::{Services, ToControl, ToWorker};
use weir_dataplane::nexthop::resolve;
use weir_sys::monotonic_coarse_ns as coarse_now_ns;

const VERSION_POLL: Duration = Duration::from_millis(5);
const FULL_READ: Duration = Duration::from_secs(1);
const UNRESOLVED_RETRY: Duration = Duration::from_millis(50);
/// How often the offload policy plans over the fast table.
pub const OFFLOAD_INTERVAL: Duration = Duration::from_millis(100);
/// How often adaptive distribution decides (over the buckets' counts since
/// the last decision and the workers' last reports).
pub const SPREAD_INTERVAL: Duration = Duration::from_millis(100);

/// What the control thread shares with `weir status` and /metrics.
#[derive(Debug, Default)]
pub struct Shared {
    pub workers: Mutex<Vec<WorkerStats>>,
    /// Fast-table writes that failed (hybrid).
    pub fast_errors: Mutex<(u64, Option<String>)>,
    pub ready: Readiness,
}

/// What the workers have taken from the control thread, so that the tier
/// is handed traffic only once it can serve it.
#[derive(Debug, Default)]
pub struct Readiness {
    /// The first services snapshot (VIPs, DIPs, tables) is applied. Until
    /// then no worker polls: a VIP's packet would look like no VIP's.
    pub services: AtomicBool,
    /// Every live DIP has a next hop after the last update applied.
    pub next_hops: AtomicBool,
    /// Live DIPs without a next hop after the last update applied.
    pub unresolved: AtomicUsize,
}

pub struct Control {
    pub maps: Maps,
    /// Interfaces weir holds: name -> (ifindex, MAC), for next hops.
    pub ifaces: HashMap<String, (u32, [u8; 6])>,
    pub policy: Option<OffloadPolicy>,
    /// Adaptive distribution's decisions.
    pub spreader: Option<Spreader>,
    pub to_worker: Sender<ToWorker>,
    pub from_worker: Receiver<ToControl>,
    pub shared: Arc<Shared>,
    pub stop: Arc<AtomicBool>,
}

/// Which live DIPs a services update resolves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resolve {
    /// All of them (a full read).
    All,
    /// Those at an address this thread has not resolved for their slot.
    New,
}

impl Control {
    pub fn run(mut self) {
        let mut snapshot: Option<Snapshot> = None;
        // The address each slot's next hop was last resolved for.
        let mut resolved_for: HashMap<u32, IpAddr> = HashMap::new();
        let mut versions = Vec::new();
        let mut next_full = Instant::now();
        let mut next_prime = Instant::now();
        let mut next_offload = Instant::now() + OFFLOAD_INTERVAL;
        let mut next_spread = Instant::now() + SPREAD_INTERVAL;
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let changed = snapshot.as_ref().is_none_or(|s| {
                Snapshot::versions(&self.maps, &s.vips).is_ok_and(|v| v != versions)
            });
            if changed || now >= next_full {
                match Snapshot::read(&self.maps) {
                    Ok(s) => {
                        versions = Snapshot::versions(&self.maps, &s.vips).unwrap_or_default();
                        let full = now >= next_full;
                        // A new address is primed at once; the others at
                        // most once a full-read interval.
                        let prime_now = !full || now >= next_prime;
                        if full && prime_now {
                            next_prime = now + FULL_READ;
                        }
                        let which = if full { Resolve::All } else { Resolve::New };
                        let (next_hops, resolved) =
                            self.next_hops(&s, which, prime_now, &mut resolved_for);
                        let _ = self.to_worker.send(ToWorker::Services(Box::new(Services {
                            snapshot: s.clone(),
                            local: local_addrs(),
                            next_hops,
                        })));
                        // Until every live DIP resolves, ask again soon:
                        // a DIP without a next hop drops its packets.
                        if full {
                            next_full = now + FULL_READ;
                        }
                        if !resolved {
                            next_full = next_full.min(now + UNRESOLVED_RETRY);
                        }
                        snapshot = Some(s);
                    }
                    Err(e) => self.note_error(format!("reading the maps: {e:#}")),
                }
            }
            // Both policies plan: `first` to demote idle and closed entries
            // (and so make room), `heavy` also to swap by rate.
            if self.policy.is_some() && now >= next_offload {
                next_offload = now + OFFLOAD_INTERVAL;
                match self.maps.fast_entries() {
                    Ok(entries) => {
                        let view = fast_view(&entries);
                        let _ = self.to_worker.send(ToWorker::FastView(view));
                    }
                    Err(e) => self.note_error(format!("reading the fast table: {e:#}")),
                }
            }
            if now >= next_spread {
                next_spread = now + SPREAD_INTERVAL;
                if let Some(sp) = self.spreader.as_mut() {
                    if let Err(e) = sp.decide(&self.maps, coarse_now_ns()) {
                        let e = format!("adaptive distribution: {e:#}");
                        self.note_error(e);
                    }
                }
            }
            self.serve_worker();
            std::thread::sleep(VERSION_POLL);
        }
        self.serve_worker();
    }

    /// Resolves the next hops of the live DIPs `which` names, noting the
    /// address each was resolved for; whether all of them resolved.
    /// (`prime`: also make the kernel resolve the unresolved ones.)
    fn next_hops(
        &self,
        s: &Snapshot,
        which: Resolve,
        prime_unresolved: bool,
        resolved_for: &mut HashMap<u32, IpAddr>,
    ) -> (Vec<(u32, Option<NextHop>)>, bool) {
        let mut hops = Vec::new();
        for (id, d) in &s.dips {
            if d.flags & WEIR_DIP_F_LIVE == 0 {
                continue;
            }
            let Some(addr) = weir_core::flow::words_addr(&d.addr, d.family) else {
                continue;
            };
            if which == Resolve::New && resolved_for.get(id) == Some(&addr) {
                continue;
            }
            let hop = resolve(addr, &self.ifaces).ok().flatten().map(|h| NextHop {
                ifindex: h.ifindex,
                mac: h.dst_mac,
            });
            if hop.is_none() && prime_unresolved {
                prime(addr);
            }
            resolved_for.insert(*id, addr);
            hops.push((*id, hop));
        }
        let resolved = hops.iter().all(|(_, h)| h.is_some());
        (hops, resolved)
    }

    fn serve_worker(&mut self) {
        while let Ok(msg) = self.from_worker.try_recv() {
            match msg {
                ToControl::Install(c) => {
                    let rev = c.reverse.as_ref().map(|(k, v)| (k, v));
                    if let Err(e) = self.maps.install_fast(&c.key, &c.conn, rev) {
                        self.note_error(format!("installing a fast entry: {e:#}"));
                    }
                }
                ToControl::Remove(key, rkey) => {
                    if let Err(e) = self.maps.remove_fast(&key, rkey.as_ref()) {
                        self.note_error(format!("removing a fast entry: {e:#}"));
                    }
                }
                ToControl::Stats(mut s) => {
                    if let (Some(sp), Some(u)) = (self.spreader.as_mut(), &s.utilization) {
                        if sp.report(s.cpu, u) == Some(0) {
                            s.spread = Some(sp.stats().into());
                        }
                    }
                    let mut all = self
                        .shared
                        .workers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    match all.iter_mut().find(|w| w.cpu == s.cpu) {
                        Some(w) => *w = *s,
                        None => all.push(*s),
                    }
                }
            }
        }
    }

    fn note_error(&self, e: String) {
        let mut f = self
            .shared
            .fast_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f.0 += 1;
        f.1 = Some(e);
    }
}

/// The fast table as the offload policy sees it: hits, last use (in the
/// coarse clock's nanoseconds, from the entry's ticks) and whether closed.
fn fast_view(entries: &[(weir_flow_key, weir_conn)]) -> Vec<FastEntry<weir_flow_key>> {
    let (now_ns, now_t) = (coarse_now_ns(), now_ticks());
    entries
        .iter()
        .map(|(k, c)| {
            let idle_ns = u64::from(now_t.wrapping_sub(c.atime)) << WEIR_TICK_SHIFT;
            let both = (WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER) as u8;
            FastEntry {
                key: *k,
                hits: c.hits,
                last_seen_ns: now_ns.saturating_sub(idle_ns),
                closed: c.close_flags & WEIR_CONN_F_RST as u8 != 0 || c.close_flags & both == both,
            }
        })
        .collect()
}

/// A short TCP connect makes the kernel resolve the DIP's neighbour.
fn prime(addr: IpAddr) {
    std::thread::spawn(move || {
        let _ = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(addr, 9),
            Duration::from_millis(200),
        );
    });
}

/// This host's addresses (in the load balancer's network namespace); none
/// if the kernel will not list them.
fn local_addrs() -> Vec<IpAddr> {
    weir_sys::interface_addrs()
        .map(|all| all.into_iter().filter_map(|(_, addr)| addr).collect())
        .unwrap_or_default()
}
