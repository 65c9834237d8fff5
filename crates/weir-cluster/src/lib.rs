//! weir's scale-out: several weir nodes behind a router's ECMP.
//!
//! - Shared table versions: one node's controller leads (an etcd lease);
//!   it publishes each VIP's table, and every node applies the same
//!   versions ([`agent`], [`record`], [`apply`], over [`etcd`]'s small JSON
//!   gateway client), so every node sends a new connection to the same DIP.
//! - Connection sync ([`sync`]): a node that installs a connection tells
//!   the others, so a connection that ECMP moves to another node keeps its
//!   DIP; a joining node first asks a peer for every connection it knows.
//! - [`config`] is the `[cluster]` section; [`view`] what status shows;
//!   [`realtime`] the priority of the cluster's threads.
//!
//! Without `[cluster]`, weir is a single node and none of this runs.

pub mod agent;
pub mod apply;
pub mod config;
mod etcd;
mod realtime;
pub mod record;
pub mod sync;
pub mod view;

pub use agent::{Agent, AgentOptions, Cluster};
