//! Table-driven tests of `weir_lb` through BPF_PROG_TEST_RUN.
//!
//! Each case is {name, input frame, expected verdict, expected output frame
//! (or unchanged), expected counter deltas}. Input and expected frames are
//! built independently with `weir_core::wire` (checksums from scratch) on
//! the fixture the software engine's tests share (`weir_testkit`); the DIP
//! a new flow must go to is predicted by weir-core (`AwfdTable::select`
//! over `flow_hash`). Rewritten frames also get every checksum recomputed
//! by a second implementation (etherparse).
//!
//! Needs root (BPF). BPF_PROG_TEST_RUN without a context runs the program
//! as if the frame arrived on ifindex 1 (loopback); `next_hop_*` proves it.

mod common;

use std::net::IpAddr;

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};
use weir_core::wire::refresh_ipv4_checksum;
use weir_dataplane::conntrack::now_ticks;
use weir_dataplane::loader::{Action, LoadOptions, NonSynMiss};
use weir_dataplane::testrun::XdpAction::{self, Drop, Pass, Tx};
use weir_testkit::cases::{
    self, forwarding, ForwardCase, Left, HIT, MISS_HALF_OPEN, MISS_NEW, PAYLOAD, REV,
};

fn conn_is(t: FlowTuple, dip: u32, gen: u32, version: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let c = h
            .maps
            .conn(&t.key())
            .unwrap()
            .unwrap_or_else(|| panic!("no connection entry for {t:?}"));
        assert_eq!(
            (c.dip_id, c.dip_gen, c.table_version),
            (dip, gen, version),
            "connection entry of {t:?}"
        );
        assert_ne!(c.created_ns, 0);
    }
}

fn no_conn(t: FlowTuple) -> impl Fn(&Harness) {
    move |h: &Harness| {
        assert!(
            h.maps.conn(&t.key()).unwrap().is_none(),
            "unexpected connection entry for {t:?}"
        );
    }
}

fn half_open_is(t: FlowTuple, dip: u32, gen: u32, version: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let c = h
            .maps
            .half_open(&t.key())
            .unwrap()
            .unwrap_or_else(|| panic!("no half-open entry for {t:?}"));
        assert_eq!(
            (c.dip_id, c.dip_gen, c.table_version),
            (dip, gen, version),
            "half-open entry of {t:?}"
        );
        assert!(
            h.maps.conn(&t.key()).unwrap().is_none(),
            "a half-open connection must not be in conns: {t:?}"
        );
    }
}

fn no_half_open(t: FlowTuple) -> impl Fn(&Harness) {
    move |h: &Harness| {
        assert!(
            h.maps.half_open(&t.key()).unwrap().is_none(),
            "unexpected half-open entry for {t:?}"
        );
    }
}

/// The reply tuple of a nat connection `t` to `dip`.
fn rev_key_of(t: &FlowTuple, dip: &Dip) -> weir_flow_key {
    FlowTuple {
        src: dip.addr,
        dst: t.src,
        sport: dip.port_for(t.dport),
        dport: t.sport,
        proto: t.proto,
    }
    .key()
}

/// The reverse entry a half-open nat connection carries (where its SYN-ACK
/// finds the VIP), and none yet in `rev_nat`: the SYN inserted one entry.
fn half_rev_is(t: FlowTuple, dip: Dip, vip_id: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let rkey = rev_key_of(&t, &dip);
        let half = h
            .maps
            .half_open_entry(&t.key())
            .unwrap()
            .unwrap_or_else(|| panic!("no half-open entry for {t:?}"));
        check_rev(&half.rev, &t, vip_id);
        assert!(
            h.maps.rev_nat(&rkey).unwrap().is_none(),
            "a half-open connection must not be in rev_nat: {t:?}"
        );
    }
}

fn check_rev(r: &weir_rev_nat, t: &FlowTuple, vip_id: u32) {
    let (vip, family) = addr_words(t.dst);
    assert_eq!(r.vip, vip);
    assert_eq!(u16::from_be(r.vport), t.dport);
    assert_eq!(r.family, family);
    assert_eq!(r.vip_id, vip_id);
    assert_eq!(r.ifindex, TEST_IFINDEX);
    assert_eq!(r.client_mac, CLIENT_MAC);
    assert_eq!(r.lb_mac, VIP_MAC);
}

/// The reverse entry of a nat connection `t` to `dip` on VIP `vip_id`.
fn rev_is(t: FlowTuple, dip: Dip, vip_id: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let r = h
            .maps
            .rev_nat(&rev_key_of(&t, &dip))
            .unwrap()
            .unwrap_or_else(|| panic!("no reverse entry for {t:?}"));
        check_rev(&r, &t, vip_id);
    }
}

/// No reverse entry points at client address `client` (dsr installs none).
fn no_rev_for(client: IpAddr) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let (words, _) = addr_words(client);
        for (k, _) in h.maps.rev_nat.entries().unwrap() {
            assert_ne!(k.dst, words, "dsr installed a reverse entry");
        }
    }
}

fn both(a: impl Fn(&Harness), b: impl Fn(&Harness)) -> impl Fn(&Harness) {
    move |h: &Harness| {
        a(h);
        b(h);
    }
}

fn fix_ipv4_csum(f: &mut [u8]) {
    refresh_ipv4_checksum(&mut f[ETH_HLEN..]);
}

fn mutate(mut f: Vec<u8>, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    edit(&mut f);
    f
}

