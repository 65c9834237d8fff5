//! `weir_lb` handing packets to one of several workers (lib/software.h),
//! through BPF_PROG_TEST_RUN: which worker's socket a packet goes to in
//! each distribution mode, the number and mark in front of it (struct
//! weir_xsk_meta), the numbers given back when a packet goes nowhere, and
//! adaptive mode's per-bucket counts and worker sets. The expected worker
//! comes from weir-core's flow hash, never from a run.
//!
//! A test run returns XDP_REDIRECT only when a socket is registered where
//! the program redirects (any bound AF_XDP socket will do; the kernel
//! checks its interface and queue only when it delivers), so registering
//! one worker's socket and not the other's tells which worker was picked.
//! Needs root; runs in a network namespace of its own.

mod common;

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_dataplane::loader::{DistMode, LoadOptions, Tier, Workers};
use weir_dataplane::testrun::XdpAction::{self, Drop, Redirect};
use weir_software_engine::distribution::{self, DistributionConfig, Mode, Steering};

const VETH: &str = "wsa";
const BUCKETS: u32 = 4096;

fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    in_new_netns(
        &[
            "ip link add wsa type veth peer name wsb",
            "ip link set wsa up",
            "ip link set wsb up",
        ],
        f,
    )
}

fn harness(mode: DistMode) -> Harness {
    Harness::new(&LoadOptions {
        tier: Tier::Software,
        workers: Workers {
            count: 2,
            mode,
            buckets: BUCKETS,
            spread_all: false,
        },
        ..test_options()
    })
}

/// Two bound sockets, one per worker (only their being bound matters).
fn sockets() -> Vec<weir_afxdp::Socket> {
    weir_afxdp::Socket::group(VETH, 0, &weir_afxdp::Config::default(), 2).unwrap()
}

/// `weir_lb` on `pkt` as if received on the test interface's queue 0:
/// the verdict and the metadata in front of the output, if any.
fn run(h: &Harness, pkt: &[u8]) -> (XdpAction, Option<weir_xsk_meta>) {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
    // rx_queue_index, egress_ifindex.
    let md = [0, pkt.len() as u32, 0, TEST_IFINDEX, 0, 0];
    let mut ctx: Vec<u8> = md.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut out = vec![0u8; pkt.len() + 512];
    let input = libbpf_rs::ProgramInput {
        context_in: Some(&mut ctx),
        data_in: Some(pkt),
        data_out: Some(&mut out),
        ..Default::default()
    };
    let r = h.lb.skel.progs.weir_lb.test_run(input).expect("test run");
    let action = XdpAction::from_raw(r.return_value).expect("an XDP verdict");
    // The output starts at the metadata, which XDP put in front.
    let data = r.data.expect("output data");
    let meta =
        (data.len() == pkt.len() + 8).then(|| weir_xsk_meta::from_bytes(&data[..8]).unwrap());
    (action, meta)
}

fn tcp_from(sport: u16) -> Frame {
    Frame::tcp(ip("192.0.2.1"), sport, ip("10.0.0.100"), 80, TcpFlags::ACK)
        .macs(CLIENT_MAC, VIP_MAC)
}

fn udp_from(sport: u16) -> Frame {
    Frame::udp(ip("192.0.2.1"), sport, ip("10.0.0.100"), 53).macs(CLIENT_MAC, VIP_MAC)
}

fn hash(f: &Frame) -> u32 {
    weir_core::flow_hash::flow_hash(&f.tuple().key(), test_options().hash_seed)
}

fn bucket(f: &Frame) -> u32 {
    distribution::bucket_of(hash(f), BUCKETS)
}

/// The worker weir-core's steering picks for a flow's packet numbered
/// `seq`, in `mode` with two workers (the twin of what XDP does).
fn steered(mode: Mode, f: &Frame, seq: u32) -> u32 {
    let steering = Steering::new(&DistributionConfig::new(mode, 2)).unwrap();
    let tcp = f.proto() == weir_core::flow::Proto::Tcp;
    u32::from(steering.route(hash(f), tcp).worker(seq))
}

fn home(f: &Frame) -> u32 {
    steered(Mode::Flow, f, 0)
}

/// Only `worker`'s socket of queue 0 registered.
fn only(h: &Harness, s: &[weir_afxdp::Socket], worker: u32) {
    let xsks = h.maps.xsks.as_ref().unwrap();
    for w in 0..2u32 {
        let _ = xsks.delete(&w.to_ne_bytes());
    }
    h.maps
        .put_worker(0, 0, worker, &s[worker as usize].fd())
        .unwrap();
}

fn both(h: &Harness, s: &[weir_afxdp::Socket]) {
    for w in 0..2u32 {
        h.maps.put_worker(0, 0, w, &s[w as usize].fd()).unwrap();
    }
}

fn unnumbered(m: Option<weir_xsk_meta>) -> bool {
    m.is_some_and(|m| m.mark == WEIR_XSK_META_UNNUMBERED)
}

fn numbered(m: Option<weir_xsk_meta>) -> Option<u32> {
    m.filter(|m| m.mark == WEIR_XSK_META_NUMBERED)
        .map(|m| m.seq)
}

