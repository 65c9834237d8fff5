//! `weir_lb` in the software and hybrid tiers, table-driven through
//! BPF_PROG_TEST_RUN, plus one live delivery to a worker's AF_XDP socket.
//!
//! Each case is {name, input frame, verdict, output frame (or unchanged),
//! counter deltas}, as in xdp_lb.rs; frames are built with `weir_core::wire` and
//! the expected rewrites from the fast entry the case installed, never from
//! a run. BPF_PROG_TEST_RUN returns the program's verdict without carrying
//! it out: a redirect to the software tier returns XDP_REDIRECT only when a
//! socket is registered for the queue (any bound AF_XDP socket will do; the
//! kernel checks its interface and queue only when it delivers), and the
//! program's XDP_DROP fallback otherwise. The live test attaches the program
//! and proves the delivery.
//!
//! Every test runs in a network namespace of its own (unshare on a thread of
//! its own, which the kernel removes when the thread ends, also on a panic):
//! `lo` (ifindex 1, where test runs arrive), an interface with this host's
//! address and routes to the clients, so the FIB answers alike on every
//! host, and a veth pair for the workers' sockets. Needs root.

mod common;

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_core::flow::addr_words;
use weir_dataplane::attach::{attach_all, XdpMode};
use weir_dataplane::conntrack::{self, now_ticks};
use weir_dataplane::iface::Iface;
use weir_dataplane::loader::{LoadOptions, SynBudget, Tier};
use weir_dataplane::testrun::XdpAction::{self, Drop, Pass, Redirect, Tx};

/// This host's address (on wda): replies to it are local.
const HOST_V4: &str = "10.99.0.1";
/// The interface the workers' sockets are bound to: two queues (its peer
/// is wxb).
const VETH_A: &str = "wxa";

/// Runs `f` in a new network namespace, set up as the module says, on a
/// thread of its own (namespaces are per thread, and `ip` inherits it).
fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    in_new_netns(
        &[
            "sysctl -qw net.ipv4.conf.all.forwarding=1 net.ipv6.conf.all.forwarding=1",
            "ip link add wda type veth peer name wdb",
            "ip addr add 10.99.0.1/24 dev wda",
            "ip -6 addr add 2001:db8:99::1/64 dev wda nodad",
            "ip link set wda up",
            "ip link set wdb up",
            "ip route add 192.0.2.0/24 via 10.99.0.2",
            "ip -6 route add 2001:db8:c::/64 via 2001:db8:99::2",
            "ip link add wxa numrxqueues 2 numtxqueues 2 type veth peer name wxb \
             numrxqueues 2 numtxqueues 2",
            "ip link set wxa up",
            "ip link set wxb up",
            // Frames from wxb's stack leave with full checksums.
            "ethtool -K wxb tx off",
        ],
        f,
    )
}

/// A worker's socket on `VETH_A`'s queue `queue`, registered in `xsks` for
/// the interface in `slot` and that queue.
fn worker(h: &Harness, slot: u32, queue: u32) -> weir_afxdp::Socket {
    let s = weir_afxdp::Socket::new(VETH_A, queue, &weir_afxdp::Config::default())
        .expect("an AF_XDP socket on the test veth");
    h.maps.put_worker(slot, queue, 0, &s.fd()).unwrap();
    s
}

fn opts(tier: Tier) -> LoadOptions {
    LoadOptions {
        tier,
        interfaces: 2,
        fast_table_size: 1024,
        ..test_options()
    }
}

/// `dip`'s data reply to client frame `f` (nat), as it arrives from the DIP.
fn reply(f: &Frame, dip: &Dip) -> Frame {
    let l4 = match f.l4 {
        L4::Tcp(_) => L4::Tcp(TcpFlags::PSH_ACK),
        udp => udp,
    };
    weir_testkit::frames::reply(f, dip, l4)
}

/// The reverse entry the software tier writes for nat connection `f`.
fn rev_entry(f: &Frame, vip_id: u32) -> weir_rev_nat {
    let (vip, family) = addr_words(f.dst);
    weir_rev_nat {
        vip,
        vport: f.dport.to_be(),
        family,
        vip_id,
        ifindex: TEST_IFINDEX,
        client_mac: CLIENT_MAC,
        lb_mac: VIP_MAC,
        ..Default::default()
    }
}

fn rev_key(f: &Frame, dip: &Dip) -> weir_flow_key {
    conntrack::reverse_key(&f.tuple().key(), &dip.abi(1, true))
}

/// Puts connection `f` to `dip` in the fast table as the software tier
/// does (nat: with its reverse entry), entry edited by `edit`.
fn install(
    f: &Frame,
    dip: &Dip,
    nat_vip: Option<u32>,
    edit: fn(&mut weir_conn),
) -> impl Fn(&Harness) {
    let (f, dip) = (f.clone(), dip.clone());
    move |h: &Harness| {
        let mut conn = conntrack::new_entry(dip.id, 1, 1);
        edit(&mut conn);
        let (rkey, rev) = (rev_key(&f, &dip), nat_vip.map(|v| rev_entry(&f, v)));
        let reverse = rev.as_ref().map(|r| (&rkey, r));
        h.maps
            .install_fast(&f.tuple().key(), &conn, reverse)
            .unwrap();
    }
}

