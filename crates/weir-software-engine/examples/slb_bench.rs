//! CPU cost per packet of the software load balancer (`weir_software_engine::slb`),
//! one core, no I/O: frames are copied from a template into one buffer
//! (as a NIC would deliver them), the client address patched per flow, and
//! handed to `Slb::process`. Prints ns/packet per path, best of 5 runs,
//! with the cost of the copy alone as its own row. Time is the thread's
//! CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine wall time also
//! counts the other processes' turns.
//!
//!     cargo run --release -p weir-core --example slb_bench [-- --packets N]
//!
//! The configuration is the default one (`slb::Config::default()`: 1M
//! established and 256k half-open entries, events on) with a nat and a dsr
//! VIP of four DIPs; "1M flows" spreads packets at random over a million
//! connections, far more than the CPU caches hold (`weir-lab bench xdp`'s
//! "spread"); its setup sends 2M packets first.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::addr_words;
use weir_core::splitmix::SplitMix;
use weir_core::wire::{Frame, TcpFlags};
use weir_software_engine::slb::{Config, Outcome, Slb};

const IFINDEX: u32 = 1;
const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xcc];
const VIP: [u8; 4] = [10, 0, 0, 100];
const DSR_VIP: [u8; 4] = [10, 0, 0, 101];
/// Where the client's IPv4 address sits in a frame.
const SRC_OFF: usize = 14 + 12;
const RUNS: usize = 5;

fn frame(tcp_flags: Option<u8>, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let (src, dst) = (IpAddr::from(src), IpAddr::from(dst));
    let f = match tcp_flags {
        Some(bits) => Frame::tcp(src, sport, dst, dport, TcpFlags::from_bits(bits)),
        None => Frame::udp(src, sport, dst, dport),
    };
    // 64-byte frames (with the 4-byte FCS on the wire).
    f.macs(CLIENT_MAC, LB_MAC).payload(&[0; 6]).bytes()
}

/// The client address of flow `i` (10.64.0.0/10 and up).
fn client(i: u32) -> [u8; 4] {
    (0x0a40_0000 + i).to_be_bytes()
}

fn setup() -> Slb {
    let mut slb = Slb::new(Config::default()).unwrap();
    let s = slb.services_mut();
    s.set_interface(IFINDEX, LB_MAC);
    for id in 1..=4u32 {
        let (addr, family) = addr_words(IpAddr::V4(Ipv4Addr::new(10, 1, 0, id as u8)));
        let dip = weir_dip {
            addr,
            port: 8080u16.to_be(),
            family,
            mac_set: 1,
            mac: [2, 0, 0, 0, 1, id as u8],
            flags: WEIR_DIP_F_LIVE,
            gen: 1,
            ..Default::default()
        };
        s.set_dip(id, dip).unwrap();
    }
    for (id, vip, proto, port, mode) in [
        (0u32, VIP, 6u8, 80u16, WEIR_MODE_NAT),
        (1, VIP, 17, 53, WEIR_MODE_NAT),
        (2, DSR_VIP, 6, 80, WEIR_MODE_DSR),
    ] {
        let (addr, family) = addr_words(IpAddr::from(vip));
        let key = weir_vip_key {
            addr,
            port: port.to_be(),
            proto,
            family,
        };
        let vip = weir_vip {
            vip_id: id,
            mode: mode as u8,
            ..Default::default()
        };
        s.set_vip(key, vip).unwrap();
        let t = AwfdTable::from_weights(&[(1, 4), (2, 2), (3, 2), (4, 1)]).unwrap();
        s.publish_table(id, 1, Arc::new(t)).unwrap();
    }
    slb
}

/// Sends `packets` frames: `template` with the client address of
/// `flow(i)` (and, for replies, as destination). Returns ns/packet.
fn run(
    slb: &mut Slb,
    template: &[u8],
    patch_at: Option<usize>,
    packets: u32,
    flow: impl Fn(u32) -> u32,
    now_ns: &mut u64,
) -> f64 {
    let mut buf = template.to_vec();
    let start = weir_sys::thread_cpu_ns();
    for i in 0..packets {
        buf.copy_from_slice(template);
        if let Some(at) = patch_at {
            buf[at..at + 4].copy_from_slice(&client(flow(i)));
        }
        *now_ns += 100;
        let o = slb.process(&mut buf, IFINDEX, *now_ns);
        black_box(&o);
        while slb.poll_event().is_some() {}
    }
    (weir_sys::thread_cpu_ns() - start) as f64 / f64::from(packets)
}

/// The frame copy and patch alone.
fn baseline(template: &[u8], packets: u32) -> f64 {
    let mut buf = template.to_vec();
    let start = weir_sys::thread_cpu_ns();
    for i in 0..packets {
        buf.copy_from_slice(template);
        buf[SRC_OFF..SRC_OFF + 4].copy_from_slice(&client(i));
        black_box(&mut buf);
    }
    (weir_sys::thread_cpu_ns() - start) as f64 / f64::from(packets)
}

