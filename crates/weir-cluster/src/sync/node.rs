//! Connection sync on one node: a UDP socket on the sync interface and
//! three threads.
//!
//! - **sender**: drains the data plane's ring of installed connections
//!   (`sync_events`) and sends each batch to every peer, as many records
//!   per datagram as fit. Whatever the ring held at a wake-up is one batch,
//!   so batches grow with the install rate and cost one wake-up each; a
//!   lone install leaves at once.
//! - **receiver**: verifies each datagram (size, header, tag, replay
//!   window), counts and drops the bad ones, and installs the records of
//!   good ones (`Installer`: bounded, never over this node's own entries).
//! - **bulk server** (one at a time, on demand): answers a joining node's
//!   bulk request with a challenge to the member's registered address, and
//!   its proof with every live connection of this node's table, paced
//!   ([`crate::sync::gate`] decides who gets what).
//!
//! A joining node calls [`SyncNode::join`] before it attaches (and after
//! the agent registered it: peers refuse a node they do not know): it asks
//! one peer after the other for a bulk, answers the peer's challenge, and
//! stops when a bulk's end marker arrives.
//!
//! A node that took over a running data plane (`weir serve --takeover`)
//! inherits its table but not what passed while no process of this node
//! held the sync port: it joins with a bulk all the same (installs never
//! replace an entry, so what it has stays), and sends its own table to
//! every peer once ([`SyncNode::announce_table`]), for the connections its
//! data plane installed while no sender drained the ring.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use weir_abi::weir_sync_event;
use weir_dataplane::loader::ConnTimeouts;
use weir_dataplane::maps::Maps;
use weir_dataplane::sync_events::{Announcements, SyncMaps};
use weir_sys::monotonic_ns;

use crate::realtime::go_realtime;
use crate::sync::gate::{self, BulkGate, Refusal};
use crate::sync::install::{table_records, Installer, Outcome};
use crate::sync::stats::{Counters, Stats};
use crate::sync::wire::{
    self, ConnRecord, Encoder, Key, Kind, Nonce, Reject, ReplayGuard, MAX_DATAGRAM,
};

/// How long a blocking call waits before it looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// Bulk datagrams sent back to back before a pause (the joiner's socket
/// buffer holds more than this many).
const BULK_BURST: usize = 64;
const BULK_PAUSE: Duration = Duration::from_millis(1);
/// Senders a receiver keeps replay windows for.
const MAX_SENDERS: usize = 256;
/// The sync socket's receive buffer: room for a bulk's bursts.
const RCVBUF: u32 = 8 << 20;
/// A joiner asks a peer again this often until the peer challenges it: the
/// peer learns of the joiner's registration through its etcd watch, which
/// may lag the joiner's own start by a little.
const REQUEST_AGAIN: Duration = Duration::from_millis(100);

/// Wall-clock time in ns (datagrams carry it, for the lag).
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Other nodes by name, with their sync addresses.
type PeerList = Vec<(String, SocketAddr)>;

/// The other nodes' sync addresses, kept by the cluster agent; unknown
/// until the agent first sets them.
#[derive(Debug, Clone, Default)]
pub struct Peers(Arc<RwLock<Option<PeerList>>>);

impl Peers {
    pub fn set(&self, mut peers: Vec<(String, SocketAddr)>) {
        peers.sort();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(peers);
    }

    pub fn get(&self) -> Vec<(String, SocketAddr)> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Whether the agent has said who the peers are (possibly nobody).
    pub fn known(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// Connection sync's parameters.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub name: String,
    pub key: Key,
    /// This node's sync address (the sync interface's address and port).
    pub bind: SocketAddr,
    /// Where the data plane's maps are pinned.
    pub pin_dir: PathBuf,
    /// Peers' entries this node's table may hold.
    pub budget: u32,
    pub timeouts: ConnTimeouts,
    /// Run the sender and the receiver at real-time priority
    /// ([`crate::realtime`]).
    pub realtime: bool,
}

/// What the receiver passes to a join in progress.
#[derive(Debug)]
enum JoinEvent {
    /// A peer's challenge: echo its nonce to have the bulk.
    Challenge { from: String, nonce: Nonce },
    /// The end of a peer's bulk, with the number of records it sent.
    Done { from: String, total: u64 },
}

/// A fresh random nonce from the kernel's CSPRNG.
fn fresh_nonce() -> std::io::Result<Nonce> {
    let mut n: Nonce = [0; wire::NONCE_LEN];
    weir_sys::fill_random(&mut n)?;
    Ok(n)
}

/// What a join brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinReport {
    /// The peer whose bulk ended; none if no peer answered in time.
    pub from: Option<String>,
    /// Records that peer said it sent.
    pub total: u64,
    /// Records received during the join.
    pub received: u64,
    pub took: Duration,
}

