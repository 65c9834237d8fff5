//! Two sockets on one queue sharing a UMEM (run as root): what one receives
//! the other sends, frames kept past a burst go back through either socket,
//! and the group's frames all come back, whichever socket the steering
//! program picks.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::{attach_redirect, dotted, in_netns, udp, VethPair, IF_A, IP_A, IP_B};
use libbpf_rs::{MapCore, MapFlags};
use weir_afxdp::{Config, Frame, Mode, Socket};
use weir_traffic::xsk_redirect;

const ECHO_PORT: u16 = 7;
const CLIENT_PORT: u16 = 40_001;
/// Echoes per phase; the steering program points at the other socket for
/// the second phase.
const PER_PHASE: usize = 200;

/// Side A: socket `rx` of the group receives (it is the one registered),
/// the other turns every echo around and sends it. Switches the
/// registration when told to.
fn worker(
    ready: mpsc::Sender<()>,
    switch: mpsc::Receiver<()>,
    stop: &AtomicBool,
) -> Result<[u64; 2]> {
    let skel = xsk_redirect::load(1)?;
    let _attached = attach_redirect(IF_A, &skel)?;
    let config = Config {
        mode: Mode::Copy,
        ..Config::default()
    };
    let mut sockets = Socket::group(IF_A, 0, &config, 2)?;
    ensure!(sockets.len() == 2, "two sockets");
    ensure!(
        sockets[0].fd() != sockets[1].fd(),
        "each socket has its own fd"
    );
    let mut rx = 0;
    sockets[rx].register(&skel.maps.xsks)?;
    ready.send(()).ok();
    let mut kept: Vec<Frame> = Vec::new();
    let mut received = [0u64; 2];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        if switch.try_recv().is_ok() {
            rx = 1 - rx;
            let fd = sockets[rx].fd();
            skel.maps
                .xsks
                .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)?;
        }
        received[rx] += sockets[rx].receive(&mut kept)? as u64;
        // The other socket owns the TX side of the frames the first got.
        let tx = 1 - rx;
        for mut frame in kept.drain(..) {
            let data = sockets[tx].data_mut(&mut frame);
            if udp::dst_port(data) == Some(ECHO_PORT) {
                udp::reflect(data);
                sockets[tx].queue_tx(frame);
            } else {
                sockets[rx].release(frame);
            }
        }
        sockets[tx].flush()?;
        sockets[rx].flush()?;
    }
    for s in &sockets {
        let k = s.kernel_stats()?;
        ensure!(k.rx_dropped == 0 && k.rx_ring_full == 0, "{k:?}");
    }
    Ok(received)
}

fn echoes(sock: &UdpSocket, server: SocketAddr, phase: usize) -> Result<()> {
    let mut buf = [0u8; 2048];
    for i in 0..PER_PHASE {
        let msg = format!("echo {phase} {i}");
        sock.send_to(msg.as_bytes(), server)?;
        let (n, _) = sock
            .recv_from(&mut buf)
            .with_context(|| format!("phase {phase}: echo {i}"))?;
        ensure!(&buf[..n] == msg.as_bytes(), "echo {i} came back altered");
    }
    Ok(())
}

#[test]
fn two_sockets_on_one_queue_share_frames_both_ways() -> Result<()> {
    let pair = VethPair::new()?;
    let stop = &AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (switch_tx, switch_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let worker = s.spawn(|| in_netns(&pair.ns_a, move || worker(ready_tx, switch_rx, stop)));
        let client = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .context("the worker did not come up")
            .and_then(|()| {
                in_netns(&pair.ns_b, || {
                    let sock = UdpSocket::bind((dotted(IP_B), CLIENT_PORT))?;
                    sock.set_read_timeout(Some(Duration::from_secs(3)))?;
                    let server: SocketAddr = format!("{}:{ECHO_PORT}", dotted(IP_A)).parse()?;
                    echoes(&sock, server, 0)?;
                    switch_tx.send(()).ok();
                    // Echoes sent while the map changes may take either socket.
                    std::thread::sleep(Duration::from_millis(50));
                    echoes(&sock, server, 1)
                })
            });
        stop.store(true, Ordering::Relaxed);
        let received = worker.join().expect("worker panicked")?;
        client?;
        assert!(
            received[0] >= PER_PHASE as u64 && received[1] >= PER_PHASE as u64,
            "each socket received its phase: {received:?}"
        );
        Ok(())
    })
}
