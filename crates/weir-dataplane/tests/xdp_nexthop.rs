//! Next hops of `weir_lb`, table-driven through BPF_PROG_TEST_RUN: the one
//! the control plane resolved into the DIP's slot (`weir_dip.nh`), and the
//! fallbacks when there is none.
//!
//! Each case is {name, input frame, verdict, output frame, counter deltas},
//! as in xdp_lb.rs; expected frames are the reference frames of
//! `common::packet` with the MACs the case's next hop names, never a run's.
//!
//! Every test runs in a network namespace of its own (unshare on a thread of
//! its own, which the kernel removes when the thread ends, also on a panic):
//! `lo` (ifindex 1, where test runs arrive) and a veth pair `nha`/`nhb`, so
//! that a next hop on another interface is a real redirect target. Needs
//! root.

mod common;

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_core::flow::FlowTuple;
use weir_dataplane::iface::Iface;
use weir_dataplane::testrun::XdpAction::{Drop, Redirect, Tx};

/// The interface a next hop may leave by besides `lo` (peer: `nhb`).
const OUT_IF: &str = "nha";
/// MACs of a resolved next hop: not the DIP's configured MAC, not the
/// interface's, so an output frame shows which one was used.
const NH_DMAC: [u8; 6] = [0x02, 0, 0, 0, 0x0d, 0x0d];
const NH_SMAC: [u8; 6] = [0x02, 0, 0, 0, 0x05, 0x05];

/// Runs `f` in a new network namespace with `lo` up and the veth pair, on
/// a thread of its own (namespaces are per thread, and `ip` inherits it).
fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    in_new_netns(
        &[
            "ip link add nha type veth peer name nhb",
            "ip link set nha up",
            "ip link set nhb up",
        ],
        f,
    )
}

fn syn(src: &str, sport: u16, vip: &str, dport: u16) -> Frame {
    client(Frame::tcp(ip(src), sport, ip(vip), dport, TcpFlags::SYN))
}

fn ack(f: &Frame) -> Frame {
    Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..f.clone()
    }
}

/// `f` as it leaves for `dip` by a next hop with these MACs (nat rewrites
/// the destination, dsr only L2).
fn out(f: &Frame, dip: &Dip, mode: u32, smac: [u8; 6], dmac: [u8; 6]) -> Vec<u8> {
    let f = f.clone().macs(smac, dmac);
    if mode == DSR {
        return f.bytes();
    }
    let port = if dip.port == 0 { f.dport } else { dip.port };
    f.with_dst(dip.addr, port).bytes()
}

/// Writes `nh` into the slot of `dip` (what the control plane's resolver
/// does), keeping the rest of the slot.
fn set_nh(h: &Harness, dip: &Dip, nh: weir_next_hop) {
    let mut d = h.maps.dip(dip.id).unwrap().expect("a DIP slot");
    d.nh = nh;
    h.maps.put_dip(dip.id, &d).unwrap();
}

fn nh(ifindex: u32) -> weir_next_hop {
    weir_next_hop {
        ifindex,
        dmac: NH_DMAC,
        smac: NH_SMAC,
    }
}

const MISS_HALF_OPEN: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_HALF_OPEN_NEW];
const MISS_NEW: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW];
const HIT: &[u32] = &[WEIR_STAT_CONN_HIT];

/// The SYN, promoting ACK and a hit of flow `f` to VIP `vip` (mode `mode`),
/// all sent as `verdict`/`outcome` with the next hop's MACs.
fn flow_cases(
    h: &Harness,
    f: &Frame,
    vip: u32,
    mode: u32,
    verdict: weir_dataplane::testrun::XdpAction,
    outcome: u32,
    macs: ([u8; 6], [u8; 6]),
) -> Vec<Case> {
    let d = h.fx.predict(vip, &f.tuple()).unwrap().clone();
    let a = ack(f);
    let name = |what: &str| format!("{what} of {}:{} (vip {vip})", f.src, f.sport);
    let case = |what: &str, frame: &Frame, events: &[u32]| {
        let c = Case::new(name(what), frame.bytes(), verdict, outcome).events(events);
        let want = out(frame, &d, mode, macs.0, macs.1);
        if verdict == Drop && mode == DSR {
            c.raw_output(want)
        } else {
            c.output(want)
        }
    };
    vec![
        case("SYN", f, MISS_HALF_OPEN),
        case("ACK", &a, MISS_NEW),
        case("hit", &a, HIT),
    ]
}

