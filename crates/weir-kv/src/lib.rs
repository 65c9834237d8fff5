//! weir-kv: the memcached switch's user-space side.
//!
//! - `config`: a nutcracker YAML pool or weir's own TOML, validated with
//!   `file:line: field: message` errors; options weir cannot honour are
//!   refused by name.
//! - [`route`]: sans-IO, which server owns a key: nutcracker's hash
//!   functions and distributions (ketama, modula, random), bit for bit.
//! - `proto`: sans-IO parsing of memcached ASCII requests and responses;
//!   `meta`: the meta commands' (`mg ms md ma mn me`) framing, with
//!   memcached's base64 keys.
//! - `proxy`: the TCP proxy (mio, one event loop per worker thread,
//!   persistent pipelined server connections, multi-key gets split by server
//!   and merged in order).
//! - `invalidate`: the hook every mutating command passes through before
//!   it is forwarded, so the XDP hot-key cache never serves a value older
//!   than a write the switch saw.
//! - [`xdp`]: the XDP switch `bpf/kv/weir_kv.bpf.c` (built by this crate's
//!   build.rs): loading it, its typed maps, its cache and counters.
//! - `udp`: the XDP switch (`weir_kv`) loaded and attached, the hot-key
//!   loop that fills its cache, and the XDP invalidator of the TCP proxy.
//! - `stats`: counters shared by the workers; `health`: each server's
//!   state (unknown, up, down, ejected), since when, its last error, and
//!   nutcracker's `auto_eject_hosts` bookkeeping; `routing`: the
//!   distribution in force with the ejected servers taken out (nutcracker's
//!   rehash, or weir's failover), shared by the workers and the XDP path.
//! - `pools`: the pools one switch runs, each on its own listener, and
//!   the reload that applies a re-read file to them; `reload`: the
//!   `weir kv reload` client.
//! - `status`: what a running switch reports (`/status`, `weir kv status`,
//!   the read-only management API's views); `metrics`: the same as
//!   Prometheus metrics; `endpoint`: the HTTP routes that serve them.
//!
//! The crate exports the `weir kv` command, the configuration parsers, the
//! proxy, the XDP switch's service and the cache-invalidation hook below;
//! [`route`] and [`xdp`] are public whole, for the lab's benchmarks and the
//! switch's tests.
//!
//! Its lab and benchmarks are weir-lab's `kv` module (`weir-lab bench kv`).

mod cli;
mod config;
mod endpoint;
mod health;
mod invalidate;
mod meta;
mod metrics;
mod pools;
mod proto;
mod proxy;
mod reload;
pub mod route;
mod routing;
mod stats;
mod status;
mod udp;
pub mod xdp;

mod skel {
    //! The generated libbpf-rs skeleton of `bpf/kv/weir_kv.bpf.c`.
    #![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
    include!(concat!(env!("OUT_DIR"), "/weir_kv.skel.rs"));
}

pub use cli::{
    http_get, load as load_config, run, start, start_from, KvArgs, KvStatus, Running, Status,
};
pub use config::{parse_nutcracker, parse_nutcracker_pools, parse_toml, ConfigError, KvConfig};
pub use health::{EjectMode, EjectPolicy, HealthReport, ServerState};
pub use invalidate::{Invalidated, Invalidation, Invalidator, Recorder};
pub use proxy::Proxy;
pub use status::ServerStatus;
pub use udp::{StatusHandle, UdpStatus, UdpSwitch, XdpInvalidator};