/// Connection sync on this node; its threads stop on drop.
pub struct SyncNode {
    stats: Arc<Stats>,
    peers: Peers,
    socket: Arc<UdpSocket>,
    encoder: Arc<Mutex<Encoder>>,
    join_events: Mutex<Receiver<JoinEvent>>,
    announce: Option<Arc<SyncMaps>>,
    /// Reads this node's table and sends it paced (bulks, and the table
    /// announced after a takeover).
    table: BulkServer,
    peer_entries: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn open_socket(bind: SocketAddr) -> Result<UdpSocket> {
    let s = UdpSocket::bind(bind).with_context(|| {
        format!(
            "binding the sync socket to {bind} (is the port free, and the address this \
             namespace's cluster.sync_interface's?)"
        )
    })?;
    s.set_read_timeout(Some(TICK))?;
    // Past net.core.rmem_max as root; else the kernel's cap applies, and
    // the smaller buffer only costs datagrams under a burst.
    let _ = weir_sys::socket::set_receive_buffer(&s, RCVBUF);
    Ok(s)
}

fn send_all(socket: &UdpSocket, stats: &Stats, to: SocketAddr, grams: &[Vec<u8>], records: u64) {
    for g in grams {
        match socket.send_to(g, to) {
            Ok(_) => stats.inc(&stats.sent_datagrams),
            Err(_) => stats.inc(&stats.send_errors),
        }
    }
    stats.add(&stats.sent_records, records);
}

fn record_of(ev: &weir_sync_event, now_ns: u64) -> ConnRecord {
    ConnRecord {
        key: ev.key,
        dip_addr: ev.dip_addr,
        dip_port: ev.dip_port,
        close_flags: ev.close_flags,
        idle_us: (now_ns.saturating_sub(ev.installed_ns) / 1000).min(u64::from(u32::MAX)) as u32,
    }
}

impl SyncNode {
    /// Binds the socket and starts the threads. With `announce` (the loaded
    /// program's sync maps) the node sends what its data plane installs;
    /// without, it only receives.
    pub fn start(opts: SyncOptions, announce: Option<SyncMaps>) -> Result<SyncNode> {
        let socket = Arc::new(open_socket(opts.bind)?);
        let installer = Installer::new(
            Maps::pinned(&opts.pin_dir).context("sync: opening the maps")?,
            opts.budget,
        );
        let stats = Arc::new(Stats::default());
        let peers = Peers::default();
        let stop = Arc::new(AtomicBool::new(false));
        let encoder = Arc::new(Mutex::new(Encoder::new(
            opts.key.clone(),
            &opts.name,
            unix_ns(),
        )));
        let peer_entries = Arc::new(AtomicU64::new(0));
        let announce = announce.map(Arc::new);
        let (events_tx, events_rx) = mpsc::sync_channel(16);
        let mut threads = Vec::new();
        let realtime = opts.realtime;
        let table = BulkServer {
            socket: socket.clone(),
            stats: stats.clone(),
            encoder: encoder.clone(),
            pin_dir: opts.pin_dir.clone(),
            timeouts: opts.timeouts,
        };
        let receiver = Receive {
            socket: socket.clone(),
            key: opts.key.clone(),
            name: opts.name.clone(),
            stats: stats.clone(),
            installer,
            guard: ReplayGuard::new(MAX_SENDERS),
            peers: peers.clone(),
            gate: BulkGate::new(),
            encoder: encoder.clone(),
            join_events: events_tx,
            bulk_busy: Arc::new(AtomicBool::new(false)),
            bulk: table.clone(),
            peer_entries: peer_entries.clone(),
            stop: stop.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name("sync-recv".into())
                .spawn(move || {
                    if realtime {
                        go_realtime("sync receiver");
                    }
                    receiver.run()
                })
                .context("starting the sync receiver")?,
        );
        if let Some(maps) = &announce {
            let send = Sender {
                socket: socket.clone(),
                stats: stats.clone(),
                encoder: encoder.clone(),
                peers: peers.clone(),
                maps: maps.clone(),
                stop: stop.clone(),
            };
            threads.push(
                std::thread::Builder::new()
                    .name("sync-send".into())
                    .spawn(move || {
                        if realtime {
                            go_realtime("sync sender");
                        }
                        send.run()
                    })
                    .context("starting the sync sender")?,
            );
        }
        Ok(SyncNode {
            stats,
            peers,
            socket,
            encoder,
            join_events: Mutex::new(events_rx),
            announce,
            table,
            peer_entries,
            stop,
            threads,
        })
    }

