//! The cases the software engine's and weir_lb's table-driven tests share:
//! frames the load balancer forwards (each with the frame it must send and
//! the entries it must leave) and frames it leaves alone under the default
//! configuration (not for a VIP's service, not IP, ICMP, fragments), each
//! with the outcome counter it must end in. The runners add what is theirs
//! (the XDP verdict, the engine's outcome, how each reads its connection
//! tables).

use weir_abi::*;
use weir_core::flow::FlowTuple;
use weir_core::wire::{raw_frame, refresh_ipv4_checksum, ETHERTYPE_IPV6, ETH_HLEN};

use crate::fixture::{ip, Dip, Fixture, CLIENT_MAC, DSR, NAT, VIP_MAC};
use crate::frames::*;

/// A frame that must leave unchanged.
pub struct PassCase {
    pub name: &'static str,
    pub input: Vec<u8>,
    /// The one outcome counter it ends in.
    pub outcome: u32,
    /// A flow that must leave no connection state behind.
    pub flow: Option<FlowTuple>,
}

fn case(name: &'static str, input: Vec<u8>, outcome: u32) -> PassCase {
    PassCase {
        name,
        input,
        outcome,
        flow: None,
    }
}

/// `f`'s bytes with the IPv4 flags-and-fragment-offset field set to
/// `field` (checksum recomputed).
fn ipv4_fragment(f: &Frame, field: u16) -> Vec<u8> {
    let mut b = f.bytes();
    b[ETH_HLEN + 6..ETH_HLEN + 8].copy_from_slice(&field.to_be_bytes());
    refresh_ipv4_checksum(&mut b[ETH_HLEN..]);
    b
}

/// Every frame of the fixture the load balancer passes to the kernel
/// untouched when `not_vip`, `icmp` and `fragments` are `pass`, whatever
/// the host's routes. (A DIP's reply without state is not among them: where
/// it goes depends on the FIB, which each tier asks in its own way.)
pub fn passed_untouched() -> Vec<PassCase> {
    let not_vip = tcp("192.0.2.1", 40001, "10.0.0.200", 80, SYN);
    let v6 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, SYN);
    let frag = tcp("192.0.2.20", 40020, "10.0.0.100", 80, SYN);
    let mut no_next_header = v6.bytes()[ETH_HLEN..ETH_HLEN + 40].to_vec();
    no_next_header[4..6].copy_from_slice(&[0, 0]); // payload length 0
    no_next_header[6] = 59; // no next header
    let padn = (0u8, vec![1, 4, 0, 0, 0, 0]);
    vec![
        PassCase {
            flow: Some(not_vip.tuple()),
            ..case(
                "v4 tcp to a non-VIP address",
                not_vip.bytes(),
                WEIR_STAT_PASS_NOT_VIP,
            )
        },
        case(
            "v4 tcp to the VIP address, other port",
            tcp("192.0.2.1", 40001, "10.0.0.100", 81, SYN).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v4 udp to a tcp VIP's port",
            udp("192.0.2.1", 40001, "10.0.0.100", 80).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v6 tcp to a non-VIP address",
            tcp("2001:db8:c::1", 40001, "2001:db8::200", 80, SYN).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "v6 udp to a tcp VIP's port",
            udp("2001:db8:c::1", 40001, "2001:db8::100", 80).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "ARP request for the VIP",
            arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_PASS_NOT_IP,
        ),
        case(
            "LLDP frame",
            raw_frame(CLIENT_MAC, [0x01, 0x80, 0xc2, 0, 0, 0x0e], 0x88cc, &[0; 46]),
            WEIR_STAT_PASS_NOT_IP,
        ),
        case(
            "ICMP echo to the VIP",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100")),
            WEIR_STAT_PASS_ICMP,
        ),
        case(
            "ICMPv6 echo to the VIP",
            icmp_echo(
                CLIENT_MAC,
                VIP_MAC,
                ip("2001:db8:c::1"),
                ip("2001:db8::100"),
            ),
            WEIR_STAT_PASS_ICMP,
        ),
        case(
            "IPv4 GRE to the VIP",
            ipv4_other_proto(CLIENT_MAC, VIP_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        case(
            "IPv6 no-next-header to the VIP",
            raw_frame(CLIENT_MAC, VIP_MAC, ETHERTYPE_IPV6, &no_next_header),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        PassCase {
            flow: Some(frag.tuple()),
            ..case(
                "v4 first fragment (MF) to the VIP",
                ipv4_fragment(&frag, 0x2000),
                WEIR_STAT_PASS_FRAGMENT,
            )
        },
        case(
            "v4 later fragment (offset 185) to the VIP",
            ipv4_fragment(&frag, 185),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v4 last fragment (DF clear, offset 1) to a non-VIP",
            ipv4_fragment(&not_vip, 1),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v6 fragment header to the VIP",
            ipv6_with_exts(&v6, &[fragment_ext()]),
            WEIR_STAT_PASS_FRAGMENT,
        ),
        case(
            "v6 fragment header after hop-by-hop",
            ipv6_with_exts(&v6, &[padn, fragment_ext()]),
            WEIR_STAT_PASS_FRAGMENT,
        ),
    ]
}

/// The client payload of a connection's data segments.
pub const PAYLOAD: &[u8] = b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n";

/// The events of a TCP SYN with no entry: a new half-open entry.
pub const MISS_HALF_OPEN: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_HALF_OPEN_NEW];
/// The events of a flow that becomes a connection (UDP's first datagram, a
/// handshake completed).
pub const MISS_NEW: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW];
/// The event of a frame on an established connection.
pub const HIT: &[u32] = &[WEIR_STAT_CONN_HIT];
/// The event of a DIP's reply through reverse nat.
pub const REV: &[u32] = &[WEIR_STAT_REV_NAT];

