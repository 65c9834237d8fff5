//! The memcached switch (`bpf/kv/weir_kv.bpf.c`): loading it and its typed maps.
//!
//! ```no_run
//! # use weir_kv::xdp::*;
//! # use weir_kv::route::{Distribution, DistKind, HashKind, Server};
//! # fn main() -> anyhow::Result<()> {
//! let servers = [Server::new("10.0.0.2", 11211, 1), Server::new("10.0.0.3", 11211, 1)];
//! let dist = Distribution::build(DistKind::Ketama, HashKind::Fnv1a_64, &servers)?;
//! let mut kv = load(&KvLoadOptions { port: 11211, ..Default::default() })?;
//! kv.set_servers(&[
//!     ServerAddr::new("10.0.0.2".parse()?, 11211, [2, 0, 0, 0, 0, 2]),
//!     ServerAddr::new("10.0.0.3".parse()?, 11211, [2, 0, 0, 0, 0, 3]),
//! ])?;
//! kv.set_distribution(&dist)?;            // or set_continuum / set_modula
//! // attach kv.prog_fd() with weir_dataplane::attach, then the hot-key loop:
//! let cache = kv.cache();                 // Send + Sync + Clone: give it to the TCP proxy
//! for s in kv.hot_key_samples()? { /* feed weir_core::hotkeys */ let _ = s; }
//! if let Some(ticket) = cache.ticket(b"hot")? {   // BEFORE fetching the value
//!     // ... fetch "hot" from its server ...
//!     cache.put(&ticket, 0, b"value", None)?;      // false if a write came in between
//! }
//! cache.invalidate(b"hot")?;             // the TCP path calls this before forwarding a write
//! let stats = kv.stats()?;
//! # let _ = stats; Ok(()) }
//! ```
//!
//! # Consistency of the cache
//! Every entry carries the invalidation counter of its key's bucket and the
//! flush generation as they were when user space took the entry's *ticket*,
//! which it must do before it asks a server for the value. XDP serves an
//! entry only while both are unchanged. Every write the XDP program parses
//! (ASCII set/add/replace/append/prepend/cas/delete/incr/decr/touch, binary
//! SET..PREPEND and their quiet forms, DELETE, INCR/DECR, TOUCH, GAT*) bumps
//! its key's bucket and deletes the entry before the write is forwarded;
//! flush_all (ASCII or binary) bumps the generation. [`Cache::invalidate`]
//! and [`Cache::flush`] do the same from user space. So: *after the switch
//! has seen a write to key K, no reply for K that the switch builds carries a
//! value fetched before that write was seen.* A [`Cache::ticket`] is refused
//! while a write to the bucket was seen less than `write_settle` ago, which
//! covers a fetch that overtakes a just-forwarded write on its way to the
//! server (assumed to arrive within `write_settle`).
//!
//! Not guaranteed: writes that do not pass the switch (another proxy, a
//! client talking to a server directly, server-side expiry or eviction);
//! writes on paths that do not call [`Cache::invalidate`] (the TCP proxy
//! must); datagrams the XDP program passes to the kernel (the user-space
//! path must invalidate what it forwards); continuation datagrams of a
//! multi-datagram request (memcached itself refuses those requests). Entries
//! also expire after the `ttl` given to [`Cache::put`].

use std::cell::RefCell;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, OpenObject, RingBuffer, RingBufferBuilder};
use weir_abi::*;
use weir_core::csum::sum_be16;
use weir_sys::monotonic_ns;

use crate::route::{DistKind, Distribution, HashKind};
use crate::skel::{OpenWeirKvSkel, WeirKvSkel, WeirKvSkelBuilder};

/// How a request reaches its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvForward {
    /// Rewrite MACs only; every server holds the VIP (e.g. on `lo`).
    L2,
    /// Also rewrite the destination address and port to the server's; the
    /// source stays the client's, so the server answers the client directly.
    L3,
}

