//! Key distributions, as nutcracker (twemproxy 0.5) builds them.
//!
//! - **ketama**: each live server gets `floor(weight / total * 40 * nlive) * 4`
//!   points (160 for equal weights, computed in `float` as nutcracker does).
//!   Point group `i` of a server is the MD5 digest of `"<name>-<i>"`, read as
//!   four little-endian `u32`s. The continuum is sorted by point (stably, so
//!   equal points keep server order); a key goes to the first point `>=` its
//!   hash, wrapping to the first point.
//! - **modula**: one slot per unit of weight, servers in nutcracker's order;
//!   a key goes to slot `hash % slots`.
//!
//! nutcracker's order of servers is not the file's: it sorts them by name
//! (shorter names first, then bytewise, its `string_compare`) when it checks
//! for duplicate names, and builds its continuum in that order. weir does the
//! same, which matters for modula (and for ketama points that collide);
//! server indices returned here still refer to the caller's list. This was
//! found and is checked against the real nutcracker 0.5.0 binary.
//! - **random**: one slot per live server, a pseudo-random slot per request.
//!
//! The name a server hashes under is nutcracker's: the `name` written after
//! `host:port:weight` when there is one, otherwise `host` when the port is
//! 11211 (libmemcached compatibility) and `host:port` for any other port.
//! `host` is the string as written; it is never resolved.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::hash::{hash, md5, HashKind};

/// Points per server in a ketama continuum at equal weights.
pub const KETAMA_POINTS_PER_SERVER: u32 = 160;
/// The port nutcracker leaves out of a server's hashing name.
pub const KETAMA_DEFAULT_PORT: u16 = 11211;
/// nutcracker formats "name-i" into an 86-byte buffer; longer names would be
/// truncated there, so they are refused here.
pub const KETAMA_MAX_NAME: usize = 80;

/// The distributions nutcracker's `distribution:` option names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DistKind {
    Ketama,
    Modula,
    Random,
}

impl DistKind {
    pub fn name(self) -> &'static str {
        match self {
            DistKind::Ketama => "ketama",
            DistKind::Modula => "modula",
            DistKind::Random => "random",
        }
    }
}

impl fmt::Display for DistKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DistKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ketama" => Ok(DistKind::Ketama),
            "modula" => Ok(DistKind::Modula),
            "random" => Ok(DistKind::Random),
            _ => Err(format!(
                "unknown distribution `{s}` (one of: ketama, modula, random)"
            )),
        }
    }
}

impl serde::Serialize for DistKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for DistKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One memcached server of a pool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Server {
    /// Host as written in the configuration (an IP address or a name).
    pub addr: String,
    pub port: u16,
    /// At least 1.
    pub weight: u32,
    /// The optional name after `host:port:weight`; it replaces the address
    /// in ketama hashing, so servers can move without remapping keys.
    pub name: Option<String>,
}

impl Server {
    pub fn new(addr: impl Into<String>, port: u16, weight: u32) -> Server {
        Server {
            addr: addr.into(),
            port,
            weight,
            name: None,
        }
    }

    /// The string nutcracker hashes this server under.
    pub fn ketama_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None if self.port == KETAMA_DEFAULT_PORT => self.addr.clone(),
            None => format!("{}:{}", self.addr, self.port),
        }
    }
}

/// Why a distribution cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistError(pub String);

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DistError {}

/// A built distribution: which server owns which key.
#[derive(Debug)]
pub struct Distribution {
    dist: DistKind,
    hash: HashKind,
    nservers: usize,
    hash_tag: Option<[u8; 2]>,
    /// ketama: sorted (point, server index); modula/random: (slot, server index).
    continuum: Vec<(u32, u32)>,
    rng: AtomicU64,
}

impl Clone for Distribution {
    fn clone(&self) -> Self {
        Distribution {
            dist: self.dist,
            hash: self.hash,
            nservers: self.nservers,
            hash_tag: self.hash_tag,
            continuum: self.continuum.clone(),
            rng: AtomicU64::new(self.rng.load(Ordering::Relaxed)),
        }
    }
}

impl Distribution {
    /// Build over all servers (none ejected).
    pub fn build(
        dist: DistKind,
        hash: HashKind,
        servers: &[Server],
    ) -> Result<Distribution, DistError> {
        Self::build_live(dist, hash, servers, &vec![true; servers.len()])
    }

