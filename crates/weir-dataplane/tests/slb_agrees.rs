//! The software load balancer (`weir_software_engine::slb::Slb`) and the XDP program
//! (`weir_lb`, through BPF_PROG_TEST_RUN) get the same frames in the same
//! order and must agree on every one: the verdict, the frame they leave
//! byte for byte (DIP, rewritten addresses and ports, checksums, MACs),
//! every counter, the connection entries they keep, and, when the software
//! tier reports a connection installed, the entry XDP holds for it.
//!
//! 1000 random flows, interleaved at random: nat and dsr, IPv4 and IPv6,
//! TCP (SYN, retransmissions, the SYN-ACK through the half-open reverse
//! entry, promotion, data both ways, FINs both ways or a RST, reuse of the
//! 5-tuple) and UDP (datagrams and replies, with and without checksum),
//! while tables are republished, DIPs removed and reassigned, and time
//! passes beyond the closed and half-open timeouts. A second test sends
//! mutated frames of every kind through both.
//!
//! The two run on one clock: the software tier reads the coarse monotonic
//! clock as XDP does, and "time passes" moves XDP's entries back and the
//! software tier's clock forward by the same whole number of ticks.
//!
//! Needs root (BPF).

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use common::*;
use libbpf_rs::MapCore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_dataplane::loader::{Action, ConnTimeouts, LoadOptions, NonSynMiss};
use weir_dataplane::testrun::XdpAction;
use weir_software_engine::slb::{self, Event, Outcome, Side, Slb};

const FLOWS: usize = 1000;
const PAYLOAD: &[u8] = b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n";

fn action(a: Action) -> slb::Action {
    match a {
        Action::Pass => slb::Action::Pass,
        Action::Drop => slb::Action::Drop,
    }
}

/// The software tier configured as `opts` configures weir_lb.
fn slb_config(opts: &LoadOptions) -> slb::Config {
    slb::Config {
        conn_capacity: opts.conn_capacity as usize,
        half_open_capacity: opts.half_open_capacity as usize,
        max_vips: opts.max_vips,
        max_dips: opts.max_dips,
        timeouts: opts.timeouts.ticks().into(),
        not_vip: action(opts.not_vip),
        icmp: action(opts.icmp),
        fragments: action(opts.fragments),
        malformed: action(opts.malformed),
        nonsyn_miss: match opts.nonsyn_miss {
            NonSynMiss::Dispatch => slb::NonSynMiss::Dispatch,
            NonSynMiss::Drop => slb::NonSynMiss::Drop,
        },
        hash_seed: opts.hash_seed,
        event_capacity: 4096,
    }
}

/// The test options with timeouts far longer than a run takes: entries
/// expire only when the test ages them, by margins of seconds, so the two
/// tiers reading the clock a few microseconds apart cannot disagree.
fn options() -> LoadOptions {
    LoadOptions {
        timeouts: ConnTimeouts {
            tcp_half_open: std::time::Duration::from_secs(120),
            tcp_closed: std::time::Duration::from_secs(60),
            ..ConnTimeouts::default()
        },
        ..test_options()
    }
}

/// weir_lb and an Slb holding the same configuration.
struct Twin {
    h: Harness,
    slb: Slb,
    /// Ticks the software tier's clock runs ahead (time that "passed").
    shift: u64,
    steps: usize,
}

impl Twin {
    fn new(opts: &LoadOptions, nat_endpoints: bool) -> Twin {
        let h = Harness::new(opts);
        let mut slb = Slb::new(slb_config(opts)).unwrap();
        let s = slb.services_mut();
        s.set_interface(TEST_IFINDEX, LB_IF_MAC);
        for d in &h.fx.dips {
            s.set_dip(d.id, d.abi(1, true)).unwrap();
        }
        if nat_endpoints {
            s.set_nat_endpoints(h.fx.nat_endpoints().into_keys());
        } else {
            h.maps.sync_nat_endpoints(&Default::default()).unwrap();
        }
        for v in &h.fx.vips {
            let vip = weir_vip {
                vip_id: v.id,
                mode: v.mode as u8,
                ..Default::default()
            };
            s.set_vip(v.key(), vip).unwrap();
            if v.weights.is_some() {
                s.publish_table(v.id, 1, Arc::new(v.table())).unwrap();
            }
        }
        Twin {
            h,
            slb,
            shift: 0,
            steps: 0,
        }
    }

