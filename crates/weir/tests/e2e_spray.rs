//! Spreading packets over the software tier's workers, end to end, in
//! namespaces the tests build and always remove: a bulk TCP transfer
//! through a sprayed nat VIP arrives intact, and, where weir lost nothing,
//! in order at the receiver (its kernel queued no segment out of order);
//! adaptive distribution spreads a flow one worker cannot carry (with an
//! added per-packet cost); every packet of a connection reaches the same
//! backend in every distribution mode; and a distribution that needs more
//! workers than configured, or a bad cost, is refused with nothing left
//! attached.
//!
//! The tests run one at a time (`serial`): each runs two busy-polling
//! workers on the machine's two CPUs, and side by side they would starve
//! each other.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_core::splitmix::SplitMix;
use weir_lab::backend::Backend;
use weir_lab::client::{http_once, spawn_http, udp_requests};
use weir_lab::daemon::Daemon;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

mod common;
use common::{
    assert_nothing_left, dataplane, dip, exe, lab_services, serial, start_backends, start_daemon,
    vip,
};

const NAT_VIP: &str = "10.77.100.1:80";
const DSR_VIP: &str = "10.77.100.2:80";
const UDP_VIP: &str = "10.77.100.1:5353";
/// One nat DIP behind it, backend 1's bulk server.
const BULK_VIP: &str = "10.77.100.3:9000";
const BULK_PORT: u16 = 9000;

/// Two workers, on the machine's first two usable CPUs.
fn workers() -> String {
    let cpus = weir_config::cpus::usable();
    assert!(cpus.len() >= 2, "spreading needs two CPUs: {cpus:?}");
    format!("[{}, {}]", cpus[0], cpus[1])
}

/// The software tier on two workers with `keys` added to [dataplane]:
/// nat, dsr and UDP VIPs over backends 1..=3, and the bulk VIP.
fn config(keys: &str) -> String {
    let head = format!("tier = \"software\"\nworkers = {}\n{keys}", workers());
    dataplane(3, &head)
        + &lab_services(&[(1, 1), (2, 1), (3, 1)])
        + &vip("bulk", "10.77.100.3", 9000, "tcp", "nat")
        + &dip(1, "")
}

fn start(lab: &Lab, keys: &str) -> (Daemon, Vec<Backend>) {
    let backends = start_backends(lab);
    (start_daemon(lab, &config(keys)), backends)
}

/// FNV-1a over a byte stream, to compare what was sent and received.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Backend 1's bulk server: takes one connection, reads it to the end and
/// answers with the byte count and hash of what it got.
fn bulk_server(ns: String) -> std::thread::JoinHandle<anyhow::Result<()>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        enter(&ns)?;
        let listener = TcpListener::bind(("0.0.0.0", BULK_PORT))?;
        listener.set_nonblocking(true)?;
        ready_tx.send(()).ok();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    anyhow::ensure!(Instant::now() < deadline, "no bulk connection in 60 s");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e.into()),
            }
        };
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(Duration::from_secs(20)))?;
        let (mut n, mut hash, mut buf) = (0usize, Fnv::new(), vec![0u8; 1 << 16]);
        loop {
            let got = conn.read(&mut buf)?;
            if got == 0 {
                break;
            }
            n += got;
            hash.update(&buf[..got]);
        }
        conn.write_all(format!("{n} {:016x}\n", hash.0).as_bytes())?;
        Ok(())
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the bulk server did not start");
    h
}

/// Sends a pseudo-random stream through the bulk VIP from the client, at
/// least `bytes` and for at least `duration`; returns what the server says
/// it got and what was sent.
fn bulk_transfer(lab: &Lab, bytes: usize, duration: Duration) -> (String, String) {
    let server = bulk_server(lab.backends[0].clone());
    let ns = lab.client.clone();
    let client = std::thread::spawn(move || -> anyhow::Result<(String, String)> {
        enter(&ns)?;
        let vip: SocketAddr = BULK_VIP.parse()?;
        let mut s = TcpStream::connect_timeout(&vip, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let (mut rng, mut hash, mut chunk) = (SplitMix(7), Fnv::new(), vec![0u8; 1 << 16]);
        let (start, mut sent) = (Instant::now(), 0);
        while sent < bytes || start.elapsed() < duration {
            for word in chunk.chunks_mut(8) {
                word.copy_from_slice(&rng.next_u64().to_ne_bytes());
            }
            hash.update(&chunk);
            s.write_all(&chunk)?;
            sent += chunk.len();
        }
        s.shutdown(Shutdown::Write)?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        Ok((answer.trim().to_string(), format!("{sent} {:016x}", hash.0)))
    });
    let sent = client.join().unwrap().expect("the bulk client");
    server.join().unwrap().expect("the bulk server");
    sent
}

/// Sends 64-byte datagrams of one 5-tuple from namespace `ns` to `vip` as
/// fast as one thread can, for `duration` or `limit` datagrams; returns how
/// many were sent. What comes back is left unread.
fn udp_flood(ns: &str, vip: &str, duration: Duration, limit: u64) -> u64 {
    let (ns, vip) = (ns.to_string(), vip.parse::<SocketAddr>().unwrap());
    std::thread::spawn(move || -> anyhow::Result<u64> {
        enter(&ns)?;
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect(vip)?;
        let (start, mut sent) = (Instant::now(), 0u64);
        while sent < limit && start.elapsed() < duration {
            // A full socket buffer is the flood outrunning the interface:
            // count what left, go on.
            if s.send(&[0x5a; 64]).is_ok() {
                sent += 1;
            }
        }
        Ok(sent)
    })
    .join()
    .unwrap()
    .expect("the UDP flood")
}

/// A TcpExt counter of namespace `ns` (/proc/net/netstat there).
fn tcp_ext(ns: &str, name: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/netstat"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no TcpExt {name} in {ns}"))
}

