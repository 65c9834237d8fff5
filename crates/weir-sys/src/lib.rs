//! The operating-system calls weir makes, in one place: clocks, CPU sets,
//! network interfaces (their links, drivers, offloads and XDP features), the
//! kernel's route, neighbour and address tables (over NETLINK_ROUTE), and
//! signals taken synchronously. Every `unsafe` block of these wrappers lives here,
//! each with the reason it is sound; the crates above call safe functions.

mod clock;
mod cpus;
mod ethtool;
mod genl;
mod iface;
mod link;
mod netlink;
mod signals;

pub use clock::{boottime_ns, monotonic_coarse_ns, monotonic_ns, thread_cpu_ns};
pub use cpus::{
    allowed_cpus, format_cpu_list, online_cpus, parse_cpu_list, pin_current_thread, pin_thread,
};
pub use ethtool::{driver, features, Feature};
pub use genl::{xdp_features, XdpFeatures};
pub use iface::{ifindex, ifname, mac_address};
pub use link::{link, netns_name, Link};
pub use netlink::{local_addrs, neighbour_mac, route_to, Route};
pub use signals::SignalSet;
