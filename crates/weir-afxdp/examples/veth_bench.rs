//! One AF_XDP socket forwarding on a veth pair: packets per second and
//! nanoseconds per packet. A benchmark, not a test (run as root):
//!
//! ```text
//! cargo run --release -p weir-afxdp --example veth_bench -- [--seconds 5] [--batch 64] [--busy-poll]
//! ```
//!
//! Side B runs a generator: an AF_XDP socket that sends 64-byte UDP frames
//! (60 bytes plus the FCS) as fast as it can and takes the echoes back
//! through its own weir_xsk_redirect. Side A runs the forwarder under test,
//! pinned to a CPU of its own: it turns each frame around in place (MACs,
//! addresses, ports) and forwards the same frame. ns/packet is the
//! forwarder's busy time (iterations that received something) over the
//! packets it received; on veth that includes the kernel's copy-mode send,
//! which hands each frame to the peer inside the sendto() call.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use common::{attach_redirect, in_netns, udp, VethPair, IF_A, IF_B, IP_A, IP_B, MAC_A, MAC_B};
use weir_afxdp::{pin_current_thread, BusyPoll, Config, Counters, KernelStats, Mode, Socket};
use weir_afxdp::{Verdict, Verdict::Drop};
use weir_traffic::xsk_redirect;

struct Options {
    seconds: f64,
    batch: u32,
    busy_poll: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        seconds: 5.0,
        batch: 64,
        busy_poll: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seconds" => o.seconds = value("--seconds")?.parse()?,
            "--batch" => o.batch = value("--batch")?.parse()?,
            "--busy-poll" => o.busy_poll = true,
            other => bail!("unknown argument {other:?} (--seconds S, --batch N, --busy-poll)"),
        }
    }
    if !(0.1..=600.0).contains(&o.seconds) {
        bail!("--seconds must be from 0.1 to 600");
    }
    Ok(o)
}

/// CPU time (user + system) the calling thread has had.
fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage fills a plain struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Forwarded {
    /// CPU time the forwarder got over wall time: below 1 when other work
    /// shares its CPU, and then every figure below is pessimistic.
    cpu_share: f64,
    counters: Counters,
    kernel: KernelStats,
    busy: Duration,
    elapsed: Duration,
    iterations: u64,
    napi_id: u32,
    busy_poll: Option<BusyPoll>,
}

fn forwarder(
    cpu: usize,
    config: Config,
    ready: mpsc::Sender<()>,
    stop: &AtomicBool,
) -> Result<Forwarded> {
    pin_current_thread(cpu)?;
    let skel = xsk_redirect::load(1)?;
    let _attached = attach_redirect(IF_A, &skel)?;
    let mut socket = Socket::new(IF_A, 0, &config)?;
    socket.register(&skel.maps.xsks)?;
    ready.send(()).ok();
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    let (mut busy, mut iterations) = (Duration::ZERO, 0u64);
    let mut last = start;
    while !stop.load(Ordering::Relaxed) {
        let it = socket.poll_once(|frame| {
            udp::reflect(frame);
            Verdict::Forward
        })?;
        let now = Instant::now();
        if it.is_busy() {
            busy += now - last;
        }
        last = now;
        iterations += 1;
    }
    let elapsed = start.elapsed();
    Ok(Forwarded {
        cpu_share: (thread_cpu_time() - cpu_start).as_secs_f64() / elapsed.as_secs_f64(),
        counters: socket.counters(),
        kernel: socket.kernel_stats()?,
        busy,
        elapsed,
        iterations,
        napi_id: socket.napi_id()?,
        busy_poll: socket.busy_poll(),
    })
}

