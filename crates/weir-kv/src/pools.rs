//! The pools one `weir kv` runs, as nutcracker runs every pool of its file:
//! each pool its own TCP proxy on its own listener (and, for the one pool
//! given `--udp-interface` or `[udp]`, the XDP path), and a reload that
//! applies a re-read file to them.
//!
//! A reload starts the pools the file adds or changes before it stops the
//! ones it removes, and leaves the unchanged ones (their listeners, client
//! and server connections) alone. A changed pool (servers, weights, hash,
//! distribution, timeouts, even its listen address) gets a new proxy, and
//! the old one hands it every client connection once that client's replies
//! are out ([`Proxy::hand_over`]): requests in flight finish on the old
//! servers, the next ones go by the new pool, and no connection closes.
//! It is all or nothing: a file that does not parse, a pool that cannot
//! start, or a change weir cannot apply to a running pool refuses the
//! whole file, and what runs stays as it was.

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
                if old.cfg.udp.is_some() || cfg.udp.is_some() {
                    bail!(
                        "{}: pool {}: {what} changes, and the pool has the UDP path, whose \
                         XDP program keeps the pool it was loaded with: restart weir kv for that",
                        cfg.file.display(),
                        cfg.pool
                    );
                }
            }
        }
        // New and changed pools start first, next to what runs (a changed
        // pool's new listener joins the old one's SO_REUSEPORT group).
        let mut started = Vec::new();
        for cfg in cfgs {
            let old = running.iter().find(|p| p.cfg.pool == cfg.pool);
            if old.is_none_or(|o| o.cfg.change_to(cfg).is_some()) {
                // On an error, `started` drops and stops what this reload started.
                started.push(RunningPool::start(cfg).with_context(|| {
                    format!("{}: starting pool {}", cfg.file.display(), cfg.pool)
                })?);
            }
        }
        let mut old: Vec<RunningPool> = std::mem::take(&mut *running);
        let (mut added, mut changed, mut unchanged) = (Vec::new(), Vec::new(), Vec::new());
        let mut replaced = Vec::new();
        for cfg in cfgs {
            let prev = old
                .iter()
                .position(|p| p.cfg.pool == cfg.pool)
                .map(|i| old.remove(i));
            let new = started
                .iter()
                .position(|p| p.cfg.pool == cfg.pool)
                .map(|i| started.remove(i));
            match (prev, new) {
                (None, Some(new)) => {
                    added.push(cfg.pool.clone());
                    running.push(new);
                }
                (Some(prev), Some(new)) => {
                    let what = prev.cfg.change_to(cfg).unwrap_or("nothing");
                    changed.push(format!("{} ({what})", cfg.pool));
                    replaced.push((prev, new.proxy.clone()));
                    running.push(new);
                }
                (Some(prev), None) => {
                    unchanged.push(cfg.pool.clone());
                    running.push(prev);
                }
                (None, None) => unreachable!("every pool of the file runs or was started"),
            }
        }
        let removed: Vec<String> = old.iter().map(|p| p.cfg.pool.clone()).collect();
        drop(running);
        // Outside the lock: a changed pool's clients move to its new proxy
        // as their replies go out, and the old proxy stops after them.
        for (prev, to) in replaced {
            let left = prev.proxy.hand_over(&to, HAND_OVER_WAIT);
            if left > 0 {
                eprintln!(
                    "weir kv: pool {}: {left} clients still had requests in flight after {:?}; \
                     their connections close",
                    prev.cfg.pool, HAND_OVER_WAIT
                );
            }
        }
        // The pools the file no longer has stop last.
        drop(old);
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        Ok(format!(
            "pools added: {}; changed: {}; removed: {}; unchanged: {}",
            list(&added),
            list(&changed),
            list(&removed),
            list(&unchanged)
        ))
    }
}

/// How long a changed pool's old proxy waits for its clients' replies before
/// it closes those still waiting (a server that answers nothing and no
/// `timeout`).
const HAND_OVER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
