//! The BPF filesystem: whether a directory is one, and mounting one.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// statfs's f_type of a BPF filesystem (linux/magic.h).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `dir` is on a BPF filesystem (pins there outlive the process).
pub fn is_bpffs(dir: &Path) -> io::Result<bool> {
    let c = c_path(dir)?;
    // SAFETY: statfs is plain data; zero is a valid start.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a struct to fill.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// Mounts a BPF filesystem on `target` with `options` ("mode=0700").
pub fn mount_bpffs(target: &Path, options: &str) -> io::Result<()> {
    let target = c_path(target)?;
    let kind = CString::new("bpf").expect("no NUL");
    let options = CString::new(options)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount options contain NUL"))?;
    // SAFETY: mount(2) with valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            kind.as_ptr(),
            target.as_ptr(),
            kind.as_ptr(),
            0,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: paths cannot contain NUL", p.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmp_is_not_bpffs_and_a_missing_directory_is_an_error() {
        assert!(!is_bpffs(Path::new("/tmp")).unwrap());
        assert!(is_bpffs(Path::new("/weir-no-such-dir")).is_err());
    }
}
