//! The cluster agent of one node: its etcd session, the leader election,
//! the shared tables and the node's reports, on one thread with a small
//! tokio runtime.
//!
//! Keys under the cluster's prefix:
//!
//! ```text
//! <prefix>/nodes/<name>   NodeInfo     on the node's lease: membership
//! <prefix>/leader         node name    on the leader's lease: the election
//! <prefix>/tables/<vip>   TableRecord  no lease: outlives any leader
//! <prefix>/status/<name>  NodeStatus   on the node's lease: what it applied
//! ```
//!
//! - **Session.** A node holds one lease (TTL `lease_ttl_s`) and refreshes
//!   it every third of its TTL. Its registration is created only if absent,
//!   so a name in use by a live node is refused. A node that dies stops
//!   refreshing: etcd drops its keys after the TTL.
//! - **Election.** A node with no leader in sight creates the leader key on
//!   its lease, if absent. The winner's term is that key's create
//!   revision; it publishes only through a transaction that compares it,
//!   so a node that lost the key (its lease expired) cannot overwrite a
//!   newer leader's tables.
//! - **Tables.** The leader's controller proposes a VIP's table
//!   ([`Cluster::propose`]); the agent stores it as the next version. Every
//!   node, the leader too, applies what the watch shows, so all nodes apply
//!   the same versions, and a proposal that never reached etcd applies
//!   nowhere. A reload re-applies the cluster's tables at once
//!   ([`Cluster::reapply`]), over the static ones `apply` wrote.
//! - **etcd unreachable.** Nothing changes in the data plane: the last
//!   tables stay. The view says so (`etcd_ok`, since when), the agent keeps
//!   trying, and once etcd answers it re-creates its lease and keys.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::sync::{mpsc, Notify};
use weir_core::dispatch::awfd::{AwfdTable, DipId};
use weir_dataplane::maps::Maps;

use crate::apply::{apply_record, vip_ids, Applied};
use crate::etcd::{Client, Compare, Event, Kv};
use crate::realtime::go_realtime;
use crate::record::{DipRef, TableRecord, VipRef};
use crate::sync::node::{unix_ns, JoinReport, SyncNode};
use crate::view::{
    view_path, AppliedTable, ClusterView, JoinView, NodeInfo, NodeStatus, NodeView, TableView,
};

/// How often a node reports itself (and rewrites `cluster.json`).
const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Pause between attempts when etcd does not answer.
const RETRY: Duration = Duration::from_millis(200);

/// What the agent needs to know.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub node: String,
    pub prefix: String,
    pub endpoints: Vec<SocketAddr>,
    pub lease_ttl: Duration,
    /// Run the agent's thread at real-time priority ([`crate::realtime`]).
    pub realtime: bool,
    /// This node's sync address, for its peers (none: sync off).
    pub sync: Option<SocketAddr>,
    /// Where `cluster.json` goes (none: nowhere).
    pub run_dir: Option<PathBuf>,
}

fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}

/// Where a VIP's tables go: this node's maps, under its table lock.
struct Target {
    maps: Maps,
    lock: Arc<Mutex<()>>,
}

#[derive(Debug, Default)]
struct State {
    etcd_error: Option<String>,
    etcd_down_since: Option<u64>,
    lease: i64,
    leader: Option<String>,
    /// The leader key's create revision (a term), when this node holds it.
    term: Option<i64>,
    nodes: BTreeMap<String, NodeInfo>,
    statuses: BTreeMap<String, NodeStatus>,
    records: BTreeMap<String, TableRecord>,
    applied: BTreeMap<String, AppliedTable>,
    apply_delay_max_ms: Option<f64>,
    join: Option<JoinView>,
    ready: bool,
    /// The first range has been read (the view is complete).
    loaded: bool,
}

/// A table the leader's controller wants published.
#[derive(Debug, Clone)]
struct Proposal {
    vip: String,
    vip_ref: VipRef,
    classes: Vec<crate::record::ClassRecord>,
}

