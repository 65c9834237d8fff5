//! Shared harness of the BPF_PROG_TEST_RUN suites: a loaded `weir_lb` with
//! the fixture the software engine's tests load too (`weir_testkit`), the
//! table-driven case runner, and counter bookkeeping.
//!
//! Expected DIPs come from weir-core (`AwfdTable::select` over `flow_hash`),
//! expected packets from `weir_testkit::frames` (`weir_core::wire`);
//! nothing is derived from a run.
// Each test binary uses its own subset.
#![allow(dead_code, unused_imports)]

pub mod netns;

pub use netns::{in_new_netns, sh};
pub use weir_core::wire::{
    raw_frame, ETHERTYPE_IPV4 as ETH_P_IP, ETHERTYPE_IPV6 as ETH_P_IPV6, ETH_HLEN,
};
pub use weir_testkit::cases::passed_untouched;
pub use weir_testkit::fixture::*;
pub use weir_testkit::frames::*;
pub use weir_testkit::stats::{fmt_stats, stat_name, OUTCOMES};
pub use weir_testkit::verify::{diff, verify_checksums};

use weir_abi::*;
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};
use weir_dataplane::maps::Maps;
use weir_dataplane::testrun::{self, RunResult, XdpAction};

/// BPF_PROG_TEST_RUN without a context runs as if received on loopback.
pub const TEST_IFINDEX: u32 = 1;

/// Load options for tests: small maps, nothing pinned, next hop from the
/// configured DIP MACs.
pub fn test_options() -> LoadOptions {
    LoadOptions {
        conn_capacity: 4096,
        conn_capacity_v6: 2048,
        max_vips: 16,
        max_dips: 256,
        fib_lookup: false,
        pin_dir: None,
        ..Default::default()
    }
}

/// A loaded program with its maps.
pub struct Harness {
    pub lb: LoadedLb,
    pub maps: Maps,
    pub fx: Fixture,
    /// Keeps the kernel's run statistics on (BPF_ENABLE_STATS) while the
    /// harness lives: the program's run count is then the number of packets
    /// it saw, however they were run.
    _run_stats: std::os::fd::OwnedFd,
}

impl Harness {
    /// Loads `weir_lb`, registers the test interface and writes the standard
    /// fixture (every DIP live with generation 1, tables at version 1).
    pub fn new(opts: &LoadOptions) -> Harness {
        let lb = loader::load(opts).expect("loading weir_lb (tests need root)");
        let maps = Maps::of(&lb.skel).unwrap();
        let h = Harness {
            lb,
            maps,
            fx: Fixture::standard(),
            _run_stats: enable_run_stats(),
        };
        h.maps.put_iface(TEST_IFINDEX, LB_IF_MAC).unwrap();
        for d in &h.fx.dips {
            h.maps.put_dip(d.id, &d.abi(1, true)).unwrap();
        }
        h.maps.sync_nat_endpoints(&h.fx.nat_endpoints()).unwrap();
        for v in &h.fx.vips {
            h.maps.put_vip(&v.key(), &v.abi()).unwrap();
            if v.weights.is_some() {
                h.maps.publish_table(v.id, 1, &v.table()).unwrap();
            }
        }
        h
    }

    pub fn run(&self, pkt: &[u8]) -> RunResult {
        testrun::run(&self.lb.skel.progs.weir_lb, pkt, 1).unwrap()
    }

    pub fn stats(&self) -> Vec<u64> {
        self.maps.stats().unwrap()
    }

    /// Every packet the program saw ended in exactly one outcome counter:
    /// RX, their sum, equals the kernel's count of the program's runs.
    pub fn assert_balanced(&self, ctx: &str) {
        let s = self.stats();
        assert_eq!(
            s[WEIR_STAT_RX as usize],
            self.run_count(),
            "{ctx}: the sum of outcome counters is not the number of packets run: {}",
            fmt_stats(&s)
        );
    }

