//! Adaptive distribution's I/O (seed 003, TBTD): the control thread feeds
//! `weir_software_engine::distribution::adaptive` what XDP counted per bucket and each
//! worker's load, and writes its decisions into the program's per-bucket
//! worker sets. The decisions themselves are sans-IO, in weir-core.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use weir_abi::weir_worker_set;
use weir_dataplane::maps::Maps;
use weir_software_engine::distribution::adaptive::{Adaptive, AdaptiveStats, WorkerSample};
use weir_software_engine::distribution::{DistributionConfig, WorkerSet};
use weir_software_engine::topology::{CacheIndex, Topology};
use weir_software_engine::utilization::Utilization;

/// The adaptive decision of one tier, with what it last read.
pub struct Spreader {
    adaptive: Adaptive,
    /// Each worker's CPU, by worker index.
    cpus: Vec<usize>,
    /// XDP's running totals per bucket at the last decision.
    totals: Vec<u64>,
}

impl Spreader {
    /// `cpus[i]` is worker `i`'s CPU; the cache topology comes from sysfs
    /// (a machine that describes none is flat: every worker as close).
    pub fn new(dist: &DistributionConfig, cpus: &[usize], now_ns: u64) -> Result<Spreader> {
        let topology = read_topology(Path::new("/sys/devices/system/cpu"), cpus)
            .unwrap_or_else(|_| Topology::flat());
        let worker_cpus: Vec<u32> = cpus.iter().map(|&c| c as u32).collect();
        let adaptive = Adaptive::new(dist, &worker_cpus, topology, now_ns)
            .map_err(|e| anyhow::anyhow!("adaptive distribution: {e}"))?;
        Ok(Spreader {
            adaptive,
            cpus: cpus.to_vec(),
            totals: Vec::new(),
        })
    }

    /// A worker's report: its window's packets and load. Returns the
    /// worker's index (None: not a worker of this tier).
    pub fn report(&mut self, cpu: usize, u: &Utilization) -> Option<usize> {
        let worker = self.cpus.iter().position(|&c| c == cpu)?;
        let sample = WorkerSample {
            packets: u.packets,
            load: u.load().unwrap_or_else(|| u.utilization()),
            // The meter times every poll, so its cycles span the window.
            window_ns: u.cycles,
        };
        self.adaptive.report(worker as u16, sample);
        Some(worker)
    }

    /// One interval: reads the buckets' counts, decides, and writes the
    /// buckets whose workers changed.
    pub fn decide(&mut self, maps: &Maps, now_ns: u64) -> Result<()> {
        let totals = maps.dist_packets()?;
        if self.totals.len() == totals.len() {
            for (bucket, (now, before)) in totals.iter().zip(&self.totals).enumerate() {
                let delta = now.wrapping_sub(*before);
                if delta > 0 {
                    self.adaptive.observe(bucket as u32, delta);
                }
            }
        }
        self.totals = totals;
        for change in self.adaptive.decide(now_ns) {
            maps.put_worker_set(change.bucket, &abi_set(&change.workers))?;
        }
        Ok(())
    }

    pub fn stats(&self) -> AdaptiveStats {
        self.adaptive.stats()
    }
}

/// A worker set as the program's `dist_sets` holds it.
fn abi_set(set: &WorkerSet) -> weir_worker_set {
    let mut abi = weir_worker_set::default();
    let ids = set.as_slice();
    abi.len = ids.len() as u16;
    for (slot, id) in abi.ids.iter_mut().zip(ids) {
        *slot = *id;
    }
    abi
}

/// The data caches of the workers' CPUs, from
/// `<root>/cpuN/cache/indexI/{level,type,shared_cpu_list}`.
fn read_topology(root: &Path, cpus: &[usize]) -> Result<Topology> {
    let mut caches = Vec::new();
    for cpu in cpus {
        let dir = root.join(format!("cpu{cpu}/cache"));
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let index = entry?.path();
            if !index
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("index"))
            {
                continue;
            }
            let read = |f: &str| fs::read_to_string(index.join(f));
            let list = read("shared_cpu_list")?;
            let shared = weir_sys::parse_cpu_list(&list).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}/shared_cpu_list: {:?} is not a CPU list (expected numbers and ranges \
                     such as 0-3,8,10-11)",
                    index.display(),
                    list.trim()
                )
            })?;
            let shared = shared.into_iter().map(|c| c as u32).collect();
            let cache = CacheIndex::parse(&read("level")?, &read("type")?, shared)
                .map_err(|e| anyhow::anyhow!("{}: {e}", index.display()))?;
            caches.push(cache);
        }
    }
    Ok(Topology::new(caches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_software_engine::topology::Closeness;

    #[test]
    fn worker_sets_go_to_the_program_as_written() {
        let abi = abi_set(&WorkerSet::one(3));
        assert_eq!((abi.len, abi.ids[0]), (1, 3));
        assert_eq!(
            weir_software_engine::distribution::MAX_SPREAD,
            weir_abi::WEIR_MAX_SPREAD as usize,
            "weir.h and weir-core agree on the widest spread"
        );
    }

    #[test]
    fn reads_the_cache_topology_from_sysfs_files() {
        let root = std::env::temp_dir().join(format!("weir-topo-{}", std::process::id()));
        for (cpu, index, level, kind, shared) in [
            (0, 0, "1", "Data", "0"),
            (0, 1, "1", "Instruction", "0"),
            (0, 2, "2", "Unified", "0-1"),
            (1, 0, "1", "Data", "1"),
            (1, 2, "2", "Unified", "0-1"),
            (2, 2, "2", "Unified", "2-3"),
        ] {
            let dir = root.join(format!("cpu{cpu}/cache/index{index}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("level"), format!("{level}\n")).unwrap();
            fs::write(dir.join("type"), format!("{kind}\n")).unwrap();
            fs::write(dir.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
        }
        let topo = read_topology(&root, &[0, 1, 2]).unwrap();
        assert_eq!(topo.closeness(0, 1), Closeness::Cache(2));
        assert_eq!(topo.closeness(0, 2), Closeness::Apart);
        let missing = read_topology(&root, &[7]).unwrap_err();
        assert!(format!("{missing:#}").contains("cpu7/cache"), "{missing:#}");
        fs::remove_dir_all(&root).unwrap();
    }
}