/// Load-time parameters of `weir_kv`.
#[derive(Debug, Clone)]
pub struct KvLoadOptions {
    /// The memcached UDP port of the VIP.
    pub port: u16,
    /// The VIP; `None` matches any destination address on `port`.
    pub vip: Option<IpAddr>,
    /// The pool's hash. XDP computes fnv1a_64 and md5; with any other hash
    /// (or a hash tag) requests go to the kernel, counted as `PASS_HASH`,
    /// while cache hits and invalidation still work in XDP.
    pub hash: HashKind,
    /// ketama or modula; random goes to the kernel like an unsupported hash.
    pub dist: DistKind,
    /// nutcracker's `hash_tag` (not computed in XDP: see `hash`).
    pub hash_tag: Option<[u8; 2]>,
    pub forward: KvForward,
    pub max_servers: u32,
    /// Continuum points (or modula entries) per table slot.
    pub max_points: u32,
    /// Entries of the in-switch cache.
    pub cache_entries: u32,
    /// Answer GETs from the cache in XDP.
    pub cache_enabled: bool,
    /// Largest value `Cache::put` accepts (at most WEIR_KV_MAX_VALUE).
    pub max_value: usize,
    /// Invalidation buckets (a power of two).
    pub buckets: u32,
    /// Multi-datagram requests tracked at once (LRU).
    pub requests: u32,
    /// Sample one requested key in N into the ring buffer (0: off).
    pub sample_every: u32,
    /// No ticket while a write to the key's bucket is younger than this.
    pub write_settle: Duration,
}

impl Default for KvLoadOptions {
    fn default() -> Self {
        KvLoadOptions {
            port: 11211,
            vip: None,
            hash: HashKind::Fnv1a_64,
            dist: DistKind::Ketama,
            hash_tag: None,
            forward: KvForward::L2,
            max_servers: 256,
            max_points: 65536,
            cache_entries: 4096,
            cache_enabled: true,
            max_value: WEIR_KV_MAX_VALUE as usize,
            buckets: 65536,
            requests: 65536,
            sample_every: 16,
            write_settle: Duration::from_millis(50),
        }
    }
}

/// One memcached server as the data plane needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAddr {
    pub ip: IpAddr,
    pub port: u16,
    /// Next-hop MAC of the server.
    pub mac: [u8; 6],
    /// Interface the server is behind; 0 = the one the request came in on.
    pub ifindex: u32,
    pub live: bool,
}

impl ServerAddr {
    pub fn new(ip: IpAddr, port: u16, mac: [u8; 6]) -> ServerAddr {
        ServerAddr {
            ip,
            port,
            mac,
            ifindex: 0,
            live: true,
        }
    }

    fn abi(&self) -> weir_kv_server {
        let (addr, family) = weir_core::flow::addr_words(self.ip);
        weir_kv_server {
            addr,
            port: self.port.to_be(),
            family,
            flags: if self.live {
                WEIR_KV_SERVER_LIVE as u8
            } else {
                0
            },
            mac: self.mac,
            ifindex: self.ifindex,
            ..Default::default()
        }
    }
}

/// A key sampled by XDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySample {
    pub key: Vec<u8>,
    /// Server index, or `None` when the switch did not route it (cache hit,
    /// or no table).
    pub server: Option<u32>,
    /// The switch answered it from its cache.
    pub cache_hit: bool,
}

/// Names of the `kv_stats` counters, by index (enum weir_kv_stat).
pub const STAT_NAMES: [&str; WEIR_KV_STAT_MAX as usize] = [
    "rx",
    "pass_not_kv",
    "pass_malformed",
    "pass_bad_frame",
    "pass_truncated",
    "pass_bad_key",
    "pass_unknown_cmd",
    "pass_multi_cmd",
    "pass_multi_server",
    "pass_too_long",
    "pass_orphan",
    "pass_flush",
    "pass_no_server",
    "pass_hash",
    "pass_meta_base64",
    "tx",
    "redirect",
    "drop_redirect",
    "cache_tx",
    "drop_internal",
    "get",
    "get_keys",
    "write",
    "invalidate",
    "invalidate_hit",
    "flush",
    "cache_miss",
    "cache_stale",
    "cache_bypass",
    "req_tracked",
    "req_cont",
    "sample",
    "sample_lost",
    "l3_rewrite",
    "meta",
    "meta_cache_tx",
];

