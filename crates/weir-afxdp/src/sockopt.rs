//! The socket calls xsk-rs leaves to us: busy-poll options, the bound mode
//! and NAPI id, and wakeups that report EAGAIN (the kernel's "more to send").

use std::io;
use std::os::fd::RawFd;
use std::ptr;

use crate::config::BusyPoll;

fn set_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: fd is a socket; the value is a c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_u32(fd: RawFd, level: i32, name: i32) -> io::Result<u32> {
    let mut value = 0u32;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: fd is a socket; value and len are valid for writes.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut u32).cast(), &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns on preferred busy polling with the given spin time and budget.
pub(crate) fn set_busy_poll(fd: RawFd, bp: BusyPoll) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_PREFER_BUSY_POLL, 1)?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, bp.usecs as i32)?;
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL_BUDGET,
        i32::from(bp.budget),
    )
}

/// Whether the socket was bound in zero-copy mode (XDP_OPTIONS).
pub(crate) fn zero_copy(fd: RawFd) -> io::Result<bool> {
    let flags = get_u32(fd, libc::SOL_XDP, libc::XDP_OPTIONS)?;
    Ok(flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// The NAPI context the socket's packets arrive from, 0 before the first
/// packet or where the driver has none: busy polling needs one.
pub(crate) fn napi_id(fd: RawFd) -> io::Result<u32> {
    get_u32(fd, libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID)
}

/// A wakeup's result. EAGAIN and EBUSY mean the kernel stopped early (copy
/// mode sends a bounded number of frames per call, or the device was busy)
/// and the caller simply calls again; ENOBUFS and ENETDOWN (no ring, link
/// down) leave nothing a retry could fix now.
fn wake_result(rc: isize) -> io::Result<()> {
    if rc >= 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(()),
        _ => Err(err),
    }
}

/// sendto(): the kernel sends from the TX ring (copy mode) or wakes the
/// driver (zero-copy), and busy-polls when that is on.
pub(crate) fn wake_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length send with no address on a socket fd.
    let rc = unsafe { libc::sendto(fd, ptr::null(), 0, libc::MSG_DONTWAIT, ptr::null(), 0) };
    wake_result(rc)
}

/// recvfrom(): the kernel refills from the fill ring (zero-copy drivers
/// that sleep) and busy-polls when that is on.
pub(crate) fn wake_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length receive with no address on a socket fd.
    let rc = unsafe {
        libc::recvfrom(
            fd,
            ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    wake_result(rc)
}
