//! The TCP memcached proxy.
//!
//! One mio event loop per worker thread; each worker has its own
//! `SO_REUSEPORT` listener and its own persistent connection to every server,
//! on which requests from all its clients are pipelined. Replies are matched
//! to requests in FIFO order per server connection, and given back to each
//! client in the order it sent its requests.
//!
//! A `get`/`gets` whose keys live on several servers is split into one
//! request per server; the values are merged back in the order of the keys.
//! `flush_all` goes to every server. A mutating command is passed to the
//! [`Invalidation`] before it is forwarded and again when its reply arrives.
//! `noreply` is honoured towards the client, but the proxy strips it towards
//! the server and swallows the reply, so replies stay matched to requests.
//!
//! Meta commands (`mg ms md ma mn me`) are forwarded the same way, by key
//! and in order; `meta_dispatch` says how quiet mode and `mn` are kept.
//!
//! Errors are those of memcached for bad requests (`ERROR`, `CLIENT_ERROR
//! ...`) and those of twemproxy for server trouble (`SERVER_ERROR <reason>`).
//! The binary protocol is not spoken: a connection opening with the binary
//! magic byte is closed (counted as `binary_refused`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::route::Distribution;
use anyhow::{Context, Result};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::KvConfig;
use crate::health::{Health, HealthReport};
use crate::invalidate::Invalidation;
use crate::proto::{self, Cmd, Parsed, RespKind};
use crate::routing::Routing;
use crate::stats::{inc, snapshot, Snapshot, WorkerStats};

mod handoff;
mod meta_dispatch;
mod reply_buf;
mod splice;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const SERVER_BASE: usize = 2;
const CLIENT_BASE: usize = 1 << 20;
/// Stop reading a client with this many replies outstanding.
const MAX_SLOTS: usize = 4096;
/// ... or this many unsent reply bytes.
const MAX_WBUF: usize = 4 << 20;
const READ_CHUNK: usize = 64 * 1024;
pub const VERSION_REPLY: &[u8] = b"VERSION weir-kv 0.1.0\r\n";

/// A running proxy.
pub struct Proxy {
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
    stats: Vec<Arc<WorkerStats>>,
    routing: Arc<Routing>,
    local: SocketAddr,
    /// Where another proxy hands this one its clients (one per worker).
    inboxes: Vec<handoff::Inbox>,
    /// Where this proxy's workers hand their clients, once set.
    target: handoff::Target,
}

