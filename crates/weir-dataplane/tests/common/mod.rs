//! Shared harness of the BPF_PROG_TEST_RUN suites: a loaded `weir_lb` with
//! a fixed configuration (VIPs, DIPs, tables), the table-driven case runner,
//! and counter bookkeeping.
//!
//! Expected DIPs come from weir-core (`AwfdTable::select` over `flow_hash`),
//! expected packets from `packet.rs`; nothing is derived from a run.
#![allow(dead_code)]

pub mod packet;

use std::net::IpAddr;

use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};
use weir_dataplane::maps::Maps;
use weir_dataplane::testrun::{self, RunResult, XdpAction};

use packet::{diff, verify_checksums};

/// BPF_PROG_TEST_RUN without a context runs as if received on loopback.
pub const TEST_IFINDEX: u32 = 1;
/// MAC of the interface weir is "attached" to (ifaces[TEST_IFINDEX]).
pub const LB_IF_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// L2 destination of the client's frames (the router's view of the VIP);
/// deliberately not LB_IF_MAC, so replies show the learned address.
pub const VIP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xcc];

pub fn dip_mac(id: u32) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, id as u8]
}

/// Every outcome counter: each packet ends in exactly one of them.
pub const OUTCOMES: std::ops::RangeInclusive<u32> = WEIR_STAT_PASS_NOT_IP..=WEIR_STAT_LAST_OUTCOME;

pub fn stat_name(i: u32) -> &'static str {
    const NAMES: [&str; WEIR_STAT_MAX as usize] = [
        "RX",
        "PASS_NOT_IP",
        "PASS_NOT_VIP",
        "PASS_ICMP",
        "PASS_FRAGMENT",
        "PASS_NO_NEIGH",
        "DROP_NOT_VIP",
        "DROP_ICMP",
        "DROP_FRAGMENT",
        "DROP_MALFORMED",
        "PASS_MALFORMED",
        "DROP_NO_BACKEND",
        "DROP_NONSYN_MISS",
        "DROP_NO_ROUTE",
        "TX",
        "REDIRECT",
        "DROP_REDIRECT",
        "DROP_REPLY_NO_STATE",
        "TO_SOFTWARE",
        "DROP_NO_WORKER",
        "DROP_TOO_BIG",
        "DROP_SYN_BUDGET",
        "CONN_HIT",
        "CONN_MISS",
        "CONN_NEW",
        "CONN_INSTALL_FAIL",
        "CONN_STALE",
        "NONSYN_MISS",
        "REV_NAT",
        "MAC_FALLBACK",
        "HALF_OPEN_NEW",
        "SYN_RETRANSMIT",
        "CONN_REUSED",
        "CONN_EXPIRED",
        "CONN_CLOSING",
    ];
    NAMES[i as usize]
}

/// One DIP slot of the fixture.
#[derive(Debug, Clone)]
pub struct Dip {
    pub id: u32,
    pub addr: IpAddr,
    /// NAT destination port; 0 keeps the VIP's port.
    pub port: u16,
}

impl Dip {
    pub fn abi(&self, gen: u32, live: bool) -> weir_dip {
        let (addr, family) = addr_words(self.addr);
        weir_dip {
            addr,
            port: self.port.to_be(),
            family,
            mac_set: 1,
            mac: dip_mac(self.id),
            flags: if live { WEIR_DIP_F_LIVE } else { 0 },
            gen,
            vip_id: 0,
            weight: 1,
            ..Default::default()
        }
    }
}

/// One VIP of the fixture with its static weights.
#[derive(Debug, Clone)]
pub struct Vip {
    pub id: u32,
    pub addr: IpAddr,
    pub port: u16,
    pub proto: Proto,
    pub mode: u32,
    /// (dip id, weight); `None`: never publish a table for this VIP.
    pub weights: Option<Vec<(u32, u32)>>,
}

impl Vip {
    pub fn key(&self) -> weir_vip_key {
        let (addr, family) = addr_words(self.addr);
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

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The fixed configuration most cases run against.
pub struct Fixture {
    pub dips: Vec<Dip>,
    pub vips: Vec<Vip>,
}

pub const NAT: u32 = WEIR_MODE_NAT;
pub const DSR: u32 = WEIR_MODE_DSR;

impl Fixture {
    pub fn standard() -> Fixture {
        let dip = |id, a: &str, port| Dip {
            id,
            addr: ip(a),
            port,
        };
        let vip = |id, a: &str, port, proto, mode, w: Option<&[(u32, u32)]>| Vip {
            id,
            addr: ip(a),
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
                // A VIP whose table is empty (every weight 0).
                vip(8, "10.0.0.102", 80, Tcp, NAT, Some(&[(1, 0)])),
                // A VIP that never got a table.
                vip(9, "2001:db8::102", 80, Tcp, NAT, None),
                // An IPv4 VIP whose only DIP is IPv6 (a misconfiguration).
                vip(10, "10.0.0.103", 80, Tcp, NAT, Some(&[(11, 1)])),
                // NAT VIP whose DIP 4 rewrites the port to 9090.
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

    /// The service endpoints of the nat VIPs' DIPs, each with the nat
    /// VIPs it serves (what `apply` writes).
    pub fn nat_endpoints(&self) -> std::collections::HashMap<weir_endpoint, weir_nat_endpoint> {
        let mut out = std::collections::HashMap::new();
        for v in self.vips.iter().filter(|v| v.mode == NAT) {
            for (id, _) in v.weights.iter().flatten() {
                let d = self.dip(*id);
                let (addr, family) = addr_words(d.addr);
                let port = if d.port == 0 { v.port } else { d.port };
                let ep = weir_endpoint {
                    addr,
                    port: port.to_be(),
                    proto: v.proto.number(),
                    family,
                };
                let value: &mut weir_nat_endpoint = out.entry(ep).or_default();
                value.vips[value.count as usize] = weir_vip_addr {
                    addr: addr_words(v.addr).0,
                    port: v.port.to_be(),
                    pad: [0; 2],
                };
                value.count += 1;
            }
        }
        out
    }

    /// The DIP weir-core predicts for a new flow to `vip`.
    pub fn predict(&self, vip: u32, tuple: &FlowTuple) -> Option<&Dip> {
        let h = flow_hash(&tuple.key(), DEFAULT_SEED);
        self.vip(vip).table().select(h).map(|id| self.dip(id))
    }
}

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
            h.maps
                .put_vip(
                    &v.key(),
                    &weir_vip {
                        vip_id: v.id,
                        mode: v.mode as u8,
                        ..Default::default()
                    },
                )
                .unwrap();
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

pub fn fmt_stats(s: &[u64]) -> String {
    s.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, v)| format!("{}={v}", stat_name(i as u32)))
        .collect::<Vec<_>>()
        .join(" ")
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
