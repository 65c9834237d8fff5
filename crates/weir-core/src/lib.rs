//! weir-core: the sans-IO heart of weir.
//!
//! No sockets, no clocks, no BPF: flow keys, the flow hash, the dispatch
//! tables, the dispatchers (AWFD's table builder among them), capacity
//! estimation and consistent hashing. The XDP data plane, the controller,
//! the software tier's engine (`weir-software-engine`) and the simulator all
//! call this code, so they agree on which DIP a flow goes to.

pub mod conn_timeouts;
pub mod cost;
pub mod csum;
pub mod dispatch;
pub mod estimate;
pub mod flow;
pub mod flow_hash;
pub mod hotkeys;
pub mod mac;
pub mod maglev;
pub mod quic_lb;
pub mod reorder_bounds;
pub mod splitmix;
pub mod syn_budget;
pub mod vectors;
pub mod vip_slot;
pub mod wire;
pub mod worker_policy;
