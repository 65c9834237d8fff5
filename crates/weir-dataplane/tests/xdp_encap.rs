//! The ipip and gue modes of `weir_lb` through BPF_PROG_TEST_RUN: a new flow
//! is dispatched and encapsulated to its DIP, its next packets hit the
//! connection table and leave alike, and a datagram that would exceed
//! `encap_mtu` once encapsulated is dropped and counted (`drop_too_big`).
//!
//! Expected frames are built with `weir_core::wire` (RFC 2003 / RFC 2473 /
//! RFC 8086: outer Ethernet, outer IP with its checksum computed from
//! scratch, UDP for gue) around the client's datagram; the DIP comes from weir-core's prediction. Nothing is taken from a
//! run. Needs root (BPF).

mod common;

use std::net::IpAddr;

use common::*;
use weir_abi::*;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::wire::{encapsulate, Encap as WireEncap, IpRepr};
use weir_dataplane::loader::{Encap, LoadOptions};
use weir_dataplane::testrun::XdpAction::{Drop, Tx};

const IPIP: u32 = WEIR_MODE_IPIP;
const GUE: u32 = WEIR_MODE_GUE;
const GUE_PORT: u16 = 6080;
const PAYLOAD: &[u8] = b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n";

/// The encap VIPs added to the standard fixture (ids past its own).
fn encap_vips() -> Vec<Vip> {
    let vip = |id, a: &str, port, proto, mode, w: &[(u32, u32)]| Vip {
        id,
        addr: ip(a),
        port,
        proto,
        mode,
        weights: Some(w.to_vec()),
    };
    vec![
        vip(12, "10.0.0.110", 80, Proto::Tcp, IPIP, &[(1, 1), (2, 1)]),
        vip(13, "10.0.0.111", 53, Proto::Udp, GUE, &[(2, 1), (3, 1)]),
        vip(
            14,
            "2001:db8::110",
            80,
            Proto::Tcp,
            IPIP,
            &[(11, 1), (13, 1)],
        ),
        vip(
            15,
            "2001:db8::111",
            80,
            Proto::Tcp,
            GUE,
            &[(12, 1), (13, 1)],
        ),
        // One family inside the other: IPv4 in IPv6, IPv6 in IPv4.
        vip(16, "10.0.0.112", 80, Proto::Tcp, IPIP, &[(11, 1), (12, 1)]),
        vip(17, "2001:db8::112", 53, Proto::Udp, GUE, &[(1, 1), (2, 1)]),
    ]
}

fn harness(encap: Encap) -> Harness {
    let mut h = Harness::new(&LoadOptions {
        encap,
        max_vips: 32,
        ..test_options()
    });
    for v in encap_vips() {
        h.maps
            .put_vip(
                &v.key(),
                &weir_vip {
                    vip_id: v.id,
                    mode: v.mode as u8,
                    ..Default::default()
                },
            )
            .unwrap();
        h.maps.publish_table(v.id, 1, &v.table()).unwrap();
        h.fx.vips.push(v);
    }
    h
}

/// The flow's entropy as encap.h defines it: the client's address words
/// and both ports (as they sit in memory), folded and mixed.
fn entropy(t: &FlowTuple) -> u32 {
    let (src, _) = addr_words(t.src);
    let ports = (u32::from(t.sport.to_be()) << 16) | u32::from(t.dport.to_be());
    let mut h = src[0] ^ src[1] ^ src[2] ^ src[3] ^ ports;
    h ^= h >> 16;
    h = h.wrapping_mul(0x45d9f3b);
    h ^ (h >> 16)
}

/// The frame weir must send for client frame `f` to `dip` in `mode`, with
/// the outer source `source` (None: derived from the flow).
fn encapsulated(f: &Frame, dip: &Dip, mode: u32, source: Option<IpAddr>) -> Vec<u8> {
    let input = f.bytes();
    let inner = &input[ETH_HLEN..];
    let h = entropy(&f.tuple());
    let src = match (source, dip.addr) {
        (Some(s), _) => s,
        (None, IpAddr::V4(_)) => IpAddr::from([172, 16, (h >> 8) as u8, h as u8]),
        (None, IpAddr::V6(_)) => {
            let mut s = [
                0xfd, 0x77, 0x65, 0x69, 0x72, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ];
            s[12..].copy_from_slice(&h.to_be_bytes());
            IpAddr::from(s)
        }
    };
    let mut outer = IpRepr::new(src, dip.addr, 0, 0);
    outer.flow_label = h & 0xfffff;
    let how = if mode == GUE {
        WireEncap::Gue {
            sport: 0xc000 | (h & 0x3fff) as u16,
            dport: GUE_PORT,
        }
    } else {
        WireEncap::Ipip
    };
    let mut out = raw_frame(LB_IF_MAC, dip_mac(dip.id), outer.ethertype(), &[]);
    encapsulate(outer, how, inner, &mut out);
    out
}

