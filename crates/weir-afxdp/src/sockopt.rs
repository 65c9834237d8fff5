//! The socket calls xsk-rs leaves to us: busy-poll options, the bound mode
//! and NAPI id, and wakeups that report EAGAIN (the kernel's "more to send").
//! The calls themselves are weir-sys's; what an AF_XDP socket makes of
//! their results is here.

use std::io;
use std::os::fd::RawFd;

use weir_sys::socket::{recv_empty, send_empty, set_int_option, u32_option};

use crate::config::BusyPoll;

/// Turns on preferred busy polling with the given spin time and budget.
pub(crate) fn set_busy_poll(fd: RawFd, bp: BusyPoll) -> io::Result<()> {
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_PREFER_BUSY_POLL, 1)?;
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, bp.usecs as i32)?;
    set_int_option(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL_BUDGET,
        i32::from(bp.budget),
    )
}

/// Whether the socket was bound in zero-copy mode (XDP_OPTIONS).
pub(crate) fn zero_copy(fd: RawFd) -> io::Result<bool> {
    let flags = u32_option(fd, libc::SOL_XDP, libc::XDP_OPTIONS)?;
    Ok(flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// The NAPI context the socket's packets arrive from, 0 before the first
/// packet or where the driver has none: busy polling needs one.
pub(crate) fn napi_id(fd: RawFd) -> io::Result<u32> {
    u32_option(fd, libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID)
}

/// A wakeup's result. EAGAIN and EBUSY mean the kernel stopped early (copy
/// mode sends a bounded number of frames per call, or the device was busy)
/// and the caller simply calls again; ENOBUFS and ENETDOWN (no ring, link
/// down) leave nothing a retry could fix now.
fn wake_result(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN)
            ) =>
        {
            Ok(())
        }
        r => r,
    }
}

/// sendto(): the kernel sends from the TX ring (copy mode) or wakes the
/// driver (zero-copy), and busy-polls when that is on.
pub(crate) fn wake_tx(fd: RawFd) -> io::Result<()> {
    wake_result(send_empty(fd, libc::MSG_DONTWAIT))
}

/// recvfrom(): the kernel refills from the fill ring (zero-copy drivers
/// that sleep) and busy-polls when that is on.
pub(crate) fn wake_rx(fd: RawFd) -> io::Result<()> {
    wake_result(recv_empty(fd, libc::MSG_DONTWAIT))
}
