//! weir's software tier (HNLB's software load balancer, seed 000 section
//! III): worker threads pinned to cores busy-poll AF_XDP sockets
//! (`weir-afxdp`), one per queue of every interface weir holds, and run
//! each frame through the sans-IO load balancer `weir_software_engine::slb`, which
//! decides exactly what the XDP program would. The XDP program steers to
//! the sockets what the tier must see (`tier = "software"`: every VIP
//! packet and nat reply; `"hybrid"`: what misses the bounded fast table),
//! and picks the worker of each packet (`distribution`: flow, spray,
//! adaptive). Both tiers dispatch with the tables the controller
//! publishes, read from the maps, so a connection's DIP does not depend on
//! the tier.
//!
//! - [`worker`]: the run-to-completion loop, cross-interface sends, the
//!   utilization metric.
//! - [`balancer`]: the load balancer the workers share (one table, one
//!   lock per burst), and the hybrid tier's offload decisions.
//! - [`streams`]: the reorder stage of spread packets (seed 001).
//! - [`cost`]: the added per-packet cost of experiments (`cost_cycles`).
//! - [`control`]: the thread that makes the syscalls: map reads, next hops,
//!   fast-table writes, adaptive distribution ([`spread`]), stats for
//!   `weir status` and /metrics.
//! - [`tables`]: VIPs, DIP slots and active AWFD tables from the maps.
//! - Next hops come from `weir_dataplane::nexthop`, the resolver `weir
//!   serve` uses for the XDP data plane; an unresolved DIP is primed (a TCP
//!   connect makes the kernel resolve its neighbour) and retried on the
//!   next refresh.

mod balancer;
mod control;
pub mod cost;
mod spread;
pub mod stats;
mod streams;
mod tables;
mod worker;

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weir_afxdp::Socket;
use weir_dataplane::maps::Maps;
use weir_software_engine::distribution::{DistributionConfig, Mode};
use weir_software_engine::offload::{Offload, OffloadConfig};
use weir_software_engine::reorder::ReorderConfig;
use weir_software_engine::slb::{self, Slb};
use weir_software_engine::utilization::UtilizationMeter;

pub use control::Shared;
pub use stats::WorkerStats;

/// An interface the tier takes packets from and sends by.
#[derive(Debug, Clone)]
pub struct TierInterface {
    pub name: String,
    pub ifindex: u32,
    pub mac: [u8; 6],
    /// The interface's slot in the program's socket map.
    pub xsk_slot: u32,
}

/// How to run the tier.
#[derive(Debug, Clone)]
pub struct TierConfig {
    /// One worker on each of these CPUs; worker `i` is the XDP program's
    /// worker `i` (the program must be loaded for as many).
    pub cpus: Vec<usize>,
    pub interfaces: Vec<TierInterface>,
    pub slb: slb::Config,
    /// Hybrid: the fast table's offload policy and bound.
    pub offload: Option<OffloadConfig>,
    pub socket: weir_afxdp::Config,
    /// How XDP distributes packets to the workers (its `workers` is the
    /// number of CPUs).
    pub distribution: DistributionConfig,
    /// The reorder stage of spread packets; None turns it off.
    pub reorder: Option<ReorderConfig>,
    /// TSC cycles of added work per packet (0: none).
    pub cost_cycles: u64,
}

/// The running tier; stops its threads when dropped (the sockets close,
/// and the kernel takes them out of the socket map).
pub struct SoftwareTier {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub shared: Arc<Shared>,
}

/// How long the workers may take to apply the first services snapshot.
const SERVICES_WAIT: Duration = Duration::from_secs(5);
/// How long the start waits for the DIPs' next hops to resolve.
const NEXT_HOP_WAIT: Duration = Duration::from_secs(2);

/// The most queues of one interface the tier takes sockets on.
const MAX_QUEUES: u32 = weir_abi::WEIR_MAX_QUEUES;

