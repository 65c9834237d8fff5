//! Key-value (memcached) switching: nutcracker-compatible key hashing and
//! distributions, so that weir and a twemproxy pool agree on the owner of
//! every key.
//!
//! - [`hash`]: the twelve hash functions nutcracker names, bit for bit.
//! - [`dist`]: ketama, modula and random over a list of servers, and the
//!   sorted continuum the XDP program reads from a BPF array map.

pub mod dist;
pub mod hash;

pub use dist::{DistError, DistKind, Distribution, Server};
pub use hash::{hash, HashKind};