/// Sends as fast as the TX ring allows for `run`, takes echoes back.
/// Returns (frames sent, echoes received).
fn generator(cpu: usize, config: Config, run: Duration) -> Result<(u64, u64)> {
    pin_current_thread(cpu)?;
    let skel = xsk_redirect::load(1)?;
    let _attached = attach_redirect(IF_B, &skel)?;
    let mut socket = Socket::new(IF_B, 0, &config)?;
    socket.register(&skel.maps.xsks)?;
    let template = udp::frame((MAC_B, MAC_A), (IP_B, 40_000), (IP_A, 7), &[0u8; 18]);
    let batch = socket.batch_size();
    let (mut sent, mut echoes) = (0u64, 0u64);
    let end = Instant::now() + run;
    while Instant::now() < end {
        sent += socket.transmit(batch, |buf| {
            buf[..template.len()].copy_from_slice(&template);
            template.len()
        })? as u64;
        echoes += u64::from(socket.poll_once(|_| Drop)?.received);
    }
    // Echoes of the last frames still in flight.
    let drain = Instant::now() + Duration::from_millis(200);
    while Instant::now() < drain {
        echoes += u64::from(socket.poll_once(|_| Drop)?.received);
    }
    Ok((sent, echoes))
}

fn main() -> Result<()> {
    let opts = options()?;
    let online = std::thread::available_parallelism()?.get();
    let (gen_cpu, fwd_cpu) = (0, online - 1);
    let config = Config {
        mode: Mode::Auto,
        batch_size: opts.batch,
        busy_poll: opts.busy_poll.then(BusyPoll::default),
        ..Config::default()
    };
    let gen_config = Config {
        mode: Mode::Copy,
        busy_poll: None,
        ..config.clone()
    };
    let run = Duration::from_secs_f64(opts.seconds);

    let pair = VethPair::new()?;
    let stop = &AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (fwd, (sent, echoes)) = std::thread::scope(|s| -> Result<_> {
        let fwd = s.spawn(|| {
            in_netns(&pair.ns_a, move || {
                forwarder(fwd_cpu, config, ready_tx, stop)
            })
        });
        let generated = match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(()) => in_netns(&pair.ns_b, || generator(gen_cpu, gen_config, run)),
            Err(_) => Err(anyhow::anyhow!("the forwarder did not come up")),
        };
        stop.store(true, Ordering::Relaxed);
        let fwd = fwd.join().expect("forwarder panicked")?;
        Ok((fwd, generated?))
    })?;

    let c = fwd.counters;
    let k = fwd.kernel;
    let secs = fwd.elapsed.as_secs_f64();
    let mpps = |n: u64| n as f64 / secs / 1e6;
    println!(
        "weir-afxdp on veth, {:.1} s: copy mode (veth has no zero-copy), need_wakeup, batch {}, busy poll {}",
        secs,
        opts.batch,
        match (opts.busy_poll, fwd.busy_poll) {
            (_, Some(bp)) => format!(
                "on ({} µs, budget {}, NAPI id {})",
                bp.usecs, bp.budget, fwd.napi_id
            ),
            (true, None) => format!("asked for, off: NAPI id {}, nothing to poll", fwd.napi_id),
            (false, None) => "off".into(),
        }
    );
    println!(
        "generator  {IF_B} CPU {gen_cpu}: offered {:.3} Mpps, echoes back {:.3} Mpps",
        mpps(sent),
        mpps(echoes)
    );
    println!(
        "forwarder  {IF_A} CPU {fwd_cpu}: {:.3} Mpps forwarded, {:.0} ns/packet busy, mean burst {:.1} of {}, busy {:.0}% of the time",
        mpps(c.tx_packets),
        fwd.busy.as_nanos() as f64 / c.rx_packets.max(1) as f64,
        c.rx_packets as f64 / c.rx_bursts.max(1) as f64,
        opts.batch,
        100.0 * fwd.busy.as_secs_f64() / secs
    );
    println!(
        "  the forwarder had its CPU {:.0}% of the time (the rest went to other work on it)",
        100.0 * fwd.cpu_share
    );
    println!(
        "  iterations {}, bursts {}, sendto {} ({:.2}/burst), recvfrom {}",
        fwd.iterations,
        c.rx_bursts,
        c.tx_wakeups,
        c.tx_wakeups as f64 / c.rx_bursts.max(1) as f64,
        c.rx_wakeups
    );
    println!(
        "  drops: kernel rx_ring_full {} rx_dropped {} fill_ring_empty {}, worker tx_ring_full {}",
        k.rx_ring_full, k.rx_dropped, k.rx_fill_ring_empty_descs, c.tx_ring_full
    );
    Ok(())
}