fn set16(f: &mut [u8], off: usize, v: u16) {
    f[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// A shared forwarding case as weir_lb's: sent back out (`XDP_TX`), with
/// the entries it leaves read from the maps: a new TCP flow's in the
/// half-open tables, a UDP flow's in `conns` and `rev_nat` (nat only); a
/// completed handshake's moved to `conns` and `rev_nat`.
fn xdp_case(c: ForwardCase) -> Case {
    let case = Case::new(c.name, c.input, Tx, WEIR_STAT_TX)
        .output(c.output)
        .events(&c.events);
    match c.left {
        Left::NewFlow {
            flow: t,
            vip,
            dip,
            mode,
        } => {
            let after: Box<dyn Fn(&Harness)> = match (t.proto, mode == NAT) {
                (Proto::Tcp, true) => Box::new(both(
                    half_open_is(t, dip.id, 1, 1),
                    half_rev_is(t, dip.clone(), vip),
                )),
                (Proto::Tcp, false) => {
                    Box::new(both(half_open_is(t, dip.id, 1, 1), no_rev_for(t.src)))
                }
                (Proto::Udp, true) => {
                    Box::new(both(conn_is(t, dip.id, 1, 1), rev_is(t, dip.clone(), vip)))
                }
                (Proto::Udp, false) => Box::new(both(conn_is(t, dip.id, 1, 1), no_rev_for(t.src))),
            };
            case.after(after)
        }
        Left::Promoted {
            flow: t,
            vip,
            dip,
            mode,
        } => case.after(move |h| {
            conn_is(t, dip.id, 1, 1)(h);
            no_half_open(t)(h);
            if mode == NAT {
                rev_is(t, dip.clone(), vip)(h);
            }
        }),
        Left::Unchanged => case,
    }
}

/// A TCP connection from `client`:`sport` to VIP `vip` at `vip_addr`:80:
/// its SYN, the ACK that completes its handshake, and the DIP the VIP gives
/// it (weir-core's prediction).
fn handshake(
    h: &Harness,
    client: &str,
    sport: u16,
    vip_addr: &str,
    vip: u32,
) -> (Frame, Frame, Dip) {
    let syn = tcp(client, sport, vip_addr, 80, TcpFlags::SYN);
    let ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    };
    let dip = h.fx.predict(vip, &syn.tuple()).unwrap().clone();
    (syn, ack, dip)
}

/// A nat or dsr forwarding case for a new flow `f` to VIP `vip`, with the
/// DIP predicted by weir-core.
fn new_flow(h: &Harness, name: &str, f: &Frame, vip: u32) -> Case {
    xdp_case(cases::new_flow(&h.fx, name, f, vip))
}

/// The client's packet after its SYN (`f`, an ACK) completes the handshake
/// with `dip`.
fn promote(name: &str, f: &Frame, dip: &Dip, vip: u32, mode: u32) -> Case {
    xdp_case(cases::promote(name, f, dip, vip, mode))
}

/// A case for a frame that is forwarded on an existing connection to `dip`.
fn hit(name: &str, f: &Frame, dip: &Dip, mode: u32) -> Case {
    xdp_case(cases::hit(name, f, dip, mode))
}

/// A reverse-NAT case for the DIP's reply to client frame `f`.
fn rev_case(name: &str, f: &Frame, dip: &Dip, l4: L4) -> Case {
    xdp_case(cases::rev_case(name, f, dip, l4))
}

fn pass(name: &str, input: Vec<u8>, stat: u32) -> Case {
    Case::new(name, input, Pass, stat)
}

fn drop(name: &str, input: Vec<u8>, stat: u32) -> Case {
    Case::new(name, input, Drop, stat)
}

fn malformed(name: &str, input: Vec<u8>) -> Case {
    drop(name, input, WEIR_STAT_DROP_MALFORMED)
}

/// Padding bytes for IPv6 extension headers (PadN option of 4 + 2 bytes).
fn padn() -> Vec<u8> {
    vec![1, 4, 0, 0, 0, 0]
}

#[test]
fn forwarding_and_classification_table() {
    let h = Harness::new(&test_options());
    let fx = &h.fx;
    let mut cases = Vec::new();

    // The forwarding cases both tiers run.
    cases.extend(forwarding(fx).into_iter().map(xdp_case));

    // A pre-installed entry wins over the table (PCC).
    let c2 = tcp("192.0.2.2", 40002, "10.0.0.100", 80, TcpFlags::ACK);
    let predicted = fx.predict(0, &c2.tuple()).unwrap().id;
    let other = [1, 2, 3].into_iter().find(|d| *d != predicted).unwrap();
    let (t2, other_dip) = (c2.tuple(), fx.dip(other).clone());
    cases.push(
        hit(
            "v4 tcp ACK hits a pre-installed conn, not the table",
            &c2,
            &other_dip,
            NAT,
        )
        .before(move |h| {
            h.maps
                .put_conn(
                    &t2.key(),
                    &weir_conn {
                        dip_id: other,
                        dip_gen: 1,
                        table_version: 1,
                        created_ns: 1,
                        atime: now_ticks(),
                        ..Default::default()
                    },
                )
                .unwrap()
        })
        .after(conn_is_pre(t2, other)),
    );

    // Extension headers (hop-by-hop, destination options) before TCP.
    let v3 = tcp("2001:db8:c::3", 40003, "2001:db8::100", 80, TcpFlags::SYN);
    let dv3 = fx.predict(4, &v3.tuple()).unwrap().clone();
    let exts = vec![(0u8, padn()), (60u8, padn())];
    cases.push(
        Case::new(
            "v6 tcp SYN after hop-by-hop + dstopts, nat",
            ipv6_with_exts(&v3, &exts),
            Tx,
            WEIR_STAT_TX,
        )
        .raw_output(ipv6_with_exts(&nat_out(&v3, &dv3), &exts))
        .events(MISS_HALF_OPEN)
        .after(half_open_is(v3.tuple(), dv3.id, 1, 1)),
    );

    // --- not balanced: passed (the software tier's table runs them too) --
    for c in passed_untouched() {
        let case = pass(c.name, c.input, c.outcome);
        cases.push(match c.flow {
            Some(t) => case.after(no_conn(t)),
            None => case,
        });
    }
    // Without a route back to the client (test_run's FIB), the kernel gets it.
    let stray = reply(
        &tcp("192.0.2.99", 9, "10.0.0.100", 80, TcpFlags::SYN),
        fx.dip(1),
        L4::Tcp(TcpFlags::SYN_ACK),
    );
    cases.push(pass(
        "v4 DIP reply without a reverse entry",
        stray.bytes(),
        WEIR_STAT_PASS_NOT_VIP,
    ));

    // --- VIPs that cannot be balanced -------------------------------------
    let e1 = tcp("192.0.2.30", 40030, "10.0.0.102", 80, TcpFlags::SYN);
    cases.push(
        drop(
            "VIP with an empty table",
            e1.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .after(no_conn(e1.tuple())),
    );
    let e2 = tcp("2001:db8:c::30", 40030, "2001:db8::102", 80, TcpFlags::SYN);
    cases.push(
        drop(
            "VIP that never got a table",
            e2.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS]),
    );
    let e3 = tcp("192.0.2.31", 40031, "10.0.0.103", 80, TcpFlags::SYN);
    cases.push(
        drop(
            "IPv4 VIP whose DIP is IPv6",
            e3.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .after(no_conn(e3.tuple())),
    );

    // --- malformed ---------------------------------------------------------
    let m4 = tcp("192.0.2.40", 40040, "10.0.0.100", 80, TcpFlags::SYN).payload(b"abcdefgh");
    let m4u = udp("192.0.2.40", 40040, "10.0.0.100", 53);
    let m6 = tcp("2001:db8:c::40", 40040, "2001:db8::100", 80, TcpFlags::SYN).payload(b"abcdefgh");
    let m6u = udp("2001:db8:c::40", 40040, "2001:db8::100", 53);
    let (ip4, ip6) = (ETH_HLEN, ETH_HLEN);
    let (l4v4, l4v6) = (ETH_HLEN + 20, ETH_HLEN + 40);
    let m = |name: &str, f: &Frame, edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = f.bytes();
        edit(&mut b);
        if f.src.is_ipv4()
            && (b[ip4] & 0x0f) >= 5
            && b.len() >= ip4 + usize::from(b[ip4] & 0x0f) * 4
        {
            fix_ipv4_csum(&mut b);
        }
        malformed(name, b)
    };
    cases.push(m("v4 IHL 4", &m4, &|b| b[ip4] = 0x44));
    cases.push(m("v4 IHL 0", &m4, &|b| b[ip4] = 0x40));
    cases.push(m("v4 IHL 15 beyond total length", &m4, &|b| b[ip4] = 0x4f));
    cases.push(m("v4 version 6 in an IPv4 frame", &m4, &|b| b[ip4] = 0x65));
    cases.push(m("v4 total length beyond the frame", &m4, &|b| {
        let l = b.len() - ETH_HLEN;
        set16(b, ip4 + 2, l as u16 + 1)
    }));
    cases.push(m("v4 total length 65535", &m4, &|b| {
        set16(b, ip4 + 2, 0xffff)
    }));
    cases.push(m("v4 total length below IHL", &m4, &|b| {
        set16(b, ip4 + 2, 19)
    }));
    cases.push(m("v4 total length cuts the TCP header", &m4, &|b| {
        set16(b, ip4 + 2, 20 + 19)
    }));
    cases.push(m("v4 TCP doff 4", &m4, &|b| b[l4v4 + 12] = 0x40));
    cases.push(m("v4 TCP doff 0", &m4, &|b| b[l4v4 + 12] = 0x00));
    cases.push(m("v4 TCP doff 8 beyond the segment", &m4, &|b| {
        b[l4v4 + 12] = 0x80
    }));
    cases.push(m("v4 TCP doff 15", &m4, &|b| b[l4v4 + 12] = 0xf0));
    cases.push(m("v4 UDP length 7", &m4u, &|b| set16(b, l4v4 + 4, 7)));
    cases.push(m("v4 UDP length 0", &m4u, &|b| set16(b, l4v4 + 4, 0)));
    cases.push(m("v4 UDP length beyond the datagram", &m4u, &|b| {
        let l = b.len() - l4v4;
        set16(b, l4v4 + 4, l as u16 + 1)
    }));
    cases.push(m("v6 version 4 in an IPv6 frame", &m6, &|b| b[ip6] = 0x40));
    cases.push(m("v6 payload length beyond the frame", &m6, &|b| {
        let l = b.len() - l4v6;
        set16(b, ip6 + 4, l as u16 + 1)
    }));
    cases.push(m("v6 payload length cuts the TCP header", &m6, &|b| {
        set16(b, ip6 + 4, 19)
    }));
    cases.push(m("v6 TCP doff 3", &m6, &|b| b[l4v6 + 12] = 0x30));
    cases.push(m("v6 TCP doff 9 beyond the segment", &m6, &|b| {
        b[l4v6 + 12] = 0x90
    }));
    cases.push(m("v6 UDP length 4", &m6u, &|b| set16(b, l4v6 + 4, 4)));
    cases.push(m("v6 UDP length beyond the datagram", &m6u, &|b| {
        let l = b.len() - l4v6;
        set16(b, l4v6 + 4, l as u16 + 1)
    }));
    let big_ext = mutate(ipv6_with_exts(&m6, &[(0, padn())]), |b| b[l4v6 + 1] = 200);
    cases.push(malformed(
        "v6 extension header longer than the packet",
        big_ext,
    ));
    // Malformed packets never install anything.
    let t = m4.tuple();
    cases.push(
        malformed(
            "v4 TCP doff 2 (and no conn installed)",
            mutate(m4.bytes(), |b| b[l4v4 + 12] = 0x20),
        )
        .after(no_conn(t)),
    );

    let n = run_cases(&h, cases);
    // Per-VIP traffic: a TCP connection is new once its handshake is done,
    // which only c1 and c5 did on VIP 0 (c2 was pre-installed; c4 and the
    // checksum edges sent a SYN only).
    let vt = h.maps.vip_traffic(0).unwrap();
    assert_eq!(vt.new_conns, 2, "VIP 0 new conns (c1, c5)");
    eprintln!("forwarding_and_classification_table: {n} cases");
}

/// IPv6 extension chains at and past the parser's depth (4 headers): a chain
/// it cannot finish follows the `malformed` action, so a fragment header
/// hidden behind it cannot slip past `fragments = "drop"` as a non-VIP.
#[test]
fn ipv6_extension_chains_past_the_parsed_depth_are_malformed() {
    let hop = || (0u8, padn());
    let dst = || (60u8, padn());
    let rt = || (43u8, vec![0, 0, 0, 0, 0, 0]); // type 0, 0 segments left
    let frag = || (44u8, vec![0, 1, 0, 0, 0x56, 0x78]); // offset 0, M=1
    let depth = |n: usize| -> Vec<(u8, Vec<u8>)> {
        std::iter::once(hop())
            .chain([dst(), rt()].into_iter().cycle().take(n - 1))
            .collect()
    };
    let with_frag = |n: usize| {
        let mut c = depth(n);
        c.push(frag());
        c
    };
    for malformed_action in [Action::Drop, Action::Pass] {
        let opts = weir_dataplane::loader::LoadOptions {
            fragments: Action::Drop,
            malformed: malformed_action,
            ..test_options()
        };
        let h = Harness::new(&opts);
        let (verdict, stat) = match malformed_action {
            Action::Drop => (Drop, WEIR_STAT_DROP_MALFORMED),
            Action::Pass => (Pass, WEIR_STAT_PASS_MALFORMED),
        };
        let syn = |sport| tcp("2001:db8:c::80", sport, "2001:db8::100", 80, TcpFlags::SYN);
        let at_depth = syn(40080);
        let dip = h.fx.predict(4, &at_depth.tuple()).unwrap().clone();
        let mut cases = vec![
            Case::new(
                "v6 tcp SYN after 4 extension headers (the parsed depth) is balanced",
                ipv6_with_exts(&at_depth, &depth(4)),
                Tx,
                WEIR_STAT_TX,
            )
            .raw_output(ipv6_with_exts(&nat_out(&at_depth, &dip), &depth(4)))
            .events(MISS_HALF_OPEN)
            .after(half_open_is(at_depth.tuple(), dip.id, 1, 1)),
            drop(
                "v6 fragment header after 3 extension headers is a fragment",
                ipv6_with_exts(&syn(40081), &with_frag(3)),
                WEIR_STAT_DROP_FRAGMENT,
            ),
            drop(
                "v6 fragment header after 4 extension headers is a fragment",
                ipv6_with_exts(&syn(40082), &with_frag(4)),
                WEIR_STAT_DROP_FRAGMENT,
            ),
        ];
        for (name, chain) in [
            ("v6 tcp SYN after 5 extension headers", depth(5)),
            ("v6 fragment header after 5 extension headers", with_frag(5)),
            ("v6 fragment header after 8 extension headers", with_frag(8)),
        ] {
            let f = syn(40083);
            cases.push(
                Case::new(name, ipv6_with_exts(&f, &chain), verdict, stat)
                    .after(no_conn(f.tuple())),
            );
        }
        run_cases(&h, cases);
    }
}

fn conn_is_pre(t: FlowTuple, dip: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let c = h.maps.conn(&t.key()).unwrap().expect("conn kept");
        assert_eq!(
            (c.dip_id, c.created_ns),
            (dip, 1),
            "pre-installed conn was replaced"
        );
    }
}

#[test]
fn configured_actions_change_the_verdict() {
    let opts = weir_dataplane::loader::LoadOptions {
        not_vip: Action::Drop,
        icmp: Action::Drop,
        fragments: Action::Drop,
        malformed: Action::Pass,
        ..test_options()
    };
    let h = Harness::new(&opts);
    let nv = tcp("192.0.2.1", 40001, "10.0.0.200", 80, TcpFlags::SYN);
    let f = tcp("192.0.2.1", 40001, "10.0.0.100", 80, TcpFlags::SYN);
    let f6 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, TcpFlags::SYN);
    let cases = vec![
        drop("non-VIP dropped", nv.bytes(), WEIR_STAT_DROP_NOT_VIP),
        drop(
            "ARP dropped with not_vip = drop",
            arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_DROP_NOT_VIP,
        ),
        drop(
            "GRE dropped",
            ipv4_other_proto(CLIENT_MAC, VIP_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_DROP_NOT_VIP,
        ),
        drop(
            "ICMP dropped",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100")),
            WEIR_STAT_DROP_ICMP,
        ),
        drop(
            "ICMPv6 dropped",
            icmp_echo(
                CLIENT_MAC,
                VIP_MAC,
                ip("2001:db8:c::1"),
                ip("2001:db8::100"),
            ),
            WEIR_STAT_DROP_ICMP,
        ),
        drop(
            "v4 fragment dropped",
            mutate(f.bytes(), |b| {
                b[ETH_HLEN + 6] = 0x20;
                fix_ipv4_csum(b);
            }),
            WEIR_STAT_DROP_FRAGMENT,
        ),
        drop(
            "v6 fragment dropped",
            ipv6_with_exts(&f6, &[(44, vec![0, 0, 0, 0, 0, 1])]),
            WEIR_STAT_DROP_FRAGMENT,
        ),
        pass(
            "malformed passed with malformed = pass",
            mutate(f.bytes(), |b| b[ETH_HLEN] = 0x44),
            WEIR_STAT_PASS_MALFORMED,
        ),
        pass(
            "truncated passed with malformed = pass",
            f.bytes()[..ETH_HLEN + 10].to_vec(),
            WEIR_STAT_PASS_MALFORMED,
        ),
    ];
    let mut cases = cases;
    cases.push(new_flow(&h, "VIP traffic still balanced", &f, 0));
    run_cases(&h, cases);
}