const MISS_HALF_OPEN: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_HALF_OPEN_NEW];
const MISS_NEW: &[u32] = &[WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW];
const HIT: &[u32] = &[WEIR_STAT_CONN_HIT];

/// A TCP connection through `vip`: the SYN dispatches, the first data
/// packet completes the handshake, the next one hits; each leaves
/// encapsulated to the predicted DIP.
fn tcp_flow(h: &Harness, name: &str, syn: Frame, vip: u32, source: Option<IpAddr>) -> Vec<Case> {
    let mode = h.fx.vip(vip).mode;
    let dip = h.fx.predict(vip, &syn.tuple()).unwrap().clone();
    let data = Frame {
        l4: L4::Tcp(TcpFlags::PSH_ACK),
        ..syn.clone()
    }
    .payload(PAYLOAD);
    let id = dip.id;
    let t = syn.tuple();
    vec![
        Case::new(
            format!("{name}: SYN -> DIP {id}"),
            syn.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .raw_output(encapsulated(&syn, &dip, mode, source))
        .events(MISS_HALF_OPEN),
        Case::new(
            format!("{name}: data completes the handshake"),
            data.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .raw_output(encapsulated(&data, &dip, mode, source))
        .events(MISS_NEW)
        .after(move |h| {
            let c = h.maps.conn(&t.key()).unwrap().expect("an installed entry");
            assert_eq!(c.dip_id, id, "the connection's DIP");
        }),
        Case::new(format!("{name}: data hits"), data.bytes(), Tx, WEIR_STAT_TX)
            .raw_output(encapsulated(&data, &dip, mode, source))
            .events(HIT),
    ]
}

#[test]
fn encapsulates_to_the_dip_v4_v6_ipip_gue() {
    let h = harness(Encap::default());
    let mut cases = Vec::new();
    cases.extend(tcp_flow(
        &h,
        "v4 ipip",
        tcp("192.0.2.1", 40001, "10.0.0.110", 80, TcpFlags::SYN),
        12,
        None,
    ));
    cases.extend(tcp_flow(
        &h,
        "v6 ipip",
        tcp("2001:db8:c::1", 40002, "2001:db8::110", 80, TcpFlags::SYN),
        14,
        None,
    ));
    cases.extend(tcp_flow(
        &h,
        "v6 gue",
        tcp("2001:db8:c::2", 40003, "2001:db8::111", 80, TcpFlags::SYN),
        15,
        None,
    ));
    cases.extend(tcp_flow(
        &h,
        "v4 in v6, ipip",
        tcp("192.0.2.2", 40009, "10.0.0.112", 80, TcpFlags::SYN),
        16,
        None,
    ));
    let u6 = udp("2001:db8:c::9", 5353, "2001:db8::112", 53);
    let dip6 = h.fx.predict(17, &u6.tuple()).unwrap().clone();
    cases.push(
        Case::new("v6 in v4, gue udp", u6.bytes(), Tx, WEIR_STAT_TX)
            .raw_output(encapsulated(&u6, &dip6, GUE, None))
            .events(MISS_NEW),
    );
    // UDP: the first packet installs the connection, the next one hits.
    let u = udp("192.0.2.3", 5353, "10.0.0.111", 53);
    let dip = h.fx.predict(13, &u.tuple()).unwrap().clone();
    let out = encapsulated(&u, &dip, GUE, None);
    cases.push(
        Case::new("v4 gue udp: first packet", u.bytes(), Tx, WEIR_STAT_TX)
            .raw_output(out.clone())
            .events(MISS_NEW),
    );
    cases.push(
        Case::new("v4 gue udp: hit", u.bytes(), Tx, WEIR_STAT_TX)
            .raw_output(out)
            .events(HIT),
    );
    run_cases(&h, cases);
}

#[test]
fn flows_get_distinct_outer_sources_and_udp_ports() {
    // Entropy for the DIP's RSS: different client ports of one client give
    // different derived sources and GUE source ports (checked on the wire).
    let h = harness(Encap::default());
    let mut seen = std::collections::HashSet::new();
    for port in 41000..41016 {
        let u = udp("192.0.2.9", port, "10.0.0.111", 53);
        let r = h.run(&u.bytes());
        assert_eq!(r.action(), Some(Tx));
        let p = &r.packet;
        let (src, sport) = (&p[26..30], &p[34..36]);
        assert_eq!(&src[..2], &[172, 16], "derived source in 172.16.0.0/16");
        assert!(u16::from_be_bytes([sport[0], sport[1]]) >= 0xc000);
        seen.insert((src.to_vec(), sport.to_vec()));
    }
    assert!(
        seen.len() >= 15,
        "16 flows gave only {} distinct",
        seen.len()
    );
}

#[test]
fn configured_outer_sources_and_gue_port() {
    let (s4, s6): (IpAddr, IpAddr) = (ip("198.51.100.7"), ip("2001:db8:ffff::7"));
    let h = harness(Encap {
        source_v4: Some("198.51.100.7".parse().unwrap()),
        source_v6: Some("2001:db8:ffff::7".parse().unwrap()),
        ..Encap::default()
    });
    let mut cases = tcp_flow(
        &h,
        "v4 ipip, configured source",
        tcp("192.0.2.4", 40004, "10.0.0.110", 80, TcpFlags::SYN),
        12,
        Some(s4),
    );
    cases.extend(tcp_flow(
        &h,
        "v6 gue, configured source",
        tcp("2001:db8:c::4", 40005, "2001:db8::111", 80, TcpFlags::SYN),
        15,
        Some(s6),
    ));
    run_cases(&h, cases);
}

#[test]
fn too_big_once_encapsulated_is_dropped_and_counted() {
    // encap_mtu 600: a 580-byte datagram fits as itself (dsr would send
    // it) but not behind 20 (ipip) or 48 (IPv6 + UDP) more bytes.
    let h = harness(Encap {
        mtu: 600,
        ..Encap::default()
    });
    let body = vec![0x5a; 580 - 20 - 8];
    let u4 = udp("192.0.2.5", 6000, "10.0.0.111", 53).payload(&body);
    let small = udp("192.0.2.5", 6001, "10.0.0.111", 53);
    let dip = h.fx.predict(13, &small.tuple()).unwrap().clone();
    let syn6 = tcp("2001:db8:c::5", 40006, "2001:db8::111", 80, TcpFlags::SYN)
        .payload(&vec![0x5a; 600 - 40 - 20]);
    let fits = udp("192.0.2.5", 6002, "10.0.0.111", 53).payload(&vec![0x5a; 600 - 28 - 28]);
    let fits_dip = h.fx.predict(13, &fits.tuple()).unwrap().clone();
    let cases = vec![
        Case::new(
            "v4 gue udp of 580 bytes",
            u4.bytes(),
            Drop,
            WEIR_STAT_DROP_TOO_BIG,
        )
        .events(MISS_NEW),
        Case::new("v4 gue udp, small", small.bytes(), Tx, WEIR_STAT_TX)
            .raw_output(encapsulated(&small, &dip, GUE, None))
            .events(MISS_NEW),
        Case::new(
            "v4 gue udp of exactly encap_mtu once encapsulated",
            fits.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .raw_output(encapsulated(&fits, &fits_dip, GUE, None))
        .events(MISS_NEW),
        Case::new(
            "v6 gue SYN of 600 bytes",
            syn6.bytes(),
            Drop,
            WEIR_STAT_DROP_TOO_BIG,
        )
        .events(MISS_HALF_OPEN),
    ];
    run_cases(&h, cases);
}

#[test]
fn random_flows_leave_exactly_encapsulated_or_too_big() {
    use weir_core::splitmix::SplitMix;
    let h = harness(Encap::default());
    let mut rng = SplitMix(0x0065_6e63_6170);
    let (mut sent, mut too_big) = (0, 0);
    for i in 0..3000u64 {
        let vip = h.fx.vip(12 + rng.below(6) as u32).clone();
        let client = match vip.addr {
            IpAddr::V4(_) => format!("192.0.2.{}", 1 + rng.below(250)),
            IpAddr::V6(_) => format!("2001:db8:c::{:x}", 1 + rng.below(0xfff0)),
        };
        let sport = 1024 + rng.below(60000) as u16;
        let f = match vip.proto {
            Proto::Tcp => {
                let flags =
                    [TcpFlags::SYN, TcpFlags::ACK, TcpFlags::PSH_ACK][rng.below(3) as usize];
                Frame::tcp(ip(&client), sport, vip.addr, vip.port, flags)
            }
            Proto::Udp => Frame::udp(ip(&client), sport, vip.addr, vip.port),
        }
        .macs(CLIENT_MAC, VIP_MAC)
        .payload(&vec![i as u8; rng.below(1500) as usize]);
        let dip = h.fx.predict(vip.id, &f.tuple()).unwrap().clone();
        let want = encapsulated(&f, &dip, vip.mode, None);
        let r = h.run(&f.bytes());
        if want.len() - ETH_HLEN > 1500 {
            assert_eq!(r.action(), Some(Drop), "frame {i}: {} bytes", want.len());
            too_big += 1;
        } else {
            assert_eq!(r.action(), Some(Tx), "frame {i}");
            assert!(r.packet == want, "frame {i}:\n{}", diff(&r.packet, &want));
            sent += 1;
        }
    }
    h.assert_balanced("random flows");
    let s = h.stats();
    assert_eq!(s[WEIR_STAT_DROP_TOO_BIG as usize], too_big);
    assert!(
        sent > 1000 && too_big > 100,
        "sent {sent}, too big {too_big}"
    );
}
