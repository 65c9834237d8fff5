//! The pools one `weir kv` runs, as nutcracker runs every pool of its file:
//! each pool its own TCP proxy on its own listener (and, for the one pool
//! given `--udp-interface` or `[udp]`, the XDP path), and a reload that
//! applies a re-read file to them.
//!
//! A reload starts the pools the file adds before it stops the ones it
//! removes, and leaves the unchanged ones (their listeners, client and
//! server connections) alone. It is all or nothing: a file that does not
//! parse, a pool that cannot start, or a change weir cannot apply to a
//! running pool refuses the whole file, and what runs stays as it was.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{bail, Context, Result};

use crate::config::KvConfig;
use crate::invalidate::Invalidation;
use crate::proxy::Proxy;
use crate::status::{status_of, KvStatus};
use crate::udp::{StatusHandle, UdpSwitch, XdpInvalidator};

/// One started pool: its proxy and, with the UDP path, its XDP switch.
pub struct RunningPool {
    cfg: KvConfig,
    proxy: Arc<Proxy>,
    switch: Option<UdpSwitch>,
    udp_status: Option<StatusHandle>,
}

impl RunningPool {
    /// Starts `cfg`'s pool; an error leaves nothing of it running or attached.
    fn start(cfg: &KvConfig) -> Result<RunningPool> {
        // The XDP switch first: the TCP proxy's writes must invalidate its
        // cache from the first one on.
        let switch = match &cfg.udp {
            Some(u) => {
                let sw = UdpSwitch::start(cfg)?;
                eprintln!(
                    "weir kv: pool {}: XDP switch on {} (udp port {}, {}, cache {})",
                    cfg.pool,
                    u.interfaces.join(","),
                    u.port,
                    u.forward,
                    if cfg.cache.enabled { "on" } else { "off" }
                );
                Some(sw)
            }
            None => None,
        };
        let inval = switch
            .as_ref()
            .filter(|_| cfg.cache.enabled)
            .map(|sw| Invalidation::new(Arc::new(XdpInvalidator(sw.cache()))));
        let udp_status = switch.as_ref().map(|s| s.status_handle());
        let dist = Arc::new(cfg.distribution());
        let proxy = match Proxy::start(cfg, dist, inval) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                if let Some(sw) = switch {
                    sw.stop();
                }
                return Err(e.context(format!("pool {}", cfg.pool)));
            }
        };
        if let Some(sw) = &switch {
            sw.follow(proxy.routing().clone());
        }
        eprintln!(
            "weir kv: pool {} on {} ({} servers, {}/{}, {} workers)",
            cfg.pool,
            proxy.local_addr(),
            cfg.servers.len(),
            cfg.hash,
            cfg.distribution,
            cfg.workers
        );
        Ok(RunningPool {
            cfg: cfg.clone(),
            proxy,
            switch,
            udp_status,
        })
    }

    pub fn name(&self) -> &str {
        &self.cfg.pool
    }

    pub fn proxy_addr(&self) -> std::net::SocketAddr {
        self.proxy.local_addr()
    }

    pub fn udp_status(&self) -> Option<StatusHandle> {
        self.udp_status.clone()
    }
}

impl Drop for RunningPool {
    /// Detaches the XDP path, then (dropping the proxy) closes the listener
    /// and every connection of the pool.
    fn drop(&mut self) {
        if let Some(sw) = self.switch.take() {
            sw.stop();
        }
        eprintln!("weir kv: pool {} stopped", self.cfg.pool);
    }
}

/// Re-reads the configuration a switch was started from.
pub type Loader = Box<dyn Fn() -> Result<Vec<KvConfig>> + Send + Sync>;

/// Every running pool, in the configuration's order.
pub struct Pools {
    running: Mutex<Vec<RunningPool>>,
    load: Loader,
}

