//! Table-driven BPF_PROG_TEST_RUN tests of the labs' packet generator
//! `weir_gen` and packet sink `weir_sink`.
//!
//! weir_gen: for each case, packet n must be the frame of the flow the case
//! names (n mod flows, or n for fresh sources), byte for byte as etherparse
//! builds it for that 5-tuple, with checksums it computes from scratch, and
//! whose checksums weir_core::csum verifies once more. The 5-tuple of flow i
//! comes from `GenSpec::flow`, the Rust statement of the mapping the program
//! implements in C.
//!
//! weir_sink: verdicts, counters and per-flow counts for frames built here.
//!
//! Needs root (BPF).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};

use etherparse::PacketBuilder;
use weir_core::csum::{checksum, sum_be16};
use weir_core::flow::{FlowTuple, Proto};
use weir_traffic::gen::{tcp_flags, FlowDist, GenSpec, Generator, Sources, L4, TCP_SEQ};
use weir_traffic::sink::{Sink, SinkOptions, SinkStats};

const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// The frame of `t` as etherparse builds it: the generator's fixed fields
/// (TTL 64, DF, TCP seq/ack and window) and a zero payload.
fn expected(spec: &GenSpec, t: &FlowTuple) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(spec.src_mac, spec.dst_mac);
    let ip = match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!(),
    };
    let payload = vec![0u8; spec.payload_len];
    let mut out = Vec::new();
    match spec.l4 {
        L4::Udp => ip.udp(t.sport, t.dport).write(&mut out, &payload).unwrap(),
        L4::Tcp { flags } => {
            let mut b = ip.tcp(t.sport, t.dport, TCP_SEQ, 65535);
            if flags & tcp_flags::FIN != 0 {
                b = b.fin();
            }
            if flags & tcp_flags::SYN != 0 {
                b = b.syn();
            }
            if flags & tcp_flags::RST != 0 {
                b = b.rst();
            }
            if flags & tcp_flags::PSH != 0 {
                b = b.psh();
            }
            if flags & tcp_flags::ACK != 0 {
                b = b.ack(TCP_SEQ);
            }
            b.write(&mut out, &payload).unwrap()
        }
    }
    out
}

/// Checks every checksum of `frame` with weir_core::csum, from scratch.
fn verify_checksums(frame: &[u8]) {
    let l3 = &frame[14..];
    let (pseudo, l4) = if frame[12..14] == [0x08, 0x00] {
        assert_eq!(checksum(&l3[..20], 0), 0, "IPv4 header checksum");
        let pseudo = sum_be16(&l3[12..20], 0) + u32::from(l3[9]) + (l3.len() - 20) as u32;
        (pseudo, &l3[20..])
    } else {
        let pseudo = sum_be16(&l3[8..40], 0) + u32::from(l3[6]) + (l3.len() - 40) as u32;
        (pseudo, &l3[40..])
    };
    assert_eq!(checksum(l4, pseudo), 0, "L4 checksum");
}

struct Case {
    name: &'static str,
    spec: GenSpec,
    /// Packet numbers to run.
    packets: Vec<u64>,
}

fn dst4() -> SocketAddr {
    "10.2.0.1:80".parse().unwrap()
}

fn dst6() -> SocketAddr {
    "[fd00:2::1]:443".parse().unwrap()
}

fn spec(src: &str, prefix: u8, dst: SocketAddr, l4: L4, flows: u32) -> GenSpec {
    let mut s = GenSpec::new(src.parse().unwrap(), dst, l4);
    s.src_mac = SRC_MAC;
    s.dst_mac = DST_MAC;
    s.sources.prefix = prefix;
    s.flows = flows;
    s
}

fn with(mut s: GenSpec, f: impl FnOnce(&mut GenSpec)) -> GenSpec {
    f(&mut s);
    s
}

/// The flow packet n carries under a numbered distribution.
fn flow_of(spec: &GenSpec, n: u64) -> u64 {
    match spec.dist {
        FlowDist::RoundRobin => n % u64::from(spec.flows),
        FlowDist::Fresh => n,
        _ => unreachable!("random distributions are checked by set membership"),
    }
}

