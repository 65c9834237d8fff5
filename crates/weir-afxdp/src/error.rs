//! Every way setting up or running an AF_XDP socket can fail, each with
//! what is wrong and what to do about it.

use std::io;

/// An AF_XDP error. Setup errors name the interface and queue; the hints
/// follow from the errno the kernel gave.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A [`Config`](crate::Config) value the kernel would refuse.
    #[error("invalid AF_XDP setting: {0}")]
    Config(String),

    #[error("no network interface named {0:?} in this network namespace (see `ip link`)")]
    NoInterface(String),

    #[error(
        "{iface} has no queue {queue}: its queues are 0..={last}; pick one of those \
         (or add queues with `ethtool -L {iface}`)",
        last = queues - 1
    )]
    NoQueue {
        iface: String,
        queue: u32,
        queues: u32,
    },

    #[error(
        "allocating the UMEM for {iface} queue {queue} ({frame_count} frames of {frame_size} B, \
         {mib} MiB): {cause}; {hint}",
        mib = (*frame_count as u64 * *frame_size as u64) >> 20
    )]
    Umem {
        iface: String,
        queue: u32,
        frame_count: u32,
        frame_size: u32,
        cause: String,
        hint: &'static str,
    },

    #[error("binding an AF_XDP socket to {iface} queue {queue} in {mode} mode: {source}; {hint}")]
    Bind {
        iface: String,
        queue: u32,
        mode: &'static str,
        source: io::Error,
        hint: &'static str,
    },

    #[error("registering the AF_XDP socket of {iface} queue {queue} in map {map}: {reason}")]
    XskMap {
        iface: String,
        queue: u32,
        map: String,
        reason: String,
    },

    /// A socket call on a bound socket failed (statistics, wakeups).
    #[error("{what} on the AF_XDP socket of {iface} queue {queue}: {source}")]
    Socket {
        what: &'static str,
        iface: String,
        queue: u32,
        source: io::Error,
    },

    #[error("CPU {cpu} does not exist here (online CPUs: {online}); pick one of those")]
    NoCpu { cpu: usize, online: String },

    #[error(
        "CPU {cpu} is outside this process's CPU set ({allowed}); pick one of those or widen \
         the set (taskset, the cgroup's cpuset)"
    )]
    CpuNotAllowed { cpu: usize, allowed: String },

    #[error("pinning the thread to CPU {cpu}: {source}")]
    Pin { cpu: usize, source: io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

/// What to do about a UMEM the kernel refused, by errno.
pub(crate) fn umem_hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::ENOMEM) => "not enough memory: lower frame_count or frame_size",
        Some(libc::ENOBUFS) => {
            "it exceeds the locked-memory limit: raise RLIMIT_MEMLOCK (`ulimit -l`, \
             LimitMEMLOCK= under systemd) or run with CAP_IPC_LOCK"
        }
        Some(libc::EPERM) | Some(libc::EACCES) => "AF_XDP sockets need CAP_NET_RAW: run as root",
        Some(libc::EAFNOSUPPORT) => "this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)",
        Some(libc::EINVAL) => {
            "the kernel refused the layout: frame_size must be a power of two from 2048 to \
             the page size"
        }
        _ => "see the kernel log (`dmesg`)",
    }
}

/// The likely cause of a failed bind, by errno.
pub(crate) fn bind_hint(errno: Option<i32>) -> &'static str {
    match errno {
        Some(libc::EBUSY) => {
            "the queue already has an AF_XDP socket (another worker or program): stop it or \
             pick another queue"
        }
        Some(libc::EINVAL) => {
            "the queue does not exist on this interface, or the driver refused the ring sizes \
             or bind flags"
        }
        Some(libc::EOPNOTSUPP) => {
            "the driver has no zero-copy AF_XDP support: use copy mode (or auto, which falls \
             back to it)"
        }
        Some(libc::ENODEV) => "the interface went away",
        Some(libc::ENETDOWN) => "the interface is down: `ip link set <iface> up`",
        Some(libc::EPERM) | Some(libc::EACCES) => "AF_XDP sockets need CAP_NET_RAW: run as root",
        Some(libc::ENOMEM) => "not enough memory for the rings: lower ring_size",
        Some(libc::ENOBUFS) => {
            "the rings exceed the locked-memory limit: raise RLIMIT_MEMLOCK or lower ring_size"
        }
        _ => "see the kernel log (`dmesg`)",
    }
}
