//! The packet-rate testbed of `weir-lab bench forward` and its trials.
//!
//! ```text
//!  client ── wc0 [lb: weir serve | nftables DNAT] wbI ── backend I [weir_sink]
//!  weir_gen (generator CPU)   NAPI of wc0 (lb CPU)        NAPI of eth0 (generator CPU)
//! ```
//! veth runs the receiving end of a pair where the sender runs, so without
//! care the load balancer's work would share the generator's CPU. Every
//! receiving veth here runs its NAPI context in a kernel thread (threaded
//! NAPI): the load balancer's (wc0, where weir's XDP or the kernel's
//! forwarding and netfilter run) is pinned to the load balancer's CPU, the
//! backends' (where the sinks count) to the generator's, all at real-time
//! priority so that other work on a shared machine does not preempt them
//! (the load balancer's CPU stands for a dedicated core). The load balancer's
//! work is then that one thread's, and its CPU time (utime + stime in
//! /proc/<tid>/stat) is the load balancer's cost whatever else the shared
//! machine runs on that CPU.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;
use weir_dataplane::runstats::RunStats;

use super::balancer::{self, Balancer, Running, Service};
use crate::topology::{resolve_backend_neighbours, Lab};
use crate::traffic::{mac_in, offer, FlowDist, GenSpec, OfferSpec, Sink, SinkOptions, L4};

/// The VIP (UDP) and the port the DIPs serve on: the same, so that dsr,
/// which keeps the port, reaches the same sinks.
const VIP: &str = "10.77.100.1:9";
/// Client sources: 2^22 addresses, then ports from 1024.
const SOURCES: (&str, u8) = ("10.64.0.0", 10);
/// Frame length without the FCS: 64 bytes on the wire.
const FRAME: usize = 60;
/// Time for frames still in rings to reach the sinks after a trial.
const DRAIN: Duration = Duration::from_millis(200);

/// One trial at the generator's full speed.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub offered: u64,
    pub offered_pps: f64,
    /// Counted by the sinks at the backends.
    pub received: u64,
    pub received_pps: f64,
    /// CPU time of the load balancer's receive thread over the trial's
    /// wall time (1: it never waited for packets, or was never preempted).
    pub lb_cpu_busy: f64,
    /// The receive thread's CPU time per received packet.
    pub lb_cpu_ns_per_packet: Option<f64>,
    /// weir's XDP program: BPF run time per run (every packet it saw).
    pub bpf_ns_per_packet: Option<f64>,
    pub elapsed_s: f64,
}

/// The lab, its sinks, and the CPUs.
pub struct Testbed {
    /// Dropped before the lab: they give the backends' interfaces back.
    sinks: Vec<Sink>,
    lab: Lab,
    exe: PathBuf,
    lb_mac: [u8; 6],
    service: Service,
}

/// The generator's CPU and the load balancer's.
pub fn cpus() -> Result<(usize, usize)> {
    let cpus = crate::cpus::allowed()?;
    ensure!(
        cpus.len() >= 2,
        "weir-lab bench forward needs 2 CPUs (the generator's and the load balancer's); this \
         process may run on {cpus:?}"
    );
    Ok((cpus[0], cpus[cpus.len() - 1]))
}

