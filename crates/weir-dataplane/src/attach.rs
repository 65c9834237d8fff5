//! Attaching XDP programs to interfaces, all or nothing.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::{Program, Xdp, XdpFlags};

/// Native (driver) XDP or the generic fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    Native,
    Generic,
}

impl XdpMode {
    fn flags(self) -> XdpFlags {
        match self {
            XdpMode::Native => XdpFlags::DRV_MODE,
            XdpMode::Generic => XdpFlags::SKB_MODE,
        }
    }
}

/// Programs attached by this process; detached on drop.
pub struct Attachment<'a> {
    xdp: Xdp<'a>,
    fd: BorrowedFd<'a>,
    mode: XdpMode,
    ifaces: Vec<(String, u32)>,
}

/// The id of the XDP program on an interface, if any (any mode).
pub fn attached_prog_id(ifindex: u32) -> Option<u32> {
    for flags in [XdpFlags::DRV_MODE, XdpFlags::SKB_MODE] {
        let mut id = 0u32;
        // SAFETY: plain query into a local u32.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_xdp_query_id(ifindex as i32, flags.bits() as i32, &mut id)
        };
        if rc == 0 && id != 0 {
            return Some(id);
        }
    }
    None
}

/// Refuses interfaces that already carry an XDP program.
pub fn ensure_free(ifaces: &[(String, u32)]) -> Result<()> {
    for (name, idx) in ifaces {
        if let Some(id) = attached_prog_id(*idx) {
            bail!(
                "interface {name} already has an XDP program (id {id}); stop whatever attached it \
                 (`ip link set dev {name} xdp off` if it is stale) and start weir again"
            );
        }
    }
    Ok(())
}

/// Attaches `fd` to every interface or to none: refuses an interface that
/// already has an XDP program, and rolls back on the first failure.
pub fn attach_all<'a>(
    fd: BorrowedFd<'a>,
    ifaces: &[(String, u32)],
    mode: XdpMode,
) -> Result<Attachment<'a>> {
    ensure_free(ifaces)?;
    let mut att = Attachment::empty(fd, mode);
    for (name, idx) in ifaces {
        let flags = mode.flags() | XdpFlags::UPDATE_IF_NOEXIST;
        if let Err(e) = att.xdp.attach(*idx as i32, flags) {
            let hint = match mode {
                XdpMode::Native => "; the driver may lack native XDP: try --xdp-mode generic",
                XdpMode::Generic => "",
            };
            // `att` detaches what was attached so far when dropped.
            bail!("attaching XDP to {name}: {e}{hint}");
        }
        att.ifaces.push((name.clone(), *idx));
    }
    Ok(att)
}

/// Atomically swaps the XDP program of a running weir for `fd` on every
/// interface (no moment without a program: a restart without a gap). Each
/// interface must carry a program; on failure the ones already swapped are
/// swapped back.
pub fn take_over<'a>(
    fd: BorrowedFd<'a>,
    ifaces: &[(String, u32)],
    mode: XdpMode,
) -> Result<Attachment<'a>> {
    let mut swapped: Vec<(u32, OwnedFd)> = Vec::new();
    let mut att = Attachment::empty(fd, mode);
    for (name, idx) in ifaces {
        let result = (|| -> Result<OwnedFd> {
            let old_id = attached_prog_id(*idx)
                .with_context(|| format!("--takeover: {name} has no XDP program to take over"))?;
            let old = Program::fd_from_id(old_id)
                .with_context(|| format!("--takeover: opening program {old_id} on {name}"))?;
            replace(fd, *idx, old.as_fd(), mode)
                .with_context(|| format!("--takeover: replacing on {name}"))?;
            Ok(old)
        })();
        match result {
            Ok(old) => {
                swapped.push((*idx, old));
                att.ifaces.push((name.clone(), *idx));
            }
            Err(e) => {
                for (idx, old) in swapped.drain(..) {
                    let _ = replace(old.as_fd(), idx, fd, mode);
                }
                att.ifaces.clear();
                return Err(e);
            }
        }
    }
    Ok(att)
}

fn replace(new: BorrowedFd<'_>, ifindex: u32, old: BorrowedFd<'_>, mode: XdpMode) -> Result<()> {
    let opts = libbpf_rs::libbpf_sys::bpf_xdp_attach_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_xdp_attach_opts>() as _,
        old_prog_fd: old.as_raw_fd(),
        ..Default::default()
    };
    let flags = (mode.flags() | XdpFlags::REPLACE).bits();
    // SAFETY: valid fds and a sized options struct.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_xdp_attach(ifindex as i32, new.as_raw_fd(), flags, &opts)
    };
    if rc != 0 {
        bail!(
            "bpf_xdp_attach(REPLACE): {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(())
}

impl<'a> Attachment<'a> {
    fn empty(fd: BorrowedFd<'a>, mode: XdpMode) -> Attachment<'a> {
        Attachment {
            xdp: Xdp::new(fd),
            fd,
            mode,
            ifaces: Vec::new(),
        }
    }

    pub fn interfaces(&self) -> &[(String, u32)] {
        &self.ifaces
    }

    /// Leaves the programs attached when this is dropped: for handing the
    /// data plane over to a successor that has already replaced them.
    pub fn leave_attached(mut self) {
        self.ifaces.clear();
    }
}

impl Drop for Attachment<'_> {
    /// Detaches, but only where our program is still the one attached: a
    /// successor that took over keeps its program.
    fn drop(&mut self) {
        for (_, idx) in self.ifaces.drain(..) {
            let opts = libbpf_rs::libbpf_sys::bpf_xdp_attach_opts {
                sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_xdp_attach_opts>() as _,
                old_prog_fd: self.fd.as_raw_fd(),
                ..Default::default()
            };
            let flags = (self.mode.flags() | XdpFlags::REPLACE).bits();
            // SAFETY: fd -1 detaches; the options struct is sized.
            unsafe { libbpf_rs::libbpf_sys::bpf_xdp_attach(idx as i32, -1, flags, &opts) };
        }
    }
}
