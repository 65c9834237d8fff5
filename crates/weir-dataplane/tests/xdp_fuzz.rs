//! Fuzzing `weir_lb` through BPF_PROG_TEST_RUN: random and mutated frames
//! (bit flips, truncation, corrupted length fields, random bytes) against a
//! configured load balancer. The program may only answer PASS, DROP or TX
//! (no redirect target exists here), must never grow or shrink a frame,
//! and its counters must add up: RX == runs == sum of outcome counters.
//!
//! A second test sends random *valid* flows and checks each output against
//! an independently built frame (weir-core picks the DIP, `weir_core::wire`
//! builds the frame and its checksums from scratch).

mod common;

use std::net::IpAddr;
use std::time::Instant;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_abi::*;
use weir_dataplane::testrun::XdpAction;

const RUNS: usize = 120_000;

/// Valid frames of every kind the program sees, as mutation seeds.
fn seeds(h: &Harness) -> Vec<Vec<u8>> {
    let c = |f: Frame| f.macs(CLIENT_MAC, VIP_MAC);
    let mut s = Vec::new();
    for flags in [
        TcpFlags::SYN,
        TcpFlags::ACK,
        TcpFlags::PSH_ACK,
        TcpFlags::RST,
    ] {
        s.push(
            c(Frame::tcp(
                ip("192.0.2.1"),
                40001,
                ip("10.0.0.100"),
                80,
                flags,
            ))
            .payload(b"hello"),
        );
        s.push(c(Frame::tcp(
            ip("192.0.2.1"),
            40001,
            ip("10.0.0.101"),
            80,
            flags,
        )));
        s.push(
            c(Frame::tcp(
                ip("2001:db8:c::1"),
                40001,
                ip("2001:db8::100"),
                80,
                flags,
            ))
            .payload(b"hello"),
        );
        s.push(c(Frame::tcp(
            ip("2001:db8:c::1"),
            40001,
            ip("2001:db8::101"),
            80,
            flags,
        )));
    }
    s.push(c(Frame::udp(ip("192.0.2.1"), 5353, ip("10.0.0.100"), 53)));
    s.push(c(Frame::udp(ip("192.0.2.1"), 5353, ip("10.0.0.100"), 53)).zero_udp_csum());
    s.push(c(Frame::udp(ip("192.0.2.1"), 5353, ip("10.0.0.101"), 53)));
    s.push(c(Frame::udp(
        ip("2001:db8:c::1"),
        5353,
        ip("2001:db8::100"),
        53,
    )));
    s.push(c(Frame::udp(
        ip("2001:db8:c::1"),
        5353,
        ip("2001:db8::101"),
        53,
    )));
    s.push(c(Frame::tcp(
        ip("192.0.2.1"),
        40001,
        ip("10.0.0.102"),
        80,
        TcpFlags::SYN,
    )));
    s.push(c(Frame::tcp(
        ip("192.0.2.1"),
        40001,
        ip("10.0.0.200"),
        80,
        TcpFlags::SYN,
    )));
    // Replies from DIPs (they match reverse entries once the flows above ran).
    for d in [1, 2, 3, 11, 12, 13] {
        let dip = h.fx.dip(d);
        let (client, vport) = if dip.addr.is_ipv4() {
            (ip("192.0.2.1"), 80)
        } else {
            (ip("2001:db8:c::1"), 80)
        };
        let port = if dip.port == 0 { vport } else { dip.port };
        s.push(
            Frame::tcp(dip.addr, port, client, 40001, TcpFlags::SYN_ACK)
                .macs(dip_mac(d), LB_IF_MAC),
        );
    }
    let mut out: Vec<Vec<u8>> = s.iter().map(Frame::bytes).collect();
    let v6 = c(Frame::tcp(
        ip("2001:db8:c::2"),
        40002,
        ip("2001:db8::100"),
        80,
        TcpFlags::SYN,
    ));
    out.push(ipv6_with_exts(
        &v6,
        &[(0, vec![1, 4, 0, 0, 0, 0]), (60, vec![1, 4, 0, 0, 0, 0])],
    ));
    out.push(ipv6_with_exts(&v6, &[(44, vec![0, 1, 0, 0, 0, 9])]));
    out.push(icmp_echo(
        CLIENT_MAC,
        VIP_MAC,
        ip("192.0.2.1"),
        ip("10.0.0.100"),
    ));
    out.push(icmp_echo(
        CLIENT_MAC,
        VIP_MAC,
        ip("2001:db8:c::1"),
        ip("2001:db8::100"),
    ));
    out.push(arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]));
    out.push(ipv4_other_proto(
        CLIENT_MAC,
        VIP_MAC,
        [192, 0, 2, 1],
        [10, 0, 0, 100],
    ));
    out
}

