//! The verdicts of `weir doctor`, from what was read of the host: no I/O
//! here, so every rule is unit-tested. Each function returns one [`Item`]
//! (or none where the check does not apply) saying OK, WARN or FAIL, and
//! for anything but OK what to change.

use std::net::{IpAddr, SocketAddr};

use super::{Item, Level};
use crate::redirect_targets::{RedirectTarget, Verdict};

/// The oldest kernel weir runs on.
const MIN_KERNEL: (u32, u32) = (5, 15);
/// From this kernel on BPF memory is charged to the memory cgroup, not
/// RLIMIT_MEMLOCK.
const MEMCG_KERNEL: (u32, u32) = (5, 11);
/// What `weir serve` needs locked on an older kernel, at least.
const MIN_MEMLOCK: u64 = 64 << 20;

/// `5.15.0-91-generic` -> (5, 15).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn kernel(release: &str, btf: bool) -> Item {
    let name = "kernel";
    match kernel_version(release) {
        Some(v) if v < MIN_KERNEL => Item::fail(
            name,
            format!("Linux {release}: weir needs 5.15 or newer"),
            "boot a kernel of 5.15 or newer (Debian 12's 6.1 will do)",
        ),
        None => Item::warn(
            name,
            format!("cannot read a version from the kernel release {release:?}"),
            "make sure the kernel is 5.15 or newer",
        ),
        Some(_) if !btf => Item::fail(
            name,
            format!("Linux {release} has no BTF (/sys/kernel/btf/vmlinux is missing)"),
            "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distribution's is)",
        ),
        Some(_) => Item::ok(name, format!("Linux {release} with BTF")),
    }
}

pub fn root(euid: Option<u32>) -> Item {
    match euid {
        Some(0) => Item::ok("root", "running as root".to_string()),
        Some(uid) => Item::fail(
            "root",
            format!("running as uid {uid}: weir serve loads BPF and attaches XDP as root"),
            "run weir doctor and weir serve as root (sudo)",
        ),
        None => Item::warn(
            "root",
            "cannot read this process's uid".to_string(),
            "run weir serve as root",
        ),
    }
}

/// What the pin directory's parent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bpffs {
    pub mounted: bool,
    /// This process is in a mount namespace of its own (`ip netns exec`).
    pub private_mount_ns: bool,
    /// The parent is /sys/fs/bpf, which weir serve mounts when missing.
    pub conventional: bool,
}

pub fn bpffs(parent: &str, b: Bpffs) -> Item {
    let name = "bpffs";
    let mount = format!("`mount -t bpf bpf {parent}`");
    match (b.mounted, b.private_mount_ns, b.conventional) {
        (true, false, _) => Item::ok(name, format!("{parent} is a BPF filesystem")),
        (true, true, _) => Item::warn(
            name,
            format!(
                "{parent} is a BPF filesystem of this process's own mount namespace (as under \
                 `ip netns exec`): the connection state pinned there goes away when weir exits"
            ),
            "run weir serve in the host's mount namespace (nsenter --net=/run/netns/NS), or \
             accept that restarts reset every connection (weir serve --ephemeral-state)",
        ),
        (false, false, true) => Item::warn(
            name,
            format!("{parent} is no BPF filesystem; weir serve mounts one there"),
            &format!("{mount} now, or let weir serve do it"),
        ),
        (false, true, _) => Item::fail(
            name,
            format!(
                "{parent} is no BPF filesystem in this mount namespace of its own (as under \
                 `ip netns exec`): weir serve refuses to pin its state where it would vanish"
            ),
            &format!(
                "run weir serve in the host's mount namespace, or {mount} and start it with \
                 --ephemeral-state"
            ),
        ),
        (false, false, false) => Item::fail(
            name,
            format!("{parent} is no BPF filesystem: weir cannot pin its state there"),
            &format!("{mount}, or set dataplane.pin_dir under /sys/fs/bpf"),
        ),
    }
}

/// `limit`: RLIMIT_MEMLOCK's soft value in bytes (`None`: unlimited).
pub fn memlock(release: &str, limit: Option<u64>) -> Item {
    let name = "memlock";
    let memcg = kernel_version(release).is_some_and(|v| v >= MEMCG_KERNEL);
    match limit {
        _ if memcg => Item::ok(
            name,
            "BPF memory is charged to the memory cgroup on this kernel, not RLIMIT_MEMLOCK"
                .to_string(),
        ),
        None => Item::ok(name, "RLIMIT_MEMLOCK is unlimited".to_string()),
        Some(l) if l >= MIN_MEMLOCK => Item::ok(name, format!("RLIMIT_MEMLOCK is {l} bytes")),
        Some(l) => Item::fail(
            name,
            format!("RLIMIT_MEMLOCK is {l} bytes: too little for weir's maps on this kernel"),
            "`ulimit -l unlimited` before weir serve (LimitMEMLOCK=infinity in its unit)",
        ),
    }
}

