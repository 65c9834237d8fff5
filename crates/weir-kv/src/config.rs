//! Configuration of `weir kv`: a nutcracker (twemproxy) YAML pool, or weir's
//! own TOML. Both become one [`KvConfig`]. Errors name `file:line: field`.
//!
//! nutcracker options (one pool; `--pool NAME` picks one from a file with
//! several):
//!
//! | option | weir |
//! |---|---|
//! | `listen` (host:port) | honoured; a unix socket path is refused |
//! | `hash`, `distribution`, `hash_tag` | honoured, bit for bit |
//! | `servers` (`host:port:weight [name]`) | honoured; unix sockets refused |
//! | `timeout` | honoured: a request without a reply in time gets `SERVER_ERROR Connection timed out` |
//! | `backlog`, `client_connections`, `preconnect`, `tcpkeepalive` | honoured |
//! | `server_connections` | accepted; weir keeps one pipelined connection per server per worker |
//! | `auto_eject_hosts`, `server_failure_limit`, `server_retry_timeout` | honoured: ejection and return as nutcracker's, the keys rehashed bit for bit |
//! | `eject_mode: rehash \| failover` (weir's own) | `failover` moves only an ejected server's keys (to the failover server, or the next live point of the ring) |
//! | `failover_server: host:port [name]` (weir's own) | the spare that serves an ejected server's keys in `failover` mode; not on the ring |
//! | `redis: true`, `redis_auth`, `redis_db` | refused: weir switches memcached only |
//! | `stats_listen`, `stats_port` style keys, anything else | refused as unknown (nutcracker refuses them too) |

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::health::{EjectMode, EjectPolicy};
use crate::route::{DistKind, Distribution, HashKind, Server};
use serde::Deserialize;
use toml::Spanned;

pub use weir_config::error::ConfigError;
use weir_config::error::{key_at, line_of};

/// How the XDP switch hands a UDP request to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpForward {
    /// Rewrite MACs only: every server holds the VIP (e.g. on `lo`) and
    /// answers from it.
    L2,
    /// Also rewrite the destination address and port to the server's; the
    /// server answers from its own address.
    L3,
}

impl std::str::FromStr for UdpForward {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "l2" => Ok(UdpForward::L2),
            "l3" => Ok(UdpForward::L3),
            _ => Err(format!("`{s}` is not l2 or l3")),
        }
    }
}

impl fmt::Display for UdpForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpForward::L2 => "l2",
            UdpForward::L3 => "l3",
        })
    }
}

/// The UDP path: the XDP memcached switch on these interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpConfig {
    pub interfaces: Vec<String>,
    /// `native` or `generic`.
    pub xdp_mode: String,
    /// UDP port the switch serves (default: the TCP listen port).
    pub port: u16,
    /// Only datagrams to this address are switched (None: any address).
    pub vip: Option<std::net::IpAddr>,
    pub forward: UdpForward,
    /// Next-hop MAC per server (index as in `servers`); None = ask the
    /// kernel's neighbour table (probing the server if it has no entry).
    pub macs: Vec<Option<[u8; 6]>>,
}

impl UdpConfig {
    /// The UDP path with defaults (what `--udp-interface` gives a YAML pool).
    pub fn new(interfaces: Vec<String>, port: u16, nservers: usize) -> UdpConfig {
        UdpConfig {
            interfaces,
            xdp_mode: "native".into(),
            port,
            vip: None,
            forward: UdpForward::L2,
            macs: vec![None; nservers],
        }
    }
}

/// The in-switch hot-key cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    pub enabled: bool,
    /// How many hot keys to keep.
    pub top_k: usize,
    /// How often the hot-key loop samples, refetches and expires.
    pub refresh: Duration,
    /// Values larger than this are never cached (at most 1024).
    pub max_value: usize,
    /// Entries of the cache map (at least `top_k`).
    pub entries: u32,
    /// A cached value is refetched (or dropped) after this; it bounds how
    /// long a write that bypassed the switch can go unseen. Zero: never.
    pub ttl: Duration,
    /// XDP samples one requested key in this many.
    pub sample_every: u32,
    /// A key is hot at this many (decayed) samples.
    pub threshold: u64,
    /// Sample counts halve every `window`.
    pub window: Duration,
    /// No value is fetched for a key within this long of a write to it.
    pub write_settle: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            top_k: 64,
            refresh: Duration::from_millis(200),
            max_value: 1024,
            entries: 4096,
            ttl: Duration::from_secs(10),
            sample_every: 16,
            threshold: 8,
            window: Duration::from_secs(1),
            write_settle: Duration::from_millis(50),
        }
    }
}

/// One pool, validated.
#[derive(Debug, Clone)]
pub struct KvConfig {
    pub file: PathBuf,
    pub pool: String,
    pub listen: SocketAddr,
    pub hash: HashKind,
    pub distribution: DistKind,
    pub hash_tag: Option<[u8; 2]>,
    pub timeout: Option<Duration>,
    pub backlog: i32,
    /// 0 = unlimited.
    pub client_connections: usize,
    pub preconnect: bool,
    pub tcpkeepalive: bool,
    /// `auto_eject_hosts` and how: off, nutcracker's rehash, or failover.
    pub eject: EjectPolicy,
    /// The ring's servers, then the failover server if there is one
    /// (`spare`): every per-server table (connections, health, counters,
    /// the XDP switch's server slots) covers both.
    pub servers: Vec<Server>,
    /// `servers[i]` resolved.
    pub server_addrs: Vec<SocketAddr>,
    /// Whether the last of `servers` is the pool's failover server: it
    /// serves the keys of ejected servers in `failover` mode and has no
    /// point on the ring.
    pub spare: bool,
    pub workers: usize,
    pub metrics: Option<SocketAddr>,
    pub udp: Option<UdpConfig>,
    pub cache: CacheConfig,
}

impl KvConfig {
    /// The key-to-server map of this pool.
    pub fn distribution(&self) -> Distribution {
        Distribution::build(self.distribution, self.hash, self.ring_servers())
            .expect("validated at load")
            .with_hash_tag(self.hash_tag)
    }

    /// The servers on the ring: all of `servers` but the failover server.
    pub fn ring_servers(&self) -> &[Server] {
        &self.servers[..self.servers.len() - usize::from(self.spare)]
    }

    /// The failover server's index in `servers`, if the pool has one.
    pub fn spare_index(&self) -> Option<usize> {
        self.spare.then(|| self.servers.len() - 1)
    }

    /// How the status and the log name server `i`: its name, or `host:port`.
    pub fn server_name(&self, i: usize) -> String {
        let s = &self.servers[i];
        s.name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", s.addr, s.port))
    }

