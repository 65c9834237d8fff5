//! The load-aware controller (Spotlight IV-C, IV-D), a thread of
//! `weir serve`. Every `update_interval_ms` it
//! 1. takes one load sample per DIP: polls every agent in parallel, or
//!    reads the data plane's passive telemetry;
//! 2. folds it into the DIP's `weir_core::estimate::CapacityEstimator`
//!    (EWMA; C = 1 / processing time, A = C - R);
//! 3. computes weights with the configured policy through
//!    `weir_core::dispatch::awfd::table_weights`, the code the simulator's
//!    AWFD dispatcher runs (ecmp = m 0, lcf = m 1, weighted = m 16);
//! 4. when the weights changed, publishes a new table version, writing only
//!    the stage-1/stage-2 entries that differ (`Maps::publish_table`), then
//!    flips the version word atomically.
//!
//! A DIP that fails its health checks, has configured weight 0, or (with
//! `on_agent_silent = "drain"`) whose agent is silent gets weight 0: no new
//! connections, while its established ones stay in the connection table.
//!
//! What the controller knows (estimates, weights, health, agent errors,
//! shares of new connections) is kept in a [`Snapshot`] for `/metrics` and
//! written to `<run dir>/controller.json` for `weir status`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use weir_abi::*;
use weir_config::{Config, OnSilent, PolicyName, TelemetryKind};
use weir_core::dispatch::awfd::table_weights;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::estimate::CapacityEstimator;
use weir_core::flow::addr_words;
use weir_dataplane::maps::Maps;

use crate::apply::vip_key;
use crate::health::{self, Monitor};
use crate::telemetry::agent::{self as agent_client, AgentError};
use crate::telemetry::passive::PassiveReader;
use crate::telemetry::Sample;

/// The interval when only health checks run (no `[controller]`).
const HEALTH_ONLY_INTERVAL: Duration = Duration::from_millis(100);
/// The span over which shares of new connections are computed.
const SHARE_WINDOW: Duration = Duration::from_secs(1);
/// How often `controller.json` is rewritten at most.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(200);

/// The controller's parameters, from `[controller]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub policy: PolicyName,
    pub m: u32,
    pub interval: Duration,
    pub telemetry: TelemetryKind,
    pub alpha: f64,
    pub agent_timeout: Duration,
    pub on_silent: OnSilent,
    pub silent_after: u32,
}

impl Params {
    pub fn of(cfg: &Config) -> Params {
        match &cfg.controller {
            Some(c) => Params {
                policy: c.policy,
                m: *c.m.get_ref(),
                interval: Duration::from_millis(*c.update_interval_ms.get_ref()),
                telemetry: c.telemetry,
                alpha: *c.ewma_alpha.get_ref(),
                agent_timeout: Duration::from_millis(*c.agent_timeout_ms.get_ref()),
                on_silent: c.on_agent_silent,
                silent_after: *c.silent_after.get_ref(),
            },
            None => Params {
                policy: PolicyName::Static,
                m: 4,
                interval: HEALTH_ONLY_INTERVAL,
                telemetry: TelemetryKind::Agent,
                alpha: 0.3,
                agent_timeout: Duration::from_millis(50),
                on_silent: OnSilent::Keep,
                silent_after: 3,
            },
        }
    }

    /// The AWFD m a policy stands for.
    pub fn effective_m(&self) -> u32 {
        match self.policy {
            PolicyName::Ecmp | PolicyName::Static => 0,
            PolicyName::Lcf => 1,
            PolicyName::Weighted => WEIR_MAX_CLASSES,
            PolicyName::Awfd => self.m,
        }
    }
}

/// What the weight computation needs to know of one DIP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DipView {
    /// Healthy (or unchecked) and configured weight > 0.
    pub eligible: bool,
    pub config_weight: u32,
    /// A = C - R, `None` before the first sample.
    pub available: Option<f64>,
    /// Consecutive failed polls.
    pub misses: u32,
}

