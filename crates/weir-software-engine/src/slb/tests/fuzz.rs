//! Fuzzing [`Slb::process`] with 120,000 frames: valid frames of every
//! kind the software tier sees, and those frames with bit flips, random
//! bytes, truncation, trailing junk and corrupted length fields, plus
//! random bytes with an IP ethertype. Nothing may panic, a frame keeps its
//! length, only a forwarded (or next-hop-dropped) frame may change, the
//! tables keep their bounds while the clock runs and sweeps run, and the
//! counters add up: every frame ends in exactly one outcome.

use super::*;
use weir_core::splitmix::SplitMix;

const RUNS: usize = 120_000;

/// Valid frames of every kind: to nat and dsr VIPs, v4 and v6, every TCP
/// flag mix, UDP with and without checksum, DIP replies, and what is not
/// balanced.
fn seeds(fx: &Fixture) -> Vec<Vec<u8>> {
    let mut s = Vec::new();
    for (client, vips) in [
        ("192.0.2.1", ["10.0.0.100", "10.0.0.101"]),
        ("2001:db8:c::1", ["2001:db8::100", "2001:db8::101"]),
    ] {
        for vip in vips {
            for flags in [SYN, ACK, PSH_ACK, FIN_ACK, RST, SYN_ACK] {
                s.push(tcp(client, 40001, vip, 80, flags).payload(b"hello").bytes());
            }
            s.push(udp(client, 5353, vip, 53).bytes());
        }
    }
    s.push(
        udp("192.0.2.1", 5353, "10.0.0.100", 53)
            .zero_udp_csum()
            .bytes(),
    );
    for d in &fx.dips {
        let peer = ip(if d.addr.is_ipv6() {
            "2001:db8:c::1"
        } else {
            "192.0.2.1"
        });
        for flags in [SYN_ACK, PSH_ACK, FIN_ACK, RST] {
            s.push(
                Frame::tcp(d.addr, d.port_for(80), peer, 40001, flags)
                    .macs(dip_mac(d.id), LB_IF_MAC)
                    .bytes(),
            );
        }
        s.push(client(Frame::udp(d.addr, d.port_for(53), peer, 5353)).bytes());
    }
    let v6 = tcp("2001:db8:c::1", 40001, "2001:db8::100", 80, SYN);
    s.push(ipv6_with_exts(&v6, &ext_chain(3)));
    s.push(ipv6_with_exts(&v6, &[fragment_ext()]));
    s.push(icmp_echo(
        CLIENT_MAC,
        VIP_MAC,
        ip("192.0.2.1"),
        ip("10.0.0.100"),
    ));
    s.push(icmp_echo(
        CLIENT_MAC,
        VIP_MAC,
        ip("2001:db8:c::1"),
        ip("2001:db8::100"),
    ));
    s.push(arp_request(CLIENT_MAC, [192, 0, 2, 1], [10, 0, 0, 100]));
    s.push(ipv4_other_proto(
        CLIENT_MAC,
        VIP_MAC,
        [192, 0, 2, 1],
        [10, 0, 0, 100],
    ));
    s
}

/// One mutation of a seed, or random bytes.
fn mutate(rng: &mut SplitMix, seed: &[u8]) -> Vec<u8> {
    let mut f = seed.to_vec();
    let at = |rng: &mut SplitMix, len: usize| rng.below(len.max(1) as u64) as usize;
    match rng.below(8) {
        0 => {}
        1 => {
            for _ in 0..=rng.below(8) {
                let i = at(rng, f.len());
                f[i] ^= 1 << rng.below(8);
            }
        }
        2 => {
            let i = at(rng, f.len());
            f[i] = rng.next_u64() as u8;
        }
        3 => f.truncate(at(rng, f.len())),
        4 => f.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
        5 => {
            // A length or offset field: IPv4 IHL / total length, IPv6
            // payload length, an extension header length, TCP data offset,
            // UDP length.
            let fields = [14, 16, 17, 18, 19, 54, 55, 46, 47, 38, 39, 58, 59];
            let i = fields[at(rng, fields.len())];
            if i < f.len() {
                f[i] = rng.next_u64() as u8;
            }
        }
        6 => {
            let len = rng.below(200) as usize;
            f = (0..len).map(|_| rng.next_u64() as u8).collect();
        }
        _ => {
            let len = 15 + rng.below(120) as usize;
            f = (0..len).map(|_| rng.next_u64() as u8).collect();
            let ethertype: u16 = if rng.below(2) == 0 { 0x0800 } else { 0x86dd };
            f[12..14].copy_from_slice(&ethertype.to_be_bytes());
            f[14] = if ethertype == 0x0800 { 0x45 } else { 0x60 };
        }
    }
    f
}