    /// Where the agent keeps the other nodes' sync addresses.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.socket.local_addr()?)
    }

    pub fn counters(&self) -> Counters {
        let mut c = self.stats.snapshot();
        if let Some(s) = self.announce.as_ref().and_then(|m| m.stats().ok()) {
            c.announced = s.announced;
            c.announce_lost = s.lost;
        }
        c.peer_entries = self.peer_entries.load(Ordering::Relaxed);
        c
    }

    /// Asks the peers, one after the other, for every connection they know,
    /// until one bulk ends or `timeout` passes. Each peer is asked (again
    /// every [`REQUEST_AGAIN`]) until it challenges; its challenge is
    /// answered, and its bulk comes to this node's registered address.
    pub fn join(&self, timeout: Duration) -> JoinReport {
        let start = Instant::now();
        let deadline = start + timeout;
        let received_before = self.stats.snapshot().received_records;
        let events = self.join_events.lock().unwrap_or_else(|e| e.into_inner());
        // Challenges and ends from before this join answer nothing of it.
        while events.try_recv().is_ok() {}
        let peers = self.peers.get();
        let mut report = JoinReport {
            from: None,
            total: 0,
            received: 0,
            took: Duration::ZERO,
        };
        let each = (timeout / peers.len().max(1) as u32).max(Duration::from_millis(200));
        let seal = |make: &dyn Fn(&mut Encoder) -> Vec<u8>| {
            make(&mut self.encoder.lock().unwrap_or_else(|e| e.into_inner()))
        };
        'peers: for (name, addr) in &peers {
            let until = (Instant::now() + each).min(deadline);
            let mut challenged = false;
            let mut ask_at = Instant::now();
            loop {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                if !challenged && now >= ask_at {
                    let request = seal(&|e| e.bulk_request(unix_ns()));
                    send_all(&self.socket, &self.stats, *addr, &[request], 0);
                    ask_at = now + REQUEST_AGAIN;
                }
                let wake = if challenged { until } else { ask_at.min(until) };
                match events.recv_timeout(wake.saturating_duration_since(now)) {
                    // A peer that was asked twice may challenge twice, with
                    // the same nonce: one proof is enough.
                    Ok(JoinEvent::Challenge { from, nonce }) if &from == name && !challenged => {
                        challenged = true;
                        let proof = seal(&|e| e.bulk_proof(&nonce, unix_ns()));
                        send_all(&self.socket, &self.stats, *addr, &[proof], 0);
                    }
                    Ok(JoinEvent::Done { from, total }) if &from == name => {
                        report.from = Some(from);
                        report.total = total;
                        break 'peers;
                    }
                    Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break 'peers,
                }
            }
        }
        report.received = self.stats.snapshot().received_records - received_before;
        report.took = start.elapsed();
        report
    }

    /// Sends every live connection of this node's table to every peer, as
    /// bulk records (peers install what they lack and keep what they have);
    /// returns how many records went to each. After a takeover this covers
    /// what the data plane installed before this node's sender started.
    pub fn announce_table(&self) -> Result<u64> {
        let peers = self.peers.get();
        if peers.is_empty() {
            return Ok(0);
        }
        let records = self.table.records()?;
        for (_, addr) in &peers {
            self.table.send(*addr, &records);
        }
        Ok(records.len() as u64)
    }
}

impl Drop for SyncNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The sender thread.
struct Sender {
    socket: Arc<UdpSocket>,
    stats: Arc<Stats>,
    encoder: Arc<Mutex<Encoder>>,
    peers: Peers,
    maps: Arc<SyncMaps>,
    stop: Arc<AtomicBool>,
}