/// The weight of every DIP of a VIP (0 = no new connections).
///
/// - `static`: the configured weights of eligible DIPs.
/// - otherwise: the pool is the eligible DIPs, minus silent ones under
///   `drain`. A DIP with no estimate (no sample yet, or silent under `keep`)
///   is given the mean available capacity of the pool's DIPs that have one,
///   so it is weighed like an average DIP, as ECMP would; if none has one,
///   all are equal. Then `table_weights(A, m)`: floor(m * A / max A), all
///   zero turned into all one.
pub fn compute_weights(p: &Params, dips: &[DipView]) -> Vec<u32> {
    let mut w = vec![0; dips.len()];
    if p.policy == PolicyName::Static {
        for (w, d) in w.iter_mut().zip(dips) {
            *w = if d.eligible { d.config_weight } else { 0 };
        }
        return w;
    }
    let silent = |d: &DipView| d.misses >= p.silent_after;
    let pool: Vec<usize> = (0..dips.len())
        .filter(|&i| dips[i].eligible && !(silent(&dips[i]) && p.on_silent == OnSilent::Drain))
        .collect();
    let known: Vec<Option<f64>> = pool
        .iter()
        .map(|&i| {
            let d = &dips[i];
            if silent(d) {
                None
            } else {
                d.available.filter(|a| a.is_finite())
            }
        })
        .collect();
    let have: Vec<f64> = known.iter().flatten().copied().collect();
    let (mean, max) = if have.is_empty() {
        (1.0, 1.0)
    } else {
        let max = have.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (have.iter().sum::<f64>() / have.len() as f64, max)
    };
    // A DIP never measured yet (new, or cold after a start) is given the best
    // known capacity: it must receive traffic to be measured at all, which the
    // mean would deny it under LCF, or under AWFD whenever mean < max / m. A
    // silent agent's DIP is weighed like an average one.
    let avail: Vec<f64> = pool
        .iter()
        .zip(&known)
        .map(|(&i, a)| a.unwrap_or(if silent(&dips[i]) { mean } else { max }))
        .collect();
    for (&i, wt) in pool.iter().zip(table_weights(&avail, p.effective_m())) {
        w[i] = wt;
    }
    w
}

/// The controller's state of one DIP.
#[derive(Debug, Clone)]
struct DipModel {
    key: String,
    slot: u32,
    addr: IpAddr,
    port: u16,
    /// Identity in the `dips` map: address words and NAT port (BE, 0 = VIP's).
    ident: ([u32; 4], u16),
    config_weight: u32,
    agent: Option<SocketAddr>,
    est: CapacityEstimator,
    misses: u32,
    errors: BTreeMap<&'static str, u64>,
    last_error: Option<String>,
    weight: u32,
    share: Option<f64>,
    health: Option<Arc<health::DipHealth>>,
}

impl DipModel {
    fn healthy(&self) -> bool {
        self.health.as_ref().is_none_or(|h| h.healthy())
    }

    fn view(&self) -> DipView {
        DipView {
            eligible: self.healthy() && self.config_weight > 0,
            config_weight: self.config_weight,
            available: self.est.available(),
            misses: self.misses,
        }
    }

    /// Folds in one poll.
    fn observe(&mut self, r: Result<Sample, AgentError>, silent_after: u32) {
        match r {
            Ok(s) => {
                if self.misses >= silent_after {
                    eprintln!("weir: controller: {} answers again", self.key);
                }
                self.misses = 0;
                // An idle span measures no processing time: the last one
                // stands and only the load is updated.
                let t = s
                    .processing_time_s
                    .or_else(|| self.est.capacity().map(|c| 1.0 / c));
                if let Some(t) = t {
                    if let Err(e) = self.est.observe(t, s.rate_per_s) {
                        self.count_error("invalid", e.to_string());
                    }
                }
            }
            Err(e) => {
                self.misses = self.misses.saturating_add(1);
                self.count_error(e.kind(), e.to_string());
                if self.misses == silent_after {
                    eprintln!(
                        "weir: controller: {} is silent ({} failed polls; last: {e})",
                        self.key, self.misses
                    );
                }
            }
        }
    }

    fn count_error(&mut self, kind: &'static str, msg: String) {
        *self.errors.entry(kind).or_default() += 1;
        self.last_error = Some(msg);
    }
}

