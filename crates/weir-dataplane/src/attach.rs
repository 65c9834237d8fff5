//! Attaching XDP programs to interfaces, all or nothing; what holds an
//! interface already; taking over from a previous weir without a gap.
//!
//! The `unsafe` here is libbpf's XDP attach and query calls, which
//! libbpf-rs does not wrap with the replace-this-program option weir needs;
//! BPF objects stay with the data plane.

use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys::bpf_prog_info;
use libbpf_rs::{MapCore, MapHandle, Program, XdpFlags};

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

impl fmt::Display for XdpMode {
    /// As `--xdp-mode` spells it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// Programs attached by this process; detached on drop. It holds its own
/// handle on the program, so the program's loader need not outlive it.
pub struct Attachment {
    fd: OwnedFd,
    mode: XdpMode,
    ifaces: Vec<(String, u32)>,
}

/// The id of the XDP program on an interface, if any (any mode).
pub fn attached_prog_id(ifindex: u32) -> Option<u32> {
    attached(ifindex).map(|(id, _)| id)
}

/// The id and mode of the XDP program on an interface, if any.
fn attached(ifindex: u32) -> Option<(u32, XdpMode)> {
    for mode in [XdpMode::Native, XdpMode::Generic] {
        let mut id = 0u32;
        // SAFETY: plain query into a local u32.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_xdp_query_id(
                ifindex as i32,
                mode.flags().bits() as i32,
                &mut id,
            )
        };
        if rc == 0 && id != 0 {
            return Some((id, mode));
        }
    }
    None
}

/// An XDP program found attached to an interface, and what it uses.
#[derive(Debug, Clone)]
pub struct Held {
    pub iface: String,
    pub ifindex: u32,
    pub mode: XdpMode,
    pub prog_id: u32,
    /// The program's name as the kernel keeps it (its first 15 bytes).
    pub prog_name: String,
    /// The maps the program uses, as (name, id).
    pub maps: Vec<(String, u32)>,
}

/// The program attached to an interface (native or generic), if any.
pub fn held(iface: &str, ifindex: u32) -> Result<Option<Held>> {
    let Some((prog_id, mode)) = attached(ifindex) else {
        return Ok(None);
    };
    let (prog_name, map_ids) = prog_info(prog_id)
        .with_context(|| format!("reading program {prog_id} attached to {iface}"))?;
    let maps = map_ids
        .into_iter()
        .map(|id| {
            let info = MapHandle::from_map_id(id)
                .and_then(|m| m.info())
                .with_context(|| format!("reading map {id} of program {prog_id}"))?;
            Ok((info.name().unwrap_or("").to_string(), id))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Held {
        iface: iface.to_string(),
        ifindex,
        mode,
        prog_id,
        prog_name,
        maps,
    }))
}

/// The name of the program with this id as the kernel keeps it (its first
/// 15 bytes), if it still exists.
pub fn prog_name(id: u32) -> Option<String> {
    prog_info(id).ok().map(|(name, _)| name)
}

/// A program's name and the ids of the maps it uses.
fn prog_info(id: u32) -> Result<(String, Vec<u32>)> {
    let fd = Program::fd_from_id(id)?;
    let get = |info: &mut bpf_prog_info| -> Result<()> {
        let mut len = std::mem::size_of::<bpf_prog_info>() as u32;
        // SAFETY: a valid fd and an info struct of the size passed; the
        // map_ids pointer, if set, has room for nr_map_ids entries.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_obj_get_info_by_fd(
                fd.as_raw_fd(),
                (info as *mut bpf_prog_info).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            bail!(
                "bpf_obj_get_info_by_fd: {}",
                std::io::Error::from_raw_os_error(-rc)
            );
        }
        Ok(())
    };
    // First ask how many maps there are, then for their ids.
    let mut info = bpf_prog_info::default();
    get(&mut info)?;
    let mut ids = vec![0u32; info.nr_map_ids as usize];
    let mut with_ids = bpf_prog_info {
        nr_map_ids: info.nr_map_ids,
        map_ids: ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    get(&mut with_ids)?;
    ids.truncate(with_ids.nr_map_ids as usize);
    // SAFETY: the kernel NUL-terminates the name within its 16 bytes.
    let name = unsafe { CStr::from_ptr(info.name.as_ptr()) };
    Ok((name.to_string_lossy().into_owned(), ids))
}