impl Proxy {
    /// Bind and start `cfg.workers` worker threads.
    pub fn start(
        cfg: &KvConfig,
        dist: Arc<Distribution>,
        invalidation: Option<Invalidation>,
    ) -> Result<Proxy> {
        let stop = Arc::new(AtomicBool::new(false));
        let nclients = Arc::new(AtomicUsize::new(0));
        let mut local = cfg.listen;
        let mut listeners = Vec::new();
        for _ in 0..cfg.workers.max(1) {
            let l = bind_reuseport(local, cfg.backlog)
                .with_context(|| format!("listening on {local}"))?;
            local = l.local_addr()?;
            listeners.push(l);
        }
        let mut threads = Vec::new();
        let mut wakers = Vec::new();
        let mut stats = Vec::new();
        let names = cfg
            .servers
            .iter()
            .map(|s| {
                s.name
                    .clone()
                    .unwrap_or_else(|| format!("{}:{}", s.addr, s.port))
            })
            .collect();
        let health = Arc::new(Health::ejecting(&cfg.pool, names, cfg.eject));
        let routing = Arc::new(Routing::new(cfg, dist, health.clone()));
        let target = handoff::Target::default();
        let mut inboxes = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, inbox) = std::sync::mpsc::channel();
            inboxes.push(handoff::Inbox {
                tx,
                waker: waker.clone(),
            });
            let st = Arc::new(WorkerStats::new(cfg.servers.len()));
            let mut w = Worker::new(
                poll,
                TcpListener::from_std(l),
                cfg,
                routing.clone(),
                invalidation.clone(),
                st.clone(),
                health.clone(),
                stop.clone(),
                nclients.clone(),
                handoff::Handoff {
                    inbox,
                    target: target.clone(),
                    next: i,
                },
            )?;
            wakers.push(waker);
            stats.push(st);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("weir-kv-{i}"))
                    .spawn(move || {
                        if let Err(e) = w.run() {
                            eprintln!("weir kv: worker {i}: {e:#}");
                        }
                    })?,
            );
        }
        Ok(Proxy {
            stop,
            wakers,
            threads,
            stats,
            routing,
            local,
            inboxes,
            target,
        })
    }

    /// Hands every client connection to `to` (the proxy replacing this one
    /// on a reload) as soon as it has nothing outstanding, and waits up to
    /// `wait` for that; the number of clients still here then (closed when
    /// this proxy drops).
    pub fn hand_over(&self, to: &Proxy, wait: Duration) -> usize {
        if self.target.set(to.inboxes.clone()).is_err() {
            return 0;
        }
        for w in &self.wakers {
            let _ = w.wake();
        }
        let deadline = Instant::now() + wait;
        while !self.threads.iter().all(|t| t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stats().client_connections as usize
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stats(&self) -> Snapshot {
        snapshot(&self.stats)
    }

    /// Each server's state, in the configuration's order.
    pub fn health(&self) -> Vec<HealthReport> {
        self.routing.health().reports()
    }

    /// Which server owns a key now, ejections included.
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// Stop the workers and close every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind_reuseport(addr: SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(backlog.max(1))?;
    Ok(s.into())
}

/// A reply slot of a client, in request order.
struct Slot {
    done: bool,
    resp: Vec<u8>,
    /// Fragments still to come.
    frags: u16,
    split: Option<Box<Split>>,
    /// flush_all: every server must say OK.
    flush: bool,
    /// Close the connection once this slot is written (quit).
    close_after: bool,
    /// A spliced value, whose bytes go after `resp[..at]` (boxed: slots
    /// of small replies stay small).
    pipe: Option<Box<splice::Outbound>>,
}

impl Slot {
    fn new(frags: u16) -> Slot {
        Slot {
            done: false,
            resp: Vec::new(),
            frags,
            split: None,
            flush: false,
            close_after: false,
            pipe: None,
        }
    }
    fn local(reply: &[u8]) -> Slot {
        Slot {
            done: true,
            resp: reply.to_vec(),
            ..Slot::new(0)
        }
    }
}

/// A multi-server get being merged.
struct Split {
    keys: Vec<Vec<u8>>,
    group: Vec<u16>,
    /// Value block of each key, as a range into `buf`.
    vals: Vec<Option<(usize, usize)>>,
    buf: Vec<u8>,
    error: Option<Vec<u8>>,
}

struct Client {
    sock: TcpStream,
    gen: u32,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    wpos: usize,
    slots: VecDeque<Slot>,
    head_seq: u64,
    closing: bool,
    dead: bool,
    first: bool,
    /// Not read because of backpressure: `client_flush` resumes it.
    paused: bool,
    /// In `dirty_clients` already (flushed once per turn, however many
    /// replies came for it).
    dirty: bool,
    /// Values in pipes, each written in its place among `wbuf`'s bytes.
    outbound: VecDeque<splice::Outbound>,
}

impl Client {
    /// Reply bytes the socket did not take yet, piped ones included.
    fn unsent(&self) -> usize {
        self.wbuf.len() - self.wpos + self.outbound.iter().map(|o| o.len).sum::<usize>()
    }
}

/// A request in flight on a server connection.
struct Pending {
    client: u32,
    gen: u32,
    seq: u64,
    kind: RespKind,
    frag: u16,
    swallow: bool,
    /// The key of a mutation, invalidated again when the reply arrives.
    inval_key: Option<Box<[u8]>>,
    sent: Instant,
    /// Its value filled a pipe once: copy it.
    no_splice: bool,
}

impl Pending {
    /// A request of client `client` (generation `gen`), answer number `seq`.
    fn new(client: u32, gen: u32, seq: u64, kind: RespKind) -> Pending {
        Pending {
            client,
            gen,
            seq,
            kind,
            frag: 0,
            swallow: false,
            inval_key: None,
            sent: Instant::now(),
            no_splice: false,
        }
    }

    /// Part `frag` of a multi-key get split by server.
    fn frag(self, frag: u16) -> Pending {
        Pending { frag, ..self }
    }

    /// A noreply request: the server's answer is dropped.
    fn swallowed(self, swallow: bool) -> Pending {
        Pending { swallow, ..self }
    }

    /// A mutation of `key`, invalidated again when its reply arrives.
    fn invalidating(self, inval_key: Option<Box<[u8]>>) -> Pending {
        Pending { inval_key, ..self }
    }
}

struct ServerConn {
    addr: SocketAddr,
    sock: Option<TcpStream>,
    connected: bool,
    rbuf: reply_buf::ReplyBuf,
    wbuf: Vec<u8>,
    wpos: usize,
    inflight: VecDeque<Pending>,
    /// The front reply's value, going into a pipe or in it.
    inbound: Option<splice::Inbound>,
    /// Read a header's worth first: the last value was spliced.
    small_reads: bool,
    /// With ejection: this worker saw the server fail and no reply since.
    /// A new connection then carries one request (the probe) until its
    /// reply comes or it fails, as each failed connection fails all it
    /// carries: a failure costs one request, not a pipeline
    /// (`waits_for_probe`). A connect alone proves little: a dying server's
    /// listener still completes handshakes.
    suspect: bool,
}

struct Worker {
    poll: Poll,
    /// None once the worker hands its clients over.
    listener: Option<TcpListener>,
    clients: Vec<Option<Client>>,
    free: Vec<u32>,
    next_gen: u32,
    servers: Vec<ServerConn>,
    routing: Arc<Routing>,
    /// `routing`'s distribution as of generation `dist_generation`.
    dist: Arc<Distribution>,
    dist_generation: u64,
    inval: Option<Invalidation>,
    stats: Arc<WorkerStats>,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    nclients: Arc<AtomicUsize>,
    max_clients: usize,
    timeout: Option<Duration>,
    keepalive: bool,
    dirty_servers: Vec<usize>,
    dirty_clients: Vec<u32>,
    scratch: Vec<u8>,
    /// Clients whose next request waits for a probe (`ServerConn::suspect`).
    probe_waiters: Vec<u32>,
    /// Every client read lands here first (zeroed once, not per read).
    inbuf: Box<[u8]>,
    handoff: handoff::Handoff,
    /// Empty pipes for the next spliced values.
    pipes: Vec<weir_sys::SplicePipe>,
}

fn errmsg(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    fn new(
        poll: Poll,
        mut listener: TcpListener,
        cfg: &KvConfig,
        routing: Arc<Routing>,
        inval: Option<Invalidation>,
        stats: Arc<WorkerStats>,
        health: Arc<Health>,
        stop: Arc<AtomicBool>,
        nclients: Arc<AtomicUsize>,
        handoff: handoff::Handoff,
    ) -> Result<Worker> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let servers = cfg
            .server_addrs
            .iter()
            .map(|&addr| ServerConn {
                addr,
                sock: None,
                connected: false,
                rbuf: reply_buf::ReplyBuf::default(),
                wbuf: Vec::new(),
                wpos: 0,
                inflight: VecDeque::new(),
                inbound: None,
                small_reads: false,
                suspect: false,
            })
            .collect();
        let (dist_generation, dist) = routing.current();
        let mut w = Worker {
            poll,
            listener: Some(listener),
            clients: Vec::new(),
            free: Vec::new(),
            next_gen: 1,
            servers,
            dist_generation,
            dist,
            routing,
            inval,
            stats,
            health,
            stop,
            nclients,
            max_clients: cfg.client_connections,
            timeout: cfg.timeout,
            keepalive: cfg.tcpkeepalive,
            dirty_servers: Vec::new(),
            dirty_clients: Vec::new(),
            scratch: Vec::new(),
            probe_waiters: Vec::new(),
            inbuf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            handoff,
            pipes: Vec::new(),
        };
        if cfg.preconnect {
            for i in 0..w.servers.len() {
                let _ = w.ensure_server(i);
            }
        }
        Ok(w)
    }

    fn run(&mut self) -> Result<()> {
        let mut events = Events::with_capacity(1024);
        let tick = self
            .timeout
            .map(|t| (t / 4).clamp(Duration::from_millis(1), Duration::from_millis(100)))
            .unwrap_or(Duration::from_millis(200));
        while !self.stop.load(Ordering::Relaxed) {
            match self.poll.poll(&mut events, Some(tick)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) if t >= CLIENT_BASE => {
                        let idx = (t - CLIENT_BASE) as u32;
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.client_read(idx, ev.is_read_closed() || ev.is_error());
                        }
                        if ev.is_writable() && self.client_has_unsent(idx) {
                            self.mark_client(idx);
                        }
                    }
                    Token(t) => {
                        let s = t - SERVER_BASE;
                        if ev.is_writable() || ev.is_error() {
                            self.server_writable(s);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.server_read(s, ev.is_read_closed() || ev.is_error());
                        }
                    }
                }
            }
            self.resume_probe_waiters();
            self.flush();
            if let Some(t) = self.timeout {
                self.check_timeouts(t);
            }
            self.health.tick();
            self.follow_routing();
            self.adopt();
            if self.hand_over_idle() {
                break;
            }
        }
        Ok(())
    }

    /// Routes by the newest distribution (after an ejection or a return);
    /// requests already sent finish where they went.
    fn follow_routing(&mut self) {
        if self.routing.generation() != self.dist_generation {
            (self.dist_generation, self.dist) = self.routing.current();
        }
    }

    fn flush(&mut self) {
        // servers first (their writes may fail and produce client replies)
        while let Some(s) = self.dirty_servers.pop() {
            self.server_flush(s);
        }
        while let Some(c) = self.dirty_clients.pop() {
            self.client_flush(c);
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((sock, _)) => {
                    if self.max_clients > 0
                        && self.nclients.load(Ordering::Relaxed) >= self.max_clients
                    {
                        drop(sock);
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    if self.keepalive {
                        let _ = socket2::SockRef::from(&sock).set_keepalive(true);
                    }
                    if self.add_client(sock, Vec::new(), true).is_some() {
                        inc(&self.stats.client_connections_total, 1);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            }
        }
    }

    fn mark_client(&mut self, idx: u32) {
        if let Some(c) = self.clients[idx as usize].as_mut() {
            if !c.dirty {
                c.dirty = true;
                self.dirty_clients.push(idx);
            }
        }
    }

    fn close_client(&mut self, idx: u32) {
        if let Some(mut c) = self.clients[idx as usize].take() {
            let _ = self.poll.registry().deregister(&mut c.sock);
            self.free.push(idx);
            self.nclients.fetch_sub(1, Ordering::Relaxed);
            self.stats
                .client_connections
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether a client has reply bytes the socket did not take yet.
    fn client_has_unsent(&self, idx: u32) -> bool {
        self.clients[idx as usize]
            .as_ref()
            .is_some_and(|c| c.unsent() > 0)
    }

    /// Read what a client sent and dispatch every complete request in it.
    ///
    /// The sockets are edge-triggered, and a read that does not fill the
    /// buffer has taken all the socket had: more data raises a new event, so
    /// the read that would only say `WouldBlock` is skipped. Only an event
    /// that reported the peer's close (`drain`) is read until the end, as no
    /// event follows it.
    fn client_read(&mut self, idx: u32, drain: bool) {
        loop {
            let Some(c) = self.clients[idx as usize].as_mut() else {
                return;
            };
            if c.closing || c.dead {
                return;
            }
            if self.handoff.target.get().is_some() {
                return; // the client goes to another proxy once its replies are out
            }
            if c.slots.len() >= MAX_SLOTS || c.unsent() >= MAX_WBUF {
                c.paused = true;
                return; // resumed by client_flush
            }
            inc(&self.stats.socket_reads, 1);
            match c.sock.read(&mut self.inbuf[..]) {
                Ok(0) => {
                    c.dead = true;
                    self.mark_client(idx);
                    return;
                }
                Ok(n) => {
                    let full = n == self.inbuf.len();
                    if c.rbuf.is_empty() {
                        // the common case: whole requests, parsed where they were read
                        let inbuf = std::mem::take(&mut self.inbuf);
                        self.client_parse_from(idx, &inbuf[..n]);
                        self.inbuf = inbuf;
                    } else {
                        c.rbuf.extend_from_slice(&self.inbuf[..n]);
                        self.client_parse(idx);
                    }
                    if !full && !drain {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    inc(&self.stats.idle_reads, 1);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    c.dead = true;
                    self.mark_client(idx);
                    return;
                }
            }
        }
    }

    /// Frame and dispatch every complete request in the client's buffer.
    fn client_parse(&mut self, idx: u32) {
        let Some(c) = self.clients[idx as usize].as_mut() else {
            return;
        };
        let rbuf = std::mem::take(&mut c.rbuf);
        self.client_parse_from(idx, &rbuf);
    }

    /// Frame and dispatch every complete request in `buf`, as far as
    /// backpressure allows; what is left becomes the client's (empty)
    /// buffer.
    fn client_parse_from(&mut self, idx: u32, buf: &[u8]) {
        let Some(mut c) = self.clients[idx as usize].take() else {
            return;
        };
        // An ejection can come between a reply and the next request it
        // prompted, within one turn of the event loop.
        self.follow_routing();
        let probing = self.servers.iter().any(|sc| sc.suspect);
        let mut pos = 0;
        if c.first && !buf.is_empty() {
            c.first = false;
            if buf[0] == 0x80 {
                inc(&self.stats.binary_refused, 1);
                c.dead = true;
                pos = buf.len();
            }
        }
        while !c.closing && !c.dead && pos < buf.len() {
            if c.slots.len() >= MAX_SLOTS {
                c.paused = true;
                break;
            }
            let rest = &buf[pos..];
            match proto::parse_request(rest) {
                Parsed::Incomplete => break,
                Parsed::Bad { skip, reply, close } => {
                    inc(&self.stats.client_errors, 1);
                    if !reply.is_empty() {
                        push_local(&mut c, reply);
                    }
                    pos += skip;
                    if close {
                        c.closing = true;
                    }
                }
                Parsed::Request(r) if probing && self.waits_for_probe(&rest[..r.len], &r) => {
                    self.wait_for_probe(idx);
                    break;
                }
                Parsed::Meta(m)
                    if probing
                        && m.stored_key(&rest[..m.len])
                            .is_some_and(|k| self.probe_pending(self.dist.server_for_key(k))) =>
                {
                    self.wait_for_probe(idx);
                    break;
                }
                Parsed::Request(r) => {
                    self.dispatch(idx, &mut c, &rest[..r.len], &r);
                    pos += r.len;
                }
                Parsed::Meta(m) => {
                    self.dispatch_meta(idx, &mut c, &rest[..m.len], &m);
                    pos += m.len;
                }
            }
        }
        if !c.closing && !c.dead {
            // an incomplete request, or requests held back by backpressure
            c.rbuf.extend_from_slice(&buf[pos..]);
        }
        let deliver = c.slots.front().is_some_and(|s| s.done);
        self.clients[idx as usize] = Some(c);
        if deliver {
            self.mark_client(idx);
        }
    }

    fn dispatch(&mut self, idx: u32, c: &mut Client, req: &[u8], r: &proto::Request) {
        inc(&self.stats.requests, 1);
        let seq = c.head_seq + c.slots.len() as u64;
        match r.cmd {
            Cmd::Version => push_local(c, VERSION_REPLY),
            // weir has no verbosity of its own to set; the answer is memcached's.
            Cmd::Verbosity if r.noreply.is_none() => push_local(c, b"OK\r\n"),
            Cmd::Verbosity => {}
            Cmd::Quit => {
                let mut s = Slot::local(b"");
                s.close_after = true;
                c.slots.push_back(s);
                c.closing = true;
            }
            Cmd::Get | Cmd::Gets => {
                inc(&self.stats.get_keys, r.keys.len() as u64);
                let first = self.dist.server_for_key(&req[r.keys[0].0..r.keys[0].1]);
                let mut same = true;
                let mut owners = Vec::new();
                if r.keys.len() > 1 {
                    owners.reserve(r.keys.len());
                    owners.push(first);
                    for &(s, e) in &r.keys[1..] {
                        let o = self.dist.server_for_key(&req[s..e]);
                        same &= o == first;
                        owners.push(o);
                    }
                }
                if same {
                    c.slots.push_back(Slot::new(1));
                    self.send(
                        first,
                        req,
                        Pending::new(idx, c.gen, seq, RespKind::Retrieval),
                    );
                    return;
                }
                // split by server, keep key order within each
                let mut servers: Vec<usize> = Vec::new();
                let mut group = Vec::with_capacity(owners.len());
                for &o in &owners {
                    let g = match servers.iter().position(|&s| s == o) {
                        Some(g) => g,
                        None => {
                            servers.push(o);
                            servers.len() - 1
                        }
                    };
                    group.push(g as u16);
                }
                let verb: &[u8] = if r.cmd == Cmd::Gets { b"gets" } else { b"get" };
                let keys: Vec<Vec<u8>> = r.keys.iter().map(|&(s, e)| req[s..e].to_vec()).collect();
                let mut slot = Slot::new(servers.len() as u16);
                slot.split = Some(Box::new(Split {
                    vals: vec![None; keys.len()],
                    keys,
                    group: group.clone(),
                    buf: Vec::new(),
                    error: None,
                }));
                c.slots.push_back(slot);
                for (g, &srv) in servers.iter().enumerate() {
                    let mut line = std::mem::take(&mut self.scratch);
                    line.clear();
                    line.extend_from_slice(verb);
                    for (k, &(s, e)) in r.keys.iter().enumerate() {
                        if group[k] as usize == g {
                            line.push(b' ');
                            line.extend_from_slice(&req[s..e]);
                        }
                    }
                    line.extend_from_slice(b"\r\n");
                    let p = Pending::new(idx, c.gen, seq, RespKind::Retrieval).frag(g as u16);
                    self.send(srv, &line, p);
                    self.scratch = line;
                }
            }
            Cmd::FlushAll => {
                inc(&self.stats.writes, 1);
                if let Some(inv) = &self.inval {
                    inc(&self.stats.invalidations, 1);
                    if let Err(e) = inv.all() {
                        inc(&self.stats.invalidation_failures, 1);
                        if r.noreply.is_none() {
                            push_local_owned(
                                c,
                                format!("SERVER_ERROR cache invalidation failed: {e}\r\n"),
                            );
                        }
                        return;
                    }
                }
                let swallow = r.noreply.is_some();
                let line = strip_noreply(req, r);
                let n = self.servers.len();
                if !swallow {
                    let mut s = Slot::new(n as u16);
                    s.flush = true;
                    c.slots.push_back(s);
                }
                for srv in 0..n {
                    let p = Pending::new(idx, c.gen, seq, RespKind::Line).swallowed(swallow);
                    self.send(srv, &line, p);
                }
            }
            _ => {
                // single-key mutation
                inc(&self.stats.writes, 1);
                let key = &req[r.keys[0].0..r.keys[0].1];
                let srv = self.dist.server_for_key(key);
                let mut inval_key = None;
                if let Some(inv) = &self.inval {
                    inc(&self.stats.invalidations, 1);
                    if let Err(e) = inv.key(key) {
                        inc(&self.stats.invalidation_failures, 1);
                        if r.noreply.is_none() {
                            push_local_owned(
                                c,
                                format!("SERVER_ERROR cache invalidation failed: {e}\r\n"),
                            );
                        }
                        return;
                    }
                    inval_key = Some(key.to_vec().into_boxed_slice());
                }
                let swallow = r.noreply.is_some();
                if !swallow {
                    c.slots.push_back(Slot::new(1));
                }
                let p = Pending::new(idx, c.gen, seq, RespKind::Line)
                    .swallowed(swallow)
                    .invalidating(inval_key);
                if swallow {
                    self.send(srv, &strip_noreply(req, r), p);
                } else {
                    self.send(srv, req, p);
                }
            }
        }
    }

    fn ensure_server(&mut self, s: usize) -> io::Result<()> {
        let sc = &mut self.servers[s];
        if sc.sock.is_some() {
            return Ok(());
        }
        let mut sock = TcpStream::connect(sc.addr)?;
        let _ = sock.set_nodelay(true);
        self.poll.registry().register(
            &mut sock,
            Token(SERVER_BASE + s),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        sc.sock = Some(sock);
        sc.connected = false;
        sc.rbuf.clear();
        sc.wbuf.clear();
        sc.wpos = 0;
        sc.inbound = None;
        sc.small_reads = false;
        Ok(())
    }

    fn send(&mut self, s: usize, bytes: &[u8], p: Pending) {
        inc(&self.stats.server_requests[s], 1);
        if let Err(e) = self.ensure_server(s) {
            self.servers[s].inflight.push_back(p);
            self.fail_server(s, &errmsg(&e));
            return;
        }
        let sc = &mut self.servers[s];
        if sc.wbuf.len() == sc.wpos {
            self.dirty_servers.push(s);
        }
        sc.wbuf.extend_from_slice(bytes);
        sc.inflight.push_back(p);
    }

    fn server_writable(&mut self, s: usize) {
        let sc = &mut self.servers[s];
        let Some(sock) = sc.sock.as_ref() else {
            return;
        };
        if !sc.connected {
            match sock.take_error() {
                Ok(Some(e)) | Err(e) => {
                    let m = errmsg(&e);
                    self.fail_server(s, &m);
                    return;
                }
                Ok(None) => {}
            }
            match sock.peer_addr() {
                Ok(_) => {
                    sc.connected = true;
                    self.health.answered(s);
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => {
                    let m = errmsg(&e);
                    self.fail_server(s, &m);
                    return;
                }
            }
        }
        self.server_flush(s);
    }

    fn server_flush(&mut self, s: usize) {
        let sc = &mut self.servers[s];
        let Some(sock) = sc.sock.as_mut() else {
            return;
        };
        while sc.wpos < sc.wbuf.len() {
            inc(&self.stats.socket_writes, 1);
            match sock.write(&sc.wbuf[sc.wpos..]) {
                Ok(0) => break,
                Ok(n) => {
                    sc.connected = true;
                    sc.wpos += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let m = errmsg(&e);
                    self.fail_server(s, &m);
                    return;
                }
            }
        }
        if sc.wpos == sc.wbuf.len() {
            sc.wbuf.clear();
            sc.wpos = 0;
        }
    }

    /// Read a server's replies and hand each to its client; as
    /// `client_read`, a read that does not fill the buffer ends the turn
    /// unless the server closed (`drain`).
    fn server_read(&mut self, s: usize, drain: bool) {
        loop {
            if self.servers[s]
                .inbound
                .as_ref()
                .is_some_and(|i| i.filling())
            {
                match self.fill(s) {
                    splice::Fill::Done => {} // then read the rest of the reply
                    splice::Fill::Wait | splice::Fill::Failed => return,
                }
            }
            let sc = &mut self.servers[s];
            let Some(sock) = sc.sock.as_mut() else {
                return;
            };
            let chunk = if sc.small_reads {
                splice::HEADER_READ
            } else {
                READ_CHUNK
            };
            inc(&self.stats.socket_reads, 1);
            match sock.read(sc.rbuf.space(chunk)) {
                Ok(0) => {
                    self.fail_server(s, "Connection closed by server");
                    return;
                }
                Ok(n) => {
                    sc.connected = true;
                    sc.suspect = false;
                    sc.rbuf.filled(n);
                    self.health.answered(s);
                    let full = n == chunk;
                    // replies are framed where they were read
                    let mut rbuf = std::mem::take(&mut self.servers[s].rbuf);
                    let alive = self
                        .server_parse(s, rbuf.unparsed())
                        .map(|used| {
                            rbuf.consume(used);
                            self.servers[s].rbuf = rbuf;
                        })
                        .is_some();
                    if !alive {
                        return;
                    }
                    let splicing = self.servers[s]
                        .inbound
                        .as_ref()
                        .is_some_and(|i| i.filling());
                    if !full && !drain && !splicing {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    inc(&self.stats.idle_reads, 1);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let m = errmsg(&e);
                    self.fail_server(s, &m);
                    return;
                }
            }
        }
    }

    /// Match the complete replies at the start of `buf` to in-flight
    /// requests; how many bytes they took, or None if the connection died.
    fn server_parse(&mut self, s: usize, buf: &[u8]) -> Option<usize> {
        let mut pos = 0;
        let mut ok = true;
        loop {
            let Some((kind, no_splice)) = self.servers[s]
                .inflight
                .front()
                .map(|p| (p.kind, p.no_splice))
            else {
                if pos < buf.len() {
                    ok = false; // bytes nobody asked for
                }
                break;
            };
            if self.value_in_pipe(s) {
                match proto::parse_value_tail(&buf[pos..]) {
                    Ok(None) => break,
                    Ok(Some(r)) => {
                        self.finish_splice(s, &buf[pos..pos + r.len], r);
                        pos += r.len;
                        continue;
                    }
                    Err(proto::Garbled) => {
                        ok = false;
                        break;
                    }
                }
            }
            match proto::parse_response(&buf[pos..], kind) {
                Ok(None) => {
                    if kind == RespKind::Retrieval
                        && !no_splice
                        && self.start_splice(s, &buf[pos..])
                    {
                        pos = buf.len(); // the value's pipe holds them now
                    }
                    break;
                }
                Ok(Some(r)) => {
                    self.after_reply(s, kind, r.len);
                    let p = self.servers[s].inflight.pop_front().unwrap();
                    self.deliver(p, &buf[pos..pos + r.len], r);
                    pos += r.len;
                }
                Err(proto::Garbled) => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            self.fail_server(s, "Invalid response from server");
            return None;
        }
        Some(pos)
    }

    /// Hand one reply to its client slot.
    fn deliver(&mut self, p: Pending, bytes: &[u8], r: proto::Response) {
        if let (Some(k), Some(inv)) = (&p.inval_key, &self.inval) {
            if inv.key(k).is_err() {
                inc(&self.stats.invalidation_failures, 1);
            }
        }
        if r.error && bytes.starts_with(b"SERVER_ERROR") {
            inc(&self.stats.server_errors, 1);
        }
        if !r.error {
            inc(&self.stats.get_hits, r.values as u64);
        }
        let bytes = match p.kind {
            RespKind::Meta(m) => crate::meta::reply::shown(m, bytes),
            _ => bytes,
        };
        if p.swallow {
            return;
        }
        let Some(c) = self
            .clients
            .get_mut(p.client as usize)
            .and_then(|c| c.as_mut())
        else {
            return;
        };
        if c.gen != p.gen || p.seq < c.head_seq {
            return;
        }
        let i = (p.seq - c.head_seq) as usize;
        let head = i == 0;
        let Some(slot) = c.slots.get_mut(i) else {
            return;
        };
        if let Some(sp) = slot.split.as_mut() {
            if r.error {
                sp.error.get_or_insert_with(|| bytes.to_vec());
            } else {
                let body = &bytes[..bytes.len() - 5]; // without END\r\n
                for ((ks, ke), (bs, be)) in proto::value_blocks(body) {
                    let key = &body[ks..ke];
                    if let Some(k) = (0..sp.keys.len()).find(|&k| {
                        sp.group[k] == p.frag && sp.vals[k].is_none() && sp.keys[k] == key
                    }) {
                        let start = sp.buf.len();
                        sp.buf.extend_from_slice(&body[bs..be]);
                        sp.vals[k] = Some((start, sp.buf.len()));
                    }
                }
            }
            slot.frags -= 1;
            if slot.frags == 0 {
                let sp = slot.split.take().unwrap();
                slot.resp = match sp.error {
                    Some(e) => e,
                    None => {
                        let mut out = Vec::with_capacity(sp.buf.len() + 5);
                        for (s, e) in sp.vals.iter().flatten() {
                            out.extend_from_slice(&sp.buf[*s..*e]);
                        }
                        out.extend_from_slice(b"END\r\n");
                        out
                    }
                };
                slot.done = true;
            }
        } else if slot.flush {
            let ok = bytes == b"OK\r\n";
            if !ok && slot.resp.is_empty() {
                slot.resp = bytes.to_vec();
            }
            slot.frags -= 1;
            if slot.frags == 0 {
                if slot.resp.is_empty() {
                    slot.resp = b"OK\r\n".to_vec();
                }
                slot.done = true;
            }
        } else if head {
            // the common case: straight into the client's write buffer
            c.wbuf.extend_from_slice(bytes);
            c.slots.pop_front();
            c.head_seq += 1;
        } else {
            slot.resp.extend_from_slice(bytes);
            slot.frags = 0;
            slot.done = true;
        }
        if head || c.slots.front().is_some_and(|s| s.done) {
            let idx = p.client;
            self.mark_client(idx);
        }
    }

    /// Fail every request in flight on server `s` with `SERVER_ERROR msg`
    /// and drop the connection (it is re-opened by the next request).
    fn fail_server(&mut self, s: usize, msg: &str) {
        self.health.failed(s, msg);
        let sc = &mut self.servers[s];
        sc.suspect = self.health.ejects();
        if let Some(mut sock) = sc.sock.take() {
            let _ = self.poll.registry().deregister(&mut sock);
        }
        sc.connected = false;
        sc.rbuf.clear();
        sc.wbuf.clear();
        sc.wpos = 0;
        // a value half in its pipe never reaches the client: it gets the error
        sc.inbound = None;
        sc.small_reads = false;
        let pend: Vec<Pending> = sc.inflight.drain(..).collect();
        let reply = format!("SERVER_ERROR {msg}\r\n");
        for p in pend {
            let r = proto::Response {
                len: reply.len(),
                values: 0,
                error: true,
            };
            self.deliver(p, reply.as_bytes(), r);
        }
    }

    /// Whether a request must wait: one of its servers has a probe on the
    /// way (`ServerConn::suspect`).
    fn waits_for_probe(&self, req: &[u8], r: &proto::Request) -> bool {
        match r.cmd {
            Cmd::FlushAll => (0..self.servers.len()).any(|s| self.probe_pending(s)),
            _ => r
                .keys
                .iter()
                .any(|&(s, e)| self.probe_pending(self.dist.server_for_key(&req[s..e]))),
        }
    }

    fn probe_pending(&self, s: usize) -> bool {
        let sc = &self.servers[s];
        sc.suspect && !sc.inflight.is_empty()
    }

    fn wait_for_probe(&mut self, idx: u32) {
        if !self.probe_waiters.contains(&idx) {
            self.probe_waiters.push(idx);
        }
    }

    /// Parses again what the clients waiting for a probe sent: once the
    /// probe's reply came their requests go to the server; once it failed the next
    /// one probes, or, with the server ejected, they go to the live ones.
    fn resume_probe_waiters(&mut self) {
        for idx in std::mem::take(&mut self.probe_waiters) {
            self.client_parse(idx);
        }
    }

    fn check_timeouts(&mut self, t: Duration) {
        let now = Instant::now();
        for s in 0..self.servers.len() {
            if self.servers[s]
                .inflight
                .front()
                .is_some_and(|p| now.duration_since(p.sent) > t)
            {
                let n = self.servers[s].inflight.len() as u64;
                inc(&self.stats.timeouts, n);
                self.fail_server(s, "Connection timed out");
            }
        }
        if !self.dirty_clients.is_empty() {
            self.flush();
        }
    }

    fn client_flush(&mut self, idx: u32) {
        let Some(c) = self.clients.get_mut(idx as usize).and_then(|c| c.as_mut()) else {
            return;
        };
        c.dirty = false;
        // move finished slots, in order, into the write buffer
        let mut close_now = false;
        while c.slots.front().is_some_and(|s| s.done) {
            let s = c.slots.pop_front().unwrap();
            c.head_seq += 1;
            if let Some(mut o) = s.pipe {
                o.at += c.wbuf.len();
                c.outbound.push_back(*o);
            }
            c.wbuf.extend_from_slice(&s.resp);
            if s.close_after {
                close_now = true;
                break;
            }
        }
        loop {
            // the bytes before the next piped value (all of them without one)
            let end = c.outbound.front().map_or(c.wbuf.len(), |o| o.at);
            if c.wpos < end {
                inc(&self.stats.socket_writes, 1);
                match c.sock.write(&c.wbuf[c.wpos..end]) {
                    Ok(0) => break,
                    Ok(n) => c.wpos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        c.dead = true;
                        break;
                    }
                }
                continue;
            }
            if c.outbound.is_empty() {
                break;
            }
            match splice::drain_outbound(c, &mut self.pipes, &self.stats) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    c.dead = true;
                    break;
                }
            }
        }
        let written = if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            std::mem::take(&mut c.wpos)
        } else if c.wpos > (1 << 20) {
            c.wbuf.drain(..c.wpos);
            std::mem::take(&mut c.wpos)
        } else {
            0
        };
        for o in c.outbound.iter_mut() {
            o.at -= written;
        }
        let drained = c.unsent() == 0;
        if c.dead || (close_now && drained) || (c.closing && drained && c.slots.is_empty()) {
            self.close_client(idx);
            return;
        }
        // resume a client paused by backpressure: parse what it sent, and
        // read what came meanwhile (to the end, as its events were missed)
        if c.paused && c.slots.len() < MAX_SLOTS && c.unsent() < MAX_WBUF {
            c.paused = false;
            if !c.rbuf.is_empty() {
                self.client_parse(idx);
            }
            self.client_read(idx, true);
        }
    }
}

fn push_local(c: &mut Client, reply: &[u8]) {
    c.slots.push_back(Slot::local(reply));
}

fn push_local_owned(c: &mut Client, reply: String) {
    c.slots.push_back(Slot {
        done: true,
        resp: reply.into_bytes(),
        ..Slot::new(0)
    });
}

/// The request without its ` noreply` token.
fn strip_noreply(req: &[u8], r: &proto::Request) -> Vec<u8> {
    match r.noreply {
        None => req.to_vec(),
        Some((s, e)) => {
            let mut v = Vec::with_capacity(req.len());
            v.extend_from_slice(&req[..s]);
            v.extend_from_slice(&req[e..]);
            v
        }
    }
}