fn best(f: impl FnMut() -> f64) -> f64 {
    let mut f = f;
    (0..RUNS).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut packets: u32 = 2_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--packets", Some(n)) => {
                packets = n.parse().unwrap_or_else(|_| {
                    eprintln!("--packets takes a number of packets, got {n:?}");
                    std::process::exit(2)
                })
            }
            _ => {
                eprintln!("usage: slb_bench [--packets N]");
                std::process::exit(2)
            }
        }
    }
    let many: u32 = 1_000_000;
    let mut rng = SplitMix(0x51b_be4c);
    let order: Vec<u32> = (0..packets)
        .map(|_| rng.below(u64::from(many)) as u32)
        .collect();
    let ack = frame(Some(0x10), [0; 4], VIP, 40000, 80);
    let dsr_ack = frame(Some(0x10), [0; 4], DSR_VIP, 40000, 80);
    let syn = frame(Some(0x02), [0; 4], VIP, 40000, 80);
    let dgram = frame(None, [0; 4], VIP, 40000, 53);
    let mut now = 1_000_000_000_000u64;
    let mut rows: Vec<(&str, f64)> = Vec::new();

    rows.push((
        "frame copy only (subtract from the rows below)",
        best(|| baseline(&ack, packets)),
    ));

    // Established nat TCP connections: ACK after ACK (promoted on the 2nd).
    let mut slb = setup();
    run(&mut slb, &ack, Some(SRC_OFF), 2, |_| 0, &mut now);
    rows.push((
        "hit, nat TCP, 1 flow",
        best(|| run(&mut slb, &ack, Some(SRC_OFF), packets, |_| 0, &mut now)),
    ));
    run(&mut slb, &dsr_ack, Some(SRC_OFF), 2, |_| 0, &mut now);
    rows.push((
        "hit, dsr TCP, 1 flow",
        best(|| run(&mut slb, &dsr_ack, Some(SRC_OFF), packets, |_| 0, &mut now)),
    ));
    // Two ACKs each, in chunks the half-open table holds (256k).
    for chunk in (0..many).step_by(100_000) {
        let n = (many - chunk).min(100_000);
        run(&mut slb, &ack, Some(SRC_OFF), n, |i| chunk + i, &mut now);
        run(&mut slb, &ack, Some(SRC_OFF), n, |i| chunk + i, &mut now);
    }
    assert_eq!(
        slb.conn_count(),
        many as usize + 1,
        "the nat flows and the dsr one"
    );
    rows.push((
        "hit, nat TCP, 1M flows (random order)",
        best(|| {
            run(
                &mut slb,
                &ack,
                Some(SRC_OFF),
                packets,
                |i| order[i as usize],
                &mut now,
            )
        }),
    ));

    // Their replies: DIP -> client, rewritten back to the VIP.
    let dip1 = [10, 1, 0, 1];
    let reply_flow = (0..many)
        .find(|&i| {
            let key = weir_core::flow::FlowTuple {
                src: IpAddr::from(client(i)),
                dst: IpAddr::from(VIP),
                sport: 40000,
                dport: 80,
                proto: weir_core::flow::Proto::Tcp,
            }
            .key();
            slb.connection(&key).is_some_and(|c| c.conn.dip_id == 1)
        })
        .expect("a flow on DIP 1");
    let reply = frame(Some(0x10), dip1, client(reply_flow), 8080, 40000);
    let o = slb.process(&mut reply.clone(), IFINDEX, now);
    assert!(matches!(o, Outcome::Forward(_)), "reply: {o:?}");
    rows.push((
        "reply, nat TCP, 1 flow (reverse nat)",
        best(|| run(&mut slb, &reply, None, packets, |_| 0, &mut now)),
    ));

    // New flows: every datagram a new UDP 5-tuple, dispatched and installed;
    // once the table is full each one evicts the least recently used.
    let mut slb = setup();
    let mut next = 0u32;
    rows.push((
        "miss, nat UDP, a new flow per packet (dispatch + install)",
        best(|| {
            let base = next;
            next += packets;
            run(
                &mut slb,
                &dgram,
                Some(SRC_OFF),
                packets,
                |i| base + i,
                &mut now,
            )
        }),
    ));
    let udp_entries = slb.conn_count();
    let mut next = 0u32;
    let mut slb = setup();
    rows.push((
        "miss, nat TCP SYN, a new flow per packet (half-open)",
        best(|| {
            let base = next;
            next += packets;
            run(
                &mut slb,
                &syn,
                Some(SRC_OFF),
                packets,
                |i| base + i,
                &mut now,
            )
        }),
    ));

    println!("weir_software_engine::slb on one core, {packets} packets per run, best of {RUNS} (ns/packet)");
    for (name, v) in rows {
        println!("{name:<60} {v:>8.1}");
    }
    println!(
        "(the UDP miss runs sent {} new flows into a table of {} entries: it ended full, {udp_entries} entries)",
        RUNS as u64 * u64::from(packets),
        Config::default().conn_capacity
    );
}