#[test]
fn generated_packets_are_the_flows_5_tuples_with_correct_checksums() {
    let syn = L4::Tcp {
        flags: tcp_flags::SYN,
    };
    let psh_ack = L4::Tcp {
        flags: tcp_flags::PSH | tcp_flags::ACK,
    };
    let cases = vec![
        Case {
            name: "udp4, one flow",
            spec: spec("10.1.0.7", 32, dst4(), L4::Udp, 1),
            packets: vec![0, 1, 2, 1000],
        },
        Case {
            name: "udp4, 1000 flows counted up over a /16",
            spec: spec("10.1.0.0", 16, dst4(), L4::Udp, 1000),
            packets: vec![0, 1, 2, 255, 256, 999, 1000, 1001, 123_456],
        },
        Case {
            name: "tcp4 SYN, 1M flows, scrambled /14 x 4 ports",
            spec: with(spec("10.64.0.0", 14, dst4(), syn, 1 << 20), |s| {
                s.sources.port = 1000;
                s.sources.ports = 4;
                s.sources.scramble = Some(42);
            }),
            packets: vec![
                0,
                1,
                2,
                (1 << 18) - 1,
                1 << 18,
                (1 << 20) - 1,
                1 << 20,
                777_777,
            ],
        },
        Case {
            name: "tcp4 ACK, one source address, 50k ports",
            spec: with(
                spec(
                    "10.1.2.3",
                    32,
                    dst4(),
                    L4::Tcp {
                        flags: tcp_flags::ACK,
                    },
                    50_000,
                ),
                |s| {
                    s.sources.port = 10_000;
                    s.sources.ports = 50_000;
                },
            ),
            packets: vec![0, 1, 49_999, 50_000, 99_999],
        },
        Case {
            name: "udp6, 50k flows, scrambled /112 x 2 ports",
            spec: with(spec("fd00:1::", 112, dst6(), L4::Udp, 50_000), |s| {
                s.sources.ports = 2;
                s.sources.scramble = Some(7);
            }),
            packets: vec![0, 1, 65_535, 65_536, 49_999, 50_000, 4_242_424],
        },
        Case {
            name: "tcp6 PSH|ACK, fresh sources over a scrambled /96",
            spec: with(spec("fd00:1::", 96, dst6(), psh_ack, 1), |s| {
                s.dist = FlowDist::Fresh;
                s.sources.ports = 3;
                s.sources.scramble = Some(1);
            }),
            packets: vec![
                0,
                1,
                2,
                (1 << 32) - 1,
                1 << 32,
                (1 << 32) + 5,
                12_345_678_901,
            ],
        },
        Case {
            name: "SYN flood preset: fresh spoofed sources in 198.18.0.0/15",
            spec: with(
                GenSpec::syn_flood("198.18.0.0".parse().unwrap(), 15, dst4(), 9),
                |s| {
                    s.src_mac = SRC_MAC;
                    s.dst_mac = DST_MAC;
                },
            ),
            packets: vec![0, 1, 2, 3, (1 << 17) - 1, 1 << 17, 99_999_999],
        },
        Case {
            name: "udp4, 1000-byte payload, 3 flows",
            spec: with(spec("10.1.0.0", 24, dst4(), L4::Udp, 3), |s| {
                s.payload_len = 1000
            }),
            packets: vec![0, 1, 2, 3, 4],
        },
        Case {
            name: "tcp4 FIN|RST, no payload",
            spec: with(
                spec(
                    "10.1.0.0",
                    24,
                    dst4(),
                    L4::Tcp {
                        flags: tcp_flags::FIN | tcp_flags::RST,
                    },
                    200,
                ),
                |s| s.payload_len = 0,
            ),
            packets: vec![0, 199, 200],
        },
    ];
    for case in &cases {
        let gen = Generator::load(&case.spec).unwrap_or_else(|e| panic!("{}: {e:#}", case.name));
        assert_eq!(gen.frame().len(), case.spec.frame_len(), "{}", case.name);
        for &n in &case.packets {
            let t = case.spec.flow(flow_of(&case.spec, n));
            let got = gen.packet(n).unwrap();
            assert_eq!(
                got,
                expected(&case.spec, &t),
                "{}: packet {n} should be flow {:?}",
                case.name,
                t
            );
            verify_checksums(&got);
            // A live page comes back as a receiver left it: here every
            // header byte scribbled over, as a load balancer that rewrote
            // MACs, addresses, ports and checksums in place would.
            let mut page = gen.frame().to_vec();
            let headers = case.spec.frame_len() - case.spec.payload_len;
            page[..headers].iter_mut().for_each(|b| *b ^= 0xa5);
            assert_eq!(
                gen.packet_on(n, &page).unwrap(),
                got,
                "{}: packet {n} from a recycled, rewritten page",
                case.name
            );
        }
    }
}

