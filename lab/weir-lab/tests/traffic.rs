//! The labs' packet generator and sink end to end, in namespaces: packets
//! offered on live frames from one end of a veth pair are counted by
//! weir_sink at the other. Every offered packet is accounted for: the sink
//! counts it, or the veth counts it lost at its full ring (a veth gives XDP
//! no backpressure, so a receiving CPU that falls behind on a busy machine
//! loses frames). With no loss the sink must see exactly what was offered,
//! flow by flow. The delivery tests take turns, so that they do not starve
//! each other's sinks.
//!
//! Needs root (namespaces, BPF).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weir_core::flow::FlowTuple;
use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_lab::netns::enter;
use weir_lab::topology::attach_pass;
use weir_lab::traffic::lab::Pair;
use weir_lab::traffic::*;

fn packets(pair: &Pair, src: &str, prefix: u8, dst: &str, l4: L4, flows: u32) -> GenSpec {
    let mut spec = GenSpec::new(src.parse().unwrap(), dst.parse().unwrap(), l4);
    spec.sources.prefix = prefix;
    spec.flows = flows;
    spec.dst_mac = mac_in(&pair.sink, "eth0").unwrap();
    spec
}

/// One delivery test at a time (a failed one leaves the lock poisoned, not
/// held, so the others still run).
fn take_turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits until the sink has counted or the veth has lost all `n` packets
/// offered from `pair.gen`'s eth0, and returns the sink's stats and the
/// losses. Fails if some packets are neither.
fn delivered(pair: &Pair, sink: &Sink, n: u64) -> (SinkStats, u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let got = sink.stats().unwrap();
        let lost = ring_full_drops(&pair.gen, "eth0").unwrap();
        if got.packets + lost >= n || Instant::now() >= deadline {
            assert_eq!(
                got.packets + lost,
                n,
                "sink {got:?}, {lost} lost at the ring"
            );
            assert!(got.packets > 0, "nothing arrived ({lost} lost at the ring)");
            return (got, lost);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// N packets over K round-robin flows: the sink counts N, K flows, N / K
/// packets each, and exactly the flows the spec names; or, when the ring
/// lost some, what it counted is a part of exactly that.
fn round_trip(src: &str, prefix: u8, dst: &str, l4: L4, n: u64, k: u32, cpus: usize) {
    let _turn = take_turn();
    let pair = Pair::build(cpus as u32).unwrap();
    let mut spec = packets(&pair, src, prefix, dst, l4, k);
    spec.sources.scramble = Some(5);
    let sink = Sink::attach(
        &pair.sink,
        "eth0",
        &SinkOptions {
            track_flows: k,
            ..Default::default()
        },
    )
    .unwrap();
    let offered = offer(
        &pair.gen,
        "eth0",
        &OfferSpec {
            rate: Some(200_000.0),
            count: Some(n),
            cpus,
            ..OfferSpec::new(spec.clone(), Duration::from_secs(20))
        },
    )
    .unwrap();
    assert_eq!(offered.sent, n);
    let (got, lost) = delivered(&pair, &sink, n);
    assert_eq!(got.bytes, got.packets * spec.frame_len() as u64);
    let flows: HashMap<FlowTuple, u64> = sink.flows().unwrap().into_iter().collect();
    let seen: HashSet<FlowTuple> = flows.keys().copied().collect();
    let want: HashSet<FlowTuple> = (0..u64::from(k)).map(|i| spec.flow(i)).collect();
    let per_flow = n / u64::from(k);
    assert_eq!((got.flows_new, got.flows_full), (seen.len() as u64, 0));
    assert_eq!(flows.values().sum::<u64>(), got.packets);
    if lost == 0 {
        assert_eq!(seen, want);
        assert!(
            flows.values().all(|&c| c == per_flow),
            "every flow gets {per_flow} packets"
        );
    } else {
        assert!(seen.is_subset(&want), "only the spec's flows arrive");
        assert!(flows.values().all(|&c| c <= per_flow));
    }
}

#[test]
fn n_packets_over_k_flows_arrive_exactly() {
    round_trip("10.64.0.0", 20, "10.78.0.2:9", L4::Udp, 100_000, 1000, 1);
}

#[test]
fn two_cpus_and_ipv6_tcp_arrive_exactly() {
    let ack = L4::Tcp {
        flags: tcp_flags::ACK,
    };
    round_trip(
        "fd00:64::",
        112,
        "[fd00:78::2]:80",
        ack,
        60_000,
        500,
        cpus(),
    );
}

#[test]
fn a_syn_flood_from_fresh_spoofed_sources() {
    let _turn = take_turn();
    let pair = Pair::build(1).unwrap();
    let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
    let mut syns = GenSpec::syn_flood("198.18.0.0".parse().unwrap(), 15, vip, 1);
    syns.dst_mac = mac_in(&pair.sink, "eth0").unwrap();
    let sink = Sink::attach(
        &pair.sink,
        "eth0",
        &SinkOptions {
            dport: Some(80),
            track_flows: 1 << 16,
            ..Default::default()
        },
    )
    .unwrap();
    let n = 50_000;
    let t = Instant::now();
    let offered = offer(
        &pair.gen,
        "eth0",
        &OfferSpec {
            rate: Some(100_000.0),
            count: Some(n),
            ..OfferSpec::new(syns, Duration::from_secs(10))
        },
    )
    .unwrap();
    assert_eq!(offered.sent, n);
    // Paced: 50k packets at 100k pps take about half a second.
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    let (got, _) = delivered(&pair, &sink, n);
    assert_eq!((got.syns, got.flows_new), (got.packets, got.packets));
    let net: u32 = u32::from_be_bytes([198, 18, 0, 0]);
    for (t, _) in sink.flows().unwrap() {
        let IpAddr::V4(src) = t.src else {
            panic!("{t:?}")
        };
        assert_eq!(
            u32::from(src) >> 17,
            net >> 17,
            "{src} is outside 198.18.0.0/15"
        );
    }
}

#[test]
fn an_offering_can_be_stopped_early() {
    let pair = Pair::build(1).unwrap();
    let spec = packets(&pair, "10.64.0.1", 32, "10.78.0.2:9", L4::Udp, 1);
    let _sink = Sink::attach(&pair.sink, "eth0", &SinkOptions::default()).unwrap();
    let running = start(
        &pair.gen,
        "eth0",
        &OfferSpec {
            rate: Some(50_000.0),
            ..OfferSpec::new(spec, Duration::from_secs(60))
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    running.stop();
    let offered = running.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(offered.sent > 0 && offered.sent < 60 * 50_000);
}

/// The attached program of `iface` in `ns`.
fn prog_in(ns: &str, iface: &str) -> Option<u32> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns).unwrap();
            attached_prog_id(Iface::by_name(iface).unwrap().ifindex)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn a_sink_borrows_an_interface_and_gives_it_back() {
    let pair = Pair::build(1).unwrap();
    assert_eq!(prog_in(&pair.sink, "eth0"), None);
    {
        let _sink = Sink::attach(&pair.sink, "eth0", &SinkOptions::default()).unwrap();
        assert!(prog_in(&pair.sink, "eth0").is_some());
    }
    assert_eq!(prog_in(&pair.sink, "eth0"), None, "detached on drop");
    attach_pass(&pair.sink, "eth0").unwrap();
    let pass = prog_in(&pair.sink, "eth0").unwrap();
    {
        let sink = Sink::attach(&pair.sink, "eth0", &SinkOptions::default()).unwrap();
        let during = prog_in(&pair.sink, "eth0").unwrap();
        assert_ne!(during, pass);
        let _ = sink.stats().unwrap();
    }
    assert_eq!(prog_in(&pair.sink, "eth0"), Some(pass), "xdp_pass is back");
}

#[test]
fn bad_offers_are_refused_with_the_reason() {
    let pair = Pair::build(1).unwrap();
    let spec = packets(&pair, "10.64.0.1", 32, "10.78.0.2:9", L4::Udp, 1);
    let base = OfferSpec::new(spec.clone(), Duration::from_secs(1));
    let cases: Vec<(&str, &str, OfferSpec, &str)> = vec![
        (&pair.gen, "nope0", base.clone(), "nope0"),
        ("w-no-such-ns", "eth0", base.clone(), "w-no-such-ns"),
        (
            &pair.gen,
            "eth0",
            OfferSpec {
                rate: Some(0.0),
                ..base.clone()
            },
            "rate",
        ),
        (
            &pair.gen,
            "eth0",
            OfferSpec {
                cpus: 0,
                ..base.clone()
            },
            "CPUs",
        ),
        (
            &pair.gen,
            "eth0",
            OfferSpec {
                count: Some(0),
                ..base.clone()
            },
            "count of 0",
        ),
        (
            &pair.gen,
            "eth0",
            OfferSpec {
                batch: 1000,
                ..base.clone()
            },
            "batch",
        ),
        (
            &pair.gen,
            "eth0",
            OfferSpec {
                packets: GenSpec {
                    flows: 2,
                    ..spec.clone()
                },
                ..base.clone()
            },
            "do not fit",
        ),
    ];
    for (ns, iface, offer_spec, want) in cases {
        let err = format!("{:#}", start(ns, iface, &offer_spec).err().unwrap());
        assert!(err.contains(want), "{err} should say {want:?}");
    }
}
