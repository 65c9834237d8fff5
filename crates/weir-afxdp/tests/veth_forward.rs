//! End to end on a veth pair (run as root): weir_xsk_redirect on side A
//! steers every frame to an AF_XDP socket, a worker turns UDP datagrams
//! around in place (MACs, addresses, ports) and forwards the same frames
//! back; a plain UDP socket on side B gets every echo, and the counters of
//! both the worker and the kernel add up.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{attach_redirect, dotted, in_netns, udp, VethPair, IF_A, IP_A, IP_B};
use weir_afxdp::{BusyPoll, Config, Counters, KernelStats, Mode, Socket, Verdict};
use weir_traffic::xsk_redirect;

const ECHO_PORT: u16 = 7;
const CLIENT_PORT: u16 = 40_000;
/// Echoes sent in windows of WINDOW, each window answered before the next.
const WINDOWS: usize = 32;
const WINDOW: usize = 32;
/// Datagrams the worker is told to drop (payload starts with "drop").
const DROPS: usize = 16;

/// What the worker saw, by its own classification and by the socket.
struct WorkerReport {
    echoed: u64,
    dropped: u64,
    other: u64,
    counters: Counters,
    kernel: KernelStats,
    zero_copy: bool,
    busy_poll: Option<BusyPoll>,
    napi_id: u32,
}

/// Side A: load and attach the steering program, bind and register the
/// socket, then poll until told to stop.
fn worker(config: Config, ready: mpsc::Sender<()>, stop: &AtomicBool) -> Result<WorkerReport> {
    let skel = xsk_redirect::load(1)?;
    let _attached = attach_redirect(IF_A, &skel)?;
    let mut socket = Socket::new(IF_A, 0, &config)?;
    socket.register(&skel.maps.xsks)?;
    ready.send(()).ok();

    let (mut echoed, mut dropped, mut other) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let it = socket.poll_once(|frame| match udp::dst_port(frame) {
            Some(ECHO_PORT) if frame[udp::PAYLOAD..].starts_with(b"drop") => {
                dropped += 1;
                Verdict::Drop
            }
            Some(ECHO_PORT) => {
                udp::reflect(frame);
                echoed += 1;
                Verdict::Forward
            }
            _ => {
                other += 1;
                Verdict::Drop
            }
        })?;
        ensure!(
            it.received == it.forwarded + it.dropped + it.tx_ring_full,
            "an iteration lost frames: {it:?}"
        );
        ensure!(
            it.received as usize <= socket.batch_size(),
            "burst over the batch size: {it:?}"
        );
    }
    Ok(WorkerReport {
        echoed,
        dropped,
        other,
        counters: socket.counters(),
        kernel: socket.kernel_stats()?,
        zero_copy: socket.zero_copy(),
        busy_poll: socket.busy_poll(),
        napi_id: socket.napi_id()?,
    })
}

/// Side B: windows of echoes, each answered in full and in content, then
/// the datagrams the worker drops. Returns the echoes received.
fn client() -> Result<usize> {
    let sock = UdpSocket::bind((dotted(IP_B), CLIENT_PORT))?;
    sock.set_read_timeout(Some(Duration::from_secs(3)))?;
    let server: SocketAddr = format!("{}:{ECHO_PORT}", dotted(IP_A)).parse()?;
    let mut buf = [0u8; 2048];
    let mut received = 0;
    for w in 0..WINDOWS {
        let mut expected: Vec<String> = (0..WINDOW).map(|i| format!("echo {w} {i}")).collect();
        for msg in &expected {
            sock.send_to(msg.as_bytes(), server)?;
        }
        for _ in 0..WINDOW {
            let (n, from) = sock
                .recv_from(&mut buf)
                .with_context(|| format!("window {w}: {received} echoes so far"))?;
            ensure!(from == server, "echo from {from}, expected {server}");
            let msg = std::str::from_utf8(&buf[..n])?;
            let at = expected
                .iter()
                .position(|e| e == msg)
                .with_context(|| format!("unexpected echo {msg:?}"))?;
            expected.swap_remove(at);
            received += 1;
        }
    }
    for i in 0..DROPS {
        sock.send_to(format!("drop {i}").as_bytes(), server)?;
    }
    // Nothing may come back for those.
    sock.set_read_timeout(Some(Duration::from_millis(300)))?;
    ensure!(
        sock.recv_from(&mut buf).is_err(),
        "a datagram the worker dropped came back"
    );
    Ok(received)
}

fn echo_through_the_socket(config: Config) -> Result<WorkerReport> {
    let pair = VethPair::new()?;
    let stop = &AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let worker = s.spawn(|| in_netns(&pair.ns_a, move || worker(config, ready_tx, stop)));
        let echoes = match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => in_netns(&pair.ns_b, client),
            Err(_) => Err(anyhow::anyhow!("the worker did not come up")),
        };
        stop.store(true, Ordering::Relaxed);
        let report = worker.join().expect("worker panicked")?;
        let echoes = echoes?;
        assert_eq!(echoes, WINDOWS * WINDOW);
        Ok(report)
    })
}

/// Every datagram was seen once, every echo left on the TX ring, nothing
/// was lost anywhere the kernel counts.
fn check_counters(r: &WorkerReport) {
    let sent = (WINDOWS * WINDOW) as u64;
    assert_eq!(r.echoed, sent);
    assert_eq!(r.dropped, DROPS as u64);
    assert_eq!(r.other, 0, "unexpected frames reached the socket");
    let c = r.counters;
    assert_eq!(c.rx_packets, sent + DROPS as u64, "{c:?}");
    assert_eq!(c.tx_packets, sent, "{c:?}");
    assert_eq!(c.released, DROPS as u64, "{c:?}");
    assert_eq!(c.tx_ring_full, 0, "{c:?}");
    assert!(c.rx_bursts >= 1 && c.rx_bursts <= c.rx_packets, "{c:?}");
    // Copy mode sends in sendto(): at least one per burst that forwarded.
    assert!(c.tx_wakeups >= 1, "{c:?}");
    let k = r.kernel;
    assert_eq!(k.rx_dropped, 0, "{k:?}");
    assert_eq!(k.rx_ring_full, 0, "{k:?}");
    assert_eq!(k.rx_invalid_descs, 0, "{k:?}");
    assert_eq!(k.tx_invalid_descs, 0, "{k:?}");
    assert!(!r.zero_copy, "veth has no zero-copy AF_XDP");
}

#[test]
fn echoes_udp_in_place_and_forwards_the_same_frames() -> Result<()> {
    // Auto: veth refuses zero-copy, so this also exercises the fallback.
    let report = echo_through_the_socket(Config {
        mode: Mode::Auto,
        ..Config::default()
    })?;
    check_counters(&report);
    assert_eq!(report.busy_poll, None);
    // need_wakeup: an idle copy-mode socket needs no RX syscalls.
    assert_eq!(report.counters.rx_wakeups, 0, "{:?}", report.counters);
    Ok(())
}

#[test]
fn busy_polling_echoes_the_same() -> Result<()> {
    let busy_poll = BusyPoll::default();
    let report = echo_through_the_socket(Config {
        mode: Mode::Copy,
        busy_poll: Some(busy_poll),
        batch_size: 16,
        ..Config::default()
    })?;
    check_counters(&report);
    // Busy polling stays on where packets come from a NAPI context and is
    // turned off where they do not (veth gives its XDP RX queues none).
    let expected = (report.napi_id != 0).then_some(busy_poll);
    assert_eq!(report.busy_poll, expected, "NAPI id {}", report.napi_id);
    Ok(())
}
