//! The testbed of `weir-lab cores` and its two kinds of trial.
//!
//! ```text
//!  client ── wc0 [lb: weir serve, workers on both CPUs] wb1 ── backend [weir_sink | iperf3 -s]
//!  weir_gen | iperf3 -c
//! ```
//! One lab for the whole run. weir serves two nat VIPs over the one
//! backend: the generator's 64-byte TCP frames end in a sink there
//! (counted and dropped); iperf3's TCP flow ends in an iperf3 server. Every point gets a
//! fresh `weir serve` with its distribution, reorder stage and cost.
//!
//! CPUs: this machine has two, and the workers take both. The generator
//! (an AF_XDP sender, [`super::tx`]) runs on the first, with the XDP
//! steering and socket copies its sends trigger (the work a NIC and its
//! interrupts would do); it sleeps between bursts and takes only what its
//! rate needs. The worker that carries a single flow in flow mode, which
//! also owns the client side's reorder stage (and sends what it releases),
//! runs on the other CPU, so no mode is penalised by sharing its busiest
//! worker's CPU with the generator.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::{FlowTuple, Proto};
use weir_software_engine::distribution::{bucket_of, home_worker, Mode, DEFAULT_BUCKETS};

use super::tx;
use crate::daemon::Daemon;
use crate::topology::{backend_addr, Lab};
use crate::traffic::{mac_in, tcp_flags, FlowDist, GenSpec, Sink, SinkOptions, L4};

/// The generator's VIP (nat, TCP), to a port the sink counts and drops.
const GEN_VIP: &str = "10.77.100.1:9000";
const GEN_PORT: u16 = 9000;
/// iperf3's VIP (nat, TCP), to its server's port, which the sink leaves
/// alone.
const IPERF_VIP: &str = "10.77.100.1:5201";
const IPERF_PORT: u16 = 5201;
/// The generator's single flow comes from this address; its port is
/// chosen so that flow mode puts it on worker 0 (see the module docs).
const SOURCE: &str = "10.64.0.1";
/// Many flows: 2^16 addresses, then ports from 1024.
const SOURCES: (&str, u8) = ("10.64.0.0", 16);
/// Frame length without the FCS: 64 bytes on the wire.
const FRAME: usize = 60;
/// Time for frames still in rings to reach the sink after a trial.
const DRAIN: Duration = Duration::from_millis(200);
/// The longest wait for a fresh weir to forward (its next hops resolve).
const READY_WAIT: Duration = Duration::from_secs(10);

/// A point's weir: how packets reach the workers, and what each costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setting {
    pub mode: Mode,
    pub reorder: bool,
    /// The reorder stage's hold time, if not weir's default.
    pub hold_us: Option<u64>,
    /// TSC cycles a packet (0: none added).
    pub cost_cycles: u64,
}

impl Setting {
    /// "flow", "spray", "spray, hold 20 ms", "spray, no reorder", ...
    pub fn name(&self) -> String {
        match (self.mode, self.reorder, self.hold_us) {
            (Mode::Flow, _, _) => "flow".into(),
            (m, false, _) => format!("{m}, no reorder"),
            (m, true, None) => m.to_string(),
            (m, true, Some(h)) => format!("{m}, hold {} ms", h as f64 / 1000.0),
        }
    }
}

/// What one generator trial offered and the sink received.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub requested_pps: f64,
    pub offered_pps: f64,
    pub received_pps: f64,
    /// (offered - received) / offered.
    pub loss: f64,
    /// CPUs' worth of time the workers had over the trial (busy-polling
    /// workers take all they get: below 2, the rest went to the generator
    /// and to the machine's other work).
    pub workers_cpu: f64,
}

/// The workers' reorder counters at the end of a point (summed over
/// workers), from their reports.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reordering {
    pub held: u64,
    /// Released after the stage gave up a missing number.
    pub late: u64,
    /// Released out of ingress order (their number had been given up).
    pub out_of_order: u64,
    pub timeouts: u64,
}

/// The lab, its sink and the CPUs.
pub struct Testbed {
    sink: Sink,
    lab: Lab,
    exe: PathBuf,
    lb_mac: [u8; 6],
    client_mac: [u8; 6],
    /// The generator's CPU, and the other one.
    pub generator_cpu: usize,
    pub free_cpu: usize,
    /// The generator's single flow's source port (its bucket's home is
    /// worker 0).
    single_port: u16,
}

impl Testbed {
    pub fn build(exe: &Path) -> Result<Testbed> {
        let cpus = crate::cpus::allowed()?;
        ensure!(
            cpus.len() >= 2,
            "weir-lab cores needs 2 CPUs, one worker on each; this process may run on {cpus:?}"
        );
        let (generator_cpu, free_cpu) = (cpus[0], cpus[1]);
        let lab = Lab::build(1).context("building the lab")?;
        let sink = Sink::attach(
            &lab.backends[0],
            "eth0",
            &SinkOptions {
                proto: Some(Proto::Tcp),
                dport: Some(GEN_PORT),
                drop: true,
                track_flows: 0,
            },
        )?;
        let lb_mac = mac_in(&lab.lb, "wc0")?;
        let client_mac = mac_in(&lab.client, "eth0")?;
        crate::topology::resolve_backend_neighbours(&lab)?;
        Ok(Testbed {
            sink,
            lab,
            exe: exe.to_path_buf(),
            lb_mac,
            client_mac,
            generator_cpu,
            free_cpu,
            single_port: single_flow_port()?,
        })
    }

