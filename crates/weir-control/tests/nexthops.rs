//! The next-hop resolver of `weir serve`: the kernel's route and neighbour
//! tables, in a network namespace of the test's own, end up in the DIPs'
//! slots (`weir_dip.nh`), follow changes, and are what `weir_lb` forwards
//! with; with no next hop in the slot, `weir_lb` asks the FIB per packet.
//!
//! Expected MACs and interfaces are the ones the test put into the kernel's
//! tables, never read back from a run. Needs root (BPF, namespaces).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use weir_abi::*;
use weir_config::Config;
use weir_control::apply::apply;
use weir_control::nexthops::refresh;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::{self, LoadOptions};
use weir_dataplane::maps::Maps;
use weir_dataplane::testrun::{self, XdpAction};
use weir_sys::RouteWatch;

const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x02];
const GW_MAC2: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x03];
const CONFIGURED_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0xcf];
const DIP: &str = "10.1.7.1";

fn sh(cmd: &str) {
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Runs `f` in a new network namespace (on a thread of its own, which the
/// kernel removes with its namespace when it ends): `lo`, forwarding on, a
/// veth pair nxa/nxb, 10.77.0.1/24 on nxa and the DIPs' network 10.1.7.0/24 via
/// the gateway 10.77.0.2, whose MAC is GW_MAC.
fn in_netns(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare affects only the calling thread's namespaces.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
            for cmd in [
                "ip link set lo up".to_string(),
                // The FIB answers an XDP lookup only on a forwarding host.
                "sysctl -qw net.ipv4.conf.all.forwarding=1".to_string(),
                "ip link add nxa type veth peer name nxb".to_string(),
                "ip addr add 10.77.0.1/24 dev nxa".to_string(),
                "ip link set nxa up".to_string(),
                "ip link set nxb up".to_string(),
                format!(
                    "ip neigh replace 10.77.0.2 lladdr {} dev nxa nud permanent",
                    mac_text(GW_MAC)
                ),
                "ip route add 10.1.7.0/24 via 10.77.0.2".to_string(),
            ] {
                sh(&cmd);
            }
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

struct Lab {
    lb: loader::LoadedLb,
    maps: Maps,
    out: Iface,
    held: HashMap<String, (u32, [u8; 6])>,
    lock: Mutex<()>,
}

const VIP: &str = "10.0.7.100";

/// weir_lb with the FIB on and empty maps.
fn load_lb() -> (loader::LoadedLb, Maps) {
    let lb = loader::load(&LoadOptions {
        conn_capacity: 1024,
        half_open_capacity: 1024,
        max_vips: 4,
        max_dips: 8,
        fib_lookup: true,
        pin_dir: None,
        ..LoadOptions::default()
    })
    .expect("loading weir_lb (needs root)");
    let maps = Maps::of(&lb.skel).unwrap();
    (lb, maps)
}

/// weir_lb with the FIB on, one dsr VIP whose one DIP (slot 0) is DIP, with
/// a configured MAC; nxa is an interface weir sends by.
fn lab() -> Lab {
    let (lb, maps) = load_lb();
    let out = Iface::by_name("nxa").unwrap();
    maps.put_iface(out.ifindex, out.mac).unwrap();
    let (addr, family) = addr_words(DIP.parse().unwrap());
    maps.put_dip(
        0,
        &weir_dip {
            addr,
            family,
            mac_set: 1,
            mac: CONFIGURED_MAC,
            flags: WEIR_DIP_F_LIVE,
            gen: 1,
            weight: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let (vaddr, vfamily) = addr_words(VIP.parse().unwrap());
    maps.put_vip(
        &weir_vip_key {
            addr: vaddr,
            port: 80u16.to_be(),
            proto: Proto::Udp.number(),
            family: vfamily,
        },
        &weir_vip {
            vip_id: 0,
            mode: WEIR_MODE_DSR as u8,
            ..Default::default()
        },
    )
    .unwrap();
    let table = weir_core::dispatch::awfd::AwfdTable::from_weights(&[(0, 1)]).unwrap();
    maps.publish_table(0, 1, &table).unwrap();
    let held = HashMap::from([("nxa".to_string(), (out.ifindex, out.mac))]);
    Lab {
        lb,
        maps,
        out,
        held,
        lock: Mutex::new(()),
    }
}

impl Lab {
    fn nh(&self) -> weir_next_hop {
        self.maps.dip(0).unwrap().unwrap().nh
    }

    fn refresh(&self) -> usize {
        refresh(&self.maps, &self.held, &self.lock).unwrap()
    }

    /// A UDP datagram from client port `sport` to the VIP: its verdict and
    /// the (destination, source) MACs it leaves with.
    fn send(&self, sport: u16) -> (XdpAction, [u8; 6], [u8; 6]) {
        let t = FlowTuple {
            src: "192.0.2.7".parse().unwrap(),
            dst: VIP.parse().unwrap(),
            sport,
            dport: 80,
            proto: Proto::Udp,
        };
        let frame = udp_frame(&t);
        let r = testrun::run(&self.lb.skel.progs.weir_lb, &frame, 1).unwrap();
        let mac = |o: usize| <[u8; 6]>::try_from(&r.packet[o..o + 6]).unwrap();
        (r.action().unwrap(), mac(0), mac(6))
    }
}

/// An Ethernet/IPv4/UDP frame of `t` (checksums are not what this test is about;
/// dsr leaves L3 alone).
fn udp_frame(t: &FlowTuple) -> Vec<u8> {
    let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) = (t.src, t.dst) else {
        unreachable!()
    };
    let mut p = vec![0u8; 14 + 20 + 8 + 4];
    p[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
    p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xcc]);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    p[14] = 0x45;
    p[16..18].copy_from_slice(&32u16.to_be_bytes());
    p[22] = 64;
    p[23] = 17;
    p[26..30].copy_from_slice(&src.octets());
    p[30..34].copy_from_slice(&dst.octets());
    p[34..36].copy_from_slice(&t.sport.to_be_bytes());
    p[36..38].copy_from_slice(&t.dport.to_be_bytes());
    p[38..40].copy_from_slice(&12u16.to_be_bytes());
    p
}

#[test]
fn next_hops_follow_the_kernels_tables_into_the_slots() {
    in_netns(|| {
        let l = lab();
        let watch = RouteWatch::new().unwrap();
        assert_eq!(l.nh().ifindex, 0, "a new slot starts unresolved");

        // Unresolved: the FIB answers per packet (the gateway's MAC).
        assert_eq!(l.send(1000), (XdpAction::Redirect, GW_MAC, l.out.mac));

        // Resolved into the slot: the route's interface and the gateway.
        assert_eq!(l.refresh(), 1);
        let want = weir_next_hop {
            ifindex: l.out.ifindex,
            dmac: GW_MAC,
            smac: l.out.mac,
        };
        assert_eq!(l.nh(), want);
        assert_eq!(l.refresh(), 0, "nothing changed: nothing written");

        // The gateway's MAC changes: netlink says so, the slot follows, and
        // the data plane uses the slot.
        sh(&format!(
            "ip neigh replace 10.77.0.2 lladdr {} dev nxa nud permanent",
            mac_text(GW_MAC2)
        ));
        assert!(
            watch.wait(Duration::from_secs(2)).unwrap(),
            "no netlink change"
        );
        assert_eq!(l.refresh(), 1);
        assert_eq!(l.nh().dmac, GW_MAC2);
        assert_eq!(l.send(1001), (XdpAction::Redirect, GW_MAC2, l.out.mac));

        // The slot's next hop wins over the FIB: a stale one in the slot
        // (written by hand) is what goes out, no lookup.
        let mut d = l.maps.dip(0).unwrap().unwrap();
        d.nh.dmac = [2, 0, 0, 0, 0x77, 0x55];
        l.maps.put_dip(0, &d).unwrap();
        assert_eq!(l.send(1002).1, [2, 0, 0, 0, 0x77, 0x55]);

        // No route any more: cleared, and the FIB finds none either.
        sh("ip route del 10.1.7.0/24");
        assert!(
            watch.wait(Duration::from_secs(2)).unwrap(),
            "no netlink change"
        );
        assert_eq!(l.refresh(), 1);
        assert_eq!(l.nh(), weir_next_hop::default());
        let (verdict, _, _) = l.send(1003);
        assert_eq!(verdict, XdpAction::Drop, "no route: dropped");

        // A retired DIP is left alone.
        sh("ip route add 10.1.7.0/24 via 10.77.0.2");
        let mut d = l.maps.dip(0).unwrap().unwrap();
        d.flags = 0;
        l.maps.put_dip(0, &d).unwrap();
        assert_eq!(l.refresh(), 0);
    });
}

#[test]
fn a_route_by_an_interface_weir_does_not_hold_resolves_to_nothing() {
    in_netns(|| {
        let mut l = lab();
        l.held.clear();
        assert_eq!(l.refresh(), 0);
        assert_eq!(l.nh().ifindex, 0);
    });
}

/// `apply` rewrites every live DIP's slot on each reload; a slot whose DIP
/// keeps its address keeps the next hop the resolver wrote (a weight change
/// must not send its packets back to the FIB, or, in the software tier,
/// drop them), and only a DIP at a new address starts unresolved.
#[test]
fn a_weight_change_keeps_the_slots_next_hop_a_new_address_starts_unresolved() {
    in_netns(|| {
        let (_lb, maps) = load_lb();
        let out = Iface::by_name("nxa").unwrap();
        maps.put_iface(out.ifindex, out.mac).unwrap();
        let held = HashMap::from([("nxa".to_string(), (out.ifindex, out.mac))]);
        let lock = Mutex::new(());
        let config = |address: &str, weight: u32| {
            Config::parse(
                "t.toml",
                &format!(
                    "[dataplane]\ninterfaces = [\"nxa\"]\n\n[[vip]]\nname = \"web\"\n\
                     address = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
                     [[vip.dip]]\naddress = \"{address}\"\nport = 8080\nweight = {weight}\n"
                ),
            )
            .unwrap()
        };
        let live_slot = |address: &str| {
            let (addr, _) = addr_words(address.parse().unwrap());
            (0..maps.dip_slots())
                .find_map(|id| {
                    let d = maps.dip(id).unwrap()?;
                    (d.flags & WEIR_DIP_F_LIVE != 0 && d.addr == addr).then_some((id, d))
                })
                .unwrap_or_else(|| panic!("no live slot holds {address}"))
        };

        apply(&maps, &config(DIP, 1)).unwrap();
        assert_eq!(refresh(&maps, &held, &lock).unwrap(), 1);
        let (slot, d) = live_slot(DIP);
        let want = weir_next_hop {
            ifindex: out.ifindex,
            dmac: GW_MAC,
            smac: out.mac,
        };
        assert_eq!(d.nh, want);

        for weight in [5, 1, 3] {
            apply(&maps, &config(DIP, weight)).unwrap();
            let (same, d) = live_slot(DIP);
            assert_eq!((same, d.weight), (slot, weight));
            assert_eq!(d.nh, want, "weight {weight}: the next hop went");
            assert_eq!(
                refresh(&maps, &held, &lock).unwrap(),
                0,
                "nothing to resolve again"
            );
        }

        // The DIP moves to another address: a new slot, unresolved until
        // the resolver's next round; the old slot is retired.
        let moved = "10.1.7.9";
        apply(&maps, &config(moved, 3)).unwrap();
        let (new_slot, d) = live_slot(moved);
        assert_ne!(new_slot, slot);
        assert_eq!(d.nh, weir_next_hop::default());
        assert_eq!(maps.dip(slot).unwrap().unwrap().flags & WEIR_DIP_F_LIVE, 0);
        assert_eq!(refresh(&maps, &held, &lock).unwrap(), 1);
        assert_eq!(live_slot(moved).1.nh, want);
    });
}
