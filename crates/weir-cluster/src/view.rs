//! What the cluster looks like from one node: what it writes to etcd about
//! itself, and what `weir status`, the API and `/metrics` show
//! (`<run dir>/cluster.json`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sync::stats::Counters;

/// A node's registration (`<prefix>/nodes/<name>`, on the node's lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// Where peers send it sync datagrams (none: sync off).
    pub sync: Option<SocketAddr>,
    pub started_unix_ms: u64,
}

/// A VIP's table as applied on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedTable {
    /// The cluster version in force here (none: not applied yet).
    pub version: Option<u32>,
    pub applied_unix_ms: Option<u64>,
    /// From the leader's publication to the apply here, in ms.
    pub delay_ms: Option<f64>,
    /// Why the latest record could not be applied (configuration skew).
    pub skew: Option<String>,
}

/// A node's report of itself (`<prefix>/status/<name>`, on its lease).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    pub at_unix_ms: u64,
    pub tables: BTreeMap<String, AppliedTable>,
    /// The longest apply delay this node has seen, in ms.
    pub apply_delay_max_ms: Option<f64>,
    pub sync: Option<Counters>,
    /// The node has the cluster's tables and, joining, its peers'
    /// connections: it may take traffic.
    pub ready: bool,
}

/// One node as this node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub sync: Option<SocketAddr>,
    pub leader: bool,
    pub status: Option<NodeStatus>,
}

/// A VIP's latest table in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableView {
    pub vip: String,
    pub version: u32,
    pub leader: String,
    pub published_unix_ms: u64,
}

/// What a join brought (a node asks a peer for its connections before it
/// attaches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinView {
    pub from: Option<String>,
    pub total: u64,
    pub received: u64,
    pub took_ms: u64,
}

/// The cluster from this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub node: String,
    pub prefix: String,
    pub etcd: Vec<SocketAddr>,
    /// The last call to etcd succeeded.
    pub etcd_ok: bool,
    pub etcd_error: Option<String>,
    /// Since when etcd has been unreachable: tables stay as they are.
    pub etcd_down_since_unix_ms: Option<u64>,
    pub leader: Option<String>,
    pub is_leader: bool,
    /// Leaderships this node has won since it started.
    pub terms_won: u64,
    pub nodes: Vec<NodeView>,
    pub tables: Vec<TableView>,
    /// This node's own view of its tables.
    pub this: NodeStatus,
    pub join: Option<JoinView>,
    pub at_unix_ms: u64,
}

/// The file `weir status` reads the cluster view from.
pub fn view_path(run_dir: &Path) -> PathBuf {
    run_dir.join("cluster.json")
}

/// The view `weir serve` last wrote, if it runs in a cluster.
pub fn read_view(run_dir: &Path) -> Option<ClusterView> {
    let text = std::fs::read_to_string(view_path(run_dir)).ok()?;
    serde_json::from_str(&text).ok()
}