#[test]
fn nonsyn_miss_drop() {
    let opts = weir_dataplane::loader::LoadOptions {
        nonsyn_miss: NonSynMiss::Drop,
        ..test_options()
    };
    let h = Harness::new(&opts);
    let ack = tcp("192.0.2.1", 40001, "10.0.0.100", 80, TcpFlags::ACK);
    let rst = tcp("192.0.2.1", 40002, "10.0.0.100", 80, TcpFlags::RST);
    let ack6 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, TcpFlags::ACK);
    let syn = tcp("192.0.2.1", 40003, "10.0.0.100", 80, TcpFlags::SYN);
    let syn_ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    }
    .payload(PAYLOAD);
    let d = h.fx.predict(0, &syn.tuple()).unwrap().clone();
    let u = udp("192.0.2.1", 40004, "10.0.0.100", 53);
    let nonsyn = [WEIR_STAT_CONN_MISS, WEIR_STAT_NONSYN_MISS];
    let cases = vec![
        drop(
            "v4 ACK miss dropped",
            ack.bytes(),
            WEIR_STAT_DROP_NONSYN_MISS,
        )
        .events(&nonsyn)
        .after(no_conn(ack.tuple())),
        drop(
            "v4 RST miss dropped",
            rst.bytes(),
            WEIR_STAT_DROP_NONSYN_MISS,
        )
        .events(&nonsyn),
        drop(
            "v6 ACK miss dropped",
            ack6.bytes(),
            WEIR_STAT_DROP_NONSYN_MISS,
        )
        .events(&nonsyn)
        .after(no_conn(ack6.tuple())),
        new_flow(&h, "SYN still dispatched", &syn, 0),
        promote(
            "ACK after the SYN completes the handshake",
            &syn_ack,
            &d,
            0,
            NAT,
        ),
        hit("the next ACK hits", &syn_ack, &d, NAT),
        new_flow(&h, "UDP has no SYN: dispatched", &u, 1),
    ];
    run_cases(&h, cases);
}

/// Finds a client port whose flow `make(port)` satisfies `pred`.
fn find_flow(make: impl Fn(u16) -> Frame, pred: impl Fn(&Frame) -> bool) -> Frame {
    (1024..u16::MAX)
        .map(make)
        .find(|f| pred(f))
        .expect("no flow found")
}

#[test]
fn removed_dip_redispatches_and_pcc_holds() {
    let h = Harness::new(&test_options());
    let fx = &h.fx;
    let mk = |p| tcp("192.0.2.50", p, "10.0.0.100", 80, TcpFlags::SYN);
    let to_ack = |f: &Frame| Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..f.clone()
    };
    // Version 2 of VIP 0: DIP 1 removed, weights of 2 and 3 changed.
    let t2 = AwfdTable::from_weights(&[(2, 3), (3, 1)]).unwrap();
    let pick2 = |f: &Frame| {
        t2.select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap()
    };
    // a: on DIP 1, which is removed. b: on DIP 2 or 3, which the new table would
    // send elsewhere (PCC must keep it). c: a new flow the *old* table sends to DIP 1.
    let a = find_flow(mk, |f| fx.predict(0, &f.tuple()).unwrap().id == 1);
    let b = find_flow(
        |p| mk(p.wrapping_add(7000)),
        |f| {
            let d = fx.predict(0, &f.tuple()).unwrap().id;
            d != 1 && pick2(f) != d
        },
    );
    let db = fx.predict(0, &b.tuple()).unwrap().clone();
    let c = find_flow(
        |p| mk(p.wrapping_add(20000)),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );

    let (a_ack, b_ack) = (to_ack(&a), to_ack(&b));
    let a_new = fx.dip(pick2(&a)).clone();
    let ta = a.tuple();
    let dip1 = fx.dip(1).clone();
    let dip3 = fx.dip(3).clone();
    let da = fx.dip(1).clone();
    let cases = vec![
        new_flow(&h, "a: SYN to DIP 1", &a, 0),
        promote("a: ACK completes the handshake", &a_ack, &da, 0, NAT),
        new_flow(&h, "b: SYN", &b, 0),
        promote("b: ACK completes the handshake", &b_ack, &db, 0, NAT),
        // Remove DIP 1 without a new table: a new flow hashing to it has no backend.
        drop(
            "c: new flow to a removed, still tabled DIP",
            c.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .before(move |h| h.maps.put_dip(1, &dip1.abi(1, false)).unwrap()),
        // The controller publishes version 2.
        Case::new(
            "a: ACK on a removed DIP is redispatched (stale)",
            a_ack.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&a_ack, &a_new).bytes())
        .events(&[WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_NEW])
        .before(move |h| {
            h.maps
                .publish_table(0, 2, &AwfdTable::from_weights(&[(2, 3), (3, 1)]).unwrap())
                .unwrap();
        })
        .after(conn_is(ta, a_new.id, 1, 2)),
        hit(
            "b: established conn stays on its DIP under table v2",
            &b_ack,
            &db,
            NAT,
        )
        .after(conn_is(b.tuple(), db.id, 1, 1)),
    ];
    run_cases(&h, cases);

    // Slot 3 reassigned (generation bumped): connections on it are stale.
    let d = find_flow(|p| mk(p.wrapping_add(30000)), |f| pick2(f) == 3);
    let d_ack = to_ack(&d);
    let td = d.tuple();
    let cases = vec![
        new_flow_v(&h, "d: SYN to DIP 3 under v2", &d, &dip3, 2),
        Case::new(
            "d: ACK completes the handshake",
            d_ack.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&d_ack, &dip3).bytes())
        .events(MISS_NEW)
        .after(conn_is(td, 3, 1, 2)),
        Case::new(
            "d: ACK after DIP 3's slot was reassigned",
            d_ack.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&d_ack, &dip3).bytes())
        .events(&[WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_NEW])
        .before(move |h| h.maps.put_dip(3, &dip3.abi(2, true)).unwrap())
        .after(conn_is(d.tuple(), 3, 2, 2)),
    ];
    run_cases(&h, cases);
}

