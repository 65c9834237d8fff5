//! The testbed of `weir-lab hnlb` and its trials.
//!
//! ```text
//!  client ── wc0 [lb: weir serve, the worker on its own CPU] wbI ── backend I [weir_sink]
//!  weir_gen (generator CPU)                                        counts, drops
//! ```
//! One lab for the whole run: the client runs the generator, weir serves a
//! nat UDP VIP, and every backend counts and drops what reaches it with
//! weir_sink. Each row of a figure gets a fresh `weir serve` with its tier,
//! its connections installed before anything is measured, and the same
//! packets in every trial.
//!
//! CPUs: the generator runs on the first CPU this process may use, the
//! software tier's worker is pinned to another. veth runs the receiving end
//! of a pair on the sending CPU, so weir's XDP (the fast tier, and the
//! software tier's steering) runs on the generator's CPU: it stands in for
//! the NIC, as XDP on a SmartNIC would, and the worker's CPU is the one
//! software core HNLB measures.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;
use weir_progress::Progress;

use super::variant::{Mix, Variant};
use super::workers::{self, Ledger};
use crate::daemon::Daemon;
use crate::topology::Lab;
use crate::traffic::{mac_in, offer, start, FlowDist, GenSpec, OfferSpec, Sink, SinkOptions, L4};

/// The VIP (nat, UDP) and the DIPs' port.
const VIP: &str = "10.77.100.1:9";
const DIP_PORT: u16 = 9000;
/// Client sources: 2^22 addresses, then ports from 1024.
const SOURCES: (&str, u8) = ("10.64.0.0", 10);
/// Frame length without the FCS: 64 bytes on the wire.
const FRAME: usize = 60;
/// Time for frames still in rings to reach the sinks after a trial.
const DRAIN: Duration = Duration::from_millis(200);
/// Until a worker report covers the last packets: a window closes every
/// 500 ms, and weir serve writes the reports every second.
const REPORT_LAG: Duration = Duration::from_millis(1600);
/// The longest wait for a fresh weir's first worker report (written every
/// second).
const FIRST_REPORT: Duration = Duration::from_secs(3);
/// The software tier's worker threads (weir-software names them with this
/// prefix).
const WORKER_THREAD: &str = "weir-worker";
/// Real-time priority of the workers (see give_workers_their_core).
const WORKER_PRIORITY: i32 = 50;
/// How often an observed trial calls its observer.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(250);
/// How often a trial looks whether its traffic is done.
const WAIT_STEP: Duration = Duration::from_millis(10);
/// The longest connection install, whatever the rate.
const INSTALL_LIMIT: Duration = Duration::from_secs(120);

/// What one trial offered and what the backends received.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// The rate asked for; None: as fast as the generator goes.
    pub requested_pps: Option<f64>,
    pub offered: u64,
    pub offered_pps: f64,
    /// Counted by the sinks at the backends.
    pub received: u64,
    pub received_pps: f64,
    /// (offered - received) / offered.
    pub loss: f64,
    pub elapsed_s: f64,
    /// CPU time the software tier's worker had over the trial's wall time
    /// (a busy-polling worker has all of it): below 1 when other work took
    /// part of its CPU (this machine is shared). None without a worker.
    pub worker_cpu_share: Option<f64>,
}

#[cfg(test)]
impl Trial {
    /// A trial of 1 s at these rates (for the search's tests).
    pub fn for_rates(requested: Option<f64>, offered_pps: f64, received_pps: f64) -> Trial {
        Trial {
            requested_pps: requested,
            offered: offered_pps as u64,
            offered_pps,
            received: received_pps as u64,
            received_pps,
            loss: 1.0 - received_pps / offered_pps,
            elapsed_s: 1.0,
            worker_cpu_share: None,
        }
    }
}

/// The lab, its sinks and the CPUs.
pub struct Testbed {
    /// Dropped before the lab: they give the backends' interfaces back.
    sinks: Vec<Sink>,
    lab: Lab,
    exe: PathBuf,
    lb_mac: [u8; 6],
    pub generator_cpu: usize,
    pub worker_cpu: usize,
}

