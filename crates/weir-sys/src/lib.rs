//! The operating-system calls weir makes, in one place: clocks, CPU sets,
//! network interfaces, and the kernel's route, neighbour and address tables
//! (over NETLINK_ROUTE), signals taken synchronously and SIGPIPE's default
//! action for commands that print and exit. Every `unsafe` block of these wrappers lives here,
//! each with the reason it is sound; the crates above call safe functions.

mod clock;
mod cpus;
mod iface;
mod netlink;
mod signals;

pub use clock::{boottime_ns, monotonic_coarse_ns, monotonic_ns, thread_cpu_ns};
pub use cpus::{
    allowed_cpus, format_cpu_list, online_cpus, parse_cpu_list, pin_current_thread, pin_thread,
};
pub use iface::{ifindex, ifname, mac_address};
pub use netlink::{local_addrs, neighbour_mac, route_to, Route};
pub use signals::{restore_default_sigpipe, SignalSet};
