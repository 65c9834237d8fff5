//! The load balancers `weir-lab bench forward` compares, each started on a
//! lab's load-balancer namespace in front of one VIP and stopped so that
//! the next finds the namespace as before.
//!
//! The load balancer's receive paths (the NAPI contexts of its veths: weir's
//! XDP, or the kernel's forwarding and netfilter) run in kernel threads
//! pinned to the load balancer's CPU at real-time priority, so its work is
//! those threads' (and HAProxy's, pinned there too) whatever else the
//! shared machine runs.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_core::flow::Proto;

use super::{child, TrialKind};
use crate::daemon::Daemon;
use crate::netns::ip_in;
use crate::topology::{attach_pass, backend_addr, route_vip_replies_direct, Lab};

/// Real-time priority of the NAPI threads: this machine is shared, and a
/// receive path that other work preempts overflows its 256-entry veth ring
/// long before it is busy.
const NAPI_PRIORITY: i32 = 50;
/// The longest wait for a threaded NAPI context's kernel thread.
const NAPI_WAIT: Duration = Duration::from_secs(3);
/// The longest wait for HAProxy to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(5);

/// A load balancer under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    /// weir serve, nat VIP, default configuration.
    WeirNat,
    /// weir serve, dsr VIP (MAC rewrite), default configuration; where the
    /// lab has the DSR return path (the HTTP trials), the DIPs' replies
    /// take it, straight to the client.
    WeirDsr,
    /// weir dsr with the DIPs' replies routed back through the load
    /// balancer's host (their default gateway), where weir's XDP passes them
    /// to the kernel, which forwards them (HTTP trials only: the other
    /// trials' dsr replies go that way already, or there are none).
    WeirDsrViaLb,
    /// weir serve, ipip VIP (IPIP to the DIP, which decapsulates).
    WeirIpip,
    /// The kernel's stateful NAT: nftables DNAT with numgen over the DIPs.
    Nftables,
    /// HAProxy in tcp mode, a full proxy (TCP only: it does not carry UDP).
    Haproxy,
}

impl Balancer {
    pub fn label(self) -> &'static str {
        match self {
            Balancer::WeirNat => "weir nat",
            Balancer::WeirDsr => "weir dsr",
            Balancer::WeirDsrViaLb => "weir dsr via LB",
            Balancer::WeirIpip => "weir ipip",
            Balancer::Nftables => "nftables DNAT",
            Balancer::Haproxy => "HAProxy",
        }
    }

    pub fn is_weir(self) -> bool {
        matches!(
            self,
            Balancer::WeirNat | Balancer::WeirDsr | Balancer::WeirDsrViaLb | Balancer::WeirIpip
        )
    }

    /// Whether it takes part in trials of `kind`: HAProxy does not carry
    /// UDP, the HTTP lab's backends do not decapsulate ipip, and dsr via
    /// the load balancer differs from dsr only where the lab has the DSR
    /// return path (HTTP).
    pub fn in_trials(self, kind: TrialKind) -> bool {
        match kind {
            TrialKind::Udp => !matches!(self, Balancer::Haproxy | Balancer::WeirDsrViaLb),
            TrialKind::Tcp => self != Balancer::WeirDsrViaLb,
            TrialKind::Http => self != Balancer::WeirIpip,
        }
    }
}

/// What a balancer serves: one VIP over the lab's backends, each a DIP on
/// the VIP's port.
#[derive(Debug, Clone)]
pub struct Service {
    pub vip: SocketAddr,
    pub proto: Proto,
    /// The load balancer's interfaces whose receive paths are its work.
    pub receive: Vec<String>,
    /// The MTU of the links towards the DIPs, when larger than the
    /// client's: room for ipip's outer header on a full-sized packet
    /// (weir's `encap_mtu`).
    pub encap_mtu: Option<u32>,
    pub lb_cpu: usize,
    /// Whether the lab has the DSR return path
    /// ([`crate::topology::wire_direct_return`]),
    /// which weir dsr's replies then take.
    pub direct_return: bool,
}

impl Service {
    fn proto_name(&self) -> &'static str {
        match self.proto {
            Proto::Tcp => "tcp",
            _ => "udp",
        }
    }
}