/// What was read of one configured interface.
#[derive(Debug, Clone)]
pub struct IfaceFacts {
    pub name: String,
    /// None: no interface of that name here.
    pub driver: Option<String>,
    /// The driver runs XDP programs natively; None when the kernel cannot say.
    pub native_xdp: Option<bool>,
    pub mtu: u32,
    /// Active offloads by their kernel names.
    pub lro: bool,
    pub gro_hw: bool,
    pub rx_checksum: Option<bool>,
    /// The interface as a target of weir's frames (a veth's peer).
    pub target: Option<RedirectTarget>,
}

/// The checks of one configured interface; `native` is the XDP mode weir
/// attaches in, `encap_mtu` set when an ipip or gue VIP sends tunnelled
/// datagrams of up to that size.
pub fn interface(f: &IfaceFacts, native: bool, encap_mtu: Option<u32>) -> Vec<Item> {
    let name = format!("interface {}", f.name);
    let Some(driver) = &f.driver else {
        return vec![Item::fail(
            &name,
            format!("there is no interface {} here", f.name),
            "name an interface of this host in dataplane.interfaces (`ip link` lists them)",
        )];
    };
    let mut items = Vec::new();
    let is_veth = driver == "veth";
    items.push(match (native, f.native_xdp) {
        (false, _) => Item::ok(
            &name,
            format!("driver {driver}; generic XDP (slower, any driver)"),
        ),
        (true, Some(true)) | (true, None) if is_veth => Item::ok(
            &name,
            format!("driver {driver}: native XDP (a veth: its peer must take the frames, below)"),
        ),
        (true, Some(true)) => Item::ok(&name, format!("driver {driver}: native XDP")),
        (true, Some(false)) => Item::fail(
            &name,
            format!("driver {driver} has no native XDP"),
            "use a NIC whose driver has it (mlx5, ice, i40e, ixgbe, bnxt_en, ena, virtio_net...), \
             or set dataplane.xdp_mode = \"generic\" (slower)",
        ),
        (true, None) => Item::warn(
            &name,
            format!("driver {driver}: this kernel does not say whether it has native XDP"),
            "check the driver's XDP support; weir serve refuses to attach where it has none",
        ),
    });
    if let Some(t) = &f.target {
        let what = format!("{name} sending");
        items.push(match t.verdict {
            Verdict::Ok => Item::ok(&what, "frames weir sends out by it can leave".to_string()),
            Verdict::Drops => Item::fail(
                &what,
                t.problem.clone().unwrap_or_default(),
                t.fix.as_deref().unwrap_or_default(),
            ),
            Verdict::Unchecked => Item::warn(
                &what,
                t.problem.clone().unwrap_or_default(),
                t.fix.as_deref().unwrap_or_default(),
            ),
        });
    }
    let offloads = format!("{name} offloads");
    items.push(if f.lro || f.gro_hw {
        let on: Vec<&str> = [(f.lro, "lro"), (f.gro_hw, "rx-gro-hw")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        Item::warn(
            &offloads,
            format!(
                "{} on: the NIC merges frames before XDP sees them (most drivers refuse XDP \
                 then, or weir forwards merged frames)",
                on.join(" and ")
            ),
            &format!("`ethtool -K {} lro off rx-gro-hw off`", f.name),
        )
    } else {
        Item::ok(
            &offloads,
            format!(
                "lro and rx-gro-hw off; rx-checksum {}",
                match f.rx_checksum {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "unknown",
                }
            ),
        )
    });
    if let Some(encap) = encap_mtu {
        let mtu = format!("{name} mtu");
        items.push(if f.mtu >= encap {
            Item::ok(
                &mtu,
                format!(
                    "MTU {} holds the tunnelled datagrams (encap_mtu {encap})",
                    f.mtu
                ),
            )
        } else {
            Item::warn(
                &mtu,
                format!(
                    "MTU {} is below dataplane.encap_mtu {encap}: tunnelled datagrams longer \
                     than the MTU do not leave by it",
                    f.mtu
                ),
                &format!(
                    "`ip link set dev {} mtu {encap}` (and on the path to the DIPs), or lower \
                     dataplane.encap_mtu to {} and the clients' MSS with it",
                    f.name, f.mtu
                ),
            )
        });
    }
    items
}

/// `net.ipv4.ip_forward` (or IPv6's forwarding), when a nat VIP needs it.
pub fn forwarding(key: &str, value: Option<u32>) -> Item {
    match value {
        Some(v) if v > 0 => Item::ok("forwarding", format!("{key} = {v}")),
        Some(v) => Item::fail(
            "forwarding",
            format!(
                "{key} = {v}: nat mode needs the host to forward (the first packets of a \
                 connection while a neighbour resolves, and ICMP, take the kernel's path)"
            ),
            &format!("`sysctl -w {key}=1` (and in /etc/sysctl.d/ to keep it)"),
        ),
        None => Item::warn(
            "forwarding",
            format!("cannot read {key}"),
            &format!("`sysctl -w {key}=1`"),
        ),
    }
}

/// Reverse-path filtering on the configured interfaces: the kernel uses
/// the larger of `all` and the interface's own value.
pub fn rp_filter(all: Option<u32>, per_iface: &[(String, Option<u32>)]) -> Item {
    let strict: Vec<&str> = per_iface
        .iter()
        .filter(|(_, v)| all.max(*v) == Some(1))
        .map(|(n, _)| n.as_str())
        .collect();
    if strict.is_empty() {
        return Item::ok(
            "rp_filter",
            "no configured interface filters strictly by reverse path".to_string(),
        );
    }
    Item::warn(
        "rp_filter",
        format!(
            "strict reverse-path filtering (1) on {}: packets weir passes to the kernel (ICMP, \
             a connection's first packets while a neighbour resolves) are dropped when the \
             reverse route leaves by another interface",
            strict.join(", ")
        ),
        &format!(
            "loose mode: `sysctl -w net.ipv4.conf.all.rp_filter=2{}`",
            strict
                .iter()
                .map(|n| format!(" net.ipv4.conf.{n}.rp_filter=2"))
                .collect::<String>()
        ),
    )
}

/// The kernel's route to a DIP: `oif` the interface it leaves by (None: no
/// route), `held` whether weir holds that interface.
pub fn dip_route(dip: IpAddr, oif: Option<&str>, held: bool) -> Item {
    let name = format!("route to {dip}");
    match oif {
        None => Item::fail(
            &name,
            format!("no route to DIP {dip}: weir cannot send it anything"),
            &format!(
                "add a route to {dip} by one of dataplane.interfaces (`ip route add {dip} via \
                 ROUTER dev IF`), or correct the address"
            ),
        ),
        Some(dev) if !held => Item::warn(
            &name,
            format!(
                "DIP {dip} is reached by {dev}, which is not in dataplane.interfaces: weir \
                 sends only by its own interfaces"
            ),
            &format!("add {dev} to dataplane.interfaces, or route {dip} by one of them"),
        ),
        Some(dev) => Item::ok(&name, format!("by {dev}")),
    }
}

/// A listener weir serve opens: `free` whether it could be bound now.
pub fn port(what: &str, addr: SocketAddr, free: Result<(), String>) -> Item {
    let name = format!("{what} port");
    match free {
        Ok(()) => Item::ok(&name, format!("{addr} is free")),
        Err(e) => Item::fail(
            &name,
            format!("cannot listen on {addr}: {e}"),
            &format!(
                "stop what listens there (`ss -ltnp 'sport = :{}'`), or change [{what}] listen",
                addr.port()
            ),
        ),
    }
}

/// The two ARP settings a dsr backend needs, read on the backend.
pub fn arp(arp_ignore: Option<u32>, arp_announce: Option<u32>) -> Item {
    match (arp_ignore, arp_announce) {
        (Some(i), Some(a)) if i >= 1 && a == 2 => Item::ok(
            "arp",
            format!("arp_ignore = {i}, arp_announce = {a}: the VIP on lo is not announced"),
        ),
        (i, a) => Item::fail(
            "arp",
            format!(
                "arp_ignore = {}, arp_announce = {}: a dsr backend holding the VIP on lo \
                 answers ARP for it and steals the VIP's traffic from weir",
                i.map_or("?".into(), |v| v.to_string()),
                a.map_or("?".into(), |v| v.to_string())
            ),
            "`sysctl -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2`",
        ),
    }
}

/// Whether a dsr backend holds `vip` on an interface (on lo, as a /32).
pub fn vip_on_backend(vip: IpAddr, held: bool) -> Item {
    let name = format!("vip {vip}");
    if held {
        Item::ok(
            &name,
            "held here: the backend accepts the VIP's packets".to_string(),
        )
    } else {
        Item::fail(
            &name,
            format!("{vip} is not an address of this host: dsr packets to it are dropped"),
            &format!("`ip addr add {vip}/32 dev lo`"),
        )
    }
}

impl Item {
    fn ok(check: &str, detail: String) -> Item {
        Item {
            check: check.to_string(),
            level: Level::Ok,
            detail,
            fix: None,
        }
    }
    fn warn(check: &str, detail: String, fix: &str) -> Item {
        Item {
            check: check.to_string(),
            level: Level::Warn,
            detail,
            fix: Some(fix.to_string()),
        }
    }
    fn fail(check: &str, detail: String, fix: &str) -> Item {
        Item {
            check: check.to_string(),
            level: Level::Fail,
            detail,
            fix: Some(fix.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_older_than_5_15_or_without_btf_fail() {
        assert_eq!(kernel_version("6.18.44-fc-v595"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel("6.1.0-13-amd64", true).level, Level::Ok);
        assert_eq!(kernel("5.15.0", true).level, Level::Ok);
        let old = kernel("5.10.0-28-amd64", true);
        assert_eq!(old.level, Level::Fail);
        assert!(old.detail.contains("5.15 or newer"), "{old:?}");
        assert_eq!(kernel("6.1.0", false).level, Level::Fail);
        assert_eq!(kernel("weird", true).level, Level::Warn);
    }

    #[test]
    fn root_is_required() {
        assert_eq!(root(Some(0)).level, Level::Ok);
        assert_eq!(root(Some(1000)).level, Level::Fail);
        assert_eq!(root(None).level, Level::Warn);
    }

    #[test]
    fn bpffs_missing_fails_only_where_serve_would_refuse() {
        let b = |mounted, private_mount_ns, conventional| Bpffs {
            mounted,
            private_mount_ns,
            conventional,
        };
        assert_eq!(bpffs("/sys/fs/bpf", b(true, false, true)).level, Level::Ok);
        assert_eq!(
            bpffs("/sys/fs/bpf", b(false, false, true)).level,
            Level::Warn
        );
        let private = bpffs("/sys/fs/bpf", b(false, true, true));
        assert_eq!(private.level, Level::Fail);
        assert!(private
            .fix
            .unwrap()
            .contains("mount -t bpf bpf /sys/fs/bpf"));
        assert_eq!(bpffs("/sys/fs/bpf", b(true, true, true)).level, Level::Warn);
        assert_eq!(
            bpffs("/srv/pins", b(false, false, false)).level,
            Level::Fail
        );
    }

    #[test]
    fn memlock_matters_only_before_5_11() {
        assert_eq!(memlock("6.1.0", Some(65536)).level, Level::Ok);
        assert_eq!(memlock("5.10.0", Some(65536)).level, Level::Fail);
        assert_eq!(memlock("5.10.0", None).level, Level::Ok);
        assert_eq!(memlock("5.10.0", Some(1 << 30)).level, Level::Ok);
    }

    fn facts(driver: &str) -> IfaceFacts {
        IfaceFacts {
            name: "eth0".into(),
            driver: Some(driver.into()),
            native_xdp: Some(true),
            mtu: 1500,
            lro: false,
            gro_hw: false,
            rx_checksum: Some(true),
            target: None,
        }
    }

    #[test]
    fn a_missing_interface_fails_alone() {
        let mut f = facts("mlx5_core");
        f.driver = None;
        let items = interface(&f, true, None);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].level, Level::Fail);
        assert!(items[0].detail.contains("no interface eth0"));
    }

    #[test]
    fn a_driver_without_native_xdp_fails_in_native_mode_only() {
        let mut f = facts("r8169");
        f.native_xdp = Some(false);
        assert_eq!(interface(&f, true, None)[0].level, Level::Fail);
        assert!(interface(&f, true, None)[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("xdp_mode = \"generic\""));
        assert_eq!(interface(&f, false, None)[0].level, Level::Ok);
        assert_eq!(interface(&facts("ice"), true, None)[0].level, Level::Ok);
    }

    #[test]
    fn lro_or_gro_hw_warn_with_the_ethtool_line() {
        let mut f = facts("ixgbe");
        f.lro = true;
        let items = interface(&f, true, None);
        let off = items
            .iter()
            .find(|i| i.check == "interface eth0 offloads")
            .unwrap();
        assert_eq!(off.level, Level::Warn);
        assert!(off.detail.starts_with("lro on"), "{off:?}");
        assert_eq!(
            off.fix.as_deref(),
            Some("`ethtool -K eth0 lro off rx-gro-hw off`")
        );
        f.lro = false;
        let items = interface(&f, true, None);
        assert!(items.iter().all(|i| i.level == Level::Ok), "{items:?}");
    }

    #[test]
    fn a_veth_target_that_drops_fails_with_its_fix() {
        let mut f = facts("veth");
        f.target = Some(RedirectTarget {
            interface: "eth0".into(),
            verdict: Verdict::Drops,
            peer: Some("p".into()),
            peer_netns: None,
            problem: Some("eth0 is a veth whose peer p has neither".into()),
            fix: Some("`ethtool -K p gro on`".into()),
        });
        let items = interface(&f, true, None);
        let send = items
            .iter()
            .find(|i| i.check == "interface eth0 sending")
            .unwrap();
        assert_eq!(send.level, Level::Fail);
        assert_eq!(send.fix.as_deref(), Some("`ethtool -K p gro on`"));
    }

    #[test]
    fn an_mtu_below_encap_mtu_warns() {
        let f = facts("ice");
        let mtu = |f: &IfaceFacts, encap| {
            interface(f, true, encap)
                .into_iter()
                .find(|i| i.check == "interface eth0 mtu")
        };
        assert!(mtu(&f, None).is_none());
        assert_eq!(mtu(&f, Some(1500)).unwrap().level, Level::Ok);
        let low = mtu(&f, Some(1520)).unwrap();
        assert_eq!(low.level, Level::Warn);
        assert!(low.fix.unwrap().contains("ip link set dev eth0 mtu 1520"));
    }

    #[test]
    fn forwarding_off_fails() {
        assert_eq!(forwarding("net.ipv4.ip_forward", Some(1)).level, Level::Ok);
        let off = forwarding("net.ipv4.ip_forward", Some(0));
        assert_eq!(off.level, Level::Fail);
        assert_eq!(
            off.fix.as_deref(),
            Some("`sysctl -w net.ipv4.ip_forward=1` (and in /etc/sysctl.d/ to keep it)")
        );
    }

    #[test]
    fn strict_rp_filter_on_all_or_one_interface_warns() {
        let ifs = |v| vec![("eth0".to_string(), Some(v)), ("eth1".to_string(), Some(0))];
        assert_eq!(rp_filter(Some(0), &ifs(0)).level, Level::Ok);
        assert_eq!(rp_filter(Some(2), &ifs(0)).level, Level::Ok);
        let one = rp_filter(Some(0), &ifs(1));
        assert_eq!(one.level, Level::Warn);
        assert!(one.detail.contains("on eth0:"), "{one:?}");
        let all = rp_filter(Some(1), &ifs(0));
        assert!(all.detail.contains("on eth0, eth1:"), "{all:?}");
    }

    #[test]
    fn dip_routes() {
        let dip: IpAddr = "10.0.1.11".parse().unwrap();
        assert_eq!(dip_route(dip, None, false).level, Level::Fail);
        assert_eq!(dip_route(dip, Some("eth9"), false).level, Level::Warn);
        assert_eq!(dip_route(dip, Some("eth0"), true).level, Level::Ok);
    }

    #[test]
    fn a_busy_port_fails_and_says_how_to_find_its_owner() {
        let addr: SocketAddr = "127.0.0.1:9190".parse().unwrap();
        assert_eq!(port("api", addr, Ok(())).level, Level::Ok);
        let busy = port("api", addr, Err("address in use".into()));
        assert_eq!(busy.level, Level::Fail);
        assert!(busy.fix.unwrap().contains("sport = :9190"));
    }

    #[test]
    fn dsr_backends_need_arp_settings_and_the_vip() {
        assert_eq!(arp(Some(1), Some(2)).level, Level::Ok);
        assert_eq!(arp(Some(0), Some(2)).level, Level::Fail);
        assert_eq!(arp(Some(1), Some(0)).level, Level::Fail);
        let vip: IpAddr = "203.0.113.10".parse().unwrap();
        assert_eq!(vip_on_backend(vip, true).level, Level::Ok);
        assert!(vip_on_backend(vip, false)
            .fix
            .unwrap()
            .contains("ip addr add 203.0.113.10/32 dev lo"));
    }
}
