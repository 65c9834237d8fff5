//! The connections `weir_lb` announces for connection sync (bpf/lib/sync.h):
//! its ring buffer `sync_events` and its counters `sync_stats`. Both belong
//! to the loaded program (they are not pinned): the process that loaded it
//! drains the ring.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};
use weir_abi::{weir_sync_event, AsBytes, WEIR_SYNC_STAT_ANNOUNCED, WEIR_SYNC_STAT_LOST};

use crate::skel::lb::WeirLbSkel;

/// The ring's size with sync on: 256 KiB, about 3,600 announcements, what
/// a node installs in a few milliseconds at its highest connection rate.
pub const RING_BYTES: u32 = 1 << 18;

/// The size the loader gives `sync_events`: a page when sync is off (a
/// ring buffer cannot be smaller), else [`RING_BYTES`].
pub fn ring_size(conn_sync: bool) -> u32 {
    if conn_sync {
        RING_BYTES
    } else {
        weir_sys::page_size()
    }
}

/// Handles on the sync maps of a loaded `weir_lb` (Send: hand them to the
/// thread that drains the ring).
#[derive(Debug)]
pub struct SyncMaps {
    pub events: MapHandle,
    pub stats: MapHandle,
}

impl SyncMaps {
    pub fn of(skel: &WeirLbSkel<'_>) -> Result<SyncMaps> {
        Ok(SyncMaps {
            events: MapHandle::try_from(&skel.maps.sync_events).context("sync_events handle")?,
            stats: MapHandle::try_from(&skel.maps.sync_stats).context("sync_stats handle")?,
        })
    }

    /// The announcing side's counters, added up over CPUs.
    pub fn stats(&self) -> Result<AnnounceStats> {
        let sum = |i: u32| -> Result<u64> {
            Ok(self
                .stats
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)?
                .map_or(0, |cpus| {
                    cpus.iter()
                        .filter_map(|v| {
                            v.get(..8)
                                .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
                        })
                        .sum()
                }))
        };
        Ok(AnnounceStats {
            announced: sum(WEIR_SYNC_STAT_ANNOUNCED)?,
            lost: sum(WEIR_SYNC_STAT_LOST)?,
        })
    }
}

/// `enum weir_sync_stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnnounceStats {
    /// Installs put in the ring.
    pub announced: u64,
    /// Installs not announced: the ring was full.
    pub lost: u64,
}

/// The reading end of `sync_events` (not Send: open it on the thread that
/// drains it).
pub struct Announcements {
    ring: RingBuffer<'static>,
    arrived: Rc<RefCell<Vec<weir_sync_event>>>,
}

impl Announcements {
    pub fn open(events: &MapHandle) -> Result<Announcements> {
        let arrived: Rc<RefCell<Vec<weir_sync_event>>> = Rc::default();
        let sink = arrived.clone();
        let mut rb = RingBufferBuilder::new();
        rb.add(events, move |data: &[u8]| {
            let n = std::mem::size_of::<weir_sync_event>();
            if let Some(ev) = data.get(..n).and_then(weir_sync_event::from_bytes) {
                sink.borrow_mut().push(ev);
            }
            0
        })?;
        Ok(Announcements {
            ring: rb.build().context("the sync_events ring buffer")?,
            arrived,
        })
    }

    /// Waits up to `timeout` for announcements and returns every one the
    /// ring held (none on a timeout).
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<weir_sync_event>> {
        self.ring.poll(timeout).context("polling sync_events")?;
        Ok(std::mem::take(&mut *self.arrived.borrow_mut()))
    }
}