#[derive(Debug, Clone)]
struct VipModel {
    name: String,
    vip_id: u32,
    /// Address, port and protocol: what names the VIP across a cluster.
    key: weir_vip_key,
    dips: Vec<DipModel>,
    /// Weights of the last table this controller published.
    published: Option<Vec<u32>>,
    /// (time, new_conns per DIP) for the shares.
    history: VecDeque<(Instant, Vec<u64>)>,
}

/// What `weir status` and `/metrics` show of one DIP.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DipSnapshot {
    pub slot: u32,
    pub address: String,
    pub port: u16,
    /// Estimated capacity C = 1 / mean processing time (requests/s).
    pub capacity: Option<f64>,
    /// Smoothed load R (requests/s).
    pub load: Option<f64>,
    /// A = C - R.
    pub available: Option<f64>,
    /// The weight in the published table (0 = no new connections).
    pub weight: u32,
    /// Its AWFD priority class: B_weight (none when the weight is 0).
    pub class: Option<u32>,
    /// Share of the VIP's new connections over the last second.
    pub share: Option<f64>,
    /// `None` when the VIP has no health checks.
    pub healthy: Option<bool>,
    pub health_checks: u64,
    pub health_failures: u64,
    /// Consecutive failed agent polls.
    pub agent_misses: u32,
    pub agent_silent: bool,
    /// Failed polls by kind (timeout, connect, http, too_large, parse, invalid).
    pub agent_errors: BTreeMap<String, u64>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VipSnapshot {
    pub name: String,
    pub vip_id: u32,
    pub table_version: u32,
    pub dips: Vec<DipSnapshot>,
}

/// The controller's view, for status and metrics.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    pub policy: PolicyName,
    pub m: u32,
    pub update_interval_ms: u64,
    pub telemetry: Option<TelemetryKind>,
    pub on_agent_silent: OnSilent,
    /// Wall-clock time of this snapshot (ms since the epoch).
    pub at_unix_ms: u64,
    pub ticks: u64,
    /// Table versions published by the controller.
    pub tables_published: u64,
    /// Map entries written by those publications (stage 1 + stage 2).
    pub entries_written: u64,
    pub vips: Vec<VipSnapshot>,
}

/// State shared between the controller thread and the rest of `weir serve`.
#[derive(Debug, Default)]
pub struct Shared {
    /// Held while tables or DIP slots are written, so `apply` (reloads),
    /// the controller and the cluster's tables never publish at the same time.
    pub table_lock: Arc<Mutex<()>>,
    pub snapshot: Mutex<Option<Snapshot>>,
    /// Configurations applied since start, counted under `table_lock` (by
    /// `live.rs`). The controller publishes only while its model is of the
    /// last one: between an apply and the reconfigure that follows it, its
    /// old weights would undo the change (a drained DIP would get new
    /// connections again).
    pub applied: AtomicU64,
    /// This node's cluster, when it runs in one: then only the leader's
    /// controller publishes, through etcd, and every node applies what the
    /// leader published (weir_cluster::agent).
    pub cluster: OnceLock<weir_cluster::Cluster>,
}

impl Shared {
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

enum Msg {
    /// The configuration, and `Shared::applied` when it was applied.
    Reconfigure(Box<Config>, u64),
    Stop,
}

/// The controller thread; stops on drop.
pub struct Controller {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    pub shared: Arc<Shared>,
}

/// The file `weir status` reads the controller's view from.
pub fn snapshot_path(run_dir: &std::path::Path) -> PathBuf {
    run_dir.join("controller.json")
}

impl Controller {
    /// Starts the controller on the pinned maps of `cfg` (already applied).
    pub fn start(
        cfg: &Config,
        shared: Arc<Shared>,
        run_dir: Option<PathBuf>,
    ) -> Result<Controller> {
        let maps = Maps::pinned(&cfg.dataplane.pin_dir).context("controller: opening the maps")?;
        let (tx, rx) = mpsc::channel();
        let mut state = State {
            maps,
            params: Params::of(cfg),
            vips: Vec::new(),
            monitor: Monitor::default(),
            passive: PassiveReader::default(),
            model_of: shared.applied.load(Ordering::SeqCst),
            shared: shared.clone(),
            run_dir,
            ticks: 0,
            tables_published: 0,
            entries_written: 0,
            last_snapshot_write: None,
            terms_won: 0,
        };
        state.reconfigure(cfg);
        let thread = std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || state.run(rx))
            .context("starting the controller thread")?;
        Ok(Controller {
            tx,
            thread: Some(thread),
            shared,
        })
    }

