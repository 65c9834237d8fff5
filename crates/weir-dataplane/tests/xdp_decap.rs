//! The backends' decapsulation program `weir_decap` through
//! BPF_PROG_TEST_RUN: IPIP, IPv6-in-IPv6 and GUE to one of the host's
//! addresses come out as the inner packet behind the same MACs; anything
//! else passes untouched; broken encapsulations are dropped. Each case
//! checks the verdict, the frame and which counter moved.
//!
//! Encapsulated inputs and expected outputs are built here with
//! `weir_core::wire` around client datagrams built with it too; nothing is taken from a run.
//! Needs root (BPF).

mod common;

use common::*;
use std::net::IpAddr;

use weir_core::wire::{refresh_ipv4_checksum, IpRepr, UdpRepr, UDP_HLEN};
use weir_dataplane::decap::{Decap, DecapStats};
use weir_dataplane::testrun::XdpAction::{self, Drop, Pass};

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
const HOST_V4: &str = "10.1.0.1";
const HOST_V6: &str = "2001:db8:1::1";
const GUE_PORT: u16 = 6080;

/// A client datagram (no Ethernet header) to the VIP.
fn inner(v6: bool) -> Vec<u8> {
    let f = if v6 {
        Frame::tcp(
            ip("2001:db8:c::1"),
            40000,
            ip("2001:db8::110"),
            80,
            TcpFlags::SYN,
        )
    } else {
        Frame::tcp(ip("192.0.2.1"), 40000, ip("10.0.0.110"), 80, TcpFlags::SYN)
    };
    f.payload(b"hello").bytes()[ETH_HLEN..].to_vec()
}

/// `payload` (an inner datagram) behind an outer IP header from the load
/// balancer to `dst`, protocol `proto` (4, 41, or 17 with a UDP header to
/// `udp_port` for GUE), in a frame from the LB to this host.
fn outer(dst: &str, proto: u8, udp_port: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let src = match ip(dst) {
        IpAddr::V4(_) => ip("172.16.1.2"),
        IpAddr::V6(_) => ip("fd77:6569:7200::1"),
    };
    let udp_len = udp_port.map_or(0, |_| UDP_HLEN);
    let mut outer = IpRepr::new(src, ip(dst), proto, udp_len + payload.len());
    outer.flow_label = 0x1234;
    let mut f = raw_frame(LB_MAC, HOST_MAC, outer.ethertype(), &[]);
    outer.emit(&mut f);
    match udp_port {
        Some(port) => UdpRepr {
            sport: 0xc123,
            dport: port,
            checksum: false,
        }
        .emit(&outer, payload, &mut f),
        None => f.extend_from_slice(payload),
    }
    f
}

/// The inner datagram as the kernel must receive it: the outer frame's MACs,
/// the inner ethertype.
fn decapsulated(payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&HOST_MAC);
    f.extend_from_slice(&LB_MAC);
    let et = if payload[0] >> 4 == 6 {
        ETH_P_IPV6
    } else {
        ETH_P_IP
    };
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[derive(Clone, Copy, Debug)]
enum Counter {
    Decapsulated,
    NotEncap,
    NotOurs,
    Malformed,
}

fn bump(s: &DecapStats, c: Counter) -> DecapStats {
    let mut s = *s;
    match c {
        Counter::Decapsulated => s.decapsulated += 1,
        Counter::NotEncap => s.not_encap += 1,
        Counter::NotOurs => s.not_ours += 1,
        Counter::Malformed => s.malformed += 1,
    }
    s
}

struct Case {
    name: &'static str,
    input: Vec<u8>,
    action: XdpAction,
    /// `None`: the frame leaves unchanged.
    output: Option<Vec<u8>>,
    counter: Counter,
}

fn case(
    name: &'static str,
    input: Vec<u8>,
    action: XdpAction,
    output: Option<Vec<u8>>,
    counter: Counter,
) -> Case {
    Case {
        name,
        input,
        action,
        output,
        counter,
    }
}

fn load() -> Decap {
    let d = Decap::load(GUE_PORT).expect("loading weir_decap (tests need root)");
    d.add_addr(ip(HOST_V4)).unwrap();
    d.add_addr(ip(HOST_V6)).unwrap();
    d
}

fn run(d: &Decap, cases: Vec<Case>) {
    for c in cases {
        let before = d.stats().unwrap();
        let r = d.test_run(&c.input).unwrap();
        let name = c.name;
        assert_eq!(r.action(), Some(c.action), "{name}: verdict");
        let want = c.output.as_ref().unwrap_or(&c.input);
        assert!(
            &r.packet == want,
            "{name}: output frame differs:\n{}",
            diff(&r.packet, want)
        );
        assert_eq!(
            d.stats().unwrap(),
            bump(&before, c.counter),
            "{name}: counters"
        );
    }
}

#[test]
fn decapsulates_ipip_ipv6_and_gue_for_this_host() {
    use Counter::*;
    let (v4, v6) = (inner(false), inner(true));
    let d = load();
    run(
        &d,
        vec![
            case(
                "v4 in v4 (ipip)",
                outer(HOST_V4, 4, None, &v4),
                Pass,
                Some(decapsulated(&v4)),
                Decapsulated,
            ),
            case(
                "v6 in v6 (ipip mode, IPv6 DIP)",
                outer(HOST_V6, 41, None, &v6),
                Pass,
                Some(decapsulated(&v6)),
                Decapsulated,
            ),
            case(
                "v4 in v6",
                outer(HOST_V6, 4, None, &v4),
                Pass,
                Some(decapsulated(&v4)),
                Decapsulated,
            ),
            case(
                "gue v4",
                outer(HOST_V4, 17, Some(GUE_PORT), &v4),
                Pass,
                Some(decapsulated(&v4)),
                Decapsulated,
            ),
            case(
                "gue v6",
                outer(HOST_V6, 17, Some(GUE_PORT), &v6),
                Pass,
                Some(decapsulated(&v6)),
                Decapsulated,
            ),
        ],
    );
}

