//! The single long TCP flow of `weir-lab bench forward`: iperf3 through each
//! load balancer, its throughput and retransmissions, and the drops on the
//! path that cause them.
//!
//! ```text
//!  client ── wc0 [lb: weir | nftables | HAProxy] wb1 ── backend [weir decap, iperf3 -s]
//!  iperf3 -c, NAPI of eth0     NAPI of wc0 and wb1, HAProxy     NAPI of eth0, iperf3 -s
//!  (generator CPU)             (load balancer's CPU)            (generator CPU)
//! ```
//! A lab of its own with one backend, whose real TCP stack ends the flow.
//! The backend runs `weir decap` on its interface for every balancer: it
//! strips ipip's outer header and passes everything else untouched, so
//! every balancer's packets meet the same receive path. As in the packet
//! trials, every receive path runs in a NAPI thread at real-time priority:
//! the load balancer's on its CPU (with HAProxy's process), the client's and
//! the backend's on the other with the two iperf3 processes. Every veth on
//! the path is set up as a host's NIC is by default (GRO on, a queue in
//! front of its ring: see [`like_a_nic`]).
//!
//! Drops: each trial reads the drop and error counters of every interface
//! on the path (`ethtool -S` of the veths: a full peer ring shows as
//! `tx_queue_0_xdp_xmit_errors` for XDP_REDIRECT and as the device's TX
//! drops for the kernel's own transmits; `ip -s link`'s RX and TX drops)
//! before and after, and keeps those that moved. What they showed: with the
//! queues in place, weir's retransmissions are its XDP_REDIRECTs into the
//! backend's full ring, which has no backpressure for XDP frames; weir
//! outruns the backend, so that ring is the flow's bottleneck queue (README,
//! "Where the TCP retransmissions come from").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;

use super::balancer::{self, Balancer, Running, Service};
use super::child;
use crate::netns::ip_in;
use crate::topology::{ethtool_in, ethtool_stats, resolve_backend_neighbours, Lab};

/// The TCP VIP; iperf3's server listens on its port at the backend.
const VIP: &str = "10.77.100.1:5201";
/// The MTU of the links between the load balancer and the backend: a
/// full-sized client packet (1500) fits with ipip's outer header, as
/// weir's README tells operators to arrange (or to clamp the MSS).
const BACKEND_MTU: u32 = 1520;
/// The longest wait for `weir decap` to attach and for iperf3 to listen.
const START_WAIT: Duration = Duration::from_secs(10);
/// Time iperf3 may take beyond the flow's duration (connect, results).
const IPERF_SLACK: Duration = Duration::from_secs(20);

/// One iperf3 run through a balancer.
#[derive(Debug, Clone, Serialize)]
pub struct TcpTrial {
    /// What the receiver got, Gbit/s.
    pub gbps: f64,
    /// Segments the sender retransmitted (iperf3's `sum_sent.retransmits`).
    pub retransmits: u64,
    /// Drop and error counters that moved during the trial, as
    /// "namespace interface counter" (namespace: client, lb, backend).
    pub drops: BTreeMap<String, u64>,
}

impl TcpTrial {
    /// Frames XDP_REDIRECT found a full veth ring for (`ethtool -S`'s
    /// `tx_queue_0_xdp_xmit_errors` at the redirecting interface).
    pub fn redirect_ring_full(&self) -> u64 {
        self.sum(|k| k.ends_with(" tx_queue_0_xdp_xmit_errors"))
    }

    /// Every packet a veth dropped at its peer's full ring, counted once at
    /// the sending end (its TX drops, redirected frames included).
    pub fn ring_drops(&self) -> u64 {
        self.sum(|k| k.ends_with(" tx_dropped"))
    }

    /// Of [`Self::ring_drops`], the kernel's own transmits (skbs).
    pub fn other_drops(&self) -> u64 {
        self.ring_drops().saturating_sub(self.redirect_ring_full())
    }

    fn sum(&self, pick: impl Fn(&str) -> bool) -> u64 {
        self.drops
            .iter()
            .filter(|(k, _)| pick(k))
            .map(|(_, v)| v)
            .sum()
    }
}

