//! weir-core: the sans-IO heart of weir.
//!
//! No sockets, no clocks, no BPF: flow keys, the flow hash, the dispatch
//! tables, the dispatchers, capacity estimation and consistent hashing. The
//! XDP data plane, the controller and the simulator all call this code, so
//! they agree on which DIP a flow goes to. The software tier's decisions
//! live here too: its workers' utilization metric and which connections
//! the fast table holds.

pub mod awfd;
pub mod csum;
pub mod dispatch;
pub mod distribution;
pub mod estimate;
pub mod flow;
pub mod hash;
pub mod kv;
pub mod maglev;
pub mod offload;
pub mod reorder;
pub mod slb;
pub mod splitmix;
pub mod topology;
pub mod utilization;
pub mod vectors;
pub mod vip_slot;
pub mod wire;
