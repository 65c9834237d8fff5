//! Starting the software tier of `weir serve` (`tier = "software"` or
//! `"hybrid"`): the configuration as the workers' load balancer, sockets,
//! distribution, reorder stage and offload policy take it (and as the XDP
//! program's loader takes the workers), and the workers' reports for `weir
//! status` (`<run dir>/workers.json`, rewritten every second).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use weir_config::{Config, Dataplane, NonSynMiss, Tier, Verdict};
use weir_dataplane::iface::Iface;
use weir_dataplane::loader;
use weir_dataplane::maps::Maps;
use weir_software::{SoftwareTier, TierConfig, TierInterface, WorkerStats};
use weir_software_engine::distribution::{DistributionConfig, Mode, SprayScope};
use weir_software_engine::offload::OffloadConfig;
use weir_software_engine::slb;

/// Where the workers' last reports are, for `weir status`.
pub fn workers_file(run_dir: &Path) -> PathBuf {
    run_dir.join("workers.json")
}

/// The workers' last reports as `weir serve` wrote them (a JSON list of
/// `weir_software::WorkerStats`), if it runs a tier.
pub fn read_workers(run_dir: &Path) -> Option<serde_json::Value> {
    let text = fs::read_to_string(workers_file(run_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The same reports, typed, for /metrics (empty without a tier).
pub fn read_worker_stats(run_dir: &Path) -> Vec<WorkerStats> {
    fs::read_to_string(workers_file(run_dir))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// Where XDP's `to_software` at the tier's start is, for `weir status`.
pub fn baseline_file(run_dir: &Path) -> PathBuf {
    run_dir.join("tier.json")
}

/// XDP's counters live in pinned maps and outlive a daemon; its sockets'
/// counters start at zero with it. What this tier's sockets account for is
/// what XDP steered since they were registered: `to_software` read before
/// that, when no socket of this tier could take a packet yet (a
/// predecessor's have closed, so its program steered nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    pub to_software_at_start: u64,
}

/// The baseline `weir serve` wrote, if it runs a tier.
pub fn read_baseline(run_dir: &Path) -> Option<Baseline> {
    let text = fs::read_to_string(baseline_file(run_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The running tier and the thread that writes its reports.
pub struct RunningTier {
    tier: Option<SoftwareTier>,
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<()>>,
    file: PathBuf,
    baseline: PathBuf,
}

impl Drop for RunningTier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.writer.take() {
            let _ = t.join();
        }
        // Sockets first: the report's removal tells a successor the queues
        // are free (release_predecessor), and it writes its own baseline
        // then, so ours goes before.
        drop(self.tier.take());
        let _ = fs::remove_file(&self.baseline);
        let _ = fs::remove_file(&self.file);
    }
}

/// Asks the running daemon `pid` (a `--takeover`'s predecessor) to close
/// its workers' sockets (SIGUSR2), and waits until it has: a queue takes one
/// AF_XDP socket. Until the successor's sockets are registered and its
/// program swapped in, the predecessor's program finds no socket for what
/// it steers to the tier and drops it (`drop_no_worker`): a gap of a few
/// milliseconds, which TCP retransmits over. The fast table's connections
/// (hybrid) go on in XDP throughout.
///
/// A predecessor that does not answer stops the takeover here, with its
/// data plane untouched.
pub fn release_predecessor(pid: u32, run_dir: &Path) -> Result<()> {
    let file = workers_file(run_dir);
    if !file.exists() {
        return Ok(());
    }
    weir_sys::process::send_signal(pid, libc::SIGUSR2).with_context(|| {
        format!("asking the running weir serve (pid {pid}) to release its software tier's sockets")
    })?;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while file.exists() {
        if std::time::Instant::now() >= deadline {
            bail!(
                "the running weir serve (pid {pid}) did not release its software tier's sockets \
                 within 3 s (it still reports workers in {}); the takeover stopped before \
                 touching its data plane: see its log, then retry or restart it",
                file.display()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Starts the tier the configuration asks for (none for `tier = "xdp"`).
pub fn start(
    cfg: &Config,
    ifaces: &[Iface],
    maps: &Maps,
    run_dir: &Path,
) -> Result<Option<RunningTier>> {
    let dp = &cfg.dataplane;
    if dp.tier == Tier::Xdp {
        return Ok(None);
    }
    let cpus: Vec<usize> = dp.workers.get_ref().iter().map(|&c| c as usize).collect();
    if cpus.is_empty() {
        bail!("dataplane.workers: name the workers' CPUs");
    }
    let tc = TierConfig {
        cpus,
        interfaces: ifaces
            .iter()
            .enumerate()
            .map(|(slot, i)| TierInterface {
                name: i.name.clone(),
                ifindex: i.ifindex,
                mac: i.mac,
                xsk_slot: slot as u32,
            })
            .collect(),
        slb: slb_config(cfg),
        offload: (dp.tier == Tier::Hybrid).then(|| {
            let mut o = OffloadConfig::new(*dp.offload.get_ref(), dp.fast_size() as usize);
            o.seed = u64::from(dp.hash_seed) ^ std::process::id() as u64;
            o
        }),
        socket: weir_afxdp::Config::default(),
        distribution: distribution_config(dp),
        reorder: dp.reorders().then(|| dp.reorder_config()),
        cost_cycles: dp.cost_cycles.as_ref().map_or(0, |c| *c.get_ref()),
    };
    let to_software = maps.stats()?[weir_abi::WEIR_STAT_TO_SOFTWARE as usize];
    let baseline = baseline_file(run_dir);
    let text = serde_json::to_vec(&Baseline {
        to_software_at_start: to_software,
    })?;
    fs::create_dir_all(run_dir)
        .and_then(|()| fs::write(&baseline, text))
        .with_context(|| format!("writing {}", baseline.display()))?;
    let tier = match SoftwareTier::start(&tc, maps, &dp.pin_dir) {
        Ok(t) => t,
        Err(e) => {
            let _ = fs::remove_file(&baseline);
            return Err(e);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let file = workers_file(run_dir);
    let mut running = RunningTier {
        tier: None,
        stop: stop.clone(),
        writer: None,
        file: file.clone(),
        baseline,
    };
    let writer = {
        let (stop, shared, file) = (stop.clone(), tier.shared.clone(), file.clone());
        std::thread::Builder::new()
            .name("weir-tier-report".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    let all = shared
                        .workers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    crate::run_report::publish_json(&file, &all);
                }
            })?
    };
    running.tier = Some(tier);
    running.writer = Some(writer);
    Ok(Some(running))
}

/// The workers as the XDP program's loader takes them: one socket per
/// worker on every queue, and the distribution (none in the xdp tier).
pub fn load_workers(cfg: &Config) -> loader::Workers {
    let dp = &cfg.dataplane;
    if dp.tier == Tier::Xdp {
        return loader::Workers::default();
    }
    let d = distribution_config(dp);
    loader::Workers {
        count: u32::from(d.workers),
        mode: match d.mode {
            Mode::Flow => loader::DistMode::Flow,
            Mode::Spray => loader::DistMode::Spray,
            Mode::Adaptive => loader::DistMode::Adaptive,
        },
        buckets: d.buckets,
        spread_all: d.scope == SprayScope::All,
    }
}

/// The workers' distribution as the engine and the loader take it: the
/// configured mode, scope and workers, the engine's defaults for the rest.
fn distribution_config(dp: &Dataplane) -> DistributionConfig {
    DistributionConfig {
        scope: *dp.spray_scope.get_ref(),
        ..DistributionConfig::new(
            *dp.distribution.get_ref(),
            dp.workers.get_ref().len() as u16,
        )
    }
}

/// The worker's load balancer takes the XDP program's knobs, so the tiers
/// decide alike.
fn slb_config(cfg: &Config) -> slb::Config {
    let dp = &cfg.dataplane;
    let action = |v: Verdict| match v {
        Verdict::Pass => slb::Action::Pass,
        Verdict::Drop => slb::Action::Drop,
    };
    slb::Config {
        conn_capacity: dp.conn_table_size as usize,
        half_open_capacity: dp.half_open_size() as usize,
        max_vips: dp.max_vips,
        max_dips: dp.max_dips,
        timeouts: dp.timeouts.to_conn_timeouts().ticks().into(),
        not_vip: action(dp.not_vip),
        icmp: action(dp.icmp),
        fragments: action(dp.fragments),
        malformed: action(dp.malformed),
        nonsyn_miss: match dp.tcp_nonsyn_miss {
            NonSynMiss::Dispatch => slb::NonSynMiss::Dispatch,
            NonSynMiss::Drop => slb::NonSynMiss::Drop,
        },
        hash_seed: dp.hash_seed,
        event_capacity: if dp.tier == Tier::Hybrid { 4096 } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// weir-config checks the distribution without the engine: its refusal
    /// must be the engine's, and what it accepts the engine must accept.
    #[test]
    fn the_configuration_refuses_the_distributions_the_engine_refuses() {
        let file = |keys: &str| {
            format!(
                "[dataplane]\ninterfaces = [\"veth0\"]\ntier = \"software\"\n{keys}\n\
                 [[vip]]\nname = \"web\"\naddress = \"10.0.0.100\"\nport = 80\n\
                 protocol = \"tcp\"\nmode = \"dsr\"\n"
            )
        };
        let one = weir_config::cpus::usable()[0];
        for mode in [Mode::Spray, Mode::Adaptive] {
            let keys = format!("workers = [{one}]\ndistribution = \"{mode}\"");
            let e = Config::parse("t.toml", &file(&keys)).unwrap_err();
            let engine = DistributionConfig::new(mode, 1).validate().unwrap_err();
            assert_eq!(e.message, engine.to_string());
        }
        let cfg = Config::parse("t.toml", &file(&format!("workers = [{one}]"))).unwrap();
        distribution_config(&cfg.dataplane).validate().unwrap();
        let usable = weir_config::cpus::usable();
        if let [a, b, ..] = usable[..] {
            let keys =
                format!("workers = [{a}, {b}]\ndistribution = \"adaptive\"\nspray_scope = \"all\"");
            let cfg = Config::parse("t.toml", &file(&keys)).unwrap();
            let d = distribution_config(&cfg.dataplane);
            assert_eq!((d.workers, d.scope), (2, SprayScope::All));
            d.validate().unwrap();
        }
    }
}