/// A running load balancer; stopping it leaves the namespace as it was.
pub struct Running<'a> {
    lab: &'a Lab,
    service: &'a Service,
    balancer: Balancer,
    daemon: Option<Daemon>,
    haproxy: Option<Child>,
    /// weir's XDP program on the client-side interface.
    pub prog_id: Option<u32>,
    /// The kernel threads of the receive paths, in `service.receive` order.
    pub napi_tids: Vec<u32>,
    /// Whether the backends' replies from the VIP take the DSR return path.
    replies_direct: bool,
}

/// Starts `balancer` on `lab` for `service`, every backend a DIP.
pub fn start<'a>(
    lab: &'a Lab,
    exe: &Path,
    balancer: Balancer,
    service: &'a Service,
) -> Result<Running<'a>> {
    let mut running = Running {
        lab,
        service,
        balancer,
        daemon: None,
        haproxy: None,
        prog_id: None,
        napi_tids: Vec::new(),
        replies_direct: false,
    };
    if balancer == Balancer::WeirDsr && service.direct_return {
        route_vip_replies_direct(lab, true)?;
        running.replies_direct = true;
    }
    match balancer {
        Balancer::Nftables | Balancer::Haproxy => {
            if balancer == Balancer::Nftables {
                nft(&lab.lb, &nft_ruleset(lab, service))?;
            } else {
                running.haproxy = Some(start_haproxy(lab, service)?);
            }
            // Receive paths with NAPI contexts to thread, as weir's XDP
            // gives them; wc0 also takes the generator's redirected frames
            // only when it runs XDP.
            for dev in &service.receive {
                attach_pass(&lab.lb, dev)?;
            }
        }
        _ => {
            let mut d = Daemon::new(exe, &lab.lb)?;
            d.write_config(&weir_config(lab, balancer, service))?;
            d.start()
                .with_context(|| format!("starting weir serve ({})", balancer.label()))?;
            running.daemon = Some(d);
            running.prog_id = Some(xdp_prog_id(&lab.lb, "wc0")?);
        }
    }
    for dev in &service.receive {
        running
            .napi_tids
            .push(thread_napi(&lab.lb, dev, service.lb_cpu)?);
    }
    Ok(running)
}

