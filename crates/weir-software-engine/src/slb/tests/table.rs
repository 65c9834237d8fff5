//! The cases of weir-dataplane's `xdp_lb.rs` that define the load
//! balancer's behaviour, run through [`Slb`]: forwarding and
//! classification, the connection life cycle, PCC under table and DIP
//! changes, next hops, truncation, SYN floods; plus what only the software
//! tier has (table events, the sweep, LRU eviction).

use super::*;
use weir_core::wire::{refresh_ipv4_checksum, ETH_HLEN};
use weir_testkit::cases::{self, forwarding, ForwardCase, Left, MISS_HALF_OPEN, MISS_NEW, PAYLOAD};

fn half_open_is(t: FlowTuple, dip: u32, gen: u32, version: u32) -> impl Fn(&mut Env) {
    move |env: &mut Env| {
        let c = env
            .slb
            .half_open_entry(&t.key())
            .unwrap_or_else(|| panic!("no half-open entry for {t:?}"));
        assert_eq!((c.dip_id, c.dip_gen, c.table_version), (dip, gen, version));
        assert!(env.conn(&t).is_none(), "half-open and established: {t:?}");
    }
}

fn conn_is(t: FlowTuple, dip: u32, gen: u32, version: u32) -> impl Fn(&mut Env) {
    move |env: &mut Env| {
        let c = env.conn(&t).unwrap_or_else(|| panic!("no entry for {t:?}"));
        assert_eq!((c.dip_id, c.dip_gen, c.table_version), (dip, gen, version));
        assert_ne!(c.created_ns, 0);
        assert!(env.slb.half_open_entry(&t.key()).is_none());
    }
}

fn no_conn(t: FlowTuple) -> impl Fn(&mut Env) {
    move |env: &mut Env| {
        assert!(env.conn(&t).is_none(), "unexpected entry for {t:?}");
        assert!(env.slb.half_open_entry(&t.key()).is_none());
    }
}

/// A shared forwarding case as the engine's: sent out, with the entries
/// it leaves read from the engine: a new TCP flow's half-open, a UDP
/// flow's established; a completed handshake's installed (and announced).
fn slb_case(c: ForwardCase) -> Case {
    let case = Case::new(c.name, c.input, WEIR_STAT_TX)
        .output(c.output)
        .events(&c.events);
    match c.left {
        Left::NewFlow { flow: t, dip, .. } => case.after(move |env| match t.proto {
            Proto::Tcp => half_open_is(t, dip.id, 1, 1)(env),
            Proto::Udp => conn_is(t, dip.id, 1, 1)(env),
        }),
        Left::Promoted { flow: t, dip, .. } => case.after(move |env| {
            let id = dip.id;
            conn_is(t, id, 1, 1)(env);
            assert!(
                matches!(env.events[..], [Event::Installed(c)] if c.key == t.key() && c.conn.dip_id == id),
                "{:?}",
                env.events
            );
        }),
        Left::Unchanged => case,
    }
}

/// A new flow `f` to VIP `vip`, forwarded to the DIP weir-core predicts.
fn new_flow(env: &Env, name: &str, f: &Frame, vip: u32) -> Case {
    slb_case(cases::new_flow(&env.fx, name, f, vip))
}

/// The client's packet after its SYN: the entry is promoted.
fn promote(name: &str, f: &Frame, dip: &Dip, vip: u32, mode: u32) -> Case {
    slb_case(cases::promote(name, f, dip, vip, mode))
}

fn hit(name: &str, f: &Frame, dip: &Dip, mode: u32) -> Case {
    slb_case(cases::hit(name, f, dip, mode))
}

fn rev_case(name: &str, f: &Frame, dip: &Dip, l4: L4) -> Case {
    slb_case(cases::rev_case(name, f, dip, l4))
}

fn pass(name: &str, input: Vec<u8>, stat: u32) -> Case {
    Case::new(name, input, stat)
}