    /// Build over the servers whose `live` flag is set, as nutcracker does with
    /// `auto_eject_hosts` after ejecting the others; server indices still
    /// refer to `servers`.
    pub fn build_live(
        dist: DistKind,
        hash: HashKind,
        servers: &[Server],
        live: &[bool],
    ) -> Result<Distribution, DistError> {
        if servers.is_empty() {
            return Err(DistError("a pool needs at least one server".into()));
        }
        if live.len() != servers.len() {
            return Err(DistError("live flags do not match the servers".into()));
        }
        for (i, s) in servers.iter().enumerate() {
            if s.weight == 0 {
                return Err(DistError(format!(
                    "server {i} ({}:{}): weight must be at least 1",
                    s.addr, s.port
                )));
            }
            if s.ketama_name().len() > KETAMA_MAX_NAME {
                return Err(DistError(format!(
                    "server {i}: name `{}` is longer than {KETAMA_MAX_NAME} bytes",
                    s.ketama_name()
                )));
            }
        }
        let order = nutcracker_order(servers);
        for w in order.windows(2) {
            if servers[w[0]].ketama_name() == servers[w[1]].ketama_name() {
                return Err(DistError(format!(
                    "servers {} and {} have the same name `{}`",
                    w[0].min(w[1]),
                    w[0].max(w[1]),
                    servers[w[0]].ketama_name()
                )));
            }
        }
        let nlive = live.iter().filter(|l| **l).count() as u32;
        let total: u32 = servers
            .iter()
            .zip(live)
            .filter(|(_, l)| **l)
            .map(|(s, _)| s.weight)
            .sum();
        let mut continuum = Vec::new();
        match dist {
            DistKind::Ketama => {
                for &i in &order {
                    let s = &servers[i];
                    if !live[i] {
                        continue;
                    }
                    let points = ketama_points(s.weight, total, nlive);
                    let name = s.ketama_name();
                    for p in 0..points / 4 {
                        let d = md5(format!("{name}-{p}").as_bytes());
                        for x in 0..4 {
                            let v = u32::from_le_bytes([
                                d[4 * x],
                                d[4 * x + 1],
                                d[4 * x + 2],
                                d[4 * x + 3],
                            ]);
                            continuum.push((v, i as u32));
                        }
                    }
                }
                // stable: equal points keep server order
                continuum.sort_by_key(|&(v, _)| v);
            }
            DistKind::Modula => {
                for &i in &order {
                    if live[i] {
                        for _ in 0..servers[i].weight {
                            continuum.push((continuum.len() as u32, i as u32));
                        }
                    }
                }
            }
            DistKind::Random => {
                for &i in &order {
                    if live[i] {
                        continuum.push((continuum.len() as u32, i as u32));
                    }
                }
            }
        }
        if continuum.is_empty() {
            return Err(DistError("no live server has any point".into()));
        }
        Ok(Distribution {
            dist,
            hash,
            nservers: servers.len(),
            hash_tag: None,
            continuum,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        })
    }

    /// The same continuum with every point of a server whose `live` flag is
    /// clear handed to the owner of the next live point (wrapping): only the
    /// keys of those servers move, every other key keeps its owner. This is
    /// weir's `failover` ejection mode, not nutcracker's (which rebuilds the
    /// continuum over the live servers, see [`Distribution::build_live`]).
    /// With no live server at all the owners stay as they are.
    pub fn failover(&self, live: &[bool]) -> Distribution {
        self.failover_to(live, None)
    }

    /// [`Distribution::failover`] with a failover server: every point of a
    /// server whose `live` flag is clear goes to server `spare` (an index
    /// past the ring's servers, which has no point of its own) instead of
    /// the next live point. Without a spare (or with it down) it is
    /// `failover`. The ring's other points keep their owners either way.
    pub fn failover_to(&self, live: &[bool], spare: Option<usize>) -> Distribution {
        let mut d = self.clone();
        if let Some(spare) = spare {
            for p in &mut d.continuum {
                if !live.get(p.1 as usize).copied().unwrap_or(false) {
                    p.1 = spare as u32;
                }
            }
            return d;
        }
        let n = self.continuum.len();
        if !live.iter().any(|&l| l) {
            return d;
        }
        // Walk the ring backwards twice, carrying the nearest live owner
        // ahead of each point; the first lap only primes the carry.
        let mut next_live = None;
        for j in (0..2 * n).rev() {
            let i = j % n;
            let owner = self.continuum[i].1;
            if live.get(owner as usize).copied().unwrap_or(false) {
                next_live = Some(owner);
            } else if let (true, Some(t)) = (j < n, next_live) {
                d.continuum[i].1 = t;
            }
        }
        d
    }