/// A resolved next hop is used as it is: no FIB, no configured MAC, and no
/// interface lookup (`ifaces` may lose the ingress interface: the slot
/// holds the source MAC).
#[test]
fn a_resolved_next_hop_needs_no_lookup() {
    in_netns(|| {
        let h = Harness::new(&test_options());
        let out_if = Iface::by_name(OUT_IF).unwrap();
        h.maps.put_iface(out_if.ifindex, out_if.mac).unwrap();
        let ifaces = &h.maps.ifaces.as_ref().unwrap().1;
        ifaces.delete(&TEST_IFINDEX.to_ne_bytes()).unwrap();

        let mut cases = Vec::new();
        // On the ingress interface: XDP_TX with the slot's MACs.
        let f = syn("192.0.2.10", 41000, "10.0.0.100", 80);
        let d = h.fx.predict(0, &f.tuple()).unwrap().clone();
        set_nh(&h, &d, nh(TEST_IFINDEX));
        cases.extend(flow_cases(
            &h,
            &f,
            0,
            NAT,
            Tx,
            WEIR_STAT_TX,
            (NH_SMAC, NH_DMAC),
        ));
        let g = syn("192.0.2.11", 41001, "10.0.0.101", 80);
        let dg = h.fx.predict(2, &g.tuple()).unwrap().clone();
        set_nh(&h, &dg, nh(TEST_IFINDEX));
        cases.extend(flow_cases(
            &h,
            &g,
            2,
            DSR,
            Tx,
            WEIR_STAT_TX,
            (NH_SMAC, NH_DMAC),
        ));
        run_cases(&h, cases);

        // On another interface that is a redirect target: XDP_REDIRECT.
        let mut cases = Vec::new();
        let f = syn("2001:db8:c::10", 42000, "2001:db8::100", 80);
        let d = h.fx.predict(4, &f.tuple()).unwrap().clone();
        set_nh(&h, &d, nh(out_if.ifindex));
        cases.extend(flow_cases(
            &h,
            &f,
            4,
            NAT,
            Redirect,
            WEIR_STAT_REDIRECT,
            (NH_SMAC, NH_DMAC),
        ));
        // On an interface weir does not send by: dropped, the hit counted.
        let g = syn("192.0.2.12", 41002, "10.0.0.101", 80);
        let dg = h.fx.predict(2, &g.tuple()).unwrap().clone();
        set_nh(&h, &dg, nh(out_if.ifindex + 100));
        cases.extend(flow_cases(
            &h,
            &g,
            2,
            DSR,
            Drop,
            WEIR_STAT_DROP_REDIRECT,
            (NH_SMAC, NH_DMAC),
        ));
        run_cases(&h, cases);
        h.assert_balanced("resolved next hops");
    });
}

/// Without a resolved next hop (ifindex 0) and with the FIB off, the DIP's
/// configured MAC goes out of the ingress interface, with that interface's
/// MAC from `ifaces`, as before next hops were resolved.
#[test]
fn an_unresolved_next_hop_falls_back_to_the_configured_mac() {
    in_netns(|| {
        let h = Harness::new(&test_options());
        let f = syn("192.0.2.20", 43000, "10.0.0.100", 80);
        let d = h.fx.predict(0, &f.tuple()).unwrap().clone();
        set_nh(&h, &d, nh(TEST_IFINDEX));
        let mut cases = vec![Case::new("SYN, resolved", f.bytes(), Tx, WEIR_STAT_TX)
            .output(out(&f, &d, NAT, NH_SMAC, NH_DMAC))
            .events(MISS_HALF_OPEN)];
        let a = ack(&f);
        let d2 = d.clone();
        cases.push(
            Case::new("ACK, the resolver cleared it", a.bytes(), Tx, WEIR_STAT_TX)
                .output(out(&a, &d, NAT, LB_IF_MAC, dip_mac(d.id)))
                .events(MISS_NEW)
                .before(move |h| set_nh(h, &d2, weir_next_hop::default())),
        );
        cases.push(
            Case::new("hit, still unresolved", a.bytes(), Tx, WEIR_STAT_TX)
                .output(out(&a, &d, NAT, LB_IF_MAC, dip_mac(d.id)))
                .events(HIT),
        );
        run_cases(&h, cases);
    });
}