    fn now_ns(&self) -> u64 {
        weir_sys::monotonic_coarse_ns() + (self.shift << WEIR_TICK_SHIFT)
    }

    /// Runs `frame` through both and checks that they agree; returns the
    /// software tier's outcome.
    fn step(&mut self, what: &str, frame: &[u8]) -> Outcome {
        self.steps += 1;
        let before = self.h.stats();
        let r = self.h.run(frame);
        let after = self.h.stats();
        let s_before = *self.slb.counters().stats();
        let mut buf = frame.to_vec();
        let o = self.slb.process(&mut buf, TEST_IFINDEX, self.now_ns());
        let s_after = *self.slb.counters().stats();
        let ctx = format!("step {} ({what})", self.steps);

        let want = match o {
            Outcome::Forward(f) if f.egress.redirect => XdpAction::Redirect,
            Outcome::Forward(_) => XdpAction::Tx,
            Outcome::Drop(_) => XdpAction::Drop,
            Outcome::Pass(_) => XdpAction::Pass,
        };
        assert_eq!(r.action(), Some(want), "{ctx}: XDP vs software {o:?}");
        assert!(
            r.packet == buf,
            "{ctx}: frames differ (have = XDP, want = software):\n{}",
            diff(&r.packet, &buf)
        );
        let d_xdp: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let d_slb: Vec<u64> = s_after.iter().zip(&s_before).map(|(a, b)| a - b).collect();
        assert_eq!(
            d_xdp,
            d_slb,
            "{ctx}: counters: XDP [{}], software [{}]",
            fmt_stats(&d_xdp),
            fmt_stats(&d_slb)
        );
        if let Outcome::Forward(f) = o {
            self.same_entry(&ctx, &f.conn);
            if f.side == Side::ToDip {
                let have = self.xdp_entry(&f.conn).map(|c| c.dip_id);
                assert_eq!(have, Some(f.dip), "{ctx}: XDP's DIP of the flow");
            }
        }
        let new_conns = d_slb[WEIR_STAT_CONN_NEW as usize];
        let mut installed = 0;
        while let Some(ev) = self.slb.poll_event() {
            if let Event::Installed(c) = ev {
                installed += 1;
                self.xdp_holds(&ctx, &c);
            }
        }
        assert_eq!(
            installed, new_conns,
            "{ctx}: an Installed event per conn_new"
        );
        o
    }

    /// XDP's entry of a client tuple: established, else half-open.
    fn xdp_entry(&self, key: &weir_flow_key) -> Option<weir_conn> {
        self.h
            .maps
            .conn(key)
            .unwrap()
            .or_else(|| self.h.maps.half_open(key).unwrap())
    }

    /// Both keep the same entry (DIP, generation, version, close flags) for
    /// the connection, in the same table.
    fn same_entry(&self, ctx: &str, key: &weir_flow_key) {
        let fields = |c: weir_conn| (c.dip_id, c.dip_gen, c.table_version, c.close_flags);
        let xdp = (
            self.h.maps.conn(key).unwrap().map(fields),
            self.h.maps.half_open(key).unwrap().map(fields),
        );
        let sw = (
            self.slb.connection(key).map(|c| fields(c.conn)),
            self.slb.half_open_entry(key).map(fields),
        );
        assert_eq!(
            xdp, sw,
            "{ctx}: entries (established, half-open) of {key:?}"
        );
    }

    /// What the software tier would install in a fast table is what XDP
    /// installed itself.
    fn xdp_holds(&self, ctx: &str, c: &slb::Connection) {
        let x = self
            .h
            .maps
            .conn(&c.key)
            .unwrap()
            .expect("XDP confirmed it too");
        assert_eq!(
            (x.dip_id, x.dip_gen, x.table_version, x.close_flags),
            (
                c.conn.dip_id,
                c.conn.dip_gen,
                c.conn.table_version,
                c.conn.close_flags
            ),
            "{ctx}: installed entry"
        );
        if let Some((rkey, rev)) = c.reverse {
            let have = self.h.maps.rev_nat(&rkey).unwrap();
            assert_eq!(have, Some(rev), "{ctx}: reverse entry");
        }
    }