/// What a forwarded frame must leave in the connection tables; each runner
/// checks it in its own.
#[derive(Debug, Clone)]
pub enum Left {
    /// A flow's first packet went to `dip` of VIP `vip`: a TCP flow's entry
    /// is half-open, a UDP flow's established.
    NewFlow {
        flow: FlowTuple,
        vip: u32,
        dip: Dip,
        mode: u32,
    },
    /// The client's packet after its SYN: the half-open entry for `dip` is
    /// now a connection.
    Promoted {
        flow: FlowTuple,
        vip: u32,
        dip: Dip,
        mode: u32,
    },
    /// A frame on an established connection or a DIP's reply: the entries
    /// are as they were.
    Unchanged,
}

/// A frame the load balancer must send out (`WEIR_STAT_TX`) rewritten.
pub struct ForwardCase {
    pub name: String,
    pub input: Vec<u8>,
    pub output: Vec<u8>,
    /// The event counters that go up by exactly one.
    pub events: Vec<u32>,
    pub left: Left,
}

/// Client frame `f` forwarded to `dip` in `mode` (nat or dsr).
pub fn forwarded(f: &Frame, dip: &Dip, mode: u32) -> Frame {
    if mode == NAT {
        nat_out(f, dip)
    } else {
        dsr_out(f, dip)
    }
}

/// The events of the first packet of a flow with no entry: TCP goes to the
/// half-open table (a non-SYN counted as such), UDP straight to the
/// connections.
pub fn miss_events(f: &Frame) -> Vec<u32> {
    match f.l4 {
        L4::Tcp(_) if is_syn(f) => MISS_HALF_OPEN.to_vec(),
        L4::Tcp(_) => vec![
            WEIR_STAT_CONN_MISS,
            WEIR_STAT_NONSYN_MISS,
            WEIR_STAT_HALF_OPEN_NEW,
        ],
        L4::Udp { .. } => MISS_NEW.to_vec(),
    }
}