/// A retransmitted SYN keeps the DIP its first one got even when the VIP's
/// table gives new connections none any more (every DIP drained): a SYN is
/// dispatched and inserted before the half-open table is looked at, and a
/// dispatch that finds no DIP must not drop a retransmission. A new SYN is
/// dropped.
#[test]
fn a_retransmitted_syn_keeps_its_dip_when_the_table_has_none_left() {
    let h = Harness::new(&test_options());
    let syn = tcp("192.0.2.93", 41093, "10.0.0.100", 80, TcpFlags::SYN);
    let d = h.fx.predict(0, &syn.tuple()).unwrap().clone();
    let fresh = tcp("192.0.2.94", 41094, "10.0.0.100", 80, TcpFlags::SYN);
    let drain_all = |h: &Harness| {
        let none = AwfdTable::from_weights(&[(1, 0), (2, 0), (3, 0)]).unwrap();
        h.maps.publish_table(0, 2, &none).unwrap();
    };
    let cases = vec![
        new_flow(&h, "SYN under v1", &syn, 0),
        syn_again("retransmitted SYN, every DIP drained", &syn, &d, NAT).before(drain_all),
        drop(
            "new SYN, every DIP drained",
            fresh.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .after(no_conn(fresh.tuple())),
    ];
    run_cases(&h, cases);
}

/// A new connection is dated by the coarse clock reading its packet takes
/// anyway, not by a second, finer clock read: the created_ns of a SYN's
/// half-open entry, of the connection its ACK promotes and of a new UDP
/// flow lie between two readings of CLOCK_MONOTONIC_COARSE taken around
/// the packets (a finer clock runs ahead of the coarse one's last tick).
#[test]
fn a_new_connection_is_dated_by_the_coarse_clock() {
    let h = Harness::new(&test_options());
    let (syn, ack, d) = handshake(&h, "192.0.2.95", 41095, "10.0.0.100", 0);
    let u = udp("192.0.2.96", 40096, "10.0.0.100", 53);
    let t = syn.tuple();
    let before = weir_sys::monotonic_coarse_ns();
    run_cases(&h, vec![new_flow(&h, "SYN", &syn, 0)]);
    let half = h
        .maps
        .half_open(&t.key())
        .unwrap()
        .expect("half-open entry");
    let cases = vec![promote("ACK", &ack, &d, 0, NAT), new_flow(&h, "UDP", &u, 1)];
    run_cases(&h, cases);
    let after = weir_sys::monotonic_coarse_ns();
    let dated = [
        ("half-open entry of the SYN", half.created_ns),
        (
            "connection the ACK promoted",
            h.maps.conn(&t.key()).unwrap().unwrap().created_ns,
        ),
        (
            "UDP connection",
            h.maps.conn(&u.tuple().key()).unwrap().unwrap().created_ns,
        ),
    ];
    for (what, created_ns) in dated {
        assert!(
            (before..=after).contains(&created_ns),
            "{what}: created_ns {created_ns} outside the coarse clock's {before}..={after}"
        );
    }
}

/// A nat SYN case with a given DIP and table version.
fn new_flow_v(h: &Harness, name: &str, f: &Frame, dip: &Dip, version: u32) -> Case {
    let _ = h;
    Case::new(name, f.bytes(), Tx, WEIR_STAT_TX)
        .output(nat_out(f, dip).bytes())
        .events(MISS_HALF_OPEN)
        .after(half_open_is(f.tuple(), dip.id, 1, version))
}

/// A SYN again (a retransmission) while its first one is half-open: the
/// same DIP, whatever the table says now.
fn syn_again(name: &str, f: &Frame, dip: &Dip, mode: u32) -> Case {
    let out = if mode == NAT {
        nat_out(f, dip)
    } else {
        dsr_out(f, dip)
    };
    Case::new(name, f.bytes(), Tx, WEIR_STAT_TX)
        .output(out.bytes())
        .events(&[WEIR_STAT_CONN_MISS, WEIR_STAT_SYN_RETRANSMIT])
}

#[test]
fn next_hop_needs_the_ingress_interface_and_a_dip_mac() {
    let h = Harness::new(&test_options());
    let ifaces = &h.maps.ifaces.as_ref().unwrap().1;
    let f = tcp("192.0.2.60", 40060, "10.0.0.100", 80, TcpFlags::SYN);
    let d = h.fx.predict(0, &f.tuple()).unwrap().clone();
    // Without ifaces[1] there is no source MAC: proves test runs use ifindex 1.
    ifaces.delete(&TEST_IFINDEX.to_ne_bytes()).unwrap();
    h.maps.put_iface(4, [0x02, 0, 0, 0, 0, 0x44]).ok();
    let g = tcp("192.0.2.61", 40061, "10.0.0.100", 80, TcpFlags::SYN);
    let dg = h.fx.predict(0, &g.tuple()).unwrap().clone();
    let dg2 = dg.clone();
    let cases = vec![
        // nat rewrites L3/L4 before the next hop is chosen; L2 stays as it came.
        drop(
            "no MAC for ifindex 1: no route",
            f.bytes(),
            WEIR_STAT_DROP_NO_ROUTE,
        )
        .output(f.clone().with_dst(d.addr, d.port_for(80)).bytes())
        .events(MISS_HALF_OPEN),
        syn_again("ifindex 1 registered: transmitted", &f, &d, NAT)
            .before(|h| h.maps.put_iface(TEST_IFINDEX, LB_IF_MAC).unwrap()),
        drop(
            "DIP without a MAC and no FIB: no route",
            g.bytes(),
            WEIR_STAT_DROP_NO_ROUTE,
        )
        .output(g.clone().with_dst(dg.addr, dg.port_for(80)).bytes())
        .events(MISS_HALF_OPEN)
        .before(move |h| {
            let mut x = dg.abi(1, true);
            x.mac_set = 0;
            h.maps.put_dip(dg.id, &x).unwrap()
        }),
        syn_again("DIP MAC restored", &g, &dg2, NAT)
            .before(move |h| h.maps.put_dip(dg2.id, &dg2.abi(1, true)).unwrap()),
    ];
    run_cases(&h, cases);

    // A reverse entry learned on another interface leaves by redirect, or is
    // dropped when that interface is not a redirect target.
    let c = tcp("192.0.2.62", 40062, "10.0.0.100", 80, TcpFlags::SYN);
    let dc = h.fx.predict(0, &c.tuple()).unwrap().clone();
    let r = reply(&c, &dc, L4::Tcp(TcpFlags::SYN_ACK));
    let rkey = r.tuple().key();
    let rev = |ifindex| {
        let (vip, family) = addr_words(c.dst);
        weir_rev_nat {
            vip,
            vport: c.dport.to_be(),
            family,
            vip_id: 0,
            ifindex,
            client_mac: CLIENT_MAC,
            lb_mac: VIP_MAC,
            ..Default::default()
        }
    };
    let put_rev = move |h: &Harness, v: weir_rev_nat| h.maps.rev_nat.insert(&rkey, &v).unwrap();
    let (r7, r4) = (rev(7), rev(4));
    let out = reply_out(&r, &c).bytes();
    let mut cases = vec![Case::new(
        "reply for an interface that is no redirect target",
        r.bytes(),
        Drop,
        WEIR_STAT_DROP_REDIRECT,
    )
    .raw_output(out.clone())
    .events(REV)
    .before(move |h| put_rev(h, r7))];
    // ifindex 4 exists here (eth0) only if the devmap accepted it above.
    let tx_ports = &h.maps.ifaces.as_ref().unwrap().0;
    if tx_ports
        .lookup(&4u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .ok()
        .flatten()
        .is_some()
    {
        cases.push(
            Case::new(
                "reply redirected to its interface",
                r.bytes(),
                XdpAction::Redirect,
                WEIR_STAT_REDIRECT,
            )
            .output(out)
            .events(REV)
            .before(move |h| put_rev(h, r4)),
        );
    } else {
        eprintln!("ifindex 4 is not a redirect target here: redirect case skipped");
    }
    run_cases(&h, cases);
}

/// A hit or a reply that is not sent counts its event and its drop apart;
/// one that is sent counts them as one combined counter (stats.h), which
/// `Maps::stats` reports as both: the deltas here are the public counters.
#[test]
fn a_hit_or_reply_that_is_not_sent_counts_event_and_drop() {
    let h = Harness::new(&test_options());
    let (syn, ack, d) = handshake(&h, "192.0.2.63", 40063, "10.0.0.100", 0);
    let (dsyn, dack, dd) = handshake(&h, "192.0.2.64", 40064, "10.0.0.101", 2);
    let no_iface = |h: &Harness| {
        let ifaces = &h.maps.ifaces.as_ref().unwrap().1;
        ifaces.delete(&TEST_IFINDEX.to_ne_bytes()).unwrap()
    };
    let cases = vec![
        new_flow(&h, "nat SYN", &syn, 0),
        promote("nat ACK", &ack, &d, 0, NAT),
        hit("nat hit", &ack, &d, NAT),
        new_flow(&h, "dsr SYN", &dsyn, 2),
        promote("dsr ACK", &dack, &dd, 2, DSR),
        hit("dsr hit", &dack, &dd, DSR),
        rev_case("reply", &ack, &d, L4::Tcp(TcpFlags::ACK)),
        // Without ifaces[1] a hit has no source MAC: no route.
        drop("nat hit, no route", ack.bytes(), WEIR_STAT_DROP_NO_ROUTE)
            .output(ack.clone().with_dst(d.addr, d.port_for(80)).bytes())
            .events(HIT)
            .before(no_iface),
        drop("dsr hit, no route", dack.bytes(), WEIR_STAT_DROP_NO_ROUTE).events(HIT),
    ];
    run_cases(&h, cases);
}

/// Frames of every kind the truncation test cuts.
fn truncation_frames() -> Vec<(&'static str, Vec<u8>)> {
    let f4 = tcp("192.0.2.70", 40070, "10.0.0.100", 80, TcpFlags::SYN).payload(b"0123456789");
    let u4 = udp("192.0.2.70", 40070, "10.0.0.100", 53);
    let f6 =
        tcp("2001:db8:c::70", 40070, "2001:db8::100", 80, TcpFlags::SYN).payload(b"0123456789");
    let u6 = udp("2001:db8:c::70", 40070, "2001:db8::100", 53);
    vec![
        ("v4 tcp", f4.bytes()),
        ("v4 udp", u4.bytes()),
        ("v6 tcp", f6.bytes()),
        ("v6 udp", u6.bytes()),
        (
            "v6 tcp after ext headers",
            ipv6_with_exts(&f6, &[(0, padn()), (60, padn())]),
        ),
        (
            "icmp",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.70"), ip("10.0.0.100")),
        ),
        (
            "icmpv6",
            icmp_echo(
                CLIENT_MAC,
                VIP_MAC,
                ip("2001:db8:c::70"),
                ip("2001:db8::100"),
            ),
        ),
    ]
}

#[test]
fn truncation_at_every_length() {
    for malformed_action in [Action::Drop, Action::Pass] {
        let opts = weir_dataplane::loader::LoadOptions {
            malformed: malformed_action,
            ..test_options()
        };
        let h = Harness::new(&opts);
        let (verdict, stat) = match malformed_action {
            Action::Drop => (Drop, WEIR_STAT_DROP_MALFORMED),
            Action::Pass => (Pass, WEIR_STAT_PASS_MALFORMED),
        };
        let mut cases = Vec::new();
        let mut want_cases = 0;
        for (name, full) in truncation_frames() {
            want_cases += full.len() - ETH_HLEN;
            // The kernel refuses test runs shorter than an Ethernet header.
            for len in 0..ETH_HLEN {
                let r = weir_dataplane::testrun::run(&h.lb.skel.progs.weir_lb, &full[..len], 1);
                assert!(r.is_err(), "{name}: a {len}-byte test run was accepted");
            }
            // Every cut after the Ethernet header leaves an IP header whose
            // length says more than the frame holds (or no IP header at all).
            for len in ETH_HLEN..full.len() {
                cases.push(Case::new(
                    format!("{name} cut at {len} of {}", full.len()),
                    full[..len].to_vec(),
                    verdict,
                    stat,
                ));
            }
        }
        let n = run_cases(&h, cases);
        assert_eq!(n, want_cases);
        assert_eq!(
            h.maps.conn_count(),
            0,
            "a truncated frame installed a connection"
        );
    }
    // ARP is not parsed past the ethertype: a cut ARP frame is just not IP.
    let h = Harness::new(&test_options());
    let arp = arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]);
    let cases = (ETH_HLEN..=arp.len())
        .map(|len| {
            pass(
                &format!("arp cut at {len}"),
                arp[..len].to_vec(),
                WEIR_STAT_PASS_NOT_IP,
            )
        })
        .collect();
    run_cases(&h, cases);
}

/// Loads `weights` as VIP 0's table and checks, for each flow, that the
/// DIP the program installs is `expected`. Returns the number checked.
fn check_dispatch(
    h: &Harness,
    vip_addr: IpAddr,
    vport: u16,
    weights: &[(u32, u32)],
    flows: &[(FlowTuple, u32)],
    version: u32,
) {
    let table = AwfdTable::from_weights(weights).unwrap();
    for (id, _) in weights {
        let addr = if vip_addr.is_ipv4() {
            IpAddr::from([10, 2, (id >> 8) as u8, *id as u8])
        } else {
            IpAddr::from([0x2001, 0xdb8, 2, 0, 0, 0, 0, *id as u16])
        };
        let d = Dip {
            id: *id,
            addr,
            port: 0,
        };
        h.maps.put_dip(*id, &d.abi(1, true)).unwrap();
    }
    h.maps.publish_table(0, version, &table).unwrap();
    for (t, want) in flows {
        let f = client(match t.proto {
            Proto::Tcp => Frame::tcp(t.src, t.sport, t.dst, t.dport, TcpFlags::SYN),
            Proto::Udp => Frame::udp(t.src, t.sport, t.dst, t.dport),
        });
        assert_eq!((t.dst, t.dport), (vip_addr, vport));
        let r = h.run(&f.bytes());
        assert_eq!(r.action(), Some(Tx), "{t:?}");
        let c = dispatched_entry(h, t).expect("entry installed");
        assert_eq!(c.dip_id, *want, "flow {t:?} with weights {weights:?}");
        assert_eq!(c.table_version, version);
        forget_entry(h, t);
    }
}

/// The entry a new flow's first packet left: a TCP SYN's in the half-open
/// table, a UDP datagram's in `conns`.
fn dispatched_entry(h: &Harness, t: &FlowTuple) -> Option<weir_conn> {
    let key = t.key();
    h.maps
        .conn(&key)
        .unwrap()
        .or_else(|| h.maps.half_open(&key).unwrap())
}

fn forget_entry(h: &Harness, t: &FlowTuple) {
    let key = t.key();
    h.maps.conns.delete(&key).ok();
    h.maps.half_open.delete(key.as_bytes()).ok();
}

/// A Harness whose VIP 0 is `vip:port/proto` (nat) and nothing else.
fn dispatch_harness(vip: IpAddr, port: u16, proto: Proto) -> Harness {
    let h = Harness::new(&test_options());
    for v in &h.fx.vips {
        h.maps.delete_vip(&v.key()).unwrap();
    }
    let v = Vip {
        id: 0,
        addr: vip,
        port,
        proto,
        mode: NAT,
        weights: None,
    };
    h.maps
        .put_vip(
            &v.key(),
            &weir_vip {
                vip_id: 0,
                mode: NAT as u8,
                ..Default::default()
            },
        )
        .unwrap();
    h
}

#[test]
fn bpf_and_weir_core_pick_the_same_dip() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0002);
    let weight_sets: Vec<Vec<(u32, u32)>> = vec![
        vec![(1, 1), (2, 1), (3, 1)],                    // ECMP
        vec![(1, 4), (2, 2), (3, 2), (4, 1), (5, 0)],    // classes + drained
        vec![(7, 1)],                                    // one DIP
        (0..16).map(|i| (i + 10, i + 1)).collect(),      // 16 classes (the maximum)
        (0..200).map(|i| (i + 30, 1 + i % 3)).collect(), // large classes
    ];
    let mut checked = 0;
    for (family, vip) in [(4, ip("10.9.9.9")), (6, ip("2001:db8:9::9"))] {
        let h = dispatch_harness(vip, 80, Proto::Tcp);
        for (i, ws) in weight_sets.iter().enumerate() {
            let table = AwfdTable::from_weights(ws).unwrap();
            let flows: Vec<(FlowTuple, u32)> = (0..100)
                .map(|_| {
                    let src = if family == 4 {
                        IpAddr::from(rng.gen::<[u8; 4]>())
                    } else {
                        IpAddr::from(rng.gen::<[u8; 16]>())
                    };
                    let t = FlowTuple {
                        src,
                        dst: vip,
                        sport: rng.gen_range(1024..=u16::MAX),
                        dport: 80,
                        proto: Proto::Tcp,
                    };
                    (t, table.select(flow_hash(&t.key(), DEFAULT_SEED)).unwrap())
                })
                .collect();
            check_dispatch(&h, vip, 80, ws, &flows, i as u32 + 1);
            checked += flows.len();
        }
    }
    assert_eq!(checked, 1000);
}