    /// The workers in the XDP program's order: worker 0 on the free CPU.
    fn workers(&self) -> String {
        format!("[{}, {}]", self.free_cpu, self.generator_cpu)
    }

    fn config(&self, s: &Setting) -> String {
        let interfaces: Vec<String> = self
            .lab
            .lb_interfaces()
            .iter()
            .map(|i| format!("\"{i}\""))
            .collect();
        let cost = if s.cost_cycles > 0 {
            format!("cost_cycles = {}\n", s.cost_cycles)
        } else {
            String::new()
        };
        let mut c = format!(
            "[dataplane]\ninterfaces = [{}]\ntier = \"software\"\nworkers = {}\n\
             distribution = \"{}\"\n{}{cost}",
            interfaces.join(", "),
            self.workers(),
            s.mode,
            match (s.mode, s.hold_us) {
                (Mode::Flow, _) => String::new(),
                (_, Some(h)) if s.reorder => format!("reorder = true\nreorder_hold_us = {h}\n"),
                _ => format!("reorder = {}\n", s.reorder),
            },
        );
        for (name, vip, port) in [("gen", GEN_VIP, GEN_PORT), ("iperf", IPERF_VIP, IPERF_PORT)] {
            let vip: SocketAddr = vip.parse().expect("VIP");
            c += &format!(
                "\n[[vip]]\nname = \"{name}\"\naddress = \"{}\"\nport = {}\n\
                 protocol = \"tcp\"\nmode = \"nat\"\n[[vip.dip]]\naddress = \"{}\"\nport = {port}\n",
                vip.ip(),
                vip.port(),
                backend_addr(1),
            );
        }
        c
    }