#[test]
fn flow_mode_keeps_each_flow_on_its_home_worker_unnumbered() {
    in_netns(|| {
        let h = harness(DistMode::Flow);
        let s = sockets();
        only(&h, &s, 0);
        let mut homes = [0; 2];
        for sport in 40000..40064 {
            let f = tcp_from(sport);
            let (action, meta) = run(&h, &f.bytes());
            let want = if home(&f) == 0 { Redirect } else { Drop };
            assert_eq!(action, want, "port {sport}, bucket {}", bucket(&f));
            assert!(unnumbered(meta), "port {sport}: {meta:?}");
            // the same flow again: the same worker
            assert_eq!(run(&h, &f.bytes()).0, want);
            homes[home(&f) as usize] += 1;
        }
        assert!(homes[0] > 10 && homes[1] > 10, "{homes:?}");
        h.assert_balanced("flow");
    });
}

#[test]
fn spray_numbers_tcp_round_robin_and_gives_back_unused_numbers() {
    in_netns(|| {
        let h = harness(DistMode::Spray);
        let s = sockets();
        both(&h, &s);
        let f = tcp_from(40000);
        for seq in 0..6 {
            let (action, meta) = run(&h, &f.bytes());
            assert_eq!((action, numbered(meta)), (Redirect, Some(seq)));
        }
        // Which worker each number goes to, as weir-core steers it.
        for (seq, worker) in [(6, 0), (7, 1)] {
            assert_eq!(steered(Mode::Spray, &f, seq), worker);
        }
        // Worker 1 gone: seq 6 goes to worker 0, seq 7 to worker 1, which
        // has no socket; the number is given back, so it is 7 again next.
        only(&h, &s, 0);
        assert_eq!(numbered(run(&h, &f.bytes()).1), Some(6));
        for _ in 0..3 {
            assert_eq!(run(&h, &f.bytes()).0, Drop);
        }
        both(&h, &s);
        assert_eq!(numbered(run(&h, &f.bytes()).1), Some(7), "no gap");
        // UDP is out of spray's scope: its home worker, unnumbered.
        only(&h, &s, 1);
        let u = udp_from(5000);
        let (action, meta) = run(&h, &u.bytes());
        let want = if home(&u) == 1 { Redirect } else { Drop };
        assert_eq!(action, want);
        assert!(unnumbered(meta), "{meta:?}");
        both(&h, &s);
        assert_eq!(
            numbered(run(&h, &f.bytes()).1),
            Some(8),
            "UDP took no number"
        );
        h.assert_balanced("spray");
    });
}

#[test]
fn adaptive_spreads_only_the_buckets_it_is_told_to_and_counts_them() {
    in_netns(|| {
        let h = harness(DistMode::Adaptive);
        let s = sockets();
        both(&h, &s);
        let f = tcp_from(40000);
        let b = bucket(&f);
        for _ in 0..3 {
            assert!(unnumbered(run(&h, &f.bytes()).1), "not spread yet");
        }
        // The control thread spreads the bucket: home first, then the other.
        let mut set = weir_worker_set {
            len: 2,
            ..Default::default()
        };
        set.ids[0] = home(&f) as u16;
        set.ids[1] = 1 - home(&f) as u16;
        h.maps.put_worker_set(b, &set).unwrap();
        only(&h, &s, home(&f));
        let (action, meta) = run(&h, &f.bytes());
        assert_eq!(
            (action, numbered(meta)),
            (Redirect, Some(0)),
            "seq 0: ids[0]"
        );
        // seq 1 goes to the other worker, which has no socket: given back
        assert_eq!(run(&h, &f.bytes()).0, Drop);
        both(&h, &s);
        assert_eq!(numbered(run(&h, &f.bytes()).1), Some(1));
        // another bucket is not spread
        let other = (40001..41000)
            .map(tcp_from)
            .find(|g| bucket(g) != b)
            .unwrap();
        assert!(unnumbered(run(&h, &other.bytes()).1));
        // UDP is not counted or spread
        assert!(unnumbered(run(&h, &udp_from(5000).bytes()).1));
        let counts = h.maps.dist_packets().unwrap();
        assert_eq!(counts.len(), BUCKETS as usize);
        assert_eq!(counts[b as usize], 6, "every TCP packet of the bucket");
        assert_eq!(counts.iter().sum::<u64>(), 7);
        // back to one worker
        h.maps
            .put_worker_set(b, &weir_worker_set::default())
            .unwrap();
        assert!(unnumbered(run(&h, &f.bytes()).1));
        h.assert_balanced("adaptive");
    });
}

#[test]
fn one_worker_gets_no_metadata_and_the_tables_follow_the_workers() {
    in_netns(|| {
        let h = Harness::new(&LoadOptions {
            tier: Tier::Software,
            ..test_options()
        });
        let s = sockets();
        h.maps.put_worker(0, 0, 0, &s[0].fd()).unwrap();
        let (action, meta) = run(&h, &tcp_from(40000).bytes());
        assert_eq!((action, meta), (Redirect, None));
        let e = h.maps.put_worker(0, 0, 1, &s[1].fd()).unwrap_err();
        assert!(format!("{e:#}").contains("loaded for 1 workers"), "{e:#}");
        let sizes = |h: &Harness| {
            let (sets, packets) = h.maps.dist.as_ref().unwrap();
            (
                h.maps.xsks.as_ref().unwrap().max_entries(),
                sets.max_entries(),
                packets.max_entries(),
            )
        };
        let one_interface = WEIR_MAX_QUEUES;
        assert_eq!(sizes(&h), (one_interface, 1, 1));
        assert_eq!(
            sizes(&harness(DistMode::Adaptive)),
            (2 * one_interface, BUCKETS, BUCKETS)
        );
        assert_eq!(sizes(&harness(DistMode::Spray)), (2 * one_interface, 1, 1));
    });
}
