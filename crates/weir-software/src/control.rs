//! The software tier's control thread: everything that needs a syscall, so
//! the workers never make one. It follows the maps (a VIP's table version
//! every few milliseconds, everything else every second), resolves the
//! DIPs' next hops, in the hybrid tier applies the workers' fast-table
//! decisions and reads the fast table back for the `heavy` policy, and in
//! adaptive distribution decides which buckets to spread.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_abi::*;
use weir_core::offload::{FastEntry, OffloadPolicy};
use weir_core::slb::NextHop;
use weir_dataplane::conntrack::now_ticks;
use weir_dataplane::maps::Maps;

use crate::clock::coarse_now_ns;
use crate::nexthop::resolve;
use crate::spread::Spreader;
use crate::stats::WorkerStats;
use crate::tables::Snapshot;
use crate::worker::{ToControl, ToWorker};

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
    /// Every live DIP had a next hop in the last set applied.
    pub next_hops: AtomicBool,
    /// Live DIPs without a next hop in the last set applied.
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

impl Control {
    pub fn run(mut self) {
        let mut snapshot: Option<Snapshot> = None;
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
                        let _ = self
                            .to_worker
                            .send(ToWorker::Services(Box::new(s.clone()), local_addrs()));
                        if now >= next_full {
                            // Until every live DIP resolves, ask again soon:
                            // a DIP without a next hop drops its packets.
                            let prime_now = now >= next_prime;
                            if prime_now {
                                next_prime = now + FULL_READ;
                            }
                            let resolved = self.send_next_hops(&s, prime_now);
                            next_full = now
                                + if resolved {
                                    FULL_READ
                                } else {
                                    UNRESOLVED_RETRY
                                };
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

    /// Resolves and sends every live DIP's next hop; whether all resolved.
    /// (`prime`: also make the kernel resolve the unresolved ones.)
    fn send_next_hops(&self, s: &Snapshot, prime_unresolved: bool) -> bool {
        let hops: Vec<(u32, Option<NextHop>)> = s
            .dips
            .iter()
            .filter(|(_, d)| d.flags & WEIR_DIP_F_LIVE != 0)
            .filter_map(|(id, d)| Some((id, weir_core::flow::words_addr(&d.addr, d.family)?)))
            .map(|(id, addr)| {
                let hop = resolve(addr, &self.ifaces).ok().flatten().map(|h| NextHop {
                    ifindex: h.ifindex,
                    mac: h.dst_mac,
                });
                if hop.is_none() && prime_unresolved {
                    prime(addr);
                }
                (*id, hop)
            })
            .collect();
        let resolved = hops.iter().all(|(_, h)| h.is_some());
        let _ = self.to_worker.send(ToWorker::NextHops(hops));
        resolved
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

/// This host's addresses (in the load balancer's network namespace).
fn local_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: the family says which sockaddr it is.
            match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
                libc::AF_INET => {
                    let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    out.push(IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes()));
                }
                libc::AF_INET6 => {
                    let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    out.push(IpAddr::from(sa.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    out
}