impl Testbed {
    /// Builds the lab with `dips` backends, a sink on each, their NAPI
    /// threads on the generator's CPU.
    pub fn build(exe: &Path, dips: usize) -> Result<Testbed> {
        let (generator_cpu, lb_cpu) = cpus()?;
        let lab = Lab::build(dips).context("building the lab")?;
        let sinks = lab
            .backends
            .iter()
            .map(|ns| {
                Sink::attach(
                    ns,
                    "eth0",
                    &SinkOptions {
                        proto: Some(Proto::Udp),
                        dport: Some(vip().port()),
                        drop: true,
                        track_flows: 0,
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        for ns in &lab.backends {
            balancer::thread_napi(ns, "eth0", generator_cpu)?;
        }
        let lb_mac = mac_in(&lab.lb, "wc0")?;
        resolve_backend_neighbours(&lab)?;
        Ok(Testbed {
            sinks,
            lab,
            exe: exe.to_path_buf(),
            lb_mac,
            service: Service {
                vip: vip(),
                proto: Proto::Udp,
                receive: vec!["wc0".into()],
                encap_mtu: None,
                lb_cpu,
                direct_return: false,
            },
        })
    }

    /// Starts `balancer` with every backend as a DIP, its receive path on
    /// the load balancer's CPU.
    pub fn start(&self, balancer: Balancer) -> Result<Running<'_>> {
        balancer::start(&self.lab, &self.exe, balancer, &self.service)
    }

    fn received(&self) -> Result<u64> {
        self.sinks
            .iter()
            .map(|s| Ok(s.stats()?.packets))
            .sum::<Result<u64>>()
    }

    fn packets(&self, flows: u32) -> Result<GenSpec> {
        let net: IpAddr = SOURCES.0.parse()?;
        let mut spec = GenSpec::new(net, vip(), L4::Udp);
        spec.sources.prefix = SOURCES.1;
        spec.sources.port = 1024;
        spec.sources.ports = 65536 - 1024;
        spec.flows = flows;
        spec.dist = FlowDist::RoundRobin;
        spec.dst_mac = self.lb_mac;
        spec.fill_to(FRAME);
        spec.validate()?;
        Ok(spec)
    }

    /// Sends every flow's first packets, so the trial measures established
    /// flows (the connection tables, conntrack, the neighbour entries).
    pub fn warm(&self, flows: u32) -> Result<()> {
        let spec = OfferSpec {
            rate: Some(500_000.0),
            count: Some(u64::from(flows) * 2),
            ..OfferSpec::new(self.packets(flows)?, Duration::from_secs(60))
        };
        offer(&self.lab.client, "eth0", &spec)?;
        std::thread::sleep(DRAIN);
        Ok(())
    }

    /// Offers `flows` flows round robin as fast as the generator goes for
    /// `duration`, and measures at the backends and on the load balancer's
    /// CPU.
    pub fn trial(&self, running: &Running, flows: u32, duration: Duration) -> Result<Trial> {
        let bed = self;
        let napi_tid = running.napi_tids[0];
        let spec = OfferSpec::new(bed.packets(flows)?, duration);
        let received0 = bed.received()?;
        let cpu0 = crate::cpus::thread_cpu_ticks(napi_tid, napi_tid)?;
        let bpf0 = running.prog_id.map(RunStats::of_id).transpose()?;
        let start = Instant::now();
        let offered = offer(&bed.lab.client, "eth0", &spec)?;
        std::thread::sleep(DRAIN);
        let elapsed = start.elapsed();
        let cpu1 = crate::cpus::thread_cpu_ticks(napi_tid, napi_tid)?;
        let bpf1 = running.prog_id.map(RunStats::of_id).transpose()?;
        let received = bed.received()? - received0;
        let busy_ns = cpu1.saturating_sub(cpu0) as f64 * 1e9 / crate::cpus::ticks_per_second();
        Ok(Trial {
            offered: offered.sent,
            offered_pps: offered.pps,
            received,
            received_pps: received as f64 / offered.elapsed.as_secs_f64(),
            lb_cpu_busy: busy_ns / 1e9 / elapsed.as_secs_f64(),
            lb_cpu_ns_per_packet: (received > 0).then(|| busy_ns / received as f64),
            bpf_ns_per_packet: bpf0.zip(bpf1).and_then(|(a, b)| b.ns_per_run_since(&a)),
            elapsed_s: elapsed.as_secs_f64(),
        })
    }
}

fn vip() -> SocketAddr {
    VIP.parse().expect("the bench's VIP parses")
}
