//! The standard lab: a client, the load balancer and N backends, each in a
//! namespace of its own, wired point to point through the load balancer.
//!
//! ```text
//!  client 10.77.0.2 eth0 ── wc0 10.77.0.1  [lb]  wbI 10.77.I.1 ── eth0 10.77.I.2 backend I
//! ```
//! VIPs live in 10.77.100.0/24: the client routes everything through the
//! load balancer; backends route back through it (their default gateway),
//! which is what nat mode's reverse path needs. DSR backends also hold the
//! VIPs on their loopback.

use std::net::Ipv4Addr;

use std::os::fd::AsFd;

use anyhow::{Context, Result};
use libbpf_rs::{Xdp, XdpFlags};
use weir_dataplane::iface::Iface;

use crate::netns::{enter, ip_in, sysctl_in, veth, NamespaceSet};

/// Address of backend `i` (1-based).
pub fn backend_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, i as u8, 2)
}

pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The VIPs the lab's backends accept traffic for (DSR).
pub const VIPS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 77, 100, 1), Ipv4Addr::new(10, 77, 100, 2)];

/// A built lab; dropping it removes everything.
pub struct Lab {
    pub ns: NamespaceSet,
    pub client: String,
    pub lb: String,
    pub backends: Vec<String>,
}

impl Lab {
    /// Builds the lab with `n` backends (at most 50).
    pub fn build(n: usize) -> Result<Lab> {
        assert!((1..=50).contains(&n), "1..=50 backends");
        let mut ns = NamespaceSet::new();
        let client = ns.add("client")?;
        let lb = ns.add("lb")?;
        let mut backends = Vec::new();
        for i in 1..=n {
            backends.push(ns.add(&format!("b{i}"))?);
        }
        let lab = Lab {
            ns,
            client,
            lb,
            backends,
        };
        lab.wire().context("building the lab topology")?;
        Ok(lab)
    }

    fn wire(&self) -> Result<()> {
        let lb = &self.lb;
        for k in [
            "net.ipv4.ip_forward",
            "net.ipv4.conf.all.rp_filter",
            "net.ipv4.conf.default.rp_filter",
        ] {
            sysctl_in(lb, k, if k.ends_with("forward") { "1" } else { "0" })?;
        }
        veth(&self.client, "eth0", lb, "wc0")?;
        ip_in(
            &self.client,
            &["addr", "add", "10.77.0.2/24", "dev", "eth0"],
        )?;
        ip_in(&self.client, &["link", "set", "eth0", "up"])?;
        ip_in(
            &self.client,
            &["route", "add", "default", "via", "10.77.0.1"],
        )?;
        ip_in(lb, &["addr", "add", "10.77.0.1/24", "dev", "wc0"])?;
        ip_in(lb, &["link", "set", "wc0", "up"])?;
        for (i, b) in self.backends.iter().enumerate() {
            let i = i + 1;
            let lb_if = format!("wb{i}");
            veth(b, "eth0", lb, &lb_if)?;
            ip_in(
                b,
                &["addr", "add", &format!("10.77.{i}.2/24"), "dev", "eth0"],
            )?;
            ip_in(b, &["link", "set", "eth0", "up"])?;
            ip_in(
                b,
                &["route", "add", "default", "via", &format!("10.77.{i}.1")],
            )?;
            for vip in VIPS {
                ip_in(b, &["addr", "add", &format!("{vip}/32"), "dev", "lo"])?;
            }
            for (k, v) in [
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
            ] {
                sysctl_in(b, k, v)?;
            }
            ip_in(
                lb,
                &["addr", "add", &format!("10.77.{i}.1/24"), "dev", &lb_if],
            )?;
            ip_in(lb, &["link", "set", &lb_if, "up"])?;
        }
        // Hosts on a veth hand out TCP/UDP checksums left for "hardware" to
        // finish (CHECKSUM_PARTIAL); XDP sees them unfinished and an
        // incremental update cannot repair that. Real NICs deliver complete
        // checksums, so the lab's hosts compute them in software.
        let mut senders = vec![self.client.clone()];
        senders.extend(self.backends.iter().cloned());
        for ns in &senders {
            ethtool_in(ns, &["-K", "eth0", "tx", "off"])?;
        }
        // A veth only accepts redirected XDP frames when its peer runs XDP too.
        let mut ends = vec![self.client.clone()];
        ends.extend(self.backends.iter().cloned());
        for ns in ends {
            attach_pass(&ns, "eth0")?;
        }
        Ok(())
    }

    /// Names of the load balancer's interfaces, as the config lists them.
    pub fn lb_interfaces(&self) -> Vec<String> {
        let mut v = vec!["wc0".to_string()];
        v.extend((1..=self.backends.len()).map(|i| format!("wb{i}")));
        v
    }

    pub fn teardown(&mut self) {
        self.ns.teardown();
    }
}

pub fn ethtool_in(ns: &str, args: &[&str]) -> Result<()> {
    ethtool_output(ns, args).map(drop)
}

/// Every counter `ethtool -S dev` prints in `ns`, by name.
pub fn ethtool_stats(ns: &str, dev: &str) -> Result<Vec<(String, u64)>> {
    let out = ethtool_output(ns, &["-S", dev])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (k, n) = l.trim().split_once(':')?;
            Some((k.to_string(), n.trim().parse().ok()?))
        })
        .collect())
}

fn ethtool_output(ns: &str, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "ethtool"])
        .args(args)
        .output()
        .context("running ethtool (install the ethtool package)")?;
    if !out.status.success() {
        anyhow::bail!(
            "ethtool {} in {ns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Attaches the pass-through program to `dev` inside `ns`. It is not
/// detached: it goes away with the namespace.
pub fn attach_pass(ns: &str, dev: &str) -> Result<()> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    let ctx = format!("attaching xdp_pass to {dev} in {ns}");
    std::thread::spawn(move || -> Result<()> {
        enter(&ns)?;
        let skel = weir_traffic::minimal::load()?;
        let iface = Iface::by_name(&dev)?;
        Xdp::new(skel.progs.xdp_pass.as_fd())
            .attach(iface.ifindex as i32, XdpFlags::DRV_MODE)
            .context("XDP attach")?;
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the attach thread panicked"))?
    .context(ctx)
}

/// The longest wait for the backends' MAC addresses.
const NEIGHBOUR_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Makes the load balancer's kernel resolve every backend's MAC (a UDP
/// datagram from its namespace to each, to the discard port), so the first
/// packets of a measurement are not handed to the kernel while it asks, and
/// waits for the entries.
pub fn resolve_backend_neighbours(lab: &Lab) -> Result<()> {
    let addrs: Vec<_> = (1..=lab.backends.len()).map(backend_addr).collect();
    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            enter(&lab.lb)?;
            let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
            for a in &addrs {
                socket.send_to(b"arp", (*a, 9))?;
            }
            Ok(())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the neighbour thread panicked"))?
    })
    .context("resolving the backends' MACs from the load balancer")?;
    let deadline = std::time::Instant::now() + NEIGHBOUR_WAIT;
    for a in addrs {
        loop {
            let out = std::process::Command::new("ip")
                .args(["-n", &lab.lb, "neigh", "show", "to", &a.to_string()])
                .output()
                .context("running ip neigh")?;
            if String::from_utf8_lossy(&out.stdout).contains("lladdr") {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the load balancer's kernel did not resolve backend {a} in {NEIGHBOUR_WAIT:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    Ok(())
}