    /// Hands a newly applied configuration to the controller.
    pub fn reconfigure(&self, cfg: &Config) {
        let applied = self.shared.applied.load(Ordering::SeqCst);
        let _ = self
            .tx
            .send(Msg::Reconfigure(Box::new(cfg.clone()), applied));
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct State {
    maps: Maps,
    params: Params,
    vips: Vec<VipModel>,
    monitor: Monitor,
    passive: PassiveReader,
    /// The `Shared::applied` count the model was built for.
    model_of: u64,
    shared: Arc<Shared>,
    run_dir: Option<PathBuf>,
    ticks: u64,
    tables_published: u64,
    entries_written: u64,
    last_snapshot_write: Option<Instant>,
    /// The cluster leaderships won when the model last published.
    terms_won: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl State {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut next = Instant::now();
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(Msg::Reconfigure(cfg, applied)) => {
                    self.model_of = applied;
                    self.reconfigure(&cfg);
                    next = Instant::now();
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            self.tick(now);
            next += self.params.interval;
            if next < Instant::now() {
                // Overran (slow agents, a busy machine): skip, do not burst.
                next = Instant::now() + self.params.interval;
            }
        }
        if let Some(dir) = &self.run_dir {
            let _ = std::fs::remove_file(snapshot_path(dir));
        }
    }

    /// Rebuilds the model from `cfg` and the maps (after `apply`), keeping
    /// the estimates and counters of DIPs that stay.
    fn reconfigure(&mut self, cfg: &Config) {
        let params = Params::of(cfg);
        let alpha_changed = params.alpha != self.params.alpha;
        self.params = params;
        let old_vips: HashSet<u32> = self.vips.iter().map(|v| v.vip_id).collect();
        let mut awaiting = HashSet::new();
        let mut old: HashMap<String, DipModel> = self
            .vips
            .drain(..)
            .flat_map(|v| v.dips)
            .map(|d| (d.key.clone(), d))
            .collect();
        let vip_ids: HashMap<weir_vip_key, u32> = self
            .maps
            .vips()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.vip_id))
            .collect();
        let mut slots: Vec<(u32, weir_dip)> = Vec::new();
        for id in 0..self.maps.dip_slots() {
            if let Ok(Some(d)) = self.maps.dip(id) {
                if d.flags & WEIR_DIP_F_LIVE != 0 {
                    slots.push((id, d));
                }
            }
        }
        let mut targets = Vec::new();
        for v in &cfg.vips {
            let Some(&vip_id) = vip_ids.get(&vip_key(v)) else {
                continue;
            };
            let mut dips = Vec::new();
            let mut in_force_weights = Vec::new();
            for d in &v.dips {
                let (addr_w, _) = addr_words(*d.address.get_ref());
                let nat_port = d.port.as_ref().map_or(0, |p| p.get_ref().to_be());
                let Some((slot, in_force)) = slots
                    .iter()
                    .find(|(_, s)| s.vip_id == vip_id && s.addr == addr_w && s.port == nat_port)
                else {
                    continue;
                };
                let port = d.service_port(v);
                let key = format!("{}/{}:{}", v.name.get_ref(), d.address.get_ref(), port);
                let fresh_est = || {
                    CapacityEstimator::new(self.params.alpha)
                        .expect("ewma_alpha is validated to (0, 1]")
                };
                if !old.contains_key(&key) && old_vips.contains(&vip_id) {
                    // Added to a VIP that serves: `apply` put it in with
                    // weight 0 if checked; it waits for its first pass.
                    awaiting.insert(key.clone());
                }
                in_force_weights.push(in_force.weight);
                let mut m = match old.remove(&key) {
                    Some(mut m) => {
                        if alpha_changed {
                            m.est = fresh_est();
                        }
                        m
                    }
                    None => DipModel {
                        key: key.clone(),
                        slot: *slot,
                        addr: *d.address.get_ref(),
                        port,
                        ident: (addr_w, nat_port),
                        config_weight: 0,
                        agent: None,
                        est: fresh_est(),
                        misses: 0,
                        errors: BTreeMap::new(),
                        last_error: None,
                        weight: 0,
                        share: None,
                        health: None,
                    },
                };
                m.slot = *slot;
                m.config_weight = *d.weight.get_ref();
                m.agent = d.agent.as_ref().map(|a| *a.get_ref());
                if let Some(h) = &v.health {
                    let port = h.port.as_ref().map_or(port, |p| *p.get_ref());
                    targets.push(health::Target::new(
                        key.clone(),
                        SocketAddr::new(*d.address.get_ref(), port),
                        h,
                    ));
                }
                dips.push(m);
            }
            self.vips.push(VipModel {
                name: v.name.get_ref().clone(),
                vip_id,
                key: vip_key(v),
                dips,
                // `apply` just published a table of the weights in the
                // `dips` map: a change publishes once, and the controller
                // only when its weights differ. In a cluster the leader's
                // table is proposed anew.
                published: self
                    .shared
                    .cluster
                    .get()
                    .is_none()
                    .then_some(in_force_weights),
                history: VecDeque::new(),
            });
        }
        self.monitor.set_targets(targets, &awaiting);
        for v in &mut self.vips {
            for d in &mut v.dips {
                d.health = self.monitor.get(&d.key);
            }
        }
        let slots: Vec<u32> = self
            .vips
            .iter()
            .flat_map(|v| v.dips.iter().map(|d| d.slot))
            .collect();
        self.passive.retain(&slots);
    }

