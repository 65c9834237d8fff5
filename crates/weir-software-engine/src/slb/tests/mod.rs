//! Engine tests of the software load balancer: a fixture like the BPF
//! suites' (weir-dataplane/tests/common), a table-driven case runner that
//! checks outcome, output frame and the exact counter deltas of every
//! frame, and a fake clock.
//!
//! Expected DIPs come from [`weir_core::dispatch::awfd::AwfdTable::select`] over
//! [`weir_core::flow_hash::flow_hash`]; expected frames are built from scratch by
//! `testframes` (etherparse); nothing is derived from a run.

mod fuzz;
mod table;
mod vectors;

use std::sync::Arc;

use weir_abi::*;

use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};

use super::testframes::*;
use super::*;

/// The interface frames arrive on.
pub const IFINDEX: u32 = 1;
/// Its MAC: the source of what the load balancer sends by it.
pub const LB_IF_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The fake clock's start (a tick count far from 0).
pub const T0: u64 = 5_000_000_000_000;

pub fn dip_mac(id: u32) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, id as u8]
}

pub const NAT: u32 = WEIR_MODE_NAT;
pub const DSR: u32 = WEIR_MODE_DSR;

#[derive(Debug, Clone)]
pub struct Dip {
    pub id: u32,
    pub addr: &'static str,
    /// NAT destination port; 0 keeps the VIP's port.
    pub port: u16,
}

impl Dip {
    pub fn abi(&self, gen: u32, live: bool) -> weir_dip {
        let (addr, family) = addr_words(self.addr.parse().unwrap());
        weir_dip {
            addr,
            port: self.port.to_be(),
            family,
            mac_set: 1,
            mac: dip_mac(self.id),
            flags: if live { WEIR_DIP_F_LIVE } else { 0 },
            gen,
            ..Default::default()
        }
    }

    /// The port a nat connection to VIP port `vport` reaches it on.
    pub fn port_for(&self, vport: u16) -> u16 {
        if self.port == 0 {
            vport
        } else {
            self.port
        }
    }
}

#[derive(Debug, Clone)]
pub struct Vip {
    pub id: u32,
    pub addr: &'static str,
    pub port: u16,
    pub proto: Proto,
    pub mode: u32,
    /// (dip, weight); `None`: no table is ever published.
    pub weights: Option<Vec<(u32, u32)>>,
}

impl Vip {
    pub fn key(&self) -> weir_vip_key {
        let (addr, family) = addr_words(self.addr.parse().unwrap());
        weir_vip_key {
            addr,
            port: self.port.to_be(),
            proto: self.proto.number(),
            family,
        }
    }

    pub fn table(&self) -> AwfdTable {
        AwfdTable::from_weights(self.weights.as_deref().unwrap_or(&[])).unwrap()
    }
}

/// The configuration of weir_lb's test fixture (`Fixture::standard`).
pub struct Fixture {
    pub dips: Vec<Dip>,
    pub vips: Vec<Vip>,
}

impl Fixture {
    pub fn standard() -> Fixture {
        let dip = |id, addr, port| Dip { id, addr, port };
        let vip = |id, addr, port, proto, mode, w: Option<&[(u32, u32)]>| Vip {
            id,
            addr,
            port,
            proto,
            mode,
            weights: w.map(|w| w.to_vec()),
        };
        use Proto::{Tcp, Udp};
        Fixture {
            dips: vec![
                dip(1, "10.1.0.1", 8080),
                dip(2, "10.1.0.2", 8080),
                dip(3, "10.1.0.3", 0),
                dip(4, "10.1.0.4", 9090),
                dip(11, "2001:db8:1::1", 8080),
                dip(12, "2001:db8:1::2", 0),
                dip(13, "2001:db8:1::3", 8080),
            ],
            vips: vec![
                vip(
                    0,
                    "10.0.0.100",
                    80,
                    Tcp,
                    NAT,
                    Some(&[(1, 3), (2, 1), (3, 1)]),
                ),
                vip(
                    1,
                    "10.0.0.100",
                    53,
                    Udp,
                    NAT,
                    Some(&[(1, 1), (2, 1), (3, 1)]),
                ),
                vip(2, "10.0.0.101", 80, Tcp, DSR, Some(&[(1, 1), (2, 2)])),
                vip(3, "10.0.0.101", 53, Udp, DSR, Some(&[(2, 1), (3, 1)])),
                vip(
                    4,
                    "2001:db8::100",
                    80,
                    Tcp,
                    NAT,
                    Some(&[(11, 2), (12, 1), (13, 1)]),
                ),
                vip(5, "2001:db8::100", 53, Udp, NAT, Some(&[(11, 1), (12, 1)])),
                vip(6, "2001:db8::101", 80, Tcp, DSR, Some(&[(12, 1), (13, 1)])),
                vip(7, "2001:db8::101", 53, Udp, DSR, Some(&[(11, 1), (13, 2)])),
                // Every weight 0.
                vip(8, "10.0.0.102", 80, Tcp, NAT, Some(&[(1, 0)])),
                // Never got a table.
                vip(9, "2001:db8::102", 80, Tcp, NAT, None),
                // An IPv4 VIP whose only DIP is IPv6.
                vip(10, "10.0.0.103", 80, Tcp, NAT, Some(&[(11, 1)])),
                // DIP 4 rewrites the port to 9090.
                vip(11, "10.0.0.104", 443, Tcp, NAT, Some(&[(4, 1)])),
            ],
        }
    }