/// A new flow `f` to VIP `vip`, forwarded to the DIP weir-core predicts.
pub fn new_flow(fx: &Fixture, name: &str, f: &Frame, vip: u32) -> ForwardCase {
    let mode = fx.vip(vip).mode;
    let dip = fx.predict(vip, &f.tuple()).expect("VIP has DIPs").clone();
    let out = forwarded(f, &dip, mode);
    if mode == DSR {
        // dsr: only L2 may change, so IP and L4 bytes are the input's.
        assert_eq!(out.bytes()[ETH_HLEN..], f.bytes()[ETH_HLEN..]);
    }
    ForwardCase {
        name: format!("{name} -> DIP {}", dip.id),
        input: f.bytes(),
        output: out.bytes(),
        events: miss_events(f),
        left: Left::NewFlow {
            flow: f.tuple(),
            vip,
            dip,
            mode,
        },
    }
}

/// The client's packet `f` after its SYN completes the handshake with
/// `dip` of VIP `vip`.
pub fn promote(name: &str, f: &Frame, dip: &Dip, vip: u32, mode: u32) -> ForwardCase {
    ForwardCase {
        name: name.into(),
        input: f.bytes(),
        output: forwarded(f, dip, mode).bytes(),
        events: MISS_NEW.to_vec(),
        left: Left::Promoted {
            flow: f.tuple(),
            vip,
            dip: dip.clone(),
            mode,
        },
    }
}

/// A frame forwarded on an established connection to `dip`.
pub fn hit(name: &str, f: &Frame, dip: &Dip, mode: u32) -> ForwardCase {
    ForwardCase {
        name: name.into(),
        input: f.bytes(),
        output: forwarded(f, dip, mode).bytes(),
        events: HIT.to_vec(),
        left: Left::Unchanged,
    }
}

/// `dip`'s reply (`l4`) to client frame `f`, through reverse nat.
pub fn rev_case(name: &str, f: &Frame, dip: &Dip, l4: L4) -> ForwardCase {
    let r = reply(f, dip, l4);
    let mut out = reply_out(&r, f);
    if let L4::Udp { zero_csum: true } = l4 {
        out = out.zero_udp_csum();
    }
    ForwardCase {
        name: name.into(),
        input: r.bytes(),
        output: out.bytes(),
        events: REV.to_vec(),
        left: Left::Unchanged,
    }
}