    fn poll_telemetry(&mut self, now: Instant) {
        if self.params.policy == PolicyName::Static {
            return;
        }
        let silent_after = self.params.silent_after;
        match self.params.telemetry {
            TelemetryKind::Agent => {
                let timeout = self.params.agent_timeout;
                let addrs: Vec<Option<SocketAddr>> = self
                    .vips
                    .iter()
                    .flat_map(|v| v.dips.iter().map(|d| d.agent))
                    .collect();
                let mut results: Vec<Option<Result<Sample, AgentError>>> = Vec::new();
                for chunk in addrs.chunks(64) {
                    std::thread::scope(|s| {
                        let hs: Vec<_> = chunk
                            .iter()
                            .map(|a| a.map(|a| s.spawn(move || agent_client::poll(a, timeout))))
                            .collect();
                        for h in hs {
                            results.push(h.map(|h| {
                                h.join().unwrap_or_else(|_| {
                                    Err(AgentError::Connect("poller panicked".into()))
                                })
                            }));
                        }
                    });
                }
                let mut it = results.into_iter();
                for v in &mut self.vips {
                    for d in &mut v.dips {
                        if let Some(Some(r)) = it.next() {
                            d.observe(r, silent_after);
                        }
                    }
                }
            }
            TelemetryKind::Passive => {
                for v in &mut self.vips {
                    for d in &mut v.dips {
                        if let Some(s) = self.passive.sample(&self.maps, d.slot, now) {
                            d.observe(Ok(s), silent_after);
                        }
                    }
                }
            }
        }
    }

    fn tick(&mut self, now: Instant) {
        self.ticks += 1;
        if let Some(c) = self.shared.cluster.get() {
            // A leadership won since the last tick: what etcd holds is
            // another leader's, so publish ours anew.
            let won = c.terms_won();
            if won != self.terms_won {
                self.terms_won = won;
                for v in &mut self.vips {
                    v.published = None;
                }
            }
        }
        self.poll_telemetry(now);
        for i in 0..self.vips.len() {
            let views: Vec<DipView> = self.vips[i].dips.iter().map(DipModel::view).collect();
            let weights = compute_weights(&self.params, &views);
            if self.vips[i].published.as_ref() != Some(&weights) {
                match self.publish(i, &weights) {
                    Ok(true) => self.vips[i].published = Some(weights),
                    Ok(false) => {}
                    Err(e) => eprintln!(
                        "weir: controller: publishing the table of VIP {}: {e:#}",
                        self.vips[i].name
                    ),
                }
            }
            self.update_shares(i, now);
        }
        let snap = self.snapshot();
        let write = self
            .last_snapshot_write
            .is_none_or(|t| now.duration_since(t) >= SNAPSHOT_EVERY);
        if let (Some(dir), true) = (&self.run_dir, write) {
            self.last_snapshot_write = Some(now);
            crate::run_report::publish_json(&snapshot_path(dir), &snap);
        }
        *self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(snap);
    }

