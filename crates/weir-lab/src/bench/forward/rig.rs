//! The testbed of `weir bench forward` and its trials.
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

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;
use weir_dataplane::runstats::RunStats;

use crate::daemon::Daemon;
use crate::topology::{attach_pass, backend_addr, resolve_backend_neighbours, Lab};
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
/// Real-time priority of the NAPI threads: this machine is shared, and a
/// receive path that other work preempts overflows its 256-entry veth ring
/// long before it is busy.
const NAPI_PRIORITY: i32 = 50;
/// The longest wait for a threaded NAPI context's kernel thread.
const NAPI_WAIT: Duration = Duration::from_secs(3);

/// A load balancer under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    /// weir serve, nat VIP, default configuration (FIB lookups on).
    WeirNat,
    /// weir serve, dsr VIP (MAC rewrite), default configuration.
    WeirDsr,
    /// The kernel's stateful NAT: nftables DNAT with numgen over the DIPs.
    Nftables,
}

impl Balancer {
    pub fn label(self) -> &'static str {
        match self {
            Balancer::WeirNat => "weir nat",
            Balancer::WeirDsr => "weir dsr",
            Balancer::Nftables => "nftables DNAT",
        }
    }

    fn is_weir(self) -> bool {
        self != Balancer::Nftables
    }
}

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
    pub generator_cpu: usize,
    pub lb_cpu: usize,
}

/// A running load balancer; stopping it leaves the lab as it was.
pub struct Running<'a> {
    bed: &'a Testbed,
    balancer: Balancer,
    daemon: Option<Daemon>,
    prog_id: Option<u32>,
    /// The kernel thread of the load balancer's receive path.
    napi_tid: u32,
}

impl Testbed {
    /// Builds the lab with `dips` backends, a sink on each, their NAPI
    /// threads on the generator's CPU.
    pub fn build(exe: &Path, dips: usize) -> Result<Testbed> {
        let cpus = crate::cpus::allowed()?;
        ensure!(
            cpus.len() >= 2,
            "weir bench forward needs 2 CPUs (the generator's and the load balancer's); this \
             process may run on {cpus:?}"
        );
        let (generator_cpu, lb_cpu) = (cpus[0], cpus[cpus.len() - 1]);
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
            thread_napi(ns, "eth0", generator_cpu)?;
        }
        let lb_mac = mac_in(&lab.lb, "wc0")?;
        resolve_backend_neighbours(&lab)?;
        Ok(Testbed {
            sinks,
            lab,
            exe: exe.to_path_buf(),
            lb_mac,
            generator_cpu,
            lb_cpu,
        })
    }

    /// Starts `balancer` with every backend as a DIP, its receive path on
    /// the load balancer's CPU.
    pub fn start(&self, balancer: Balancer) -> Result<Running<'_>> {
        let mut running = Running {
            bed: self,
            balancer,
            daemon: None,
            prog_id: None,
            napi_tid: 0,
        };
        if balancer.is_weir() {
            let mut d = Daemon::new(&self.exe, &self.lab.lb)?;
            d.write_config(&self.weir_config(balancer))?;
            d.start()
                .with_context(|| format!("starting weir serve ({})", balancer.label()))?;
            running.daemon = Some(d);
            running.prog_id = Some(xdp_prog_id(&self.lab.lb, "wc0")?);
        } else {
            nft(&self.lab.lb, &self.nft_ruleset())?;
            // A veth takes redirected XDP frames (the generator's) only when
            // its peer runs XDP too.
            attach_pass(&self.lab.lb, "wc0")?;
        }
        running.napi_tid = thread_napi(&self.lab.lb, "wc0", self.lb_cpu)?;
        Ok(running)
    }

    fn weir_config(&self, balancer: Balancer) -> String {
        let interfaces: Vec<String> = self
            .lab
            .lb_interfaces()
            .iter()
            .map(|i| format!("\"{i}\""))
            .collect();
        let vip = vip();
        let (mode, dip_port) = match balancer {
            // dsr keeps the VIP's port: a DIP names none.
            Balancer::WeirDsr => ("dsr", String::new()),
            _ => ("nat", format!("port = {}\n", vip.port())),
        };
        let mut c = format!(
            "[dataplane]\ninterfaces = [{}]\n\
             [[vip]]\nname = \"bench\"\naddress = \"{}\"\nport = {}\nprotocol = \"udp\"\n\
             mode = \"{mode}\"\n",
            interfaces.join(", "),
            vip.ip(),
            vip.port(),
        );
        for i in 1..=self.lab.backends.len() {
            c += &format!("[[vip.dip]]\naddress = \"{}\"\n{dip_port}", backend_addr(i));
        }
        c
    }

    /// DNAT of new flows to the VIP over the DIPs in turn (numgen inc), as
    /// an operator would write it; conntrack keeps each flow on its DIP.
    fn nft_ruleset(&self) -> String {
        let vip = vip();
        let dips: Vec<String> = (1..=self.lab.backends.len())
            .map(|i| format!("{} : {}", i - 1, backend_addr(i)))
            .collect();
        format!(
            "table ip weir_bench {{\n  chain prerouting {{\n    \
             type nat hook prerouting priority dstnat; policy accept;\n    \
             ip daddr {} udp dport {} dnat to numgen inc mod {} map {{ {} }}\n  }}\n}}\n",
            vip.ip(),
            vip.port(),
            dips.len(),
            dips.join(", ")
        )
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
}