    /// The first setting of this pool that `new` (the same pool, re-read)
    /// gives another value, by its configuration name; None if none does.
    pub fn change_to(&self, new: &KvConfig) -> Option<&'static str> {
        let changed = [
            ("listen", self.listen != new.listen),
            ("hash", self.hash != new.hash),
            ("distribution", self.distribution != new.distribution),
            ("hash_tag", self.hash_tag != new.hash_tag),
            ("timeout", self.timeout != new.timeout),
            ("backlog", self.backlog != new.backlog),
            (
                "client_connections",
                self.client_connections != new.client_connections,
            ),
            ("preconnect", self.preconnect != new.preconnect),
            ("tcpkeepalive", self.tcpkeepalive != new.tcpkeepalive),
            ("auto_eject_hosts", self.eject != new.eject),
            (
                "failover_server",
                self.spare != new.spare
                    || (self.spare
                        && (self.servers.last() != new.servers.last()
                            || self.server_addrs.last() != new.server_addrs.last())),
            ),
            (
                "servers",
                self.servers != new.servers || self.server_addrs != new.server_addrs,
            ),
            ("workers", self.workers != new.workers),
            ("udp", self.udp != new.udp),
            ("cache", self.cache != new.cache),
        ];
        changed.into_iter().find(|(_, c)| *c).map(|(name, _)| name)
    }

    /// A nutcracker YAML file; `pool` picks one of several pools.
    pub fn load_nutcracker(path: &Path, pool: Option<&str>) -> Result<KvConfig, ConfigError> {
        let src = read(path)?;
        parse_nutcracker(&path.display().to_string(), &src, pool).map(|mut c| {
            c.file = path.to_path_buf();
            c
        })
    }

    /// Every pool of a nutcracker YAML file, or only `pool`.
    pub fn load_nutcracker_pools(
        path: &Path,
        pool: Option<&str>,
    ) -> Result<Vec<KvConfig>, ConfigError> {
        let src = read(path)?;
        let mut cfgs = parse_nutcracker_pools(&path.display().to_string(), &src, pool)?;
        for c in &mut cfgs {
            c.file = path.to_path_buf();
        }
        Ok(cfgs)
    }

    /// weir's TOML.
    pub fn load_toml(path: &Path) -> Result<KvConfig, ConfigError> {
        let src = read(path)?;
        parse_toml(&path.display().to_string(), &src).map(|mut c| {
            c.file = path.to_path_buf();
            c
        })
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.display().to_string(),
        line: None,
        field: "(file)".into(),
        message: format!("cannot read: {e}"),
    })
}

fn defaults(file: &str, pool: &str, listen: SocketAddr) -> KvConfig {
    KvConfig {
        file: PathBuf::from(file),
        pool: pool.to_string(),
        listen,
        hash: HashKind::Fnv1a_64,
        distribution: DistKind::Ketama,
        hash_tag: None,
        timeout: None,
        backlog: 512,
        client_connections: 0,
        preconnect: false,
        tcpkeepalive: false,
        eject: EjectPolicy::default(),
        servers: Vec::new(),
        server_addrs: Vec::new(),
        spare: false,
        workers: 1,
        metrics: Some(SocketAddr::from(([127, 0, 0, 1], 9122))),
        udp: None,
        cache: CacheConfig::default(),
    }
}

struct Err_<'a> {
    file: &'a str,
}

impl Err_<'_> {
    fn at(&self, line: usize, field: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            line: (line > 0).then_some(line),
            field: field.to_string(),
            message: msg.into(),
        }
    }
}

/// The metrics endpoint's address: `ip:port`, or `off`, `0` or `""` for none.
pub fn parse_metrics(v: &str) -> Result<Option<SocketAddr>, String> {
    match v.trim() {
        "" | "0" | "off" => Ok(None),
        a => a
            .parse()
            .map(Some)
            .map_err(|_| format!("`{a}` is not ip:port; give e.g. 127.0.0.1:9122, or off")),
    }
}

/// Parse `host:port`.
fn parse_listen(v: &str) -> Result<SocketAddr, String> {
    if v.starts_with('/') {
        return Err("unix socket paths are not supported; give host:port".into());
    }
    v.to_socket_addrs()
        .map_err(|e| format!("`{v}` is not host:port ({e})"))?
        .next()
        .ok_or_else(|| format!("`{v}` resolves to no address"))
}

/// Parse nutcracker's `host:port:weight [name]`.
pub fn parse_server(v: &str) -> Result<(Server, SocketAddr), String> {
    if v.starts_with('/') {
        return Err("unix socket servers are not supported".into());
    }
    let (hpw, name) = match v.rsplit_once(' ') {
        Some((a, n)) => (a.trim(), Some(n.trim().to_string())),
        None => (v, None),
    };
    let mut parts = hpw.rsplitn(3, ':');
    let (Some(w), Some(p), Some(h)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("`{v}` is not \"host:port:weight [name]\""));
    };
    let weight: u32 = w
        .parse()
        .ok()
        .filter(|w| *w > 0)
        .ok_or_else(|| format!("invalid weight `{w}` in `{v}` (a positive integer)"))?;
    let port: u16 = p
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port `{p}` in `{v}`"))?;
    let addr = resolve(h, port)?;
    let server = Server {
        addr: h.to_string(),
        port,
        weight,
        name: name.filter(|n| !n.is_empty()),
    };
    Ok((server, addr))
}

/// Parse weir's `failover_server: host:port [name]`. It has no weight: it
/// is not on the ring.
pub fn parse_spare(v: &str) -> Result<(Server, SocketAddr), String> {
    let (hp, name) = match v.trim().rsplit_once(' ') {
        Some((a, n)) => (a.trim(), Some(n.trim().to_string())),
        None => (v.trim(), None),
    };
    if hp.is_empty() || hp.starts_with('/') {
        return Err(format!(
            "`{v}` is not \"host:port [name]\" (unix sockets are not supported)"
        ));
    }
    if hp.matches(':').count() == 2 && parse_server(v).is_ok() {
        return Err(format!(
            "`{v}` has a weight; the failover server is not on the ring, give \"host:port [name]\""
        ));
    }
    let Some((h, p)) = hp.rsplit_once(':') else {
        return Err(format!("`{v}` is not \"host:port [name]\""));
    };
    let port: u16 = p
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port `{p}` in `{v}`"))?;
    spare_server(h, port, name)
}

/// The failover server at `host`:`port` named `name` (none when empty),
/// resolved: what both the YAML and the TOML reader give [`add_spare`]. Its
/// weight is 1 only for the server list's sake: it is not on the ring.
fn spare_server(
    host: &str,
    port: u16,
    name: Option<String>,
) -> Result<(Server, SocketAddr), String> {
    let addr = resolve(host, port)?;
    let server = Server {
        addr: host.to_string(),
        port,
        weight: 1,
        name: name.filter(|n| !n.is_empty()),
    };
    Ok((server, addr))
}

