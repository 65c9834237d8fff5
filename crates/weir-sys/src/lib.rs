//! The operating-system calls weir makes, in one place: clocks, CPU sets,
//! network interfaces (their addresses, links, drivers, offloads and XDP
//! features), the kernel's route, neighbour and address tables (over
//! NETLINK_ROUTE), signals (taken synchronously by daemons; SIGPIPE's default
//! action for commands that print and exit), processes, namespaces, the BPF
//! filesystem, sockets (socket options, wakeups, packet sockets), random
//! bytes, TUN devices and splicing between sockets. Every `unsafe` block of these
//! wrappers lives here, each with the reason it is sound; the crates above
//! call safe functions.

mod addrs;
mod clock;
mod cpus;
mod ethtool;
pub mod fs;
mod genl;
mod iface;
mod link;
mod memory;
pub mod namespaces;
mod netlink;
mod netlink_watch;
mod packet;
mod pipe;
pub mod process;
mod random;
mod signals;
pub mod socket;
mod splice;
mod tun;

pub use addrs::interface_addrs;
pub use clock::{
    boottime_ns, clock_ticks_per_second, monotonic_coarse_ns, monotonic_ns, thread_cpu_ns,
};
pub use cpus::{
    allowed_cpus, format_cpu_list, online_cpus, parse_cpu_list, pin_current_thread, pin_thread,
};
pub use ethtool::{driver, features, Feature};
pub use genl::{xdp_features, XdpFeatures};
pub use iface::{ifindex, ifname, interfaces, mac_address, queue_count};
pub use link::{link, netns_name, Link};
pub use memory::{page_size, physical_memory};
pub use netlink::{local_addrs, neighbour_mac, route_to, Route};
pub use netlink_watch::RouteWatch;
pub use packet::{PacketSocket, SockFilter};
pub use pipe::{pipe, PIPE_FD_FLOOR};
pub use random::fill_random;
pub use signals::{restore_default_sigpipe, SignalSet};
pub use splice::{unread_bytes, SplicePipe};
pub use tun::TunAnchor;