    pub fn dip(&self, id: u32) -> &Dip {
        self.dips.iter().find(|d| d.id == id).unwrap()
    }

    pub fn vip(&self, id: u32) -> &Vip {
        self.vips.iter().find(|v| v.id == id).unwrap()
    }

    /// The DIP weir-core's table picks for a new flow to `vip`.
    pub fn predict(&self, vip: u32, t: &FlowTuple) -> Option<&Dip> {
        let h = flow_hash(&t.key(), DEFAULT_SEED);
        self.vip(vip).table().select(h).map(|id| self.dip(id))
    }

    /// The service endpoints of the nat VIPs' DIPs.
    pub fn nat_endpoints(&self) -> Vec<weir_endpoint> {
        let mut out = Vec::new();
        for v in self.vips.iter().filter(|v| v.mode == NAT) {
            for (id, _) in v.weights.iter().flatten() {
                let d = self.dip(*id);
                let (addr, family) = addr_words(d.addr.parse().unwrap());
                out.push(weir_endpoint {
                    addr,
                    port: d.port_for(v.port).to_be(),
                    proto: v.proto.number(),
                    family,
                });
            }
        }
        out
    }
}

/// Small tables for tests (as weir_lb's `test_options`).
pub fn test_config() -> Config {
    Config {
        conn_capacity: 4096,
        half_open_capacity: 4096,
        max_vips: 16,
        max_dips: 256,
        ..Config::default()
    }
}

/// A load balancer, its fixture, a fake clock and the events it reported.
pub struct Env {
    pub slb: Slb,
    pub fx: Fixture,
    pub now_ns: u64,
    /// Events of the last frame.
    pub events: Vec<Event>,
}

impl Env {
    /// Every DIP live with generation 1, tables at version 1.
    pub fn new(cfg: Config) -> Env {
        let fx = Fixture::standard();
        let mut slb = Slb::new(cfg).unwrap();
        let s = slb.services_mut();
        s.set_interface(IFINDEX, LB_IF_MAC);
        for d in &fx.dips {
            s.set_dip(d.id, d.abi(1, true)).unwrap();
        }
        s.set_nat_endpoints(fx.nat_endpoints());
        for v in &fx.vips {
            let vip = weir_vip {
                vip_id: v.id,
                mode: v.mode as u8,
                ..Default::default()
            };
            s.set_vip(v.key(), vip).unwrap();
            if v.weights.is_some() {
                s.publish_table(v.id, 1, Arc::new(v.table())).unwrap();
            }
        }
        Env {
            slb,
            fx,
            now_ns: T0,
            events: Vec::new(),
        }
    }

    pub fn publish(&mut self, vip: u32, version: u32, weights: &[(u32, u32)]) {
        let t = AwfdTable::from_weights(weights).unwrap();
        self.slb
            .services_mut()
            .publish_table(vip, version, Arc::new(t))
            .unwrap();
    }

    pub fn put_dip(&mut self, id: u32, gen: u32, live: bool) {
        let d = self.fx.dip(id).abi(gen, live);
        self.slb.services_mut().set_dip(id, d).unwrap();
    }

    pub fn advance_secs(&mut self, secs: u64) {
        self.now_ns += secs * 1_000_000_000;
    }

    /// Runs one frame; returns the outcome and the frame as left.
    pub fn run(&mut self, frame: &[u8]) -> (Outcome, Vec<u8>) {
        let mut buf = frame.to_vec();
        let o = self.slb.process(&mut buf, IFINDEX, self.now_ns);
        self.events.clear();
        while let Some(e) = self.slb.poll_event() {
            self.events.push(e);
        }
        (o, buf)
    }

    pub fn conn(&self, t: &FlowTuple) -> Option<weir_conn> {
        self.slb.connection(&t.key()).map(|c| c.conn)
    }
}

type Hook = Box<dyn Fn(&mut Env)>;

/// One table-driven case.
pub struct Case {
    pub name: String,
    pub input: Vec<u8>,
    /// The one outcome counter the frame ends in.
    pub outcome: u32,
    /// The frame as it must leave; `None`: unchanged.
    pub output: Option<Vec<u8>>,
    /// Event counters that go up by exactly one (all others stay).
    pub events: Vec<u32>,
    pub before: Option<Hook>,
    pub after: Option<Hook>,
}

impl Case {
    pub fn new(name: impl Into<String>, input: Vec<u8>, outcome: u32) -> Case {
        Case {
            name: name.into(),
            input,
            outcome,
            output: None,
            events: Vec::new(),
            before: None,
            after: None,
        }
    }

    pub fn output(mut self, out: Vec<u8>) -> Case {
        self.output = Some(out);
        self
    }