#[test]
fn a_udp_checksum_that_folds_to_zero_is_sent_as_ffff() {
    let s = spec("10.0.0.0", 8, dst4(), L4::Udp, 1 << 20);
    // Find a flow whose UDP checksum comes out as 0 and must be sent as ffff.
    let n = (0..1u64 << 20)
        .find(|&i| {
            let f = expected(&s, &s.flow(i));
            f[40..42] == [0xff, 0xff]
        })
        .expect("one flow in 65536 has it");
    let gen = Generator::load(&s).unwrap();
    let got = gen.packet(n).unwrap();
    assert_eq!(got[40..42], [0xff, 0xff]);
    assert_eq!(got, expected(&s, &s.flow(n)));
}

/// Which flow index each produced frame carries, for random distributions.
fn draw(spec: &GenSpec, packets: usize) -> Vec<u64> {
    let index: HashMap<Vec<u8>, u64> = (0..u64::from(spec.flows))
        .map(|i| (expected(spec, &spec.flow(i)), i))
        .collect();
    let gen = Generator::load(spec).unwrap();
    (0..packets)
        .map(|n| {
            let f = gen.packet(n as u64).unwrap();
            *index
                .get(&f)
                .unwrap_or_else(|| panic!("packet {n} is none of the {} flows", spec.flows))
        })
        .collect()
}

#[test]
fn uniform_flows_spread_over_all_flows() {
    let s = with(spec("10.1.0.0", 24, dst4(), L4::Udp, 64), |s| {
        s.dist = FlowDist::Uniform
    });
    let seen: HashSet<u64> = draw(&s, 400).into_iter().collect();
    // 400 draws over 64 flows miss a given flow with probability 0.2%.
    assert!(seen.len() >= 56, "only {} of 64 flows drawn", seen.len());
}

#[test]
fn zipf_flows_follow_the_skew() {
    let s = with(spec("10.1.0.0", 24, dst4(), L4::Udp, 100), |s| {
        s.dist = FlowDist::Zipf { s: 1.0 }
    });
    let n = 4000;
    let mut count = vec![0u32; 100];
    for f in draw(&s, n) {
        count[f as usize] += 1;
    }
    let h: f64 = (1..=100).map(|r| 1.0 / f64::from(r)).sum();
    for (k, want) in [(0usize, 1.0 / h), (1, 0.5 / h), (9, 0.1 / h)] {
        let got = f64::from(count[k]) / n as f64;
        let sd = (want * (1.0 - want) / n as f64).sqrt();
        assert!(
            (got - want).abs() < 5.0 * sd,
            "flow {k}: share {got:.4}, Zipf(1) says {want:.4}"
        );
    }
}

// ---- weir_sink ----

fn run(prog: BorrowedFd<'_>, frame: &[u8]) -> u32 {
    let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: the frame outlives the call; no output buffers.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    assert_eq!(rc, 0, "BPF_PROG_TEST_RUN of weir_sink");
    opts.retval
}

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

fn tuple(src: &str, sport: u16, dst: &str, dport: u16, proto: Proto) -> FlowTuple {
    FlowTuple {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        sport,
        dport,
        proto,
    }
}

fn frame(t: &FlowTuple, flags: u8, payload: usize) -> Vec<u8> {
    let mut s = GenSpec::new(
        t.src,
        SocketAddr::new(t.dst, t.dport),
        match t.proto {
            Proto::Udp => L4::Udp,
            Proto::Tcp => L4::Tcp { flags },
        },
    );
    s.payload_len = payload;
    expected(&s, t)
}

fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&[0u8; 28]);
    f
}

