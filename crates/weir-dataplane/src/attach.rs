//! Attaching XDP programs to interfaces, all or nothing.

use std::os::fd::BorrowedFd;

use anyhow::{bail, Result};
use libbpf_rs::{Xdp, XdpFlags};

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
    let mut att = Attachment {
        xdp: Xdp::new(fd),
        mode,
        ifaces: Vec::new(),
    };
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

impl Attachment<'_> {
    pub fn interfaces(&self) -> &[(String, u32)] {
        &self.ifaces
    }
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        for (_, idx) in self.ifaces.drain(..) {
            let _ = self.xdp.detach(idx as i32, self.mode.flags());
        }
    }
}