fn fresh(_: &mut weir_conn) {}

/// The fast entry of `f` holds `hits` and `flags`.
fn fast_is(f: &Frame, hits: u64, flags: u32) -> impl Fn(&Harness) {
    let t = f.tuple();
    move |h: &Harness| {
        let c = h.maps.conn(&t.key()).unwrap().expect("the fast entry");
        assert_eq!((c.hits, u32::from(c.close_flags)), (hits, flags), "{t:?}");
    }
}

/// Nothing of `f` in any XDP table: neither installed nor left behind.
fn no_state(f: &Frame, dip: &Dip) -> impl Fn(&Harness) {
    let (t, rkey) = (f.tuple(), rev_key(f, dip));
    move |h: &Harness| {
        assert!(h.maps.conn(&t.key()).unwrap().is_none(), "conns: {t:?}");
        assert!(
            h.maps.half_open(&t.key()).unwrap().is_none(),
            "half_open: {t:?}"
        );
        assert!(h.maps.rev_nat(&rkey).unwrap().is_none(), "rev_nat: {t:?}");
    }
}

fn steered(name: &str, f: &Frame, events: &[u32]) -> Case {
    Case::new(name, f.bytes(), Redirect, WEIR_STAT_TO_SOFTWARE).events(events)
}

fn unchanged(name: &str, input: Vec<u8>, action: XdpAction, outcome: u32) -> Case {
    Case::new(name, input, action, outcome)
}

/// What no tier sends to the workers: traffic for no VIP, ICMP, ARP,
/// malformed frames, and a DIP's packets to this host.
fn not_for_workers(h: &Harness) -> Vec<Case> {
    let d1 = h.fx.dip(1).clone();
    let probe = tcp(HOST_V4, 40100, "10.0.0.100", 80, TcpFlags::SYN);
    let mut truncated = tcp("192.0.2.9", 4000, "10.0.0.100", 80, TcpFlags::ACK).bytes();
    truncated.truncate(ETH_HLEN + 20 + 10);
    vec![
        unchanged(
            "tcp to an address that is no VIP",
            tcp("192.0.2.9", 4000, "10.0.0.200", 80, TcpFlags::SYN).bytes(),
            Pass,
            WEIR_STAT_PASS_NOT_VIP,
        ),
        unchanged(
            "udp to a VIP address, another port",
            udp("192.0.2.9", 4000, "10.0.0.100", 5353).bytes(),
            Pass,
            WEIR_STAT_PASS_NOT_VIP,
        ),
        unchanged(
            "arp",
            arp_request(CLIENT_MAC, [192, 0, 2, 9], [10, 0, 0, 100]),
            Pass,
            WEIR_STAT_PASS_NOT_IP,
        ),
        unchanged(
            "icmp echo to a VIP",
            icmp_echo(CLIENT_MAC, VIP_MAC, ip("192.0.2.9"), ip("10.0.0.100")),
            Pass,
            WEIR_STAT_PASS_ICMP,
        ),
        unchanged(
            "truncated tcp to a VIP",
            truncated,
            Drop,
            WEIR_STAT_DROP_MALFORMED,
        ),
        unchanged(
            "a DIP's answer to this host (a health check)",
            reply(&probe, &d1).bytes(),
            Pass,
            WEIR_STAT_PASS_NOT_VIP,
        ),
    ]
}

/// Software tier: every VIP packet and every reply from a nat DIP's
/// endpoint towards a client goes to the worker of its queue, whatever the
/// XDP tables hold; nothing is dispatched or installed in XDP.
fn software_cases(h: &Harness, to_worker: fn(&str, &Frame) -> Case) -> Vec<Case> {
    let fx = &h.fx;
    let (d1, d11) = (fx.dip(1).clone(), fx.dip(11).clone());
    let syn = tcp("192.0.2.1", 40001, "10.0.0.100", 80, TcpFlags::SYN);
    let ack = tcp("192.0.2.1", 40002, "10.0.0.100", 80, TcpFlags::ACK);
    let dsr = tcp("192.0.2.1", 40003, "10.0.0.101", 80, TcpFlags::SYN);
    let dns = udp("192.0.2.1", 40004, "10.0.0.100", 53);
    let syn6 = tcp("2001:db8:c::1", 40005, "2001:db8::100", 80, TcpFlags::SYN);
    let dns6 = udp("2001:db8:c::1", 40006, "2001:db8::101", 53);
    let no_table = tcp("2001:db8:c::1", 40007, "2001:db8::102", 80, TcpFlags::SYN);
    let known = tcp("192.0.2.1", 40008, "10.0.0.100", 80, TcpFlags::ACK);
    let mut cases =
        vec![
            to_worker("v4 tcp SYN to a nat VIP", &syn).after(no_state(&syn, &d1)),
            to_worker("v4 tcp ACK with no entry", &ack).after(no_state(&ack, &d1)),
            to_worker("v4 tcp SYN to a dsr VIP", &dsr),
            to_worker("v4 udp to a nat VIP", &dns).after(no_state(&dns, &d1)),
            to_worker("v6 tcp SYN to a nat VIP", &syn6).after(no_state(&syn6, &d11)),
            to_worker("v6 udp to a dsr VIP", &dns6),
            to_worker("a VIP without a table: the workers decide", &no_table),
            to_worker("v4 nat reply with no XDP state", &reply(&syn, &d1)),
            to_worker("v6 nat reply with no XDP state", &reply(&syn6, &d11)),
            // A reverse entry (there is room for one) is not read in this tier.
            to_worker("v4 nat reply that has a reverse entry", &reply(&known, &d1))
                .before(install(&known, &d1, Some(0), fresh)),
        ];
    cases.extend(not_for_workers(h));
    cases
}