/// Refuses interfaces that already carry an XDP program.
pub fn ensure_free(ifaces: &[(String, u32)]) -> Result<()> {
    for (name, idx) in ifaces {
        if let Some(id) = attached_prog_id(*idx) {
            let prog = match held(name, *idx) {
                Ok(Some(h)) => format!("id {id}, name {}", h.prog_name),
                _ => format!("id {id}"),
            };
            bail!(
                "interface {name} already has an XDP program ({prog}); stop whatever attached it \
                 (`ip link set dev {name} xdp off` if it is stale) and start weir again"
            );
        }
    }
    Ok(())
}

/// Attaches `fd` to every interface or to none: refuses an interface that
/// already has an XDP program, and rolls back on the first failure.
pub fn attach_all(
    fd: BorrowedFd<'_>,
    ifaces: &[(String, u32)],
    mode: XdpMode,
) -> Result<Attachment> {
    ensure_free(ifaces)?;
    let mut att = Attachment::empty(fd, mode)?;
    for (name, idx) in ifaces {
        let flags = (mode.flags() | XdpFlags::UPDATE_IF_NOEXIST).bits();
        // SAFETY: a valid program fd; no options.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_xdp_attach(
                *idx as i32,
                fd.as_raw_fd(),
                flags,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::from_raw_os_error(-rc);
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

/// Atomically swaps the programs in `held` (a running or orphaned weir's,
/// checked by the caller) for `fd`: no moment without a program, so a
/// restart has no gap. Each swap replaces exactly the program that was
/// checked; if another took its place since, the swap fails. On failure the
/// interfaces already swapped are swapped back.
pub fn take_over(fd: BorrowedFd<'_>, held: &[Held], mode: XdpMode) -> Result<Attachment> {
    let mut swapped: Vec<(u32, OwnedFd)> = Vec::new();
    let mut att = Attachment::empty(fd, mode)?;
    for h in held {
        let result = (|| -> Result<OwnedFd> {
            if h.mode != mode {
                bail!(
                    "--takeover: the program on {} runs as {} XDP, not {mode}",
                    h.iface,
                    h.mode
                );
            }
            let old = Program::fd_from_id(h.prog_id).with_context(|| {
                format!("--takeover: program {} on {} is gone", h.prog_id, h.iface)
            })?;
            replace(fd, h.ifindex, old.as_fd(), mode).with_context(|| {
                format!(
                    "--takeover: replacing program {} on {} (if another program took its \
                     place since it was checked, run --takeover again)",
                    h.prog_id, h.iface
                )
            })?;
            Ok(old)
        })();
        match result {
            Ok(old) => {
                swapped.push((h.ifindex, old));
                att.ifaces.push((h.iface.clone(), h.ifindex));
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

impl Attachment {
    fn empty(fd: BorrowedFd<'_>, mode: XdpMode) -> Result<Attachment> {
        Ok(Attachment {
            fd: fd
                .try_clone_to_owned()
                .context("duplicating the program's fd")?,
            mode,
            ifaces: Vec::new(),
        })
    }

    /// Swaps `new` in for the attached program on every interface, each
    /// atomically (no moment without a program): the way to a program
    /// that carries more features, loaded into the same maps. If one swap
    /// fails, those done are swapped back and the old program stays.
    pub fn swap(&mut self, new: BorrowedFd<'_>) -> Result<()> {
        let new_fd = new
            .try_clone_to_owned()
            .context("duplicating the new program's fd")?;
        for (i, (name, idx)) in self.ifaces.iter().enumerate() {
            if let Err(e) = replace(new, *idx, self.fd.as_fd(), self.mode) {
                for (_, done) in &self.ifaces[..i] {
                    let _ = replace(self.fd.as_fd(), *done, new, self.mode);
                }
                return Err(e.context(format!("swapping weir_lb on {name}")));
            }
        }
        self.fd = new_fd;
        Ok(())
    }

    pub fn interfaces(&self) -> &[(String, u32)] {
        &self.ifaces
    }

    /// The kernel id of the program this attached.
    pub fn prog_id(&self) -> Result<u32> {
        crate::runstats::RunStats::of(self.fd.as_fd()).map(|s| s.id)
    }

    /// Leaves the programs attached when this is dropped: for handing the
    /// data plane over to a successor that has already replaced them.
    pub fn leave_attached(mut self) {
        self.ifaces.clear();
    }
}

impl Drop for Attachment {
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
