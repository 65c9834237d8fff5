//! `weir_xsk_redirect`: the simplest steering to AF_XDP sockets, every
//! packet to the socket of its RX queue (queues without one pass to the
//! kernel). weir-afxdp's tests and benchmarks use it; weir's own tiers steer
//! from their own programs.

use std::mem::MaybeUninit;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;

mod skel {
    #![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
    include!(concat!(env!("OUT_DIR"), "/weir_xsk_redirect.skel.rs"));
}

pub use skel::WeirXskRedirectSkel;

/// Loads the program with one XSKMAP slot per RX queue (`queues` >= 1).
pub fn load(queues: u32) -> Result<WeirXskRedirectSkel<'static>> {
    if queues == 0 {
        bail!("weir_xsk_redirect needs at least one queue slot");
    }
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::WeirXskRedirectSkelBuilder::default()
        .open(storage)
        .context("opening the weir_xsk_redirect BPF object")?;
    open.maps
        .xsks
        .set_max_entries(queues)
        .context("sizing the xsks map")?;
    open.load()
        .context("loading the weir_xsk_redirect BPF program")
}