    /// Starts weir with `setting` and waits until it forwards.
    pub fn start(&self, setting: &Setting) -> Result<Daemon> {
        let mut d = Daemon::new(&self.exe, &self.lab.lb)?;
        d.write_config(&self.config(setting))?;
        d.start()
            .with_context(|| format!("starting weir serve ({})", setting.name()))?;
        // The workers drop what goes to a DIP whose next hop has not
        // resolved yet: offer a trickle until the sink sees it.
        let deadline = Instant::now() + READY_WAIT;
        let before = self.received()?;
        while self.received()? == before {
            ensure!(
                Instant::now() < deadline,
                "weir serve ({}) forwarded nothing in {READY_WAIT:?}",
                setting.name()
            );
            let frames = tx::frames(&self.single_flow()?, 1)?;
            self.send(&frames, 1000.0, Duration::from_millis(20))?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(d)
    }

    fn received(&self) -> Result<u64> {
        Ok(self.sink.stats()?.packets)
    }

    /// 64-byte TCP frames of one 5-tuple (seed 001 Fig. 2).
    pub fn single_flow(&self) -> Result<GenSpec> {
        let mut spec = GenSpec::new(
            SOURCE.parse()?,
            GEN_VIP.parse()?,
            L4::Tcp {
                flags: tcp_flags::ACK,
            },
        );
        spec.sources.port = self.single_port;
        spec.src_mac = self.client_mac;
        spec.dst_mac = self.lb_mac;
        spec.fill_to(FRAME);
        spec.validate()?;
        Ok(spec)
    }

    /// 64-byte TCP frames of `flows` flows, as `dist` picks them.
    pub fn many_flows(&self, flows: u32, dist: FlowDist) -> Result<GenSpec> {
        let net: IpAddr = SOURCES.0.parse()?;
        let mut spec = GenSpec::new(
            net,
            GEN_VIP.parse()?,
            L4::Tcp {
                flags: tcp_flags::ACK,
            },
        );
        spec.sources.prefix = SOURCES.1;
        spec.sources.port = 1024;
        spec.sources.ports = 65536 - 1024;
        spec.flows = flows;
        spec.dist = dist;
        spec.src_mac = self.client_mac;
        spec.dst_mac = self.lb_mac;
        spec.fill_to(FRAME);
        spec.validate()?;
        Ok(spec)
    }

    fn send(&self, frames: &[Vec<u8>], rate: f64, duration: Duration) -> Result<tx::Sent> {
        tx::send(
            &self.lab.client,
            "eth0",
            frames,
            rate,
            duration,
            self.generator_cpu,
        )
    }

    /// Sends `frames` at `rate` for `duration` from the generator's CPU and
    /// counts what reaches the sink.
    pub fn trial(
        &self,
        daemon: &Daemon,
        frames: &[Vec<u8>],
        rate: f64,
        duration: Duration,
    ) -> Result<Trial> {
        let before = self.received()?;
        let pid = daemon.pid().context("weir serve is not running")?;
        let cpu_before = (workers_cpu_time(pid), Instant::now());
        let sent = self.send(frames, rate, duration)?;
        let workers_cpu = (workers_cpu_time(pid) - cpu_before.0).as_secs_f64()
            / cpu_before.1.elapsed().as_secs_f64();
        std::thread::sleep(DRAIN);
        let received = self.received()? - before;
        let secs = sent.elapsed.as_secs_f64().max(1e-9);
        Ok(Trial {
            workers_cpu,
            requested_pps: rate,
            offered_pps: sent.packets as f64 / secs,
            received_pps: received as f64 / secs,
            loss: if sent.packets == 0 {
                0.0
            } else {
                sent.packets.saturating_sub(received) as f64 / sent.packets as f64
            },
        })
    }

    /// The receiving backend's namespace (iperf3's server).
    pub fn backend_ns(&self) -> &str {
        &self.lab.backends[0]
    }

    pub fn client_ns(&self) -> &str {
        &self.lab.client
    }
}

/// CPU time the worker threads of weir serve `pid` have had.
fn workers_cpu_time(pid: u32) -> Duration {
    crate::cpus::threads_cpu_time(pid, "weir-worker").unwrap_or_default()
}

/// The workers' reorder counters, summed, from their last reports.
pub fn reordering(d: &Daemon) -> Result<Reordering> {
    // A report covers the point's end once a new one is written.
    std::thread::sleep(Duration::from_millis(1200));
    let text = std::fs::read_to_string(d.run_dir().join("workers.json"))
        .context("reading the workers' reports")?;
    let workers: Vec<serde_json::Value> = serde_json::from_str(&text)?;
    let mut r = Reordering::default();
    for w in &workers {
        let n = |k: &str| w["reorder"][k].as_u64().unwrap_or(0);
        r.held += n("held");
        r.late += n("late");
        r.out_of_order += n("out_of_order");
        r.timeouts += n("timeouts");
    }
    Ok(r)
}

/// A source port for the single flow whose bucket's home is worker 0
/// (weir's default hash seed, two workers).
fn single_flow_port() -> Result<u16> {
    let src: IpAddr = SOURCE.parse()?;
    let vip: SocketAddr = GEN_VIP.parse()?;
    for port in 40000..41000 {
        let key = FlowTuple {
            src,
            sport: port,
            dst: vip.ip(),
            dport: vip.port(),
            proto: Proto::Tcp,
        }
        .key();
        let hash = weir_core::flow_hash::flow_hash(&key, weir_core::flow_hash::DEFAULT_SEED);
        if home_worker(bucket_of(hash, DEFAULT_BUCKETS), 2) == 0 {
            return Ok(port);
        }
    }
    bail!("no source port in 40000..41000 puts the flow on worker 0")
}

/// What iperf3 reported for one TCP flow, and what the receiver's kernel
/// counted.
#[derive(Debug, Clone, Serialize)]
pub struct Iperf {
    pub received_gbps: f64,
    /// Segments the sender retransmitted.
    pub retransmits: u64,
    /// The receiver's TcpExt TCPOFOQueue: segments that arrived out of
    /// order and waited in its out-of-order queue.
    pub receiver_out_of_order: u64,
}

/// One iperf3 TCP flow from the client through the VIP for `duration`.
pub fn iperf(bed: &Testbed, duration: Duration) -> Result<Iperf> {
    let server_ns = bed.backend_ns().to_string();
    let mut server = Command::new("ip")
        .args(["netns", "exec", &server_ns, "iperf3", "-s", "-1", "-p"])
        .arg(IPERF_PORT.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting iperf3 -s (install iperf3)")?;
    // iperf3 listens within a few milliseconds.
    std::thread::sleep(Duration::from_millis(300));
    let ofo_before = tcp_ext(&server_ns, "TCPOFOQueue")?;
    let vip: SocketAddr = IPERF_VIP.parse()?;
    let out = Command::new("ip")
        .args(["netns", "exec", bed.client_ns(), "iperf3", "-J", "-c"])
        .arg(vip.ip().to_string())
        .args(["-p", &vip.port().to_string(), "-t"])
        // iperf3 takes whole seconds.
        .arg(duration.as_secs().max(1).to_string())
        .output()
        .context("running iperf3 -c")?;
    let _ = server.kill();
    let _ = server.wait();
    let ofo = tcp_ext(&server_ns, "TCPOFOQueue")? - ofo_before;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("iperf3's JSON: {}", String::from_utf8_lossy(&out.stderr)))?;
    if let Some(e) = json["error"].as_str() {
        bail!("iperf3: {e}");
    }
    let end = &json["end"];
    Ok(Iperf {
        received_gbps: end["sum_received"]["bits_per_second"]
            .as_f64()
            .context("iperf3's JSON has no end.sum_received")?
            / 1e9,
        retransmits: end["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        receiver_out_of_order: ofo,
    })
}

/// A TcpExt counter of namespace `ns` (its /proc/net/netstat).
fn tcp_ext(ns: &str, name: &str) -> Result<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/netstat"])
        .output()
        .context("reading /proc/net/netstat")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (
        lines.next().context("no TcpExt line")?,
        lines.next().context("no TcpExt values")?,
    );
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .with_context(|| format!("no TcpExt {name} in namespace {ns}"))
}