/// A server's address: `host` resolved, with `port`.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{host}`: {e}"))?
        .next()
        .ok_or_else(|| format!("`{host}` resolves to no address"))
}

/// The largest value the XDP cache answers with (WEIR_KV_MAX_VALUE).
pub const MAX_CACHED_VALUE: usize = 1024;

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("`{s}` is not a MAC address like 02:00:00:00:00:01"));
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .ok_or_else(|| format!("`{s}` is not a MAC address: bad byte `{p}`"))?;
    }
    Ok(mac)
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("`{v}` is not true or false")),
    }
}

fn parse_num(v: &str) -> Result<i64, String> {
    v.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("`{v}` is not a non-negative integer"))
}

fn parse_tag(v: &str) -> Result<[u8; 2], String> {
    let b = v.as_bytes();
    if b.len() != 2 {
        return Err(format!(
            "`{v}` must be exactly two characters, like \"{{}}\""
        ));
    }
    Ok([b[0], b[1]])
}

/// A scalar: strip a trailing comment and quotes.
fn scalar(raw: &str) -> String {
    let t = raw.trim();
    if let Some(q) = t.strip_prefix('"') {
        if let Some(end) = q.find('"') {
            return q[..end].to_string();
        }
    }
    if let Some(q) = t.strip_prefix('\'') {
        if let Some(end) = q.find('\'') {
            return q[..end].to_string();
        }
    }
    match t.find(" #") {
        Some(i) => t[..i].trim().to_string(),
        None => t.to_string(),
    }
}

struct YamlPool {
    name: String,
    line: usize,
    /// (line, key, value)
    keys: Vec<(usize, String, String)>,
    /// (line, server string)
    servers: Vec<(usize, String)>,
    servers_line: usize,
}

/// The subset of YAML nutcracker configurations use: top-level pool names,
/// `key: value` scalars, and the `servers:` block sequence.
fn parse_yaml_pools(e: &Err_, src: &str) -> Result<Vec<YamlPool>, ConfigError> {
    let mut pools: Vec<YamlPool> = Vec::new();
    let mut in_servers = false;
    for (i, raw) in src.lines().enumerate() {
        let line = i + 1;
        let no_comment = if raw.trim_start().starts_with('#') {
            ""
        } else {
            raw
        };
        if no_comment.trim().is_empty() || no_comment.trim() == "---" {
            continue;
        }
        if no_comment.contains('\t') {
            return Err(e.at(line, "(syntax)", "tabs are not allowed in YAML indentation"));
        }
        let indent = no_comment.len() - no_comment.trim_start().len();
        let text = no_comment.trim();
        if indent == 0 {
            let Some(name) = text.strip_suffix(':') else {
                return Err(e.at(line, "(syntax)", "expected a pool name followed by `:`"));
            };
            pools.push(YamlPool {
                name: scalar(name),
                line,
                keys: Vec::new(),
                servers: Vec::new(),
                servers_line: 0,
            });
            in_servers = false;
            continue;
        }
        let Some(pool) = pools.last_mut() else {
            return Err(e.at(line, "(syntax)", "indented line before any pool name"));
        };
        if let Some(item) = text
            .strip_prefix("- ")
            .or(if text == "-" { Some("") } else { None })
        {
            if !in_servers {
                return Err(e.at(line, "(syntax)", "a list item outside `servers:`"));
            }
            pool.servers.push((line, scalar(item)));
            continue;
        }
        let Some((k, v)) = text.split_once(':') else {
            return Err(e.at(line, "(syntax)", "expected `key: value`"));
        };
        let (k, v) = (k.trim().to_string(), v.trim());
        in_servers = false;
        if k == "servers" {
            if !v.is_empty() {
                return Err(e.at(
                    line,
                    &format!("{}.servers", pool.name),
                    "expected a block list of `- host:port:weight [name]` lines",
                ));
            }
            in_servers = true;
            pool.servers_line = line;
            continue;
        }
        pool.keys.push((line, k, scalar(v)));
    }
    Ok(pools)
}

/// Parse every pool of a nutcracker YAML configuration, in the file's
/// order, or only `pick`. Pool names and listen addresses are unique.
pub fn parse_nutcracker_pools(
    file: &str,
    src: &str,
    pick: Option<&str>,
) -> Result<Vec<KvConfig>, ConfigError> {
    let e = Err_ { file };
    let pools = parse_yaml_pools(&e, src)?;
    if pools.is_empty() {
        return Err(e.at(0, "(pool)", "the file defines no pool"));
    }
    for (i, p) in pools.iter().enumerate() {
        if let Some(first) = pools[..i].iter().find(|q| q.name == p.name) {
            return Err(e.at(
                p.line,
                &p.name,
                format!("is a duplicate pool name (first at line {})", first.line),
            ));
        }
    }
    let chosen: Vec<&YamlPool> = match pick {
        None => pools.iter().collect(),
        Some(n) => vec![pools.iter().find(|p| p.name == n).ok_or_else(|| {
            let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            e.at(
                0,
                "(pool)",
                format!("no pool named `{n}` (the file has {})", names.join(", ")),
            )
        })?],
    };
    let mut cfgs: Vec<KvConfig> = Vec::with_capacity(chosen.len());
    for pool in chosen {
        let cfg = pool_config(&e, pool)?;
        if let Some(other) = cfgs.iter().find(|c| c.listen == cfg.listen) {
            let line = pool
                .keys
                .iter()
                .find(|(_, k, _)| k == "listen")
                .map_or(pool.line, |(l, _, _)| *l);
            return Err(e.at(
                line,
                &format!("{}.listen", cfg.pool),
                format!(
                    "{} is pool `{}`'s listen address too; give each pool its own",
                    cfg.listen, other.pool
                ),
            ));
        }
        cfgs.push(cfg);
    }
    Ok(cfgs)
}

/// Parse one pool of a nutcracker YAML configuration: the only one, or
/// `pick`.
pub fn parse_nutcracker(
    file: &str,
    src: &str,
    pick: Option<&str>,
) -> Result<KvConfig, ConfigError> {
    let e = Err_ { file };
    let pools = parse_yaml_pools(&e, src)?;
    let pool = match (pick, pools.len()) {
        (_, 0) => return Err(e.at(0, "(pool)", "the file defines no pool")),
        (None, 1) => &pools[0],
        (None, _) => {
            let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(e.at(
                pools[1].line,
                "(pool)",
                format!(
                    "the file defines {} pools ({}); choose one with --pool NAME",
                    pools.len(),
                    names.join(", ")
                ),
            ));
        }
        (Some(n), _) => pools
            .iter()
            .find(|p| p.name == n)
            .ok_or_else(|| e.at(0, "(pool)", format!("no pool named `{n}`")))?,
    };
    pool_config(&e, pool)
}