impl Running<'_> {
    /// The user-space process doing the balancer's work: weir's daemon or
    /// HAProxy (nftables has none).
    pub fn process_id(&self) -> Option<u32> {
        self.daemon
            .as_ref()
            .and_then(Daemon::pid)
            .or_else(|| self.haproxy.as_ref().map(Child::id))
    }

    /// Whether it is weir.
    pub fn is_weir(&self) -> bool {
        self.balancer.is_weir()
    }

    /// weir's XDP programs on the receive interfaces, each once.
    pub fn prog_ids(&self) -> Result<Vec<u32>> {
        let mut ids = BTreeSet::new();
        if self.balancer.is_weir() {
            for dev in &self.service.receive {
                ids.insert(xdp_prog_id(&self.lab.lb, dev)?);
            }
        }
        Ok(ids.into_iter().collect())
    }

    /// weir's data-plane counters (`stats`, folded per CPU), from its
    /// pinned maps; None for the others.
    pub fn weir_counters(&self) -> Result<Option<Vec<u64>>> {
        self.daemon
            .as_ref()
            .map(|d| weir_dataplane::maps::Maps::pinned(&d.pin_dir)?.stats())
            .transpose()
    }

    /// Stops the load balancer; the namespace is as before [`start`].
    pub fn stop(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let lb = &self.lab.lb;
        if let Some(mut d) = self.daemon.take() {
            d.stop()?;
        }
        if let Some(mut h) = self.haproxy.take() {
            child::stop(&mut h, Duration::from_secs(5))?;
            ip_in(
                lb,
                &[
                    "addr",
                    "del",
                    &format!("{}/32", self.service.vip.ip()),
                    "dev",
                    "lo",
                ],
            )?;
        }
        if self.balancer == Balancer::Nftables {
            nft(lb, "delete table ip weir_bench\n")?;
        }
        if !self.balancer.is_weir() {
            for dev in &self.service.receive {
                ip_in(lb, &["link", "set", dev, "xdp", "off"])?;
            }
        }
        if self.replies_direct {
            route_vip_replies_direct(self.lab, false)?;
            self.replies_direct = false;
        }
        Ok(())
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

fn weir_config(lab: &Lab, balancer: Balancer, service: &Service) -> String {
    let interfaces: Vec<String> = lab
        .lb_interfaces()
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect();
    let vip = service.vip;
    let (mode, dip_port) = match balancer {
        // dsr and ipip keep the VIP's port: a DIP names none.
        Balancer::WeirDsr | Balancer::WeirDsrViaLb => ("dsr", String::new()),
        Balancer::WeirIpip => ("ipip", String::new()),
        _ => ("nat", format!("port = {}\n", vip.port())),
    };
    let encap_mtu = service
        .encap_mtu
        .map_or(String::new(), |m| format!("encap_mtu = {m}\n"));
    let mut c = format!(
        "[dataplane]\ninterfaces = [{}]\n{encap_mtu}\
         [[vip]]\nname = \"bench\"\naddress = \"{}\"\nport = {}\nprotocol = \"{}\"\n\
         mode = \"{mode}\"\n",
        interfaces.join(", "),
        vip.ip(),
        vip.port(),
        service.proto_name(),
    );
    for i in 1..=lab.backends.len() {
        c += &format!("[[vip.dip]]\naddress = \"{}\"\n{dip_port}", backend_addr(i));
    }
    c
}

/// DNAT of new flows to the VIP over the DIPs in turn (numgen inc), as
/// an operator would write it; conntrack keeps each flow on its DIP.
fn nft_ruleset(lab: &Lab, service: &Service) -> String {
    let vip = service.vip;
    let dips: Vec<String> = (1..=lab.backends.len())
        .map(|i| format!("{} : {}", i - 1, backend_addr(i)))
        .collect();
    format!(
        "table ip weir_bench {{\n  chain prerouting {{\n    \
         type nat hook prerouting priority dstnat; policy accept;\n    \
         ip daddr {} {} dport {} dnat to numgen inc mod {} map {{ {} }}\n  }}\n}}\n",
        vip.ip(),
        service.proto_name(),
        vip.port(),
        dips.len(),
        dips.join(", ")
    )
}

/// HAProxy in tcp mode on the VIP (an address of the load balancer while it
/// runs), round robin over the DIPs, one thread on the load balancer's CPU.
/// Its configuration goes in on stdin: no file to leave behind.
fn start_haproxy(lab: &Lab, service: &Service) -> Result<Child> {
    use std::io::Write;
    ensure!(
        service.proto == Proto::Tcp,
        "HAProxy carries only TCP: leave it out of UDP trials"
    );
    let vip = service.vip;
    let mut cfg = format!(
        "global\n  nbthread 1\n  maxconn 1000\n\
         defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  \
         timeout server 120s\n\
         frontend bench\n  bind {vip}\n  default_backend dips\n\
         backend dips\n  balance roundrobin\n"
    );
    for i in 1..=lab.backends.len() {
        cfg += &format!("  server dip{i} {}:{}\n", backend_addr(i), vip.port());
    }
    ip_in(
        &lab.lb,
        &["addr", "add", &format!("{}/32", vip.ip()), "dev", "lo"],
    )?;
    let mut h = child::spawn_in(
        &lab.lb,
        Some(service.lb_cpu),
        Command::new("haproxy")
            .args(["-db", "-f", "/dev/stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .context("install the haproxy package")?;
    // Closed when written: HAProxy reads its configuration to the end.
    h.stdin
        .take()
        .expect("piped stdin")
        .write_all(cfg.as_bytes())
        .context("writing HAProxy's configuration")?;
    let deadline = Instant::now() + LISTEN_WAIT;
    while !listening(&lab.lb, vip)? {
        if let Some(status) = h.try_wait()? {
            bail!("haproxy exited ({status}) with this configuration:\n{cfg}");
        }
        if Instant::now() > deadline {
            let _ = h.kill();
            bail!("haproxy did not listen on {vip} in {LISTEN_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(h)
}

/// Whether a TCP socket in `ns` listens on `addr`.
pub fn listening(ns: &str, addr: SocketAddr) -> Result<bool> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Hltn"])
        .arg(format!("sport = :{}", addr.port()))
        .output()
        .context("running ss")?;
    Ok(!out.stdout.is_empty())
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

/// Runs `dev`'s NAPI context in a kernel thread pinned to `cpu` at
/// real-time priority, and returns the thread. The interface must have a
/// NAPI context (an XDP program on a veth) with one receive queue.
pub fn thread_napi(ns: &str, dev: &str, cpu: usize) -> Result<u32> {
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