    /// How often the kernel ran the program since it was loaded.
    pub fn run_count(&self) -> u64 {
        use std::os::fd::AsRawFd;
        let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: `info` is a bpf_prog_info of `len` bytes; no pointer field is set.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                self.lb.prog_fd().as_raw_fd(),
                &mut info,
                &mut len,
            )
        };
        assert_eq!(rc, 0, "reading weir_lb's program info");
        info.run_cnt
    }
}

/// Turns the kernel's BPF run statistics on until the returned fd closes.
fn enable_run_stats() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain syscall wrapper; a non-negative result is a new fd we own.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    assert!(fd >= 0, "BPF_ENABLE_STATS failed: {fd}");
    // SAFETY: fd was just returned to us and nothing else owns it.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

type Hook = Box<dyn Fn(&Harness)>;

/// One table-driven case.
pub struct Case {
    pub name: String,
    pub input: Vec<u8>,
    pub action: XdpAction,
    /// The frame the program must leave; `None`: unchanged.
    pub output: Option<Vec<u8>>,
    /// The one outcome counter this packet must end in.
    pub outcome: u32,
    /// Event counters that must go up by exactly one (all others stay).
    pub events: Vec<u32>,
    /// Whether the output is a rewritten TCP/UDP frame whose checksums are
    /// recomputed from scratch and compared.
    pub verify_csum: bool,
    /// Runs before the packet (map setup).
    pub before: Option<Hook>,
    /// Runs after the packet (map state assertions).
    pub after: Option<Hook>,
}

impl Case {
    pub fn new(name: impl Into<String>, input: Vec<u8>, action: XdpAction, outcome: u32) -> Case {
        Case {
            name: name.into(),
            input,
            action,
            output: None,
            outcome,
            events: Vec::new(),
            verify_csum: false,
            before: None,
            after: None,
        }
    }

    pub fn output(mut self, out: Vec<u8>) -> Case {
        self.output = Some(out);
        self.verify_csum = true;
        self
    }

    /// An output whose checksums are not TCP/UDP-verifiable (e.g. padding).
    pub fn raw_output(mut self, out: Vec<u8>) -> Case {
        self.output = Some(out);
        self
    }

    pub fn events(mut self, ev: &[u32]) -> Case {
        self.events = ev.to_vec();
        self
    }

    pub fn before(mut self, f: impl Fn(&Harness) + 'static) -> Case {
        self.before = Some(Box::new(f));
        self
    }

    pub fn after(mut self, f: impl Fn(&Harness) + 'static) -> Case {
        self.after = Some(Box::new(f));
        self
    }
}

/// Runs the cases in order on `h`, checking verdict, output, checksums and
/// the exact counter deltas of each. Returns the number of cases run.
pub fn run_cases(h: &Harness, cases: Vec<Case>) -> usize {
    let n = cases.len();
    for c in cases {
        if let Some(f) = &c.before {
            f(h);
        }
        let before = h.stats();
        let r = h.run(&c.input);
        let after = h.stats();
        let name = &c.name;
        assert_eq!(
            r.action(),
            Some(c.action),
            "{name}: verdict (raw {}); counters moved: {}",
            r.raw,
            fmt_delta(&before, &after)
        );
        let want = c.output.as_ref().unwrap_or(&c.input);
        assert!(
            &r.packet == want,
            "{name}: output frame differs from the expected one:\n{}",
            diff(&r.packet, want)
        );
        if c.verify_csum {
            verify_checksums(&r.packet).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let mut expect = vec![0u64; WEIR_STAT_MAX as usize];
        expect[WEIR_STAT_RX as usize] = 1;
        expect[c.outcome as usize] += 1;
        for e in &c.events {
            expect[*e as usize] += 1;
        }
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(
            delta,
            expect,
            "{name}: counter deltas: have [{}], want [{}]",
            fmt_stats(&delta),
            fmt_stats(&expect)
        );
        h.assert_balanced(name);
        if let Some(f) = &c.after {
            f(h);
        }
    }
    n
}

fn fmt_delta(before: &[u64], after: &[u64]) -> String {
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    fmt_stats(&d)
}