impl Sender {
    fn run(self) {
        let mut ring = match Announcements::open(&self.maps.events) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("weir: sync: the sender cannot read the data plane's ring: {e:#}");
                return;
            }
        };
        while !self.stop.load(Ordering::Relaxed) {
            // What the ring holds waits for the agent's first word on the
            // peers: drained before it, it would be sent to nobody.
            if !self.peers.known() {
                std::thread::sleep(TICK / 10);
                continue;
            }
            let events = match ring.poll(TICK) {
                Ok(ev) => ev,
                Err(e) => {
                    eprintln!("weir: sync: reading the ring: {e:#}");
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            if events.is_empty() {
                continue;
            }
            let peers = self.peers.get();
            if peers.is_empty() {
                continue;
            }
            let now = monotonic_ns();
            let records: Vec<ConnRecord> = events.iter().map(|e| record_of(e, now)).collect();
            let grams = self
                .encoder
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .conns(&records, unix_ns());
            for (_, addr) in &peers {
                send_all(
                    &self.socket,
                    &self.stats,
                    *addr,
                    &grams,
                    records.len() as u64,
                );
            }
        }
    }
}

/// Answers bulk requests.
#[derive(Clone)]
struct BulkServer {
    socket: Arc<UdpSocket>,
    stats: Arc<Stats>,
    encoder: Arc<Mutex<Encoder>>,
    pin_dir: PathBuf,
    timeouts: ConnTimeouts,
}

impl BulkServer {
    /// Every live connection of this node's table.
    fn records(&self) -> Result<Vec<ConnRecord>> {
        let maps = Maps::pinned(&self.pin_dir)?;
        table_records(&maps, &self.timeouts)
    }

    /// `records` to `to` as bulk datagrams, paced.
    fn send(&self, to: SocketAddr, records: &[ConnRecord]) {
        let grams = self
            .encoder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bulk(records, unix_ns());
        for burst in grams.chunks(BULK_BURST) {
            send_all(&self.socket, &self.stats, to, burst, 0);
            std::thread::sleep(BULK_PAUSE);
        }
    }

    fn serve(&self, to: SocketAddr) -> Result<()> {
        let records = self.records()?;
        self.send(to, &records);
        let done = self
            .encoder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bulk_done(records.len() as u64, unix_ns());
        send_all(&self.socket, &self.stats, to, &[done], 0);
        self.stats.inc(&self.stats.bulks_served);
        self.stats
            .add(&self.stats.bulk_records_sent, records.len() as u64);
        Ok(())
    }
}

/// Why a datagram earned nothing: dropped as bad, or a bulk refused.
#[derive(Debug, Clone, Copy)]
enum Refused {
    Datagram(Reject),
    Bulk(Refusal),
}

impl From<Reject> for Refused {
    fn from(r: Reject) -> Refused {
        Refused::Datagram(r)
    }
}

impl From<Refusal> for Refused {
    fn from(r: Refusal) -> Refused {
        Refused::Bulk(r)
    }
}