    fn publish(&mut self, vip: u32, version: u32, weights: &[(u32, u32)]) {
        let t = AwfdTable::from_weights(weights).unwrap();
        self.h.maps.publish_table(vip, version, &t).unwrap();
        self.slb
            .services_mut()
            .publish_table(vip, version, Arc::new(t))
            .unwrap();
    }

    fn put_dip(&mut self, id: u32, gen: u32, live: bool) {
        let d = self.h.fx.dip(id).abi(gen, live);
        self.h.maps.put_dip(id, &d).unwrap();
        self.slb.services_mut().set_dip(id, d).unwrap();
    }

    /// `secs` pass: XDP's entries age by as many whole ticks as the
    /// software tier's clock moves on.
    fn age(&mut self, secs: u64) {
        let ticks = weir_dataplane::conntrack::ticks(std::time::Duration::from_secs(secs));
        for (key, mut c) in self.h.maps.conns().unwrap() {
            c.atime = c.atime.wrapping_sub(ticks);
            self.h.maps.put_conn(&key, &c).unwrap();
        }
        let half: Vec<Vec<u8>> = self.h.maps.half_open.keys().collect();
        for k in half {
            let key = weir_flow_key::from_bytes(&k).unwrap();
            let mut e = self.h.maps.half_open_entry(&key).unwrap().unwrap();
            e.conn.atime = e.conn.atime.wrapping_sub(ticks);
            self.h.maps.put_half_open(&key, &e).unwrap();
        }
        self.shift += u64::from(ticks);
    }
}

/// One packet of a flow's script.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The client sends (TCP flags; UDP ignores them).
    Client(TcpFlags, bool),
    /// Its DIP replies (nat).
    Reply(TcpFlags),
}

struct Flow {
    client: Frame,
    vip: u32,
    steps: Vec<Step>,
    next: usize,
    /// The DIP its last client packet went to.
    dip: Option<u32>,
}

fn random_flow(rng: &mut StdRng, fx: &Fixture, i: usize) -> Flow {
    let vip = [0u32, 1, 2, 3, 4, 5, 6, 7, 11][rng.gen_range(0..9)];
    let v = fx.vip(vip);
    let src = if v.addr.is_ipv4() {
        IpAddr::from([198, 18, (i >> 8) as u8, i as u8])
    } else {
        let mut o = [0u8; 16];
        o[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x0c]);
        rng.fill(&mut o[8..]);
        IpAddr::from(o)
    };
    let sport = rng.gen_range(1024..=u16::MAX);
    let nat = v.mode == NAT;
    let mut steps = Vec::new();
    let client = match v.proto {
        weir_core::flow::Proto::Tcp => {
            let c = |f| Step::Client(f, false);
            steps.push(c(TcpFlags::SYN));
            if rng.gen_bool(0.3) {
                steps.push(c(TcpFlags::SYN));
            }
            if nat {
                steps.push(Step::Reply(TcpFlags::SYN_ACK));
            }
            steps.push(c(TcpFlags::ACK));
            steps.push(Step::Client(TcpFlags::PSH_ACK, true));
            if nat {
                steps.push(Step::Reply(TcpFlags::PSH_ACK));
            }
            if rng.gen_bool(0.25) {
                steps.push(c(TcpFlags::RST));
            } else {
                steps.push(c(TcpFlags::FIN_ACK));
                if nat {
                    steps.push(Step::Reply(TcpFlags::FIN_ACK));
                }
                steps.push(c(TcpFlags::ACK));
            }
            if rng.gen_bool(0.3) {
                // The client reuses its port for a new connection.
                steps.push(c(TcpFlags::SYN));
                if nat {
                    steps.push(Step::Reply(TcpFlags::SYN_ACK));
                }
                steps.push(Step::Client(TcpFlags::PSH_ACK, true));
            }
            Frame::tcp(src, sport, v.addr, v.port, TcpFlags::SYN)
        }
        weir_core::flow::Proto::Udp => {
            for _ in 0..rng.gen_range(1..4) {
                steps.push(Step::Client(TcpFlags::default(), true));
                if nat {
                    steps.push(Step::Reply(TcpFlags::default()));
                }
            }
            let f = Frame::udp(src, sport, v.addr, v.port);
            if src.is_ipv4() && rng.gen_bool(0.3) {
                f.zero_udp_csum()
            } else {
                f
            }
        }
    };
    Flow {
        client: client.macs(CLIENT_MAC, VIP_MAC),
        vip,
        steps,
        next: 0,
        dip: None,
    }
}

