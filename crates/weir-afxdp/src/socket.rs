//! Creating a socket: checks, the UMEM, binding (zero-copy first where
//! asked, copy mode as the fallback), busy polling, the first fill.

use std::ffi::CString;
use std::io;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

use crate::config::{BusyPoll, Config, Mode};
use crate::error::{bind_hint, umem_hint, Error, Result};
use crate::iface::Interface;
use crate::sockopt;
use crate::stats::{Counters, KernelStats};

/// An AF_XDP socket bound to one (interface, queue), with a UMEM of its own
/// and its four rings. One worker thread owns it and polls it.
///
/// Every UMEM frame is in exactly one place: the free list, the fill ring,
/// the RX ring, a batch being handled, or the TX ring until the completion
/// ring returns it. That is what makes the in-place access safe.
pub struct Socket {
    pub(crate) iface: Interface,
    pub(crate) queue: u32,
    pub(crate) batch: usize,
    pub(crate) ring_size: u32,
    pub(crate) zero_copy: bool,
    pub(crate) busy_poll: Option<BusyPoll>,
    /// Whether the NAPI context busy polling needs has been looked at.
    pub(crate) napi_checked: bool,
    pub(crate) umem: Umem,
    pub(crate) fill: FillQueue,
    pub(crate) comp: CompQueue,
    pub(crate) rx: RxQueue,
    pub(crate) tx: TxQueue,
    /// Frames user space holds that are in no ring.
    pub(crate) free: Vec<FrameDesc>,
    pub(crate) rx_batch: Vec<FrameDesc>,
    pub(crate) tx_batch: Vec<FrameDesc>,
    /// Frames put on the TX ring and not yet back from the completion ring.
    pub(crate) tx_outstanding: u32,
    pub(crate) counters: Counters,
}

// Workers create their sockets up front, where a bad interface or queue is
// one clear error before any thread starts, and move them to their threads.
const _: () = {
    const fn send<T: Send>() {}
    send::<Socket>();
};

impl Socket {
    /// Creates a socket on `iface` queue `queue`. The socket receives
    /// nothing until it is registered in the XSKMAP of an XDP program
    /// attached to `iface` (see [`Socket::register`]).
    pub fn new(iface: &str, queue: u32, config: &Config) -> Result<Socket> {
        config.validate()?;
        let iface = Interface::by_name(iface)?;
        iface.check_queue(queue)?;
        let (umem, frames) = create_umem(&iface, queue, config)?;
        let (tx, rx, rings) = bind(&umem, &iface, queue, config)?;
        let fd = rx.fd().as_raw_fd();
        let socket_err = |what, source| Error::Socket {
            what,
            iface: iface.name.clone(),
            queue,
            source,
        };
        // A UMEM of its own always gets its own fill and completion rings.
        let (fill, comp) = rings.ok_or_else(|| {
            socket_err(
                "libxdp returned no fill and completion rings",
                io::Error::other("unexpected shared UMEM context"),
            )
        })?;
        let zero_copy =
            sockopt::zero_copy(fd).map_err(|e| socket_err("reading the bound mode", e))?;
        let busy_poll = config
            .busy_poll
            .and_then(|bp| match sockopt::set_busy_poll(fd, bp) {
                Ok(()) => Some(bp),
                Err(e) => {
                    eprintln!(
                        "weir-afxdp: {} queue {queue}: busy polling unavailable ({e}); \
                         polling without it",
                        iface.name
                    );
                    None
                }
            });
        let batch = config.batch_size as usize;
        let mut free = Vec::with_capacity(frames.len());
        free.extend(frames);
        let mut socket = Socket {
            iface,
            queue,
            batch,
            ring_size: config.ring_size,
            zero_copy,
            busy_poll,
            napi_checked: false,
            umem,
            fill,
            comp,
            rx,
            tx,
            free,
            rx_batch: vec![FrameDesc::default(); batch],
            tx_batch: Vec::with_capacity(batch),
            tx_outstanding: 0,
            counters: Counters::default(),
        };
        socket.refill();
        Ok(socket)
    }

    pub fn interface(&self) -> &str {
        &self.iface.name
    }

    pub fn ifindex(&self) -> u32 {
        self.iface.index
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether the kernel bound the socket in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The busy polling in effect: None if not asked for, refused, or
    /// turned off because the driver has no NAPI context for the queue.
    pub fn busy_poll(&self) -> Option<BusyPoll> {
        self.busy_poll
    }

    /// The most packets one poll receives: the maximum burst.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    pub fn fd(&self) -> RawFd {
        self.rx.fd().as_raw_fd()
    }

    /// The worker's counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The kernel's counters for this socket (one getsockopt).
    pub fn kernel_stats(&self) -> Result<KernelStats> {
        self.rx
            .fd()
            .xdp_statistics()
            .map(KernelStats::from)
            .map_err(|e| self.socket_error("reading XDP_STATISTICS", e))
    }

    /// The NAPI context busy polling drives: 0 until the first packet
    /// arrives, and on drivers without one.
    pub fn napi_id(&self) -> Result<u32> {
        sockopt::napi_id(self.fd()).map_err(|e| self.socket_error("reading the NAPI id", e))
    }

