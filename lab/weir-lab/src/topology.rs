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
//!
//! A lab may also get the DSR return path ([`wire_direct_return`]): a link
//! from every backend straight into the client's namespace, which replies
//! from a VIP take while [`route_vip_replies_direct`] has it on.
//!
//! ```text
//!  client rbI 10.78.I.1 ──────────────────────────── eth1 10.78.I.2 backend I
//! ```

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
/// The routing table, in every backend, of replies sent from a VIP when the
/// DSR return path is on: its one route leads to the client's namespace.
const DIRECT_RETURN_TABLE: &str = "100";
/// The prefix that holds the VIPs: replies from it are DSR replies.
const VIP_PREFIX: &str = "10.77.100.0/24";
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

/// The DSR return path: a veth pair from every backend (`eth1`,
/// 10.78.I.2) into the client's namespace (`rbI`, 10.78.I.1), and a routing
/// table in each backend whose default route leads over it. No traffic
/// takes it until [`route_vip_replies_direct`] turns it on, so nat's and
/// the proxies' replies, which come from the backends' own addresses, keep
/// going back through the load balancer.
///
/// The client then receives a VIP's replies on an interface other than
/// the one its route to the VIP leaves by, and a backend receives a VIP's
/// packets on `eth0` while replies from the VIP route over `eth1`: reverse
/// path filtering is off on both ends, as on a DSR deployment's hosts.
pub fn wire_direct_return(lab: &Lab) -> Result<()> {
    let off = |ns: &str, devs: &[&str]| -> Result<()> {
        for dev in ["all", "default"].iter().chain(devs) {
            sysctl_in(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
        }
        Ok(())
    };
    let mut client_ifs = vec!["eth0".to_string()];
    for (i, b) in lab.backends.iter().enumerate() {
        let i = i + 1;
        let client_if = format!("rb{i}");
        veth(b, "eth1", &lab.client, &client_if)?;
        ip_in(
            b,
            &["addr", "add", &format!("10.78.{i}.2/24"), "dev", "eth1"],
        )?;
        ip_in(b, &["link", "set", "eth1", "up"])?;
        ip_in(
            &lab.client,
            &["addr", "add", &format!("10.78.{i}.1/24"), "dev", &client_if],
        )?;
        ip_in(&lab.client, &["link", "set", &client_if, "up"])?;
        ip_in(
            b,
            &[
                "route",
                "add",
                "default",
                "via",
                &format!("10.78.{i}.1"),
                "dev",
                "eth1",
                "table",
                DIRECT_RETURN_TABLE,
            ],
        )?;
        // As on eth0: the backend's CPU finishes its checksums, so the
        // servers' work per reply is the same on either path.
        ethtool_in(b, &["-K", "eth1", "tx", "off"])?;
        off(b, &["eth0", "eth1"])?;
        client_ifs.push(client_if);
    }
    let client_ifs: Vec<&str> = client_ifs.iter().map(String::as_str).collect();
    off(&lab.client, &client_ifs)
}

/// Sends every backend's replies from a VIP over the DSR return path
/// (`on`), or back through the load balancer as before (a source rule in
/// each backend, added or removed). Needs [`wire_direct_return`].
pub fn route_vip_replies_direct(lab: &Lab, on: bool) -> Result<()> {
    let verb = if on { "add" } else { "del" };
    for b in &lab.backends {
        ip_in(
            b,
            &[
                "rule",
                verb,
                "from",
                VIP_PREFIX,
                "lookup",
                DIRECT_RETURN_TABLE,
                "priority",
                DIRECT_RETURN_TABLE,
            ],
        )
        .with_context(|| format!("{verb} the DSR return rule in {b}"))?;
    }
    Ok(())
}

/// Packets the interfaces `devs` of namespace `ns` have received, summed
/// (`ip -s link`'s RX packets: for a veth, XDP's frames and the kernel's).
pub fn rx_packets(ns: &str, devs: &[String]) -> Result<u64> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show"])
        .output()
        .context("running ip -s link")?;
    let links: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("ip -s -j link show in {ns}"))?;
    let links = links
        .as_array()
        .with_context(|| format!("ip -s -j link show in {ns}: {links}"))?;
    devs.iter()
        .map(|dev| {
            links
                .iter()
                .find(|l| l["ifname"] == dev.as_str())
                .and_then(|l| l["stats64"]["rx"]["packets"].as_u64())
                .with_context(|| format!("no RX packet count for {dev} in {ns}"))
        })
        .sum()
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