#[test]
fn leaves_what_is_not_for_it_and_drops_broken_encapsulations() {
    use Counter::*;
    let (v4, v6) = (inner(false), inner(true));
    let d = load();
    let plain = decapsulated(&v4);
    let mut truncated = outer(HOST_V4, 4, None, &v4);
    truncated.truncate(ETH_HLEN + 20 + 10);
    let mut fragment = outer(HOST_V4, 4, None, &v4);
    fragment[ETH_HLEN + 6] = 0x20; // MF, offset 0
    refresh_ipv4_checksum(&mut fragment[ETH_HLEN..]);
    let mut bad_udp_len = outer(HOST_V4, 17, Some(GUE_PORT), &v4);
    bad_udp_len[ETH_HLEN + 20 + 5] ^= 1;
    let mut gue_v0 = vec![0u8; 4]; // a GUE variant 0 header: not what weir sends
    gue_v0.extend_from_slice(&v4);
    run(
        &d,
        vec![
            case("a plain packet", plain, Pass, None, NotEncap),
            case(
                "UDP to another port",
                outer(HOST_V4, 17, Some(6081), &v4),
                Pass,
                None,
                NotEncap,
            ),
            case(
                "ipip to an address not this host's",
                outer("10.1.0.99", 4, None, &v4),
                Pass,
                None,
                NotOurs,
            ),
            case(
                "gue to an IPv6 address not this host's",
                outer("2001:db8:1::99", 17, Some(GUE_PORT), &v6),
                Pass,
                None,
                NotOurs,
            ),
            case(
                "ipip truncated inside the inner header",
                truncated,
                Drop,
                None,
                Malformed,
            ),
            case(
                "ipip, a fragment of the outer datagram",
                fragment,
                Drop,
                None,
                Malformed,
            ),
            case(
                "gue with a UDP length that disagrees",
                bad_udp_len,
                Drop,
                None,
                Malformed,
            ),
            case(
                "gue variant 0 (a GUE header)",
                outer(HOST_V4, 17, Some(GUE_PORT), &gue_v0),
                Drop,
                None,
                Malformed,
            ),
            case(
                "proto 4 with an IPv6 inner header",
                outer(HOST_V4, 4, None, &v6),
                Drop,
                None,
                Malformed,
            ),
            case(
                "ipip with nothing inside",
                outer(HOST_V4, 4, None, &[]),
                Drop,
                None,
                Malformed,
            ),
        ],
    );
}

#[test]
fn mutated_encapsulations_only_pass_or_drop_and_every_frame_is_counted() {
    use weir_core::splitmix::SplitMix;
    let (v4, v6) = (inner(false), inner(true));
    let d = load();
    let seeds = [
        outer(HOST_V4, 4, None, &v4),
        outer(HOST_V6, 41, None, &v6),
        outer(HOST_V6, 4, None, &v4),
        outer(HOST_V4, 17, Some(GUE_PORT), &v4),
        outer(HOST_V6, 17, Some(GUE_PORT), &v6),
    ];
    let mut rng = SplitMix(0x0064_6563_6170);
    let before = d.stats().unwrap();
    let runs = 20_000u64;
    for i in 0..runs {
        let mut f = seeds[(i % seeds.len() as u64) as usize].clone();
        // Flip up to 3 bytes of the headers, then maybe cut the frame.
        for _ in 0..rng.below(4) {
            let at = rng.below(80.min(f.len() as u64)) as usize;
            f[at] ^= 1 << rng.below(8);
        }
        if rng.below(4) == 0 {
            f.truncate(ETH_HLEN + rng.below((f.len() - ETH_HLEN) as u64) as usize);
        }
        let r = d.test_run(&f).unwrap();
        match r.action() {
            Some(Pass) if r.packet.len() < f.len() => {
                // Decapsulated: the inner datagram's version is the ethertype's.
                let et = u16::from_be_bytes([r.packet[12], r.packet[13]]);
                let ver = r.packet[ETH_HLEN] >> 4;
                assert!(
                    (et == ETH_P_IP && ver == 4) || (et == ETH_P_IPV6 && ver == 6),
                    "frame {i}: ethertype {et:#x} with an IPv{ver} header"
                );
                assert_eq!(r.packet[..12], f[..12], "frame {i}: the MACs moved");
            }
            Some(Pass) => assert_eq!(r.packet, f, "frame {i}: passed but changed"),
            Some(Drop) => {}
            other => panic!("frame {i}: {other:?}"),
        }
    }
    let after = d.stats().unwrap();
    let sum = |s: &DecapStats| s.decapsulated + s.not_encap + s.not_ours + s.malformed;
    assert_eq!(sum(&after) - sum(&before), runs, "{after:?}");
    // The mutations leave many frames whole: each outcome is reached.
    assert!(after.decapsulated > before.decapsulated && after.malformed > before.malformed);
    assert!(after.not_encap > before.not_encap && after.not_ours > before.not_ours);
}