#[test]
fn software_tier_sends_vip_traffic_and_replies_to_the_workers() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Software));
        let _worker = worker(&h, 0, 0);
        let n = run_cases(&h, software_cases(&h, |name, f| steered(name, f, &[])));
        assert!(n >= 16);
        assert_eq!(h.maps.half_open_count(), 0);
    });
}

#[test]
fn software_tier_without_a_worker_drops_and_counts() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Software));
        let no_worker =
            |name: &str, f: &Frame| Case::new(name, f.bytes(), Drop, WEIR_STAT_DROP_NO_WORKER);
        run_cases(&h, software_cases(&h, no_worker));
    });
}

/// Hybrid tier: what the fast table holds is forwarded in XDP, as in the
/// xdp tier and counted in its entry's `hits`; everything else goes to the
/// workers, and XDP dispatches and installs nothing.
#[test]
fn hybrid_tier_forwards_fast_entries_and_sends_the_rest_to_the_workers() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Hybrid));
        let _worker = worker(&h, 0, 0);
        let fx = &h.fx;
        let (d1, d2, d3, d4, d12) = (
            fx.dip(1).clone(),
            fx.dip(2).clone(),
            fx.dip(3).clone(),
            fx.dip(4).clone(),
            fx.dip(12).clone(),
        );
        const MISS: &[u32] = &[WEIR_STAT_CONN_MISS];
        const HIT: &[u32] = &[WEIR_STAT_CONN_HIT];
        let est_s = test_options().timeouts.tcp_established.as_secs();

        let a = tcp("192.0.2.1", 41001, "10.0.0.100", 80, TcpFlags::ACK);
        let a_syn = tcp("192.0.2.1", 41001, "10.0.0.100", 80, TcpFlags::SYN);
        let a_data = a.clone().payload(b"GET / HTTP/1.1\r\n\r\n");
        let a_fin = tcp("192.0.2.1", 41001, "10.0.0.100", 80, TcpFlags::FIN_ACK);
        let port = tcp("192.0.2.2", 41002, "10.0.0.104", 443, TcpFlags::ACK);
        let dns = udp("192.0.2.3", 41003, "10.0.0.100", 53);
        let dsr = tcp("192.0.2.4", 41004, "10.0.0.101", 80, TcpFlags::ACK);
        let v6 = tcp("2001:db8:c::5", 41005, "2001:db8::100", 80, TcpFlags::ACK);
        let old = tcp("192.0.2.6", 41006, "10.0.0.100", 80, TcpFlags::ACK);
        let gone = tcp("192.0.2.7", 41007, "10.0.0.100", 80, TcpFlags::ACK);
        let half = tcp("192.0.2.8", 41008, "10.0.0.100", 80, TcpFlags::SYN);
        let miss = tcp("192.0.2.9", 41009, "10.0.0.100", 80, TcpFlags::ACK);
        let syn = tcp("192.0.2.10", 41010, "10.0.0.100", 80, TcpFlags::SYN);
        let miss_udp = udp("192.0.2.11", 41011, "10.0.0.101", 53);

        let cases = vec![
            // Misses, SYNs first: nothing dispatched, nothing installed.
            steered("SYN with no entry", &syn, MISS).after(no_state(&syn, &d1)),
            steered("ACK with no entry", &miss, MISS).after(no_state(&miss, &d1)),
            steered("udp with no entry", &miss_udp, MISS),
            steered(
                "a reply with no fast reverse entry",
                &reply(&miss, &d1),
                &[],
            ),
            // Hits, forwarded here as the xdp tier does.
            Case::new("nat hit", a.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&a, &d2).bytes())
                .events(HIT)
                .before(install(&a, &d2, Some(0), fresh))
                .after(fast_is(&a, 1, 0)),
            Case::new("nat hit with data", a_data.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&a_data, &d2).bytes())
                .events(HIT)
                .after(fast_is(&a, 2, 0)),
            Case::new(
                "its reply, reverse nat in XDP",
                reply(&a, &d2).bytes(),
                Tx,
                WEIR_STAT_TX,
            )
            .output(reply_out(&reply(&a, &d2), &a).bytes())
            .events(&[WEIR_STAT_REV_NAT])
            .after(fast_is(&a, 2, 0)),
            Case::new("nat hit rewrites the port", port.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&port, &d4).bytes())
                .events(HIT)
                .before(install(&port, &d4, Some(11), fresh)),
            Case::new("udp nat hit", dns.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&dns, &d3).bytes())
                .events(HIT)
                .before(install(&dns, &d3, Some(1), fresh))
                .after(fast_is(&dns, 1, 0)),
            Case::new("dsr hit", dsr.bytes(), Tx, WEIR_STAT_TX)
                .output(dsr_out(&dsr, &d1).bytes())
                .events(HIT)
                .before(install(&dsr, &d1, None, fresh)),
            Case::new("v6 nat hit", v6.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&v6, &d12).bytes())
                .events(HIT)
                .before(install(&v6, &d12, Some(4), fresh)),
            Case::new("FIN on a hit", a_fin.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&a_fin, &d2).bytes())
                .events(&[WEIR_STAT_CONN_HIT, WEIR_STAT_CONN_CLOSING])
                .after(fast_is(&a, 3, WEIR_CONN_F_FIN_CLIENT)),
            // A SYN on a fast entry: a new connection on the tuple, or one
            // the workers have not confirmed. They decide; the entry goes.
            steered(
                "SYN on a fast entry",
                &a_syn,
                &[WEIR_STAT_CONN_REUSED, WEIR_STAT_CONN_MISS],
            )
            .after(no_state(&a, &d2)),
            steered(
                "an expired fast entry",
                &old,
                &[WEIR_STAT_CONN_EXPIRED, WEIR_STAT_CONN_MISS],
            )
            .before(install(&old, &d1, Some(0), |c| {
                c.atime = now_ticks().wrapping_sub(conntrack::ticks(Duration::from_secs(900 + 5)))
            }))
            .after(no_state(&old, &d1)),
            steered(
                "a fast entry whose DIP slot was reassigned",
                &gone,
                &[WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_MISS],
            )
            .before(install(&gone, &d1, None, |c| c.dip_gen = 7))
            .after(no_state(&gone, &d1)),
            // The hybrid tier keeps no half-open state: a half-open entry
            // with its reverse entry (there is room for one) is not read.
            steered(
                "a reply that only a half-open entry knows",
                &reply(&half, &d1),
                &[],
            )
            .before({
                let key = half.tuple().key();
                let entry = weir_half_open {
                    conn: conntrack::new_entry(d1.id, 1, 1),
                    rev: rev_entry(&half, 0),
                };
                move |h: &Harness| h.maps.put_half_open(&key, &entry).unwrap()
            })
            .after({
                let key = half.tuple().key();
                move |h: &Harness| h.maps.half_open.delete(key.as_bytes()).unwrap()
            }),
        ];
        assert_eq!(est_s, 900, "the expired case assumes the default timeout");
        run_cases(&h, cases);
        run_cases(&h, not_for_workers(&h));
        assert_eq!(h.maps.half_open_count(), 0);
    });
}

