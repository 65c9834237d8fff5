//! The `minimal` programs: the benchmark floor and the veth pass-through.

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;

use crate::skel::minimal::{MinimalSkel, MinimalSkelBuilder};

/// Loads both minimal programs.
pub fn load() -> Result<MinimalSkel<'static>> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    MinimalSkelBuilder::default()
        .open(storage)
        .context("opening the minimal BPF object")?
        .load()
        .context("loading the minimal BPF programs")
}