impl Pools {
    /// Starts every pool of `cfgs`; an error stops those already started.
    pub fn start(cfgs: &[KvConfig], load: Loader) -> Result<Pools> {
        check_udp(cfgs)?;
        let mut running = Vec::with_capacity(cfgs.len());
        for cfg in cfgs {
            running.push(RunningPool::start(cfg)?);
        }
        Ok(Pools {
            running: Mutex::new(running),
            load,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<RunningPool>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` over the running pools.
    pub fn with<T>(&self, f: impl FnOnce(&[RunningPool]) -> T) -> T {
        f(&self.lock())
    }

    pub fn status(&self) -> KvStatus {
        KvStatus::of(
            self.lock()
                .iter()
                .map(|p| status_of(&p.proxy, &p.cfg, p.udp_status.as_ref()))
                .collect(),
        )
    }

    /// Re-reads the file and applies it: what changed, or why nothing did.
    pub fn reload(&self) -> Result<String> {
        let cfgs = (self.load)()?;
        self.apply(&cfgs)
    }

    /// Makes the running pools those of `cfgs`.
    pub fn apply(&self, cfgs: &[KvConfig]) -> Result<String> {
        check_udp(cfgs)?;
        let mut running = self.lock();
        for cfg in cfgs {
            let Some(old) = running.iter().find(|p| p.cfg.pool == cfg.pool) else {
                continue;
            };
            if old.cfg.metrics != cfg.metrics {
                bail!(
                    "{}: pool {}: the metrics address changes from {} to {}; the endpoint \
                     serving this answer cannot move while it runs: restart weir kv for that",
                    cfg.file.display(),
                    cfg.pool,
                    old.cfg.metrics.map_or("off".into(), |m| m.to_string()),
                    cfg.metrics.map_or("off".into(), |m| m.to_string()),
                );
            }
            if let Some(what) = old.cfg.change_to(cfg) {
                bail!(
                    "{}: pool {}: {what} changes; a running pool keeps its listener, servers \
                     and routing (their change needs a restart, or the pool under a new name \
                     with a new listen address, then the old one removed)",
                    cfg.file.display(),
                    cfg.pool
                );
            }
        }
        let mut added = Vec::new();
        for cfg in cfgs {
            if !running.iter().any(|p| p.cfg.pool == cfg.pool) {
                // On an error, `added` drops and stops what this reload started.
                added.push(
                    RunningPool::start(cfg)
                        .with_context(|| format!("{}: starting a new pool", cfg.file.display()))?,
                );
            }
        }
        let mut old: Vec<RunningPool> = std::mem::take(&mut *running);
        let added_names: Vec<String> = added.iter().map(|p| p.cfg.pool.clone()).collect();
        let mut unchanged = Vec::new();
        for cfg in cfgs {
            let pool = match old.iter().position(|p| p.cfg.pool == cfg.pool) {
                Some(i) => {
                    unchanged.push(cfg.pool.clone());
                    old.remove(i)
                }
                None => {
                    let i = added
                        .iter()
                        .position(|p| p.cfg.pool == cfg.pool)
                        .expect("started above");
                    added.remove(i)
                }
            };
            running.push(pool);
        }
        let removed: Vec<String> = old.iter().map(|p| p.cfg.pool.clone()).collect();
        drop(running);
        // The pools the file no longer has stop last, after the lock: their
        // workers take a moment to join.
        drop(old);
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        Ok(format!(
            "pools added: {}; removed: {}; unchanged: {}",
            list(&added_names),
            list(&removed),
            list(&unchanged)
        ))
    }
}

/// The XDP program owns its interfaces: one pool per switch may have the
/// UDP path.
fn check_udp(cfgs: &[KvConfig]) -> Result<()> {
    let udp: Vec<&str> = cfgs
        .iter()
        .filter(|c| c.udp.is_some())
        .map(|c| c.pool.as_str())
        .collect();
    if udp.len() > 1 {
        bail!(
            "pools {} all have the UDP path; one XDP program serves one pool: give it to one \
             (--pool NAME with --udp-interface)",
            udp.join(", ")
        );
    }
    Ok(())
}