/// The MAC of the client's neighbour entry in the namespace.
const CLIENT_NH_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x07, 0x07];

/// A nat connection whose reverse entry its LRU evicted apart from the
/// connection: the client's packets leave the reverse table alone (a hit is
/// one lookup), and the DIP's next reply finds the connection under its
/// endpoint's VIPs, writes the reverse entry back with the FIB's way to the
/// client, and leaves from the VIP by that way; the reply after it uses the
/// restored entry.
#[test]
fn an_evicted_reverse_entry_is_restored_by_the_reply() {
    let setup = [
        "ip link add nha type veth peer name nhb",
        "ip link set nha up",
        "ip link set nhb up",
        "ip addr add 192.0.2.1/24 dev nha",
        "ip neigh replace 192.0.2.77 lladdr 02:00:00:00:07:07 dev nha nud permanent",
        "sysctl -qw net.ipv4.conf.all.forwarding=1",
        "sysctl -qw net.ipv4.conf.lo.forwarding=1",
    ];
    in_new_netns(&setup, || {
        let h = Harness::new(&test_options());
        let out_if = Iface::by_name(OUT_IF).unwrap();
        h.maps.put_iface(out_if.ifindex, out_if.mac).unwrap();
        let f = syn("192.0.2.77", 41000, "10.0.0.100", 80);
        let t = f.tuple();
        let d = h.fx.predict(0, &t).unwrap().clone();
        set_nh(&h, &d, nh(TEST_IFINDEX));
        let rkey = FlowTuple {
            src: d.addr,
            dst: t.src,
            sport: d.port_for(t.dport),
            dport: t.sport,
            proto: t.proto,
        }
        .key();
        let mut cases = flow_cases(&h, &f, 0, NAT, Tx, WEIR_STAT_TX, (NH_SMAC, NH_DMAC));
        let a = ack(&f);
        cases.push(
            Case::new("hit after the eviction", a.bytes(), Tx, WEIR_STAT_TX)
                .output(out(&a, &d, NAT, NH_SMAC, NH_DMAC))
                .events(HIT)
                .before(move |h| assert!(h.maps.rev_nat.delete(&rkey).unwrap()))
                .after(move |h| {
                    let rev = h.maps.rev_nat(&rkey).unwrap();
                    assert!(rev.is_none(), "a hit looked up the reverse entry");
                }),
        );
        let r = reply(&f, &d, L4::Tcp(TcpFlags::ACK));
        let r_out = reply_out(&r, &f).macs(out_if.mac, CLIENT_NH_MAC);
        let ifindex = out_if.ifindex;
        cases.push(
            Case::new("reply restores it", r.bytes(), Redirect, WEIR_STAT_REDIRECT)
                .output(r_out.bytes())
                .events(&[WEIR_STAT_REV_NAT])
                .after(move |h| {
                    let rev = h.maps.rev_nat(&rkey).unwrap().expect("restored");
                    assert_eq!(rev.ifindex, ifindex, "egress from the FIB");
                    assert_eq!(rev.client_mac, CLIENT_NH_MAC);
                    assert_eq!(rev.lb_mac, out_if.mac);
                    assert_eq!(rev.vip_id, 0);
                    assert_eq!(u16::from_be(rev.vport), 80);
                }),
        );
        cases.push(
            Case::new(
                "next reply by the entry",
                r.bytes(),
                Redirect,
                WEIR_STAT_REDIRECT,
            )
            .output(r_out.bytes())
            .events(&[WEIR_STAT_REV_NAT]),
        );
        run_cases(&h, cases);
        h.assert_balanced("reverse entry restored by its reply");
    });
}