fn set16(f: &mut [u8], off: usize, v: u16) {
    f[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

fn mutate(mut f: Vec<u8>, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    edit(&mut f);
    f
}

#[test]
fn forwarding_and_classification_table() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    let mut cases = Vec::new();

    // The forwarding cases both tiers run.
    cases.extend(forwarding(&env.fx).into_iter().map(slb_case));

    // Extension headers (hop-by-hop, destination options) before TCP.
    let v3 = tcp("2001:db8:c::3", 40003, "2001:db8::100", 80, SYN);
    let dv3 = fx.predict(4, &v3.tuple()).unwrap().clone();
    let exts = ext_chain(2);
    cases.push(
        Case::new(
            "v6 SYN after hop-by-hop + dstopts, nat",
            ipv6_with_exts(&v3, &exts),
            WEIR_STAT_TX,
        )
        .output(ipv6_with_exts(&nat_out(&v3, &dv3), &exts))
        .events(MISS_HALF_OPEN),
    );

    // Not balanced: passed (weir_lb's table runs them too).
    for c in passed_untouched() {
        let case = pass(c.name, c.input, c.outcome);
        cases.push(match c.flow {
            Some(t) => case.after(no_conn(t)),
            None => case,
        });
    }

    // VIPs that cannot be balanced.
    let e1 = tcp("192.0.2.30", 40030, "10.0.0.102", 80, SYN);
    cases.push(
        Case::new(
            "VIP with an empty table",
            e1.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .after(no_conn(e1.tuple())),
    );
    let e2 = tcp("2001:db8:c::30", 40030, "2001:db8::102", 80, SYN);
    cases.push(
        Case::new("VIP without a table", e2.bytes(), WEIR_STAT_DROP_NO_BACKEND)
            .events(&[WEIR_STAT_CONN_MISS]),
    );
    let e3 = tcp("192.0.2.31", 40031, "10.0.0.103", 80, SYN);
    cases.push(
        Case::new(
            "IPv4 VIP whose DIP is IPv6",
            e3.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .after(no_conn(e3.tuple())),
    );

    // Malformed.
    let m4 = tcp("192.0.2.40", 40040, "10.0.0.100", 80, SYN).payload(b"abcdefgh");
    let m4u = udp("192.0.2.40", 40040, "10.0.0.100", 53);
    let m6 = tcp("2001:db8:c::40", 40040, "2001:db8::100", 80, SYN).payload(b"abcdefgh");
    let m6u = udp("2001:db8:c::40", 40040, "2001:db8::100", 53);
    let (ip, l4v4, l4v6) = (14, 34, 54);
    let m = |name: &str, f: &Frame, edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = f.bytes();
        edit(&mut b);
        if f.src.is_ipv4() && (b[ip] & 0x0f) >= 5 && b.len() >= ip + usize::from(b[ip] & 0x0f) * 4 {
            refresh_ipv4_checksum(&mut b[ETH_HLEN..]);
        }
        Case::new(name, b, WEIR_STAT_DROP_MALFORMED)
    };
    cases.push(m("v4 IHL 4", &m4, &|b| b[ip] = 0x44));
    cases.push(m("v4 IHL 15 past total length", &m4, &|b| b[ip] = 0x4f));
    cases.push(m("v4 version 6", &m4, &|b| b[ip] = 0x65));
    cases.push(m("v4 total length 65535", &m4, &|b| {
        set16(b, ip + 2, 0xffff)
    }));
    cases.push(m("v4 total length cuts TCP", &m4, &|b| {
        set16(b, ip + 2, 20 + 19)
    }));
    cases.push(m("v4 TCP doff 4", &m4, &|b| b[l4v4 + 12] = 0x40));
    cases.push(m("v4 TCP doff 15", &m4, &|b| b[l4v4 + 12] = 0xf0));
    cases.push(m("v4 UDP length 7", &m4u, &|b| set16(b, l4v4 + 4, 7)));
    cases.push(m("v6 version 4", &m6, &|b| b[ip] = 0x40));
    cases.push(m("v6 payload length cuts TCP", &m6, &|b| {
        set16(b, ip + 4, 19)
    }));
    cases.push(m("v6 TCP doff 9 past the segment", &m6, &|b| {
        b[l4v6 + 12] = 0x90
    }));
    cases.push(m("v6 UDP length past the datagram", &m6u, &|b| {
        let l = b.len() - l4v6;
        set16(b, l4v6 + 4, l as u16 + 1)
    }));
    let big_ext = mutate(ipv6_with_exts(&m6, &ext_chain(1)), |b| b[l4v6 + 1] = 200);
    cases.push(
        Case::new(
            "v6 extension past the packet",
            big_ext,
            WEIR_STAT_DROP_MALFORMED,
        )
        .after(no_conn(m6.tuple())),
    );

    run_cases(&mut env, cases);
    // Only c1 and c5 completed a handshake on VIP 0.
    assert_eq!(env.slb.vip_traffic(0).new_conns, 2);
}

#[test]
fn ipv6_extension_chains_past_the_parsed_depth_follow_the_malformed_action() {
    for action in [Action::Drop, Action::Pass] {
        let mut env = Env::new(Config {
            fragments: Action::Drop,
            malformed: action,
            ..test_config()
        });
        let stat = match action {
            Action::Drop => WEIR_STAT_DROP_MALFORMED,
            Action::Pass => WEIR_STAT_PASS_MALFORMED,
        };
        let syn = |p| tcp("2001:db8:c::80", p, "2001:db8::100", 80, SYN);
        let at_depth = syn(40080);
        let dip = env.fx.predict(4, &at_depth.tuple()).unwrap().clone();
        let with_frag = |n| {
            let mut c = ext_chain(n);
            c.push(fragment_ext());
            c
        };
        let cases = vec![
            Case::new(
                "SYN after 4 headers is balanced",
                ipv6_with_exts(&at_depth, &ext_chain(4)),
                WEIR_STAT_TX,
            )
            .output(ipv6_with_exts(&nat_out(&at_depth, &dip), &ext_chain(4)))
            .events(MISS_HALF_OPEN),
            Case::new(
                "fragment after 4 headers",
                ipv6_with_exts(&syn(40082), &with_frag(4)),
                WEIR_STAT_DROP_FRAGMENT,
            ),
            Case::new(
                "SYN after 5 headers",
                ipv6_with_exts(&syn(40083), &ext_chain(5)),
                stat,
            ),
            Case::new(
                "fragment after 5 headers",
                ipv6_with_exts(&syn(40083), &with_frag(5)),
                stat,
            ),
            Case::new(
                "fragment after 8 headers",
                ipv6_with_exts(&syn(40083), &with_frag(8)),
                stat,
            )
            .after(no_conn(syn(40083).tuple())),
        ];
        run_cases(&mut env, cases);
    }
}

#[test]
fn configured_actions_change_the_verdict() {
    let mut env = Env::new(Config {
        not_vip: Action::Drop,
        icmp: Action::Drop,
        fragments: Action::Drop,
        malformed: Action::Pass,
        ..test_config()
    });
    let f = tcp("192.0.2.1", 40001, "10.0.0.100", 80, SYN);
    let cases = vec![
        Case::new(
            "non-VIP",
            tcp("192.0.2.1", 1, "10.0.0.200", 80, SYN).bytes(),
            WEIR_STAT_DROP_NOT_VIP,
        ),
        Case::new(
            "ARP",
            arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_DROP_NOT_VIP,
        ),
        Case::new(
            "GRE",
            ipv4_other_proto(CLIENT_MAC, VIP_MAC, [192, 0, 2, 1], [10, 0, 0, 100]),
            WEIR_STAT_DROP_NOT_VIP,
        ),
        Case::new(
            "ICMP",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.1"), ip("10.0.0.100")),
            WEIR_STAT_DROP_ICMP,
        ),
        Case::new(
            "v6 fragment",
            ipv6_with_exts(
                &tcp("2001:db8:c::1", 1, "2001:db8::100", 80, SYN),
                &[fragment_ext()],
            ),
            WEIR_STAT_DROP_FRAGMENT,
        ),
        Case::new(
            "malformed passed",
            mutate(f.bytes(), |b| b[14] = 0x44),
            WEIR_STAT_PASS_MALFORMED,
        ),
        Case::new(
            "truncated passed",
            f.bytes()[..24].to_vec(),
            WEIR_STAT_PASS_MALFORMED,
        ),
        new_flow(&env, "VIP traffic still balanced", &f, 0),
    ];
    run_cases(&mut env, cases);
}

#[test]
fn nonsyn_miss_drop() {
    let mut env = Env::new(Config {
        nonsyn_miss: NonSynMiss::Drop,
        ..test_config()
    });
    let nonsyn = [WEIR_STAT_CONN_MISS, WEIR_STAT_NONSYN_MISS];
    let ack = tcp("192.0.2.1", 40001, "10.0.0.100", 80, ACK);
    let syn = tcp("192.0.2.1", 40003, "10.0.0.100", 80, SYN);
    let d = env.fx.predict(0, &syn.tuple()).unwrap().clone();
    let data = with_flags(&syn, ACK).payload(PAYLOAD);
    let cases = vec![
        Case::new("ACK miss dropped", ack.bytes(), WEIR_STAT_DROP_NONSYN_MISS)
            .events(&nonsyn)
            .after(no_conn(ack.tuple())),
        Case::new(
            "RST miss dropped",
            with_flags(&ack, RST).bytes(),
            WEIR_STAT_DROP_NONSYN_MISS,
        )
        .events(&nonsyn),
        new_flow(&env, "SYN dispatched", &syn, 0),
        promote("its ACK completes the handshake", &data, &d, 0, NAT),
        hit("the next hits", &data, &d, NAT),
        new_flow(
            &env,
            "UDP has no SYN",
            &udp("192.0.2.1", 40004, "10.0.0.100", 53),
            1,
        ),
    ];
    run_cases(&mut env, cases);
}

/// The first client port whose flow `make(port)` satisfies `pred`.
fn find_flow(make: impl Fn(u16) -> Frame, pred: impl Fn(&Frame) -> bool) -> Frame {
    (1024..u16::MAX)
        .map(make)
        .find(|f| pred(f))
        .expect("a flow")
}

fn pick(weights: &[(u32, u32)], f: &Frame) -> u32 {
    AwfdTable::from_weights(weights)
        .unwrap()
        .select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
        .unwrap()
}

#[test]
fn a_removed_dip_is_redispatched_and_pcc_holds() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    let v2: &[(u32, u32)] = &[(2, 3), (3, 1)];
    let mk = |p| tcp("192.0.2.50", p, "10.0.0.100", 80, SYN);
    // a: on DIP 1, which is removed. b: on a DIP the new table would not
    // pick for it (PCC keeps it). c: a new flow the old table sends to 1.
    let a = find_flow(mk, |f| fx.predict(0, &f.tuple()).unwrap().id == 1);
    let b = find_flow(
        |p| mk(p.wrapping_add(7000)),
        |f| {
            let d = fx.predict(0, &f.tuple()).unwrap().id;
            d != 1 && pick(v2, f) != d
        },
    );
    let c = find_flow(
        |p| mk(p.wrapping_add(20000)),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let db = fx.predict(0, &b.tuple()).unwrap().clone();
    let (a_ack, b_ack) = (with_flags(&a, ACK), with_flags(&b, ACK));
    let a_new = fx.dip(pick(v2, &a)).clone();
    let ta = a.tuple();
    let a_new_id = a_new.id;
    let cases = vec![
        new_flow(&env, "a: SYN to DIP 1", &a, 0),
        promote("a: ACK", &a_ack, fx.dip(1), 0, NAT),
        new_flow(&env, "b: SYN", &b, 0),
        promote("b: ACK", &b_ack, &db, 0, NAT),
        Case::new(
            "c: new flow to a removed, still tabled DIP",
            c.bytes(),
            WEIR_STAT_DROP_NO_BACKEND,
        )
        .events(&[WEIR_STAT_CONN_MISS])
        .before(|env| env.put_dip(1, 1, false)),
        Case::new(
            "a: ACK on the removed DIP is redispatched",
            a_ack.bytes(),
            WEIR_STAT_TX,
        )
        .output(nat_out(&a_ack, &a_new).bytes())
        .events(&[WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_NEW])
        .before(|env| env.publish(0, 2, &[(2, 3), (3, 1)]))
        .after(move |env| {
            conn_is(ta, a_new_id, 1, 2)(env);
            assert!(matches!(env.events[..], [Event::Installed(c)] if c.conn.dip_id == a_new_id));
        }),
        hit("b: stays on its DIP under table v2", &b_ack, &db, NAT).after(conn_is(
            b.tuple(),
            db.id,
            1,
            1,
        )),
    ];
    run_cases(&mut env, cases);

    // A reassigned slot (generation bumped): its connections are stale.
    let d = find_flow(|p| mk(p.wrapping_add(30000)), |f| pick(v2, f) == 3);
    let d_ack = with_flags(&d, ACK);
    let dip3 = fx.dip(3).clone();
    let td = d.tuple();
    let cases = vec![
        Case::new("d: SYN to DIP 3 under v2", d.bytes(), WEIR_STAT_TX)
            .output(nat_out(&d, &dip3).bytes())
            .events(MISS_HALF_OPEN)
            .after(half_open_is(td, 3, 1, 2)),
        Case::new("d: ACK", d_ack.bytes(), WEIR_STAT_TX)
            .output(nat_out(&d_ack, &dip3).bytes())
            .events(MISS_NEW)
            .after(conn_is(td, 3, 1, 2)),
        Case::new(
            "d: ACK after slot 3 was reassigned",
            d_ack.bytes(),
            WEIR_STAT_TX,
        )
        .output(nat_out(&d_ack, &dip3).bytes())
        .events(&[WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_NEW])
        .before(|env| env.put_dip(3, 2, true))
        .after(conn_is(td, 3, 2, 2)),
    ];
    run_cases(&mut env, cases);
}

#[test]
fn next_hops_need_an_interface_and_a_mac() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    let f = tcp("192.0.2.60", 40060, "10.0.0.100", 80, SYN);
    let d = fx.predict(0, &f.tuple()).unwrap().clone();
    let g = tcp("192.0.2.61", 40061, "10.0.0.100", 80, SYN);
    let dg = fx.predict(0, &g.tuple()).unwrap().clone();
    let (dg_id, d_id) = (dg.id, d.id);
    let retransmit = [WEIR_STAT_CONN_MISS, WEIR_STAT_SYN_RETRANSMIT];
    let nh = NextHop {
        ifindex: 7,
        mac: [0x02, 0, 0, 0, 0x07, 0x07],
    };
    let cases = vec![
        // nat rewrites before the next hop is chosen; L2 stays as it came.
        Case::new(
            "no MAC for the ingress interface",
            f.bytes(),
            WEIR_STAT_DROP_NO_ROUTE,
        )
        .output(f.clone().with_dst(d.addr, d.port_for(80)).bytes())
        .events(MISS_HALF_OPEN)
        .before(|env| env.slb.services_mut().remove_interface(IFINDEX)),
        Case::new("interface back: transmitted", f.bytes(), WEIR_STAT_TX)
            .output(nat_out(&f, &d).bytes())
            .events(&retransmit)
            .before(|env| env.slb.services_mut().set_interface(IFINDEX, LB_IF_MAC)),
        Case::new("DIP without a MAC", g.bytes(), WEIR_STAT_DROP_NO_ROUTE)
            .output(g.clone().with_dst(dg.addr, dg.port_for(80)).bytes())
            .events(MISS_HALF_OPEN)
            .before(move |env| {
                let mut x = env.fx.dip(dg_id).abi(1, true);
                x.mac_set = 0;
                env.slb.services_mut().set_dip(dg_id, x).unwrap();
            }),
        // A resolved next hop on another interface: redirected there.
        Case::new(
            "resolved next hop on another interface",
            f.bytes(),
            WEIR_STAT_REDIRECT,
        )
        .output(
            nat_out(&f, &d)
                .macs([0x02, 0, 0, 0, 0, 0x77], nh.mac)
                .bytes(),
        )
        .events(&retransmit)
        .before(move |env| {
            let s = env.slb.services_mut();
            s.set_interface(7, [0x02, 0, 0, 0, 0, 0x77]);
            s.set_next_hop(d_id, Some(nh)).unwrap();
        }),
    ];
    run_cases(&mut env, cases);

    // A reply whose connection arrived on another interface leaves by it,
    // or is dropped when that interface is not one we send by.
    for d in &fx.dips {
        env.put_dip(d.id, 1, true);
    }
    let c = tcp("192.0.2.62", 40062, "10.0.0.100", 80, SYN);
    let dc = fx.predict(0, &c.tuple()).unwrap().clone();
    let mut buf = c.bytes();
    let o = env.slb.process(&mut buf, 9, env.now_ns);
    assert_eq!(
        o,
        Outcome::Drop(DropReason::NoRoute),
        "interface 9 has no MAC"
    );
    let r = reply(&c, &dc, L4::Tcp(SYN_ACK));
    let (o, frame) = env.run(&r.bytes());
    assert_eq!(o, Outcome::Drop(DropReason::NoRedirectTarget));
    assert_eq!(frame, reply_out(&r, &c).bytes());
    env.slb.services_mut().set_interface(9, [9; 6]);
    let (o, _) = env.run(&r.bytes());
    let Outcome::Forward(fw) = o else {
        panic!("{o:?}")
    };
    assert_eq!(
        (fw.side, fw.egress.ifindex, fw.egress.redirect),
        (Side::ToClient, 9, true)
    );
    assert_eq!((fw.dip, fw.conn), (dc.id, c.tuple().key()));
}

#[test]
fn truncation_at_every_length() {
    let f4 = tcp("192.0.2.70", 40070, "10.0.0.100", 80, SYN).payload(b"0123456789");
    let f6 = tcp("2001:db8:c::70", 40070, "2001:db8::100", 80, SYN).payload(b"0123456789");
    let frames = [
        f4.bytes(),
        udp("192.0.2.70", 40070, "10.0.0.100", 53).bytes(),
        f6.bytes(),
        udp("2001:db8:c::70", 40070, "2001:db8::100", 53).bytes(),
        ipv6_with_exts(&f6, &ext_chain(2)),
        icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.70"), ip("10.0.0.100")),
        icmp_echo(
            CLIENT_MAC,
            VIP_MAC,
            ip("2001:db8:c::70"),
            ip("2001:db8::100"),
        ),
    ];
    for action in [Action::Drop, Action::Pass] {
        let mut env = Env::new(Config {
            malformed: action,
            ..test_config()
        });
        let stat = match action {
            Action::Drop => WEIR_STAT_DROP_MALFORMED,
            Action::Pass => WEIR_STAT_PASS_MALFORMED,
        };
        let mut cases = Vec::new();
        for full in &frames {
            for len in 0..full.len() {
                cases.push(Case::new(
                    format!("cut at {len} of {}", full.len()),
                    full[..len].to_vec(),
                    stat,
                ));
            }
        }
        run_cases(&mut env, cases);
        assert_eq!(env.slb.conn_count() + env.slb.half_open_count(), 0);
    }
    // ARP is not parsed past the ethertype.
    let mut env = Env::new(test_config());
    let a = arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]);
    let cases = (14..=a.len())
        .map(|len| {
            Case::new(
                format!("arp cut at {len}"),
                a[..len].to_vec(),
                WEIR_STAT_PASS_NOT_IP,
            )
        })
        .collect();
    run_cases(&mut env, cases);
}