    /// nutcracker's `hash_tag: "{}"`: hash only the part of a key between
    /// the first `tag[0]` and the next `tag[1]`, when that part is non-empty.
    pub fn with_hash_tag(mut self, tag: Option<[u8; 2]>) -> Distribution {
        self.hash_tag = tag;
        self
    }

    pub fn dist(&self) -> DistKind {
        self.dist
    }

    pub fn hash_kind(&self) -> HashKind {
        self.hash
    }

    pub fn hash_tag(&self) -> Option<[u8; 2]> {
        self.hash_tag
    }

    pub fn nservers(&self) -> usize {
        self.nservers
    }

    /// ketama: (point, server index) sorted by point, for a BPF array map.
    /// modula and random: (slot, server index), slot = position.
    pub fn continuum(&self) -> &[(u32, u32)] {
        &self.continuum
    }

    /// The part of `key` that is hashed (the hash tag's contents, or all).
    pub fn hashed_part<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        if let Some([open, close]) = self.hash_tag {
            if let Some(s) = key.iter().position(|&b| b == open) {
                if let Some(e) = key[s + 1..].iter().position(|&b| b == close) {
                    if e > 0 {
                        return &key[s + 1..s + 1 + e];
                    }
                }
            }
        }
        key
    }

    /// The hash of `key` as nutcracker's dispatch sees it (0 for an empty
    /// key; 0 for a one-server pool, which nutcracker does not hash).
    pub fn key_hash(&self, key: &[u8]) -> u32 {
        if self.nservers == 1 {
            return 0;
        }
        let k = self.hashed_part(key);
        if k.is_empty() {
            0
        } else {
            hash(self.hash, k)
        }
    }

    /// The index (into the servers given to `build`) of the server owning `key`.
    pub fn server_for_key(&self, key: &[u8]) -> usize {
        if self.nservers == 1 {
            // nutcracker does not hash for one server; its every point has
            // one owner (itself, or the failover server standing in).
            return self.continuum[0].1 as usize;
        }
        match self.dist {
            DistKind::Random => {
                let x = self
                    .rng
                    .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                    .wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                self.continuum[(z % self.continuum.len() as u64) as usize].1 as usize
            }
            _ => self.server_for_hash(self.key_hash(key)),
        }
    }

    /// The server for a precomputed hash (ketama and modula).
    pub fn server_for_hash(&self, h: u32) -> usize {
        match self.dist {
            DistKind::Ketama => {
                let i = self.continuum.partition_point(|&(v, _)| v < h);
                let i = if i == self.continuum.len() { 0 } else { i };
                self.continuum[i].1 as usize
            }
            DistKind::Modula | DistKind::Random => {
                self.continuum[(h % self.continuum.len() as u32) as usize].1 as usize
            }
        }
    }
}

/// Server indices in nutcracker's order: by name length, then name bytes.
pub fn nutcracker_order(servers: &[Server]) -> Vec<usize> {
    let names: Vec<String> = servers.iter().map(Server::ketama_name).collect();
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by(|&a, &b| {
        (names[a].len(), names[a].as_bytes()).cmp(&(names[b].len(), names[b].as_bytes()))
    });
    order
}