/// The shared vectors (tests/vectors/awfd.json at the repository root),
/// written by weir-core's side; run through BPF when the file exists.
#[test]
fn shared_awfd_vectors() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/awfd.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the shared vectors are part of the repository)",
            path.display()
        )
    });
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    vectors::run(&doc);
}

mod vectors {
    //! An independent reader of tests/vectors/awfd.json (format "weir AWFD
    //! test vectors v1", described in the file): every case's table is
    //! published to every VIP its flows address, each flow's first packet
    //! runs through the program, and the DIP of the installed connection
    //! must be the file's (or no connection and a no-backend drop for null).
    use super::*;
    use serde_json::Value;

    fn s(v: &Value, k: &str) -> String {
        v[k].as_str()
            .unwrap_or_else(|| panic!("field {k}"))
            .to_string()
    }

    fn n(v: &Value, k: &str) -> u64 {
        v[k].as_u64().unwrap_or_else(|| panic!("field {k}"))
    }

    pub fn run(doc: &Value) {
        assert!(s(doc, "format").starts_with("weir AWFD test vectors v1"));
        let seed = n(doc, "seed") as u32;
        let opts = weir_dataplane::loader::LoadOptions {
            max_dips: 2048,
            hash_seed: seed,
            ..test_options()
        };
        let h = Harness::new(&opts);
        for v in &h.fx.vips {
            h.maps.delete_vip(&v.key()).unwrap();
        }
        let mut checked = 0;
        for (ci, case) in doc["cases"].as_array().unwrap().iter().enumerate() {
            let name = s(case, "name");
            let weights: Vec<(u32, u32)> = case["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| (n(w, "dip") as u32, n(w, "weight") as u32))
                .collect();
            let table = AwfdTable::from_weights(&weights).unwrap();
            let version = ci as u32 + 1;
            let flows = case["flows"].as_array().unwrap();
            // One VIP per (dst, dport, proto) the flows use, all with this table.
            let mut vips: Vec<(IpAddr, u16, Proto)> = Vec::new();
            for fl in flows {
                let proto = match s(fl, "proto").as_str() {
                    "tcp" => Proto::Tcp,
                    "udp" => Proto::Udp,
                    p => panic!("{name}: proto {p}"),
                };
                let k = (ip(&s(fl, "dst")), n(fl, "dport") as u16, proto);
                if !vips.contains(&k) {
                    vips.push(k);
                }
            }
            for (id, (addr, port, proto)) in vips.iter().enumerate() {
                let v = Vip {
                    id: id as u32,
                    addr: *addr,
                    port: *port,
                    proto: *proto,
                    mode: DSR,
                    weights: None,
                };
                h.maps
                    .put_vip(
                        &v.key(),
                        &weir_vip {
                            vip_id: id as u32,
                            mode: DSR as u8,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                h.maps.publish_table(id as u32, version, &table).unwrap();
            }
            // DIP slots take the address family of the flow under test.
            for v4 in [true, false] {
                for (id, _) in &weights {
                    let addr = if v4 {
                        IpAddr::from([10, 3, (id >> 8) as u8, *id as u8])
                    } else {
                        IpAddr::from([0x2001, 0xdb8, 3, 0, 0, 0, 0, *id as u16])
                    };
                    let d = Dip {
                        id: *id,
                        addr,
                        port: 0,
                    };
                    h.maps.put_dip(*id, &d.abi(1, true)).unwrap();
                }
                for fl in flows.iter().filter(|fl| ip(&s(fl, "src")).is_ipv4() == v4) {
                    let (src, dst) = (ip(&s(fl, "src")), ip(&s(fl, "dst")));
                    let (sport, dport) = (n(fl, "sport") as u16, n(fl, "dport") as u16);
                    let f = client(match s(fl, "proto").as_str() {
                        "tcp" => Frame::tcp(src, sport, dst, dport, TcpFlags::SYN),
                        _ => Frame::udp(src, sport, dst, dport),
                    });
                    let t = f.tuple();
                    assert_eq!(
                        flow_hash(&t.key(), seed),
                        n(fl, "hash") as u32,
                        "{name}: weir-core hash of {t:?}"
                    );
                    let before = h.stats();
                    let r = h.run(&f.bytes());
                    let conn = dispatched_entry(&h, &t);
                    match fl["dip"].as_u64() {
                        Some(want) => {
                            assert_eq!(r.action(), Some(Tx), "{name}: {t:?}");
                            let c = conn.unwrap_or_else(|| panic!("{name}: no conn for {t:?}"));
                            assert_eq!(c.dip_id as u64, want, "{name}: DIP of {t:?}");
                            assert_eq!(c.table_version, version);
                        }
                        None => {
                            assert_eq!(r.action(), Some(Drop), "{name}: {t:?}");
                            assert!(conn.is_none(), "{name}: conn installed for {t:?}");
                            let after = h.stats();
                            let d = WEIR_STAT_DROP_NO_BACKEND as usize;
                            assert_eq!(after[d] - before[d], 1, "{name}: no-backend count");
                        }
                    }
                    forget_entry(&h, &t);
                    checked += 1;
                }
            }
            for (addr, port, proto) in &vips {
                let v = Vip {
                    id: 0,
                    addr: *addr,
                    port: *port,
                    proto: *proto,
                    mode: DSR,
                    weights: None,
                };
                h.maps.delete_vip(&v.key()).unwrap();
            }
        }
        h.assert_balanced("vectors");
        eprintln!("shared AWFD vectors: {checked} flows agree");
        assert!(checked > 0);
    }
}

/// The passive telemetry counters of a DIP slot are exactly these.
fn telemetry_is(dip: u32, requests: u64, samples: u64) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let t = h.maps.dip_telemetry(dip).unwrap();
        assert_eq!(
            (t.requests, t.samples),
            (requests, samples),
            "telemetry of DIP {dip}: {t:?}"
        );
        if samples == 0 {
            assert_eq!(t.sum_ns, 0, "no sample, no delay: {t:?}");
        }
    }
}

/// The outstanding-request stamp of connection `t` is set (or not).
fn req_stamp(t: FlowTuple, set: bool) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let c = dispatched_entry(h, &t).expect("connection entry");
        assert_eq!(c.req_us != 0, set, "req_us of {t:?} = {}", c.req_us);
    }
}

#[test]
fn passive_telemetry_times_request_to_first_reply() {
    let opts = weir_dataplane::loader::LoadOptions {
        passive_telemetry: true,
        ..test_options()
    };
    let h = Harness::new(&opts);
    let fx = &h.fx;
    // nat TCP: SYN (no payload) -> request -> more request data -> reply
    // (sample) -> reply again (none outstanding) -> next request.
    let syn = tcp("192.0.2.70", 47000, "10.0.0.100", 80, TcpFlags::SYN);
    let d = fx.predict(0, &syn.tuple()).unwrap().clone();
    let t = syn.tuple();
    let data = Frame {
        l4: L4::Tcp(TcpFlags::PSH_ACK),
        ..syn.clone()
    }
    .payload(PAYLOAD);
    let ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    };
    let id = d.id;
    let cases = vec![
        new_flow(&h, "telemetry: SYN starts no request", &syn, 0)
            .after(both(telemetry_is(id, 0, 0), req_stamp(t, false))),
        rev_case(
            "telemetry: a reply with no request outstanding is no sample",
            &syn,
            &d,
            L4::Tcp(TcpFlags::SYN_ACK),
        )
        .after(telemetry_is(id, 0, 0)),
        promote("telemetry: pure ACK starts no request", &ack, &d, 0, NAT)
            .after(both(telemetry_is(id, 0, 0), req_stamp(t, false))),
        hit("telemetry: request payload stamps the conn", &data, &d, NAT)
            .after(both(telemetry_is(id, 1, 0), req_stamp(t, true))),
        hit("telemetry: more request data, same request", &data, &d, NAT)
            .after(both(telemetry_is(id, 1, 0), req_stamp(t, true))),
        rev_case(
            "telemetry: first reply payload completes the sample",
            &syn,
            &d,
            L4::Tcp(TcpFlags::PSH_ACK),
        )
        .before(|_| std::thread::sleep(std::time::Duration::from_millis(2)))
        .after(move |h| {
            telemetry_is(id, 1, 1)(h);
            req_stamp(t, false)(h);
            let s = h.maps.dip_telemetry(id).unwrap();
            // At least the 2 ms slept, at most what a slow test machine takes.
            assert!(
                (2_000_000..5_000_000_000).contains(&s.sum_ns),
                "delay {} ns",
                s.sum_ns
            );
        }),
        rev_case(
            "telemetry: a second reply payload is no new sample",
            &syn,
            &d,
            L4::Tcp(TcpFlags::PSH_ACK),
        )
        .after(telemetry_is(id, 1, 1)),
        hit("telemetry: the next request starts anew", &data, &d, NAT)
            .after(both(telemetry_is(id, 2, 1), req_stamp(t, true))),
    ];
    run_cases(&h, cases);

    // UDP nat: the first datagram (a new flow) is a request; its reply completes it.
    let u = udp("192.0.2.71", 5400, "10.0.0.100", 53);
    let du = fx.predict(1, &u.tuple()).unwrap().clone();
    let (uid, ut) = (du.id, u.tuple());
    let base = h.maps.dip_telemetry(uid).unwrap();
    let cases = vec![
        new_flow(&h, "telemetry: udp datagram on a new flow", &u, 1).after(move |h| {
            let now = h.maps.dip_telemetry(uid).unwrap();
            assert_eq!(now.requests, base.requests + 1, "{now:?}");
            req_stamp(ut, true)(h);
        }),
        rev_case(
            "telemetry: udp reply",
            &u,
            &du,
            L4::Udp { zero_csum: false },
        )
        .after(move |h| {
            let now = h.maps.dip_telemetry(uid).unwrap();
            assert_eq!(now.samples, base.samples + 1, "{now:?}");
            req_stamp(ut, false)(h);
        }),
    ];
    run_cases(&h, cases);

    // dsr: weir never sees replies, so it starts no request.
    let s = tcp("192.0.2.72", 47001, "10.0.0.101", 80, TcpFlags::SYN);
    let ds = fx.predict(2, &s.tuple()).unwrap().clone();
    let sdata = Frame {
        l4: L4::Tcp(TcpFlags::PSH_ACK),
        ..s.clone()
    }
    .payload(PAYLOAD);
    let (sid, st) = (ds.id, s.tuple());
    let before = h.maps.dip_telemetry(sid).unwrap();
    let cases = vec![
        new_flow(&h, "telemetry: dsr SYN", &s, 2),
        promote("telemetry: dsr data is not timed", &sdata, &ds, 2, DSR).after(move |h| {
            assert_eq!(h.maps.dip_telemetry(sid).unwrap(), before);
            req_stamp(st, false)(h);
        }),
    ];
    run_cases(&h, cases);
}

#[test]
fn without_passive_telemetry_nothing_is_timed() {
    let h = Harness::new(&test_options());
    let syn = tcp("192.0.2.73", 47002, "10.0.0.100", 80, TcpFlags::SYN);
    let d = h.fx.predict(0, &syn.tuple()).unwrap().clone();
    let data = Frame {
        l4: L4::Tcp(TcpFlags::PSH_ACK),
        ..syn.clone()
    }
    .payload(PAYLOAD);
    let (id, t) = (d.id, syn.tuple());
    let cases = vec![
        new_flow(&h, "off: SYN", &syn, 0),
        promote("off: request", &data, &d, 0, NAT)
            .after(both(telemetry_is(id, 0, 0), req_stamp(t, false))),
        rev_case("off: reply", &syn, &d, L4::Tcp(TcpFlags::PSH_ACK)).after(telemetry_is(id, 0, 0)),
    ];
    run_cases(&h, cases);
}

