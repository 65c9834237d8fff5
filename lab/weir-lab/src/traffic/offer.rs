//! Offering packets from a namespace: weir_gen on live frames, driven by
//! threads that each enter the namespace, stay on one CPU, and pace their
//! BPF_PROG_TEST_RUN calls to a rate (or run as fast as the CPU goes),
//! bounded by a duration and optionally a packet count.
//!
//! Besides its packets, every live run spends about 30 ms asleep in the
//! kernel (most likely in the teardown of the run's page pool), so each CPU
//! gets two threads: one generates while the other waits. A paced thread sends
//! what came due since its last run, at the generator's full speed, so a
//! paced rate leaves in bursts: with two threads, bursts of 15 ms or more of
//! traffic, which overflow a 2048-entry AF_XDP ring long before the socket's
//! worker is busy. Paced offers therefore run many threads per CPU, started at
//! phases spread over that cycle: their runs interleave, and each sends a
//! sixteenth of what two would.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::Serialize;
use weir_dataplane::iface::Iface;
use weir_traffic::gen::{GenSpec, Generator, LiveSender, MAX_BATCH};

use crate::netns::enter;

/// Kernel time one live run aims at: short enough to stop on time and to
/// show progress, long enough that the run's setup is noise.
const CALL_TIME: Duration = Duration::from_millis(50);
/// Threads per CPU at full speed: while one sleeps in its run's teardown,
/// the other runs.
const THREADS_PER_CPU: usize = 2;
/// Threads per CPU at a paced rate: their runs interleave, so each sends a
/// short burst (see the module's comment).
const PACED_THREADS_PER_CPU: usize = 16;
/// The most packets one live run sends.
const MAX_CALL: u64 = 1 << 20;
/// A live run and the sleep after it, about: paced lanes start spread over
/// it.
const PACE_CYCLE: Duration = Duration::from_millis(32);
/// A paced thread sleeps until this much traffic is due, so that its runs
/// are not single packets.
const PACE_STEP: Duration = Duration::from_millis(1);

/// What to offer, how fast and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferSpec {
    /// The packets. Their source MAC is set to the interface's.
    pub packets: GenSpec,
    /// Packets per second over all threads; None: as fast as possible.
    pub rate: Option<f64>,
    /// Stop after this long, whatever else.
    pub duration: Duration,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// CPUs to generate on: the first ones the calling thread may run on
    /// (narrow its affinity to choose which).
    pub cpus: usize,
    /// Packets per transmit flush (1..=256).
    pub batch: u32,
}

impl OfferSpec {
    /// As fast as possible for `duration`, on one CPU, the kernel's batch.
    pub fn new(packets: GenSpec, duration: Duration) -> OfferSpec {
        OfferSpec {
            packets,
            rate: None,
            duration,
            count: None,
            cpus: 1,
            batch: weir_traffic::gen::DEFAULT_BATCH,
        }
    }

    /// Checks the spec against this machine; the error names what is wrong.
    pub fn validate(&self) -> Result<()> {
        self.check(crate::cpus::allowed()?.len())
    }

    fn check(&self, cpus: usize) -> Result<()> {
        self.packets.validate()?;
        ensure!(
            !self.duration.is_zero() && self.duration <= Duration::from_secs(24 * 3600),
            "duration {:?}: offer for more than 0 and at most 24 h",
            self.duration
        );
        if let Some(r) = self.rate {
            ensure!(
                r.is_finite() && r >= 1.0,
                "rate {r} pps: give at least 1 packet per second, or no rate for as fast as \
                 possible"
            );
        }
        ensure!(
            self.count != Some(0),
            "a packet count of 0 offers nothing; leave it out to bound by duration only"
        );
        ensure!(
            (1..=cpus).contains(&self.cpus),
            "{} generator CPUs: this thread may run on {cpus}",
            self.cpus
        );
        ensure!(
            (1..=MAX_BATCH).contains(&self.batch),
            "batch {}: the kernel takes 1 to {MAX_BATCH} packets per flush",
            self.batch
        );
        Ok(())
    }
}