/// The outcome counters (each packet ends in exactly one): indices into
/// [`KvStats::counters`].
pub const OUTCOMES: std::ops::RangeInclusive<u32> =
    WEIR_KV_STAT_PASS_NOT_KV..=WEIR_KV_STAT_DROP_INTERNAL;

/// Counters summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvStats {
    /// Indexed by `WEIR_KV_STAT_*`; names in [`STAT_NAMES`].
    pub counters: Vec<u64>,
    /// (requests, bytes) forwarded per server index.
    pub servers: Vec<(u64, u64)>,
}

impl KvStats {
    pub fn get(&self, idx: u32) -> u64 {
        self.counters.get(idx as usize).copied().unwrap_or(0)
    }

    pub fn by_name(&self, name: &str) -> Option<u64> {
        STAT_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| self.counters[i])
    }

    /// Packets that went to the kernel (all `pass_*` outcomes).
    pub fn passed(&self) -> u64 {
        (WEIR_KV_STAT_PASS_NOT_KV..=WEIR_KV_STAT_PASS_HASH)
            .map(|i| self.get(i))
            .sum()
    }
}

/// A read-write mapping of a BPF_F_MMAPABLE array map.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// The one kind of `unsafe` left in this crate: memory of a BPF array map
// mapped into the process, which the kernel shares with the XDP program.
// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for Mmap {}
unsafe impl Sync for Mmap {}

impl Mmap {
    fn new(fd: BorrowedFd<'_>, len: usize) -> Result<Mmap> {
        let page = weir_sys::page_size() as usize;
        let len = len.div_ceil(page) * page;
        // SAFETY: mapping a BPF array map fd, checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of a BPF array map");
        }
        Ok(Mmap {
            ptr: NonNull::new(p as *mut u8).unwrap(),
            len,
        })
    }

    /// The u64 at byte offset `off` (8-aligned, in bounds).
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds, aligned, and the kernel only touches it atomically
        // or with plain stores of whole words.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping what new() mapped.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

struct CacheInner {
    cache: MapHandle,
    inval: Mmap,
    gen: Mmap,
    buckets_mask: u32,
    max_value: usize,
    settle_ns: u64,
}

/// The in-switch cache, shareable with other threads (the TCP proxy).
#[derive(Clone)]
pub struct Cache {
    inner: Arc<CacheInner>,
}

/// Proof that the cache state was read before a value was fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheTicket {
    key: Vec<u8>,
    bucket: u32,
    seq: u64,
    gen: u64,
}

