//! weir's software tier: user-space workers that run the sans-IO load
//! balancer (`weir_core::slb`) on AF_XDP sockets (`weir-afxdp`), fed by the
//! XDP program's steering, with the tables the controller publishes for XDP.
//!
//! - [`tables`]: the VIPs, DIP slots and active AWFD tables, read from the
//!   data plane's maps.
//! - [`nexthop`]: each DIP's egress interface and MACs, from the kernel's
//!   route and neighbour tables.

pub mod nexthop;
pub mod tables;
