//! The memcached switch's lab and benchmarks (the switch itself is weir-kv).
//!
//! - [`lab`]: namespaces with memcached servers, a switch and a client, for
//!   the end-to-end tests and `weir-lab bench kv --udp`.
//! - [`testbed`]: real memcached and nutcracker processes.
//! - [`bench`], [`bench_udp`], [`bench_bpf`]: `weir-lab bench kv` (TCP, and
//!   UDP with `--udp`) and `weir-lab bench kv-bpf` (BPF run time per switch
//!   path).

pub mod bench;
pub mod bench_bpf;
pub mod bench_udp;
pub mod lab;
pub mod testbed;