impl CacheTicket {
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// The cache map's key for `key` (1..=250 bytes).
pub fn cache_key(key: &[u8]) -> Result<weir_kv_key> {
    if key.is_empty() || key.len() > WEIR_KV_MAX_KEY as usize {
        bail!(
            "a memcached key has 1 to {} bytes, not {}",
            WEIR_KV_MAX_KEY,
            key.len()
        );
    }
    let mut k = weir_kv_key {
        len: key.len() as u32,
        ..Default::default()
    };
    k.data[..key.len()].copy_from_slice(key);
    Ok(k)
}

/// Renders a cache entry: the reply lines, the value and their checksums.
pub fn render_entry(
    key: &[u8],
    flags: u32,
    value: &[u8],
    cas: Option<u64>,
) -> Result<weir_kv_entry> {
    if value.len() > WEIR_KV_MAX_VALUE as usize {
        bail!(
            "value of {} bytes: the cache holds at most {}",
            value.len(),
            WEIR_KV_MAX_VALUE
        );
    }
    let mut e = weir_kv_entry::default();
    let mut line = b"VALUE ".to_vec();
    line.extend_from_slice(key);
    line.extend_from_slice(format!(" {flags} {}", value.len()).as_bytes());
    let cas_text = cas.map(|c| format!(" {c}")).unwrap_or_default();
    let mut data = value.to_vec();
    data.extend_from_slice(b"\r\nEND\r\n");
    e.line[..line.len()].copy_from_slice(&line);
    e.line_len = line.len() as u16;
    e.cas_text[..cas_text.len()].copy_from_slice(cas_text.as_bytes());
    e.cas_len = cas_text.len() as u16;
    e.data[..data.len()].copy_from_slice(&data);
    e.value_len = value.len() as u32;
    e.flags = flags;
    e.cas = cas.unwrap_or(0);
    e.has_cas = u8::from(cas.is_some());
    let get: Vec<u8> = [&line[..], b"\r\n", &data].concat();
    let gets: Vec<u8> = [&line[..], cas_text.as_bytes(), b"\r\n", &data].concat();
    e.sum_get = sum_be16(&get, 0);
    e.sum_gets = sum_be16(&gets, 0);
    e.sum_value = sum_be16(value, 0);
    e.sum_key = sum_be16(key, 0);
    Ok(e)
}

impl Cache {
    fn bucket_of(&self, key: &[u8]) -> u32 {
        crate::route::hash::fnv1a_64(key) & self.inner.buckets_mask
    }

    fn bucket_seq(&self, b: u32) -> &AtomicU64 {
        self.inner.inval.u64_at(b as usize * 16)
    }

    fn bucket_last_write(&self, b: u32) -> &AtomicU64 {
        self.inner.inval.u64_at(b as usize * 16 + 8)
    }

    fn generation(&self) -> &AtomicU64 {
        self.inner.gen.u64_at(0)
    }

    /// Takes a ticket for `key`: call it BEFORE fetching the value from its
    /// server. `None` while a write to the key's bucket is too recent.
    pub fn ticket(&self, key: &[u8]) -> Result<Option<CacheTicket>> {
        cache_key(key)?;
        let bucket = self.bucket_of(key);
        let gen = self.generation().load(Ordering::SeqCst);
        let seq = self.bucket_seq(bucket).load(Ordering::SeqCst);
        let last = self.bucket_last_write(bucket).load(Ordering::SeqCst);
        if last != 0 && monotonic_ns().saturating_sub(last) < self.inner.settle_ns {
            return Ok(None);
        }
        Ok(Some(CacheTicket {
            key: key.to_vec(),
            bucket,
            seq,
            gen,
        }))
    }

    /// Installs the value fetched after `ticket` was taken. Returns false
    /// (and installs nothing lasting) if a write or flush came in between.
    /// `ttl`: the entry is not served after it. `cas`: needed to answer
    /// `gets` and binary GETs (which carry the cas); without it those go to
    /// the server.
    pub fn put(
        &self,
        ticket: &CacheTicket,
        flags: u32,
        value: &[u8],
        cas: Option<u64>,
    ) -> Result<bool> {
        self.put_ttl(ticket, flags, value, cas, None)
    }

    /// [`Cache::put`] with a lifetime.
    pub fn put_ttl(
        &self,
        ticket: &CacheTicket,
        flags: u32,
        value: &[u8],
        cas: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        if value.len() > self.inner.max_value {
            bail!(
                "value of {} bytes: the cache is configured for at most {}",
                value.len(),
                self.inner.max_value
            );
        }
        let k = cache_key(&ticket.key)?;
        let mut e = render_entry(&ticket.key, flags, value, cas)?;
        e.seq = ticket.seq;
        e.gen = ticket.gen;
        e.expires_ns = ttl.map_or(0, |t| monotonic_ns() + t.as_nanos() as u64);
        if !self.still_valid(ticket) {
            return Ok(false);
        }
        self.inner
            .cache
            .update(k.as_bytes(), e.as_bytes(), MapFlags::ANY)
            .context("writing the kv cache entry (is the cache full?)")?;
        if !self.still_valid(ticket) {
            // XDP would not serve it anyway; free the slot.
            let _ = self.inner.cache.delete(k.as_bytes());
            return Ok(false);
        }
        Ok(true)
    }