/// The workers' last reports, after one more has been written.
fn workers_report(d: &Daemon) -> Vec<Value> {
    std::thread::sleep(Duration::from_millis(1200));
    let w = weir_control::tier::read_workers(&d.run_dir()).expect("workers.json");
    w.as_array().unwrap().clone()
}

fn sum(workers: &[Value], f: impl Fn(&Value) -> u64) -> u64 {
    workers.iter().map(f).sum()
}

/// Packets weir lost or released out of order, anywhere it counts.
fn weir_losses(workers: &[Value]) -> u64 {
    let r = |w: &Value, k: &str| w["reorder"][k].as_u64().unwrap_or(0);
    let sock = |w: &Value, k: &str| {
        w["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[k].as_u64().unwrap())
            .sum::<u64>()
    };
    sum(workers, |w| {
        r(w, "timeouts")
            + r(w, "lost")
            + r(w, "overflows")
            + r(w, "out_of_order")
            + sock(w, "rx_dropped")
            + sock(w, "rx_ring_full")
            + sock(w, "tx_ring_full")
            + w["counters"]["cross_dropped"].as_u64().unwrap()
    })
}

/// wc0's packets each worker took (the client's side, where the bulk data
/// comes in).
fn client_side_rx(workers: &[Value]) -> Vec<u64> {
    workers
        .iter()
        .map(|w| {
            w["sockets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["interface"] == "wc0")
                .map(|s| s["rx_packets"].as_u64().unwrap())
                .sum()
        })
        .collect()
}

#[test]
fn a_tcp_transfer_through_a_sprayed_nat_vip_arrives_intact_and_in_order() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    // The workers share two CPUs with the transfer's own threads, and a
    // preempted worker stalls for a scheduler slice (a few ms), far longer
    // than the default hold time of 1 ms. Spray's stage knows which worker
    // each number went to, so it waits for a stalled worker's ring instead.
    let (mut d, _b) = start(&lab, "distribution = \"spray\"");
    let receiver = &lab.backends[0];
    let ofo_before = tcp_ext(receiver, "TCPOFOQueue");
    let (got, sent) = bulk_transfer(&lab, 24 << 20, Duration::ZERO);
    assert_eq!(got, sent, "the bulk stream arrived altered");
    let ofo = tcp_ext(receiver, "TCPOFOQueue") - ofo_before;
    let workers = workers_report(&d);
    // Spray: both workers took the client's packets, round robin.
    let rx = client_side_rx(&workers);
    assert!(rx.iter().all(|&n| n > 1000), "{rx:?}");
    let reorder = |k: &str| sum(&workers, |w| w["reorder"][k].as_u64().unwrap());
    assert!(reorder("completed") > 2000, "{workers:?}");
    assert!(reorder("in_order") > 0, "{workers:?}");
    assert!(
        reorder("held") > 0,
        "the workers finished packets out of order: {workers:?}"
    );
    let lost = weir_losses(&workers);
    eprintln!(
        "spray: receiver out-of-order {ofo}, weir losses {lost}, held {}, late {}",
        reorder("held"),
        reorder("late")
    );
    if lost == 0 {
        assert_eq!(ofo, 0, "weir lost nothing, yet the receiver saw reordering");
    }
    d.stop().unwrap();
}

#[test]
fn adaptive_spreads_a_flow_one_worker_cannot_carry() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    // 100,000 cycles a packet: one worker carries some 25,000 packets a
    // second. The flow is one UDP 5-tuple sent as fast as a thread can, far
    // more than that. (A TCP flow paces itself to its bottleneck, and with
    // its endpoints sharing the two CPUs with the workers, that bottleneck
    // was as often the endpoints as the worker: no test of the decision.)
    let (mut d, _b) = start(
        &lab,
        "distribution = \"adaptive\"\nspray_scope = \"all\"\ncost_cycles = 100000",
    );
    // Long enough for the workers' reports (every 0.5 s) to measure a
    // worker's capacity, and for decisions (every 0.1 s) to follow.
    let sent = udp_flood(&lab.client, UDP_VIP, Duration::from_secs(4), 2_000_000);
    assert!(sent > 100_000, "the flood sent only {sent} datagrams");
    let workers = workers_report(&d);
    // The first worker's report carries the tier's shared parts.
    let spread = workers
        .iter()
        .map(|w| &w["spread"])
        .find(|s| !s.is_null())
        .expect("adaptive decisions in a report");
    assert!(
        spread["widened"].as_u64().unwrap() >= 1,
        "{spread}\nworkers: {workers:?}\n{}",
        std::fs::read_to_string(d.log_path()).unwrap_or_default()
    );
    assert!(spread["capacity_pps"].as_f64().is_some(), "{spread}");
    let rx = client_side_rx(&workers);
    assert!(
        rx.iter().all(|&n| n > 100),
        "the flow reached both workers: {rx:?}"
    );
    let completed = sum(&workers, |w| w["reorder"]["completed"].as_u64().unwrap());
    assert!(
        completed > 100,
        "spread packets went through the reorder stage"
    );
    d.stop().unwrap();
}

