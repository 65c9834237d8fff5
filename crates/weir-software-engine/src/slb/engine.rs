//! [`Slb`]: the software load balancer, one per worker. It takes a frame,
//! decides exactly what weir_lb (`bpf/weir_lb.bpf.c`) decides for it,
//! rewrites it in place, and says where it goes; the caller owns the
//! sockets and the clock.
//!
//! The path of a frame is weir_lb's, step for step: parse; a VIP's packet
//! looks up the established table (a SYN on an established 5-tuple opens a
//! new connection, an expired entry is absent, an entry whose DIP slot is
//! no longer live with its generation is redispatched), then the half-open
//! table (a retransmitted SYN keeps its DIP, the client's next packet
//! promotes the entry); a new flow is dispatched by its VIP's current AWFD
//! table with the flow hash; nat rewrites the destination, dsr only the
//! MACs. A packet to no VIP may be a nat DIP's reply (rewritten back to the
//! VIP and sent by the client's L2 path), a stray reply of a nat DIP, or
//! not for the load balancer at all. Every frame ends in exactly one
//! outcome counter.

use std::collections::VecDeque;

use weir_abi::*;

use weir_core::dispatch::awfd::DipId;
use weir_core::flow_hash::flow_hash;

use super::config::{Action, Config, ConfigError, NonSynMiss};
use super::conntrack::{note_close, tick_of, Entry, Kind, Reverse, Table};
use super::lru::{Hashed, KeyHasher, Slot};
use super::outcome::*;
use super::packet::{self, Packet, Parsed, TCP_FIN, TCP_RST};
use super::rewrite::{rewrite_endpoint, set_macs, End};
use super::services::{DipSlot, Services};

/// The software load balancer of one worker. Sans-IO: frames and the time
/// are passed in, outcomes and events come out.
#[derive(Debug, Clone)]
pub struct Slb {
    cfg: Config,
    /// The keyed hash of both tables' indexes (not the flow hash that
    /// dispatches: that one is weir_lb's, with the configured seed).
    hasher: KeyHasher,
    services: Services,
    conns: Table,
    half_open: Table,
    events: VecDeque<Event>,
    counters: Counters,
    vip_traffic: Vec<weir_traffic>,
    dip_traffic: Vec<weir_traffic>,
}

/// The DIP a VIP's packet goes to.
struct Target {
    id: DipId,
    slot: DipSlot,
    /// The packet confirmed a connection (weir_lb's `new_conn`).
    new_conn: bool,
}