    fn still_valid(&self, t: &CacheTicket) -> bool {
        self.bucket_seq(t.bucket).load(Ordering::SeqCst) == t.seq
            && self.generation().load(Ordering::SeqCst) == t.gen
    }

    /// A write to `key` is about to be forwarded: the switch must not serve
    /// the old value any more. Call it before forwarding.
    pub fn invalidate(&self, key: &[u8]) -> Result<()> {
        let bucket = self.bucket_of(key);
        self.bucket_seq(bucket).fetch_add(1, Ordering::SeqCst);
        self.bucket_last_write(bucket)
            .store(monotonic_ns(), Ordering::SeqCst);
        if let Ok(k) = cache_key(key) {
            let _ = self.inner.cache.delete(k.as_bytes());
        }
        Ok(())
    }

    /// flush_all: every entry becomes invalid at once.
    pub fn flush(&self) -> Result<()> {
        self.generation().fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Removes an entry without invalidating (eviction by the hot-key loop).
    pub fn evict(&self, key: &[u8]) -> Result<bool> {
        let k = cache_key(key)?;
        Ok(self.inner.cache.delete(k.as_bytes()).is_ok())
    }

    /// Keys currently in the cache (valid or not).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.inner
            .cache
            .keys()
            .filter_map(|k| weir_kv_key::from_bytes(&k))
            .map(|k| k.data[..(k.len as usize).min(k.data.len())].to_vec())
            .collect()
    }

    /// Whether XDP would answer `key` from the cache now: an entry exists,
    /// no write or flush voided its ticket, and it has not expired.
    pub fn is_served(&self, key: &[u8]) -> Result<bool> {
        let Some(e) = self.entry(key)? else {
            return Ok(false);
        };
        let b = self.bucket_of(key);
        Ok(e.seq == self.bucket_seq(b).load(Ordering::SeqCst)
            && e.gen == self.generation().load(Ordering::SeqCst)
            && (e.expires_ns == 0 || e.expires_ns > monotonic_ns()))
    }