/// What was offered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Offered {
    /// Packets made and handed to the interface (a full ring on the way
    /// drops some: count them at the receiver).
    pub sent: u64,
    /// From the first packet to the last thread's end.
    #[serde(rename = "elapsed_s", serialize_with = "secs")]
    pub elapsed: Duration,
    /// sent / elapsed.
    pub pps: f64,
    /// Mean kernel time per packet of the live runs (program, transmit).
    pub run_ns_per_packet: f64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Offers `spec` from interface `iface` of namespace `ns` and returns when
/// done.
pub fn offer(ns: &str, iface: &str, spec: &OfferSpec) -> Result<Offered> {
    start(ns, iface, spec)?.wait()
}

/// Traffic being offered in the background.
pub struct Offering {
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<Offered>>>,
}

impl Offering {
    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Asks the threads to stop early; [`Offering::wait`] then returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the end (duration, count or stop).
    pub fn wait(mut self) -> Result<Offered> {
        let handle = self.handle.take().expect("an Offering is waited for once");
        handle
            .join()
            .map_err(|_| anyhow!("the packet generator's thread panicked"))?
    }
}

impl Drop for Offering {
    /// Stops the threads and waits for them: nothing outlives its handle.
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.stop();
            let _ = h.join();
        }
    }
}

/// Starts offering `spec` from `iface` in `ns`. Returns once the program
/// is loaded and every thread is in the namespace on its CPU, so a bad spec,
/// namespace or interface is an error here.
pub fn start(ns: &str, iface: &str, spec: &OfferSpec) -> Result<Offering> {
    let cpus = crate::cpus::allowed()?;
    spec.check(cpus.len())?;
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = sync_channel::<Result<()>>(1);
    let handle = {
        let (ns, iface, spec) = (ns.to_string(), iface.to_string(), spec.clone());
        let (sent, stop) = (sent.clone(), stop.clone());
        std::thread::Builder::new()
            .name("weir-gen".into())
            .spawn(move || generate(&ns, &iface, &spec, &cpus, &sent, &stop, ready_tx))
            .context("starting the packet generator's thread")?
    };
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Offering {
            sent,
            stop,
            handle: Some(handle),
        }),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(match handle.join() {
            Ok(Err(e)) => e,
            _ => anyhow!("the packet generator's thread ended before it was ready"),
        }),
    }
    .with_context(|| format!("offering packets from {iface} in namespace {ns}"))
}

/// The generator's thread: loads weir_gen, starts the workers, reports
/// readiness, and sums up.
fn generate(
    ns: &str,
    iface: &str,
    spec: &OfferSpec,
    cpus: &[usize],
    sent: &AtomicU64,
    stop: &AtomicBool,
    ready: SyncSender<Result<()>>,
) -> Result<Offered> {
    let setup = || -> Result<(Generator, u32)> {
        enter(ns)?;
        let dev = Iface::by_name(iface)?;
        let mut packets = spec.packets.clone();
        packets.src_mac = dev.mac;
        let gen = Generator::load(&packets)?;
        // The threads of one CPU share its counter.
        let lanes: Vec<(usize, u64)> = (0..spec.cpus).map(|t| (cpus[t], t as u64)).collect();
        gen.number_packets(&lanes, spec.cpus as u64)?;
        Ok((gen, dev.ifindex))
    };
    let (gen, ifindex) = match setup() {
        Ok(v) => v,
        Err(e) => {
            let _ = ready.send(Err(anyhow!("{e:#}")));
            return Err(e);
        }
    };
    let sender = gen.live(ifindex);
    let threads = spec.cpus
        * match spec.rate {
            Some(_) => PACED_THREADS_PER_CPU,
            None => THREADS_PER_CPU,
        };
    let go = Barrier::new(threads + 1);
    let (setup_tx, setup_rx) = sync_channel::<Result<()>>(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (go, setup_tx) = (&go, setup_tx.clone());
                let lane = Lane {
                    sender,
                    cpu: cpus[t % spec.cpus],
                    quota: spec.count.map_or(u64::MAX, |c| share(c, threads, t)),
                    rate: spec.rate.map(|r| r / threads as f64),
                    batch: spec.batch,
                    phase: match spec.rate {
                        Some(_) => PACE_CYCLE.mul_f64(t as f64 / threads as f64),
                        None => Duration::ZERO,
                    },
                    sent,
                    stop,
                };
                s.spawn(move || -> Result<LaneResult> {
                    let entered = enter(ns).and_then(|()| crate::cpus::pin_current(lane.cpu));
                    let failed = entered.is_err();
                    let _ = setup_tx.send(entered.map_err(|e| anyhow!("{e:#}")));
                    go.wait();
                    if failed || lane.stop.load(Ordering::Relaxed) {
                        return Ok(LaneResult::default());
                    }
                    lane.run(Instant::now() + spec.duration)
                })
            })
            .collect();
        // Only the workers hold senders now: a worker that dies unheard
        // ends the wait below instead of hanging it.
        drop(setup_tx);
        let setups: Result<Vec<()>> = (0..threads)
            .map(|_| setup_rx.recv().context("a generator thread vanished")?)
            .collect();
        if setups.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let t0 = Instant::now();
        go.wait();
        let _ = ready.send(setups.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}")));
        let results: Vec<Result<LaneResult>> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| bail!("a generator thread panicked"))
            })
            .collect();
        let elapsed = t0.elapsed();
        setups?;
        let mut total = LaneResult::default();
        for r in results {
            let r = r?;
            total.sent += r.sent;
            total.run_ns += r.run_ns;
        }
        Ok(Offered {
            sent: total.sent,
            elapsed,
            pps: total.sent as f64 / elapsed.as_secs_f64(),
            run_ns_per_packet: if total.sent > 0 {
                total.run_ns / total.sent as f64
            } else {
                0.0
            },
        })
    })
}