/// The forwarding cases both tiers run in this order on a fresh load
/// balancer with the fixture's tables: nat and dsr, IPv4 and IPv6, TCP's
/// handshake and replies, UDP, port rewrite, Ethernet padding, a non-SYN
/// miss and checksum edge values. Two flows of VIP 0 complete a handshake.
pub fn forwarding(fx: &Fixture) -> Vec<ForwardCase> {
    let mut cases = Vec::new();

    // IPv4 TCP, nat: SYN, SYN-ACK via the half-open reverse entry,
    // promotion, data both ways.
    let c1 = tcp("192.0.2.1", 40001, "10.0.0.100", 80, SYN);
    let d1 = fx.predict(0, &c1.tuple()).unwrap().clone();
    let c1_data = with_flags(&c1, PSH_ACK).payload(PAYLOAD);
    cases.push(new_flow(fx, "v4 tcp SYN miss, nat", &c1, 0));
    cases.push(rev_case(
        "v4 tcp SYN-ACK reply finds the half-open reverse entry",
        &c1,
        &d1,
        L4::Tcp(SYN_ACK),
    ));
    cases.push(promote(
        "v4 tcp first data completes the handshake",
        &c1_data,
        &d1,
        0,
        NAT,
    ));
    cases.push(hit("v4 tcp data on the installed conn", &c1_data, &d1, NAT));
    cases.push(rev_case(
        "v4 tcp data reply, reverse nat",
        &c1,
        &d1,
        L4::Tcp(PSH_ACK),
    ));

    // Port rewrite 443 -> 9090 and back.
    let c3 = tcp("192.0.2.3", 40003, "10.0.0.104", 443, SYN);
    cases.push(new_flow(
        fx,
        "v4 tcp SYN miss, nat with port rewrite",
        &c3,
        11,
    ));
    cases.push(rev_case(
        "v4 tcp reply from the rewritten port",
        &c3,
        fx.dip(4),
        L4::Tcp(SYN_ACK),
    ));

    // Ethernet padding after a short datagram is kept and not summed.
    let c4 = tcp("192.0.2.4", 40004, "10.0.0.100", 80, SYN);
    let pad = [0xee; 6];
    let mut padded = new_flow(fx, "v4 tcp SYN with Ethernet padding", &c4, 0);
    padded.input.extend_from_slice(&pad);
    padded.output.extend_from_slice(&pad);
    cases.push(padded);

    // Non-SYN miss: dispatched by default, into the half-open table; the
    // next packet confirms it.
    let c5 = tcp("192.0.2.5", 40005, "10.0.0.100", 80, ACK);
    let d5 = fx.predict(0, &c5.tuple()).unwrap().clone();
    cases.push(new_flow(
        fx,
        "v4 tcp ACK miss is dispatched (default)",
        &c5,
        0,
    ));
    cases.push(promote("v4 tcp second ACK confirms it", &c5, &d5, 0, NAT));

    // IPv4 UDP, nat.
    let u1 = udp("192.0.2.1", 5353, "10.0.0.100", 53);
    let du1 = fx.predict(1, &u1.tuple()).unwrap().clone();
    cases.push(new_flow(fx, "v4 udp miss, nat", &u1, 1));
    cases.push(hit("v4 udp second datagram hits", &u1, &du1, NAT));
    cases.push(rev_case(
        "v4 udp reply, reverse nat",
        &u1,
        &du1,
        L4::Udp { zero_csum: false },
    ));
    let u2 = udp("192.0.2.2", 5354, "10.0.0.100", 53).zero_udp_csum();
    let du2 = fx.predict(1, &u2.tuple()).unwrap().clone();
    cases.push(new_flow(fx, "v4 udp checksum 0 stays 0, nat", &u2, 1));
    cases.push(rev_case(
        "v4 udp reply with checksum 0 stays 0",
        &u2,
        &du2,
        L4::Udp { zero_csum: true },
    ));

    // Checksum edge values, found by searching a 2-byte payload word with
    // the reference builder: a rewritten UDP checksum that computes to 0
    // must be sent as 0xffff; TCP 0x0000 stays; an input UDP 0xffff is a
    // valid sum.
    type Want = fn(&[u8], &[u8]) -> bool;
    let edges: [(&str, Frame, u32, Want); 6] = [
        (
            "v4 udp rewritten checksum 0 is sent as 0xffff",
            udp("192.0.2.6", 5356, "10.0.0.100", 53),
            1,
            |_, o| o == [0xff, 0xff],
        ),
        (
            "v4 udp input checksum 0xffff",
            udp("192.0.2.7", 5357, "10.0.0.100", 53),
            1,
            |i, _| i == [0xff, 0xff],
        ),
        (
            "v4 tcp rewritten checksum 0x0000",
            tcp("192.0.2.8", 40008, "10.0.0.100", 80, SYN),
            0,
            |_, o| o == [0, 0],
        ),
        (
            "v4 tcp input checksum 0x0000",
            tcp("192.0.2.9", 40009, "10.0.0.100", 80, SYN),
            0,
            |i, _| i == [0, 0],
        ),
        (
            "v6 udp rewritten checksum 0 is sent as 0xffff",
            udp("2001:db8:c::6", 5356, "2001:db8::100", 53),
            5,
            |_, o| o == [0xff, 0xff],
        ),
        (
            "v6 tcp rewritten checksum 0x0000",
            tcp("2001:db8:c::8", 40008, "2001:db8::100", 80, SYN),
            4,
            |_, o| o == [0, 0],
        ),
    ];
    for (name, base, vip, want) in edges {
        let d = fx.predict(vip, &base.tuple()).unwrap().clone();
        let c = base.l4_off() + if matches!(base.l4, L4::Tcp(_)) { 16 } else { 6 };
        let f = (0..=u16::MAX)
            .map(|w| base.clone().payload(&w.to_be_bytes()))
            .find(|f| want(&f.bytes()[c..c + 2], &nat_out(f, &d).bytes()[c..c + 2]))
            .expect("no payload gives that checksum");
        cases.push(new_flow(fx, name, &f, vip));
    }

    // IPv4 dsr.
    let s1 = tcp("192.0.2.10", 41000, "10.0.0.101", 80, SYN);
    let ds1 = fx.predict(2, &s1.tuple()).unwrap().clone();
    let s1_data = with_flags(&s1, PSH_ACK).payload(PAYLOAD);
    cases.push(new_flow(fx, "v4 tcp SYN miss, dsr", &s1, 2));
    cases.push(promote(
        "v4 tcp first data completes the handshake, dsr",
        &s1_data,
        &ds1,
        2,
        DSR,
    ));
    cases.push(hit("v4 tcp data, dsr hit", &s1_data, &ds1, DSR));
    let s2 = udp("192.0.2.11", 41001, "10.0.0.101", 53);
    cases.push(new_flow(fx, "v4 udp miss, dsr", &s2, 3));
    let s3 = udp("192.0.2.12", 41002, "10.0.0.101", 53).zero_udp_csum();
    cases.push(new_flow(fx, "v4 udp checksum 0, dsr", &s3, 3));

    // IPv6 nat.
    let v1 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, SYN);
    let dv1 = fx.predict(4, &v1.tuple()).unwrap().clone();
    let v1_data = with_flags(&v1, PSH_ACK).payload(PAYLOAD);
    cases.push(new_flow(fx, "v6 tcp SYN miss, nat", &v1, 4));
    cases.push(rev_case(
        "v6 tcp SYN-ACK, reverse nat from the half-open entry",
        &v1,
        &dv1,
        L4::Tcp(SYN_ACK),
    ));
    cases.push(promote(
        "v6 tcp first data completes the handshake",
        &v1_data,
        &dv1,
        4,
        NAT,
    ));
    cases.push(hit(
        "v6 tcp data on the installed conn",
        &v1_data,
        &dv1,
        NAT,
    ));
    cases.push(rev_case(
        "v6 tcp reply, reverse nat",
        &v1,
        &dv1,
        L4::Tcp(PSH_ACK),
    ));
    let v2 = udp("2001:db8:c::2", 5353, "2001:db8::100", 53);
    let dv2 = fx.predict(5, &v2.tuple()).unwrap().clone();
    cases.push(new_flow(fx, "v6 udp miss, nat", &v2, 5));
    cases.push(rev_case(
        "v6 udp reply, reverse nat",
        &v2,
        &dv2,
        L4::Udp { zero_csum: false },
    ));
    // Every v6 DIP of VIP 4 by hash: pick flows until each DIP was the
    // target once.
    for want in [11u32, 12, 13] {
        let f = (0..1000)
            .map(|p| tcp("2001:db8:c::9", 42000 + p, "2001:db8::100", 80, SYN))
            .find(|f| fx.predict(4, &f.tuple()).unwrap().id == want)
            .unwrap();
        cases.push(new_flow(fx, "v6 tcp SYN to a DIP of VIP 4", &f, 4));
        cases.push(rev_case(
            &format!("v6 tcp reply from DIP {want}"),
            &f,
            fx.dip(want),
            L4::Tcp(SYN_ACK),
        ));
    }

    // IPv6 dsr.
    let w1 = tcp("2001:db8:c::10", 41000, "2001:db8::101", 80, SYN);
    cases.push(new_flow(fx, "v6 tcp SYN miss, dsr", &w1, 6));
    let w2 = udp("2001:db8:c::11", 41001, "2001:db8::101", 53);
    cases.push(new_flow(fx, "v6 udp miss, dsr", &w2, 7));
    cases
}
