//! The HTTP trials of `weir-lab bench forward`: requests per second and
//! latency through each load balancer with keep-alive connections and with
//! a connection per request (`Connection: close`), and what the load
//! balancer spends per request and per new connection.
//!
//! ```text
//!  client ── wc0 [lb: weir | nftables | HAProxy] wbI ── backend I [HTTP server]
//!  HTTP clients, NAPI of eth0  NAPI of wc0, wbI; daemon/HAProxy  NAPI of eth0, server
//!  (generator CPU)             (load balancer's CPU)             (generator CPU)
//!     rbI ─────────────────── DSR return path ─────────────────── eth1
//!  weir dsr's replies (from the VIP); the others' go back through the LB
//! ```
//! DSR's point is that the DIPs' replies reach the client without the load
//! balancer, so the lab gives weir dsr that path: a link from every backend
//! into the client's namespace, which replies from the VIP take while weir
//! dsr runs (a source rule in each backend; see
//! [`crate::topology::wire_direct_return`]). nat, nftables and HAProxy
//! rewrite or end the connection at the load balancer, so their replies
//! (from the backends' own addresses) go back through it; so do weir dsr's
//! as `weir-dsr-via-lb`, the row that shows what the return path changes.
//! The client's receive of the direct replies runs on the backends' CPU
//! (the generator's), where its NAPI thread for the other replies runs
//! too. Each trial counts the packets the load balancer's backend-side
//! interfaces received: the replies that crossed it.
//! The load balancer's CPU time in a trial is the sum of
//! - the kernel's: the CPU time of the NAPI threads of its interfaces
//!   (threaded NAPI puts every receive path of the namespace in a kernel
//!   thread of its own, so their utime + stime is all the softirq work the
//!   namespace's packets cause: XDP, forwarding, conntrack, veth transmit),
//!   less the BPF run time, which runs inside them;
//! - BPF: weir's XDP programs' run_time_ns (BPF_ENABLE_STATS);
//! - user space: the weir daemon's or HAProxy's process CPU time (every
//!   thread's). A closed connection costs weir's sweeper its delete some
//!   10 s after the connection's last packet: after a close-mode trial
//!   through weir the bench waits for that sweep and adds the sweeper's
//!   time meanwhile, so the deferred part of a connection is counted.
//!
//! Every thread's time is the scheduler's run time
//! (/proc/TID/schedstat, ns), not /proc's 10 ms clock ticks.
//!
//! The client and the backends run on the other CPU; the load balancer's
//! NAPI threads run at real-time priority on its CPU, so the shared
//! machine's other work does not change the load balancer's share.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;
use weir_dataplane::runstats::RunStats;

use super::balancer::{self, Balancer, Running, Service};
use super::http_load::{self, ClientRecord, HttpMode, HttpServer};
use super::packet_mix::PacketMix;
use super::run_time;
use crate::netns::sysctl_in;
use crate::topology::{resolve_backend_neighbours, rx_packets, wire_direct_return, Lab};

/// The HTTP VIP; the backends serve on its port (nat's DIP port, and the
/// port dsr keeps).
const VIP: &str = "10.77.100.1:80";
/// Server threads per backend: at least every client connection that
/// could land on one backend.
const WORKERS_PER_BACKEND_MIN: usize = 16;
/// weir's sweeper thread, whose deletes of a trial's closed connections
/// come after the trial.
const SWEEPER: &str = "weir-sweeper";

/// One HTTP trial through one balancer.
#[derive(Debug, Clone, Serialize)]
pub struct HttpTrial {
    pub mode: HttpMode,
    pub requests: u64,
    pub connections: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub requests_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The load balancer's NAPI threads' CPU time, ns (BPF included).
    pub napi_ns: f64,
    /// weir's XDP programs' run time, ns, and runs.
    pub bpf_ns: Option<f64>,
    pub bpf_runs: Option<u64>,
    /// The daemon's (weir) or the proxy's (HAProxy) process CPU time, ns;
    /// weir's in close mode with its sweeper's deletes of the trial's
    /// connections after it.
    pub process_ns: Option<f64>,
    /// Of it, each thread's (by name, threads of one name summed), ns:
    /// where the daemon's time goes (sweeper, API, next hops, ...).
    pub process_threads_ns: BTreeMap<String, f64>,
    /// weir's packets of each kind per connection (its data-plane counters).
    pub packets_per_connection: Option<PacketMix>,
    /// Packets the load balancer's interfaces towards the backends
    /// received: the backends' replies (and anything else they sent) that
    /// crossed the load balancer.
    pub lb_rx_from_backends: u64,
    pub elapsed_s: f64,
}