/// The frame of a step: the client's, or its DIP's reply.
fn frame_of(fx: &Fixture, f: &Flow, step: Step) -> Option<Vec<u8>> {
    let mut c = f.client.clone();
    match step {
        Step::Client(flags, payload) => {
            if let L4::Tcp(_) = c.l4 {
                c.l4 = L4::Tcp(flags);
            }
            if payload {
                c.payload = PAYLOAD.to_vec();
            } else if let L4::Tcp(_) = c.l4 {
                c.payload.clear();
            }
            Some(c.bytes())
        }
        Step::Reply(flags) => {
            let dip = fx.dip(f.dip?);
            let port = if dip.port == 0 { c.dport } else { dip.port };
            let mut r = c
                .clone()
                .macs(dip_mac(dip.id), LB_IF_MAC)
                .with_src(dip.addr, port)
                .with_dst(c.src, c.sport);
            if let L4::Tcp(_) = r.l4 {
                r.l4 = L4::Tcp(flags);
            }
            r.payload = b"HTTP/1.1 200 OK\r\n\r\nweir".to_vec();
            Some(r.bytes())
        }
    }
}

#[test]
fn software_and_xdp_agree_on_1000_random_flows() {
    agree_on_random_flows(&options());
}

/// Per-CPU LRU lists (`ConnLru::PerCpu`) must not change what XDP keeps.
#[test]
fn software_and_xdp_agree_on_1000_random_flows_with_per_cpu_lru() {
    agree_on_random_flows(&LoadOptions {
        conn_lru: weir_dataplane::loader::ConnLru::PerCpu,
        ..options()
    });
}

