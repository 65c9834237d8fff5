//! weir-kv: the memcached switch's user-space side.
//!
//! - [`config`]: a nutcracker YAML pool or weir's own TOML, validated with
//!   `file:line: field: message` errors; options weir cannot honour are
//!   refused by name.
//! - [`proto`]: sans-IO parsing of memcached ASCII requests and responses.
//! - [`proxy`]: the TCP proxy (mio, one event loop per worker thread,
//!   persistent pipelined server connections, multi-key gets split by server
//!   and merged in order).
//! - [`invalidate`]: the hook every mutating command passes through before
//!   it is forwarded, so the XDP hot-key cache never serves a value older
//!   than a write the switch saw.
//! - [`udp`]: the XDP switch (`weir_kv`) loaded and attached, the hot-key
//!   loop that fills its cache, and the XDP invalidator of the TCP proxy.
//! - [`lab`]: namespaces with memcached servers, a switch and a client, for
//!   the end-to-end tests and `weir bench kv --udp`.
//! - [`stats`]: counters shared by the workers.
//! - [`status`]: what a running switch reports (`/status`, `weir kv status`,
//!   the read-only management API's views); [`metrics`]: the same as
//!   Prometheus metrics; [`endpoint`]: the HTTP routes that serve them.
//! - [`bench`], [`bench_udp`], [`bench_bpf`]: `weir bench kv` (TCP, and UDP
//!   with `--udp`) and `weir bench kv-bpf` (BPF run time per switch path).

pub mod bench;
pub mod bench_bpf;
pub mod bench_udp;
pub mod cli;
pub mod config;
pub mod endpoint;
pub mod invalidate;
pub mod lab;
pub mod metrics;
pub mod proto;
pub mod proxy;
pub mod stats;
pub mod status;
pub mod testbed;
pub mod udp;