    pub fn events(mut self, ev: &[u32]) -> Case {
        self.events = ev.to_vec();
        self
    }

    pub fn before(mut self, f: impl Fn(&mut Env) + 'static) -> Case {
        self.before = Some(Box::new(f));
        self
    }

    pub fn after(mut self, f: impl Fn(&mut Env) + 'static) -> Case {
        self.after = Some(Box::new(f));
        self
    }
}

/// The name of a counter of `enum weir_stat` (by constant, not position).
pub fn stat_name(i: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (WEIR_STAT_RX, "rx"),
        (WEIR_STAT_PASS_NOT_IP, "pass_not_ip"),
        (WEIR_STAT_PASS_NOT_VIP, "pass_not_vip"),
        (WEIR_STAT_PASS_ICMP, "pass_icmp"),
        (WEIR_STAT_PASS_FRAGMENT, "pass_fragment"),
        (WEIR_STAT_PASS_NO_NEIGH, "pass_no_neigh"),
        (WEIR_STAT_DROP_NOT_VIP, "drop_not_vip"),
        (WEIR_STAT_DROP_ICMP, "drop_icmp"),
        (WEIR_STAT_DROP_FRAGMENT, "drop_fragment"),
        (WEIR_STAT_DROP_MALFORMED, "drop_malformed"),
        (WEIR_STAT_PASS_MALFORMED, "pass_malformed"),
        (WEIR_STAT_DROP_NO_BACKEND, "drop_no_backend"),
        (WEIR_STAT_DROP_NONSYN_MISS, "drop_nonsyn_miss"),
        (WEIR_STAT_DROP_NO_ROUTE, "drop_no_route"),
        (WEIR_STAT_TX, "tx"),
        (WEIR_STAT_REDIRECT, "redirect"),
        (WEIR_STAT_DROP_REDIRECT, "drop_redirect"),
        (WEIR_STAT_DROP_REPLY_NO_STATE, "drop_reply_no_state"),
        (WEIR_STAT_CONN_HIT, "conn_hit"),
        (WEIR_STAT_CONN_MISS, "conn_miss"),
        (WEIR_STAT_CONN_NEW, "conn_new"),
        (WEIR_STAT_CONN_INSTALL_FAIL, "conn_install_fail"),
        (WEIR_STAT_CONN_STALE, "conn_stale"),
        (WEIR_STAT_NONSYN_MISS, "nonsyn_miss"),
        (WEIR_STAT_REV_NAT, "rev_nat"),
        (WEIR_STAT_MAC_FALLBACK, "mac_fallback"),
        (WEIR_STAT_HALF_OPEN_NEW, "half_open_new"),
        (WEIR_STAT_SYN_RETRANSMIT, "syn_retransmit"),
        (WEIR_STAT_CONN_REUSED, "conn_reused"),
        (WEIR_STAT_CONN_EXPIRED, "conn_expired"),
        (WEIR_STAT_CONN_CLOSING, "conn_closing"),
    ];
    NAMES
        .iter()
        .find(|(s, _)| *s == i)
        .map_or_else(|| format!("stat{i}"), |(_, n)| n.to_string())
}

pub fn fmt_stats(s: &[u64]) -> String {
    s.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, v)| format!("{}={v}", stat_name(i as u32)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the cases in order, checking outcome, output and counter deltas.
pub fn run_cases(env: &mut Env, cases: Vec<Case>) -> usize {
    let n = cases.len();
    for c in cases {
        if let Some(f) = &c.before {
            f(env);
        }
        let before = *env.slb.counters().stats();
        let (outcome, out) = env.run(&c.input);
        let after = *env.slb.counters().stats();
        let name = &c.name;
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(
            outcome.stat(),
            c.outcome,
            "{name}: outcome {outcome:?}; counters moved: {}",
            fmt_stats(&delta)
        );
        let want = c.output.as_ref().unwrap_or(&c.input);
        assert!(
            &out == want,
            "{name}: output differs:\n{}",
            diff(&out, want)
        );
        let mut expect = vec![0u64; WEIR_STAT_MAX as usize];
        expect[WEIR_STAT_RX as usize] = 1;
        expect[c.outcome as usize] += 1;
        for e in &c.events {
            expect[*e as usize] += 1;
        }
        assert_eq!(
            delta,
            expect,
            "{name}: counter deltas: have [{}], want [{}]",
            fmt_stats(&delta),
            fmt_stats(&expect)
        );
        let c2 = env.slb.counters();
        assert_eq!(
            c2.get(WEIR_STAT_RX),
            c2.outcomes(),
            "{name}: rx != outcomes"
        );
        if let Some(f) = &c.after {
            f(env);
        }
    }
    n
}

pub fn diff(have: &[u8], want: &[u8]) -> String {
    let mut s = format!("lengths: have {} want {}\n", have.len(), want.len());
    for i in 0..have.len().max(want.len()) {
        let (a, b) = (have.get(i), want.get(i));
        if a != b {
            s.push_str(&format!("  byte {i}: have {a:02x?} want {b:02x?}\n"));
        }
    }
    s
}