impl SoftwareTier {
    /// Opens every worker's socket on every queue of every interface (the
    /// workers' sockets of one queue share its UMEM), registers each in the
    /// program's socket map (`maps` must be the loading process's), and
    /// starts the workers and the control thread. All or nothing: on an
    /// error no socket stays registered.
    pub fn start(cfg: &TierConfig, maps: &Maps, pin_dir: &std::path::Path) -> Result<SoftwareTier> {
        let workers = cfg.cpus.len();
        if workers == 0 {
            bail!("the software tier needs at least one worker CPU");
        }
        if u32::try_from(workers).ok() != Some(maps.workers()) {
            bail!(
                "{workers} workers, but the program was loaded for {}",
                maps.workers()
            );
        }
        if usize::from(cfg.distribution.workers) != workers {
            bail!(
                "the distribution is for {} workers, not {workers}",
                cfg.distribution.workers
            );
        }
        cfg.distribution
            .validate()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if cfg.cost_cycles > 0 && !cost::AVAILABLE {
            bail!("cost_cycles needs the x86-64 time-stamp counter, which this machine lacks");
        }
        let mut slb = Slb::new(cfg.slb.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        for i in &cfg.interfaces {
            slb.services_mut().set_interface(i.ifindex, i.mac);
        }
        // ports[w]: worker w's sockets, in the same (interface, queue) order
        // for every worker.
        let mut ports: Vec<Vec<worker::Port>> = (0..workers).map(|_| Vec::new()).collect();
        for iface in &cfg.interfaces {
            for queue in 0..MAX_QUEUES {
                let group = match Socket::group(&iface.name, queue, &cfg.socket, workers) {
                    Ok(g) => g,
                    Err(weir_afxdp::Error::NoQueue { .. }) if queue > 0 => break,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("opening the AF_XDP sockets of {} queue {queue}", iface.name)
                        })
                    }
                };
                for (w, socket) in group.into_iter().enumerate() {
                    // An AF_XDP socket's descriptor, borrowed for the XSKMAP
                    // update (xsk-rs hands out only the raw number).
                    // SAFETY: the socket outlives this call.
                    let fd = unsafe { BorrowedFd::borrow_raw(socket.fd()) };
                    maps.put_worker(iface.xsk_slot, queue, w as u32, &fd)?;
                    ports[w].push(worker::Port {
                        socket,
                        ifindex: iface.ifindex,
                    });
                }
            }
        }
        if ports[0].is_empty() {
            bail!("the software tier has no interface to take packets from");
        }
        let spreading = cfg.distribution.mode != Mode::Flow;
        let streams: Arc<[streams::Stream]> = match cfg.reorder {
            Some(r) if spreading => (0..ports[0].len())
                .map(|s| {
                    // Spray sends number `seq` to worker `seq % workers`.
                    let round_robin =
                        (cfg.distribution.mode == Mode::Spray).then_some(workers as u32);
                    streams::Stream::new(s % workers, r, round_robin)
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .into(),
            _ => Vec::new().into(),
        };
        let offload = match &cfg.offload {
            Some(o) => Some(Offload::new(o.clone()).map_err(|e| anyhow::anyhow!("offload: {e}"))?),
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let (to_worker, worker_rx) = channel();
        let (to_control, control_rx) = channel();
        let balancer = Arc::new(Mutex::new(balancer::Balancer::new(
            slb,
            offload,
            to_control.clone(),
        )));
        let spreader = match cfg.distribution.mode {
            Mode::Adaptive => Some(spread::Spreader::new(
                &cfg.distribution,
                &cfg.cpus,
                weir_sys::monotonic_coarse_ns(),
            )?),
            _ => None,
        };
        let mut control_maps = Maps::pinned(pin_dir)?;
        // Adaptive's per-bucket maps are not pinned: the loader's handles.
        if let (Some(_), Some((sets, packets))) = (&spreader, &maps.dist) {
            control_maps.dist = Some((
                libbpf_rs::MapHandle::try_from(sets)?,
                libbpf_rs::MapHandle::try_from(packets)?,
            ));
        }
        let control = control::Control {
            maps: control_maps,
            ifaces: cfg
                .interfaces
                .iter()
                .map(|i| (i.name.clone(), (i.ifindex, i.mac)))
                .collect::<HashMap<_, _>>(),
            policy: cfg.offload.as_ref().map(|o| o.policy),
            spreader,
            to_worker,
            from_worker: control_rx,
            shared: shared.clone(),
            stop: stop.clone(),
        };
        // Threads go into the tier as they start: on an error, dropping it
        // stops the ones already running.
        let mut tier = SoftwareTier {
            stop: stop.clone(),
            threads: Vec::with_capacity(workers + 1),
            shared,
        };
        let mut worker_rx = Some(worker_rx);
        for (id, (ports, &cpu)) in ports.into_iter().zip(&cfg.cpus).enumerate() {
            let max_burst = ports[0].socket.batch_size() as u32;
            let meter = UtilizationMeter::new(max_burst, ports.len())
                .map_err(|e| anyhow::anyhow!("the utilization metric: {e}"))?;
            let w = worker::Worker {
                id,
                cpu,
                ports,
                balancer: balancer.clone(),
                streams: streams.clone(),
                cost_cycles: cfg.cost_cycles,
                meter,
                rx: worker_rx.take(),
                tx: to_control.clone(),
                shared: tier.shared.clone(),
                stop: stop.clone(),
            };
            tier.threads.push(
                std::thread::Builder::new()
                    .name(format!("weir-worker-{id}"))
                    .spawn(move || {
                        w.run();
                    })?,
            );
        }
        tier.threads.push(
            std::thread::Builder::new()
                .name("weir-tier-ctl".into())
                .spawn(move || control.run())?,
        );
        tier.wait_until_ready()?;
        Ok(tier)
    }

    /// Waits until the workers have the services (an error after
    /// [`SERVICES_WAIT`]) and, at most [`NEXT_HOP_WAIT`], every live DIP's
    /// next hop: the caller attaches XDP next, and a packet for a DIP with
    /// no next hop is dropped (the control thread primes the kernel's
    /// neighbour resolution, and a SYN that is dropped would be retried a
    /// second later).
    fn wait_until_ready(&self) -> Result<()> {
        let ready = &self.shared.ready;
        let start = Instant::now();
        while !ready.services.load(Ordering::Acquire) {
            if start.elapsed() > SERVICES_WAIT {
                bail!(
                    "the software tier's workers did not take the services within {SERVICES_WAIT:?} \
                     (see the workers' CPUs in dataplane.workers: are they busy or isolated?)"
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        while !ready.next_hops.load(Ordering::Acquire) && start.elapsed() < NEXT_HOP_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        let unresolved = ready.unresolved.load(Ordering::Relaxed);
        if !ready.next_hops.load(Ordering::Acquire) && unresolved > 0 {
            eprintln!(
                "weir: software tier: {unresolved} live DIP(s) have no next hop yet (no \
                 neighbour entry); their packets are dropped (drop_no_route) until the kernel \
                 resolves them"
            );
        }
        Ok(())
    }

    /// The workers' last reports.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for SoftwareTier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
