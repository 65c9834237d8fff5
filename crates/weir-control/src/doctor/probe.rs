//! Reads the host (and the configuration, when there is one) and applies
//! [`super::checks`] to what it found.

use std::fs;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;

use anyhow::{bail, Result};

use super::checks::{self, Bpffs, IfaceFacts};
use super::{DoctorArgs, Item, Role, DEFAULT_CONFIG};
use weir_config::{Config, Mode, XdpModeCfg};

pub fn run(args: &DoctorArgs) -> Result<Vec<Item>> {
    let release = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut items = vec![
        checks::kernel(&release, Path::new("/sys/kernel/btf/vmlinux").exists()),
        checks::root(euid()),
    ];
    if args.role == Role::Backend {
        items.push(checks::arp(
            sysctl("net/ipv4/conf/all/arp_ignore"),
            sysctl("net/ipv4/conf/all/arp_announce"),
        ));
        let local = weir_sys::local_addrs().unwrap_or_default();
        for vip in &args.vips {
            items.push(checks::vip_on_backend(*vip, local.contains(vip)));
        }
        return Ok(items);
    }
    let cfg = match &args.config {
        Some(path) => Some(Config::load(path)?),
        None if Path::new(DEFAULT_CONFIG).exists() => {
            Some(Config::load(Path::new(DEFAULT_CONFIG))?)
        }
        None => None,
    };
    let pin_dir = cfg
        .as_ref()
        .map(|c| c.dataplane.pin_dir.clone())
        .unwrap_or_else(|| weir_config::DEFAULT_PIN_DIR.into());
    let parent = pin_dir.parent().unwrap_or(Path::new("/")).to_path_buf();
    items.push(checks::bpffs(
        &parent.display().to_string(),
        Bpffs {
            mounted: crate::bpffs::is_bpffs(&parent),
            private_mount_ns: crate::bpffs::in_private_mount_ns() == Some(true),
            conventional: parent == Path::new(crate::bpffs::BPFFS),
        },
    ));
    items.push(checks::memlock(&release, memlock()));
    let Some(cfg) = cfg else {
        if args.vips.is_empty() {
            return Ok(items);
        }
        bail!("--vip is for --role backend; on the load balancer the VIPs come from --config");
    };
    items.extend(config_checks(&cfg));
    Ok(items)
}

fn config_checks(cfg: &Config) -> Vec<Item> {
    let mut items = Vec::new();
    let native = cfg.dataplane.xdp_mode == XdpModeCfg::Native;
    let encap = cfg
        .vips
        .iter()
        .any(|v| matches!(v.mode, Mode::Ipip | Mode::Gue))
        .then(|| *cfg.dataplane.encap_mtu.get_ref());
    let names = cfg.dataplane.interfaces.get_ref();
    for name in names {
        items.extend(checks::interface(&iface_facts(name, native), native, encap));
    }
    let nat = |v6| {
        cfg.vips
            .iter()
            .any(|v| v.mode == Mode::Nat && v.address.get_ref().is_ipv6() == v6)
    };
    if nat(false) {
        items.push(checks::forwarding(
            "net.ipv4.ip_forward",
            sysctl("net/ipv4/ip_forward"),
        ));
    }
    if nat(true) {
        items.push(checks::forwarding(
            "net.ipv6.conf.all.forwarding",
            sysctl("net/ipv6/conf/all/forwarding"),
        ));
    }
    let per_iface: Vec<(String, Option<u32>)> = names
        .iter()
        .map(|n| (n.clone(), sysctl(&format!("net/ipv4/conf/{n}/rp_filter"))))
        .collect();
    items.push(checks::rp_filter(
        sysctl("net/ipv4/conf/all/rp_filter"),
        &per_iface,
    ));
    let mut dips: Vec<IpAddr> = cfg
        .vips
        .iter()
        .flat_map(|v| v.dips.iter().map(|d| *d.address.get_ref()))
        .collect();
    dips.sort();
    dips.dedup();
    for dip in dips {
        let oif = weir_sys::route_to(dip)
            .ok()
            .flatten()
            .and_then(|r| weir_sys::ifname(r.oif));
        let held = oif.as_ref().is_some_and(|o| names.contains(o));
        items.push(checks::dip_route(dip, oif.as_deref(), held));
    }
    if let Some(addr) = cfg.api.addr() {
        items.push(checks::port("api", addr, bindable(addr)));
    }
    if let Some(m) = &cfg.metrics {
        let addr = *m.listen.get_ref();
        items.push(checks::port("metrics", addr, bindable(addr)));
    }
    items
}

fn iface_facts(name: &str, native: bool) -> IfaceFacts {
    let ifindex = weir_sys::ifindex(name).ok().flatten();
    let driver = ifindex.and_then(|_| weir_sys::driver(name).ok());
    let features = weir_sys::features(name).unwrap_or_default();
    let active = |n: &str| features.iter().any(|f| f.name == n && f.active);
    let link = ifindex.and_then(|i| weir_sys::link(i, None).ok().flatten());
    IfaceFacts {
        name: name.to_string(),
        driver,
        native_xdp: ifindex
            .and_then(|i| weir_sys::xdp_features(i).ok().flatten())
            .map(|f| f.basic()),
        mtu: link.map_or(0, |l| l.mtu),
        lro: active("rx-lro"),
        gro_hw: active("rx-gro-hw"),
        rx_checksum: features
            .iter()
            .find(|f| f.name == "rx-checksum")
            .map(|f| f.active),
        target: ifindex.and_then(|i| crate::redirect_targets::probe(name, i, native)),
    }
}

fn bindable(addr: SocketAddr) -> Result<(), String> {
    TcpListener::bind(addr).map(drop).map_err(|e| e.to_string())
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A sysctl of this network namespace, by its path under /proc/sys.
fn sysctl(key: &str) -> Option<u32> {
    read_trimmed(&format!("/proc/sys/{key}"))?.parse().ok()
}

/// The effective uid, from /proc/self/status (`Uid: real effective ...`).
fn euid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// RLIMIT_MEMLOCK's soft limit in bytes, from /proc/self/limits; `None`
/// when unlimited.
fn memlock() -> Option<u64> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    line["Max locked memory".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