/// One pool of a YAML file, validated.
fn pool_config(e: &Err_, pool: &YamlPool) -> Result<KvConfig, ConfigError> {
    let file = e.file;
    let p = &pool.name;
    let mut cfg = defaults(file, p, SocketAddr::from(([127, 0, 0, 1], 22121)));
    let mut have_listen = false;
    let mut auto_eject = false;
    let mut eject_mode: Option<(usize, EjectMode)> = None;
    let mut spare: Option<(usize, Server, SocketAddr)> = None;
    let mut seen = std::collections::HashSet::new();
    for (line, key, val) in &pool.keys {
        let line = *line;
        let field = format!("{p}.{key}");
        let bad = |m: String| e.at(line, &field, m);
        if !seen.insert(key.as_str()) {
            return Err(bad("is a duplicate".into()));
        }
        match key.as_str() {
            "listen" => {
                cfg.listen = parse_listen(val).map_err(bad)?;
                have_listen = true;
            }
            "hash" => cfg.hash = val.parse().map_err(bad)?,
            "distribution" => cfg.distribution = val.parse().map_err(bad)?,
            "hash_tag" => cfg.hash_tag = Some(parse_tag(val).map_err(bad)?),
            "timeout" => {
                let ms = parse_num(val).map_err(bad)?;
                cfg.timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
            }
            "backlog" => cfg.backlog = parse_num(val).map_err(bad)?.min(65535) as i32,
            "client_connections" => cfg.client_connections = parse_num(val).map_err(bad)? as usize,
            "preconnect" => cfg.preconnect = parse_bool(val).map_err(bad)?,
            "tcpkeepalive" => cfg.tcpkeepalive = parse_bool(val).map_err(bad)?,
            "server_connections" => {
                let n = parse_num(val).map_err(bad)?;
                if n == 0 {
                    return Err(bad("must be at least 1".into()));
                }
            }
            "server_retry_timeout" => {
                cfg.eject.retry = Duration::from_millis(parse_num(val).map_err(bad)? as u64);
            }
            "server_failure_limit" => {
                cfg.eject.failure_limit = parse_num(val).map_err(bad)?.min(u32::MAX as i64) as u32;
            }
            "auto_eject_hosts" => auto_eject = parse_bool(val).map_err(bad)?,
            "eject_mode" => eject_mode = Some((line, val.parse().map_err(bad)?)),
            "failover_server" => {
                let (server, addr) = parse_spare(val).map_err(bad)?;
                spare = Some((line, server, addr));
            }
            "redis" => {
                if parse_bool(val).map_err(bad)? {
                    return Err(bad(
                        "true is not supported: weir kv switches the memcached protocol only"
                            .into(),
                    ));
                }
            }
            "redis_auth" | "redis_db" => {
                return Err(bad(
                    "is a redis option; weir kv switches the memcached protocol only".into(),
                ))
            }
            _ => return Err(bad("is unknown (nutcracker would refuse it too)".into())),
        }
    }
    if !have_listen {
        return Err(e.at(pool.line, &format!("{p}.listen"), "is required"));
    }
    cfg.eject.mode = eject_mode_of(e, auto_eject, eject_mode, &format!("{p}.eject_mode"))?;
    if pool.servers.is_empty() {
        return Err(e.at(
            pool.servers_line.max(pool.line),
            &format!("{p}.servers"),
            "at least one server is required",
        ));
    }
    for (line, s) in &pool.servers {
        let (server, addr) =
            parse_server(s).map_err(|m| e.at(*line, &format!("{p}.servers"), m))?;
        cfg.servers.push(server);
        cfg.server_addrs.push(addr);
    }
    if let Some((line, server, addr)) = spare {
        add_spare(
            e,
            &mut cfg,
            line,
            &format!("{p}.failover_server"),
            server,
            addr,
        )?;
    }
    finish(e, cfg, pool.servers_line)
}

/// Appends the failover server after the ring's servers: only in `failover`
/// mode, and never one of the ring's servers (by address or by name).
fn add_spare(
    e: &Err_,
    cfg: &mut KvConfig,
    line: usize,
    field: &str,
    server: Server,
    addr: SocketAddr,
) -> Result<(), ConfigError> {
    if cfg.eject.mode != EjectMode::Failover {
        return Err(e.at(
            line,
            field,
            "serves ejected servers' keys in weir's failover mode only; set \
             auto_eject_hosts to true and eject_mode to failover, or remove it",
        ));
    }
    let name = server
        .name
        .clone()
        .unwrap_or_else(|| format!("{}:{}", server.addr, server.port));
    for (i, ring) in cfg.servers.iter().enumerate() {
        let ring_name = ring
            .name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", ring.addr, ring.port));
        if cfg.server_addrs[i] == addr {
            return Err(e.at(
                line,
                field,
                format!(
                    "{addr} is the ring's server `{ring_name}`; the failover server must be \
                     another one (it holds no keys of its own)"
                ),
            ));
        }
        if ring_name == name {
            return Err(e.at(
                line,
                field,
                format!("`{name}` is the name of a server on the ring; give it another name"),
            ));
        }
    }
    cfg.servers.push(server);
    cfg.server_addrs.push(addr);
    cfg.spare = true;
    Ok(())
}

/// The ejection mode of `auto_eject_hosts` and weir's `eject_mode` (which
/// needs ejection on).
fn eject_mode_of(
    e: &Err_,
    auto_eject: bool,
    mode: Option<(usize, EjectMode)>,
    field: &str,
) -> Result<EjectMode, ConfigError> {
    match (auto_eject, mode) {
        (false, None) => Ok(EjectMode::Off),
        (false, Some((line, _))) => Err(e.at(
            line,
            field,
            "chooses how servers are ejected; set auto_eject_hosts to true as well",
        )),
        (true, None) => Ok(EjectMode::Rehash),
        (true, Some((_, m))) => Ok(m),
    }
}

fn finish(e: &Err_, cfg: KvConfig, servers_line: usize) -> Result<KvConfig, ConfigError> {
    Distribution::build(cfg.distribution, cfg.hash, cfg.ring_servers())
        .map_err(|m| e.at(servers_line, "servers", m.0))?;
    for (i, a) in cfg.server_addrs.iter().enumerate() {
        if cfg.server_addrs[..i].contains(a) {
            return Err(e.at(servers_line, "servers", format!("{a} is listed twice")));
        }
    }
    Ok(cfg)
}

