//! `weir serve`'s part in a cluster (`[cluster]`, weir-cluster).
//!
//! 1. Preflight ([`plan`], [`Plan::join`]): the sync key, the sync
//!    interface's address, etcd and this node's name are checked before
//!    anything is loaded, so a bad one leaves nothing attached.
//! 2. After the configuration is applied and before XDP is attached
//!    ([`Member::start`]): the cluster's tables replace the configured
//!    ones, connection sync starts, and the node asks a peer for every
//!    established connection (the join's bulk), so it takes traffic only
//!    with the tables and connections its peers have.
//!
//! With `--takeover` the predecessor holds the node's name and sync port
//! until it retires, and its table is inherited: the node joins after the
//! predecessor is gone. While no process of this node held the sync port,
//! peers' announcements to it were lost, and what the new program installed
//! waited in a ring nobody drained yet: so the node asks a peer for the
//! join's bulk as a fresh node does (installs never replace an entry it
//! has), and sends its own table to its peers once.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use weir_cluster::config::{interface_address, read_key};
use weir_cluster::sync::node::{SyncNode, SyncOptions};
use weir_cluster::sync::wire::Key;
use weir_cluster::{Agent, AgentOptions};
use weir_config::{ClusterCfg, Config};
use weir_dataplane::maps::Maps;
use weir_dataplane::sync_events::SyncMaps;

use crate::controller::Shared;

/// How long a node waits for etcd's first read of the cluster's tables.
const TABLES_WAIT: Duration = Duration::from_secs(5);

/// What preflight checked of `[cluster]`.
pub struct Plan {
    cfg: ClusterCfg,
    /// The sync key and address, with connection sync on.
    sync: Option<(Key, SocketAddr)>,
    agent: AgentOptions,
}

/// `[cluster]`'s checks that need nothing loaded; None without `[cluster]`.
pub fn plan(cfg: &Config, run_dir: &Path) -> Result<Option<Plan>> {
    let Some(c) = &cfg.cluster else {
        return Ok(None);
    };
    let sync = if *c.connection_sync.get_ref() {
        let key = read_key(c).map_err(|e| anyhow!(e))?;
        let iface = c
            .sync_interface
            .as_ref()
            .map_or("", |i| i.get_ref().as_str());
        let ip = interface_address(iface).map_err(|e| anyhow!(e))?;
        Some((key, SocketAddr::new(ip, *c.sync_port.get_ref())))
    } else {
        None
    };
    Ok(Some(Plan {
        cfg: c.clone(),
        agent: AgentOptions {
            node: c.node.get_ref().clone(),
            prefix: c.prefix.get_ref().clone(),
            endpoints: c.endpoints(),
            lease_ttl: c.lease_ttl(),
            realtime: *c.realtime.get_ref(),
            sync: sync.as_ref().map(|(_, a)| *a),
            run_dir: Some(run_dir.to_path_buf()),
        },
        sync,
    }))
}

impl Plan {
    /// Reaches etcd and registers this node (a clear error when etcd does
    /// not answer or the name is taken).
    pub fn join(&self) -> Result<Agent> {
        let agent = Agent::join(self.agent.clone())?;
        log::info!(
            "cluster: joined {} as {} (etcd {:?})",
            self.agent.prefix,
            self.agent.node,
            self.agent.endpoints
        );
        Ok(agent)
    }

    /// Connection sync's announcements from the data plane (a load-time flag).
    pub fn conn_sync(&self) -> bool {
        self.sync.is_some()
    }
}

/// This node in its cluster; leaves it when dropped (connection sync stops,
/// the lease is revoked: another node leads at once if this one did).
pub struct Member {
    // Dropped first: sync uses the peers the agent keeps.
    _sync: Option<Arc<SyncNode>>,
    _agent: Agent,
}

impl Member {
    /// Puts the cluster's tables in force and starts connection sync, then
    /// asks a peer for every established connection; with `inherited` (a
    /// takeover: the data plane ran before this process joined), also
    /// sends this node's table to every peer.
    pub fn start(
        plan: &Plan,
        agent: Agent,
        sync_maps: Option<SyncMaps>,
        shared: &Arc<Shared>,
        cfg: &Config,
        inherited: bool,
    ) -> Result<Member> {
        let pin_dir = &cfg.dataplane.pin_dir;
        let cluster = agent.cluster().clone();
        cluster
            .attach_tables(
                Maps::pinned(pin_dir).context("cluster: opening the maps")?,
                shared.table_lock.clone(),
                TABLES_WAIT,
            )
            .context("cluster: taking the cluster's tables")?;
        let _ = shared.cluster.set(cluster.clone());
        let sync = match &plan.sync {
            None => None,
            Some((key, addr)) => {
                let node = SyncNode::start(
                    SyncOptions {
                        name: plan.agent.node.clone(),
                        key: key.clone(),
                        bind: *addr,
                        pin_dir: pin_dir.clone(),
                        budget: plan.cfg.sync_budget(cfg.dataplane.conn_table_size),
                        timeouts: cfg.dataplane.timeouts.to_conn_timeouts(),
                        realtime: *plan.cfg.realtime.get_ref(),
                    },
                    sync_maps,
                )?;
                let node = Arc::new(node);
                cluster.attach_sync(node.clone());
                log::info!("cluster: connection sync on {addr}");
                Some(node)
            }
        };
        let mut joined = None;
        if let Some(s) = &sync {
            let timeout = Duration::from_millis(*plan.cfg.join_timeout_ms.get_ref());
            let r = s.join(timeout);
            match &r.from {
                Some(peer) => log::info!(
                    "cluster: {} established connections from {peer} ({} received) in {} ms",
                    r.total,
                    r.received,
                    r.took.as_millis()
                ),
                None if s.peers().get().is_empty() => {
                    log::info!("cluster: no peer to learn connections from: the first node")
                }
                None => log::warn!(
                    "cluster: no peer answered the join within {timeout:?}; starting without \
                     their connections"
                ),
            }
            joined = Some(r);
            if inherited {
                match s.announce_table() {
                    Ok(n) => log::info!(
                        "cluster: sent this node's {n} established connections to its peers"
                    ),
                    Err(e) => log::warn!(
                        "cluster: this node's connections not sent to its peers ({e:#}); \
                         those installed during the takeover move if ECMP moves them"
                    ),
                }
            }
        }
        cluster.ready(joined.as_ref());
        Ok(Member {
            _sync: sync,
            _agent: agent,
        })
    }
}