/// A connection whose entry was evicted (LRU) is, with the default
/// tcp_nonsyn_miss = dispatch, dispatched again by the *current* table: if
/// the table changed since it was installed, it lands on another DIP.
fn an_evicted_connection_is_redispatched_by_the_current_table_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let fx = &h.fx;
    let t2 = AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap();
    let pick2 = |f: &Frame| {
        t2.select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap()
    };
    // A flow on DIP 1 under version 1, on DIP 2 or 3 under version 2.
    let syn = find_flow(
        |p| tcp("192.0.2.80", p, "10.0.0.100", 80, TcpFlags::SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    };
    let (d1, d_new) = (fx.dip(1).clone(), fx.dip(pick2(&syn)).clone());
    let (t, new_id) = (syn.tuple(), d_new.id);
    let key = t.key();
    let cases = vec![
        new_flow(&h, "evicted: SYN under v1", &syn, 0),
        promote(
            "evicted: ACK under v2 while the half-open entry lives",
            &ack,
            &d1,
            0,
            NAT,
        )
        .before(move |h| {
            h.maps
                .publish_table(0, 2, &AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap())
                .unwrap();
        })
        .after(conn_is(t, 1, 1, 1)),
        Case::new(
            "evicted: ACK after eviction lands on the v2 DIP",
            ack.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&ack, &d_new).bytes())
        .events(&[
            WEIR_STAT_CONN_MISS,
            WEIR_STAT_NONSYN_MISS,
            WEIR_STAT_HALF_OPEN_NEW,
        ])
        .before(move |h| assert!(h.maps.conns.delete(&key).unwrap()))
        .after(half_open_is(t, new_id, 1, 2)),
    ];
    assert_ne!(d_new.id, 1);
    run_cases(&h, cases);
}

/// Publishing writes only the stage-1/stage-2 entries that differ from
/// what the slot holds, and the data plane dispatches by the new table.
#[test]
fn publishing_writes_only_changed_entries() {
    let h = Harness::new(&test_options());
    // VIP 0 holds v1 = {1: 3, 2: 1, 3: 1} in slot 1; slot 0 is empty.
    let w = |pairs: &[(u32, u32)]| AwfdTable::from_weights(pairs).unwrap();
    let r = h
        .maps
        .publish_table(0, 2, &w(&[(1, 3), (2, 1), (3, 1)]))
        .unwrap();
    assert_eq!(
        (r.rows_written, r.rows_deleted, r.ranges_written),
        (2, 0, true),
        "empty slot: everything"
    );
    // v3 goes to slot 1, which holds v1: the same table writes nothing.
    let r = h
        .maps
        .publish_table(0, 3, &w(&[(1, 3), (2, 1), (3, 1)]))
        .unwrap();
    assert_eq!(r.writes(), 0, "{r:?}");
    assert_eq!(
        h.maps.table_version(0).unwrap(),
        3,
        "the version flips anyway"
    );
    // v4 (slot 0, holds v2): DIP 3 joins class 3; class 1 = {2}.
    let r = h
        .maps
        .publish_table(0, 4, &w(&[(1, 3), (2, 1), (3, 3)]))
        .unwrap();
    assert_eq!(
        (r.rows_written, r.rows_deleted, r.ranges_written),
        (2, 0, true),
        "{r:?}"
    );
    // v5 (slot 1, holds v3 = v1): only DIP 2's weight changes, 1 -> 0:
    // class 3 = {1} is unchanged, class 1 disappears.
    let r = h
        .maps
        .publish_table(0, 5, &w(&[(1, 3), (2, 0), (3, 1)]))
        .unwrap();
    assert_eq!(
        (r.rows_written, r.rows_deleted, r.ranges_written),
        (1, 0, true),
        "{r:?}"
    );
    assert_eq!(
        h.maps.slot_table(0, 1).unwrap(),
        vec![(3, vec![1]), (1, vec![3])]
    );
    // v6 (slot 0, holds v4 = {3: [1, 3], 1: [2]}): one class {1, 3} of
    // weight 2: row 0 keeps its members (only stage 1 changes), row 1 goes.
    let r = h.maps.publish_table(0, 6, &w(&[(1, 2), (3, 2)])).unwrap();
    assert_eq!(
        (r.rows_written, r.rows_deleted, r.ranges_written),
        (0, 1, true),
        "{r:?}"
    );
    assert_eq!(h.maps.slot_table(0, 0).unwrap(), vec![(2, vec![1, 3])]);
    // The data plane follows the active table: new flows go to 1 or 3 only,
    // exactly as weir-core predicts.
    let t6 = w(&[(1, 2), (3, 2)]);
    for p in 0..64u16 {
        let f = tcp("192.0.2.90", 30000 + p, "10.0.0.100", 80, TcpFlags::SYN);
        let want = fx_dip(
            &h,
            t6.select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
                .unwrap(),
        );
        let r = h.run(&f.bytes());
        assert_eq!(r.action(), Some(Tx));
        assert_eq!(r.packet, nat_out(&f, &want).bytes(), "flow {p}");
    }
}

fn fx_dip(h: &Harness, id: u32) -> Dip {
    h.fx.dip(id).clone()
}

/// A nat connection whose reverse entry its LRU evicted apart from the
/// connection: no client packet looks for it, fresh or after a second of
/// silence (a hit is one table lookup), so it stays gone until a reply of
/// the DIP writes it back (xdp_nexthop.rs); without a route back to the
/// client (test_run's FIB here) that reply goes to the kernel, as one with
/// no connection does.
fn an_evicted_reverse_entry_is_left_to_the_reply_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let (syn, ack, dip) = handshake(&h, "192.0.2.77", 41000, "10.0.0.100", 0);
    let t = syn.tuple();
    let rkey = rev_key_of(&t, &dip);
    let evict = move |h: &Harness| assert!(h.maps.rev_nat.delete(&rkey).unwrap());
    let no_rev = move |h: &Harness| {
        assert!(
            h.maps.rev_nat(&rkey).unwrap().is_none(),
            "a client packet looked up the reverse entry"
        )
    };
    // Refreshed within the last second (the promotion, or the last hit).
    let fresh = move |h: &Harness| {
        let c = h.maps.conn(&t.key()).unwrap().expect("an entry");
        let age = now_ticks().wrapping_sub(c.atime);
        let second = weir_dataplane::conntrack::ticks(std::time::Duration::from_secs(1));
        assert!(age < second, "atime {age} ticks old");
    };
    let stray = reply(&syn, &dip, L4::Tcp(TcpFlags::ACK));
    let cases = vec![
        new_flow(&h, "SYN", &syn, 0),
        promote("ACK", &ack, &dip, 0, NAT),
        hit("hit within the second", &ack, &dip, NAT)
            .before(evict)
            .after(both(no_rev, fresh)),
        // A second later the hit refreshes atime, and still looks up nothing else.
        hit("hit after a second", &ack, &dip, NAT)
            .before(edit_conn(t, |c| c.atime = ticks_ago(2)))
            .after(both(no_rev, fresh)),
        pass(
            "reply with no route back to the client",
            stray.bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        )
        .after(no_rev),
    ];
    run_cases(&h, cases);
    h.assert_balanced("reverse entry left to the reply");
}

/// The program's clock cache (`.data.clock`, conntrack.h's coarse_clock):
/// the map's id among the loaded program's maps.
fn clock_cache(h: &Harness) -> libbpf_rs::MapHandle {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show", "id", &prog_id(h)])
        .output()
        .expect("running bpftool (scripts/deps.sh installs it)");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    let ids = info["map_ids"].as_array().expect("the program's map_ids");
    ids.iter()
        .filter_map(|id| libbpf_rs::MapHandle::from_map_id(id.as_u64()? as u32).ok())
        .find(|m| m.name().to_string_lossy().contains(".data.cl"))
        .expect("weir_lb has a .data.clock map")
}

/// A hit in the jiffy of the clock cache's last reading takes that reading
/// instead of calling the clock: a reading planted in the cache for the
/// current jiffy (100 s ahead of the clock) is what the hit's refresh
/// writes into the entry's atime. The plant and the hit are a few
/// microseconds apart; an attempt that crosses into the next jiffy (the
/// program then reads the clock itself) is repeated.
#[test]
fn a_hit_takes_the_clock_reading_of_its_jiffy() {
    let h = Harness::new(&test_options());
    let syn = tcp("192.0.2.97", 41097, "10.0.0.100", 80, TcpFlags::SYN);
    let ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    };
    let t = syn.tuple();
    let dip = h.fx.predict(0, &t).unwrap().clone();
    run_cases(
        &h,
        vec![
            new_flow(&h, "SYN", &syn, 0),
            promote("ACK", &ack, &dip, 0, NAT),
        ],
    );
    let cache = clock_cache(&h);
    let ahead_ns = 100_000_000_000u64;
    for _ in 0..200 {
        let value = cache
            .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .unwrap()
            .expect("the clock cache's one value");
        let jiffies = &value[0..8];
        let ns = u64::from_ne_bytes(value[8..16].try_into().unwrap());
        assert_ne!(ns, 0, "the promoting ACK read the clock into the cache");
        let planted = ns + ahead_ns;
        let mut new_value = jiffies.to_vec();
        new_value.extend_from_slice(&planted.to_ne_bytes());
        edit_conn(t, |c| c.atime = ticks_ago(2))(&h);
        cache
            .update(&0u32.to_ne_bytes(), &new_value, libbpf_rs::MapFlags::ANY)
            .unwrap();
        run_cases(&h, vec![hit("hit", &ack, &dip, NAT)]);
        let atime = h.maps.conn(&t.key()).unwrap().expect("an entry").atime;
        if atime == (planted >> WEIR_TICK_SHIFT) as u32 {
            return;
        }
        let age = now_ticks().wrapping_sub(atime);
        assert!(
            age < 16,
            "the hit wrote atime {atime}: neither the planted reading nor the clock ({age} ticks off)"
        );
    }
    panic!("no hit took the planted reading of its jiffy in 200 attempts");
}

/// Writes `f` into the established entry of `t` (the test's way to age it).
fn edit_conn(t: FlowTuple, f: impl Fn(&mut weir_conn)) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let mut c = h.maps.conn(&t.key()).unwrap().expect("an entry to edit");
        f(&mut c);
        h.maps.put_conn(&t.key(), &c).unwrap();
    }
}

fn close_flags_are(t: FlowTuple, flags: u32) -> impl Fn(&Harness) {
    move |h: &Harness| {
        let c = h.maps.conn(&t.key()).unwrap().expect("an entry");
        assert_eq!(u32::from(c.close_flags), flags, "close flags of {t:?}");
    }
}

fn ticks_ago(secs: u64) -> u32 {
    now_ticks().wrapping_sub(weir_dataplane::conntrack::ticks(
        std::time::Duration::from_secs(secs),
    ))
}