// ---------------------------------------------------------------- TOML

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    pool: Spanned<TomlPool>,
    #[serde(default)]
    udp: Option<Spanned<TomlUdp>>,
    #[serde(default)]
    cache: Option<Spanned<TomlCache>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPool {
    #[serde(default = "pool_name")]
    name: String,
    listen: Spanned<String>,
    #[serde(default)]
    hash: Option<Spanned<String>>,
    #[serde(default)]
    distribution: Option<Spanned<String>>,
    #[serde(default)]
    hash_tag: Option<Spanned<String>>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    backlog: Option<u32>,
    #[serde(default)]
    client_connections: Option<usize>,
    #[serde(default)]
    preconnect: bool,
    #[serde(default)]
    tcpkeepalive: bool,
    #[serde(default)]
    auto_eject_hosts: bool,
    #[serde(default)]
    eject_mode: Option<Spanned<String>>,
    #[serde(default)]
    server_failure_limit: Option<u32>,
    #[serde(default)]
    server_retry_timeout_ms: Option<u64>,
    #[serde(default)]
    workers: Option<Spanned<usize>>,
    #[serde(default)]
    metrics: Option<Spanned<String>>,
    server: Spanned<Vec<Spanned<TomlServer>>>,
    #[serde(default)]
    failover_server: Option<Spanned<TomlSpare>>,
}

/// `[pool.failover_server]`: a server with no weight (it is not on the ring).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlSpare {
    address: String,
    #[serde(default = "default_port")]
    port: u16,
    #[serde(default)]
    name: Option<String>,
    /// Next-hop MAC for the UDP path.
    #[serde(default)]
    mac: Option<String>,
}

