//! Reading the connection table a daemon pinned.

use weir_core::flow::FlowTuple;
use weir_dataplane::maps::Maps;
use weir_lab::daemon::Daemon;

/// The 5-tuples of the connections in the table that `d` pinned that
/// `keep` accepts.
pub fn pinned_connections(d: &Daemon, keep: impl Fn(&FlowTuple) -> bool) -> Vec<FlowTuple> {
    let maps = Maps::pinned(&d.pin_dir).expect("opening a node's pinned maps");
    maps.conns()
        .expect("reading a node's connection table")
        .iter()
        .filter_map(|(k, _)| FlowTuple::from_key(k))
        .filter(|f| keep(f))
        .collect()
}
