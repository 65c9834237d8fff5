//! The UDP path of `weir kv`: the XDP memcached switch (`weir_kv`) loaded,
//! fed and attached, the hot-key loop that fills its cache, and the
//! invalidator the TCP proxy calls before it forwards a write.
//!
//! [`UdpSwitch::start`] does everything or nothing: it checks the
//! interfaces (present, no XDP program yet), resolves every server's next
//! hop, loads `weir_kv`, writes the servers and the key table
//! (`weir_kv::route::Distribution`, the same one the TCP proxy uses), and
//! attaches to every interface. On any error nothing stays attached. The
//! program is detached when the switch is stopped or dropped.
//!
//! Next hops: a server's MAC comes from the configuration (`mac` of a
//! `[[pool.server]]`) or from the kernel's neighbour table for the route's
//! next hop (`weir_sys::route_to`, then `weir_sys::neighbour_mac`). With no entry yet, weir
//! connects to the server's TCP port once, which makes the kernel resolve
//! it, and asks again (for up to 2 s). The egress interface is the route's;
//! requests leave by XDP_TX when it is the one they came in on and by
//! XDP_REDIRECT otherwise. Next hops are resolved at start only.
//!
//! The hot-key loop runs on its own thread (`weir-kv-hotkeys`), which owns
//! the loaded program (its ring buffer is not `Send`). Every `refresh` it:
//! 1. feeds the keys XDP sampled into `weir_core::hotkeys::HotKeys`;
//! 2. evicts cached keys that are no longer hot;
//! 3. for each hot key not served from the cache (new, voided by a write,
//!    or close to its `ttl`): takes a cache *ticket*, then fetches the
//!    value with `gets` over TCP from the key's server, then installs it
//!    with the ticket. `put` refuses it when a write to the key (or a
//!    flush) was seen after the ticket was taken; no ticket is given within
//!    `write_settle` of a write.
//! 4. publishes counters for `weir kv status` and /metrics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use weir_core::hotkeys::{HotKeyConfig, HotKeys};
use weir_dataplane::attach::{attach_all, ensure_free, XdpMode};
use weir_dataplane::iface::Iface;
use weir_dataplane::runstats::RunStats;

use crate::config::{KvConfig, UdpForward};
use crate::invalidate::Invalidator;
use crate::route::Distribution;
use crate::routing::Routing;
use crate::xdp::{Cache, KvForward, KvLoadOptions, ServerAddr, STAT_NAMES};

/// The XDP cache as the TCP proxy's invalidator: a write bumps the key's
/// invalidation bucket and deletes its entry; `flush_all` bumps the
/// generation that voids every entry.
pub struct XdpInvalidator(pub Cache);

impl Invalidator for XdpInvalidator {
    fn invalidate(&self, key: &[u8]) -> Result<(), String> {
        self.0.invalidate(key).map_err(|e| format!("{e:#}"))
    }
    fn invalidate_all(&self) -> Result<(), String> {
        self.0.flush().map_err(|e| format!("{e:#}"))
    }
}

/// Where a server is reached from the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHop {
    pub mac: [u8; 6],
    pub ifindex: u32,
    pub dev: String,
}

/// (egress interface's index and name, next-hop address) of the route to `ip`.
fn route_to(ip: IpAddr) -> Result<(u32, String, IpAddr)> {
    let route = weir_sys::route_to(ip)
        .with_context(|| format!("asking the kernel for the route to {ip} (netlink)"))?
        .with_context(|| format!("no route to {ip} (see `ip route get {ip}`)"))?;
    let dev = weir_sys::ifname(route.oif).with_context(|| {
        format!(
            "the route to {ip} leaves by interface {}, which is gone",
            route.oif
        )
    })?;
    Ok((route.oif, dev, route.gateway.unwrap_or(ip)))
}