fn pool_name() -> String {
    "kv".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlServer {
    address: String,
    #[serde(default = "default_port")]
    port: u16,
    #[serde(default = "one")]
    weight: u32,
    #[serde(default)]
    name: Option<String>,
    /// Next-hop MAC for the UDP path.
    #[serde(default)]
    mac: Option<String>,
}

fn default_port() -> u16 {
    11211
}
fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlUdp {
    interfaces: Vec<String>,
    #[serde(default = "native")]
    xdp_mode: String,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    vip: Option<Spanned<String>>,
    #[serde(default)]
    forward: Option<Spanned<String>>,
}

fn native() -> String {
    "native".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlCache {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    top_k: Option<usize>,
    #[serde(default)]
    refresh_ms: Option<u64>,
    #[serde(default)]
    max_value: Option<Spanned<usize>>,
    #[serde(default)]
    entries: Option<Spanned<u32>>,
    #[serde(default)]
    ttl_ms: Option<u64>,
    #[serde(default)]
    sample_every: Option<Spanned<u32>>,
    #[serde(default)]
    threshold: Option<u64>,
    #[serde(default)]
    window_ms: Option<Spanned<u64>>,
    #[serde(default)]
    write_settle_ms: Option<u64>,
}

fn yes() -> bool {
    true
}

/// Parse weir's TOML (`[pool]`, `[[pool.server]]`, `[udp]`, `[cache]`).
pub fn parse_toml(file: &str, src: &str) -> Result<KvConfig, ConfigError> {
    let e = Err_ { file };
    let f: TomlFile = toml::from_str(src).map_err(|err| {
        let line = err.span().map(|s| line_of(src, s.start)).unwrap_or(0);
        e.at(line, &key_at(src, line), err.message().to_string())
    })?;
    let ln = |s: &std::ops::Range<usize>| line_of(src, s.start);
    let pspan = f.pool.span();
    let p = f.pool.into_inner();
    let listen = parse_listen(p.listen.get_ref())
        .map_err(|m| e.at(ln(&p.listen.span()), "pool.listen", m))?;
    let mut cfg = defaults(file, &p.name, listen);
    if let Some(h) = &p.hash {
        cfg.hash = h
            .get_ref()
            .parse()
            .map_err(|m| e.at(ln(&h.span()), "pool.hash", m))?;
    }
    if let Some(d) = &p.distribution {
        cfg.distribution = d
            .get_ref()
            .parse()
            .map_err(|m| e.at(ln(&d.span()), "pool.distribution", m))?;
    }
    if let Some(t) = &p.hash_tag {
        cfg.hash_tag =
            Some(parse_tag(t.get_ref()).map_err(|m| e.at(ln(&t.span()), "pool.hash_tag", m))?);
    }
    cfg.timeout = p.timeout_ms.filter(|t| *t > 0).map(Duration::from_millis);
    if let Some(b) = p.backlog {
        cfg.backlog = b.min(65535) as i32;
    }
    cfg.client_connections = p.client_connections.unwrap_or(0);
    cfg.preconnect = p.preconnect;
    cfg.tcpkeepalive = p.tcpkeepalive;
    let mode = match &p.eject_mode {
        Some(m) => {
            let l = ln(&m.span());
            Some((
                l,
                m.get_ref()
                    .parse()
                    .map_err(|msg| e.at(l, "pool.eject_mode", msg))?,
            ))
        }
        None => None,
    };
    cfg.eject.mode = eject_mode_of(&e, p.auto_eject_hosts, mode, "pool.eject_mode")?;
    if let Some(n) = p.server_failure_limit {
        cfg.eject.failure_limit = n;
    }
    if let Some(ms) = p.server_retry_timeout_ms {
        cfg.eject.retry = Duration::from_millis(ms);
    }
    if let Some(w) = &p.workers {
        if *w.get_ref() == 0 || *w.get_ref() > 64 {
            return Err(e.at(ln(&w.span()), "pool.workers", "must be 1..=64"));
        }
        cfg.workers = *w.get_ref();
    }
    if let Some(m) = &p.metrics {
        cfg.metrics =
            parse_metrics(m.get_ref()).map_err(|msg| e.at(ln(&m.span()), "pool.metrics", msg))?;
    }
    let sline = ln(&p.server.span());
    if p.server.get_ref().is_empty() {
        return Err(e.at(ln(&pspan), "pool.server", "at least one server is required"));
    }
    let mut macs = Vec::new();
    for s in p.server.into_inner() {
        let l = ln(&s.span());
        let s = s.into_inner();
        macs.push(match &s.mac {
            None => None,
            Some(m) => Some(parse_mac(m).map_err(|msg| e.at(l, "pool.server.mac", msg))?),
        });
        if s.weight == 0 {
            return Err(e.at(l, "pool.server.weight", "must be at least 1"));
        }
        let addr = (s.address.as_str(), s.port)
            .to_socket_addrs()
            .map_err(|err| e.at(l, "pool.server.address", format!("cannot resolve: {err}")))?
            .next()
            .ok_or_else(|| e.at(l, "pool.server.address", "resolves to no address"))?;
        cfg.servers.push(Server {
            addr: s.address,
            port: s.port,
            weight: s.weight,
            name: s.name,
        });
        cfg.server_addrs.push(addr);
    }
    if let Some(s) = p.failover_server {
        let l = ln(&s.span());
        let s = s.into_inner();
        macs.push(match &s.mac {
            None => None,
            Some(m) => Some(parse_mac(m).map_err(|msg| e.at(l, "pool.failover_server.mac", msg))?),
        });
        let (server, addr) = spare_server(&s.address, s.port, s.name)
            .map_err(|msg| e.at(l, "pool.failover_server.address", msg))?;
        add_spare(&e, &mut cfg, l, "pool.failover_server", server, addr)?;
    }
    if let Some(u) = f.udp {
        let l = ln(&u.span());
        let u = u.into_inner();
        if u.interfaces.is_empty() {
            return Err(e.at(l, "udp.interfaces", "name at least one interface"));
        }
        if u.xdp_mode != "native" && u.xdp_mode != "generic" {
            return Err(e.at(l, "udp.xdp_mode", "native or generic"));
        }
        let mut udp = UdpConfig::new(u.interfaces, u.port.unwrap_or(cfg.listen.port()), 0);
        udp.xdp_mode = u.xdp_mode;
        udp.macs = macs;
        if let Some(v) = &u.vip {
            udp.vip =
                Some(v.get_ref().parse().map_err(|_| {
                    e.at(ln(&v.span()), "udp.vip", "expected an IPv4 or IPv6 address")
                })?);
        }
        if let Some(f) = &u.forward {
            udp.forward = f
                .get_ref()
                .parse()
                .map_err(|m| e.at(ln(&f.span()), "udp.forward", m))?;
        }
        cfg.udp = Some(udp);
    } else if macs.iter().any(Option::is_some) {
        return Err(e.at(
            sline,
            "pool.server.mac",
            "is for the UDP path; configure [udp] too",
        ));
    }
    if let Some(c) = f.cache {
        let l = ln(&c.span());
        let c = c.into_inner();
        let d = CacheConfig::default();
        cfg.cache = CacheConfig {
            enabled: c.enabled,
            top_k: c.top_k.unwrap_or(d.top_k),
            refresh: c.refresh_ms.map(Duration::from_millis).unwrap_or(d.refresh),
            max_value: c.max_value.as_ref().map_or(d.max_value, |v| *v.get_ref()),
            entries: c.entries.as_ref().map_or(d.entries, |v| *v.get_ref()),
            ttl: c.ttl_ms.map(Duration::from_millis).unwrap_or(d.ttl),
            sample_every: c
                .sample_every
                .as_ref()
                .map_or(d.sample_every, |v| *v.get_ref()),
            threshold: c.threshold.unwrap_or(d.threshold).max(1),
            window: c
                .window_ms
                .as_ref()
                .map_or(d.window, |v| Duration::from_millis(*v.get_ref())),
            write_settle: c
                .write_settle_ms
                .map(Duration::from_millis)
                .unwrap_or(d.write_settle),
        };
        if cfg.cache.top_k == 0 {
            return Err(e.at(l, "cache.top_k", "must be at least 1"));
        }
        if cfg.cache.refresh.is_zero() {
            return Err(e.at(l, "cache.refresh_ms", "must be at least 1"));
        }
        if let Some(v) = &c.max_value {
            if *v.get_ref() == 0 || *v.get_ref() > MAX_CACHED_VALUE {
                return Err(e.at(
                    ln(&v.span()),
                    "cache.max_value",
                    format!("must be 1..={MAX_CACHED_VALUE} (the XDP reply holds at most that)"),
                ));
            }
        }
        if let Some(v) = &c.entries {
            if (*v.get_ref() as usize) < cfg.cache.top_k {
                return Err(e.at(ln(&v.span()), "cache.entries", "must be at least top_k"));
            }
        }
        if let Some(v) = &c.sample_every {
            if *v.get_ref() == 0 && cfg.cache.enabled {
                return Err(e.at(
                    ln(&v.span()),
                    "cache.sample_every",
                    "0 turns sampling off, and with it hot-key detection; set enabled = false instead",
                ));
            }
        }
        if let Some(v) = &c.window_ms {
            if *v.get_ref() == 0 {
                return Err(e.at(ln(&v.span()), "cache.window_ms", "must be at least 1"));
            }
        }
        if cfg.cache.enabled && cfg.udp.is_none() {
            return Err(e.at(
                l,
                "cache.enabled",
                "the hot-key cache lives in the XDP switch; configure [udp] too",
            ));
        }
    }
    finish(&e, cfg, sline)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NC: &str = "\
# a twemproxy pool
alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  hash_tag: \"{}\"
  distribution: ketama
  auto_eject_hosts: false
  redis: false
  timeout: 400
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:11211:1
   - 127.0.0.1:11212:2 server2
";

    #[test]
    fn nutcracker_pool_parses() {
        let c = parse_nutcracker("nc.yml", NC, None).unwrap();
        assert_eq!(c.pool, "alpha");
        assert_eq!(c.listen, "127.0.0.1:22121".parse().unwrap());
        assert_eq!(c.hash, HashKind::Fnv1a_64);
        assert_eq!(c.hash_tag, Some(*b"{}"));
        assert_eq!(c.timeout, Some(Duration::from_millis(400)));
        assert_eq!(c.servers.len(), 2);
        assert_eq!(c.servers[0].ketama_name(), "127.0.0.1");
        assert_eq!(c.servers[1].weight, 2);
        assert_eq!(c.servers[1].ketama_name(), "server2");
        assert_eq!(c.server_addrs[1], "127.0.0.1:11212".parse().unwrap());
    }

    /// The 1-based number of the last line of `src` containing `what`.
    fn last_line_with(src: &str, what: &str) -> usize {
        let lines: Vec<&str> = src.lines().collect();
        lines.iter().rposition(|l| l.contains(what)).unwrap() + 1
    }

    #[test]
    fn every_pool_of_a_file_in_order_unique_by_name_and_listen() {
        let two = format!(
            "{NC}beta:\n  listen: 127.0.0.1:22122\n  hash: md5\n  distribution: modula\n  servers:\n   - 127.0.0.1:11213:1\n"
        );
        let pools = parse_nutcracker_pools("nc.yml", &two, None).unwrap();
        let names: Vec<&str> = pools.iter().map(|c| c.pool.as_str()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        assert_eq!(pools[1].distribution, DistKind::Modula);
        let one = parse_nutcracker_pools("nc.yml", &two, Some("beta")).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].pool, "beta");
        let e = parse_nutcracker_pools("nc.yml", &two, Some("gamma")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nc.yml: (pool): no pool named `gamma` (the file has alpha, beta)"
        );
        let same_listen = two.replace("22122", "22121");
        let e = parse_nutcracker_pools("nc.yml", &same_listen, None).unwrap_err();
        let line = last_line_with(&same_listen, "22121");
        assert_eq!(
            e.to_string(),
            format!(
                "nc.yml:{line}: beta.listen: 127.0.0.1:22121 is pool `alpha`'s listen address \
                 too; give each pool its own"
            )
        );
        let same_name = two.replace("beta:", "alpha:");
        let e = parse_nutcracker_pools("nc.yml", &same_name, None).unwrap_err();
        let line = last_line_with(&same_name, "alpha:");
        assert_eq!(
            e.to_string(),
            format!("nc.yml:{line}: alpha: is a duplicate pool name (first at line 2)")
        );
    }

    #[test]
    fn a_reread_pool_names_what_changed() {
        let a = parse_nutcracker("nc.yml", NC, None).unwrap();
        assert_eq!(a.change_to(&a.clone()), None);
        let b = parse_nutcracker("nc.yml", &NC.replace(":11212:2", ":11214:2"), None).unwrap();
        assert_eq!(a.change_to(&b), Some("servers"));
        let c =
            parse_nutcracker("nc.yml", &NC.replace("timeout: 400", "timeout: 500"), None).unwrap();
        assert_eq!(a.change_to(&c), Some("timeout"));
    }

    fn nc_err(src: &str) -> ConfigError {
        parse_nutcracker("nc.yml", src, None).unwrap_err()
    }

    #[test]
    fn ejection_options_as_nutcracker_and_weir_name_them() {
        let c = parse_nutcracker("nc.yml", NC, None).unwrap();
        assert_eq!(c.eject.mode, EjectMode::Off);
        assert_eq!(c.eject.failure_limit, 1);
        assert_eq!(c.eject.retry, Duration::from_millis(2000));
        let on = NC.replace("auto_eject_hosts: false", "auto_eject_hosts: true");
        let c = parse_nutcracker("nc.yml", &on, None).unwrap();
        assert_eq!(c.eject.mode, EjectMode::Rehash);
        let failover = on.replace("  redis: false\n", "  eject_mode: failover\n");
        let c = parse_nutcracker("nc.yml", &failover, None).unwrap();
        assert_eq!(c.eject.mode, EjectMode::Failover);
        let e = nc_err(&failover.replace("failover", "sideways"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(8), "alpha.eject_mode"),
            "{e}"
        );
        let e = nc_err(&failover.replace("auto_eject_hosts: true", "auto_eject_hosts: false"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(8), "alpha.eject_mode"),
            "{e}"
        );
        assert!(e.message.contains("auto_eject_hosts"), "{e}");
        // nutcracker's defaults when the limits are not written
        let bare = on
            .replace("  server_retry_timeout: 2000\n", "")
            .replace("  server_failure_limit: 1\n", "");
        let c = parse_nutcracker("nc.yml", &bare, None).unwrap();
        assert_eq!(
            (c.eject.failure_limit, c.eject.retry),
            (2, Duration::from_secs(30))
        );
        let t = parse_toml(
            "kv.toml",
            &TOML.replace(
                "workers = 2",
                "workers = 2\nauto_eject_hosts = true\neject_mode = \"failover\"\nserver_failure_limit = 3\nserver_retry_timeout_ms = 500",
            ),
        )
        .unwrap();
        assert_eq!(
            (t.eject.mode, t.eject.failure_limit, t.eject.retry),
            (EjectMode::Failover, 3, Duration::from_millis(500))
        );
        let e = parse_toml(
            "kv.toml",
            &TOML.replace("workers = 2", "workers = 2\neject_mode = \"failover\""),
        )
        .unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(7), "pool.eject_mode"),
            "{e}"
        );
    }

    #[test]
    fn a_failover_server_is_off_the_ring_and_refused_with_its_line_when_bad() {
        let on = NC
            .replace("auto_eject_hosts: false", "auto_eject_hosts: true")
            .replace(
                "  redis: false\n",
                "  eject_mode: failover\n  failover_server: 127.0.0.1:11219 spare\n",
            );
        let c = parse_nutcracker("nc.yml", &on, None).unwrap();
        assert!(c.spare);
        assert_eq!((c.servers.len(), c.ring_servers().len()), (3, 2));
        assert_eq!(c.spare_index(), Some(2));
        assert_eq!(c.server_name(2), "spare");
        assert_eq!(c.server_addrs[2], "127.0.0.1:11219".parse().unwrap());
        // the ring is the one without the spare: same owners for every key
        let without = parse_nutcracker("nc.yml", NC, None).unwrap().distribution();
        assert_eq!(c.distribution().continuum(), without.continuum());
        let at = |src: &str| {
            let e = nc_err(src);
            (e.line, e.field.clone(), e.message)
        };
        let field = "alpha.failover_server".to_string();
        for (bad, says) in [
            ("127.0.0.1:11212 spare", "is the ring's server `server2`"),
            (
                "127.0.0.1:11219 server2",
                "is the name of a server on the ring",
            ),
            ("127.0.0.1:11219:1 spare", "has a weight"),
            ("127.0.0.1 spare", "is not \"host:port [name]\""),
            ("127.0.0.1:0 spare", "invalid port"),
            ("no-such-host.invalid:11211", "cannot resolve"),
        ] {
            let (line, f, msg) = at(&on.replace("127.0.0.1:11219 spare", bad));
            assert_eq!((line, &f), (Some(9), &field), "{bad}: {msg}");
            assert!(msg.contains(says), "{bad}: {msg}");
        }
        // only in failover mode
        let (line, f, msg) = at(&on.replace("  eject_mode: failover\n", ""));
        assert_eq!((line, f), (Some(8), field.clone()), "{msg}");
        assert!(msg.contains("eject_mode to failover"), "{msg}");
        let toml = TOML.replace(
            "workers = 2",
            "workers = 2\nauto_eject_hosts = true\neject_mode = \"failover\"",
        )
            + "\n[pool.failover_server]\naddress = \"127.0.0.1\"\nport = 11219\nname = \"spare\"\n";
        // [udp] and [cache] come before it in TOML, so the spare goes last
        let toml = toml.replace(
            "[udp]\ninterfaces = [\"eth0\"]\n\n[cache]\ntop_k = 16\n",
            "",
        );
        let c = parse_toml("kv.toml", &toml).unwrap();
        assert_eq!((c.spare, c.server_name(2)), (true, "spare".to_string()));
        let e = parse_toml("kv.toml", &toml.replace("port = 11219", "port = 11212")).unwrap_err();
        assert_eq!(e.field, "pool.failover_server", "{e}");
        assert!(e.message.contains("is the ring's server `b`"), "{e}");
        let e = parse_toml("kv.toml", &toml.replace("name = \"spare\"", "weight = 2")).unwrap_err();
        assert_eq!(e.field, "pool.failover_server.weight", "{e}");
        // a reload that changes only the spare names it
        let other = parse_nutcracker("nc.yml", &on.replace(":11219", ":11220"), None).unwrap();
        assert_eq!(c.change_to(&c.clone()), None);
        let first = parse_nutcracker("nc.yml", &on, None).unwrap();
        assert_eq!(first.change_to(&other), Some("failover_server"));
    }

    #[test]
    fn nutcracker_refusals_name_the_option_and_line() {
        let e = nc_err(&NC.replace("redis: false", "redis: true"));
        assert_eq!((e.line, e.field.as_str()), (Some(8), "alpha.redis"), "{e}");
        assert!(e.message.contains("memcached"), "{e}");
        let e = nc_err(&NC.replace("auto_eject_hosts: false", "auto_eject_hosts: maybe"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(7), "alpha.auto_eject_hosts")
        );
        let e = nc_err(&NC.replace("hash: fnv1a_64", "hash: sha1"));
        assert_eq!((e.line, e.field.as_str()), (Some(4), "alpha.hash"));
        let e = nc_err(&NC.replace("timeout: 400", "frobnicate: 1"));
        assert_eq!((e.line, e.field.as_str()), (Some(9), "alpha.frobnicate"));
        let e = nc_err(&NC.replace("127.0.0.1:11212:2", "127.0.0.1:11212:x"));
        assert_eq!((e.line, e.field.as_str()), (Some(14), "alpha.servers"));
        let e = nc_err(&NC.replace("  listen: 127.0.0.1:22121\n", ""));
        assert_eq!(e.field, "alpha.listen");
        let e = nc_err(&NC.replace("listen: 127.0.0.1:22121", "listen: /tmp/nc.sock"));
        assert!(e.message.contains("unix"), "{e}");
        let e = nc_err(&format!("{NC}beta:\n  listen: 127.0.0.1:1\n"));
        assert!(e.message.contains("--pool"), "{e}");
        let two =
            format!("{NC}beta:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11213:1\n");
        let c = parse_nutcracker("nc.yml", &two, Some("beta")).unwrap();
        assert_eq!(c.servers.len(), 1);
    }

    const TOML: &str = r#"