fn close_flags_are(t: FlowTuple, flags: u32) -> impl Fn(&mut Env) {
    move |env: &mut Env| {
        let c = env.conn(&t).expect("an entry");
        assert_eq!(u32::from(c.close_flags), flags);
    }
}

/// SYN into the half-open table (retransmissions keep the DIP whatever the
/// table says), SYN-ACK back, promotion, FINs both ways, a new SYN on the
/// same 5-tuple (the current table decides), idle expiry by state, RST;
/// each step with the table events a fast table mirrors.
#[test]
fn tcp_connection_life_cycle() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    let v2: &[(u32, u32)] = &[(2, 1), (3, 1)];
    let syn = find_flow(
        |p| tcp("192.0.2.90", p, "10.0.0.100", 80, SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let (ack, fin, rst) = (
        with_flags(&syn, ACK),
        with_flags(&syn, FIN_ACK),
        with_flags(&syn, RST),
    );
    let data = with_flags(&syn, PSH_ACK).payload(PAYLOAD);
    let t = syn.tuple();
    let key = t.key();
    let d1 = fx.dip(1).clone();
    let d_v2 = fx.dip(pick(v2, &syn)).clone();
    assert_ne!(d_v2.id, 1);
    let both = WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER;
    let to = test_config().timeouts;
    let secs = |ticks: u32| u64::from(ticks) * (1 << WEIR_TICK_SHIFT) / 1_000_000_000;
    let (closed_s, established_s) = (secs(to.tcp_closed), secs(to.tcp_established));
    let v2id = d_v2.id;
    let events_are =
        move |want: Vec<Event>| move |env: &mut Env| assert_eq!(env.events, want, "events");
    let rkey = FlowTuple {
        src: "10.1.0.1".parse().unwrap(),
        dst: syn.src,
        sport: 8080,
        dport: syn.sport,
        proto: Proto::Tcp,
    }
    .key();
    let rkey_v2 = FlowTuple {
        src: d_v2.addr,
        sport: d_v2.port_for(80),
        ..FlowTuple::from_key(&rkey).unwrap()
    }
    .key();
    let removed = move |reverse, reason| Event::Removed {
        key,
        reverse: Some(reverse),
        reason,
    };
    let (old_reply, d1_old) = (syn.clone(), d1.clone());
    let cases = vec![
        new_flow(&env, "SYN under v1", &syn, 0),
        Case::new(
            "retransmitted SYN under v2 keeps its DIP",
            syn.bytes(),
            WEIR_STAT_TX,
        )
        .output(nat_out(&syn, &d1).bytes())
        .events(&[WEIR_STAT_CONN_MISS, WEIR_STAT_SYN_RETRANSMIT])
        .before(|env| env.publish(0, 2, &[(2, 1), (3, 1)])),
        rev_case("SYN-ACK", &syn, &d1, L4::Tcp(SYN_ACK)),
        promote("ACK completes the handshake on DIP 1", &ack, &d1, 0, NAT),
        hit("data", &data, &d1, NAT).after(events_are(vec![])),
        Case::new("client FIN", fin.bytes(), WEIR_STAT_TX)
            .output(nat_out(&fin, &d1).bytes())
            .events(&[WEIR_STAT_CONN_HIT, WEIR_STAT_CONN_CLOSING])
            .after(close_flags_are(t, WEIR_CONN_F_FIN_CLIENT)),
        rev_case("server FIN", &syn, &d1, L4::Tcp(FIN_ACK)).after(move |env| {
            close_flags_are(t, both)(env);
            events_are(vec![Event::Closed(key)])(env);
        }),
        hit("last ACK in the grace period", &ack, &d1, NAT),
        Case::new("new SYN on the closed 5-tuple", syn.bytes(), WEIR_STAT_TX)
            .output(nat_out(&syn, &d_v2).bytes())
            .events(&[
                WEIR_STAT_CONN_REUSED,
                WEIR_STAT_CONN_MISS,
                WEIR_STAT_HALF_OPEN_NEW,
            ])
            .after(move |env| {
                half_open_is(t, v2id, 1, 2)(env);
                events_are(vec![removed(rkey, Removal::Reused)])(env);
                // The old connection's reverse entry went with it.
                let (o, _) = env.run(&reply(&old_reply, &d1_old, L4::Tcp(ACK)).bytes());
                assert_eq!(o, Outcome::Drop(DropReason::ReplyNoState));
            }),
        Case::new("its ACK", ack.bytes(), WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(MISS_NEW)
            .after(conn_is(t, v2id, 1, 2)),
        hit("ACK idle just under the timeout", &ack, &d_v2, NAT)
            .before(move |env| env.advance_secs(established_s - 2)),
        Case::new("ACK after the idle timeout", ack.bytes(), WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(&[
                WEIR_STAT_CONN_EXPIRED,
                WEIR_STAT_CONN_MISS,
                WEIR_STAT_NONSYN_MISS,
                WEIR_STAT_HALF_OPEN_NEW,
            ])
            .before(move |env| env.advance_secs(established_s + 2))
            .after(move |env| {
                half_open_is(t, v2id, 1, 2)(env);
                events_are(vec![removed(rkey_v2, Removal::Expired)])(env);
            }),
        Case::new("the next ACK confirms it again", ack.bytes(), WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(MISS_NEW),
        Case::new("client RST", rst.bytes(), WEIR_STAT_TX)
            .output(nat_out(&rst, &d_v2).bytes())
            .events(&[WEIR_STAT_CONN_HIT, WEIR_STAT_CONN_CLOSING])
            .after(move |env| {
                close_flags_are(t, WEIR_CONN_F_RST)(env);
                events_are(vec![Event::Closed(key)])(env);
            }),
        Case::new("ACK after the grace period", ack.bytes(), WEIR_STAT_TX)
            .output(nat_out(&ack, &d_v2).bytes())
            .events(&[
                WEIR_STAT_CONN_EXPIRED,
                WEIR_STAT_CONN_MISS,
                WEIR_STAT_NONSYN_MISS,
                WEIR_STAT_HALF_OPEN_NEW,
            ])
            .before(move |env| env.advance_secs(closed_s + 2)),
    ];
    run_cases(&mut env, cases);
}

#[test]
fn a_stale_half_open_entry_is_dispatched_anew() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    let v2: &[(u32, u32)] = &[(2, 1), (3, 1)];
    let syn = find_flow(
        |p| tcp("192.0.2.91", p, "10.0.0.100", 80, SYN),
        |f| fx.predict(0, &f.tuple()).unwrap().id == 1,
    );
    let d_v2 = fx.dip(pick(v2, &syn)).clone();
    let half_open_s =
        u64::from(test_config().timeouts.tcp_half_open) * (1 << WEIR_TICK_SHIFT) / 1_000_000_000;
    let cases = vec![
        new_flow(&env, "SYN under v1", &syn, 0),
        Case::new(
            "SYN past the half-open timeout, under v2",
            syn.bytes(),
            WEIR_STAT_TX,
        )
        .output(nat_out(&syn, &d_v2).bytes())
        .events(MISS_HALF_OPEN)
        .before(move |env| {
            env.publish(0, 2, &[(2, 1), (3, 1)]);
            env.advance_secs(half_open_s + 2);
        })
        .after(half_open_is(syn.tuple(), d_v2.id, 1, 2)),
    ];
    run_cases(&mut env, cases);
}

/// SYNs, however many, land in the bounded half-open table and never push
/// an established connection out.
#[test]
fn a_syn_flood_cannot_evict_established_connections() {
    let mut env = Env::new(Config {
        conn_capacity: 1024,
        half_open_capacity: 256,
        ..test_config()
    });
    let established: Vec<Frame> = (0..200)
        .map(|i| tcp("192.0.2.100", 20000 + i, "10.0.0.100", 80, ACK))
        .collect();
    for f in &established {
        env.run(&f.bytes());
        env.run(&f.bytes());
        assert!(env.conn(&f.tuple()).is_some());
    }
    let before = env.slb.counters().clone();
    for i in 0..20_000u32 {
        let src = std::net::Ipv4Addr::from(0x0a40_0000 + i).to_string();
        let f = tcp(&src, 1024 + (i % 60000) as u16, "10.0.0.100", 80, SYN);
        assert!(matches!(env.run(&f.bytes()).0, Outcome::Forward(_)));
    }
    let after = env.slb.counters().clone();
    let delta = |s| after.get(s) - before.get(s);
    assert_eq!(delta(WEIR_STAT_HALF_OPEN_NEW), 20_000);
    assert_eq!(delta(WEIR_STAT_CONN_NEW), 0);
    assert_eq!(env.slb.half_open_count(), 256);
    assert_eq!(
        after.half_open_evicted - before.half_open_evicted,
        20_000 - 256
    );
    for f in &established {
        assert!(matches!(env.run(&f.bytes()).0, Outcome::Forward(_)));
    }
    assert_eq!(
        env.slb.counters().get(WEIR_STAT_CONN_HIT) - after.get(WEIR_STAT_CONN_HIT),
        200
    );
}

#[test]
fn a_reply_without_state_is_never_sent_with_the_dip_s_address() {
    let mut env = Env::new(test_config());
    let fx = Fixture::standard();
    env.slb
        .services_mut()
        .set_local_addrs(["127.0.0.1".parse().unwrap()]);
    let d1 = fx.dip(1).clone();
    let probe = tcp("127.0.0.1", 40100, "10.0.0.100", 80, SYN);
    let stray = tcp("192.0.2.99", 9, "10.0.0.100", 80, SYN);
    let cases = vec![
        pass(
            "health-check answer to this host",
            reply(&probe, &d1, L4::Tcp(SYN_ACK)).bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        pass(
            "a DIP's packet from another port is not a reply",
            reply(&probe, &d1, L4::Tcp(SYN_ACK))
                .with_src(d1.addr, 9999)
                .bytes(),
            WEIR_STAT_PASS_NOT_VIP,
        ),
        Case::new(
            "a stray reply to a client",
            reply(&stray, &d1, L4::Tcp(SYN_ACK)).bytes(),
            WEIR_STAT_DROP_REPLY_NO_STATE,
        ),
    ];
    run_cases(&mut env, cases);
}

/// What only the software tier has: eviction of the least recently used
/// established entry (with its reverse entry and an event), the sweep,
/// and the bounded event queue.
#[test]
fn eviction_sweep_and_events() {
    let mut env = Env::new(Config {
        conn_capacity: 3,
        event_capacity: 4,
        ..test_config()
    });
    let flows: Vec<Frame> = (0..4)
        .map(|i| udp("192.0.2.120", 6000 + i, "10.0.0.100", 53))
        .collect();
    for f in &flows[..3] {
        env.run(&f.bytes());
        env.advance_secs(2);
    }
    // Flow 0 is used again: flow 1 is now the least recently used.
    env.run(&flows[0].bytes());
    env.run(&flows[3].bytes());
    let k1 = flows[1].tuple().key();
    assert!(
        matches!(env.events[..], [Event::Removed { key, reverse: Some(_), reason: Removal::Evicted }, Event::Installed(_)] if key == k1)
    );
    assert!(env.conn(&flows[1].tuple()).is_none());
    assert_eq!(env.slb.counters().evicted, 1);
    let d1 = env.fx.predict(1, &flows[1].tuple()).unwrap().clone();
    let (o, _) = env.run(&reply(&flows[1], &d1, L4::Udp { zero_csum: false }).bytes());
    assert_eq!(
        o,
        Outcome::Drop(DropReason::ReplyNoState),
        "its reverse entry went too"
    );

    // The sweep removes what has expired, oldest first, within its budget.
    let d2 = env.fx.predict(1, &flows[2].tuple()).unwrap().clone();
    let udp_s = u64::from(test_config().timeouts.udp) * (1 << WEIR_TICK_SHIFT) / 1_000_000_000;
    // Flows 0 and 3 were last used 2 s after flow 2.
    env.advance_secs(udp_s);
    assert_eq!(env.slb.expire(env.now_ns, 10), 1, "flow 2, idle longest");
    assert_eq!(
        env.slb.poll_event(),
        Some(Event::Removed {
            key: flows[2].tuple().key(),
            reverse: Some(
                reply(&flows[2], &d2, L4::Udp { zero_csum: false })
                    .tuple()
                    .key()
            ),
            reason: Removal::Expired
        })
    );
    env.advance_secs(10);
    assert_eq!(env.slb.expire(env.now_ns, 1), 1);
    assert_eq!(env.slb.expire(env.now_ns, 1), 1);
    assert_eq!(env.slb.expire(env.now_ns, 1), 0);
    assert_eq!(env.slb.conn_count(), 0);
    assert_eq!(env.slb.counters().swept, 3);

    // Undrained, the queue keeps its bound and counts what it loses.
    for f in &flows {
        let mut b = f.bytes();
        env.slb.process(&mut b, IFINDEX, env.now_ns);
    }
    // 2 sweep removals queued, then 4 installs and an eviction: 3 lost.
    assert_eq!(env.slb.counters().events_lost, 3);
}