#[test]
fn hybrid_tier_without_a_worker_drops_misses_but_forwards_hits() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Hybrid));
        let d1 = h.fx.dip(1).clone();
        let hit = tcp("192.0.2.1", 42001, "10.0.0.100", 80, TcpFlags::ACK);
        let miss = tcp("192.0.2.1", 42002, "10.0.0.100", 80, TcpFlags::ACK);
        let no_worker = |name: &str, f: &Frame, ev: &[u32]| {
            Case::new(name, f.bytes(), Drop, WEIR_STAT_DROP_NO_WORKER).events(ev)
        };
        let cases = vec![
            no_worker("a miss", &miss, &[WEIR_STAT_CONN_MISS]),
            no_worker("a reply with no fast entry", &reply(&miss, &d1), &[]),
            Case::new("a hit needs no worker", hit.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(&hit, &d1).bytes())
                .events(&[WEIR_STAT_CONN_HIT])
                .before(install(&hit, &d1, Some(0), fresh)),
        ];
        run_cases(&h, cases);
    });
}

/// `weir_lb` run on `pkt` as if received on `ifindex` queue `queue`.
fn run_on(h: &Harness, pkt: &[u8], ifindex: u32, queue: u32) -> XdpAction {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
    // rx_queue_index, egress_ifindex.
    let md = [0, pkt.len() as u32, 0, ifindex, queue, 0];
    let mut ctx: Vec<u8> = md.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut out = vec![0u8; pkt.len() + 512];
    let input = libbpf_rs::ProgramInput {
        context_in: Some(&mut ctx),
        data_in: Some(pkt),
        data_out: Some(&mut out),
        ..Default::default()
    };
    let r = h.lb.skel.progs.weir_lb.test_run(input).expect("test run");
    XdpAction::from_raw(r.return_value).expect("an XDP verdict")
}