fn agree_on_random_flows(opts: &LoadOptions) {
    let mut twin = Twin::new(opts, true);
    let fx = Fixture::standard();
    let mut rng = StdRng::seed_from_u64(0x51b_a9ee);
    let mut flows: Vec<Flow> = (0..FLOWS).map(|i| random_flow(&mut rng, &fx, i)).collect();
    let total: usize = flows.iter().map(|f| f.steps.len()).sum();
    let timeouts = opts.timeouts;
    let mut done = 0;
    let mut events: HashMap<&str, usize> = HashMap::new();
    while done < total {
        // What happens to the service while the flows run.
        match done * 12 / total {
            3 if !events.contains_key("v2") => {
                // DIPs 2 and 12 leave the tables, then lose LIVE; weights move.
                twin.publish(0, 2, &[(1, 1), (3, 2)]);
                twin.publish(1, 2, &[(1, 2), (3, 1)]);
                twin.publish(2, 2, &[(1, 1)]);
                twin.publish(4, 2, &[(11, 1), (13, 3)]);
                twin.publish(6, 2, &[(13, 1)]);
                twin.put_dip(2, 1, false);
                twin.put_dip(12, 1, false);
                events.insert("v2", done);
            }
            5 if !events.contains_key("closed") => {
                twin.age(timeouts.tcp_closed.as_secs() + 2);
                events.insert("closed", done);
            }
            7 if !events.contains_key("v3") => {
                // The slots are reassigned (new generation) and tabled again.
                twin.put_dip(2, 2, true);
                twin.put_dip(12, 2, true);
                twin.publish(0, 3, &[(1, 2), (2, 2), (3, 1)]);
                twin.publish(3, 2, &[(2, 3), (3, 1)]);
                twin.publish(5, 2, &[(11, 1), (12, 1)]);
                events.insert("v3", done);
            }
            9 if !events.contains_key("half-open") => {
                twin.age(timeouts.tcp_half_open.as_secs() + 2);
                events.insert("half-open", done);
            }
            _ => {}
        }
        let live: Vec<usize> = (0..flows.len())
            .filter(|&i| flows[i].next < flows[i].steps.len())
            .collect();
        let i = live[rng.gen_range(0..live.len())];
        let f = &mut flows[i];
        let step = f.steps[f.next];
        f.next += 1;
        done += 1;
        let Some(frame) = frame_of(&fx, f, step) else {
            continue; // a reply of a flow no DIP took
        };
        let what = format!("flow {i} to VIP {} {:?}", f.vip, step);
        if let Outcome::Forward(fw) = twin.step(&what, &frame) {
            if fw.side == Side::ToDip {
                f.dip = Some(fw.dip);
            }
        }
    }
    assert_eq!(events.len(), 4, "every service change happened: {events:?}");

    // The tables and the per-VIP and per-DIP traffic agree in the end.
    assert_eq!(twin.h.maps.conn_count(), twin.slb.conn_count());
    assert_eq!(twin.h.maps.half_open_count(), twin.slb.half_open_count());
    for v in &fx.vips {
        let x = twin.h.maps.vip_traffic(v.id).unwrap();
        let s = twin.slb.vip_traffic(v.id);
        assert_eq!(
            (x.packets, x.bytes, x.new_conns),
            (s.packets, s.bytes, s.new_conns)
        );
    }
    for d in &fx.dips {
        let x = twin.h.maps.dip_traffic(d.id).unwrap();
        let s = twin.slb.dip_traffic(d.id);
        assert_eq!(
            (x.packets, x.new_conns),
            (s.packets, s.new_conns),
            "DIP {}",
            d.id
        );
    }
    let s = twin.slb.counters();
    for stat in [
        WEIR_STAT_HALF_OPEN_NEW,
        WEIR_STAT_SYN_RETRANSMIT,
        WEIR_STAT_CONN_NEW,
        WEIR_STAT_CONN_HIT,
        WEIR_STAT_CONN_REUSED,
        WEIR_STAT_CONN_EXPIRED,
        WEIR_STAT_CONN_STALE,
        WEIR_STAT_CONN_CLOSING,
        WEIR_STAT_REV_NAT,
        WEIR_STAT_NONSYN_MISS,
        WEIR_STAT_DROP_NO_BACKEND,
    ] {
        assert!(
            s.get(stat) > 0,
            "{} never happened: {}",
            stat_name(stat),
            fmt_stats(s.stats())
        );
    }
    twin.h.assert_balanced("1000 flows");
    eprintln!(
        "{FLOWS} flows, {} frames: XDP and the software tier agree ({})",
        twin.steps,
        fmt_stats(s.stats())
    );
}

/// Valid frames of every kind, as mutation seeds.
fn seeds() -> Vec<Vec<u8>> {
    let c = |f: Frame| f.macs(CLIENT_MAC, VIP_MAC);
    let mut s = Vec::new();
    for (client, vips) in [
        ("192.0.2.1", ["10.0.0.100", "10.0.0.101"]),
        ("2001:db8:c::1", ["2001:db8::100", "2001:db8::101"]),
    ] {
        for vip in vips {
            for flags in [
                TcpFlags::SYN,
                TcpFlags::ACK,
                TcpFlags::FIN_ACK,
                TcpFlags::RST,
            ] {
                s.push(c(Frame::tcp(ip(client), 40001, ip(vip), 80, flags)).payload(b"hi"));
            }
            s.push(c(Frame::udp(ip(client), 5353, ip(vip), 53)));
        }
    }
    let mut out: Vec<Vec<u8>> = s.iter().map(|f| f.bytes()).collect();
    let v6 = c(Frame::tcp(
        ip("2001:db8:c::1"),
        40001,
        ip("2001:db8::100"),
        80,
        TcpFlags::SYN,
    ));
    let padn = || (0u8, vec![1, 4, 0, 0, 0, 0]);
    out.push(ipv6_with_exts(&v6, &[padn(), (60, vec![1, 4, 0, 0, 0, 0])]));
    out.push(ipv6_with_exts(&v6, &[(44, vec![0, 1, 0, 0, 0x12, 0x34])]));
    out.push(icmp_echo(
        CLIENT_MAC,
        VIP_MAC,
        ip("192.0.2.1"),
        ip("10.0.0.100"),
    ));
    out.push(arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]));
    out
}