/// Offsets of the length-like fields of a frame, found by its ethertype.
fn length_fields(f: &[u8]) -> Vec<(usize, usize)> {
    // (offset, width in bytes)
    let mut v = Vec::new();
    if f.len() < ETH_HLEN + 1 {
        return v;
    }
    match u16::from_be_bytes([f[12], f[13]]) {
        ETH_P_IP => {
            v.push((ETH_HLEN, 1)); // version/IHL
            v.push((ETH_HLEN + 2, 2)); // total length
            v.push((ETH_HLEN + 6, 2)); // flags/fragment offset
            v.push((ETH_HLEN + 9, 1)); // protocol
            let l4 = ETH_HLEN + usize::from(f[ETH_HLEN] & 0x0f) * 4;
            v.push((l4 + 4, 2)); // UDP length
            v.push((l4 + 12, 1)); // TCP data offset
        }
        ETH_P_IPV6 => {
            v.push((ETH_HLEN, 1)); // version
            v.push((ETH_HLEN + 4, 2)); // payload length
            v.push((ETH_HLEN + 6, 1)); // next header
            v.push((ETH_HLEN + 40, 1)); // ext next header
            v.push((ETH_HLEN + 41, 1)); // ext header length
            v.push((ETH_HLEN + 44, 2)); // UDP length
            v.push((ETH_HLEN + 52, 1)); // TCP data offset
        }
        _ => {}
    }
    v.retain(|(o, w)| o + w <= f.len());
    v
}

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut f = seeds[rng.gen_range(0..seeds.len())].clone();
    let rounds = rng.gen_range(1..=3);
    for _ in 0..rounds {
        match rng.gen_range(0..8) {
            // Bit flips, mostly in the headers.
            0 | 1 => {
                for _ in 0..rng.gen_range(1..=4) {
                    let end = if rng.gen_bool(0.8) {
                        f.len().min(80)
                    } else {
                        f.len()
                    };
                    let i = rng.gen_range(0..end);
                    f[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            // A random byte.
            2 => {
                let i = rng.gen_range(0..f.len().min(80));
                f[i] = rng.gen();
            }
            // Truncation (the kernel refuses less than an Ethernet header).
            3 => {
                let len = rng.gen_range(ETH_HLEN..=f.len());
                f.truncate(len);
            }
            // A corrupted length field, with values near the edges.
            4 | 5 => {
                let fields = length_fields(&f);
                if let Some(&(o, w)) = fields.get(rng.gen_range(0..fields.len().max(1))) {
                    let real = f.len() as u32;
                    let v: u32 = match rng.gen_range(0..4) {
                        0 => rng.gen(),
                        1 => real.wrapping_add(rng.gen_range(0..8)).wrapping_sub(4),
                        2 => rng.gen_range(0..64),
                        _ => u32::MAX,
                    };
                    if w == 1 {
                        f[o] = v as u8;
                    } else {
                        f[o..o + 2].copy_from_slice(&(v as u16).to_be_bytes());
                    }
                }
            }
            // Random tail appended.
            6 => {
                let n = rng.gen_range(1..64);
                f.extend((0..n).map(|_| rng.gen::<u8>()));
            }
            // Entirely random bytes, often with an IP ethertype.
            _ => {
                let n = rng.gen_range(ETH_HLEN..256);
                f = (0..n).map(|_| rng.gen()).collect();
                match rng.gen_range(0..3) {
                    0 => f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes()),
                    1 => f[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes()),
                    _ => {}
                }
                if f.len() > ETH_HLEN && f[12..14] == ETH_P_IP.to_be_bytes() && rng.gen_bool(0.5) {
                    f[ETH_HLEN] = 0x45;
                }
                if f.len() > ETH_HLEN && f[12..14] == ETH_P_IPV6.to_be_bytes() && rng.gen_bool(0.5)
                {
                    f[ETH_HLEN] = 0x60;
                }
            }
        }
    }
    f
}

#[test]
fn fuzz_random_and_mutated_frames() {
    let h = Harness::new(&test_options());
    let seeds = seeds(&h);
    let mut rng = StdRng::seed_from_u64(0x7765_6972_f022);
    let start = Instant::now();
    let mut seen = std::collections::HashMap::new();
    let prog = &h.lb.skel.progs.weir_lb;
    // The seeds themselves first, so the reverse entries exist.
    let frames = seeds
        .iter()
        .cloned()
        .chain((0..RUNS - seeds.len()).map(|_| mutate(&mut rng, &seeds)));
    let mut runs = 0u64;
    for f in frames {
        let r = weir_dataplane::testrun::run(prog, &f, 1)
            .unwrap_or_else(|e| panic!("test run refused a {}-byte frame: {e:#}", f.len()));
        let action = r.action();
        assert!(
            matches!(
                action,
                Some(XdpAction::Pass | XdpAction::Drop | XdpAction::Tx)
            ),
            "undocumented verdict {} ({action:?}) for frame {f:02x?}",
            r.raw
        );
        assert_eq!(r.packet.len(), f.len(), "frame length changed: {f:02x?}");
        if action != Some(XdpAction::Tx) && r.packet != f {
            // Only nat may rewrite a frame it then fails to send; that
            // happens only with next-hop failures, which this setup has none of.
            panic!("a frame that was not transmitted was modified: {f:02x?}");
        }
        *seen.entry(action.unwrap()).or_insert(0u64) += 1;
        runs += 1;
    }
    let s = h.stats();
    assert_eq!(runs as usize, RUNS);
    assert_eq!(
        s[WEIR_STAT_RX as usize],
        runs,
        "RX != runs: {}",
        fmt_stats(&s)
    );
    h.assert_balanced("fuzz");
    // The three verdicts must each match their counters.
    let outcomes: u64 = OUTCOMES.map(|i| s[i as usize]).sum();
    let tx = s[WEIR_STAT_TX as usize];
    assert_eq!(seen.get(&XdpAction::Tx).copied().unwrap_or(0), tx);
    let pass = [
        WEIR_STAT_PASS_NOT_IP,
        WEIR_STAT_PASS_NOT_VIP,
        WEIR_STAT_PASS_ICMP,
        WEIR_STAT_PASS_FRAGMENT,
        WEIR_STAT_PASS_NO_NEIGH,
        WEIR_STAT_PASS_MALFORMED,
    ]
    .iter()
    .map(|i| s[*i as usize])
    .sum::<u64>();
    assert_eq!(seen.get(&XdpAction::Pass).copied().unwrap_or(0), pass);
    assert_eq!(
        seen.get(&XdpAction::Drop).copied().unwrap_or(0),
        outcomes - pass - tx
    );
    assert_eq!(s[WEIR_STAT_REDIRECT as usize], 0);
    // The mutations must reach the interesting outcomes, or this test tests little.
    for st in [
        WEIR_STAT_TX,
        WEIR_STAT_DROP_MALFORMED,
        WEIR_STAT_PASS_NOT_IP,
        WEIR_STAT_PASS_NOT_VIP,
        WEIR_STAT_PASS_ICMP,
        WEIR_STAT_PASS_FRAGMENT,
        WEIR_STAT_DROP_NO_BACKEND,
    ] {
        assert!(
            s[st as usize] > 0,
            "fuzzing never reached {}",
            stat_name(st)
        );
    }
    assert!(
        s[WEIR_STAT_REV_NAT as usize] > 0,
        "fuzzing never reached reverse nat"
    );
    eprintln!(
        "{RUNS} frames in {:.1?}: {}",
        start.elapsed(),
        fmt_stats(&s)
    );
}

/// Random valid flows to the nat and dsr VIPs: every output must equal the
/// frame built independently, checksums included.
#[test]
fn random_valid_flows_match_the_reference() {
    valid_flows_match_the_reference(&test_options());
}

/// Per-CPU LRU lists (`ConnLru::PerCpu`) must not change what the tables keep.
#[test]
fn random_valid_flows_match_the_reference_with_per_cpu_lru() {
    valid_flows_match_the_reference(&weir_dataplane::loader::LoadOptions {
        conn_lru: weir_dataplane::loader::ConnLru::PerCpu,
        ..test_options()
    });
}

fn valid_flows_match_the_reference(opts: &weir_dataplane::loader::LoadOptions) {
    let h = Harness::new(opts);
    let mut rng = StdRng::seed_from_u64(0x7765_6972_0f10);
    let vips: Vec<Vip> = h.fx.vips.iter().filter(|v| v.id <= 7).cloned().collect();
    let n = 20_000;
    for i in 0..n {
        let v = &vips[rng.gen_range(0..vips.len())];
        let src = if v.addr.is_ipv4() {
            IpAddr::from(rng.gen::<[u8; 4]>())
        } else {
            IpAddr::from(rng.gen::<[u8; 16]>())
        };
        let plen = rng.gen_range(0..64);
        let payload: Vec<u8> = (0..plen).map(|_| rng.gen()).collect();
        let sport = rng.gen_range(1..=u16::MAX);
        let mut f = match v.proto {
            weir_core::flow::Proto::Tcp => Frame::tcp(src, sport, v.addr, v.port, TcpFlags::SYN),
            weir_core::flow::Proto::Udp => Frame::udp(src, sport, v.addr, v.port),
        }
        .macs(CLIENT_MAC, VIP_MAC)
        .payload(&payload);
        if v.addr.is_ipv4() && v.proto == weir_core::flow::Proto::Udp && rng.gen_bool(0.2) {
            f = f.zero_udp_csum();
        }
        let dip = h.fx.predict(v.id, &f.tuple()).unwrap();
        let mut want = f.clone().macs(LB_IF_MAC, dip_mac(dip.id));
        if v.mode == NAT {
            let port = if dip.port == 0 { v.port } else { dip.port };
            want = want.with_dst(dip.addr, port);
        }
        let r = h.run(&f.bytes());
        assert_eq!(r.action(), Some(XdpAction::Tx), "flow {i}: {f:?}");
        let want = want.bytes();
        assert!(
            r.packet == want,
            "flow {i} {f:?}:\n{}",
            diff(&r.packet, &want)
        );
        verify_checksums(&r.packet).unwrap_or_else(|e| panic!("flow {i} {f:?}: {e}"));
    }
    h.assert_balanced("random valid flows");
    assert_eq!(h.stats()[WEIR_STAT_TX as usize], n);
}