    /// Publishes `weights` for VIP `i` under the table lock. Slots are
    /// checked against the `dips` map first: a DIP a reload just removed
    /// (not yet in our model) is never named. In a cluster, the leader
    /// hands the table to etcd instead (every node applies it from there)
    /// and a follower publishes nothing. Returns whether it published.
    fn publish(&mut self, i: usize, weights: &[u32]) -> Result<bool> {
        let shared = self.shared.clone();
        let cluster = shared.cluster.get();
        if cluster.is_some_and(|c| !c.is_leader()) {
            return Ok(false);
        }
        let _guard = shared.table_lock.lock().unwrap_or_else(|e| e.into_inner());
        if shared.applied.load(Ordering::SeqCst) != self.model_of {
            // A newer configuration is in the maps and its reconfigure on
            // the way (which forgets what was published): publish nothing.
            return Ok(false);
        }
        let vip = &mut self.vips[i];
        let mut pairs = Vec::with_capacity(weights.len());
        for (d, &w) in vip.dips.iter_mut().zip(weights) {
            let Some(mut cur) = self.maps.dip(d.slot)? else {
                continue;
            };
            if cur.flags & WEIR_DIP_F_LIVE == 0
                || cur.vip_id != vip.vip_id
                || (cur.addr, cur.port) != d.ident
            {
                continue;
            }
            pairs.push((d.slot, w));
            if cur.weight != w {
                cur.weight = w;
                self.maps.put_dip(d.slot, &cur)?;
            }
            d.weight = w;
        }
        let table = AwfdTable::from_weights(&pairs)?;
        if let Some(c) = cluster {
            let identity: HashMap<u32, weir_cluster::record::DipRef> = vip
                .dips
                .iter()
                .map(|d| {
                    let nat_port = u16::from_be(d.ident.1);
                    (
                        d.slot,
                        weir_cluster::record::DipRef {
                            address: d.addr,
                            nat_port,
                        },
                    )
                })
                .collect();
            let vip_ref = weir_cluster::apply::vip_ref(&vip.key)
                .context("the VIP's address family is not IPv4 or IPv6")?;
            let proposed = c.propose(&vip.name, vip_ref, &table, |s| identity.get(&s).copied())?;
            self.tables_published += u64::from(proposed);
            return Ok(proposed);
        }
        let version = self.maps.table_version(vip.vip_id)?.wrapping_add(1);
        let report = self.maps.publish_table(vip.vip_id, version, &table)?;
        self.tables_published += 1;
        self.entries_written += u64::from(report.writes());
        Ok(true)
    }

