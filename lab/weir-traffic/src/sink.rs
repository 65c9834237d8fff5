//! The labs' packet sink `weir_sink` (lab/bpf/weir_sink.bpf.c): counts the
//! TCP/UDP frames that reach a backend's interface, packets and bytes per
//! CPU and optionally per flow, and drops them (or passes them on when the
//! backend also serves them). Traffic is measured where it arrives.
//!
//! ```no_run
//! # use weir_traffic::sink::*;
//! # fn main() -> anyhow::Result<()> {
//! let sink = Sink::load(&SinkOptions { track_flows: 1 << 16, ..Default::default() })?;
//! // attach sink.prog_fd() to the interface (weir-lab's traffic::Sink does)
//! let got = sink.stats()?;
//! println!("{} packets, {} flows", got.packets, got.flows_new);
//! # Ok(()) }
//! ```

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use anyhow::{ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use weir_abi::{weir_flow_key, AsBytes};
use weir_core::flow::{FlowTuple, Proto};

use crate::skel::sink::types::weir_sink_stats;
use crate::skel::sink::{WeirSinkSkel, WeirSinkSkelBuilder};

/// What the sink counts and what it does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkOptions {
    /// Count only this protocol (None: TCP and UDP).
    pub proto: Option<Proto>,
    /// Count only this destination port (None: any).
    pub dport: Option<u16>,
    /// Drop counted frames (true) or pass them to the kernel, for a backend
    /// that must also answer them.
    pub drop: bool,
    /// Count packets per flow in a table of this many flows (0: off). A
    /// flow that finds the table full is counted in `flows_full`.
    pub track_flows: u32,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            proto: None,
            dport: None,
            drop: true,
            track_flows: 0,
        }
    }
}

/// The sink's counters, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Frames that matched (TCP/UDP, protocol and port filter).
    pub packets: u64,
    /// Their bytes, Ethernet header on, FCS off.
    pub bytes: u64,
    /// Of them, TCP SYNs (SYN set, ACK clear).
    pub syns: u64,
    /// Frames that did not match, handed to the kernel uncounted.
    pub passed: u64,
    /// Distinct flows seen (with flow tracking).
    pub flows_new: u64,
    /// Packets of flows that did not fit in the flow table.
    pub flows_full: u64,
}

/// A loaded weir_sink.
pub struct Sink {
    skel: WeirSinkSkel<'static>,
    opts: SinkOptions,
}

impl Sink {
    /// Loads weir_sink, to be attached to an interface by its [`Sink::prog_fd`].
    pub fn load(opts: &SinkOptions) -> Result<Sink> {
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = WeirSinkSkelBuilder::default()
            .open(storage)
            .context("opening the weir_sink BPF object")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("weir_sink has no .rodata")?;
        ro.cfg_drop = u32::from(opts.drop);
        ro.cfg_proto = opts.proto.map_or(0, |p| u32::from(p.number()));
        ro.cfg_dport = opts.dport.unwrap_or(0).to_be();
        ro.cfg_track_flows = u32::from(opts.track_flows > 0);
        open.maps
            .sink_flows
            .set_max_entries(opts.track_flows.max(1))
            .context("sizing the flow table sink_flows")?;
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(
                "the kernel refused to load weir_sink: {e}; it needs BTF and root \
                 (CAP_BPF, CAP_NET_ADMIN){}",
                if opts.track_flows > 0 {
                    ", and memory for the flow table (fewer track_flows?)"
                } else {
                    ""
                }
            )
        })?;
        Ok(Sink { skel, opts: *opts })
    }

    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.skel.progs.weir_sink.as_fd()
    }

    pub fn options(&self) -> &SinkOptions {
        &self.opts
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<SinkStats> {
        let per_cpu = self
            .skel
            .maps
            .sink_stats
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the sink's counters")?
            .context("the sink's counter array has no entry 0")?;
        let mut sum = SinkStats::default();
        for bytes in per_cpu {
            ensure!(
                bytes.len() == std::mem::size_of::<weir_sink_stats>(),
                "sink counters of {} bytes, expected {}",
                bytes.len(),
                std::mem::size_of::<weir_sink_stats>()
            );
            // SAFETY: the size matches and every bit pattern is a valid
            // weir_sink_stats (plain u64s).
            let s: weir_sink_stats = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            sum.packets += s.packets;
            sum.bytes += s.bytes;
            sum.syns += s.syns;
            sum.passed += s.passed;
            sum.flows_new += s.flows_new;
            sum.flows_full += s.flows_full;
        }
        Ok(sum)
    }

    /// Packets per flow (with flow tracking), in no particular order. Two
    /// system calls per flow: a million flows take about a second.
    pub fn flows(&self) -> Result<Vec<(FlowTuple, u64)>> {
        ensure!(
            self.opts.track_flows > 0,
            "the sink was loaded without flow tracking (set track_flows)"
        );
        let map = &self.skel.maps.sink_flows;
        let mut flows = Vec::new();
        // One key and one lookup at a time: libbpf-rs's batch iterator takes
        // a short batch, which hash maps may return anywhere, for the last.
        for k in map.keys() {
            let key = weir_flow_key::from_bytes(&k).context("a flow key of the wrong size")?;
            // Gone if the table was cleared meanwhile.
            let Some(v) = map
                .lookup(&k, MapFlags::ANY)
                .context("reading the flow table sink_flows")?
            else {
                continue;
            };
            let packets = u64::from_ne_bytes(
                v.as_slice()
                    .try_into()
                    .context("a flow count of the wrong size")?,
            );
            let tuple = FlowTuple::from_key(&key)
                .with_context(|| format!("the sink stored a flow it cannot read: {key:?}"))?;
            flows.push((tuple, packets));
        }
        Ok(flows)
    }

    /// Zeroes the counters and empties the flow table, e.g. between runs.
    /// Call it while no traffic arrives.
    pub fn clear(&self) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus().context("counting CPUs")?;
        let zero = vec![vec![0u8; std::mem::size_of::<weir_sink_stats>()]; cpus];
        self.skel
            .maps
            .sink_stats
            .update_percpu(&0u32.to_ne_bytes(), &zero, MapFlags::ANY)
            .context("zeroing the sink's counters")?;
        let map = &self.skel.maps.sink_flows;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        for k in keys {
            map.delete(&k)
                .context("emptying the flow table sink_flows")?;
        }
        Ok(())
    }
}