/// What a row runs.
#[derive(Debug, Clone)]
pub struct Setup {
    pub variant: Variant,
    pub connections: u32,
    pub mix: Mix,
    /// DIPs behind the VIP: backends 1..=dips.
    pub dips: usize,
    pub fast_table_size: u32,
    /// Each trial's offered time.
    pub duration: Duration,
    /// Connections are installed with this many packets each, round robin.
    pub install_rounds: u32,
    /// ... at this rate.
    pub install_pps: f64,
    /// Then the row's own traffic runs this long before the first trial
    /// (the heavy policy's measure settles, caches warm).
    pub settle: Duration,
    /// Shown in front of the row's progress lines.
    pub label: String,
    /// Whether [`Bench::ledger`] counts the workers' packets.
    pub ledgers: bool,
}

impl Testbed {
    /// Builds the lab with `backends` backends and a sink on each. The
    /// worker goes on `worker_cpu` (default: the last CPU this process may
    /// use), which must not be the generator's.
    pub fn build(exe: &Path, backends: usize, worker_cpu: Option<usize>) -> Result<Testbed> {
        let cpus = crate::cpus::allowed()?;
        ensure!(
            cpus.len() >= 2,
            "weir-lab hnlb needs 2 CPUs (the generator's and the worker's); this process may \
             run on {cpus:?}"
        );
        let generator_cpu = cpus[0];
        let worker_cpu = worker_cpu.unwrap_or(cpus[cpus.len() - 1]);
        ensure!(
            cpus.contains(&worker_cpu) && worker_cpu != generator_cpu,
            "--worker-cpu {worker_cpu}: give one of {:?} (CPU {generator_cpu} runs the \
             generator)",
            &cpus[1..]
        );
        let lab = Lab::build(backends).context("building the lab")?;
        let sinks = lab
            .backends
            .iter()
            .map(|ns| {
                Sink::attach(
                    ns,
                    "eth0",
                    &SinkOptions {
                        proto: Some(Proto::Udp),
                        dport: Some(DIP_PORT),
                        drop: true,
                        track_flows: 0,
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let lb_mac = mac_in(&lab.lb, "wc0")?;
        crate::topology::resolve_backend_neighbours(&lab)?;
        Ok(Testbed {
            sinks,
            lab,
            exe: exe.to_path_buf(),
            lb_mac,
            generator_cpu,
            worker_cpu,
        })
    }

    /// Whether this weir runs `variant`: `weir check` on its configuration.
    /// Err(the refusal) if it does not.
    pub fn probe(&self, variant: Variant, fast_table_size: u32) -> Result<()> {
        let path = std::env::temp_dir().join(format!(
            "weir-hnlb-probe-{}-{}.toml",
            std::process::id(),
            variant.name()
        ));
        std::fs::write(&path, self.config(variant, 1, 1, fast_table_size))
            .with_context(|| format!("writing {}", path.display()))?;
        let out = Command::new(&self.exe)
            .arg("check")
            .arg("--config")
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let out = out.with_context(|| format!("running {} check", self.exe.display()))?;
        if !out.status.success() {
            // The first line says why; the file it names is gone.
            let why = String::from_utf8_lossy(&out.stderr);
            let why = why.lines().next().unwrap_or("refused");
            bail!(
                "weir check refused tier = \"{}\": {}",
                variant.tier(),
                why.replace(&format!("{}:", path.display()), "line ")
            );
        }
        Ok(())
    }

    fn config(&self, variant: Variant, dips: usize, connections: u32, fast: u32) -> String {
        let interfaces: Vec<String> = self
            .lab
            .lb_interfaces()
            .iter()
            .map(|i| format!("\"{i}\""))
            .collect();
        // Room for every connection, at least weir's default.
        let table = (u64::from(connections) * 2)
            .next_power_of_two()
            .max(1 << 20);
        let vip: SocketAddr = VIP.parse().expect("VIP");
        let mut c = format!(
            "[dataplane]\ninterfaces = [{}]\nconn_table_size = {table}\n{}\n\
             [[vip]]\nname = \"hnlb\"\naddress = \"{}\"\nport = {}\nprotocol = \"udp\"\n\
             mode = \"nat\"\n",
            interfaces.join(", "),
            variant.config_lines(fast, self.worker_cpu),
            vip.ip(),
            vip.port(),
        );
        for i in 1..=dips {
            c += &format!(
                "[[vip.dip]]\naddress = \"{}\"\nport = {DIP_PORT}\n",
                crate::topology::backend_addr(i)
            );
        }
        c
    }

    /// The backends in the lab.
    pub fn backends(&self) -> usize {
        self.lab.backends.len()
    }

    /// Packets the sinks counted so far.
    fn received(&self) -> Result<u64> {
        self.sinks
            .iter()
            .map(|s| Ok(s.stats()?.packets))
            .sum::<Result<u64>>()
    }

    fn packets(&self, connections: u32, dist: FlowDist) -> Result<GenSpec> {
        let net: IpAddr = SOURCES.0.parse()?;
        let mut spec = GenSpec::new(net, VIP.parse()?, L4::Udp);
        spec.sources.prefix = SOURCES.1;
        spec.sources.port = 1024;
        spec.sources.ports = 65536 - 1024;
        spec.flows = connections;
        spec.dist = dist;
        spec.dst_mac = self.lb_mac;
        spec.fill_to(FRAME);
        spec.validate()?;
        Ok(spec)
    }

    /// Starts weir for `setup`, installs its connections and lets its
    /// traffic settle: ready for trials.
    pub fn bench<'a>(&'a mut self, setup: &Setup, progress: &'a Progress) -> Result<Bench<'a>> {
        ensure!(
            (1..=self.backends()).contains(&setup.dips),
            "{} DIPs: the lab has {} backends",
            setup.dips,
            self.backends()
        );
        let packets = self.packets(
            setup.connections,
            match setup.mix {
                Mix::RoundRobin => FlowDist::RoundRobin,
                Mix::Zipf { s } => FlowDist::Zipf { s },
            },
        )?;
        progress.set_message(format!("{}: starting weir serve", setup.label));
        let mut daemon = Daemon::new(&self.exe, &self.lab.lb)?;
        daemon.write_config(&self.config(
            setup.variant,
            setup.dips,
            setup.connections,
            setup.fast_table_size,
        ))?;
        daemon
            .start()
            .with_context(|| format!("starting weir serve for {}", setup.label))?;
        if setup.variant.has_workers() {
            give_workers_their_core(&daemon)?;
        }

        // Every connection, round robin, so the rarest of a Zipf mix exist too.
        let install = OfferSpec {
            rate: Some(setup.install_pps),
            count: Some(u64::from(setup.connections) * u64::from(setup.install_rounds)),
            ..OfferSpec::new(
                self.packets(setup.connections, FlowDist::RoundRobin)?,
                INSTALL_LIMIT,
            )
        };
        progress.set_message(format!(
            "{}: installing {} connections",
            setup.label, setup.connections
        ));
        let done = offer(&self.lab.client, "eth0", &install).context("installing connections")?;
        progress.set_message(format!(
            "{}: {} packets installed them in {:.1} s; settling",
            setup.label,
            done.sent,
            done.elapsed.as_secs_f64()
        ));
        if !setup.settle.is_zero() {
            offer(
                &self.lab.client,
                "eth0",
                &OfferSpec::new(packets.clone(), setup.settle),
            )
            .context("settling")?;
        }
        std::thread::sleep(DRAIN);
        Ok(Bench {
            bed: self,
            progress,
            ledgers: setup.ledgers && setup.variant.has_workers(),
            daemon,
            packets,
            duration: setup.duration,
            label: setup.label.clone(),
        })
    }
}

/// A running weir with its connections installed.
pub struct Bench<'a> {
    bed: &'a Testbed,
    progress: &'a Progress,
    /// Whether [`Bench::ledger`] counts (a tier with workers, and asked to).
    ledgers: bool,
    daemon: Daemon,
    packets: GenSpec,
    duration: Duration,
    label: String,
}

impl Bench<'_> {
    /// How long a trial takes, drain included.
    pub fn trial_time(&self) -> Duration {
        self.duration + DRAIN
    }

    /// Offers the row's packets at `rate` (None: as fast as possible) for
    /// the row's duration, and counts what the backends received.
    pub fn trial(&self, rate: Option<f64>) -> Result<Trial> {
        self.observed_trial(rate, self.duration, |_| Ok(()))
    }

    /// A trial of `duration` that calls `observe(time since the traffic
    /// started)` about every [`OBSERVE_EVERY`] while the traffic runs.
    pub fn observed_trial(
        &self,
        rate: Option<f64>,
        duration: Duration,
        mut observe: impl FnMut(Duration) -> Result<()>,
    ) -> Result<Trial> {
        let before = self.bed.received()?;
        // The worker's CPU time over this wall time (the generator's setup
        // included, which its own elapsed time leaves out).
        let worker_before = self.worker_cpu_time().map(|t| (t, Instant::now()));
        let spec = OfferSpec {
            rate,
            ..OfferSpec::new(self.packets.clone(), duration)
        };
        let offering = start(&self.bed.lab.client, "eth0", &spec)
            .with_context(|| format!("offering traffic for {}", self.label))?;
        let t0 = Instant::now();
        let mut next = t0 + OBSERVE_EVERY;
        while !offering.is_finished() {
            std::thread::sleep(WAIT_STEP);
            if Instant::now() >= next && !offering.is_finished() {
                observe(t0.elapsed())?;
                next += OBSERVE_EVERY;
            }
        }
        let offered = offering.wait()?;
        let worker_share = worker_before
            .zip(self.worker_cpu_time())
            .map(|((a, t), b)| (b - a).as_secs_f64() / t.elapsed().as_secs_f64());
        std::thread::sleep(DRAIN);
        let received = self.bed.received()? - before;
        let secs = offered.elapsed.as_secs_f64().max(1e-9);
        let t = Trial {
            requested_pps: rate,
            offered: offered.sent,
            offered_pps: offered.pps,
            received,
            received_pps: received as f64 / secs,
            loss: if offered.sent == 0 {
                0.0
            } else {
                offered.sent.saturating_sub(received) as f64 / offered.sent as f64
            },
            elapsed_s: secs,
            worker_cpu_share: worker_share,
        };
        self.progress.set_message(format!(
            "{} at {}: offered {:.3} Mpps, received {:.3} Mpps, loss {:.3}%{}",
            self.label,
            rate.map_or("full speed".to_string(), |r| format!("{:.3} Mpps", r / 1e6)),
            t.offered_pps / 1e6,
            t.received_pps / 1e6,
            t.loss * 100.0,
            t.worker_cpu_share.map_or(String::new(), |c| format!(
                ", worker had {:.0}% of a CPU",
                c * 100.0
            ))
        ));
        Ok(t)
    }

    /// CPU time the running weir's worker threads have had so far.
    fn worker_cpu_time(&self) -> Option<Duration> {
        crate::cpus::threads_cpu_time(self.daemon.pid()?, WORKER_THREAD)
    }

    /// The workers' last reports (see [`workers`](super::workers)); waits
    /// for the first one of a freshly started weir.
    pub fn workers(&self) -> Result<serde_json::Value> {
        let deadline = Instant::now() + FIRST_REPORT;
        loop {
            match workers::read(&self.daemon.run_dir()) {
                Err(_) if Instant::now() < deadline => std::thread::sleep(WAIT_STEP),
                done => return done,
            }
        }
    }

    /// The workers' counters once their report covers everything sent so
    /// far; None for a tier without workers.
    pub fn ledger(&self) -> Result<Option<Ledger>> {
        if !self.ledgers {
            return Ok(None);
        }
        std::thread::sleep(REPORT_LAG);
        Ledger::of(&self.workers()?).map(Some)
    }
}

/// HNLB's software load balancer has a core of its own. On this shared
/// machine the worker's CPU also runs other work, which preempts a
/// busy-polling worker for whole scheduler slices; in the real-time class
/// it is not preempted (the kernel's RT throttling still leaves others 5%
/// of the CPU, which the worker-CPU column shows).
fn give_workers_their_core(daemon: &Daemon) -> Result<()> {
    let pid = daemon.pid().context("weir serve is not running")?;
    let deadline = Instant::now() + FIRST_REPORT;
    loop {
        let tids = crate::cpus::threads_named(pid, WORKER_THREAD);
        if !tids.is_empty() {
            for tid in tids {
                crate::cpus::realtime(tid, WORKER_PRIORITY)?;
            }
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "weir serve (pid {pid}) started no {WORKER_THREAD} thread in {FIRST_REPORT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