/// The receiver thread.
struct Receive {
    socket: Arc<UdpSocket>,
    key: Key,
    name: String,
    stats: Arc<Stats>,
    installer: Installer,
    guard: ReplayGuard,
    /// The cluster's members (from etcd): who may have a bulk, and where.
    peers: Peers,
    gate: BulkGate,
    encoder: Arc<Mutex<Encoder>>,
    join_events: SyncSender<JoinEvent>,
    bulk_busy: Arc<AtomicBool>,
    bulk: BulkServer,
    peer_entries: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Receive {
    fn run(mut self) {
        // One byte more than the largest datagram: a longer one is oversized.
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        while !self.stop.load(Ordering::Relaxed) {
            let (n, from) = match self.socket.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => {
                    eprintln!("weir: sync: receiving: {e}");
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            self.stats.inc(&self.stats.received_datagrams);
            if let Err(r) = self.handle(&buf[..n], from) {
                let s = &self.stats;
                s.inc(match r {
                    Refused::Datagram(Reject::Oversized) => &s.dropped_oversized,
                    Refused::Datagram(Reject::Malformed) => &s.dropped_malformed,
                    Refused::Datagram(Reject::Unauthenticated) => &s.dropped_unauthenticated,
                    Refused::Datagram(Reject::Replayed) => &s.dropped_replayed,
                    Refused::Bulk(Refusal::UnknownMember) => &s.bulk_refused_unknown_member,
                    Refused::Bulk(Refusal::AddressMismatch) => &s.bulk_refused_address_mismatch,
                    Refused::Bulk(Refusal::StaleChallenge) => &s.bulk_refused_stale_challenge,
                    Refused::Bulk(Refusal::RateLimited) => &s.bulk_refused_rate_limited,
                });
            }
            self.peer_entries
                .store(self.installer.peer_entries() as u64, Ordering::Relaxed);
        }
    }

    fn handle(&mut self, bytes: &[u8], from: SocketAddr) -> Result<(), Refused> {
        let d = wire::open(bytes, &self.key)?;
        if d.sender == self.name {
            // Our own name with the right key: a reflection, or a twin.
            return Err(Reject::Replayed.into());
        }
        // The members, read for the bulk handshake only (live announcements
        // do not pay for the copy).
        let members = if matches!(d.kind, Kind::BulkRequest | Kind::BulkProof) {
            let members = self.peers.get();
            // Before the replay window: a copy from another address must
            // not use up the sequence number of the member's own.
            gate::registered(&d.sender, from, &members)?;
            members
        } else {
            Vec::new()
        };
        self.guard.accept(&d.sender, d.epoch, d.seq)?;
        // wire::open gives every challenge and proof its nonce.
        let nonce = || d.nonce.ok_or(Reject::Malformed);
        match d.kind {
            Kind::Conns | Kind::Bulk => self.install(&d.records, d.kind, d.sent_unix_ns),
            Kind::BulkRequest => self.challenge(&d.sender, from, &members)?,
            Kind::BulkProof => {
                let nonce = nonce()?;
                if self.bulk_busy.load(Ordering::Acquire) {
                    // Another member's bulk is under way: this member's
                    // join moves on to its next peer when its time with
                    // this one ends.
                    self.stats.inc(&self.stats.bulks_refused);
                    return Ok(());
                }
                let to = self
                    .gate
                    .proof(&d.sender, from, &members, &nonce, Instant::now())?;
                self.serve_bulk(to);
            }
            Kind::BulkChallenge => {
                let nonce = nonce()?;
                let _ = self.join_events.try_send(JoinEvent::Challenge {
                    from: d.sender,
                    nonce,
                });
            }
            Kind::BulkDone => {
                let _ = self.join_events.try_send(JoinEvent::Done {
                    from: d.sender,
                    total: d.bulk_total,
                });
            }
        }
        Ok(())
    }

    /// A member's bulk request: a challenge to its registered address.
    fn challenge(
        &mut self,
        member: &str,
        from: SocketAddr,
        members: &[(String, SocketAddr)],
    ) -> Result<(), Refusal> {
        let nonce = match fresh_nonce() {
            Ok(n) => n,
            Err(e) => {
                eprintln!("weir: sync: no random nonce for {member}'s bulk request: {e}");
                return Ok(());
            }
        };
        let (to, nonce) = self
            .gate
            .request(member, from, members, nonce, Instant::now())?;
        let challenge = self
            .encoder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bulk_challenge(&nonce, unix_ns());
        send_all(&self.socket, &self.stats, to, &[challenge], 0);
        self.stats.inc(&self.stats.bulk_challenges);
        Ok(())
    }

    fn install(&mut self, records: &[wire::ConnRecord], kind: Kind, sent_unix_ns: u64) {
        let s = self.stats.clone();
        s.add(&s.received_records, records.len() as u64);
        let now = Instant::now();
        for r in records {
            match self.installer.install(r, now) {
                Ok(Outcome::Installed) => s.inc(&s.installed),
                Ok(Outcome::Present) => s.inc(&s.present),
                Ok(Outcome::Unknown) => s.inc(&s.unknown),
                Ok(Outcome::Full) => s.inc(&s.dropped_full),
                Err(e) => {
                    eprintln!("weir: sync: installing a connection: {e:#}");
                    s.inc(&s.install_errors);
                }
            }
        }
        if kind == Kind::Conns {
            // From the peer's install to ours: its queueing (idle) plus
            // the way here (clocks of different hosts may disagree a bit).
            let transit_us = unix_ns().saturating_sub(sent_unix_ns) / 1000;
            for r in records {
                s.lag(u64::from(r.idle_us) + transit_us);
            }
        }
    }

    fn serve_bulk(&self, to: SocketAddr) {
        if self.bulk_busy.swap(true, Ordering::AcqRel) {
            self.stats.inc(&self.stats.bulks_refused);
            return;
        }
        let bulk = self.bulk.clone();
        let busy = self.bulk_busy.clone();
        let spawned = std::thread::Builder::new()
            .name("sync-bulk".into())
            .spawn(move || {
                if let Err(e) = bulk.serve(to) {
                    eprintln!("weir: sync: serving a bulk to {to}: {e:#}");
                }
                busy.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.bulk_busy.store(false, Ordering::Release);
            self.stats.inc(&self.stats.bulks_refused);
        }
    }
}
