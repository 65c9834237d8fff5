//! A packet sink on a lab interface: weir_sink, attached in the interface's
//! namespace. An interface that already runs XDP (the labs' pass-through on
//! a backend) lends it to the sink: the sink replaces it, and it is put back
//! when the sink is dropped.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{Program, XdpFlags};
use weir_core::flow::FlowTuple;
use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_traffic::sink::{Sink as Loaded, SinkOptions, SinkStats};

use crate::netns::enter;

/// weir_sink attached to an interface of a namespace; detached on drop.
pub struct Sink {
    loaded: Loaded,
    ns: String,
    ifindex: u32,
    /// The program the interface ran before, put back on drop.
    lent: Option<OwnedFd>,
}

impl Sink {
    /// Loads weir_sink with `opts` and attaches it (native XDP) to `iface`
    /// in namespace `ns`.
    pub fn attach(ns: &str, iface: &str, opts: &SinkOptions) -> Result<Sink> {
        let loaded = Loaded::load(opts)?;
        let prog = loaded.prog_fd();
        let (ifindex, lent) = std::thread::scope(|s| {
            s.spawn(|| -> Result<(u32, Option<OwnedFd>)> {
                enter(ns)?;
                let ifindex = Iface::by_name(iface)?.ifindex;
                let lent = attached_prog_id(ifindex)
                    .map(|id| {
                        Program::fd_from_id(id)
                            .with_context(|| format!("opening XDP program {id} of {iface}"))
                    })
                    .transpose()?;
                swap(ifindex, Some(prog), lent.as_ref().map(|f| f.as_fd()))?;
                Ok((ifindex, lent))
            })
            .join()
            .map_err(|_| anyhow!("the sink's attach thread panicked"))?
        })
        .with_context(|| format!("attaching the packet sink to {iface} in namespace {ns}"))?;
        Ok(Sink {
            loaded,
            ns: ns.to_string(),
            ifindex,
            lent,
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> Result<SinkStats> {
        self.loaded.stats()
    }

    /// Packets per flow (needs `track_flows`).
    pub fn flows(&self) -> Result<Vec<(FlowTuple, u64)>> {
        self.loaded.flows()
    }

    /// Zeroes the counters and the flow table (while no traffic arrives).
    pub fn clear(&self) -> Result<()> {
        self.loaded.clear()
    }
}

impl Drop for Sink {
    /// Puts the lent program back, or detaches; only where the sink is still
    /// the attached program. Nothing to do if the namespace is gone.
    fn drop(&mut self) {
        let (ns, ifindex) = (self.ns.as_str(), self.ifindex);
        let prog = self.loaded.prog_fd();
        let lent = self.lent.as_ref().map(|f| f.as_fd());
        std::thread::scope(|s| {
            s.spawn(|| {
                if enter(ns).is_ok() {
                    let _ = swap(ifindex, lent, Some(prog));
                }
            });
        });
    }
}

/// Makes `new` (None: nothing) the native XDP program of `ifindex` if
/// `old` (None: nothing) is the one attached now.
fn swap(ifindex: u32, new: Option<BorrowedFd<'_>>, old: Option<BorrowedFd<'_>>) -> Result<()> {
    let opts = libbpf_sys::bpf_xdp_attach_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
        old_prog_fd: old.map_or(-1, |f| f.as_raw_fd()),
        ..Default::default()
    };
    let flags = XdpFlags::DRV_MODE
        | if old.is_some() {
            XdpFlags::REPLACE
        } else {
            XdpFlags::UPDATE_IF_NOEXIST
        };
    // SAFETY: valid fds (or -1 to detach) and a sized options struct.
    let rc = unsafe {
        libbpf_sys::bpf_xdp_attach(
            ifindex as i32,
            new.map_or(-1, |f| f.as_raw_fd()),
            flags.bits(),
            &opts,
        )
    };
    if rc != 0 {
        bail!(
            "XDP attach on ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(())
}