impl HttpTrial {
    /// All of the load balancer's CPU time, ns.
    pub fn lb_ns(&self) -> f64 {
        self.napi_ns.max(self.bpf_ns.unwrap_or(0.0)) + self.process_ns.unwrap_or(0.0)
    }

    /// The kernel's share: NAPI time outside the BPF programs.
    pub fn kernel_ns(&self) -> f64 {
        (self.napi_ns - self.bpf_ns.unwrap_or(0.0)).max(0.0)
    }

    /// Per new connection: in close mode, per request.
    pub fn per_connection(&self, ns: f64) -> Option<f64> {
        (self.connections > 0).then(|| ns / self.connections as f64)
    }
}

/// The HTTP lab: servers at every backend.
pub struct HttpTestbed {
    /// Held while the lab lives, and dropped before it.
    _servers: Vec<HttpServer>,
    lab: Lab,
    exe: PathBuf,
    service: Service,
    /// The load balancer's interfaces towards the backends.
    towards_backends: Vec<String>,
    generator_cpu: usize,
}

impl HttpTestbed {
    pub fn build(
        exe: &Path,
        dips: usize,
        connections: usize,
        generator_cpu: usize,
        lb_cpu: usize,
    ) -> Result<HttpTestbed> {
        let lab = Lab::build(dips).context("building the HTTP lab")?;
        wire_direct_return(&lab).context("the HTTP lab's DSR return path")?;
        // A connection per request cycles through the client's ports.
        sysctl_in(&lab.client, "net.ipv4.ip_local_port_range", "1024 65535")?;
        let vip: SocketAddr = VIP.parse().expect("the HTTP VIP parses");
        let workers = connections.max(WORKERS_PER_BACKEND_MIN);
        let servers = lab
            .backends
            .iter()
            .map(|ns| HttpServer::start(ns, vip.port(), workers, generator_cpu))
            .collect::<Result<Vec<_>>>()?;
        for ns in &lab.backends {
            balancer::thread_napi(ns, "eth0", generator_cpu)?;
        }
        balancer::thread_napi(&lab.client, "eth0", generator_cpu)?;
        resolve_backend_neighbours(&lab)?;
        let receive = lab.lb_interfaces();
        let towards_backends = receive[1..].to_vec();
        Ok(HttpTestbed {
            _servers: servers,
            lab,
            exe: exe.to_path_buf(),
            service: Service {
                vip,
                proto: Proto::Tcp,
                receive,
                encap_mtu: None,
                lb_cpu,
                direct_return: true,
            },
            towards_backends,
            generator_cpu,
        })
    }