#[test]
fn every_packet_of_a_connection_reaches_the_same_backend_in_every_mode() {
    let _serial = serial();
    let lab = Lab::build(3).expect("building the lab");
    let (nat, dsr, udp): (SocketAddr, SocketAddr, SocketAddr) = (
        NAT_VIP.parse().unwrap(),
        DSR_VIP.parse().unwrap(),
        UDP_VIP.parse().unwrap(),
    );
    let _backends = start_backends(&lab);
    let mut d = Daemon::new(exe(), &lab.lb).unwrap();
    for mode in [
        "distribution = \"flow\"",
        "distribution = \"spray\"",
        "distribution = \"spray\"\nreorder = false\nspray_scope = \"all\"",
        "distribution = \"adaptive\"",
    ] {
        d.write_config(&config(mode)).unwrap();
        d.start().unwrap();
        let mut live = spawn_http(&lab.client, nat, 12, 30, Duration::from_millis(20));
        live.extend(spawn_http(
            &lab.client,
            dsr,
            12,
            30,
            Duration::from_millis(20),
        ));
        let seen: std::collections::BTreeSet<String> = (0..30)
            .map(|_| {
                http_once(&lab.client, nat).unwrap_or_else(|e| {
                    panic!(
                        "{mode}: {e:#}\nworkers: {}\nstatus: {}",
                        weir_control::tier::read_workers(&d.run_dir()).unwrap_or_default(),
                        d.status_json().unwrap_or_default()
                    )
                })
            })
            .collect();
        assert!(
            seen.len() >= 2,
            "{mode}: 30 connections reached only {seen:?}"
        );
        let answers = udp_requests(&lab.client, udp, 20, Duration::from_secs(2)).unwrap();
        assert_eq!(
            answers.iter().flatten().count(),
            20,
            "{mode}: UDP {answers:?}"
        );
        for h in live {
            let r = h.join().unwrap();
            assert!(
                !r.violated() && r.served_by.len() == 30,
                "{mode}: a connection moved or broke: {r:?}\nworkers: {}\nstatus: {}\nlog: {}",
                weir_control::tier::read_workers(&d.run_dir()).unwrap_or_default(),
                d.status_json().unwrap_or_default(),
                std::fs::read_to_string(d.log_path()).unwrap_or_default()
            );
        }
        let workers = workers_report(&d);
        let rx = client_side_rx(&workers);
        assert!(
            rx.iter().all(|&n| n > 0),
            "{mode}: a worker got nothing: {rx:?}"
        );
        d.stop().unwrap();
    }
}

#[test]
fn a_distribution_the_workers_cannot_carry_out_is_refused_with_nothing_attached() {
    let _serial = serial();
    let lab = Lab::build(1).expect("building the lab");
    let mut d = Daemon::new(exe(), &lab.lb).unwrap();
    let cpu = weir_config::cpus::usable()[0];
    for (keys, field, what) in [
        (
            format!("tier = \"software\"\nworkers = [{cpu}]\ndistribution = \"spray\""),
            "dataplane.distribution",
            "at least 2 workers",
        ),
        (
            format!("tier = \"software\"\nworkers = [{cpu}]\ncost_cycles = 0"),
            "dataplane.cost_cycles",
            "remove cost_cycles",
        ),
        (
            format!("tier = \"software\"\nworkers = [{cpu}]\ncost_cycles = 99999999"),
            "dataplane.cost_cycles",
            "more than 1000000",
        ),
    ] {
        let text = format!(
            "[dataplane]\ninterfaces = [\"wc0\", \"wb1\"]\n{keys}\n\n[[vip]]\nname = \"web\"\n\
             address = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
             [[vip.dip]]\naddress = \"10.77.1.2\"\n"
        );
        d.write_config(&text).unwrap();
        let err = format!("{:#}", d.start().expect_err("weir serve started"));
        assert!(err.contains(field) && err.contains(what), "{keys}: {err}");
        assert_nothing_left(&d, &lab.lb, &["wc0", "wb1"], &keys);
    }
}