    /// The entry for `key` as stored.
    pub fn entry(&self, key: &[u8]) -> Result<Option<weir_kv_entry>> {
        let k = cache_key(key)?;
        Ok(self
            .inner
            .cache
            .lookup(k.as_bytes(), MapFlags::ANY)?
            .and_then(|v| weir_kv_entry::from_bytes(&v)))
    }
}

/// A loaded (not yet attached) `weir_kv`.
pub struct LoadedKv {
    pub skel: WeirKvSkel<'static>,
    cache: Cache,
    ring: RingBuffer<'static>,
    samples: Rc<RefCell<VecDeque<KeySample>>>,
    max_points: u32,
    max_servers: u32,
}

fn configure(open: &mut OpenWeirKvSkel<'static>, opts: &KvLoadOptions) -> Result<()> {
    if !opts.buckets.is_power_of_two() {
        bail!("kv: buckets must be a power of two, not {}", opts.buckets);
    }
    if opts.max_value > WEIR_KV_MAX_VALUE as usize {
        bail!(
            "kv: max_value {} is over the switch's limit of {} bytes",
            opts.max_value,
            WEIR_KV_MAX_VALUE
        );
    }
    if opts.max_points == 0 || opts.max_points > 1 << WEIR_KV_SEARCH_STEPS {
        bail!(
            "kv: max_points must be 1..={}",
            1u32 << WEIR_KV_SEARCH_STEPS
        );
    }
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("weir_kv has no .rodata")?;
    ro.cfg_kv_port = opts.port.to_be();
    match opts.vip {
        None => ro.cfg_kv_vip_family = 0,
        Some(ip) => {
            let (addr, family) = weir_core::flow::addr_words(ip);
            ro.cfg_kv_vip_family = family as u32;
            ro.cfg_kv_vip = addr;
        }
    }
    ro.cfg_kv_hash = match (opts.hash, opts.hash_tag, opts.dist) {
        (_, _, DistKind::Random) => WEIR_KV_HASH_OTHER,
        (HashKind::Fnv1a_64, None, _) => WEIR_KV_HASH_FNV1A_64,
        (HashKind::Md5, None, _) => WEIR_KV_HASH_MD5,
        _ => WEIR_KV_HASH_OTHER,
    };
    ro.cfg_kv_dist = match opts.dist {
        DistKind::Modula => WEIR_KV_DIST_MODULA,
        _ => WEIR_KV_DIST_KETAMA,
    };
    ro.cfg_kv_fwd = match opts.forward {
        KvForward::L2 => WEIR_KV_FWD_L2,
        KvForward::L3 => WEIR_KV_FWD_L3,
    };
    ro.cfg_kv_points_cap = opts.max_points;
    ro.cfg_kv_buckets_mask = opts.buckets - 1;
    ro.cfg_kv_cache = u32::from(opts.cache_enabled);
    ro.cfg_kv_sample_every = opts.sample_every;

    let slots = WEIR_KV_TABLE_SLOTS;
    let want = [
        ("kv_servers", opts.max_servers),
        ("kv_server_stats", opts.max_servers),
        ("kv_continuum", opts.max_points * slots),
        ("kv_modula", opts.max_points * slots),
        ("kv_cache", opts.cache_entries),
        ("kv_inval", opts.buckets),
        ("kv_requests", opts.requests),
    ];
    for mut map in open.open_object_mut().maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if let Some((_, n)) = want.iter().find(|(w, _)| *w == name) {
            if *n == 0 {
                bail!("kv map {name}: size must be at least 1");
            }
            map.set_max_entries(*n)
                .with_context(|| format!("setting the size of map {name} to {n}"))?;
        }
    }
    Ok(())
}

fn parse_sample(data: &[u8]) -> Option<KeySample> {
    let s = weir_kv_sample::from_bytes(data.get(..std::mem::size_of::<weir_kv_sample>())?)?;
    let len = (s.key_len as usize).min(s.key.len());
    Some(KeySample {
        key: s.key[..len].to_vec(),
        server: (s.server != u32::MAX).then_some(s.server),
        cache_hit: s.flags as u32 & WEIR_KV_SAMPLE_HIT != 0,
    })
}

/// Opens, configures and loads `weir_kv`.
pub fn load(opts: &KvLoadOptions) -> Result<LoadedKv> {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = WeirKvSkelBuilder::default()
        .open(storage)
        .context("opening the weir_kv BPF object")?;
    configure(&mut open, opts)?;
    let skel = open.load().map_err(|e| {
        anyhow::anyhow!(
            "the kernel refused to load weir_kv: {e}; it needs Linux >= 5.18 with BTF \
             and root (CAP_BPF, CAP_NET_ADMIN)"
        )
    })?;
    let cache = Cache {
        inner: Arc::new(CacheInner {
            cache: MapHandle::try_from(&skel.maps.kv_cache).context("kv_cache handle")?,
            inval: Mmap::new(skel.maps.kv_inval.as_fd(), opts.buckets as usize * 16)?,
            gen: Mmap::new(skel.maps.kv_gen.as_fd(), 8)?,
            buckets_mask: opts.buckets - 1,
            max_value: opts.max_value,
            settle_ns: opts.write_settle.as_nanos() as u64,
        }),
    };
    let samples: Rc<RefCell<VecDeque<KeySample>>> = Rc::default();
    let sink = samples.clone();
    let ring_map = MapHandle::try_from(&skel.maps.kv_samples).context("kv_samples handle")?;
    let mut rb = RingBufferBuilder::new();
    rb.add(&ring_map, move |data: &[u8]| {
        if let Some(s) = parse_sample(data) {
            sink.borrow_mut().push_back(s);
        }
        0
    })?;
    let ring = rb.build().context("kv_samples ring buffer")?;
    Ok(LoadedKv {
        skel,
        cache,
        ring,
        samples,
        max_points: opts.max_points,
        max_servers: opts.max_servers,
    })
}