    pub fn start(&self, balancer: Balancer) -> Result<Running<'_>> {
        ensure!(
            balancer != Balancer::WeirIpip,
            "the HTTP trials have no decapsulating backends: leave weir-ipip out"
        );
        balancer::start(&self.lab, &self.exe, balancer, &self.service)
    }

    /// `connections` clients in `mode` for `duration` through `running`.
    pub fn trial(
        &self,
        running: &Running,
        mode: HttpMode,
        connections: usize,
        duration: Duration,
    ) -> Result<HttpTrial> {
        let progs = running.prog_ids()?;
        let process = running.process_id();
        let napi = || -> Result<u64> {
            running
                .napi_tids
                .iter()
                .map(|&t| run_time::thread_ns(t))
                .sum()
        };
        let bpf = || -> Result<Option<RunStats>> {
            if progs.is_empty() {
                return Ok(None);
            }
            let mut sum = RunStats::default();
            for &id in &progs {
                let s = RunStats::of_id(id)?;
                sum.run_time_ns += s.run_time_ns;
                sum.run_cnt += s.run_cnt;
            }
            Ok(Some(sum))
        };
        let threads_now = || {
            process
                .map(run_time::threads_ns)
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let process_now = || -> Result<Option<u64>> {
            Ok(process
                .is_some()
                .then(threads_now)
                .transpose()?
                .map(|t| t.values().sum()))
        };
        let (napi0, bpf0, proc0, threads0) = (napi()?, bpf()?, process_now()?, threads_now()?);
        let counters0 = running.weir_counters()?;
        let from_backends = || rx_packets(&self.lab.lb, &self.towards_backends);
        let rx0 = from_backends()?;
        let start = Instant::now();
        let handles = http_load::load(
            &self.lab.client,
            self.generator_cpu,
            self.service.vip,
            mode,
            connections,
            duration,
        );
        let records: Vec<ClientRecord> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("an HTTP client thread panicked"))
            })
            .collect::<Result<_>>()?;
        let elapsed = start.elapsed();
        let (napi1, bpf1, proc1, mut threads1) = (napi()?, bpf()?, process_now()?, threads_now()?);
        let counters1 = running.weir_counters()?;
        let lb_rx_from_backends = from_backends()?.saturating_sub(rx0);
        let mut sweep_tail_ns = 0;
        if mode == HttpMode::Close && running.is_weir() {
            // The trial's last connections expire tcp_closed after their
            // last packet, and the next sweep deletes them.
            let before = threads1.get(SWEEPER).copied().unwrap_or(0);
            std::thread::sleep(sweep_tail());
            let after = threads_now()?.get(SWEEPER).copied().unwrap_or(before);
            sweep_tail_ns = after.saturating_sub(before);
            *threads1.entry(SWEEPER.to_string()).or_insert(0) += sweep_tail_ns;
        }
        let mut latencies: Vec<u32> = records
            .iter()
            .flat_map(|r| r.latencies_us.iter().copied())
            .collect();
        latencies.sort_unstable();
        let requests = latencies.len() as u64;
        let failed = records.iter().map(|r| r.failed).sum();
        let first_error = records.iter().find_map(|r| r.first_error.clone());
        ensure!(
            requests > 0,
            "no HTTP request was answered through the VIP ({failed} failed; first: {})",
            first_error.as_deref().unwrap_or("-")
        );
        let bpf_delta = bpf0.zip(bpf1).map(|(a, b)| {
            (
                b.run_time_ns.saturating_sub(a.run_time_ns) as f64,
                b.run_cnt.saturating_sub(a.run_cnt),
            )
        });
        let connections: u64 = records.iter().map(|r| r.connections).sum();
        let packets_per_connection = counters0
            .zip(counters1)
            .zip(bpf_delta)
            .map(|((a, b), (_, runs))| PacketMix::between(&a, &b, runs).per(connections as f64));
        Ok(HttpTrial {
            mode,
            requests,
            connections,
            failed,
            first_error,
            requests_per_s: requests as f64 / elapsed.as_secs_f64(),
            p50_us: percentile(&latencies, 0.50),
            p99_us: percentile(&latencies, 0.99),
            napi_ns: napi1.saturating_sub(napi0) as f64,
            bpf_ns: bpf_delta.map(|d| d.0),
            bpf_runs: bpf_delta.map(|d| d.1),
            process_ns: proc0
                .zip(proc1)
                .map(|(a, b)| (b.saturating_sub(a) + sweep_tail_ns) as f64),
            process_threads_ns: threads1
                .into_iter()
                .map(|(name, t)| {
                    let before = threads0.get(&name).copied().unwrap_or(0);
                    (name, t.saturating_sub(before) as f64)
                })
                .filter(|&(_, ns)| ns > 0.0)
                .collect(),
            packets_per_connection,
            lb_rx_from_backends,
            elapsed_s: elapsed.as_secs_f64(),
        })
    }
}

/// How long after a close-mode trial weir's sweeper has deleted the
/// trial's connections: weir's default closed timeout, a sweep interval for
/// the sweep to come round, and a second of margin.
fn sweep_tail() -> Duration {
    weir_core::conn_timeouts::ConnTimeouts::default().tcp_closed
        + weir_control::SWEEP_INTERVAL
        + Duration::from_secs(1)
}

/// The `q` quantile of sorted values (nearest rank).
fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7], 0.99), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_load_balancers_cost_splits_into_kernel_bpf_and_process() {
        let t = HttpTrial {
            mode: HttpMode::Close,
            requests: 1000,
            connections: 1000,
            failed: 0,
            first_error: None,
            requests_per_s: 100.0,
            p50_us: 1.0,
            p99_us: 2.0,
            napi_ns: 3e6,
            bpf_ns: Some(1e6),
            bpf_runs: Some(10_000),
            process_ns: Some(5e5),
            process_threads_ns: BTreeMap::new(),
            packets_per_connection: None,
            lb_rx_from_backends: 5000,
            elapsed_s: 10.0,
        };
        assert_eq!(t.kernel_ns(), 2e6);
        assert_eq!(t.lb_ns(), 3.5e6);
        assert_eq!(t.per_connection(t.lb_ns()), Some(3500.0));
    }
}
