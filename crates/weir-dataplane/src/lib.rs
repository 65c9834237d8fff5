//! weir's XDP data plane: skeletons, loading, attaching, pinning, map access.
//!
//! - [`loader`] opens the `weir_lb` skeleton, applies load-time constants and
//!   map sizes, reuses pinned state and loads it.
//! - [`features`] is what a load of `weir_lb` carries (its modes, QUIC,
//!   telemetry); the loader leaves the rest out.
//! - [`maps`] is typed access to every map, from a loaded program or from
//!   the pins of a running one (what `weir status` reads).
//! - [`attach`] attaches and detaches XDP on interfaces.
//! - [`nexthop`] resolves DIPs' next hops from the kernel's route and
//!   neighbour tables and watches them for changes (netlink).
//! - [`conntrack`] ages connection entries: the data plane's clock and
//!   expiry rule in user space, and the sweep that deletes expired entries.
//! - [`testrun`] runs a program on a packet through BPF_PROG_TEST_RUN.
//! - [`decap`] loads the backends' decapsulation program `weir_decap` (for
//!   the ipip and gue modes) and reads its counters.
//! - [`runstats`] reads a program's BPF run-time statistics.
//! - [`sync_events`] reads the connections `weir_lb` announces for
//!   connection sync (its ring buffer and counters).

pub mod attach;
pub mod conntrack;
pub mod decap;
pub mod features;
pub mod flow_table;
pub mod iface;
pub mod loader;
pub mod maps;
pub mod nexthop;
pub mod runstats;
pub mod sync_events;
pub mod testrun;

pub mod skel {
    //! Generated libbpf-rs skeletons of the programs under `bpf/`.
    #![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
    pub mod lb {
        include!(concat!(env!("OUT_DIR"), "/weir_lb.skel.rs"));
    }
    pub mod decap {
        include!(concat!(env!("OUT_DIR"), "/weir_decap.skel.rs"));
    }
}