/// A packet goes to the socket of its interface's slot and its RX queue,
/// and only there.
#[test]
fn the_worker_is_the_one_of_the_interface_slot_and_queue() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Software));
        let a = Iface::by_name(VETH_A).unwrap();
        h.maps.put_iface_in_slot(a.ifindex, a.mac, 1).unwrap();
        let _on_queue_1 = worker(&h, 1, 1);
        let pkt = tcp("192.0.2.1", 43001, "10.0.0.100", 80, TcpFlags::SYN).bytes();
        let s = |i: u32| h.stats()[i as usize];
        assert_eq!(run_on(&h, &pkt, a.ifindex, 1), Redirect);
        assert_eq!(
            run_on(&h, &pkt, a.ifindex, 0),
            Drop,
            "slot 1 queue 0 has no socket"
        );
        assert_eq!(
            run_on(&h, &pkt, TEST_IFINDEX, 0),
            Drop,
            "slot 0 has no socket"
        );
        assert_eq!(
            (s(WEIR_STAT_TO_SOFTWARE), s(WEIR_STAT_DROP_NO_WORKER)),
            (1, 2)
        );
        h.assert_balanced("slots");

        let _on_queue_0 = worker(&h, 0, 0);
        assert_eq!(run_on(&h, &pkt, TEST_IFINDEX, 0), Redirect);
        let e = h.maps.put_worker(2, 0, 0, &_on_queue_0.fd()).unwrap_err();
        assert!(format!("{e:#}").contains("past the 2 interfaces"), "{e:#}");
        let e = h
            .maps
            .put_worker(0, WEIR_MAX_QUEUES, 0, &_on_queue_0.fd())
            .unwrap_err();
        assert!(format!("{e:#}").contains("RX queue 256"), "{e:#}");
    });
}

/// Each tier sizes the tables it uses and shrinks the ones it does not.
#[test]
fn tiers_size_their_tables() {
    let sizes = |tier| {
        let h = Harness::new(&opts(tier));
        let m = &h.maps;
        let ([c4, c6], [r4, r6]) = (m.conns.maps(), m.rev_nat.maps());
        [
            c4.max_entries(),
            c6.max_entries(),
            r4.max_entries(),
            r6.max_entries(),
            m.half_open.max_entries(),
            m.xsks.as_ref().unwrap().max_entries(),
        ]
    };
    let o = test_options();
    let (c4, c6, half) = (o.conn_capacity, o.conn_capacity_v6, o.half_open_capacity);
    assert_ne!(c4, c6, "the families' sizes must be told apart");
    assert_eq!(sizes(Tier::Xdp), [c4, c6, c4, c6, half, 1]);
    let q = 2 * WEIR_MAX_QUEUES;
    assert_eq!(sizes(Tier::Software), [1, 1, 1, 1, 1, q]);
    assert_eq!(sizes(Tier::Hybrid), [1024, 1024, 1024, 1024, 1, q]);
}

/// `ConnLru::PerCpu` flags the five connection tables, and only them, with
/// BPF_F_NO_COMMON_LRU. The kernel rounds their sizes up to whole CPU
/// shares; a handle may show the size asked or the rounded one.
#[test]
fn per_cpu_lru_flags_only_the_connection_tables() {
    let cpus = libbpf_rs::num_possible_cpus().unwrap() as u32;
    let h = Harness::new(&LoadOptions {
        conn_lru: weir_dataplane::loader::ConnLru::PerCpu,
        conn_capacity: 4097,
        conn_capacity_v6: 2049,
        half_open_capacity: 1025,
        ..test_options()
    });
    let m = &h.maps;
    let flags = |map: &libbpf_rs::MapHandle| map.info().unwrap().info.map_flags;
    let per_cpu = libbpf_rs::libbpf_sys::BPF_F_NO_COMMON_LRU;
    let ([c4, c6], [r4, r6]) = (m.conns.maps(), m.rev_nat.maps());
    for (map, want) in [
        (c4, 4097),
        (c6, 2049),
        (r4, 4097),
        (r6, 2049),
        (&m.half_open, 1025),
    ] {
        assert_ne!(flags(map) & per_cpu, 0);
        let n = map.max_entries();
        assert!(n == want || n == u32::next_multiple_of(want, cpus), "{n}");
    }
    assert_eq!(flags(&m.dips) & per_cpu, 0);
}

