//! The harness of weir's end-to-end tests, so that each test file holds
//! only its scenario: configuration text for the lab's topology
//! (`config`), starting the lab's backends and `weir serve` (`daemon`),
//! new and long-lived connections through the VIPs (`connections`), the
//! connection table a daemon pinned (`conn_table`), a fake agent (`agent`),
//! reading `weir status --json` and the workers' report (`status`), HTTP
//! calls inside a namespace (`http`), signals, namespaces and child
//! processes (`process`), raw frames (`packet_socket`), an immutable
//! directory (`immutable`), what a refused start must not leave
//! (`leftovers`), temporary directories (`temp`), bounded
//! waits (`wait`) and the QUIC lab's aioquic backends and its aioquic and
//! ngtcp2 clients (`quic`). The topology, daemon, backends and clients
//! themselves are weir_lab's.
// Each test binary uses its own part of the harness.
#![allow(dead_code, unused_imports)]

pub mod agent;
pub mod config;
pub mod conn_table;
pub mod connections;
pub mod daemon;
pub mod http;
pub mod immutable;
pub mod leftovers;
pub mod packet_socket;
pub mod process;
pub mod quic;
pub mod status;
pub mod temp;
pub mod wait;

pub use agent::{http_ok, FakeAgent};
pub use config::{dataplane, dip, lab_services, vip};
pub use conn_table::pinned_connections;
pub use connections::{assert_some_on, join_unbroken, new_connections};
pub use daemon::{
    exe, serial, start_backends, start_backends_with, start_daemon, start_nodes, Speakers, WEIR,
};
pub use http::{call, call_with, metrics, raw};
pub use immutable::Immutable;
pub use leftovers::{assert_nothing_left, attached_programs};
pub use packet_socket::PacketSocket;
pub use process::{alive, command_in, output_within, send_signal, weir, weir_in, Interrupted};
pub use status::{counter, status_text, worker_counter};
pub use temp::TempDir;
pub use wait::{assert_within, wait_for};

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Bytes a command printed, as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