/// Whether a frame with this outcome may have been rewritten: forwarded,
/// or dropped for want of a next hop after the nat rewrite.
fn may_change(o: &Outcome) -> bool {
    matches!(
        o,
        Outcome::Forward(_)
            | Outcome::Drop(DropReason::NoRoute)
            | Outcome::Drop(DropReason::NoRedirectTarget)
    )
}

#[test]
fn random_and_mutated_frames_never_panic_and_counters_add_up() {
    let cfg = Config {
        conn_capacity: 512,
        half_open_capacity: 128,
        event_capacity: 64,
        ..test_config()
    };
    let mut env = Env::new(cfg);
    env.slb
        .services_mut()
        .set_local_addrs(["192.0.2.1".parse().unwrap()]);
    let seeds = seeds(&env.fx);
    let mut rng = SplitMix(0xf022_5eed);
    let mut forwarded = 0;
    let mut events = 0;
    for i in 0..RUNS {
        let seed = &seeds[rng.below(seeds.len() as u64) as usize];
        let input = mutate(&mut rng, seed);
        let mut frame = input.clone();
        let o = env.slb.process(&mut frame, IFINDEX, env.now_ns);
        assert_eq!(frame.len(), input.len(), "run {i}: length changed");
        if !may_change(&o) {
            assert_eq!(frame, input, "run {i}: {o:?} changed the frame");
        }
        if let Outcome::Forward(fw) = o {
            forwarded += 1;
            assert_eq!(frame[..6], fw.egress.dst_mac, "run {i}");
            assert_eq!(frame[6..12], fw.egress.src_mac, "run {i}");
        }
        while env.slb.poll_event().is_some() {
            events += 1;
        }
        if i % 1000 == 999 {
            // Time passes (past the half-open and closed timeouts now and
            // then), and the sweep runs.
            env.advance_secs(rng.below(40));
            env.slb.expire(env.now_ns, 32);
        }
        assert!(env.slb.conn_count() <= 512 && env.slb.half_open_count() <= 128);
    }
    let c = env.slb.counters();
    assert_eq!(c.get(WEIR_STAT_RX), RUNS as u64);
    assert_eq!(c.outcomes(), RUNS as u64, "{}", fmt_stats(c.stats()));
    assert_eq!(c.events_lost, 0);
    // The mix reaches every part of the path.
    for stat in [
        WEIR_STAT_TX,
        WEIR_STAT_DROP_MALFORMED,
        WEIR_STAT_PASS_NOT_VIP,
        WEIR_STAT_PASS_NOT_IP,
        WEIR_STAT_PASS_ICMP,
        WEIR_STAT_PASS_FRAGMENT,
        WEIR_STAT_DROP_REPLY_NO_STATE,
        WEIR_STAT_CONN_HIT,
        WEIR_STAT_CONN_NEW,
        WEIR_STAT_HALF_OPEN_NEW,
        WEIR_STAT_SYN_RETRANSMIT,
        WEIR_STAT_CONN_REUSED,
        WEIR_STAT_CONN_CLOSING,
        WEIR_STAT_REV_NAT,
    ] {
        assert!(
            c.get(stat) > 0,
            "{} never happened: {}",
            stat_name(stat),
            fmt_stats(c.stats())
        );
    }
    assert!(
        forwarded > RUNS / 20 && events > 0,
        "{forwarded} forwarded, {events} events"
    );
}