#[test]
fn the_sink_counts_and_drops_what_matches_and_passes_the_rest() {
    let udp = tuple("10.1.0.1", 1000, "10.2.0.1", 9, Proto::Udp);
    let udp_other_port = tuple("10.1.0.1", 1000, "10.2.0.1", 10, Proto::Udp);
    let tcp = tuple("10.1.0.2", 2000, "10.2.0.1", 9, Proto::Tcp);
    let udp6 = tuple("fd00::1", 3000, "fd00::2", 9, Proto::Udp);
    let syn = frame(&tcp, tcp_flags::SYN, 0);
    let syn_ack = frame(&tcp, tcp_flags::SYN | tcp_flags::ACK, 0);
    let f_udp = frame(&udp, 0, 18);
    let f_udp6 = frame(&udp6, 0, 100);
    let truncated = f_udp[..30].to_vec();

    struct SinkCase {
        name: &'static str,
        opts: SinkOptions,
        /// (frame, expected verdict)
        frames: Vec<(Vec<u8>, u32)>,
        want: SinkStats,
    }
    let all = SinkOptions::default();
    let cases = vec![
        SinkCase {
            name: "defaults: every TCP/UDP frame counted and dropped",
            opts: all,
            frames: vec![
                (f_udp.clone(), XDP_DROP),
                (f_udp6.clone(), XDP_DROP),
                (syn.clone(), XDP_DROP),
                (syn_ack.clone(), XDP_DROP),
                (arp(), XDP_PASS),
                (truncated.clone(), XDP_PASS),
            ],
            want: SinkStats {
                packets: 4,
                bytes: (f_udp.len() + f_udp6.len() + syn.len() + syn_ack.len()) as u64,
                syns: 1,
                passed: 2,
                ..Default::default()
            },
        },
        SinkCase {
            name: "port and protocol filter",
            opts: SinkOptions {
                proto: Some(Proto::Udp),
                dport: Some(9),
                ..all
            },
            frames: vec![
                (f_udp.clone(), XDP_DROP),
                (frame(&udp_other_port, 0, 18), XDP_PASS),
                (syn.clone(), XDP_PASS),
                (f_udp6.clone(), XDP_DROP),
            ],
            want: SinkStats {
                packets: 2,
                bytes: (f_udp.len() + f_udp6.len()) as u64,
                passed: 2,
                ..Default::default()
            },
        },
        SinkCase {
            name: "count and pass on",
            opts: SinkOptions { drop: false, ..all },
            frames: vec![(f_udp.clone(), XDP_PASS), (syn.clone(), XDP_PASS)],
            want: SinkStats {
                packets: 2,
                bytes: (f_udp.len() + syn.len()) as u64,
                syns: 1,
                ..Default::default()
            },
        },
    ];
    for case in cases {
        let sink = Sink::load(&case.opts).unwrap();
        for (i, (f, verdict)) in case.frames.iter().enumerate() {
            assert_eq!(run(sink.prog_fd(), f), *verdict, "{}: frame {i}", case.name);
        }
        assert_eq!(sink.stats().unwrap(), case.want, "{}", case.name);
        sink.clear().unwrap();
        assert_eq!(
            sink.stats().unwrap(),
            SinkStats::default(),
            "{}: cleared",
            case.name
        );
    }
}

#[test]
fn the_sink_counts_packets_per_flow_up_to_its_table_size() {
    let flows: Vec<FlowTuple> = (0..3)
        .map(|i| tuple("10.1.0.1", 1000 + i, "10.2.0.1", 9, Proto::Udp))
        .chain([tuple("fd00::1", 5, "fd00::2", 9, Proto::Tcp)])
        .collect();
    let sink = Sink::load(&SinkOptions {
        track_flows: 3,
        ..Default::default()
    })
    .unwrap();
    // Flow k gets k + 1 packets; the fourth flow finds the table full.
    for (k, t) in flows.iter().enumerate() {
        for _ in 0..=k {
            assert_eq!(run(sink.prog_fd(), &frame(t, tcp_flags::ACK, 0)), XDP_DROP);
        }
    }
    let st = sink.stats().unwrap();
    assert_eq!((st.packets, st.flows_new, st.flows_full), (10, 3, 4));
    let got: HashMap<FlowTuple, u64> = sink.flows().unwrap().into_iter().collect();
    let want: HashMap<FlowTuple, u64> = flows[..3]
        .iter()
        .enumerate()
        .map(|(k, t)| (*t, k as u64 + 1))
        .collect();
    assert_eq!(got, want);
    sink.clear().unwrap();
    assert!(sink.flows().unwrap().is_empty());
}

#[test]
fn generator_sources_are_what_the_spec_says() {
    // A spot check of the documented mapping, independent of Sources::source.
    let s = with(spec("10.1.0.0", 24, dst4(), L4::Udp, 512), |s| {
        s.sources = Sources {
            net: "10.1.0.0".parse().unwrap(),
            prefix: 24,
            port: 5000,
            ports: 2,
            scramble: None,
        }
    });
    assert_eq!(s.flow(3).src, "10.1.0.3".parse::<IpAddr>().unwrap());
    assert_eq!((s.flow(3).sport, s.flow(256 + 3).sport), (5000, 5001));
}
