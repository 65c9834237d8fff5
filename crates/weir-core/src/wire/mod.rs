//! The packet model for building frames: one `Repr` per header (what the
//! header says, not its bytes) whose `emit` writes the header with every
//! length and checksum computed, by `crate::csum`. The BPF tests build
//! their inputs and expected outputs with it, the traffic generator its
//! template frames and the XDP bench its flows' frames.
//!
//! Only emitting lives here: parsing for the data path is `crate::flow`'s.

mod encap;
mod ethernet;
mod frame;
mod ip;
mod memcached;
mod tcp;
mod udp;

pub use encap::{encapsulate, Encap, DEFAULT_MTU as DEFAULT_ENCAP_MTU};
pub use ethernet::{EthernetRepr, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HLEN};
pub use frame::{ipv6_with_exts, raw_frame, Frame, L4};
pub use ip::{
    refresh_ipv4_checksum, IpRepr, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, IPV4_HLEN,
    IPV6_HLEN,
};
pub use memcached::{memcached_udp, MEMCACHED_UDP_HLEN};
pub use tcp::{TcpFlags, TcpRepr, TCP_HLEN};
pub use udp::{UdpRepr, UDP_HLEN};