/// The TCP lab: one backend running `weir decap`.
pub struct TcpTestbed {
    decap: Option<Child>,
    lab: Lab,
    exe: PathBuf,
    service: Service,
    generator_cpu: usize,
}

impl TcpTestbed {
    pub fn build(exe: &Path, generator_cpu: usize, lb_cpu: usize) -> Result<TcpTestbed> {
        let lab = Lab::build(1).context("building the TCP lab")?;
        let backend = lab.backends[0].clone();
        let mtu = BACKEND_MTU.to_string();
        ip_in(&lab.lb, &["link", "set", "dev", "wb1", "mtu", &mtu])?;
        // The lab's pass-through program holds eth0: weir decap takes it.
        ip_in(&backend, &["link", "set", "dev", "eth0", "xdp", "off"])?;
        ip_in(&backend, &["link", "set", "dev", "eth0", "mtu", &mtu])?;
        let decap = child::spawn_in(
            &backend,
            Some(generator_cpu),
            Command::new(exe)
                .args(["decap", "--interface", "eth0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        let mut bed = TcpTestbed {
            decap: Some(decap),
            lab,
            exe: exe.to_path_buf(),
            service: Service {
                vip: VIP.parse().expect("the TCP VIP parses"),
                proto: Proto::Tcp,
                receive: vec!["wc0".into(), "wb1".into()],
                encap_mtu: Some(BACKEND_MTU),
                lb_cpu,
                direct_return: false,
            },
            generator_cpu,
        };
        bed.wait_decap()?;
        balancer::thread_napi(&backend, "eth0", generator_cpu)?;
        balancer::thread_napi(&bed.lab.client, "eth0", generator_cpu)?;
        resolve_backend_neighbours(&bed.lab)?;
        for (ns, dev) in bed.path() {
            like_a_nic(ns, dev)?;
        }
        Ok(bed)
    }

    /// Waits until `weir decap` answers `status`.
    fn wait_decap(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_WAIT;
        loop {
            let out = child::output_in(
                &self.lab.backends[0],
                None,
                Command::new(&self.exe).args(["decap", "status", "--interface", "eth0"]),
                START_WAIT,
            )?;
            if out.status.success() {
                return Ok(());
            }
            if let Some(status) = self
                .decap
                .as_mut()
                .and_then(|d| d.try_wait().ok().flatten())
            {
                bail!("weir decap exited ({status}) on the TCP lab's backend");
            }
            ensure!(
                Instant::now() < deadline,
                "weir decap did not attach in {START_WAIT:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn start(&self, balancer: Balancer) -> Result<Running<'_>> {
        balancer::start(&self.lab, &self.exe, balancer, &self.service)
    }

    /// One iperf3 flow from the client through the VIP for `seconds`.
    /// `window_kib`: iperf3's -w (socket buffers), if not the kernel's.
    pub fn trial(&self, seconds: u64, window_kib: Option<u32>) -> Result<TcpTrial> {
        let vip = self.service.vip;
        let backend = &self.lab.backends[0];
        let mut server = child::spawn_in(
            backend,
            Some(self.generator_cpu),
            Command::new("iperf3")
                .args(["-s", "-1", "-p", &vip.port().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .context("install the iperf3 package")?;
        let result = self.run_client(&mut server, vip, seconds, window_kib);
        child::stop(&mut server, Duration::from_secs(2))?;
        result
    }

    fn run_client(
        &self,
        server: &mut Child,
        vip: SocketAddr,
        seconds: u64,
        window_kib: Option<u32>,
    ) -> Result<TcpTrial> {
        let backend = &self.lab.backends[0];
        let deadline = Instant::now() + START_WAIT;
        while !balancer::listening(backend, vip)? {
            if let Some(status) = server.try_wait()? {
                bail!("iperf3 -s exited ({status}) in the backend");
            }
            ensure!(
                Instant::now() < deadline,
                "iperf3 -s did not listen in {START_WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let before = self.drop_counters()?;
        let mut iperf = Command::new("iperf3");
        iperf
            .args(["-J", "-c", &vip.ip().to_string()])
            .args(["-p", &vip.port().to_string()])
            .args(["-t", &seconds.to_string()]);
        if let Some(w) = window_kib {
            // iperf3 gives the server the same buffers.
            iperf.arg("-w").arg(format!("{w}K"));
        }
        let out = child::output_in(
            &self.lab.client,
            Some(self.generator_cpu),
            &mut iperf,
            Duration::from_secs(seconds) + IPERF_SLACK,
        )?;
        let after = self.drop_counters()?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "iperf3 -c printed no JSON: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        if let Some(e) = json["error"].as_str() {
            bail!("iperf3 -c: {e}");
        }
        let end = &json["end"];
        Ok(TcpTrial {
            gbps: end["sum_received"]["bits_per_second"]
                .as_f64()
                .context("iperf3's JSON has no end.sum_received")?
                / 1e9,
            retransmits: end["sum_sent"]["retransmits"]
                .as_u64()
                .context("iperf3's JSON has no end.sum_sent.retransmits")?,
            drops: after
                .into_iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
                    (d > 0).then_some((k, d))
                })
                .collect(),
        })
    }

    /// The flow's interfaces as (namespace, interface).
    fn path(&self) -> [(&str, &str); 4] {
        [
            (&self.lab.client, "eth0"),
            (&self.lab.lb, "wc0"),
            (&self.lab.lb, "wb1"),
            (&self.lab.backends[0], "eth0"),
        ]
    }

    /// Every drop and error counter of the path's interfaces.
    fn drop_counters(&self) -> Result<BTreeMap<String, u64>> {
        let mut all = BTreeMap::new();
        for (role, (ns, dev)) in ["client", "lb", "lb", "backend"]
            .into_iter()
            .zip(self.path())
        {
            for (name, v) in interface_drops(ns, dev)? {
                all.insert(format!("{role} {dev} {name}"), v);
            }
        }
        Ok(all)
    }
}

impl Drop for TcpTestbed {
    fn drop(&mut self) {
        if let Some(mut d) = self.decap.take() {
            let _ = child::stop(&mut d, Duration::from_secs(5));
        }
    }
}

/// Makes a veth behave as a host's NIC does by default: GRO on its receive
/// path (veth has it off), and a queue in front of its transmit ring (veth
/// has none, noqueue), so that the kernel's own transmits wait when the
/// peer's 256-entry ring is full (veth stops its queue then, since Linux
/// 6.16) instead of being dropped. Without the queue every balancer's flow
/// lost packets at the sending hosts' full rings, which was the lab's doing,
/// not the balancers'.
fn like_a_nic(ns: &str, dev: &str) -> Result<()> {
    tc_in(
        ns,
        &[
            "qdisc", "replace", "dev", dev, "root", "pfifo", "limit", "1000",
        ],
    )?;
    ethtool_in(ns, &["-K", dev, "gro", "on"])
}

fn tc_in(ns: &str, args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc"])
        .args(args)
        .output()
        .context("running tc (install the iproute2 package)")?;
    ensure!(
        out.status.success(),
        "tc {} in {ns}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// `dev`'s drop and error counters: its driver's (`ethtool -S`) and the
/// kernel's RX and TX drops (`ip -s link`).
fn interface_drops(ns: &str, dev: &str) -> Result<Vec<(String, u64)>> {
    let mut v: Vec<(String, u64)> = ethtool_stats(ns, dev)?
        .into_iter()
        .filter(|(k, _)| k.contains("drop") || k.contains("err"))
        .collect();
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", "dev", dev])
        .output()
        .context("running ip -s link")?;
    let link: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("ip -j -s link show {dev} in {ns}"))?;
    for dir in ["rx", "tx"] {
        if let Some(n) = link[0]["stats64"][dir]["dropped"].as_u64() {
            v.push((format!("{dir}_dropped"), n));
        }
    }
    Ok(v)
}
