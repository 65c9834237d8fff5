//! The backends' decapsulation program `weir_decap` (bpf/weir_decap.bpf.c):
//! strips the outer IPIP, IPv6-in-IP or GUE header weir's ipip and gue modes
//! put on, for this host's addresses, and passes the inner packet to the
//! kernel. `weir decap` attaches it; its counters are read from the loaded
//! program or, for `weir decap status`, from the program attached to an
//! interface.

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, OpenObject};
use weir_abi::{weir_decap_addr, AsBytes, WEIR_DECAP_STAT_MAX};
use weir_core::flow::addr_words;

use crate::skel::decap::{WeirDecapSkel, WeirDecapSkelBuilder};

/// The program's name as the kernel keeps it.
pub const PROG_NAME: &str = "weir_decap";

/// weir_decap's counters, summed over CPUs: every frame ends in one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecapStats {
    /// Outer headers stripped, the inner packet passed to the kernel.
    pub decapsulated: u64,
    /// Not IPIP, IPv6-in-IP or GUE: passed untouched.
    pub not_encap: u64,
    /// Encapsulated, but to an address this host does not decapsulate for.
    pub not_ours: u64,
    /// Encapsulated but truncated or inconsistent: dropped.
    pub malformed: u64,
}

impl DecapStats {
    /// As `weir decap` prints them: one `name value` per line.
    pub fn render(&self) -> String {
        format!(
            "decapsulated {}\nnot_encap {}\nnot_ours {}\nmalformed {}\n",
            self.decapsulated, self.not_encap, self.not_ours, self.malformed
        )
    }
}

/// A loaded weir_decap.
pub struct Decap {
    skel: WeirDecapSkel<'static>,
}

impl Decap {
    /// Loads weir_decap for GUE on `gue_port`; no address is decapsulated
    /// for until [`Decap::add_addr`].
    pub fn load(gue_port: u16) -> Result<Decap> {
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = WeirDecapSkelBuilder::default()
            .open(storage)
            .context("opening the weir_decap BPF object")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("weir_decap has no .rodata")?;
        ro.cfg_gue_port = gue_port.to_be();
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(
                "the kernel refused to load weir_decap: {e}; it needs BTF and root \
                 (CAP_BPF, CAP_NET_ADMIN)"
            )
        })?;
        Ok(Decap { skel })
    }

    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.skel.progs.weir_decap.as_fd()
    }

    /// Runs the program on one frame (BPF_PROG_TEST_RUN), for tests.
    pub fn test_run(&self, frame: &[u8]) -> Result<crate::testrun::RunResult> {
        crate::testrun::run(&self.skel.progs.weir_decap, frame, 1)
    }

    /// Decapsulates packets whose outer destination is `addr`.
    pub fn add_addr(&self, addr: IpAddr) -> Result<()> {
        let (words, family) = addr_words(addr);
        let key = weir_decap_addr {
            addr: words,
            family,
            ..Default::default()
        };
        self.skel
            .maps
            .decap_addrs
            .update(key.as_bytes(), &[1], MapFlags::ANY)
            .with_context(|| format!("adding {addr} to decap_addrs (at most 256 addresses)"))
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<DecapStats> {
        stats_of(&self.skel.maps.decap_stats)
    }
}

/// The counters of a decap_stats map.
pub fn stats_of(map: &impl MapCore) -> Result<DecapStats> {
    let mut s = [0u64; WEIR_DECAP_STAT_MAX as usize];
    for (i, v) in s.iter_mut().enumerate() {
        let per_cpu = map
            .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            .context("reading weir_decap's counters")?
            .unwrap_or_default();
        *v = per_cpu
            .iter()
            .filter_map(|b| b.get(..8)?.try_into().ok().map(u64::from_ne_bytes))
            .sum();
    }
    Ok(DecapStats {
        decapsulated: s[weir_abi::WEIR_DECAP_STAT_DECAPSULATED as usize],
        not_encap: s[weir_abi::WEIR_DECAP_STAT_NOT_ENCAP as usize],
        not_ours: s[weir_abi::WEIR_DECAP_STAT_NOT_OURS as usize],
        malformed: s[weir_abi::WEIR_DECAP_STAT_MALFORMED as usize],
    })
}

/// The counters of the weir_decap attached to `iface` (`weir decap status`).
pub fn attached_stats(iface: &str, ifindex: u32) -> Result<DecapStats> {
    let Some(held) = crate::attach::held(iface, ifindex)? else {
        bail!("no XDP program on {iface}: start `weir decap --interface {iface}` first");
    };
    if held.prog_name != PROG_NAME {
        bail!(
            "the XDP program on {iface} is {} (id {}), not weir_decap",
            held.prog_name,
            held.prog_id
        );
    }
    let Some(&(_, id)) = held.maps.iter().find(|(n, _)| n == "decap_stats") else {
        bail!("the weir_decap on {iface} has no decap_stats map: a different weir built it");
    };
    let map = MapHandle::from_map_id(id).with_context(|| format!("opening map {id}"))?;
    stats_of(&map)
}

/// Every address of this host (its network namespace), as `ip addr`
/// lists them: what the load balancer may send encapsulated packets to.
pub fn local_addrs() -> Result<Vec<IpAddr>> {
    weir_sys::local_addrs().context("listing this host's addresses (netlink)")
}