impl Slb {
    /// A load balancer with empty tables. Every table and queue is
    /// allocated here, at its full size, so processing allocates nothing.
    pub fn new(cfg: Config) -> Result<Slb, ConfigError> {
        cfg.validate()?;
        Ok(Slb {
            hasher: KeyHasher::new(),
            services: Services::new(cfg.max_vips, cfg.max_dips),
            conns: Table::new(Kind::Established, cfg.conn_capacity),
            half_open: Table::new(Kind::HalfOpen, cfg.half_open_capacity),
            events: VecDeque::with_capacity(cfg.event_capacity),
            counters: Counters::default(),
            vip_traffic: vec![weir_traffic::default(); cfg.max_vips as usize],
            dip_traffic: vec![weir_traffic::default(); cfg.max_dips as usize],
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// VIPs, DIPs, tables and interfaces.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Updates take effect with the next frame.
    pub fn services_mut(&mut self) -> &mut Services {
        &mut self.services
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Packets, bytes and new connections of a VIP (weir_lb's `vip_traffic`).
    pub fn vip_traffic(&self, vip_id: u32) -> weir_traffic {
        self.vip_traffic
            .get(vip_id as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Every VIP's and every DIP slot's traffic, indexed by id and slot.
    pub fn all_traffic(&self) -> (&[weir_traffic], &[weir_traffic]) {
        (&self.vip_traffic, &self.dip_traffic)
    }

    /// Packets, bytes and new connections of a DIP slot (`dip_traffic`).
    pub fn dip_traffic(&self, dip: DipId) -> weir_traffic {
        self.dip_traffic
            .get(dip as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Entries in the established table.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    pub fn half_open_count(&self) -> usize {
        self.half_open.len()
    }

    /// The established connection of a 5-tuple (client -> VIP) as the fast
    /// table would hold it, expired or not.
    pub fn connection(&self, key: &weir_flow_key) -> Option<Connection> {
        let slot = self.conns.find(&self.hasher.hashed(key))?;
        Some(connection(*key, &self.conns.entry(slot)))
    }

    /// The connection of `key` was used at `seen_ns` (the clock of
    /// [`Slb::process`]) by the fast table, whose packets this table never
    /// sees: its entry ages from then, so it is not swept (and its fast
    /// entry removed) while it is busy there. atime only moves forward;
    /// an entry idle past its timeout here is revived, since the fast
    /// table's own entry, by the same rules, was alive at `seen_ns`.
    /// Returns whether the connection is here.
    pub fn refresh(&mut self, key: &weir_flow_key, seen_ns: u64) -> bool {
        let Some(slot) = self.conns.find(&self.hasher.hashed(key)) else {
            return false;
        };
        self.conns.seen(slot, tick_of(seen_ns));
        true
    }

    /// The half-open entry of a 5-tuple, expired or not.
    pub fn half_open_entry(&self, key: &weir_flow_key) -> Option<weir_conn> {
        let slot = self.half_open.find(&self.hasher.hashed(key))?;
        Some(*self.half_open.conn(slot))
    }

    /// The next table event, oldest first. Drain after every batch: the
    /// queue holds `event_capacity` events and counts the ones it loses.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Removes up to `budget` expired entries from both tables (oldest
    /// first, each table's expired entries found in O(1)); an established
    /// one leaves with an [`Event::Removed`]. Returns how many went. A
    /// frame never needs this (it treats an expired entry as absent): it
    /// frees room and tells a fast table which entries are over.
    pub fn expire(&mut self, now_ns: u64, budget: usize) -> usize {
        let now = tick_of(now_ns);
        let t = self.cfg.timeouts;
        let mut removed = 0;
        while removed < budget {
            let Some((key, entry)) = self.conns.pop_expired(now, &t) else {
                break;
            };
            self.removed(key, &entry, Removal::Expired);
            removed += 1;
        }
        while removed < budget && self.half_open.pop_expired(now, &t).is_some() {
            removed += 1;
        }
        self.counters.swept += removed as u64;
        removed
    }

    /// Handles one frame in place. `ingress` is the interface it came in
    /// by; `now_ns` is the coarse monotonic clock (CLOCK_MONOTONIC_COARSE,
    /// what weir_lb's `bpf_ktime_get_coarse_ns` reads), so entries age as
    /// in the fast table. Never panics, never allocates.
    pub fn process(&mut self, frame: &mut [u8], ingress: u32, now_ns: u64) -> Outcome {
        self.counters.bump(WEIR_STAT_RX);
        let outcome = self.handle(frame, ingress, now_ns);
        self.counters.bump(outcome.stat());
        outcome
    }

    fn handle(&mut self, frame: &mut [u8], ingress: u32, now_ns: u64) -> Outcome {
        let pkt = match packet::parse(frame) {
            Parsed::L4(p) => p,
            Parsed::NotIp => {
                return verdict(self.cfg.not_vip, PassReason::NotIp, DropReason::NotVip)
            }
            Parsed::Icmp => return verdict(self.cfg.icmp, PassReason::Icmp, DropReason::Icmp),
            Parsed::Fragment => {
                return verdict(
                    self.cfg.fragments,
                    PassReason::Fragment,
                    DropReason::Fragment,
                )
            }
            Parsed::OtherL4 => {
                return verdict(self.cfg.not_vip, PassReason::NotVip, DropReason::NotVip)
            }
            Parsed::Malformed => {
                return verdict(
                    self.cfg.malformed,
                    PassReason::Malformed,
                    DropReason::Malformed,
                )
            }
        };
        let vkey = weir_vip_key {
            addr: pkt.key.dst,
            port: pkt.key.dport,
            proto: pkt.key.proto,
            family: pkt.key.family,
        };
        // One hash of the key for every table it is looked up in.
        let key = self.hasher.hashed(&pkt.key);
        if let Some(&vip) = self.services.vip(&vkey) {
            return self.balance(frame, &pkt, &key, vip, ingress, now_ns);
        }
        if let Some((slot, rev)) = self.conns.by_reply(&key) {
            return self.reverse_nat(frame, &pkt, Kind::Established, slot, rev, ingress, now_ns);
        }
        if let Some((slot, rev)) = self.half_open.by_reply(&key) {
            return self.reverse_nat(frame, &pkt, Kind::HalfOpen, slot, rev, ingress, now_ns);
        }
        if self.is_nat_dip_reply(&pkt) {
            return if self.services.is_local(&pkt.key.dst, pkt.key.family) {
                Outcome::Pass(PassReason::NotVip)
            } else {
                Outcome::Drop(DropReason::ReplyNoState)
            };
        }
        verdict(self.cfg.not_vip, PassReason::NotVip, DropReason::NotVip)
    }

    /// A packet to a VIP (weir_lb's `balance`).
    fn balance(
        &mut self,
        frame: &mut [u8],
        pkt: &Packet,
        key: &Hashed,
        vip: weir_vip,
        ingress: u32,
        now_ns: u64,
    ) -> Outcome {
        let now = tick_of(now_ns);
        let nat = u32::from(vip.mode) == WEIR_MODE_NAT;
        let mut hit = None;
        let mut stale = None;
        if let Some(slot) = self.conns.find(key) {
            let conn = *self.conns.conn(slot);
            let dip = self.services.dip_of(conn.dip_id, conn.dip_gen).copied();
            if pkt.is_syn() {
                // A SYN opens a new connection on the 5-tuple: the old one
                // is over, the current table decides.
                self.counters.bump(WEIR_STAT_CONN_REUSED);
                self.forget(slot, Removal::Reused);
            } else if self.conns.expired(slot, now, &self.cfg.timeouts) {
                self.counters.bump(WEIR_STAT_CONN_EXPIRED);
                self.forget(slot, Removal::Expired);
            } else if let Some(dip) = dip {
                self.counters.bump(WEIR_STAT_CONN_HIT);
                self.conns.touch(slot, now);
                if pkt.is_tcp() {
                    self.note_close(slot, pkt.tcp_flags, WEIR_CONN_F_FIN_CLIENT as u8, now);
                }
                self.conns.relink(slot);
                hit = Some(Target {
                    id: conn.dip_id,
                    slot: dip,
                    new_conn: false,
                });
            } else {
                // Its DIP was removed: the connection is lost anyway.
                self.counters.bump(WEIR_STAT_CONN_STALE);
                stale = Some(slot);
            }
        }
        if hit.is_none() && stale.is_none() {
            self.counters.bump(WEIR_STAT_CONN_MISS);
        }

        let target = match hit {
            Some(t) => t,
            None if stale.is_none() && pkt.is_tcp() => {
                match self.handshake(pkt, key, &vip, nat, ingress, now_ns) {
                    Ok(t) => t,
                    Err(reason) => return Outcome::Drop(reason),
                }
            }
            None => {
                // UDP (no handshake to wait for), or an entry whose DIP is gone.
                let Some((entry, slot)) = self.dispatch(pkt, &vip, nat, ingress, now_ns) else {
                    return Outcome::Drop(DropReason::NoBackend);
                };
                self.install(key, entry, stale, now);
                Target {
                    id: entry.conn.dip_id,
                    slot,
                    new_conn: true,
                }
            }
        };

        let bytes = frame.len() as u64;
        add_traffic(&mut self.vip_traffic, vip.vip_id, bytes, target.new_conn);
        add_traffic(&mut self.dip_traffic, target.id, bytes, target.new_conn);

        let dip = &target.slot.dip;
        if nat && rewrite_endpoint(frame, pkt, End::Dst, &dip.addr, dip.port).is_err() {
            return Outcome::Drop(DropReason::Malformed);
        }
        match self.next_hop(frame, &target.slot, ingress) {
            Ok(egress) => Outcome::Forward(Forward {
                side: Side::ToDip,
                dip: target.id,
                vip_id: vip.vip_id,
                conn: pkt.key,
                egress,
            }),
            Err(reason) => Outcome::Drop(reason),
        }
    }

    /// A TCP packet with no established entry (weir_lb's `handshake`). A
    /// SYN is dispatched by the current table into the half-open table (a
    /// retransmitted SYN keeps the DIP its first one got); the client's
    /// next packet promotes the entry. A non-SYN with no entry at all is
    /// dispatched as configured and takes the same half-open step.
    fn handshake(
        &mut self,
        pkt: &Packet,
        key: &Hashed,
        vip: &weir_vip,
        nat: bool,
        ingress: u32,
        now_ns: u64,
    ) -> Result<Target, DropReason> {
        let now = tick_of(now_ns);
        let t = self.cfg.timeouts;
        let half = self.half_open.find(key);
        let open = half.and_then(|s| {
            let c = self.half_open.conn(s);
            let dip = self.services.dip_of(c.dip_id, c.dip_gen).copied()?;
            (!self.half_open.expired(s, now, &t)).then_some((s, dip))
        });
        if let Some((slot, dip)) = open {
            let id = self.half_open.conn(slot).dip_id;
            if pkt.is_syn() {
                self.counters.bump(WEIR_STAT_SYN_RETRANSMIT);
                return Ok(Target {
                    id,
                    slot: dip,
                    new_conn: false,
                });
            }
            let (_, mut entry) = self.half_open.remove(slot);
            entry.conn.atime = now;
            let change = note_close(
                &mut entry.conn,
                pkt.tcp_flags,
                WEIR_CONN_F_FIN_CLIENT as u8,
                now,
            );
            if nat {
                // The replies take the path this packet came by.
                entry.reverse = Some(self.reverse_of(pkt, &dip.dip, vip.vip_id, ingress));
            }
            self.install(key, entry, None, now);
            if let Some(ch) = change {
                if ch.first {
                    self.counters.bump(WEIR_STAT_CONN_CLOSING);
                }
                if ch.closed {
                    self.emit(Event::Closed(pkt.key));
                }
            }
            return Ok(Target {
                id,
                slot: dip,
                new_conn: true,
            });
        }

        if !pkt.is_syn() {
            self.counters.bump(WEIR_STAT_NONSYN_MISS);
            if self.cfg.nonsyn_miss == NonSynMiss::Drop {
                return Err(DropReason::NonSynMiss);
            }
        }
        let (entry, dip) = self
            .dispatch(pkt, vip, nat, ingress, now_ns)
            .ok_or(DropReason::NoBackend)?;
        match half {
            Some(slot) => self.half_open.replace(slot, entry),
            None => {
                if self.half_open.insert(key, entry, now).is_some() {
                    self.counters.half_open_evicted += 1;
                }
            }
        }
        self.counters.bump(WEIR_STAT_HALF_OPEN_NEW);
        Ok(Target {
            id: entry.conn.dip_id,
            slot: dip,
            new_conn: false,
        })
    }

    /// A new entry for a new flow, from the VIP's current table: `None`
    /// when the VIP has no table, or its pick is not a live DIP of the
    /// packet's family (weir_lb's `dispatch`).
    fn dispatch(
        &self,
        pkt: &Packet,
        vip: &weir_vip,
        nat: bool,
        ingress: u32,
        now_ns: u64,
    ) -> Option<(Entry, DipSlot)> {
        let (version, table) = self.services.table(vip.vip_id)?;
        let dip_id = table.select(flow_hash(&pkt.key, self.cfg.hash_seed))?;
        let slot = *self.services.dip(dip_id)?;
        if !slot.is_live() || slot.dip.family != pkt.key.family {
            return None;
        }
        let entry = Entry {
            conn: weir_conn {
                dip_id,
                dip_gen: slot.dip.gen,
                table_version: version,
                created_ns: now_ns,
                atime: tick_of(now_ns),
                ..Default::default()
            },
            reverse: nat.then(|| self.reverse_of(pkt, &slot.dip, vip.vip_id, ingress)),
        };
        Some((entry, slot))
    }

    /// Puts a confirmed connection into the established table, in place of
    /// `replacing` (a stale entry of the same key) if given.
    fn install(&mut self, key: &Hashed, entry: Entry, replacing: Option<Slot>, now: u32) {
        match replacing {
            Some(slot) => self.conns.replace(slot, entry),
            None => {
                if let Some((old, old_entry)) = self.conns.insert(key, entry, now) {
                    self.counters.evicted += 1;
                    self.removed(old, &old_entry, Removal::Evicted);
                }
            }
        }
        self.counters.bump(WEIR_STAT_CONN_NEW);
        self.emit(Event::Installed(connection(key.key, &entry)));
    }

    fn forget(&mut self, slot: Slot, reason: Removal) {
        let (key, entry) = self.conns.remove(slot);
        self.removed(key, &entry, reason);
    }

    fn removed(&mut self, key: weir_flow_key, entry: &Entry, reason: Removal) {
        self.emit(Event::Removed {
            key,
            reverse: entry.reverse.map(|r| r.key),
            reason,
        });
    }

    fn note_close(&mut self, slot: Slot, tcp_flags: u8, fin: u8, now: u32) {
        let Some(change) = self.conns.note_close(slot, tcp_flags, fin, now) else {
            return;
        };
        if change.first {
            self.counters.bump(WEIR_STAT_CONN_CLOSING);
        }
        if change.closed {
            self.emit(Event::Closed(*self.conns.key(slot)));
        }
    }

    /// A nat DIP's reply, matched by the reverse entry of the connection
    /// at `slot` of the `kind` table (weir_lb's `reverse_nat`).
    #[allow(clippy::too_many_arguments)]
    fn reverse_nat(
        &mut self,
        frame: &mut [u8],
        pkt: &Packet,
        kind: Kind,
        slot: Slot,
        rev: Reverse,
        ingress: u32,
        now_ns: u64,
    ) -> Outcome {
        self.counters.bump(WEIR_STAT_REV_NAT);
        let r = rev.value;
        // The DIP's FIN or RST: the established entry learns it (a
        // half-open one has nothing to close).
        if kind == Kind::Established && pkt.is_tcp() && pkt.tcp_flags & (TCP_FIN | TCP_RST) != 0 {
            let fin = WEIR_CONN_F_FIN_SERVER as u8;
            self.note_close(slot, pkt.tcp_flags, fin, tick_of(now_ns));
        }
        let table = match kind {
            Kind::Established => &self.conns,
            Kind::HalfOpen => &self.half_open,
        };
        let (conn, dip) = (*table.key(slot), table.conn(slot).dip_id);
        add_traffic(&mut self.vip_traffic, r.vip_id, frame.len() as u64, false);
        if rewrite_endpoint(frame, pkt, End::Src, &r.vip, r.vport).is_err() {
            return Outcome::Drop(DropReason::Malformed);
        }
        match self.send_out(frame, r.ifindex, r.client_mac, r.lb_mac, ingress) {
            Ok(egress) => Outcome::Forward(Forward {
                side: Side::ToClient,
                dip,
                vip_id: r.vip_id,
                conn,
                egress,
            }),
            Err(reason) => Outcome::Drop(reason),
        }
    }

    /// From a nat DIP's service endpoint: a reply of a connection weir does
    /// not know (or no longer knows).
    fn is_nat_dip_reply(&self, pkt: &Packet) -> bool {
        self.services.is_nat_endpoint(&weir_endpoint {
            addr: pkt.key.src,
            port: pkt.key.sport,
            proto: pkt.key.proto,
            family: pkt.key.family,
        })
    }

    /// The DIP's next hop (forward.h's `forward_to_dip` without a FIB): a
    /// resolved one, else the DIP's configured MAC on the interface the
    /// packet came in by.
    fn next_hop(
        &self,
        frame: &mut [u8],
        dip: &DipSlot,
        ingress: u32,
    ) -> Result<Egress, DropReason> {
        let (ifindex, mac) = match dip.next_hop {
            Some(nh) => (nh.ifindex, nh.mac),
            None if dip.dip.mac_set != 0 => (ingress, dip.dip.mac),
            None => return Err(DropReason::NoRoute),
        };
        let src = self
            .services
            .interface_mac(ifindex)
            .ok_or(DropReason::NoRoute)?;
        self.send_out(frame, ifindex, mac, src, ingress)
    }

    /// forward.h's `send_out`: the MACs, then the same interface (TX) or
    /// another one the load balancer sends by (redirect).
    fn send_out(
        &self,
        frame: &mut [u8],
        ifindex: u32,
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        ingress: u32,
    ) -> Result<Egress, DropReason> {
        set_macs(frame, dst_mac, src_mac).map_err(|_| DropReason::Malformed)?;
        let redirect = ifindex != ingress;
        if redirect && self.services.interface_mac(ifindex).is_none() {
            return Err(DropReason::NoRedirectTarget);
        }
        Ok(Egress {
            ifindex,
            dst_mac,
            src_mac,
            redirect,
        })
    }

    /// The reverse entry of a nat connection to `dip`, learned from the
    /// client's packet (conntrack.h's `reverse_key` and `install_reverse`).
    fn reverse_of(&self, pkt: &Packet, dip: &weir_dip, vip_id: u32, ingress: u32) -> Reverse {
        let key = weir_flow_key {
            src: dip.addr,
            dst: pkt.key.src,
            sport: if dip.port != 0 {
                dip.port
            } else {
                pkt.key.dport
            },
            dport: pkt.key.sport,
            proto: pkt.key.proto,
            family: pkt.key.family,
            pad: [0; 2],
        };
        Reverse::new(
            &self.hasher.hashed(&key),
            weir_rev_nat {
                vip: pkt.key.dst,
                vport: pkt.key.dport,
                family: pkt.key.family,
                pad: 0,
                vip_id,
                ifindex: ingress,
                client_mac: pkt.eth_src,
                lb_mac: pkt.eth_dst,
            },
        )
    }

    fn emit(&mut self, event: Event) {
        if self.cfg.event_capacity == 0 {
            return;
        }
        if self.events.len() >= self.cfg.event_capacity {
            self.counters.events_lost += 1;
            return;
        }
        self.events.push_back(event);
    }
}

fn verdict(action: Action, pass: PassReason, drop: DropReason) -> Outcome {
    match action {
        Action::Pass => Outcome::Pass(pass),
        Action::Drop => Outcome::Drop(drop),
    }
}

fn add_traffic(counters: &mut [weir_traffic], id: u32, bytes: u64, new_conn: bool) {
    if let Some(t) = counters.get_mut(id as usize) {
        t.packets += 1;
        t.bytes += bytes;
        t.new_conns += u64::from(new_conn);
    }
}

fn connection(key: weir_flow_key, entry: &Entry) -> Connection {
    Connection {
        key,
        conn: entry.conn,
        reverse: entry.reverse.map(|r| (r.key, r.value)),
    }
}