/// The fast table never holds more than fast_table_size entries: an insert
/// into a full table evicts within it, and what is evicted goes to the
/// workers again while what stays is forwarded.
#[test]
fn the_fast_table_holds_its_bound() {
    in_netns(|| {
        let bound = 256;
        let h = Harness::new(&LoadOptions {
            fast_table_size: bound,
            ..opts(Tier::Hybrid)
        });
        let _worker = worker(&h, 0, 0);
        let d1 = h.fx.dip(1).clone();
        let frames: Vec<Frame> = (0..4 * bound as u16)
            .map(|i| tcp("192.0.2.20", 10000 + i, "10.0.0.100", 80, TcpFlags::ACK))
            .collect();
        for f in &frames {
            install(f, &d1, Some(0), fresh)(&h);
            assert!(h.maps.conn_count() <= bound as usize);
        }
        assert!(h.maps.rev_nat.len() <= bound as usize);
        assert_eq!(h.maps.half_open_count(), 0);
        assert_eq!(h.maps.vips().unwrap().len(), h.fx.vips.len());

        let last = frames.last().unwrap();
        let evicted = frames
            .iter()
            .find(|f| h.maps.conn(&f.tuple().key()).unwrap().is_none())
            .expect("some entry was evicted");
        let cases = vec![
            Case::new("the newest entry stays", last.bytes(), Tx, WEIR_STAT_TX)
                .output(nat_out(last, &d1).bytes())
                .events(&[WEIR_STAT_CONN_HIT]),
            steered(
                "an evicted one goes to the workers",
                evicted,
                &[WEIR_STAT_CONN_MISS],
            ),
        ];
        run_cases(&h, cases);
    });
}

/// The offload policy's view: every fast entry with its hits, of both
/// families, read in batches past the batch size; removal takes an entry
/// and its reverse.
#[test]
fn fast_entries_are_read_whole_and_removed_with_their_reverse() {
    in_netns(|| {
        let h = Harness::new(&LoadOptions {
            fast_table_size: 8192,
            ..opts(Tier::Hybrid)
        });
        let _worker = worker(&h, 0, 0);
        // Every fourth connection is IPv6: to VIP 4 (2001:db8::100:80),
        // by DIPs 11 and 12; the others to VIP 0, by DIPs 1 and 2.
        let ipv6 = |i: usize| i % 4 == 3;
        let dip_of = |i: usize| {
            let id = 1 + (i % 2) as u32 + if ipv6(i) { 10 } else { 0 };
            h.fx.dip(id).clone()
        };
        let n = 5000u16;
        let frames: Vec<Frame> = (0..n)
            .map(|i| {
                let port = 20000 + i;
                if ipv6(usize::from(i)) {
                    let src = format!("2001:db8:2::{:x}", i % 200);
                    return tcp(&src, port, "2001:db8::100", 80, TcpFlags::ACK);
                }
                let src = Ipv4Addr::from(0xc000_0200 + u32::from(i % 200)).to_string();
                tcp(&src, port, "10.0.0.100", 80, TcpFlags::ACK)
            })
            .collect();
        for (i, f) in frames.iter().enumerate() {
            let vip = if ipv6(i) { 4 } else { 0 };
            install(f, &dip_of(i), Some(vip), fresh)(&h);
        }
        for _ in 0..3 {
            assert_eq!(h.run(&frames[7].bytes()).action(), Some(Tx));
        }
        assert_eq!(h.run(&frames[8].bytes()).action(), Some(Tx));

        let entries = h.maps.fast_entries().unwrap();
        assert_eq!(entries.len(), usize::from(n));
        for (i, f) in frames.iter().enumerate() {
            let key = f.tuple().key();
            let (_, c) = entries
                .iter()
                .find(|(k, _)| *k == key)
                .expect("every entry");
            let hits = match i {
                7 => 3,
                8 => 1,
                _ => 0,
            };
            assert_eq!((c.dip_id, c.hits), (dip_of(i).id, hits), "entry {i}");
        }

        // Entry 7 is IPv6.
        let f = &frames[7];
        let (key, rkey) = (f.tuple().key(), rev_key(f, &dip_of(7)));
        assert!(h.maps.remove_fast(&key, Some(&rkey)).unwrap());
        assert!(h.maps.rev_nat(&rkey).unwrap().is_none());
        assert!(
            !h.maps.remove_fast(&key, Some(&rkey)).unwrap(),
            "already gone"
        );
        assert_eq!(h.maps.fast_entries().unwrap().len(), usize::from(n) - 1);
        let r = h.run(&f.bytes());
        assert_eq!(
            r.action(),
            Some(Redirect),
            "a removed entry's packets go to the workers"
        );
    });
}

/// `hits` is the hybrid tier's: the xdp tier's hit path does not write it.
#[test]
fn the_xdp_tier_counts_no_hits() {
    let h = Harness::new(&opts(Tier::Xdp));
    let f = tcp("192.0.2.1", 44001, "10.0.0.100", 80, TcpFlags::ACK);
    let dip = h.fx.predict(0, &f.tuple()).unwrap().clone();
    install(&f, &dip, Some(0), fresh)(&h);
    for _ in 0..3 {
        assert_eq!(h.run(&f.bytes()).action(), Some(Tx));
    }
    let c = h.maps.conn(&f.tuple().key()).unwrap().unwrap();
    assert_eq!(c.hits, 0);
    assert_eq!(h.stats()[WEIR_STAT_CONN_HIT as usize], 3);
}