/// Points a server of `weight` gets, as nutcracker computes it in `float`.
fn ketama_points(weight: u32, total: u32, nlive: u32) -> u32 {
    let pct = weight as f32 / total as f32;
    let t = pct * KETAMA_POINTS_PER_SERVER as f32 / 4.0 * nlive as f32;
    // C: floorf((float)(t + 0.0000000001)), the addition done in double
    let t = (t as f64 + 0.0000000001) as f32;
    (t.floor() as u32) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Vec<Server> {
        (0..n)
            .map(|i| Server::new(format!("10.0.0.{}", i + 1), 11211, 1))
            .collect()
    }

    #[test]
    fn names_follow_nutcracker() {
        assert_eq!(
            Server::new("127.0.0.1", 11211, 1).ketama_name(),
            "127.0.0.1"
        );
        assert_eq!(
            Server::new("127.0.0.1", 11212, 1).ketama_name(),
            "127.0.0.1:11212"
        );
        let mut s = Server::new("127.0.0.1", 11212, 1);
        s.name = Some("server1".into());
        assert_eq!(s.ketama_name(), "server1");
    }

    #[test]
    fn ketama_points_and_order() {
        let d = Distribution::build(DistKind::Ketama, HashKind::Md5, &pool(3)).unwrap();
        let c = d.continuum();
        assert_eq!(c.len(), 3 * 160);
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0));
        for s in 0..3u32 {
            assert_eq!(c.iter().filter(|e| e.1 == s).count(), 160);
        }
        // the first group of server 0 is md5("10.0.0.1-0") as four LE words
        let dg = md5(b"10.0.0.1-0");
        let w0 = u32::from_le_bytes([dg[0], dg[1], dg[2], dg[3]]);
        assert!(c.contains(&(w0, 0)));
    }

    #[test]
    fn ketama_weights() {
        let mut s = pool(2);
        s[0].weight = 3;
        let d = Distribution::build(DistKind::Ketama, HashKind::Md5, &s).unwrap();
        let n0 = d.continuum().iter().filter(|e| e.1 == 0).count();
        let n1 = d.continuum().iter().filter(|e| e.1 == 1).count();
        // 0.75 * 40 * 2 = 60 groups -> 240 points; 0.25 * 80 = 20 -> 80
        assert_eq!((n0, n1), (240, 80));
        assert_eq!(ketama_points(1, 3, 3), 160);
        // 1/3 * 160 / 4 * 2 = 26.67 -> 26 groups
        assert_eq!(ketama_points(1, 3, 2), 104);
    }

    #[test]
    fn ketama_dispatch_is_first_point_at_or_above() {
        let d = Distribution::build(DistKind::Ketama, HashKind::Md5, &pool(4)).unwrap();
        let c = d.continuum();
        for &(v, s) in c.iter().step_by(37) {
            assert_eq!(d.server_for_hash(v) as u32, s);
        }
        // past the last point wraps to the first
        assert_eq!(d.server_for_hash(u32::MAX) as u32, {
            if c.last().unwrap().0 == u32::MAX {
                c.last().unwrap().1
            } else {
                c[0].1
            }
        });
        assert_eq!(d.server_for_hash(0) as u32, c[0].1);
    }

    #[test]
    fn ketama_moves_few_keys_when_a_server_goes() {
        let s = pool(4);
        let all = Distribution::build(DistKind::Ketama, HashKind::Fnv1a_64, &s).unwrap();
        let less = Distribution::build_live(
            DistKind::Ketama,
            HashKind::Fnv1a_64,
            &s,
            &[true, true, false, true],
        )
        .unwrap();
        for i in 0..2000 {
            let k = format!("key:{i}");
            let a = all.server_for_key(k.as_bytes());
            let b = less.server_for_key(k.as_bytes());
            assert_ne!(b, 2);
            if a != 2 {
                assert_eq!(a, b, "{k} moved although its server stayed");
            }
        }
    }

    #[test]
    fn failover_moves_only_the_keys_of_the_failed_server_to_the_next_live_point() {
        for kind in [DistKind::Ketama, DistKind::Modula] {
            let s = pool(4);
            let all = Distribution::build(kind, HashKind::Md5, &s).unwrap();
            let live = [true, false, true, false];
            let f = all.failover(&live);
            let c = all.continuum();
            let mut moved = 0;
            for i in 0..2000 {
                let k = format!("key:{i}");
                let a = all.server_for_key(k.as_bytes());
                let b = f.server_for_key(k.as_bytes());
                assert!(live[b], "{kind}: {k} went to failed server {b}");
                if live[a] {
                    assert_eq!(a, b, "{kind}: {k} moved although its server lives");
                } else {
                    moved += 1;
                    // the owner of the first live point from the key's own point on
                    let h = all.key_hash(k.as_bytes());
                    let start = match kind {
                        DistKind::Ketama => c.partition_point(|&(v, _)| v < h) % c.len(),
                        _ => (h % c.len() as u32) as usize,
                    };
                    let want = (0..c.len())
                        .map(|j| c[(start + j) % c.len()].1 as usize)
                        .find(|&o| live[o])
                        .unwrap();
                    assert_eq!(b, want, "{kind}: {k}");
                }
            }
            assert!(moved > 0, "{kind}: no key of a failed server in the sample");
            // nothing live: owners are kept (the servers' own errors answer)
            let none = all.failover(&[false; 4]);
            assert_eq!(none.continuum(), all.continuum());
        }
    }

    #[test]
    fn failover_to_a_spare_moves_only_the_failed_servers_keys_onto_it() {
        for kind in [DistKind::Ketama, DistKind::Modula] {
            let s = pool(3);
            let all = Distribution::build(kind, HashKind::Md5, &s).unwrap();
            // server 3 is the spare: no point of its own
            let f = all.failover_to(&[true, false, true, true], Some(3));
            let mut moved = 0;
            for i in 0..2000 {
                let k = format!("key:{i}");
                let (a, b) = (
                    all.server_for_key(k.as_bytes()),
                    f.server_for_key(k.as_bytes()),
                );
                if a == 1 {
                    moved += 1;
                    assert_eq!(b, 3, "{kind}: {k} of the failed server not on the spare");
                } else {
                    assert_eq!(a, b, "{kind}: {k} moved although its server lives");
                }
            }
            assert!(
                moved > 0,
                "{kind}: no key of the failed server in the sample"
            );
            // every ring server down: the spare serves all
            let alone = all.failover_to(&[false, false, false, true], Some(3));
            assert!(alone.continuum().iter().all(|p| p.1 == 3), "{kind}");
        }
        // a one-server ring: nutcracker does not hash, the spare takes it all
        let one = Distribution::build(DistKind::Ketama, HashKind::Md5, &pool(1)).unwrap();
        let f = one.failover_to(&[false, true], Some(1));
        assert_eq!((one.server_for_key(b"k"), f.server_for_key(b"k")), (0, 1));
    }

    #[test]
    fn modula_slots_by_weight_in_nutcracker_order() {
        let mut s = pool(3);
        s[1].weight = 2;
        s[1].name = Some("beta".into());
        s[2].addr = "10.0.0.10".into();
        let d = Distribution::build(DistKind::Modula, HashKind::Fnv1a_64, &s).unwrap();
        let owners: Vec<u32> = d.continuum().iter().map(|e| e.1).collect();
        // "beta" (4 bytes) < "10.0.0.1" (8) < "10.0.0.10" (9)
        assert_eq!(owners, vec![1, 1, 0, 2]);
        let k = b"hello";
        let h = HashKind::Fnv1a_64;
        assert_eq!(
            d.server_for_key(k),
            owners[(super::super::hash::hash(h, k) % 4) as usize] as usize
        );
        s[0].name = Some("beta".into());
        assert!(Distribution::build(DistKind::Modula, HashKind::Md5, &s).is_err());
    }

    #[test]
    fn one_server_and_empty_key() {
        let d = Distribution::build(DistKind::Ketama, HashKind::Md5, &pool(1)).unwrap();
        assert_eq!(d.server_for_key(b"anything"), 0);
        let d = Distribution::build(DistKind::Modula, HashKind::Md5, &pool(3)).unwrap();
        assert_eq!(d.key_hash(b""), 0);
        assert_eq!(d.server_for_key(b""), 0);
    }

    #[test]
    fn hash_tag() {
        let d = Distribution::build(DistKind::Ketama, HashKind::Fnv1a_64, &pool(5))
            .unwrap()
            .with_hash_tag(Some(*b"{}"));
        assert_eq!(d.hashed_part(b"user:{42}:name"), b"42");
        assert_eq!(d.hashed_part(b"user:{}:name"), b"user:{}:name");
        assert_eq!(d.hashed_part(b"user:{42"), b"user:{42");
        assert_eq!(d.server_for_key(b"a{42}b"), d.server_for_key(b"zzz{42}yyy"));
    }

    #[test]
    fn errors() {
        assert!(Distribution::build(DistKind::Ketama, HashKind::Md5, &[]).is_err());
        let mut s = pool(2);
        s[0].weight = 0;
        assert!(Distribution::build(DistKind::Ketama, HashKind::Md5, &s).is_err());
        assert!("maglev".parse::<DistKind>().is_err());
    }

    #[test]
    fn random_covers_all_live() {
        let d = Distribution::build(DistKind::Random, HashKind::Md5, &pool(3)).unwrap();
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[d.server_for_key(b"k")] += 1;
        }
        assert!(seen.iter().all(|&n| n > 30), "{seen:?}");
    }
}