    pub(crate) fn socket_error(&self, what: &'static str, source: io::Error) -> Error {
        Error::Socket {
            what,
            iface: self.iface.name.clone(),
            queue: self.queue,
            source,
        }
    }
}

/// Maps and registers the UMEM, refusing up front one larger than the
/// machine's memory (it is populated and pinned whole).
fn create_umem(iface: &Interface, queue: u32, config: &Config) -> Result<(Umem, Vec<FrameDesc>)> {
    let fail = |cause: String, errno: Option<i32>| Error::Umem {
        iface: iface.name.clone(),
        queue,
        frame_count: config.frame_count,
        frame_size: config.frame_size,
        cause,
        hint: umem_hint(errno),
    };
    let memory = physical_memory();
    if config.umem_bytes() > memory {
        return Err(fail(
            format!(
                "that is more than this machine's memory ({} MiB)",
                memory >> 20
            ),
            Some(libc::ENOMEM),
        ));
    }
    let frame_size = FrameSize::new(config.frame_size).map_err(|e| fail(e.to_string(), None))?;
    let ring = QueueSize::new(config.ring_size).map_err(|e| fail(e.to_string(), None))?;
    let umem_config = UmemConfig::builder()
        .frame_size(frame_size)
        .fill_queue_size(ring)
        .comp_queue_size(ring)
        .build()
        .map_err(|e| fail(e.to_string(), None))?;
    let frames = NonZeroU32::new(config.frame_count).expect("validated: frame_count > 0");
    Umem::new(umem_config, frames, false).map_err(|e| {
        let os = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>());
        let cause = match os {
            Some(os) => format!("{e}: {os}"),
            None => e.to_string(),
        };
        fail(cause, os.and_then(io::Error::raw_os_error))
    })
}

fn physical_memory() -> u64 {
    // SAFETY: sysinfo fills a plain struct.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: info is valid for writes.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return u64::MAX;
    }
    info.totalram as u64 * info.mem_unit as u64
}

/// How long a bind waits for a queue whose previous socket is closing.
const BUSY_QUEUE_WAIT: Duration = Duration::from_millis(200);
const BUSY_QUEUE_RETRY: Duration = Duration::from_millis(5);

type Queues = (TxQueue, RxQueue, Option<(FillQueue, CompQueue)>);

/// Binds in the mode asked for. `Auto` tries zero-copy and, where the
/// driver refuses it, binds in copy mode and says so.
fn bind(umem: &Umem, iface: &Interface, queue: u32, config: &Config) -> Result<Queues> {
    let attempt = |zero_copy: bool, mode: &'static str| -> Result<Queues> {
        let mut flags = if zero_copy {
            BindFlags::XDP_ZEROCOPY
        } else {
            BindFlags::XDP_COPY
        };
        if config.need_wakeup {
            flags |= BindFlags::XDP_USE_NEED_WAKEUP;
        }
        let ring = QueueSize::new(config.ring_size).expect("validated: power of two");
        let socket_config = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            // The steering program is the caller's, never libxdp's default.
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(flags)
            .build();
        let name = CString::new(iface.name.as_str()).expect("checked: no NUL in the name");
        // SAFETY: the UMEM is this socket's alone, and libxdp's program
        // loading is inhibited, which is what xsk-rs asks of a caller.
        unsafe {
            xsk_rs::Socket::new(
                socket_config,
                umem,
                &xsk_rs::config::Interface::new(name),
                queue,
            )
        }
        .map_err(|e| {
            let source = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error)
                .map(io::Error::from_raw_os_error)
                .unwrap_or_else(|| io::Error::other(e.to_string()));
            Error::Bind {
                iface: iface.name.clone(),
                queue,
                mode,
                hint: bind_hint(source.raw_os_error()),
                source,
            }
        })
    };
    // The kernel releases a closed socket's queue from a workqueue, so a
    // worker restarted on the same queue can find it busy for a moment.
    let attempt = |zero_copy: bool, mode: &'static str| -> Result<Queues> {
        let mut waited = Duration::ZERO;
        loop {
            match attempt(zero_copy, mode) {
                Err(Error::Bind { source, .. })
                    if source.raw_os_error() == Some(libc::EBUSY) && waited < BUSY_QUEUE_WAIT =>
                {
                    std::thread::sleep(BUSY_QUEUE_RETRY);
                    waited += BUSY_QUEUE_RETRY;
                }
                other => return other,
            }
        }
    };
    match config.mode {
        Mode::Copy => attempt(false, "copy"),
        Mode::ZeroCopy => attempt(true, "zero-copy"),
        Mode::Auto => match attempt(true, "auto") {
            Err(Error::Bind { source, .. }) if driver_refused_zero_copy(&source) => {
                eprintln!(
                    "weir-afxdp: {} queue {queue}: zero-copy unavailable ({source}); \
                     using copy mode",
                    iface.name
                );
                attempt(false, "copy")
            }
            other => other,
        },
    }
}

/// The errnos a driver answers a zero-copy bind with when it cannot do
/// zero-copy; anything else (busy queue, missing device) copy mode would
/// hit too.
fn driver_refused_zero_copy(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}
