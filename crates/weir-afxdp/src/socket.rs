//! Creating sockets: checks, the UMEM, binding (zero-copy first where
//! asked, copy mode as the fallback), busy polling, the first fill. One
//! socket, or a group of sockets on one (interface, queue) that share a
//! UMEM (XDP_SHARED_UMEM), one for each worker the steering program may
//! pick for that queue.

use std::ffi::CString;
use std::io;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xsk_rs::config::{BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

use crate::config::{BusyPoll, Config, Mode};
use crate::error::{bind_hint, umem_hint, Error, Result};
use crate::frame::{Frame, GroupId};
use crate::iface::Interface;
use crate::rings::Rings;
use crate::sockopt;
use crate::stats::{Counters, KernelStats};

/// An AF_XDP socket bound to one (interface, queue), with its RX and TX
/// rings. The UMEM and its fill and completion rings belong to the
/// socket's group: the sockets bound to the same (interface, queue) from
/// one [`Socket::group`] call (a group of one for [`Socket::new`]). One
/// thread owns a socket and polls it; the group's rings are shared behind
/// a lock each socket takes once per burst.
///
/// Every UMEM frame is in exactly one place: the group's free list or a
/// socket's cache of frames to give back, the fill ring, a socket's RX
/// ring, a [`Frame`] some thread holds, or a socket's TX ring until the
/// completion ring returns it. That is what makes the in-place access
/// safe.
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
    pub(crate) group: GroupId,
    /// The UMEM's address: metadata in front of a packet is read through it.
    pub(crate) umem_base: usize,
    pub(crate) umem_len: usize,
    pub(crate) frame_size: usize,
    pub(crate) rings: Arc<Mutex<Rings>>,
    pub(crate) rx: RxQueue,
    pub(crate) tx: TxQueue,
    /// Frames this socket is done with, given back to the group's free
    /// list at the next ring service.
    pub(crate) done: Vec<FrameDesc>,
    /// Descriptors of the last RX burst.
    pub(crate) rx_batch: Vec<FrameDesc>,
    /// Frames to put on the TX ring at the next flush.
    pub(crate) tx_batch: Vec<FrameDesc>,
    /// Free frames [`Socket::transmit`] writes new packets into.
    pub(crate) spare: Vec<FrameDesc>,
    /// Frames put on the TX ring since the last ring service.
    pub(crate) tx_posted: u32,
    /// Whether the kernel asked for an RX wakeup at the last ring service.
    pub(crate) rx_wakeup: bool,
    /// Scratch of [`Socket::poll_once`].
    pub(crate) burst: Vec<Frame>,
    pub(crate) counters: Counters,
}

// Workers create their sockets up front, where a bad interface or queue is
// one clear error before any thread starts, and move them to their threads.
const _: () = {
    const fn send<T: Send>() {}
    send::<Socket>();
};

/// Groups are told apart by a number, so a frame is only ever sent or
/// given back by a socket of its own UMEM.
static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

impl Socket {
    /// Creates a socket on `iface` queue `queue` with a UMEM of its own
    /// (`frame_count` frames). The socket receives nothing until it is
    /// registered in the XSKMAP of an XDP program attached to `iface` (see
    /// [`Socket::register`]).
    pub fn new(iface: &str, queue: u32, config: &Config) -> Result<Socket> {
        let mut group = Socket::group(iface, queue, config, 1)?;
        Ok(group.pop().expect("a group of one"))
    }