impl Running<'_> {
    /// Offers `flows` flows round robin as fast as the generator goes for
    /// `duration`, and measures at the backends and on the load balancer's
    /// CPU.
    pub fn trial(&self, flows: u32, duration: Duration) -> Result<Trial> {
        let bed = self.bed;
        let spec = OfferSpec::new(bed.packets(flows)?, duration);
        let received0 = bed.received()?;
        let cpu0 = crate::cpus::thread_cpu_ticks(self.napi_tid, self.napi_tid)?;
        let bpf0 = self.prog_id.map(RunStats::of_id).transpose()?;
        let start = Instant::now();
        let offered = offer(&bed.lab.client, "eth0", &spec)?;
        std::thread::sleep(DRAIN);
        let elapsed = start.elapsed();
        let cpu1 = crate::cpus::thread_cpu_ticks(self.napi_tid, self.napi_tid)?;
        let bpf1 = self.prog_id.map(RunStats::of_id).transpose()?;
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

    pub fn balancer(&self) -> Balancer {
        self.balancer
    }

    /// Stops the load balancer; the lab is as before [`Testbed::start`].
    pub fn stop(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let lb = &self.bed.lab.lb;
        if let Some(mut d) = self.daemon.take() {
            d.stop()?;
        }
        if !self.balancer.is_weir() {
            crate::netns::ip_in(lb, &["link", "set", "wc0", "xdp", "off"])?;
            nft(lb, "delete table ip weir_bench\n")?;
        }
        Ok(())
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

fn vip() -> SocketAddr {
    VIP.parse().expect("the bench's VIP parses")
}

/// Feeds `ruleset` to nft inside `ns`.
fn nft(ns: &str, ruleset: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (install the nftables package)")?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(ruleset.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft in {ns}: {}\n{ruleset}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The id of the XDP program on `dev` in `ns`.
fn xdp_prog_id(ns: &str, dev: &str) -> Result<u32> {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", "dev", dev])
        .output()
        .context("running ip link")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("ip -j link show {dev} in {ns}"))?;
    v[0]["xdp"]["prog"]["id"]
        .as_u64()
        .map(|id| id as u32)
        .with_context(|| format!("no XDP program on {dev} in {ns}: {v}"))
}

/// Runs `dev`'s NAPI context in a kernel thread pinned to `cpu`, and
/// returns the thread. The interface must have a NAPI context (an XDP
/// program on a veth) with one receive queue.
fn thread_napi(ns: &str, dev: &str, cpu: usize) -> Result<u32> {
    let name = format!("napi/{dev}-");
    let before = napi_threads(&name)?;
    let status = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        // Off first: a NAPI context re-created since an earlier call (a new
        // XDP attach) already has a thread, which must not be taken for ours.
        .arg(format!(
            "echo 0 > /sys/class/net/{dev}/threaded && echo 1 > /sys/class/net/{dev}/threaded"
        ))
        .status()
        .context("running sh")?;
    ensure!(status.success(), "threaded NAPI on {dev} in {ns}");
    // Other labs' interfaces may share the name: ours is the new thread.
    let deadline = Instant::now() + NAPI_WAIT;
    loop {
        let new: Vec<u32> = napi_threads(&name)?.difference(&before).copied().collect();
        if let [tid] = new[..] {
            crate::cpus::pin(tid, cpu)?;
            crate::cpus::realtime(tid, NAPI_PRIORITY)?;
            return Ok(tid);
        }
        ensure!(
            new.len() < 2,
            "{dev} in {ns} has {} NAPI threads: the bench expects one queue",
            new.len()
        );
        ensure!(
            Instant::now() < deadline,
            "no NAPI thread for {dev} in {ns} after {NAPI_WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kernel threads whose name starts with `prefix`.
fn napi_threads(prefix: &str) -> Result<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").context("reading /proc")? {
        let e = e?;
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)) {
            out.insert(pid);
        }
    }
    Ok(out)
}
