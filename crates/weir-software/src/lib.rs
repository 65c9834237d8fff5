//! weir's software tier (HNLB's software load balancer, seed 000 section
//! III): a worker thread pinned to a core busy-polls AF_XDP sockets
//! (`weir-afxdp`), one per queue of every interface weir holds, and runs
//! each frame through the sans-IO load balancer `weir_core::slb`, which
//! decides exactly what the XDP program would. The XDP program steers to
//! the sockets what the tier must see (`tier = "software"`: every VIP
//! packet and nat reply; `"hybrid"`: what misses the bounded fast table).
//! Both tiers dispatch with the tables the controller publishes, read from
//! the maps, so a connection's DIP does not depend on the tier.
//!
//! - [`worker`]: the run-to-completion loop, cross-interface sends, the
//!   utilization metric, the hybrid tier's offload decisions.
//! - [`control`]: the thread that makes the syscalls: map reads, next hops,
//!   fast-table writes, stats for `weir status` and /metrics.
//! - [`tables`]: VIPs, DIP slots and active AWFD tables from the maps.
//! - [`nexthop`]: each DIP's egress interface and MACs.
//!
//! One worker runs in this release: a connection's packets and its
//! replies arrive on different queues, and workers do not share their
//! tables (spreading over cores is the next step).

pub mod clock;
pub mod control;
pub mod nexthop;
pub mod stats;
pub mod tables;
pub mod worker;

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use weir_afxdp::Socket;
use weir_core::offload::{Offload, OffloadConfig};
use weir_core::slb::{self, Slb};
use weir_core::utilization::UtilizationMeter;
use weir_dataplane::maps::Maps;

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
    /// The worker's CPU.
    pub cpu: usize,
    pub interfaces: Vec<TierInterface>,
    pub slb: slb::Config,
    /// Hybrid: the fast table's offload policy and bound.
    pub offload: Option<OffloadConfig>,
    pub socket: weir_afxdp::Config,
}

/// The running tier; stops its threads when dropped (the sockets close,
/// and the kernel takes them out of the socket map).
pub struct SoftwareTier {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub shared: Arc<Shared>,
}

/// The most queues of one interface the tier takes sockets on.
const MAX_QUEUES: u32 = weir_abi::WEIR_MAX_QUEUES;

impl SoftwareTier {
    /// Opens a socket on every queue of every interface, registers each in
    /// the program's socket map (`maps` must be the loading process's), and
    /// starts the worker and the control thread. All or nothing: on an
    /// error no socket stays registered.
    pub fn start(cfg: &TierConfig, maps: &Maps, pin_dir: &std::path::Path) -> Result<SoftwareTier> {
        let mut slb = Slb::new(cfg.slb.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        for i in &cfg.interfaces {
            slb.services_mut().set_interface(i.ifindex, i.mac);
        }
        let mut ports = Vec::new();
        for iface in &cfg.interfaces {
            for queue in 0..MAX_QUEUES {
                let socket = match Socket::new(&iface.name, queue, &cfg.socket) {
                    Ok(s) => s,
                    Err(weir_afxdp::Error::NoQueue { .. }) if queue > 0 => break,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("opening the AF_XDP socket of {} queue {queue}", iface.name)
                        })
                    }
                };
                // SAFETY: the socket outlives this call.
                let fd = unsafe { BorrowedFd::borrow_raw(socket.fd()) };
                maps.put_worker(iface.xsk_slot, queue, 0, &fd)?;
                ports.push(worker::Port {
                    socket,
                    ifindex: iface.ifindex,
                });
            }
        }
        if ports.is_empty() {
            bail!("the software tier has no interface to take packets from");
        }
        let max_burst = ports[0].socket.batch_size() as u32;
        let meter = UtilizationMeter::new(max_burst, ports.len())
            .map_err(|e| anyhow::anyhow!("the utilization metric: {e}"))?;
        let offload = match &cfg.offload {
            Some(o) => Some(Offload::new(o.clone()).map_err(|e| anyhow::anyhow!("offload: {e}"))?),
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let (to_worker, worker_rx) = channel();
        let (to_control, control_rx) = channel();
        let w = worker::Worker {
            cpu: cfg.cpu,
            ports,
            slb,
            meter,
            offload,
            rx: worker_rx,
            tx: to_control,
            stop: stop.clone(),
            vips: Vec::new(),
        };
        let control = control::Control {
            maps: Maps::pinned(pin_dir)?,
            ifaces: cfg
                .interfaces
                .iter()
                .map(|i| (i.name.clone(), (i.ifindex, i.mac)))
                .collect::<HashMap<_, _>>(),
            policy: cfg.offload.as_ref().map(|o| o.policy),
            to_worker,
            from_worker: control_rx,
            shared: shared.clone(),
            stop: stop.clone(),
        };
        let threads = vec![
            std::thread::Builder::new()
                .name("weir-worker".into())
                .spawn(move || {
                    w.run();
                })?,
            std::thread::Builder::new()
                .name("weir-tier-ctl".into())
                .spawn(move || control.run())?,
        ];
        Ok(SoftwareTier {
            stop,
            threads,
            shared,
        })
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
