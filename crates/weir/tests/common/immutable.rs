//! A directory flagged immutable: no entry may be added, even by root.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IMMUTABLE_FL: libc::c_long = 0x10;

/// `dir` flagged immutable until dropped (also on a panic).
pub struct Immutable(PathBuf);

impl Immutable {
    pub fn new(dir: &Path) -> std::io::Result<Immutable> {
        set(dir, true)?;
        Ok(Immutable(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        set(&self.0, false).expect("clearing the immutable flag");
    }
}

fn set(dir: &Path, on: bool) -> std::io::Result<()> {
    let f = File::open(dir)?;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_[GS]ETFLAGS on an open directory with a long.
    unsafe {
        if libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        flags = if on {
            flags | FS_IMMUTABLE_FL
        } else {
            flags & !FS_IMMUTABLE_FL
        };
        if libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