/// Resolves a server's next hop (see the module docs).
pub fn resolve_next_hop(server: SocketAddr, configured: Option<[u8; 6]>) -> Result<NextHop> {
    let (ifindex, dev, via) = route_to(server.ip())?;
    if dev == "lo" {
        bail!(
            "server {server} is local to this host (route via lo); the XDP path switches \
             to servers on other hosts or namespaces"
        );
    }
    if let Some(mac) = configured {
        return Ok(NextHop { mac, ifindex, dev });
    }
    let t0 = Instant::now();
    let mut probed = false;
    loop {
        let mac = weir_sys::neighbour_mac(via, ifindex)
            .with_context(|| format!("asking the kernel for the neighbour {via} (netlink)"))?;
        if let Some(mac) = mac {
            return Ok(NextHop { mac, ifindex, dev });
        }
        if t0.elapsed() > Duration::from_secs(2) {
            bail!(
                "no neighbour entry for {via} on {dev} (next hop of server {server}) after \
                 probing it; is the server up? or set `mac` for it in [[pool.server]]"
            );
        }
        if !probed {
            // A TCP connect makes the kernel resolve the neighbour.
            let _ = TcpStream::connect_timeout(&server, Duration::from_millis(500));
            probed = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the UDP path reports (part of `/status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct UdpStatus {
    pub interfaces: Vec<String>,
    pub port: u16,
    pub vip: Option<String>,
    pub forward: String,
    pub cache_enabled: bool,
    /// The id of the attached `weir_kv` program.
    pub prog_id: u32,
    /// Every XDP counter by name (`crate::xdp::STAT_NAMES`).
    pub xdp: BTreeMap<String, u64>,
    /// Requests XDP forwarded to each server.
    pub server_requests: Vec<u64>,
    /// GETs answered by XDP from the cache.
    pub cache_hits: u64,
    /// Single-key GETs not in the cache (or voided / expired), forwarded.
    pub cache_misses: u64,
    pub samples: u64,
    /// Values installed by the hot-key loop.
    pub installs: u64,
    /// Installs refused because a write or flush came after the ticket.
    pub install_races: u64,
    /// No ticket: a write to the key's bucket was younger than write_settle.
    pub settle_skips: u64,
    /// Hot keys the server did not have.
    pub fetch_misses: u64,
    /// Values over max_value (not cached).
    pub too_large: u64,
    pub fetch_errors: u64,
    pub evictions: u64,
    /// Times the key-to-server table was rewritten after an ejection or a
    /// return (each also voided the whole cache).
    #[serde(default)]
    pub reroutes: u64,
    pub cached_keys: usize,
    /// The current hot keys, hottest first (lossy UTF-8).
    pub hot_keys: Vec<String>,
    /// BPF run time of weir_kv (0 unless kernel.bpf_stats_enabled=1).
    pub bpf_run_time_ns: u64,
    pub bpf_run_cnt: u64,
}

/// A running XDP switch and its hot-key loop.
pub struct UdpSwitch {
    cache: Cache,
    /// The TCP proxy's routing, once it runs: XDP follows its ejections.
    routing: FollowedRouting,
    handle: StatusHandle,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The routing the hot-key loop follows (none before the proxy starts).
type FollowedRouting = Arc<Mutex<Option<Arc<Routing>>>>;

/// Reads the switch's status from another thread (the metrics server); it
/// does not keep the program attached.
#[derive(Clone)]
pub struct StatusHandle {
    status: Arc<Mutex<UdpStatus>>,
    prog_fd: Arc<OwnedFd>,
}

impl StatusHandle {
    pub fn get(&self) -> UdpStatus {
        let mut s = self.status.lock().unwrap().clone();
        if let Ok(r) = RunStats::of(self.prog_fd.as_fd()) {
            s.bpf_run_time_ns = r.run_time_ns;
            s.bpf_run_cnt = r.run_cnt;
            s.prog_id = r.id;
        }
        s
    }

    /// The program (for BPF run-time statistics).
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.prog_fd.as_fd()
    }
}

/// Load options from a configuration.
pub fn load_options(cfg: &KvConfig) -> Result<KvLoadOptions> {
    let udp = cfg.udp.as_ref().context("no [udp] section")?;
    let c = &cfg.cache;
    Ok(KvLoadOptions {
        port: udp.port,
        vip: udp.vip,
        hash: cfg.hash,
        dist: cfg.distribution,
        hash_tag: cfg.hash_tag,
        forward: match udp.forward {
            UdpForward::L2 => KvForward::L2,
            UdpForward::L3 => KvForward::L3,
        },
        max_servers: (cfg.servers.len() as u32).max(1),
        max_points: (cfg.distribution().continuum().len() as u32).max(1),
        cache_entries: c.entries.max(c.top_k as u32).max(1),
        cache_enabled: c.enabled,
        max_value: c.max_value,
        buckets: 65536,
        requests: 65536,
        sample_every: if c.enabled { c.sample_every } else { 0 },
        write_settle: c.write_settle,
    })
}

impl UdpSwitch {
    /// Loads, configures and attaches the switch, then starts the hot-key
    /// loop. Nothing stays attached if this fails.
    pub fn start(cfg: &KvConfig) -> Result<UdpSwitch> {
        let udp = cfg.udp.clone().context("no [udp] section")?;
        let mode = match udp.xdp_mode.as_str() {
            "generic" => XdpMode::Generic,
            _ => XdpMode::Native,
        };
        let mut ifaces = Vec::new();
        for name in &udp.interfaces {
            let i = Iface::by_name(name)?;
            ifaces.push((i.name, i.ifindex));
        }
        ensure_free(&ifaces)?;
        let mut hops = Vec::new();
        for (i, addr) in cfg.server_addrs.iter().enumerate() {
            let mac = udp.macs.get(i).copied().flatten();
            hops.push(
                resolve_next_hop(*addr, mac)
                    .with_context(|| format!("server {} ({addr})", cfg.servers[i].ketama_name()))?,
            );
        }
        let opts = load_options(cfg)?;
        let dist = cfg.distribution();
        let status = Arc::new(Mutex::new(UdpStatus {
            interfaces: udp.interfaces.clone(),
            port: udp.port,
            vip: udp.vip.map(|v| v.to_string()),
            forward: udp.forward.to_string(),
            cache_enabled: cfg.cache.enabled,
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let routing = FollowedRouting::default();
        let (tx, rx) = mpsc::channel::<Result<(Cache, OwnedFd)>>();
        let (st2, stop2, cfg2) = (status.clone(), stop.clone(), cfg.clone());
        let routing2 = routing.clone();
        let thread = std::thread::Builder::new()
            .name("weir-kv-hotkeys".into())
            .spawn(move || {
                let setup = (|| -> Result<_> {
                    let kv = crate::xdp::load(&opts)?;
                    let servers: Vec<ServerAddr> = cfg2
                        .server_addrs
                        .iter()
                        .zip(&hops)
                        .map(|(a, h)| ServerAddr {
                            ifindex: h.ifindex,
                            ..ServerAddr::new(a.ip(), a.port(), h.mac)
                        })
                        .collect();
                    kv.set_servers(&servers)?;
                    kv.set_distribution(&dist)?;
                    let mut ports: Vec<u32> = hops.iter().map(|h| h.ifindex).collect();
                    ports.extend(ifaces.iter().map(|i| i.1));
                    ports.sort_unstable();
                    ports.dedup();
                    for p in ports {
                        kv.add_tx_port(p)?;
                    }
                    let fd = kv.prog_fd().try_clone_to_owned()?;
                    Ok((kv, fd))
                })();
                let (mut kv, fd) = match setup {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let att = match attach_all(fd.as_fd(), &ifaces, mode) {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let fd2 = match fd.try_clone() {
                    Ok(f) => f,
                    Err(e) => {
                        let _ = tx.send(Err(e.into()));
                        return;
                    }
                };
                if tx.send(Ok((kv.cache(), fd2))).is_err() {
                    return; // the caller is gone: `att` detaches
                }
                let mut hl = HotLoop::new(&cfg2, kv.cache(), dist, routing2, st2);
                if let Err(e) = hl.run(&mut kv, &stop2) {
                    eprintln!("weir kv: hot-key loop stopped: {e:#}");
                }
                drop(att);
            })?;
        match rx.recv() {
            Ok(Ok((cache, prog_fd))) => Ok(UdpSwitch {
                cache,
                routing,
                handle: StatusHandle {
                    status,
                    prog_fd: Arc::new(prog_fd),
                },
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                bail!("the XDP setup thread died")
            }
        }
    }

    /// The cache (for the TCP proxy's invalidator, and tests).
    pub fn cache(&self) -> Cache {
        self.cache.clone()
    }

    pub fn status(&self) -> UdpStatus {
        self.handle.get()
    }

    /// From now on, forward each key to the server `routing` gives it
    /// (ejections included).
    pub(crate) fn follow(&self, routing: Arc<Routing>) {
        *self.routing.lock().unwrap_or_else(|e| e.into_inner()) = Some(routing);
    }

    pub fn status_handle(&self) -> StatusHandle {
        self.handle.clone()
    }

    /// Detaches the program and stops the loop.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for UdpSwitch {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A blocking `gets` client to one server (the hot-key loop's fetches).
struct Fetcher {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

/// (flags, value, cas) of a fetched item.
type Fetched = (u32, Vec<u8>, u64);

impl Fetcher {
    fn connect(addr: SocketAddr) -> Result<Fetcher> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        s.set_write_timeout(Some(Duration::from_millis(500)))?;
        s.set_nodelay(true)?;
        Ok(Fetcher {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    fn gets(&mut self, key: &[u8]) -> Result<Option<Fetched>> {
        let mut req = b"gets ".to_vec();
        req.extend_from_slice(key);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req)?;
        let mut found = None;
        loop {
            let mut line = Vec::new();
            if self.r.read_until(b'\n', &mut line)? == 0 {
                bail!("server closed the connection");
            }
            if line == b"END\r\n" {
                return Ok(found);
            }
            let text = String::from_utf8_lossy(&line);
            let t: Vec<&str> = text.split_whitespace().collect();
            if t.len() != 5 || t[0] != "VALUE" || t[1].as_bytes() != key {
                bail!("unexpected reply to gets: {}", text.trim_end());
            }
            let flags: u32 = t[2].parse()?;
            let n: usize = t[3].parse()?;
            let cas: u64 = t[4].parse()?;
            let mut v = vec![0; n + 2];
            self.r.read_exact(&mut v)?;
            v.truncate(n);
            found = Some((flags, v, cas));
        }
    }
}

struct HotLoop {
    cache: Cache,
    dist: Distribution,
    routing: FollowedRouting,
    /// The generation of `routing` that `dist` and the XDP table are of.
    generation: u64,
    servers: Vec<SocketAddr>,
    fetchers: Vec<Option<Fetcher>>,
    hot: HotKeys,
    top_k: usize,
    refresh: Duration,
    ttl: Option<Duration>,
    max_value: usize,
    enabled: bool,
    /// Keys not to fetch again before the instant (too large, missing).
    skip: HashMap<Vec<u8>, Instant>,
    status: Arc<Mutex<UdpStatus>>,
    t0: Instant,
}

impl HotLoop {
    fn new(
        cfg: &KvConfig,
        cache: Cache,
        dist: Distribution,
        routing: FollowedRouting,
        status: Arc<Mutex<UdpStatus>>,
    ) -> HotLoop {
        let c = &cfg.cache;
        let t0 = Instant::now();
        HotLoop {
            cache,
            dist,
            routing,
            generation: 0,
            servers: cfg.server_addrs.clone(),
            fetchers: cfg.server_addrs.iter().map(|_| None).collect(),
            hot: HotKeys::new(
                HotKeyConfig {
                    width: 4096,
                    depth: 4,
                    k: (c.top_k * 2).max(16),
                    window_ns: c.window.as_nanos() as u64,
                    threshold: c.threshold,
                },
                0,
            ),
            top_k: c.top_k,
            refresh: c.refresh,
            ttl: (!c.ttl.is_zero()).then_some(c.ttl),
            max_value: c.max_value,
            enabled: c.enabled,
            skip: HashMap::new(),
            status,
            t0,
        }
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn run(&mut self, kv: &mut crate::xdp::LoadedKv, stop: &AtomicBool) -> Result<()> {
        let mut last = Instant::now();
        let poll = self.refresh.min(Duration::from_millis(100));
        while !stop.load(Ordering::SeqCst) {
            let samples: Vec<_> = kv.poll_hot_key_samples(poll)?.collect();
            let now = self.now_ns();
            let n = samples.len() as u64;
            for s in samples {
                self.hot.observe(&s.key, now);
            }
            self.status.lock().unwrap().samples += n;
            self.follow_routing(kv)?;
            if last.elapsed() < self.refresh {
                continue;
            }
            last = Instant::now();
            self.hot.tick(self.now_ns());
            if self.enabled {
                self.round();
            }
            let st = kv.stats()?;
            let mut s = self.status.lock().unwrap();
            s.xdp = STAT_NAMES
                .iter()
                .zip(&st.counters)
                .map(|(n, v)| (n.to_string(), *v))
                .collect();
            s.server_requests = st.servers.iter().map(|x| x.0).collect();
            s.cache_hits = st.by_name("cache_tx").unwrap_or(0);
            s.cache_misses =
                st.by_name("cache_miss").unwrap_or(0) + st.by_name("cache_stale").unwrap_or(0);
            s.hot_keys = self
                .hot
                .hot()
                .iter()
                .take(self.top_k)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            s.cached_keys = self.cache.keys().len();
        }
        Ok(())
    }

    /// After an ejection or a return, XDP forwards each key to its new owner
    /// and the whole cache is voided: a cached value came from the former
    /// owner, which the new one need not hold. Writes through the TCP proxy
    /// invalidate their key whoever owns it, so nothing else goes stale.
    fn follow_routing(&mut self, kv: &crate::xdp::LoadedKv) -> Result<()> {
        let Some(routing) = self
            .routing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Ok(());
        };
        if routing.generation() == self.generation {
            return Ok(());
        }
        let (generation, dist) = routing.current();
        kv.set_distribution(&dist)?;
        self.cache.flush()?;
        self.dist = (*dist).clone();
        self.generation = generation;
        self.status.lock().unwrap().reroutes += 1;
        Ok(())
    }

    /// One refresh: evict, install, refetch.
    fn round(&mut self) {
        let now = Instant::now();
        self.skip.retain(|_, until| *until > now);
        let cached: HashSet<Vec<u8>> = self.cache.keys().into_iter().collect();
        let plan = self.hot.plan(&cached, self.top_k);
        let mut evicted = 0;
        for k in &plan.evict {
            if self.cache.evict(k).unwrap_or(false) {
                evicted += 1;
            }
        }
        // Hot keys to (re)install: new ones, and cached ones that XDP does
        // not serve (voided by a write) or that expire within two rounds.
        let mut want: Vec<Vec<u8>> = plan.insert;
        let margin = self.refresh * 2;
        for k in self.hot.hot().into_iter().take(self.top_k) {
            if !cached.contains(&k) {
                continue;
            }
            let served = self.cache.is_served(&k).unwrap_or(false);
            let expiring = match (self.ttl, self.cache.entry(&k)) {
                (Some(ttl), Ok(Some(e))) if e.expires_ns != 0 => {
                    let left = e.expires_ns.saturating_sub(weir_sys::monotonic_ns());
                    left < margin.as_nanos() as u64 || left < (ttl / 2).as_nanos() as u64
                }
                _ => false,
            };
            if !served || expiring {
                want.push(k);
            }
        }
        let mut c = Counts::default();
        for k in want {
            if self.skip.contains_key(&k) {
                continue;
            }
            self.install(&k, &mut c);
        }
        let mut s = self.status.lock().unwrap();
        s.evictions += evicted;
        s.installs += c.installs;
        s.install_races += c.races;
        s.settle_skips += c.settle;
        s.fetch_misses += c.misses;
        s.too_large += c.too_large;
        s.fetch_errors += c.errors;
    }

    fn install(&mut self, key: &[u8], c: &mut Counts) {
        // The ticket comes first: a write seen after it voids the put.
        let ticket = match self.cache.ticket(key) {
            Ok(Some(t)) => t,
            Ok(None) => {
                c.settle += 1;
                return;
            }
            Err(_) => {
                // not a cacheable key (length)
                self.skip
                    .insert(key.to_vec(), Instant::now() + Duration::from_secs(60));
                return;
            }
        };
        let srv = self.dist.server_for_key(key);
        let fetched = (|| -> Result<Option<Fetched>> {
            if self.fetchers[srv].is_none() {
                self.fetchers[srv] = Some(Fetcher::connect(self.servers[srv])?);
            }
            self.fetchers[srv].as_mut().unwrap().gets(key)
        })();
        let later = Instant::now() + self.refresh * 5;
        match fetched {
            Err(_) => {
                self.fetchers[srv] = None;
                c.errors += 1;
            }
            Ok(None) => {
                c.misses += 1;
                self.skip.insert(key.to_vec(), later);
            }
            Ok(Some((_, v, _))) if v.len() > self.max_value => {
                c.too_large += 1;
                self.skip.insert(
                    key.to_vec(),
                    Instant::now() + self.ttl.unwrap_or(Duration::from_secs(10)),
                );
            }
            Ok(Some((flags, v, cas))) => {
                match self.cache.put_ttl(&ticket, flags, &v, Some(cas), self.ttl) {
                    Ok(true) => c.installs += 1,
                    Ok(false) => c.races += 1,
                    Err(_) => c.errors += 1,
                }
            }
        }
    }
}

#[derive(Default)]
struct Counts {
    installs: u64,
    races: u64,
    settle: u64,
    misses: u64,
    too_large: u64,
    errors: u64,
}
