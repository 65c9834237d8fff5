//! Engine tests of the software load balancer: the fixture the BPF suites
//! load too (`weir_testkit`), a table-driven case runner that checks
//! outcome, output frame and the exact counter deltas of every frame, and
//! a fake clock.
//!
//! Expected DIPs come from [`weir_core::dispatch::awfd::AwfdTable::select`] over
//! [`weir_core::flow_hash::flow_hash`]; expected frames are built from scratch
//! with `weir_core::wire`; nothing is derived from a run.

mod fuzz;
mod table;
mod vectors;

use std::sync::Arc;

use weir_abi::*;

use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};
// The packet model's frame, not the engine's view of one (`slb::Frame`).
pub use weir_core::wire::Frame;
pub use weir_testkit::cases::passed_untouched;
pub use weir_testkit::fixture::*;
pub use weir_testkit::frames::*;
pub use weir_testkit::stats::{fmt_stats, stat_name};
use weir_testkit::verify::diff;

use super::*;

/// The interface frames arrive on.
pub const IFINDEX: u32 = 1;
/// The fake clock's start (a tick count far from 0).
pub const T0: u64 = 5_000_000_000_000;

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
        s.set_nat_endpoints(fx.nat_endpoints().into_keys());
        for v in &fx.vips {
            s.set_vip(v.key(), v.abi()).unwrap();
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