struct Inner {
    opts: AgentOptions,
    client: Client,
    state: Mutex<State>,
    is_leader: AtomicBool,
    terms_won: AtomicU64,
    campaign: Notify,
    loaded: Notify,
    proposals: mpsc::UnboundedSender<Proposal>,
    target: OnceLock<Target>,
    sync: OnceLock<Arc<SyncNode>>,
}

/// A handle on this node's cluster agent (cheap to clone).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({})", self.inner.opts.node)
    }
}

/// The agent's thread; stopping it revokes the lease (a graceful leave:
/// another node takes the lead at once).
#[derive(Debug)]
pub struct Agent {
    cluster: Cluster,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Joins the cluster: reaches etcd, takes a lease and registers this
    /// node. Fails with a clear error when etcd does not answer or another
    /// live node has this name. A previous incarnation's registration (a
    /// node restarted after a crash) is waited out for one TTL.
    pub fn join(opts: AgentOptions) -> Result<Agent> {
        let deadline = opts
            .lease_ttl
            .min(Duration::from_secs(2))
            .max(Duration::from_millis(500));
        let client = Client::new(opts.endpoints.clone(), deadline);
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            opts: opts.clone(),
            client,
            state: Mutex::new(State::default()),
            is_leader: AtomicBool::new(false),
            terms_won: AtomicU64::new(0),
            campaign: Notify::new(),
            loaded: Notify::new(),
            proposals: tx,
            target: OnceLock::new(),
            sync: OnceLock::new(),
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the cluster agent's runtime")?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let agent_inner = inner.clone();
        let thread = std::thread::Builder::new()
            .name("cluster".into())
            .spawn(move || {
                if agent_inner.opts.realtime {
                    go_realtime("etcd agent");
                }
                rt.block_on(async move {
                    match register(&agent_inner).await {
                        Ok(()) => {
                            let _ = ready_tx.send(Ok(()));
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    }
                    run(agent_inner, rx, stop_rx).await;
                })
            })
            .context("starting the cluster agent")?;
        let started = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(anyhow!("the cluster agent stopped while joining")));
        if let Err(e) = started {
            let _ = thread.join();
            return Err(e);
        }
        Ok(Agent {
            cluster: Cluster { inner },
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Cluster {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This node leads: its controller's tables are the cluster's.
    pub fn is_leader(&self) -> bool {
        self.inner.is_leader.load(Ordering::SeqCst)
    }

    /// Leaderships won so far: a controller that sees this change publishes
    /// its tables anew.
    pub fn terms_won(&self) -> u64 {
        self.inner.terms_won.load(Ordering::SeqCst)
    }

    /// From now on, tables go into `maps` under `lock`. Applies the
    /// cluster's current tables first (waiting up to `wait` for the first
    /// read of etcd), so the node dispatches like its peers from the start.
    pub fn attach_tables(&self, maps: Maps, lock: Arc<Mutex<()>>, wait: Duration) -> Result<()> {
        let loaded = self.inner.loaded.notified();
        let is_loaded = self.state().loaded;
        if !is_loaded {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?;
            if rt
                .block_on(async { tokio::time::timeout(wait, loaded).await })
                .is_err()
            {
                bail!(
                    "etcd did not send the cluster's tables within {wait:?}; check that etcd at {:?} \
                     is healthy",
                    self.inner.opts.endpoints
                );
            }
        }
        if self.inner.target.set(Target { maps, lock }).is_err() {
            bail!("the cluster's tables are attached already");
        }
        apply_all(&self.inner, None);
        Ok(())
    }

    /// Re-applies the cluster's tables to `maps`, whose table lock the
    /// caller holds (after a reload wrote the configured ones).
    pub fn reapply(&self, maps: &Maps) {
        apply_all(&self.inner, Some(maps));
    }

    /// Connection sync: the agent tells it the peers, and reports its counters.
    pub fn attach_sync(&self, sync: Arc<SyncNode>) {
        let _ = self.inner.sync.set(sync);
        update_peers(&self.inner);
    }

    /// The node is ready for traffic: its tables are the cluster's and, if
    /// it joined with a bulk, `join` says what that brought.
    pub fn ready(&self, join: Option<&JoinReport>) {
        let mut s = self.state();
        s.ready = true;
        s.join = join.map(|r| JoinView {
            from: r.from.clone(),
            total: r.total,
            received: r.received,
            took_ms: r.took.as_millis() as u64,
        });
    }

    /// The leader's controller hands over a VIP's new table (members are
    /// this node's slots, named by `identity`). Returns false when this node
    /// does not lead: nothing is published.
    pub fn propose(
        &self,
        vip: &str,
        vip_ref: VipRef,
        table: &AwfdTable,
        identity: impl Fn(DipId) -> Option<DipRef>,
    ) -> Result<bool> {
        if !self.is_leader() {
            return Ok(false);
        }
        let classes = TableRecord::of_table(table, identity).map_err(|e| anyhow!("{e}"))?;
        self.inner
            .proposals
            .send(Proposal {
                vip: vip.to_string(),
                vip_ref,
                classes,
            })
            .map_err(|_| anyhow!("the cluster agent has stopped"))?;
        Ok(true)
    }

    /// The cluster from this node, now.
    pub fn view(&self) -> ClusterView {
        view(&self.inner)
    }
}

fn key(inner: &Inner, rest: &str) -> String {
    format!("{}/{rest}", inner.opts.prefix)
}

fn note_ok(inner: &Inner) {
    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    if s.etcd_down_since.is_some() {
        eprintln!("weir: cluster: etcd answers again");
    }
    s.etcd_error = None;
    s.etcd_down_since = None;
}

fn note_error(inner: &Inner, e: &anyhow::Error) {
    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    if s.etcd_down_since.is_none() {
        eprintln!("weir: cluster: {e:#}; the data plane keeps its tables");
        s.etcd_down_since = Some(unix_ms());
    }
    s.etcd_error = Some(format!("{e:#}"));
}

/// Takes a lease and creates this node's registration on it. Another
/// node's registration under this name is waited out for one TTL (a
/// crashed predecessor's lease ends by then); a live one stays, and this
/// fails.
async fn register(inner: &Inner) -> Result<()> {
    let ttl = inner.opts.lease_ttl.as_secs().max(1);
    let (lease, _) = inner.client.grant(ttl).await.with_context(|| {
        format!(
            "cannot join the cluster: etcd at {:?} does not answer; start etcd, fix cluster.etcd, \
             or remove [cluster] to run this node alone",
            inner.opts.endpoints
        )
    })?;
    let info = NodeInfo {
        name: inner.opts.node.clone(),
        sync: inner.opts.sync,
        started_unix_ms: unix_ms(),
    };
    let k = key(inner, &format!("nodes/{}", inner.opts.node));
    let value = serde_json::to_vec(&info)?;
    let until = Instant::now() + inner.opts.lease_ttl + Duration::from_secs(1);
    let mut waited = false;
    loop {
        let (ok, held, _) = inner
            .client
            .put_if(&Compare::Absent(k.clone()), &k, &value, lease)
            .await?;
        if ok {
            break;
        }
        if Instant::now() >= until {
            let _ = inner.client.revoke(lease).await;
            let other = held
                .and_then(|kv| serde_json::from_slice::<NodeInfo>(&kv.value).ok())
                .and_then(|i| i.sync)
                .map_or(String::new(), |a| format!(" (sync address {a})"));
            bail!(
                "the node name `{}` is in use by a live node{other} in cluster {}; give each node \
                 its own cluster.node",
                inner.opts.node,
                inner.opts.prefix
            );
        }
        if !waited {
            eprintln!(
                "weir: cluster: `{}` is still registered (a previous run?); waiting up to {:?} for \
                 its lease to end",
                inner.opts.node, inner.opts.lease_ttl
            );
            waited = true;
        }
        tokio::time::sleep(RETRY).await;
    }
    inner.state.lock().unwrap_or_else(|e| e.into_inner()).lease = lease;
    Ok(())
}

async fn run(
    inner: Arc<Inner>,
    proposals: mpsc::UnboundedReceiver<Proposal>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let tasks = [
        tokio::spawn(session(inner.clone())),
        tokio::spawn(watch(inner.clone())),
        tokio::spawn(report(inner.clone())),
        tokio::spawn(publish(inner.clone(), proposals)),
    ];
    let _ = stop.await;
    for t in &tasks {
        t.abort();
    }
    // Leave at once: the lease's keys (registration, status, leadership) go.
    let lease = inner.state.lock().unwrap_or_else(|e| e.into_inner()).lease;
    let _ = tokio::time::timeout(Duration::from_millis(500), inner.client.revoke(lease)).await;
    inner.is_leader.store(false, Ordering::SeqCst);
}

/// Keeps the lease alive, re-creates it (and the registration) when it was
/// lost, and campaigns whenever there is no leader.
async fn session(inner: Arc<Inner>) {
    let period = inner.opts.lease_ttl / 3;
    let mut last_ok = Instant::now();
    loop {
        let lease = inner.state.lock().unwrap_or_else(|e| e.into_inner()).lease;
        match inner.client.keep_alive(lease).await {
            Ok(ttl) if ttl > 0 => {
                note_ok(&inner);
                last_ok = Instant::now();
                if let Err(e) = campaign(&inner, lease).await {
                    note_error(&inner, &e);
                }
            }
            Ok(_) => {
                note_ok(&inner);
                lost_lead(&inner, "this node's lease expired");
                eprintln!("weir: cluster: this node's lease expired; joining again");
                if let Err(e) = register(&inner).await {
                    note_error(&inner, &e);
                }
                continue;
            }
            Err(e) => {
                note_error(&inner, &e);
                if last_ok.elapsed() >= inner.opts.lease_ttl {
                    lost_lead(&inner, "etcd has been unreachable for a lease's TTL");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = inner.campaign.notified() => {}
        }
    }
}

/// Tries for the leader key when nobody holds it.
async fn campaign(inner: &Inner, lease: i64) -> Result<()> {
    let leader = inner
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .leader
        .clone();
    if leader.is_some() {
        return Ok(());
    }
    let k = key(inner, "leader");
    let (won, _, revision) = inner
        .client
        .put_if(
            &Compare::Absent(k.clone()),
            &k,
            inner.opts.node.as_bytes(),
            lease,
        )
        .await?;
    if won {
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.term = Some(revision);
        s.leader = Some(inner.opts.node.clone());
        if !inner.is_leader.swap(true, Ordering::SeqCst) {
            inner.terms_won.fetch_add(1, Ordering::SeqCst);
            eprintln!("weir: cluster: this node leads (term {revision})");
        }
    }
    Ok(())
}

fn lost_lead(inner: &Inner, why: &str) {
    if inner.is_leader.swap(false, Ordering::SeqCst) {
        eprintln!("weir: cluster: this node no longer leads: {why}");
    }
    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    s.term = None;
    if s.leader.as_deref() == Some(inner.opts.node.as_str()) {
        s.leader = None;
    }
}

/// Reads the whole prefix, then follows it; reads again after any break.
async fn watch(inner: Arc<Inner>) {
    let prefix = format!("{}/", inner.opts.prefix);
    loop {
        let (kvs, revision) = match inner.client.range_prefix(&prefix).await {
            Ok(r) => r,
            Err(e) => {
                note_error(&inner, &e);
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        note_ok(&inner);
        load(&inner, kvs, revision);
        let result = inner
            .client
            .watch_prefix(&prefix, revision + 1, |events, _| changed(&inner, events))
            .await;
        if let Err(e) = result {
            note_error(&inner, &e);
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// What a key under the prefix is.
enum Entry<'a> {
    Leader,
    Node(&'a str),
    Table(&'a str),
    Status(&'a str),
}

fn entry<'a>(inner: &Inner, k: &'a str) -> Option<Entry<'a>> {
    let rest = k.strip_prefix(&inner.opts.prefix)?.strip_prefix('/')?;
    match rest.split_once('/') {
        None if rest == "leader" => Some(Entry::Leader),
        Some(("nodes", n)) => Some(Entry::Node(n)),
        Some(("tables", v)) => Some(Entry::Table(v)),
        Some(("status", n)) => Some(Entry::Status(n)),
        _ => None,
    }
}

/// A full read at `revision`: the state is exactly what etcd held then.
fn load(inner: &Inner, kvs: Vec<Kv>, revision: i64) {
    {
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.leader = None;
        s.nodes.clear();
        s.statuses.clear();
        s.records.clear();
    }
    changed(inner, kvs.into_iter().map(Event::Put).collect());
    let leaderless = {
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.loaded = true;
        // A read from before this node's own win says nothing about it.
        s.leader.is_none() && s.term.is_none_or(|t| t <= revision)
    };
    if leaderless {
        lost_lead(inner, "no leader key in etcd");
        inner.campaign.notify_one();
    }
    inner.loaded.notify_waiters();
}

/// Folds events into the state, applies new tables, and campaigns when
/// the leader key went away.
fn changed(inner: &Inner, events: Vec<Event>) {
    let mut new_tables = Vec::new();
    let mut members_changed = false;
    let mut leader_gone = false;
    {
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        for e in events {
            match e {
                Event::Put(kv) => match entry(inner, &kv.key) {
                    Some(Entry::Leader) => {
                        // The key on this node's lease is this node's lead,
                        // whoever saw the win first (the campaign or this).
                        let name = String::from_utf8_lossy(&kv.value).into_owned();
                        if kv.lease == s.lease && name == inner.opts.node {
                            s.term = Some(kv.create_revision);
                            if !inner.is_leader.swap(true, Ordering::SeqCst) {
                                inner.terms_won.fetch_add(1, Ordering::SeqCst);
                                eprintln!(
                                    "weir: cluster: this node leads (term {})",
                                    kv.create_revision
                                );
                            }
                        } else if inner.is_leader.swap(false, Ordering::SeqCst) {
                            eprintln!("weir: cluster: {name} leads now");
                            s.term = None;
                        }
                        s.leader = Some(name);
                    }
                    Some(Entry::Node(n)) => {
                        if let Ok(info) = serde_json::from_slice::<NodeInfo>(&kv.value) {
                            s.nodes.insert(n.to_string(), info);
                            members_changed = true;
                        }
                    }
                    Some(Entry::Table(v)) => {
                        if let Ok(rec) = serde_json::from_slice::<TableRecord>(&kv.value) {
                            if s.records.get(v) != Some(&rec) {
                                s.records.insert(v.to_string(), rec.clone());
                                new_tables.push(rec);
                            }
                        }
                    }
                    Some(Entry::Status(n)) => {
                        if let Ok(st) = serde_json::from_slice::<NodeStatus>(&kv.value) {
                            s.statuses.insert(n.to_string(), st);
                        }
                    }
                    None => {}
                },
                Event::Delete { key, .. } => match entry(inner, &key) {
                    Some(Entry::Leader) => {
                        s.leader = None;
                        leader_gone = true;
                    }
                    Some(Entry::Node(n)) => {
                        s.nodes.remove(n);
                        members_changed = true;
                    }
                    Some(Entry::Table(v)) => {
                        s.records.remove(v);
                    }
                    Some(Entry::Status(n)) => {
                        s.statuses.remove(n);
                    }
                    None => {}
                },
            }
        }
    }
    if leader_gone {
        lost_lead(inner, "its leader key went away");
        inner.campaign.notify_one();
    }
    if members_changed {
        update_peers(inner);
    }
    if !new_tables.is_empty() {
        apply_tables(inner, &new_tables, None);
    }
}

/// Tells connection sync where the other nodes are.
fn update_peers(inner: &Inner) {
    let Some(sync) = inner.sync.get() else { return };
    let peers = inner
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .nodes
        .values()
        .filter(|n| n.name != inner.opts.node)
        .filter_map(|n| Some((n.name.clone(), n.sync?)))
        .collect();
    sync.peers().set(peers);
}

fn apply_all(inner: &Inner, locked: Option<&Maps>) {
    let records: Vec<TableRecord> = inner
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .records
        .values()
        .cloned()
        .collect();
    apply_tables(inner, &records, locked);
}

/// Applies records to the attached maps (taking the table lock), or to
/// `locked`, whose lock the caller holds.
fn apply_tables(inner: &Inner, records: &[TableRecord], locked: Option<&Maps>) {
    let target = inner.target.get();
    let (maps, _guard) = match (locked, target) {
        (Some(m), _) => (m, None),
        (None, Some(t)) => (
            &t.maps,
            Some(t.lock.lock().unwrap_or_else(|e| e.into_inner())),
        ),
        (None, None) => return,
    };
    let ids: HashMap<VipRef, u32> = match vip_ids(maps) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("weir: cluster: reading the VIPs: {e:#}");
            return;
        }
    };
    let now = unix_ms();
    let mut results = Vec::new();
    for rec in records {
        let outcome = match ids.get(&rec.vip_ref) {
            None => Ok(Applied::NoSuchVip),
            Some(&id) => apply_record(maps, id, &rec.vip_ref, rec),
        };
        results.push((rec, outcome));
    }
    let mut guard = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let s = &mut *guard;
    for (rec, outcome) in results {
        let a = s.applied.entry(rec.vip.clone()).or_insert(AppliedTable {
            version: None,
            applied_unix_ms: None,
            delay_ms: None,
            skew: None,
        });
        match outcome {
            Ok(Applied::Done) => {
                // The delay of a change a running node saw; a node that
                // starts applies versions published long before.
                if a.version.is_some_and(|v| v != rec.version) {
                    let delay = now.saturating_sub(rec.published_unix_ms) as f64;
                    a.delay_ms = Some(delay);
                    let max = s.apply_delay_max_ms.get_or_insert(0.0);
                    *max = max.max(delay);
                }
                a.version = Some(rec.version);
                a.applied_unix_ms = Some(now);
                a.skew = None;
            }
            Ok(Applied::NoSuchVip) => {
                a.skew = Some(format!(
                    "VIP {} is not configured on this node; give every node the same VIPs",
                    rec.vip
                ));
            }
            Ok(Applied::Skewed(why)) => {
                let why = why.to_string();
                if a.skew.as_deref() != Some(why.as_str()) {
                    eprintln!(
                        "weir: cluster: VIP {}: version {} not applied: {why}",
                        rec.vip, rec.version
                    );
                }
                a.skew = Some(why);
            }
            Err(e) => {
                eprintln!(
                    "weir: cluster: VIP {}: applying version {}: {e:#}",
                    rec.vip, rec.version
                );
                a.skew = Some(format!("{e:#}"));
            }
        }
    }
}

/// Writes the leader's proposals as the next versions, while it leads. A
/// proposal that could not be written (etcd away) is retried with the next
/// proposal or after a pause; a newer proposal for a VIP replaces it.
async fn publish(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<Proposal>) {
    let mut pending: BTreeMap<String, Proposal> = BTreeMap::new();
    loop {
        let next = if pending.is_empty() {
            rx.recv().await
        } else {
            tokio::select! {
                p = rx.recv() => p,
                _ = tokio::time::sleep(RETRY) => None,
            }
        };
        if let Some(p) = next {
            pending.insert(p.vip.clone(), p);
        }
        while let Ok(p) = rx.try_recv() {
            pending.insert(p.vip.clone(), p);
        }
        let term = inner.state.lock().unwrap_or_else(|e| e.into_inner()).term;
        let Some(term) = term.filter(|_| inner.is_leader.load(Ordering::SeqCst)) else {
            pending.clear();
            continue;
        };
        let vips: Vec<String> = pending.keys().cloned().collect();
        for vip in vips {
            let p = &pending[&vip];
            let version = inner
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .records
                .get(&vip)
                .map_or(1, |r| r.version.wrapping_add(1));
            let rec = TableRecord {
                vip: vip.clone(),
                vip_ref: p.vip_ref,
                version,
                classes: p.classes.clone(),
                leader: inner.opts.node.clone(),
                published_unix_ms: unix_ms(),
            };
            let value = match serde_json::to_vec(&rec) {
                Ok(v) => v,
                Err(_) => continue,
            };
            let k = key(&inner, &format!("tables/{vip}"));
            let cmp = Compare::CreatedAt(key(&inner, "leader"), term);
            match inner.client.put_if(&cmp, &k, &value, 0).await {
                Ok((true, _, _)) => {
                    note_ok(&inner);
                    // The watch applies it, here as everywhere; noting it
                    // now keeps the next version right if the watch lags.
                    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
                    s.records.insert(vip.clone(), rec.clone());
                    drop(s);
                    apply_tables(&inner, &[rec], None);
                    pending.remove(&vip);
                }
                Ok((false, _, _)) => {
                    lost_lead(&inner, "another node holds the leader key");
                    pending.clear();
                    break;
                }
                Err(e) => {
                    note_error(&inner, &e);
                    break;
                }
            }
        }
    }
}

/// Reports this node (to etcd, on its lease) and writes `cluster.json`.
async fn report(inner: Arc<Inner>) {
    let mut n: u64 = 0;
    loop {
        tokio::time::sleep(REPORT_EVERY).await;
        n += 1;
        let v = view(&inner);
        if let Some(dir) = &inner.opts.run_dir {
            if let Ok(bytes) = serde_json::to_vec_pretty(&v) {
                let tmp = dir.join("cluster.json.tmp");
                if std::fs::write(&tmp, bytes).is_ok() {
                    let _ = std::fs::rename(&tmp, view_path(dir));
                }
            }
        }
        if n & 1 == 0 && v.etcd_ok {
            let lease = inner.state.lock().unwrap_or_else(|e| e.into_inner()).lease;
            if let Ok(value) = serde_json::to_vec(&v.this) {
                let k = key(&inner, &format!("status/{}", inner.opts.node));
                if let Err(e) = inner.client.put(&k, &value, lease).await {
                    note_error(&inner, &e);
                }
            }
        }
    }
}

fn view(inner: &Inner) -> ClusterView {
    let sync = inner.sync.get().map(|s| s.counters());
    let s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let this = NodeStatus {
        name: inner.opts.node.clone(),
        at_unix_ms: unix_ms(),
        tables: s.applied.clone(),
        apply_delay_max_ms: s.apply_delay_max_ms,
        sync,
        ready: s.ready,
    };
    let nodes = s
        .nodes
        .values()
        .map(|n| NodeView {
            name: n.name.clone(),
            sync: n.sync,
            leader: s.leader.as_deref() == Some(n.name.as_str()),
            status: if n.name == inner.opts.node {
                Some(this.clone())
            } else {
                s.statuses.get(&n.name).cloned()
            },
        })
        .collect();
    ClusterView {
        node: inner.opts.node.clone(),
        prefix: inner.opts.prefix.clone(),
        etcd: inner.opts.endpoints.clone(),
        etcd_ok: s.etcd_down_since.is_none(),
        etcd_error: s.etcd_error.clone(),
        etcd_down_since_unix_ms: s.etcd_down_since,
        leader: s.leader.clone(),
        is_leader: inner.is_leader.load(Ordering::SeqCst),
        terms_won: inner.terms_won.load(Ordering::SeqCst),
        nodes,
        tables: s
            .records
            .values()
            .map(|r| TableView {
                vip: r.vip.clone(),
                version: r.version,
                leader: r.leader.clone(),
                published_unix_ms: r.published_unix_ms,
            })
            .collect(),
        this,
        join: s.join.clone(),
        at_unix_ms: unix_ms(),
    }
}
