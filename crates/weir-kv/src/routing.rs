//! Which server owns a key right now: the pool's distribution with its
//! ejected servers taken out, rebuilt once per change of the ejected set
//! (a [`Health`] generation) and shared by every worker and the XDP path.
//!
//! - `rehash` (nutcracker's `auto_eject_hosts: true`): the continuum is
//!   rebuilt over the live servers exactly as nutcracker rebuilds it.
//! - `failover` (weir's): the full continuum stays; the points of an ejected
//!   server go to the pool's failover server while it is live, else to the
//!   next live point's owner, so no other key moves.
//!
//! With every server ejected (the failover server too) the full
//! distribution is used, so that each key's own server answers with its
//! error rather than none at all.

use std::sync::{Arc, Mutex};

use crate::config::KvConfig;
use crate::health::{EjectMode, Health};
use crate::route::{DistKind, Distribution, HashKind, Server};

pub struct Routing {
    full: Arc<Distribution>,
    kind: DistKind,
    hash: HashKind,
    hash_tag: Option<[u8; 2]>,
    /// The ring's servers (not the failover server).
    servers: Vec<Server>,
    /// The failover server's index, past the ring's servers.
    spare: Option<usize>,
    mode: EjectMode,
    health: Arc<Health>,
    /// The distribution built for a generation of `health`.
    current: Mutex<(u64, Arc<Distribution>)>,
}

impl Routing {
    /// Routing over `full` (the pool's distribution with every server), the
    /// servers of `cfg`, following `health`'s ejections.
    pub fn new(cfg: &KvConfig, full: Arc<Distribution>, health: Arc<Health>) -> Routing {
        Routing {
            current: Mutex::new((health.generation(), full.clone())),
            full,
            kind: cfg.distribution,
            hash: cfg.hash,
            hash_tag: cfg.hash_tag,
            servers: cfg.ring_servers().to_vec(),
            spare: cfg.spare_index(),
            mode: cfg.eject.mode,
            health,
        }
    }

    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Changes whenever [`Routing::current`] would give another distribution.
    pub fn generation(&self) -> u64 {
        self.health.generation()
    }

    /// The distribution in force and its generation.
    pub fn current(&self) -> (u64, Arc<Distribution>) {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        // Read the generation before the live set: a change in between
        // shows as a newer generation on the next call.
        let generation = self.health.generation();
        if cur.0 != generation {
            *cur = (generation, Arc::new(self.build(&self.health.live())));
        }
        cur.clone()
    }

    fn build(&self, live: &[bool]) -> Distribution {
        let ring = &live[..self.servers.len()];
        if ring.iter().all(|&l| l) || !live.iter().any(|&l| l) {
            return (*self.full).clone();
        }
        match self.mode {
            EjectMode::Off => (*self.full).clone(),
            EjectMode::Failover => self.full.failover_to(live, self.spare.filter(|&s| live[s])),
            EjectMode::Rehash => {
                Distribution::build_live(self.kind, self.hash, &self.servers, ring)
                    .expect("the servers were validated at load and one is live")
                    .with_hash_tag(self.hash_tag)
            }
        }
    }

    /// For each server (the failover server included), the servers whose
    /// keys it serves now in their place, by index: in `failover` mode, the
    /// ejected servers whose ring points it took over. Empty lists in the
    /// other modes (nutcracker's rehash spreads them over every live server)
    /// and while no server is ejected.
    pub fn serving_for(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.health.live().len()];
        if self.mode != EjectMode::Failover {
            return out;
        }
        let (_, now) = self.current();
        for (&(_, own), &(_, by)) in self.full.continuum().iter().zip(now.continuum()) {
            let (own, by) = (own as usize, by as usize);
            if own != by && !out[by].contains(&own) {
                out[by].push(own);
            }
        }
        for v in &mut out {
            v.sort_unstable();
        }
        out
    }
}
