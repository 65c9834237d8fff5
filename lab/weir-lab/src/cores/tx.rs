//! The generator of `weir-lab cores`: weir_gen's frames, made once, sent at
//! a paced rate from an AF_XDP socket on the client's interface.
//!
//! Why not live BPF_PROG_TEST_RUN runs, as the other labs offer: each live
//! run waits some 30 ms in the kernel for its teardown, which kernel
//! threads finish; with busy-polling workers on both CPUs those threads
//! wait for a CPU, and the runs' rate collapses. A socket's sends (copy
//! mode: the kernel sends inside sendto()) need nothing but the sending
//! thread, which sleeps between its bursts, so it takes only the CPU its
//! rate needs.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use weir_traffic::gen::Generator;

use crate::netns::enter;
use crate::traffic::GenSpec;

/// How often the sender wakes to send what came due.
const PACE_STEP: Duration = Duration::from_micros(100);

/// `count` packets as weir_gen makes them for `spec` (its flows, in its
/// order; a Zipf mix drawn once), to be sent round and round.
pub fn frames(spec: &GenSpec, count: usize) -> Result<Vec<Vec<u8>>> {
    let generator = Generator::load(spec)?;
    (0..count as u64).map(|n| generator.packet(n)).collect()
}

/// What a paced send did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub packets: u64,
    pub elapsed: Duration,
}

/// Sends `frames` round and round at `rate` packets a second for
/// `duration`, from interface `iface` queue 0 of namespace `ns`, on a
/// thread pinned to `cpu`.
pub fn send(
    ns: &str,
    iface: &str,
    frames: &[Vec<u8>],
    rate: f64,
    duration: Duration,
    cpu: usize,
) -> Result<Sent> {
    ensure!(!frames.is_empty(), "no frames to send");
    ensure!(
        rate.is_finite() && rate >= 1.0,
        "rate {rate}: at least 1 pps"
    );
    std::thread::scope(|s| {
        s.spawn(|| -> Result<Sent> {
            enter(ns)?;
            crate::cpus::pin_current(cpu)?;
            let config = weir_afxdp::Config {
                mode: weir_afxdp::Mode::Copy,
                ..weir_afxdp::Config::default()
            };
            let mut socket = weir_afxdp::Socket::new(iface, 0, &config)
                .with_context(|| format!("an AF_XDP socket to send on {iface}"))?;
            let start = Instant::now();
            let (mut sent, mut next) = (0u64, 0usize);
            loop {
                let elapsed = start.elapsed();
                if elapsed >= duration {
                    return Ok(Sent {
                        packets: sent,
                        elapsed,
                    });
                }
                let due = (rate * elapsed.as_secs_f64()) as u64;
                if due <= sent {
                    std::thread::sleep(PACE_STEP);
                    continue;
                }
                let n = socket.transmit((due - sent) as usize, |buf| {
                    let f = &frames[next % frames.len()];
                    buf[..f.len()].copy_from_slice(f);
                    next += 1;
                    f.len()
                })?;
                sent += n as u64;
                if n == 0 {
                    // The ring is full: the kernel sends what is on it.
                    std::thread::sleep(PACE_STEP);
                }
            }
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the sending thread panicked"))?
    })
}
