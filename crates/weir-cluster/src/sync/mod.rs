//! Connection sync: a node that installs a connection tells its peers, and
//! they install it too, so a connection that ECMP moves to another node
//! stays on its DIP (IPVS's sync daemon, for XDP).
//!
//! - [`wire`]: the datagram, sans-IO (encode, authenticate, decode, replay).
//! - [`install`]: records into this node's connection table and back.
//! - [`gate`]: who gets a bulk (members, at their registered address,
//!   through a challenge), sans-IO.
//! - [`stats`]: the counters and the lag (sync window) histogram.
//! - [`node`]: the socket and the threads.

pub mod gate;
pub mod install;
pub mod node;
pub mod stats;
pub mod wire;