[pool]
listen = "127.0.0.1:22122"
hash = "md5"
distribution = "modula"
workers = 2

[[pool.server]]
address = "127.0.0.1"
port = 11211

[[pool.server]]
address = "127.0.0.1"
port = 11212
weight = 3
name = "b"

[udp]
interfaces = ["eth0"]

[cache]
top_k = 16
"#;

    #[test]
    fn toml_parses() {
        let c = parse_toml("kv.toml", TOML).unwrap();
        assert_eq!(c.hash, HashKind::Md5);
        assert_eq!(c.distribution, DistKind::Modula);
        assert_eq!(c.workers, 2);
        assert_eq!(c.servers[1].name.as_deref(), Some("b"));
        assert_eq!(c.udp.as_ref().unwrap().port, 22122);
        assert!(c.cache.enabled);
        assert_eq!(c.cache.top_k, 16);
    }

    #[test]
    fn toml_udp_and_cache_keys() {
        let src = TOML
            .replace(
                "interfaces = [\"eth0\"]\n",
                "interfaces = [\"eth0\"]\nvip = \"10.0.0.9\"\nforward = \"l3\"\n",
            )
            .replace(
                "name = \"b\"\n",
                "name = \"b\"\nmac = \"02:00:00:00:00:0b\"\n",
            )
            .replace(
                "top_k = 16\n",
                "top_k = 16\nentries = 64\nttl_ms = 0\nwrite_settle_ms = 20\n",
            );
        let c = parse_toml("kv.toml", &src).unwrap();
        let u = c.udp.as_ref().unwrap();
        assert_eq!(u.vip, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(u.forward, UdpForward::L3);
        assert_eq!(u.macs, vec![None, Some([2, 0, 0, 0, 0, 0x0b])]);
        assert_eq!(c.cache.entries, 64);
        assert!(c.cache.ttl.is_zero());
        assert_eq!(c.cache.write_settle, Duration::from_millis(20));
        for (bad, field) in [
            ("forward = \"l3\"", "udp.forward"),
            ("vip = \"10.0.0.9\"", "udp.vip"),
            ("mac = \"02:00:00:00:00:0b\"", "pool.server.mac"),
        ] {
            let e = parse_toml(
                "kv.toml",
                &src.replace(bad, &bad.replace('0', "x").replace("l3", "l4")),
            )
            .unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        let e = parse_toml("kv.toml", &src.replace("entries = 64", "entries = 4")).unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(26), "cache.entries"),
            "{e}"
        );
        let e = parse_toml(
            "kv.toml",
            &src.replace("top_k = 16", "top_k = 16\nmax_value = 4096"),
        )
        .unwrap_err();
        assert_eq!(e.field, "cache.max_value", "{e}");
    }

    #[test]
    fn metrics_address_or_off() {
        let with = |v: &str| {
            parse_toml(
                "kv.toml",
                &TOML.replace("workers = 2", &format!("workers = 2\nmetrics = \"{v}\"")),
            )
        };
        let default = parse_toml("kv.toml", TOML).unwrap().metrics;
        assert_eq!(default, Some("127.0.0.1:9122".parse().unwrap()));
        assert_eq!(
            with("127.0.0.1:9200").unwrap().metrics,
            Some("127.0.0.1:9200".parse().unwrap())
        );
        for off in ["off", "0", ""] {
            assert_eq!(with(off).unwrap().metrics, None, "{off:?}");
        }
        let e = with("9200").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(7), "pool.metrics"), "{e}");
        assert!(e.message.contains("or off"), "{e}");
    }

    #[test]
    fn toml_errors_name_line_and_field() {
        let e = parse_toml("kv.toml", &TOML.replace("\"md5\"", "\"sha1\"")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(4), "pool.hash"), "{e}");
        let e = parse_toml("kv.toml", &TOML.replace("weight = 3", "weight = 0")).unwrap_err();
        assert_eq!(e.field, "pool.server.weight", "{e}");
        let e = parse_toml("kv.toml", &TOML.replace("top_k", "topk")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (Some(22), "cache.topk"), "{e}");
        let e = parse_toml(
            "kv.toml",
            &TOML.replace("[udp]\ninterfaces = [\"eth0\"]\n", ""),
        )
        .unwrap_err();
        assert_eq!(e.field, "cache.enabled", "{e}");
    }
}