/// Mutated frames (bit flips, random bytes, cuts, corrupted length
/// fields) through both: the parsers and every path behind them agree.
#[test]
fn software_and_xdp_agree_on_mutated_frames() {
    // No nat endpoints: a stray DIP reply's fate in XDP depends on this
    // host's FIB, which the software tier does not read.
    let mut twin = Twin::new(&options(), false);
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(0xf22_a9ee);
    let runs = 20_000;
    for i in 0..runs {
        let mut f = seeds[rng.gen_range(0..seeds.len())].clone();
        match rng.gen_range(0..5) {
            0 => {}
            1 => {
                for _ in 0..rng.gen_range(1..8) {
                    let at = rng.gen_range(0..f.len());
                    f[at] ^= 1 << rng.gen_range(0..8);
                }
            }
            2 => {
                let at = rng.gen_range(0..f.len());
                f[at] = rng.gen();
            }
            3 => f.truncate(rng.gen_range(ETH_HLEN..=f.len())),
            _ => {
                let fields = [14, 16, 17, 18, 19, 38, 39, 46, 47, 54, 55, 58, 59];
                let at = fields[rng.gen_range(0..fields.len())];
                if at < f.len() {
                    f[at] = rng.gen();
                }
            }
        }
        twin.step(&format!("mutated frame {i}"), &f);
    }
    twin.h.assert_balanced("mutated frames");
}

/// Checksum edges, which random flows almost never meet: a payload word is
/// searched (with the reference builder) so that the rewritten TCP
/// checksum is 0x0000, the rewritten UDP checksum computes to 0 (sent as
/// 0xffff), or the input's is 0x0000 / 0xffff; v4 and v6, both ways.
#[test]
fn software_and_xdp_agree_on_checksum_edges() {
    let mut twin = Twin::new(&options(), true);
    let fx = Fixture::standard();
    let bases = [
        (
            0,
            Frame::tcp(ip("192.0.2.8"), 40008, ip("10.0.0.100"), 80, TcpFlags::SYN),
        ),
        (1, Frame::udp(ip("192.0.2.6"), 5356, ip("10.0.0.100"), 53)),
        (
            4,
            Frame::tcp(
                ip("2001:db8:c::8"),
                40008,
                ip("2001:db8::100"),
                80,
                TcpFlags::SYN,
            ),
        ),
        (
            5,
            Frame::udp(ip("2001:db8:c::6"), 5356, ip("2001:db8::100"), 53),
        ),
    ];
    let mut checked = 0;
    for (vip, base) in bases {
        let base = base.macs(CLIENT_MAC, VIP_MAC);
        let d = fx.predict(vip, &base.tuple()).unwrap().clone();
        let port = if d.port == 0 { base.dport } else { d.port };
        let tcp = matches!(base.l4, L4::Tcp(_));
        let c = base.l4_off() + if tcp { 16 } else { 6 };
        let out = |f: &Frame| f.clone().with_dst(d.addr, port).bytes();
        // (name, whether (input checksum, output checksum) is that edge)
        type Edge<'a> = (&'a str, &'a dyn Fn(&[u8], &[u8]) -> bool);
        let edges: [Edge; 3] = [
            ("rewritten to 0", &|_, o| o == [0, 0] || o == [0xff, 0xff]),
            ("input 0xffff", &|i, _| i == [0xff, 0xff]),
            ("input 0", &|i, _| i == [0, 0]),
        ];
        for (name, want) in edges {
            let Some(f) = (0..=u16::MAX)
                .map(|w| base.clone().payload(&w.to_be_bytes()))
                .find(|f| want(&f.bytes()[c..c + 2], &out(f)[c..c + 2]))
            else {
                continue; // UDP never carries 0 (it means "none"), v6 may not
            };
            let o = twin.step(&format!("VIP {vip} {name}"), &f.bytes());
            assert!(matches!(o, Outcome::Forward(_)), "VIP {vip} {name}: {o:?}");
            // And the reply, rewritten back: the same edge the other way.
            let r = f
                .clone()
                .macs(dip_mac(d.id), LB_IF_MAC)
                .with_src(d.addr, port)
                .with_dst(f.src, f.sport);
            twin.step(&format!("VIP {vip} {name}, reply"), &r.bytes());
            checked += 1;
        }
    }
    assert!(checked >= 8, "{checked} edges");
}
