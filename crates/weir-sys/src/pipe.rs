//! Pipes for talking to a child process over descriptors of its own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The lowest number [`pipe`] gives its ends.
pub const PIPE_FD_FLOOR: i32 = 10;

/// A pipe, (read end, write end), both close-on-exec and numbered
/// [`PIPE_FD_FLOOR`] or above, so that a child's dup2 of one end to a low
/// number (3, 4, ...) never overwrites the other.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors owned by no one else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((raise(r)?, raise(w)?))
}

fn raise(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor returns a new one.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, PIPE_FD_FLOOR) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: n is a fresh descriptor owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_pipe_carries_bytes_on_high_descriptors() {
        let (r, w) = pipe().unwrap();
        assert!(r.as_raw_fd() >= PIPE_FD_FLOOR && w.as_raw_fd() >= PIPE_FD_FLOOR);
        std::fs::File::from(w).write_all(b"x").unwrap();
        let mut got = Vec::new();
        std::fs::File::from(r).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"x");
    }
}