/// Live: `weir_lb` in the software tier attached to a veth; a datagram the
/// peer's stack sends to a VIP arrives, unchanged, at the worker's socket.
#[test]
fn a_vip_datagram_reaches_the_workers_socket() {
    in_netns(|| {
        let h = Harness::new(&opts(Tier::Software));
        let a = Iface::by_name(VETH_A).unwrap();
        h.maps.put_iface_in_slot(a.ifindex, a.mac, 1).unwrap();
        let mac = a.mac.map(|b| format!("{b:02x}")).join(":");
        for cmd in [
            "ip addr add 10.78.0.2/24 dev wxb".to_string(),
            format!("ip neigh add 10.78.0.1 lladdr {mac} dev wxb nud permanent"),
            "ip route add 10.0.0.0/24 via 10.78.0.1".to_string(),
        ] {
            sh(&cmd);
        }
        let _attached = attach_all(
            h.lb.skel.progs.weir_lb.as_fd(),
            &[(VETH_A.to_string(), a.ifindex)],
            XdpMode::Native,
        )
        .unwrap();
        let mut sockets: Vec<_> = (0..2).map(|q| worker(&h, 1, q)).collect();
        let sender = UdpSocket::bind("10.78.0.2:45001").unwrap();
        let payload = b"weir software tier";

        let mut got: Option<Vec<u8>> = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.is_none() && Instant::now() < deadline {
            sender.send_to(payload, "10.0.0.100:53").unwrap();
            let until = Instant::now() + Duration::from_millis(200);
            while got.is_none() && Instant::now() < until {
                for s in &mut sockets {
                    s.poll_once(|frame| {
                        got.get_or_insert_with(|| frame.to_vec());
                        weir_afxdp::Verdict::Drop
                    })
                    .unwrap();
                }
            }
        }
        let frame = got.expect("no frame reached a worker's socket within 5 s");
        let p = etherparse::SlicedPacket::from_ethernet(&frame).expect("an Ethernet frame");
        let Some(etherparse::NetSlice::Ipv4(ip4)) = p.net else {
            panic!("not IPv4: {frame:02x?}")
        };
        let Some(etherparse::TransportSlice::Udp(u)) = p.transport else {
            panic!("not UDP: {frame:02x?}")
        };
        assert_eq!(&frame[..6], &a.mac, "destination MAC");
        assert_eq!(
            (
                IpAddr::from(ip4.header().source_addr()),
                IpAddr::from(ip4.header().destination_addr()),
                u.source_port(),
                u.destination_port(),
                u.payload()
            ),
            (ip("10.78.0.2"), ip("10.0.0.100"), 45001, 53, &payload[..]),
            "the datagram as sent, unchanged"
        );
        assert!(h.stats()[WEIR_STAT_TO_SOFTWARE as usize] >= 1);
        h.assert_balanced("live");
    });
}