    fn update_shares(&mut self, i: usize, now: Instant) {
        let traffic = crate::traffic::Traffic::read(&self.maps, self.run_dir.as_deref());
        let vip = &mut self.vips[i];
        let counts: Vec<u64> = vip
            .dips
            .iter()
            .map(|d| traffic.dip(d.slot).map_or(0, |t| t.new_conns))
            .collect();
        // Forget history of another shape (a reload changed the pool).
        if vip
            .history
            .front()
            .is_some_and(|(_, c)| c.len() != counts.len())
        {
            vip.history.clear();
        }
        vip.history.push_back((now, counts.clone()));
        while vip.history.len() > 2 && now.duration_since(vip.history[1].0) >= SHARE_WINDOW {
            vip.history.pop_front();
        }
        let (_, first) = &vip.history[0];
        let deltas: Vec<u64> = counts
            .iter()
            .zip(first)
            .map(|(c, f)| c.saturating_sub(*f))
            .collect();
        let total: u64 = deltas.iter().sum();
        for (d, n) in vip.dips.iter_mut().zip(deltas) {
            d.share = (total > 0).then(|| n as f64 / total as f64);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let p = &self.params;
        Snapshot {
            policy: p.policy,
            m: p.effective_m(),
            update_interval_ms: p.interval.as_millis() as u64,
            telemetry: (p.policy != PolicyName::Static).then_some(p.telemetry),
            on_agent_silent: p.on_silent,
            at_unix_ms: unix_ms(),
            ticks: self.ticks,
            tables_published: self.tables_published,
            entries_written: self.entries_written,
            vips: self
                .vips
                .iter()
                .map(|v| VipSnapshot {
                    name: v.name.clone(),
                    vip_id: v.vip_id,
                    table_version: self.maps.table_version(v.vip_id).unwrap_or(0),
                    dips: v
                        .dips
                        .iter()
                        .map(|d| DipSnapshot {
                            slot: d.slot,
                            address: d.addr.to_string(),
                            port: d.port,
                            capacity: d.est.capacity(),
                            load: d.est.load(),
                            available: d.est.available(),
                            weight: d.weight,
                            class: (d.weight > 0).then_some(d.weight),
                            share: d.share,
                            healthy: d.health.as_ref().map(|h| h.healthy()),
                            health_checks: d
                                .health
                                .as_ref()
                                .map_or(0, |h| h.checks.load(std::sync::atomic::Ordering::Relaxed)),
                            health_failures: d.health.as_ref().map_or(0, |h| {
                                h.failures.load(std::sync::atomic::Ordering::Relaxed)
                            }),
                            agent_misses: d.misses,
                            agent_silent: d.misses >= p.silent_after,
                            agent_errors: d
                                .errors
                                .iter()
                                .map(|(k, v)| (k.to_string(), *v))
                                .collect(),
                            last_error: d.last_error.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(policy: PolicyName, m: u32, on_silent: OnSilent) -> Params {
        Params {
            policy,
            m,
            interval: Duration::from_millis(100),
            telemetry: TelemetryKind::Agent,
            alpha: 1.0,
            agent_timeout: Duration::from_millis(50),
            on_silent,
            silent_after: 3,
        }
    }

    fn dip(available: Option<f64>) -> DipView {
        DipView {
            eligible: true,
            config_weight: 1,
            available,
            misses: 0,
        }
    }

    #[test]
    fn awfd_weights_follow_available_capacity() {
        let p = params(PolicyName::Awfd, 4, OnSilent::Keep);
        let w = compute_weights(&p, &[dip(Some(100.0)), dip(Some(50.0)), dip(Some(-3.0))]);
        assert_eq!(w, vec![4, 2, 0]);
        let lcf = params(PolicyName::Lcf, 4, OnSilent::Keep);
        assert_eq!(
            compute_weights(&lcf, &[dip(Some(100.0)), dip(Some(99.0))]),
            vec![1, 0]
        );
        let ecmp = params(PolicyName::Ecmp, 4, OnSilent::Keep);
        assert_eq!(
            compute_weights(&ecmp, &[dip(Some(100.0)), dip(Some(1.0))]),
            vec![1, 1]
        );
        let weighted = params(PolicyName::Weighted, 4, OnSilent::Keep);
        assert_eq!(
            compute_weights(&weighted, &[dip(Some(100.0)), dip(Some(50.0))]),
            vec![16, 8]
        );
        // Everyone overloaded: equal weights, never an empty table.
        assert_eq!(
            compute_weights(&p, &[dip(Some(-1.0)), dip(Some(-5.0))]),
            vec![1, 1]
        );
    }

    #[test]
    fn unmeasured_dips_get_the_best_known_capacity() {
        let p = params(PolicyName::Awfd, 4, OnSilent::Keep);
        // No estimates at all: equal.
        assert_eq!(compute_weights(&p, &[dip(None), dip(None)]), vec![4, 4]);
        // A DIP not measured yet is weighed like the best one, so it is
        // probed (with the mean, 60, it would get 2; under LCF nothing).
        assert_eq!(
            compute_weights(&p, &[dip(Some(100.0)), dip(Some(20.0)), dip(None)]),
            vec![4, 0, 4]
        );
        let lcf = params(PolicyName::Lcf, 4, OnSilent::Keep);
        assert_eq!(
            compute_weights(&lcf, &[dip(Some(100.0)), dip(Some(20.0)), dip(None)]),
            vec![1, 0, 1]
        );
    }

    #[test]
    fn ineligible_and_silent_dips() {
        let keep = params(PolicyName::Awfd, 4, OnSilent::Keep);
        let drain = params(PolicyName::Awfd, 4, OnSilent::Drain);
        let sick = DipView {
            eligible: false,
            ..dip(Some(1000.0))
        };
        assert_eq!(compute_weights(&keep, &[sick, dip(Some(10.0))]), vec![0, 4]);
        let silent = DipView {
            misses: 3,
            ..dip(Some(1000.0))
        };
        let almost = DipView {
            misses: 2,
            ..dip(Some(1000.0))
        };
        // Before silent_after misses the last estimate stands.
        assert_eq!(
            compute_weights(&keep, &[almost, dip(Some(100.0))]),
            vec![4, 0]
        );
        assert_eq!(
            compute_weights(&drain, &[almost, dip(Some(100.0))]),
            vec![4, 0]
        );
        // Silent: keep weighs it like the mean of the others, drain drops it.
        assert_eq!(
            compute_weights(&keep, &[silent, dip(Some(100.0)), dip(Some(50.0))]),
            vec![3, 4, 2]
        );
        assert_eq!(
            compute_weights(&drain, &[silent, dip(Some(100.0)), dip(Some(50.0))]),
            vec![0, 4, 2]
        );
        // Static: configured weights, health still applies.
        let st = params(PolicyName::Static, 4, OnSilent::Keep);
        let heavy = DipView {
            config_weight: 3,
            ..dip(None)
        };
        assert_eq!(compute_weights(&st, &[heavy, sick, silent]), vec![3, 0, 1]);
    }

    fn model() -> DipModel {
        DipModel {
            key: "v/d".into(),
            slot: 0,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
            ident: ([0; 4], 0),
            config_weight: 1,
            agent: None,
            est: CapacityEstimator::new(0.5).unwrap(),
            misses: 0,
            errors: BTreeMap::new(),
            last_error: None,
            weight: 0,
            share: None,
            health: None,
        }
    }

    #[test]
    fn polls_feed_the_estimator_and_errors_are_counted() {
        let mut d = model();
        let s = |t: Option<f64>, r: f64| {
            Ok(Sample {
                processing_time_s: t,
                rate_per_s: r,
            })
        };
        d.observe(s(Some(0.01), 20.0), 3);
        assert_eq!(d.est.capacity(), Some(100.0));
        assert_eq!(d.est.available(), Some(80.0));
        // EWMA with alpha 0.5: t = 0.015 -> C = 66.7; R = 30.
        d.observe(s(Some(0.02), 40.0), 3);
        assert!((d.est.capacity().unwrap() - 1.0 / 0.015).abs() < 1e-9);
        // Idle span: processing time kept, load decays.
        d.observe(s(None, 0.0), 3);
        assert!((d.est.capacity().unwrap() - 1.0 / 0.015).abs() < 1e-9);
        assert_eq!(d.est.load(), Some(15.0));
        let before = d.est;
        for e in [
            AgentError::Timeout,
            AgentError::Parse("x".into()),
            AgentError::Invalid("y".into()),
            AgentError::Timeout,
        ] {
            d.observe(Err(e), 3);
        }
        assert_eq!(d.est, before, "errors never touch the estimate");
        assert_eq!(d.misses, 4);
        assert_eq!(d.errors.get("timeout"), Some(&2));
        assert_eq!(d.errors.get("parse"), Some(&1));
        assert_eq!(d.view().misses, 4);
        d.observe(s(Some(0.015), 15.0), 3);
        assert_eq!(d.misses, 0, "one good reply ends the silence");
    }
}