/// A connection's life: SYN into the half-open table (retransmissions keep
/// the DIP whatever the table says), SYN-ACK back through the half-open
/// reverse entry, promotion, FINs both ways, a new SYN on the same 5-tuple
/// (dispatched by the current table, never by the old entry), idle expiry
/// by state, and RST.
fn tcp_connection_life_cycle_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let fx = &h.fx;
    let v2 = AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap();
    let pick_v2 = |f: &Frame| {
        v2.select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap()
    };
    let syn = find_flow(
        |p| tcp("192.0.2.90", p, "10.0.0.100", 80, TcpFlags::SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let with = |fl: TcpFlags| Frame {
        l4: L4::Tcp(fl),
        ..syn.clone()
    };
    let (ack, fin, rst) = (
        with(TcpFlags::ACK),
        with(TcpFlags::FIN_ACK),
        with(TcpFlags::RST),
    );
    let data = with(TcpFlags::PSH_ACK).payload(PAYLOAD);
    let t = syn.tuple();
    let (d1, d_v2) = (fx.dip(1).clone(), fx.dip(pick_v2(&syn)).clone());
    assert_ne!(d_v2.id, 1);
    let publish_v2 = |h: &Harness| {
        h.maps
            .publish_table(0, 2, &AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap())
            .unwrap();
    };
    let both_fins = WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER;
    let timeouts = test_options().timeouts;
    let closed_s = timeouts.tcp_closed.as_secs();
    let established_s = timeouts.tcp_established.as_secs();
    let (d_v2a, d_v2b) = (d_v2.clone(), d_v2.clone());
    let cases = vec![
        new_flow(&h, "SYN under v1", &syn, 0),
        syn_again("retransmitted SYN under v2 keeps its DIP", &syn, &d1, NAT).before(publish_v2),
        rev_case("SYN-ACK", &syn, &d1, L4::Tcp(TcpFlags::SYN_ACK)),
        promote("ACK completes the handshake on DIP 1", &ack, &d1, 0, NAT),
        hit("data", &data, &d1, NAT),
        Case::new("client FIN", fin.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&fin, &d1).bytes())
            .events(&[WEIR_STAT_CONN_HIT, WEIR_STAT_CONN_CLOSING])
            .after(close_flags_are(t, WEIR_CONN_F_FIN_CLIENT)),
        rev_case("server FIN", &syn, &d1, L4::Tcp(TcpFlags::FIN_ACK))
            .after(close_flags_are(t, both_fins)),
        hit("last ACK within the grace period", &ack, &d1, NAT)
            .after(close_flags_are(t, both_fins)),
        // The client reuses its port: the current table (v2) decides.
        Case::new(
            "new SYN on the closed 5-tuple",
            syn.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&syn, &d_v2).bytes())
        .events(&[
            WEIR_STAT_CONN_REUSED,
            WEIR_STAT_CONN_MISS,
            WEIR_STAT_HALF_OPEN_NEW,
        ])
        .after(move |h| {
            no_conn(t)(h);
            half_open_is(t, d_v2a.id, 1, 2)(h);
            // The old connection's reverse entry went with it.
            assert!(h.maps.rev_nat(&rev_key_of(&t, &d1)).unwrap().is_none());
        }),
        Case::new("its ACK", ack.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(MISS_NEW)
            .after(conn_is(t, d_v2.id, 1, 2)),
        // Idle past the established timeout: gone, the ACK is a miss.
        Case::new("ACK after the idle timeout", ack.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(&[
                WEIR_STAT_CONN_EXPIRED,
                WEIR_STAT_CONN_MISS,
                WEIR_STAT_NONSYN_MISS,
                WEIR_STAT_HALF_OPEN_NEW,
            ])
            .before(edit_conn(t, move |c| {
                c.atime = ticks_ago(established_s + 2)
            }))
            .after(half_open_is(t, d_v2b.id, 1, 2)),
        Case::new(
            "the next ACK confirms it again",
            ack.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&ack, &d_v2).bytes())
        .events(MISS_NEW)
        .after(conn_is(t, d_v2.id, 1, 2)),
        // Idle just under the timeout: still there.
        hit("ACK idle just under the timeout", &ack, &d_v2, NAT).before(edit_conn(t, move |c| {
            c.atime = ticks_ago(established_s - 2)
        })),
        Case::new("client RST", rst.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&rst, &d_v2).bytes())
            .events(&[WEIR_STAT_CONN_HIT, WEIR_STAT_CONN_CLOSING])
            .after(close_flags_are(t, WEIR_CONN_F_RST)),
        // A reset connection lasts only the grace period.
        Case::new("ACK after the grace period", ack.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(&[
                WEIR_STAT_CONN_EXPIRED,
                WEIR_STAT_CONN_MISS,
                WEIR_STAT_NONSYN_MISS,
                WEIR_STAT_HALF_OPEN_NEW,
            ])
            .before(edit_conn(t, move |c| c.atime = ticks_ago(closed_s + 2))),
    ];
    run_cases(&h, cases);
}