impl LoadedKv {
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.skel.progs.weir_kv.as_fd()
    }

    /// The cache handle (cheap to clone, Send + Sync).
    pub fn cache(&self) -> Cache {
        self.cache.clone()
    }

    /// Writes the server slots (index = position, as in the Distribution).
    /// Slots past the list are marked not live.
    pub fn set_servers(&self, servers: &[ServerAddr]) -> Result<()> {
        if servers.len() > self.max_servers as usize {
            bail!(
                "{} servers, the switch was loaded for {}",
                servers.len(),
                self.max_servers
            );
        }
        for (i, s) in servers.iter().enumerate() {
            self.set_server(i as u32, s)?;
        }
        let dead = weir_kv_server::default();
        for i in servers.len() as u32..self.max_servers {
            self.skel
                .maps
                .kv_servers
                .update(&i.to_ne_bytes(), dead.as_bytes(), MapFlags::ANY)?;
        }
        Ok(())
    }

    /// Writes one server slot.
    pub fn set_server(&self, idx: u32, s: &ServerAddr) -> Result<()> {
        self.skel
            .maps
            .kv_servers
            .update(&idx.to_ne_bytes(), s.abi().as_bytes(), MapFlags::ANY)
            .with_context(|| format!("writing kv server {idx}"))
    }

    fn active_version(&self) -> Result<u32> {
        let v = self
            .skel
            .maps
            .kv_version
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .context("kv_version")?;
        Ok(u32::from_ne_bytes(v[..4].try_into().unwrap()))
    }

    /// Fills the inactive slot with `fill`, then flips the version (one
    /// 32-bit store): XDP sees the old table or the new one.
    fn publish(&self, fill: impl FnOnce(u32, u32) -> Result<weir_kv_table>) -> Result<()> {
        let ver = self.active_version()?;
        let next = ver.wrapping_add(1);
        let slot = next % WEIR_KV_TABLE_SLOTS;
        let table = fill(slot, slot * self.max_points)?;
        self.skel
            .maps
            .kv_tables
            .update(&slot.to_ne_bytes(), table.as_bytes(), MapFlags::ANY)?;
        self.skel.maps.kv_version.update(
            &0u32.to_ne_bytes(),
            &next.to_ne_bytes(),
            MapFlags::ANY,
        )?;
        Ok(())
    }

    /// Publishes a ketama continuum: (point, server index), sorted by point.
    pub fn set_continuum(&self, points: &[(u32, u32)]) -> Result<()> {
        if points.is_empty() || points.len() > self.max_points as usize {
            bail!(
                "continuum of {} points; the switch holds 1..={}",
                points.len(),
                self.max_points
            );
        }
        if points.windows(2).any(|w| w[0].0 > w[1].0) {
            bail!("the continuum must be sorted by point");
        }
        self.publish(|_, base| {
            let map = &self.skel.maps.kv_continuum;
            let keys: Vec<u8> = (0..points.len() as u32)
                .flat_map(|i| (base + i).to_ne_bytes())
                .collect();
            let vals: Vec<u8> = points
                .iter()
                .flat_map(|&(point, server)| weir_kv_point { point, server }.as_bytes().to_vec())
                .collect();
            map.update_batch(
                &keys,
                &vals,
                points.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .context("writing the continuum")?;
            Ok(weir_kv_table {
                npoints: points.len() as u32,
                nmodula: 0,
            })
        })
    }

    /// Publishes a modula table: the server index of each weight unit
    /// (nutcracker's modula continuum, `hash % len` picks the entry).
    pub fn set_modula(&self, servers: &[u32]) -> Result<()> {
        if servers.is_empty() || servers.len() > self.max_points as usize {
            bail!(
                "modula table of {} entries; the switch holds 1..={}",
                servers.len(),
                self.max_points
            );
        }
        self.publish(|_, base| {
            let keys: Vec<u8> = (0..servers.len() as u32)
                .flat_map(|i| (base + i).to_ne_bytes())
                .collect();
            let vals: Vec<u8> = servers.iter().flat_map(|s| s.to_ne_bytes()).collect();
            self.skel
                .maps
                .kv_modula
                .update_batch(
                    &keys,
                    &vals,
                    servers.len() as u32,
                    MapFlags::ANY,
                    MapFlags::ANY,
                )
                .context("writing the modula table")?;
            Ok(weir_kv_table {
                npoints: 0,
                nmodula: servers.len() as u32,
            })
        })
    }

    /// Publishes the table of a weir_core distribution (ketama or modula).
    pub fn set_distribution(&self, d: &Distribution) -> Result<()> {
        match d.dist() {
            DistKind::Ketama => self.set_continuum(d.continuum()),
            DistKind::Modula => {
                let s: Vec<u32> = d.continuum().iter().map(|&(_, s)| s).collect();
                self.set_modula(&s)
            }
            // Random is never computed in XDP (requests go to the kernel).
            DistKind::Random => Ok(()),
        }
    }

    /// Registers an interface that servers sit behind (XDP_REDIRECT target).
    pub fn add_tx_port(&self, ifindex: u32) -> Result<()> {
        self.skel
            .maps
            .kv_tx_ports
            .update(
                &ifindex.to_ne_bytes(),
                &ifindex.to_ne_bytes(),
                MapFlags::ANY,
            )
            .with_context(|| format!("adding ifindex {ifindex} to kv_tx_ports"))
    }

    /// Counters summed over CPUs.
    pub fn stats(&self) -> Result<KvStats> {
        let sum = |map: &libbpf_rs::MapMut<'_>, i: u32, words: usize| -> Result<Vec<u64>> {
            let mut out = vec![0u64; words];
            if let Some(per_cpu) = map.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)? {
                for v in per_cpu {
                    for (w, o) in out.iter_mut().enumerate() {
                        *o += u64::from_ne_bytes(v[8 * w..8 * w + 8].try_into().unwrap());
                    }
                }
            }
            Ok(out)
        };
        let mut st = KvStats::default();
        for i in 0..WEIR_KV_STAT_MAX {
            st.counters.push(sum(&self.skel.maps.kv_stats, i, 1)?[0]);
        }
        for i in 0..self.max_servers {
            let v = sum(&self.skel.maps.kv_server_stats, i, 2)?;
            st.servers.push((v[0], v[1]));
        }
        Ok(st)
    }

    /// Sampled keys that arrived since the last call (non-blocking).
    pub fn hot_key_samples(&mut self) -> Result<impl Iterator<Item = KeySample>> {
        self.ring.consume().context("reading kv_samples")?;
        let drained: Vec<KeySample> = self.samples.borrow_mut().drain(..).collect();
        Ok(drained.into_iter())
    }

    /// Waits up to `timeout` for samples, then drains them.
    pub fn poll_hot_key_samples(
        &mut self,
        timeout: Duration,
    ) -> Result<impl Iterator<Item = KeySample>> {
        self.ring.poll(timeout).context("polling kv_samples")?;
        self.hot_key_samples()
    }
}
