//! Cache invalidation: the hook every mutating command passes through.
//!
//! The proxy calls [`Invalidator::invalidate`] for the key of every `set`,
//! `add`, `replace`, `append`, `prepend`, `cas`, `delete`, `incr`, `decr` and
//! `touch` before it forwards the command, and again when the server's
//! reply comes back; `flush_all` calls [`Invalidator::invalidate_all`]. A
//! failed invalidation refuses the command (`SERVER_ERROR`) instead of
//! forwarding it, so a write the switch saw never leaves a stale cached value
//! behind.
//!
//! Every invalidation also bumps [`WriteEpoch`]. The hot-key loop reads the
//! epoch before it fetches a value from memcached and installs the value
//! only if the epoch has not moved, so a fetch that raced with a write
//! cannot re-install the old value.
//!
//! There is deliberately no no-op implementation: without a cache the proxy
//! takes no invalidator at all (`None`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Something that caches values by key outside memcached.
pub trait Invalidator: Send + Sync {
    /// Drop (or mark stale) the cached value of `key`.
    fn invalidate(&self, key: &[u8]) -> Result<(), String>;
    /// Drop every cached value.
    fn invalidate_all(&self) -> Result<(), String>;
}

/// A counter of invalidations, shared by the proxy and the hot-key loop.
#[derive(Debug, Default)]
pub struct WriteEpoch(AtomicU64);

impl WriteEpoch {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// An invalidator plus the epoch it bumps: what the proxy holds.
#[derive(Clone)]
pub struct Invalidation {
    pub inner: Arc<dyn Invalidator>,
    pub epoch: Arc<WriteEpoch>,
}

impl Invalidation {
    pub fn new(inner: Arc<dyn Invalidator>) -> Invalidation {
        Invalidation {
            inner,
            epoch: Arc::new(WriteEpoch::default()),
        }
    }

    pub fn key(&self, key: &[u8]) -> Result<(), String> {
        self.epoch.bump();
        self.inner.invalidate(key)
    }

    pub fn all(&self) -> Result<(), String> {
        self.epoch.bump();
        self.inner.invalidate_all()
    }
}

/// One recorded call of a [`Recorder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidated {
    Key(Vec<u8>),
    All,
}

/// Records every call: for tests, and for `weir kv status` to show recent
/// invalidations when the XDP path is not loaded.
#[derive(Debug, Default)]
pub struct Recorder {
    pub calls: Mutex<Vec<Invalidated>>,
    /// Make every call fail (to test that writes are refused).
    pub fail: std::sync::atomic::AtomicBool,
}

impl Invalidator for Recorder {
    fn invalidate(&self, key: &[u8]) -> Result<(), String> {
        if self.fail.load(Ordering::Relaxed) {
            return Err("cache unavailable".into());
        }
        self.calls
            .lock()
            .unwrap()
            .push(Invalidated::Key(key.to_vec()));
        Ok(())
    }
    fn invalidate_all(&self) -> Result<(), String> {
        if self.fail.load(Ordering::Relaxed) {
            return Err("cache unavailable".into());
        }
        self.calls.lock().unwrap().push(Invalidated::All);
        Ok(())
    }
}