/// Thread t's part of n packets over k threads.
fn share(n: u64, k: usize, t: usize) -> u64 {
    n / k as u64 + u64::from((t as u64) < n % k as u64)
}

/// One generating thread.
struct Lane<'a> {
    sender: LiveSender<'a>,
    cpu: usize,
    quota: u64,
    rate: Option<f64>,
    batch: u32,
    /// A paced lane starts this late, so that the lanes' runs interleave
    /// instead of bursting together.
    phase: Duration,
    sent: &'a AtomicU64,
    stop: &'a AtomicBool,
}

#[derive(Default)]
struct LaneResult {
    sent: u64,
    /// Sum of packets x kernel time per packet over the runs.
    run_ns: f64,
}

impl Lane<'_> {
    fn run(&self, deadline: Instant) -> Result<LaneResult> {
        std::thread::sleep(
            self.phase
                .min(deadline.saturating_duration_since(Instant::now())),
        );
        let start = Instant::now();
        let mut done = LaneResult::default();
        // Start small, then size runs to CALL_TIME.
        let mut chunk = u64::from(self.batch) * 16;
        while done.sent < self.quota && !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let n = match self.rate {
                None => u64::MAX,
                Some(rate) => {
                    let due = ((now - start).as_secs_f64() * rate) as u64 + 1;
                    if due <= done.sent {
                        let step = (rate * PACE_STEP.as_secs_f64()).max(1.0);
                        let at = start + Duration::from_secs_f64((done.sent as f64 + step) / rate);
                        std::thread::sleep(at.min(deadline).saturating_duration_since(now));
                        continue;
                    }
                    due - done.sent
                }
            };
            let n = n.min(chunk).min(self.quota - done.sent);
            let per_packet = self
                .sender
                .send(n as u32, self.batch)
                .with_context(|| format!("generating on CPU {}", self.cpu))?;
            done.sent += n;
            done.run_ns += per_packet.as_nanos() as f64 * n as f64;
            self.sent.fetch_add(n, Ordering::Relaxed);
            // Size the next run to CALL_TIME of kernel time per packet, so a
            // run never carries the thread far past its deadline.
            let fit = CALL_TIME.as_nanos() as f64 / (per_packet.as_nanos() as f64).max(1.0);
            chunk = (fit as u64).clamp(u64::from(self.batch), MAX_CALL);
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_shared_out_exactly() {
        for (n, k) in [(10, 3), (1, 2), (1_000_000, 2), (7, 1)] {
            let parts: Vec<u64> = (0..k).map(|t| share(n, k, t)).collect();
            assert_eq!(parts.iter().sum::<u64>(), n);
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
    }
}
