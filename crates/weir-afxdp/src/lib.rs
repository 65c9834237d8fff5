//! AF_XDP plumbing for weir's software tier: the sockets its workers poll.
//!
//! A worker is run-to-completion, pinned to a core, and busy-polls one
//! [`Socket`] (an interface queue with a UMEM of its own) in batches:
//!
//! ```no_run
//! use weir_afxdp::{pin_current_thread, Config, Socket, Verdict};
//! # fn steering_map() -> libbpf_rs::MapHandle { unimplemented!() }
//! # fn main() -> Result<(), weir_afxdp::Error> {
//! pin_current_thread(1)?;
//! let mut socket = Socket::new("eth0", 0, &Config::default())?;
//! socket.register(&steering_map())?; // the XSKMAP the XDP program redirects to
//! loop {
//!     let it = socket.poll_once(|frame| {
//!         frame[..12].rotate_left(6); // swap the MAC addresses in place
//!         Verdict::Forward
//!     })?;
//!     // it.received, it.is_busy(): the numbers the utilization metric needs
//! #   if !it.is_busy() { break; }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! - [`config`]: UMEM geometry, rings, batch size, zero-copy policy,
//!   need_wakeup, busy polling; validated before anything is allocated.
//! - [`socket`]: creation and binding (zero-copy where the driver has it,
//!   copy mode otherwise), the socket's counters and kernel statistics;
//!   [`Socket::group`]: several sockets on one queue sharing a UMEM, one
//!   per worker the steering program may pick.
//! - [`poll`]: the data path: [`Socket::poll_once`], or [`Socket::receive`]
//!   and [`Socket::flush`] for frames kept past a burst; [`Socket::transmit`].
//! - [`frame`]: a received [`Frame`] held by value, its bytes, and the XDP
//!   metadata in front of it.
//! - [`xskmap`]: registration in the steering program's XSKMAP.
//! - [`cpu`]: pinning a thread to a core.
//!
//! Sockets, rings and the UMEM come from the xsk-rs crate (libxdp's xsk
//! API); this crate adds the frame ownership that makes in-place access and
//! zero-copy forwarding safe, the burst loop, and the errors.

mod config;
mod cpu;
mod error;
mod frame;
mod iface;
mod poll;
mod rings;
mod socket;
mod sockopt;
mod stats;
mod xskmap;

pub use config::{BusyPoll, Config, Mode};
pub use cpu::pin_current_thread;
pub use error::{Error, Result};
pub use frame::Frame;
pub use socket::Socket;
pub use stats::{Counters, Iteration, KernelStats, Verdict};