/// Keeps the calling thread on the CPU it runs on: the SYN budget is per
/// CPU, and BPF_PROG_TEST_RUN runs the program on the caller's CPU.
fn stay_on_this_cpu() {
    // SAFETY: sched_getcpu reads the calling thread's CPU; cpu_set_t is
    // plain data, CPU_SET writes within it, and sched_setaffinity(0, ..)
    // changes only the calling thread.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(
            cpu >= 0,
            "sched_getcpu: {}",
            std::io::Error::last_os_error()
        );
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        assert_eq!(
            rc,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A budget of 3 SYNs at once and 1 a second: the cases run within
/// milliseconds, so the fourth SYN finds the bucket empty.
fn budget_opts(tier: Tier) -> LoadOptions {
    LoadOptions {
        syn_budget: SynBudget { rate: 1, burst: 3 },
        ..opts(tier)
    }
}

fn over_budget(name: &str, f: &Frame) -> Case {
    Case::new(name, f.bytes(), Drop, WEIR_STAT_DROP_SYN_BUDGET)
}

/// Software tier: SYNs reach the worker within the budget and are dropped
/// and counted beyond it; nothing else is held to it.
#[test]
fn software_tier_admits_syns_within_the_budget_and_never_holds_back_the_rest() {
    in_netns(|| {
        stay_on_this_cpu();
        let h = Harness::new(&budget_opts(Tier::Software));
        let _worker = worker(&h, 0, 0);
        let d1 = h.fx.dip(1).clone();
        let syn = |port| tcp("192.0.2.1", port, "10.0.0.100", 80, TcpFlags::SYN);
        let syn6 = tcp("2001:db8:c::1", 43005, "2001:db8::100", 80, TcpFlags::SYN);
        let ack = tcp("192.0.2.1", 43001, "10.0.0.100", 80, TcpFlags::ACK);
        let synack = tcp("192.0.2.1", 43006, "10.0.0.100", 80, TcpFlags::SYN_ACK);
        let fin = tcp("192.0.2.1", 43007, "10.0.0.100", 80, TcpFlags::FIN_ACK);
        let dns = udp("192.0.2.1", 43008, "10.0.0.100", 53);
        let cases = vec![
            steered("SYN 1 of the burst", &syn(43001), &[]),
            steered("SYN 2 of the burst", &syn(43002), &[]),
            steered("v6 SYN 3 of the burst", &syn6, &[]),
            over_budget("SYN 4: beyond the burst", &syn(43003)),
            over_budget("a retransmitted SYN beyond the budget", &syn(43001)),
            steered("an established packet beyond the budget", &ack, &[]),
            steered("a SYN-ACK is no new connection", &synack, &[]),
            steered("a FIN beyond the budget", &fin, &[]),
            steered("udp is not held to the budget", &dns, &[]),
            steered("a nat reply beyond the budget", &reply(&ack, &d1), &[]),
            over_budget("still no room for a SYN", &syn(43004)),
        ];
        run_cases(&h, cases);
    });
}

/// Hybrid tier: the same budget for SYNs, which go to the workers; a SYN
/// beyond it leaves the fast entry of its tuple alone, and fast-table hits
/// and misses that are no SYN are never held to it.
#[test]
fn hybrid_tier_admits_syns_within_the_budget_and_forwards_hits_beyond_it() {
    in_netns(|| {
        stay_on_this_cpu();
        let h = Harness::new(&budget_opts(Tier::Hybrid));
        let _worker = worker(&h, 0, 0);
        let d1 = h.fx.dip(1).clone();
        let syn = |port| tcp("192.0.2.1", port, "10.0.0.100", 80, TcpFlags::SYN);
        let hit = tcp("192.0.2.1", 44010, "10.0.0.100", 80, TcpFlags::ACK);
        let reused = tcp("192.0.2.1", 44010, "10.0.0.100", 80, TcpFlags::SYN);
        let miss = tcp("192.0.2.1", 44011, "10.0.0.100", 80, TcpFlags::ACK);
        let miss_ev = &[WEIR_STAT_CONN_MISS][..];
        let cases = vec![
            steered("SYN 1 of the burst", &syn(44001), miss_ev),
            steered("SYN 2 of the burst", &syn(44002), miss_ev),
            steered("SYN 3 of the burst", &syn(44003), miss_ev),
            over_budget("SYN 4: beyond the burst", &syn(44004)),
            over_budget("a SYN on a fast entry's tuple beyond the budget", &reused)
                .before(install(&hit, &d1, Some(0), fresh))
                .after(fast_is(&hit, 0, 0)),
            Case::new(
                "its connection's packets still forwarded",
                hit.bytes(),
                Tx,
                WEIR_STAT_TX,
            )
            .output(nat_out(&hit, &d1).bytes())
            .events(&[WEIR_STAT_CONN_HIT])
            .after(fast_is(&hit, 1, 0)),
            steered("a miss that is no SYN beyond the budget", &miss, miss_ev),
            steered("a nat reply with no fast entry", &reply(&miss, &d1), &[]),
            over_budget("still no room for a SYN", &syn(44005)),
        ];
        run_cases(&h, cases);
    });
}

/// The bucket refills at its rate: with 1000 SYNs a second and no burst,
/// a second SYN at once is dropped, one after a few milliseconds passes;
/// and a rate of 0 holds back nothing.
#[test]
fn the_syn_budget_refills_at_its_rate_and_zero_means_none() {
    in_netns(|| {
        stay_on_this_cpu();
        let syn = |port| tcp("192.0.2.1", port, "10.0.0.100", 80, TcpFlags::SYN);
        let h = Harness::new(&LoadOptions {
            syn_budget: SynBudget {
                rate: 1000,
                burst: 1,
            },
            ..opts(Tier::Software)
        });
        let w = worker(&h, 0, 0);
        run_cases(
            &h,
            vec![
                steered("the first SYN", &syn(45001), &[]),
                over_budget("a second one at once", &syn(45002)),
            ],
        );
        std::thread::sleep(Duration::from_millis(5));
        run_cases(&h, vec![steered("one 5 ms later", &syn(45003), &[])]);
        // The queue takes one socket at a time.
        drop((w, h));

        let h = Harness::new(&LoadOptions {
            syn_budget: SynBudget { rate: 0, burst: 1 },
            ..opts(Tier::Software)
        });
        let _worker = worker(&h, 0, 0);
        let cases = (0..50)
            .map(|i| steered("no budget: every SYN", &syn(45100 + i), &[]))
            .collect();
        run_cases(&h, cases);
    });
}