    /// Creates `count` sockets on `iface` queue `queue` that share one UMEM
    /// of `count * frame_count` frames and its fill and completion rings
    /// (XDP_SHARED_UMEM): an XDP program may hand a packet of that queue
    /// to any of them, and any of them may send a frame another received.
    /// The first binds in the configured mode; the others share its
    /// binding (the kernel takes no mode for a shared socket).
    pub fn group(iface: &str, queue: u32, config: &Config, count: usize) -> Result<Vec<Socket>> {
        config.validate()?;
        if count == 0 {
            return Err(Error::Config(
                "a socket group needs at least one socket".into(),
            ));
        }
        let iface = Interface::by_name(iface)?;
        iface.check_queue(queue)?;
        let frame_count = u32::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(config.frame_count))
            .ok_or_else(|| {
                Error::Config(format!(
                    "{count} sockets of {} frames each are more frames than a UMEM can hold",
                    config.frame_count
                ))
            })?;
        let (umem, frames) = create_umem(&iface, queue, config, frame_count)?;
        let group = NEXT_GROUP.fetch_add(1, Ordering::Relaxed);
        // SAFETY: data() of a frame of this UMEM; its length is 0, so
        // nothing is read: only the address is taken.
        let first = unsafe { umem.data(&frames[0]) }.contents().as_ptr() as usize;
        let umem_base = first - frames[0].addr();
        let mut queues = Vec::with_capacity(count);
        let mut rings = None;
        for i in 0..count {
            let (tx, rx, fc) = bind(&umem, &iface, queue, config)?;
            match (i, fc) {
                (0, Some((fill, comp))) => rings = Some((fill, comp)),
                (0, None) | (_, Some(_)) => {
                    return Err(Error::Socket {
                        what: "sharing the UMEM",
                        iface: iface.name.clone(),
                        queue,
                        source: io::Error::other(
                            "libxdp handed out the fill and completion rings unexpectedly",
                        ),
                    })
                }
                (_, None) => {}
            }
            queues.push((tx, rx));
        }
        let (fill, comp) = rings.expect("the first socket's rings");
        let zero_copy =
            sockopt::zero_copy(queues[0].1.fd().as_raw_fd()).map_err(|e| Error::Socket {
                what: "reading the bound mode",
                iface: iface.name.clone(),
                queue,
                source: e,
            })?;
        let rings = Arc::new(Mutex::new(Rings::new(fill, comp, frames)));
        let batch = config.batch_size as usize;
        let mut sockets: Vec<Socket> = queues
            .into_iter()
            .map(|(tx, rx)| Socket {
                iface: iface.clone(),
                queue,
                batch,
                ring_size: config.ring_size,
                zero_copy,
                busy_poll: None,
                napi_checked: false,
                umem: umem.clone(),
                group: GroupId(group),
                umem_base,
                umem_len: frame_count as usize * config.frame_size as usize,
                frame_size: config.frame_size as usize,
                rings: rings.clone(),
                rx,
                tx,
                done: Vec::with_capacity(config.frame_count as usize),
                rx_batch: vec![FrameDesc::default(); batch],
                tx_batch: Vec::with_capacity(batch),
                spare: Vec::with_capacity(batch),
                tx_posted: 0,
                rx_wakeup: false,
                burst: Vec::with_capacity(batch),
                counters: Counters::default(),
            })
            .collect();
        for s in &mut sockets {
            s.busy_poll = config.busy_poll.and_then(|bp| s.try_busy_poll(bp));
        }
        sockets[0].service_rings(true);
        Ok(sockets)
    }

    fn try_busy_poll(&self, bp: BusyPoll) -> Option<BusyPoll> {
        match sockopt::set_busy_poll(self.fd(), bp) {
            Ok(()) => Some(bp),
            Err(e) => {
                eprintln!(
                    "weir-afxdp: {} queue {}: busy polling unavailable ({e}); polling without it",
                    self.iface.name, self.queue
                );
                None
            }
        }
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

/// Maps and registers a UMEM of `frame_count` frames, refusing up front
/// one larger than the machine's memory (it is populated and pinned whole).
fn create_umem(
    iface: &Interface,
    queue: u32,
    config: &Config,
    frame_count: u32,
) -> Result<(Umem, Vec<FrameDesc>)> {
    let fail = |cause: String, errno: Option<i32>| Error::Umem {
        iface: iface.name.clone(),
        queue,
        frame_count,
        frame_size: config.frame_size,
        cause,
        hint: umem_hint(errno),
    };
    let memory = physical_memory();
    if u64::from(frame_count) * u64::from(config.frame_size) > memory {
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
    let frames = NonZeroU32::new(frame_count).expect("validated: frame_count > 0");
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
    weir_sys::physical_memory().unwrap_or(u64::MAX)
}

/// How long a bind waits for a queue whose previous socket is closing:
/// the kernel frees it from a workqueue that takes the RTNL lock, which a
/// busy host (namespaces and links coming and going) may hold a while.
const BUSY_QUEUE_WAIT: Duration = Duration::from_secs(1);
const BUSY_QUEUE_RETRY: Duration = Duration::from_millis(5);

type Queues = (TxQueue, RxQueue, Option<(FillQueue, CompQueue)>);

/// Binds a socket of `umem` in the mode asked for. `Auto` tries zero-copy
/// and, where the driver refuses it, binds in copy mode and says so. A
/// second socket on the same (interface, queue) and UMEM shares the first
/// one's binding: libxdp binds it with XDP_SHARED_UMEM alone, and returns
/// no fill and completion rings for it.
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
        // SAFETY: libxdp's program loading is inhibited, which is what
        // xsk-rs asks of a caller that shares a UMEM on one queue.
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
