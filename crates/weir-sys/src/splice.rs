//! Moving bytes from one socket to another through a pipe, in the kernel
//! (splice(2)): the pages a socket received are referenced by the pipe and
//! then by the skbs sent on the other socket, never copied to user space.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A non-blocking pipe that carries spliced bytes.
pub struct SplicePipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl SplicePipe {
    /// A pipe that holds `capacity` bytes if the kernel allows it
    /// (`/proc/sys/fs/pipe-max-size` bounds it for unprivileged users),
    /// else the kernel's default; [`capacity`](Self::capacity) says which.
    pub fn new(capacity: usize) -> io::Result<SplicePipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both are fresh descriptors owned by no one else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let want = libc::c_int::try_from(capacity).unwrap_or(libc::c_int::MAX);
        // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ on an open pipe take and
        // return an int.
        let got = unsafe {
            libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, want);
            libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SplicePipe {
            read,
            write,
            capacity: got as usize,
        })
    }

    /// The pipe's size in bytes. It holds that many only when every page it
    /// refers to is full; pages the sender filled partly hold it less.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Moves up to `len` bytes that `from` (a socket) received into the
    /// pipe. 0 means `from` reached its end; `WouldBlock`, that `from` had
    /// nothing or the pipe is full.
    pub fn fill_from(&self, from: &impl AsRawFd, len: usize) -> io::Result<usize> {
        splice(from.as_raw_fd(), self.write.as_raw_fd(), len)
    }

    /// Moves up to `len` bytes from the pipe to `to` (a socket);
    /// `WouldBlock` when `to` takes no more now.
    pub fn drain_to(&self, to: &impl AsRawFd, len: usize) -> io::Result<usize> {
        splice(self.read.as_raw_fd(), to.as_raw_fd(), len)
    }

    /// Reads what the pipe holds into `buf` (copying it).
    pub fn read_back(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let n = unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

fn splice(from: i32, to: i32, len: usize) -> io::Result<usize> {
    // SAFETY: null offsets make splice use (and advance) the descriptors'
    // own positions; it touches no memory of ours.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Bytes a socket has received that were not read yet (FIONREAD).
pub fn unread_bytes(sock: &impl AsRawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn bytes_move_from_one_socket_to_another_whole_and_in_order() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut send = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (from, _) = l.accept().unwrap();
        let to = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut recv, _) = l.accept().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        send.write_all(&data).unwrap();
        let pipe = SplicePipe::new(1 << 20).unwrap();
        assert!(pipe.capacity() >= 64 * 1024);
        let mut moved = 0;
        while moved < data.len() {
            match pipe.fill_from(&from, data.len() - moved) {
                Ok(n) => {
                    assert!(n > 0);
                    let mut out = 0;
                    while out < n {
                        out += pipe.drain_to(&to, n - out).unwrap();
                    }
                    moved += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(unread_bytes(&from).unwrap(), 0);
        let mut got = vec![0u8; data.len()];
        recv.read_exact(&mut got).unwrap();
        assert_eq!(got, data);
    }
}