/// A reply from a nat DIP's service endpoint that matches no reverse entry
/// never leaves rewritten or forwarded as if weir knew it; one addressed to
/// this host (a health check's answer) goes to the kernel. (Whether the
/// kernel would forward one to a client depends on this host's routes, so
/// the drop is proven end to end in e2e_conntrack.)
#[test]
fn a_reply_without_state_is_not_rewritten() {
    let h = Harness::new(&test_options());
    let d1 = h.fx.dip(1).clone();
    let probe = Frame::tcp(ip("127.0.0.1"), 40100, ip("10.0.0.100"), 80, TcpFlags::SYN)
        .macs(CLIENT_MAC, VIP_MAC);
    let r = reply(&probe, &d1, L4::Tcp(TcpFlags::SYN_ACK));
    let other_port = reply(&probe, &d1, L4::Tcp(TcpFlags::SYN_ACK)).with_src(d1.addr, 9999);
    let cases = vec![
        pass(
            "health-check answer to this host",
            r.bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        pass(
            "a DIP's packet from another port is not a reply",
            other_port.bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
    ];
    assert!(h.maps.nat_endpoints.keys().count() > 0);
    run_cases(&h, cases);
}

/// A nat SYN inserts one entry, which carries its reverse entry: the
/// SYN-ACK finds it through the replying endpoint's VIPs (here DIP 1's
/// endpoint serves VIPs 0 and 8), is rewritten to its own VIP, and a reply
/// from another DIP matches nothing. The client's ACK then moves the
/// reverse entry to `rev_nat`.
#[test]
fn a_syn_ack_finds_its_half_open_connection_through_its_endpoint() {
    let h = Harness::new(&test_options());
    h.maps
        .publish_table(8, 1, &AwfdTable::from_weights(&[(1, 1)]).unwrap())
        .unwrap();
    let fx = &h.fx;
    let (d1, d2) = (fx.dip(1).clone(), fx.dip(2).clone());
    let to_vip0 = find_flow(
        |p| tcp("192.0.2.95", p, "10.0.0.100", 80, TcpFlags::SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let to_vip8 = tcp(
        "192.0.2.95",
        to_vip0.sport + 1,
        "10.0.0.102",
        80,
        TcpFlags::SYN,
    );
    let (t0, t8) = (to_vip0.tuple(), to_vip8.tuple());
    let ack = |f: &Frame| Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..f.clone()
    };
    let d1_rev = d1.clone();
    let cases = vec![
        new_flow(&h, "SYN to VIP 0", &to_vip0, 0),
        Case::new("SYN to VIP 8", to_vip8.bytes(), Tx, WEIR_STAT_TX)
            .output(nat_out(&to_vip8, &d1).bytes())
            .events(MISS_HALF_OPEN)
            .after(both(
                half_open_is(t8, 1, 1, 1),
                half_rev_is(t8, d1.clone(), 8),
            )),
        rev_case("VIP 8's SYN-ACK", &to_vip8, &d1, L4::Tcp(TcpFlags::SYN_ACK)),
        rev_case("VIP 0's SYN-ACK", &to_vip0, &d1, L4::Tcp(TcpFlags::SYN_ACK)),
        pass(
            "a SYN-ACK from a DIP the connection did not go to",
            reply(&to_vip0, &d2, L4::Tcp(TcpFlags::SYN_ACK)).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        promote("VIP 0's ACK", &ack(&to_vip0), &d1, 0, NAT).after(move |h| {
            no_half_open(t0)(h);
            let rev = h.maps.rev_nat(&rev_key_of(&t0, &d1_rev)).unwrap().unwrap();
            check_rev(&rev, &t0, 0);
        }),
        rev_case(
            "VIP 0's data reply",
            &to_vip0,
            &d1,
            L4::Tcp(TcpFlags::PSH_ACK),
        ),
    ];
    run_cases(&h, cases);
}

/// A half-open entry older than its timeout is no retransmission: the SYN
/// is dispatched by the current table.
fn a_stale_half_open_entry_is_dispatched_anew_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let fx = &h.fx;
    let v2 = AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap();
    let syn = find_flow(
        |p| tcp("192.0.2.91", p, "10.0.0.100", 80, TcpFlags::SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let t = syn.tuple();
    let d_v2 = fx
        .dip(v2.select(flow_hash(&t.key(), DEFAULT_SEED)).unwrap())
        .clone();
    let half_open_s = test_options().timeouts.tcp_half_open.as_secs();
    let cases = vec![
        new_flow(&h, "SYN under v1", &syn, 0),
        Case::new(
            "SYN after the half-open timeout, under v2",
            syn.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(nat_out(&syn, &d_v2).bytes())
        .events(MISS_HALF_OPEN)
        .before(move |h| {
            h.maps
                .publish_table(0, 2, &AwfdTable::from_weights(&[(2, 1), (3, 1)]).unwrap())
                .unwrap();
            let mut e = h.maps.half_open_entry(&t.key()).unwrap().unwrap();
            e.conn.atime = ticks_ago(half_open_s + 2);
            h.maps.put_half_open(&t.key(), &e).unwrap();
        })
        .after(half_open_is(t, d_v2.id, 1, 2)),
    ];
    run_cases(&h, cases);
}

/// SYNs, however many, land in the bounded half-open table and never push
/// an established connection out of `conns`.
fn a_syn_flood_cannot_evict_established_connections_with(base: &LoadOptions) {
    let opts = LoadOptions {
        conn_capacity: 1024,
        half_open_capacity: 256,
        ..base.clone()
    };
    let h = Harness::new(&opts);
    let established: Vec<Frame> = (0..200)
        .map(|i| tcp("192.0.2.100", 20000 + i, "10.0.0.100", 80, TcpFlags::ACK))
        .collect();
    for f in &established {
        // Non-SYN misses enter the half-open table; the next packet confirms.
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
        assert!(h.maps.conn(&f.tuple().key()).unwrap().is_some());
    }
    let before = h.stats();
    let floods = 20_000u32;
    for i in 0..floods {
        let src = std::net::Ipv4Addr::from(0x0a40_0000 + i).to_string();
        let f = tcp(
            &src,
            1024 + (i % 60000) as u16,
            "10.0.0.100",
            80,
            TcpFlags::SYN,
        );
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
    }
    let after = h.stats();
    let delta = |s: u32| after[s as usize] - before[s as usize];
    assert_eq!(delta(WEIR_STAT_HALF_OPEN_NEW), u64::from(floods));
    assert_eq!(delta(WEIR_STAT_CONN_NEW), 0);
    assert!(
        h.maps.half_open_count() <= 256,
        "the half-open table holds its bound"
    );
    for f in &established {
        let want = h.maps.conn(&f.tuple().key()).unwrap();
        assert!(want.is_some(), "{:?} was evicted by SYNs", f.tuple());
        let r = h.run(&f.bytes());
        assert_eq!(r.action(), Some(Tx));
    }
    let hits = h.stats()[WEIR_STAT_CONN_HIT as usize] - after[WEIR_STAT_CONN_HIT as usize];
    assert_eq!(hits, established.len() as u64);
    h.assert_balanced("syn flood");
}

/// Where a connection of either family sits: (in conns4, in conns, in
/// rev_nat4, in rev_nat), read from the raw maps under each family's key.
fn tables_holding(h: &Harness, t: &FlowTuple, dip: &Dip) -> [bool; 4] {
    use weir_dataplane::flow_table::compact;
    let in_maps = |[v4, v6]: [&libbpf_rs::MapHandle; 2], key: &weir_flow_key| {
        let k4 = compact(key).map(|k| k.as_bytes().to_vec());
        [
            k4.is_some_and(|k| v4.lookup(&k, libbpf_rs::MapFlags::ANY).unwrap().is_some()),
            v6.lookup(key.as_bytes(), libbpf_rs::MapFlags::ANY)
                .unwrap()
                .is_some(),
        ]
    };
    let [c4, c6] = in_maps(h.maps.conns.maps(), &t.key());
    let [r4, r6] = in_maps(h.maps.rev_nat.maps(), &rev_key_of(t, dip));
    [c4, c6, r4, r6]
}

/// The sweep deletes exactly the entries past their state's timeout, with
/// their reverse entries, in both tables and both families; an IPv4
/// connection lives in the IPv4 tables only, an IPv6 one in the IPv6 ones.
fn the_sweep_deletes_expired_entries_only_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let t = test_options().timeouts;
    // Even flows IPv4, odd ones IPv6, all nat.
    let flows: Vec<Frame> = (0..6)
        .map(|i| match i % 2 {
            0 => tcp("192.0.2.120", 46000 + i, "10.0.0.100", 80, TcpFlags::SYN),
            _ => tcp(
                "2001:db8:2::120",
                46000 + i,
                "2001:db8::100",
                80,
                TcpFlags::SYN,
            ),
        })
        .collect();
    for f in &flows {
        let ack = Frame {
            l4: L4::Tcp(TcpFlags::ACK),
            ..f.clone()
        };
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
        assert_eq!(h.run(&ack.bytes()).action(), Some(Tx));
    }
    // VIP 0 is 10.0.0.100:80, VIP 4 2001:db8::100:80 (common/mod.rs).
    let dip_of = |f: &Frame| {
        let vip = if f.src.is_ipv4() { 0 } else { 4 };
        h.fx.predict(vip, &f.tuple()).unwrap().clone()
    };
    for (i, f) in flows.iter().enumerate() {
        let v4 = i.is_multiple_of(2);
        let want = [v4, !v4, v4, !v4];
        assert_eq!(tables_holding(&h, &f.tuple(), &dip_of(f)), want, "flow {i}");
    }
    let age = |f: &Frame, secs: u64, flags: u32| {
        edit_conn(f.tuple(), move |c| {
            c.atime = ticks_ago(secs);
            c.close_flags = flags as u8;
        })(&h)
    };
    let established = t.tcp_established.as_secs();
    let closed = t.tcp_closed.as_secs();
    let gone = [0, 1, 3];
    age(&flows[0], established + 5, 0); // idle past its timeout: goes
    age(&flows[1], established + 5, 0); // the same in IPv6: goes
    age(&flows[2], established - 5, 0); // stays
    age(&flows[3], closed + 5, WEIR_CONN_F_RST); // reset, past the grace: goes
    age(&flows[4], closed + 5, WEIR_CONN_F_FIN_CLIENT); // closing, within 120 s: stays
    age(&flows[5], closed + 5, WEIR_CONN_F_FIN_CLIENT); // the same in IPv6: stays

    // A half-open entry past its timeout.
    let half = tcp("192.0.2.121", 46100, "10.0.0.100", 80, TcpFlags::SYN);
    assert_eq!(h.run(&half.bytes()).action(), Some(Tx));
    let mut e = h
        .maps
        .half_open_entry(&half.tuple().key())
        .unwrap()
        .unwrap();
    e.conn.atime = ticks_ago(t.tcp_half_open.as_secs() + 5);
    h.maps.put_half_open(&half.tuple().key(), &e).unwrap();

    let r = weir_dataplane::conntrack::sweep(&h.maps, &t).unwrap();
    assert_eq!((r.established, r.established_expired), (6, 3), "{r:?}");
    assert_eq!((r.half_open, r.half_open_expired), (1, 1), "{r:?}");
    for (i, f) in flows.iter().enumerate() {
        let v4 = i.is_multiple_of(2);
        let want = if gone.contains(&i) {
            [false; 4]
        } else {
            [v4, !v4, v4, !v4]
        };
        assert_eq!(tables_holding(&h, &f.tuple(), &dip_of(f)), want, "flow {i}");
    }
    assert!(h.maps.half_open(&half.tuple().key()).unwrap().is_none());
}

/// The sweep deletes closed connections' reverse entries in batches: one
/// already gone (evicted, or deleted by the data plane) ends the kernel's
/// batch, and the sweep still deletes every other one, of both families.
fn the_sweep_deletes_every_reverse_entry_when_some_are_gone_with(opts: &LoadOptions) {
    let h = Harness::new(opts);
    let t = test_options().timeouts;
    let flows: Vec<Frame> = (0..12)
        .map(|i| match i % 3 {
            2 => tcp(
                "2001:db8:2::122",
                47000 + i,
                "2001:db8::100",
                80,
                TcpFlags::SYN,
            ),
            _ => tcp("192.0.2.122", 47000 + i, "10.0.0.100", 80, TcpFlags::SYN),
        })
        .collect();
    for f in &flows {
        let ack = Frame {
            l4: L4::Tcp(TcpFlags::ACK),
            ..f.clone()
        };
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
        assert_eq!(h.run(&ack.bytes()).action(), Some(Tx));
    }
    let dip_of = |f: &Frame| {
        let vip = if f.src.is_ipv4() { 0 } else { 4 };
        h.fx.predict(vip, &f.tuple()).unwrap().clone()
    };
    let closed = t.tcp_closed.as_secs();
    for f in &flows {
        edit_conn(f.tuple(), move |c| {
            c.atime = ticks_ago(closed + 5);
            c.close_flags = WEIR_CONN_F_RST as u8;
        })(&h);
    }
    // Reverse entries already gone, IPv4 and IPv6, among the others.
    for i in [1, 4, 5, 9] {
        let key = rev_key_of(&flows[i].tuple(), &dip_of(&flows[i]));
        assert!(h.maps.rev_nat.delete(&key).unwrap(), "flow {i}");
    }
    let r = weir_dataplane::conntrack::sweep(&h.maps, &t).unwrap();
    assert_eq!((r.established, r.established_expired), (12, 12), "{r:?}");
    for (i, f) in flows.iter().enumerate() {
        assert_eq!(
            tables_holding(&h, &f.tuple(), &dip_of(f)),
            [false; 4],
            "flow {i}"
        );
    }
}

/// The connection life-cycle cases, with each LRU layout of the tables
/// (`ConnLru`): per-CPU lists must not change what the tables keep.
macro_rules! with_both_lrus {
    ($($name:ident),* $(,)?) => {
        mod shared_lru {
            $(#[test]
            fn $name() {
                super::$name(&super::test_options());
            })*
        }
        mod per_cpu_lru {
            $(#[test]
            fn $name() {
                super::$name(&super::LoadOptions {
                    conn_lru: weir_dataplane::loader::ConnLru::PerCpu,
                    ..super::test_options()
                });
            })*
        }
    };
}

with_both_lrus!(
    an_evicted_connection_is_redispatched_by_the_current_table_with,
    an_evicted_reverse_entry_is_left_to_the_reply_with,
    tcp_connection_life_cycle_with,
    a_stale_half_open_entry_is_dispatched_anew_with,
    the_sweep_deletes_expired_entries_only_with,
    the_sweep_deletes_every_reverse_entry_when_some_are_gone_with,
    a_syn_flood_cannot_evict_established_connections_with,
);

/// Every map call of the loaded `weir_lb` reaches the map's own code. The
/// verifier turns a call that one map reaches into a direct call (a lookup
/// it may inline), and leaves one that two maps reach (clang merged the
/// IPv4 and IPv6 calls of a flow table helper) to the generic helper, whose
/// indirect call every packet on that path then pays.
/// `bpftool prog dump xlated` of the harness's loaded `weir_lb`: the
/// program as the verifier left it, with the calls' targets named.
/// The loaded program's id.
fn prog_id(h: &Harness) -> String {
    use std::os::fd::AsRawFd;

    let fd = h.lb.prog_fd().as_raw_fd();
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("prog_id:"))
        .expect("prog_id in the program fd's fdinfo")
        .trim()
        .to_string()
}

fn xlated_dump(h: &Harness) -> String {
    let id = prog_id(h);
    let out = std::process::Command::new("bpftool")
        .args(["prog", "dump", "xlated", "id", &id])
        .output()
        .expect("running bpftool (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "bpftool prog dump xlated id {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_map_call_is_direct_after_verification() {
    let h = Harness::new(&test_options());
    let text = xlated_dump(&h);
    // The calls' targets are named (kallsyms readable): the check below
    // cannot pass for want of names.
    assert!(
        text.contains("call __htab_map_lookup_elem") || text.contains("htab_lru_map_update_elem"),
        "the xlated dump names no hash map function:\n{text}"
    );
    let generic: Vec<&str> = text
        .lines()
        .filter(|l| {
            [
                "call bpf_map_lookup_elem",
                "call bpf_map_update_elem",
                "call bpf_map_delete_elem",
            ]
            .iter()
            .any(|g| l.contains(g))
        })
        .collect();
    assert!(
        generic.is_empty(),
        "map calls left to the generic helper (two maps reach one call site):\n{}",
        generic.join("\n")
    );
}

/// The instructions of the program's own function, before its first
/// out-of-line subprogram: the stream a hit runs through. It looks up,
/// reads the coarse clock and sends; a new connection's installs and
/// timestamps, the FIB, encapsulation and ring buffers are out of line.
const HOT_STREAM_MAX_INSNS: usize = 2_200;

#[test]
fn the_hot_stream_holds_no_cold_path() {
    let h = Harness::new(&test_options());
    let text = xlated_dump(&h);
    // Each function's instructions follow its signature line (the only
    // lines that neither are indented nor start with a source comment).
    let mut functions: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if !line.starts_with([' ', ';']) && line.ends_with(':') {
            functions.push((line, Vec::new()));
        } else if let Some((_, body)) = functions.last_mut() {
            body.push(line);
        }
    }
    let (main, body) = functions.first().expect("a function in the xlated dump");
    assert!(
        main.starts_with("int weir_lb("),
        "the dump starts with weir_lb's own function, not {main}"
    );
    let subprograms: Vec<&str> = functions[1..].iter().map(|(name, _)| *name).collect();
    for cold in [
        "new_connection(",
        "encapsulate(",
        "forward_unresolved(",
        "not_a_known_reply(",
        "not_balanced(",
    ] {
        assert!(
            subprograms.iter().any(|s| s.contains(cold)),
            "{cold}...) is not an out-of-line subprogram; subprograms: {subprograms:#?}"
        );
    }
    let insns = body
        .iter()
        .filter(|l| {
            l.trim_start()
                .split(':')
                .next()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .count();
    let cold_calls: Vec<&str> = body
        .iter()
        .copied()
        .filter(|l| {
            [
                "update_elem",
                "delete_elem",
                "call bpf_ktime_get_ns",
                "call bpf_xdp_adjust_head",
                "fib_lookup",
                "ringbuf",
            ]
            .iter()
            .any(|c| l.contains(c))
        })
        .collect();
    assert!(
        cold_calls.is_empty(),
        "weir_lb's own function makes a cold path's calls:\n{}",
        cold_calls.join("\n")
    );
    assert!(
        insns <= HOT_STREAM_MAX_INSNS,
        "weir_lb's own function is {insns} instructions (at most {HOT_STREAM_MAX_INSNS}): \
         has a cold path been inlined into it again?"
    );
}
