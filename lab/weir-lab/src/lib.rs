//! weir-lab: network-namespace labs, lab servers and clients, the demo and
//! the benchmarks.

pub mod backend;
pub mod bench;
pub mod browser;
pub mod client;
pub mod cores;
pub mod cpus;
pub mod daemon;
pub mod demo;
pub mod frr;
pub mod hnlb;
pub mod kv;
pub mod leaks;
pub mod netns;
pub mod scale;
pub mod spotlight;
pub mod synflood;
pub mod text_table;
pub mod topology;
pub mod traffic;
pub mod weir_binary;
