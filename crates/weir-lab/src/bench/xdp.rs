//! `weir bench xdp`: the cost per packet of `weir_lb`, measured with
//! BPF_PROG_TEST_RUN side by side with the floor program `xdp_floor`
//! (bpf/minimal.bpf.c: swap the MAC addresses, XDP_TX).
//!
//! What is measured, and how (also written into the JSON as `method`):
//!
//! - Setup. One private `weir_lb` per table size (nothing pinned or
//!   attached), all with the same table capacity, the FIB lookup off, one
//!   TCP VIP 10.255.0.1:80 and one DIP with a configured MAC.
//!   BPF_PROG_TEST_RUN runs an XDP program as if the packet had arrived on
//!   the loopback device of the caller's namespace, so that interface is
//!   registered in `ifaces` and a hit leaves by XDP_TX. The bench checks it:
//!   a NAT miss records the ingress ifindex in its reverse entry. test_run of
//!   XDP_TX returns the verdict and the packet without transmitting anything,
//!   for both programs.
//! - Connections. Each instance's connection table and reverse table are
//!   filled from user space with batch updates to its size (1, 1k, 100k, 1M
//!   by default): distinct client address/port pairs towards the VIP.
//! - Hot mode ("hot"). One test_run call repeats one packet `--repeat` times
//!   and the kernel reports the mean time per repetition (whole ns,
//!   truncated). Run i uses another connection drawn at random from the
//!   installed ones (`--keys` of them, i mod keys); with one key repeated the
//!   caches hold its bucket and entries, so this mode shows the instruction
//!   cost and hides most of the table size.
//! - Spread mode ("spread"). `--spread` test_run calls of one repetition
//!   each per run, every call another connection drawn at random from the
//!   table: each lookup starts from the caches a syscall left behind, which
//!   is where the table size shows. The figure includes the kernel's timer
//!   reads around a single repetition, for the floor as well.
//!   Between calls the syscall and the other instances' runs evict caches
//!   and TLB entries: spread is the pessimistic bound for real traffic, hot
//!   the optimistic one.
//! - The miss path can only be measured in spread mode (the first
//!   repetition installs the connection and the rest would be hits): every
//!   call is a SYN of a new connection, dispatched by AWFD and installed, on
//!   the largest table.
//! - In nat mode the packet left by one repetition is the input of the next
//!   (test_run does not restore it), so the DIP has the VIP's address and
//!   port: the rewrite and both incremental checksum updates are still
//!   computed, and every repetition is again a packet to the VIP.
//! - In every run the floor and all table sizes run once, in an order that
//!   rotates from run to run, so machine noise hits all of them. Rows report
//!   the median over `--runs` runs, min..max, the median of the per-run
//!   ratio to the floor and of the per-run ratio to the smallest table.
//! - After every series the data-plane counters prove what ran: every
//!   repetition of a hit series counted a connection hit and an XDP_TX,
//!   every miss call installed a connection.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::{MapCore, MapFlags, ProgramMut};
use serde::Serialize;
use weir_abi::*;
use weir_core::awfd::AwfdTable;
use weir_core::flow::{addr_words, FlowTuple, Proto};
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};
use weir_dataplane::maps::Maps;
use weir_dataplane::minimal;
use weir_dataplane::testrun::{self, XdpAction};

/// Targets of issue 2, item 5.
const TARGET_HIT1_OVER_FLOOR: f64 = 2.0;
const TARGET_HITMAX_OVER_HIT1: f64 = 1.5;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);
const VIP_PORT: u16 = 80;
const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
const DIP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const DIP_GEN: u32 = 1;
const TABLE_VERSION: u32 = 1;
/// Frame length of every test packet: Ethernet + IPv4 + TCP + 10 bytes.
const FRAME_LEN: usize = 64;
const FILL_BATCH: usize = 8192;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// Arguments of `weir bench xdp`.
#[derive(Debug, Clone, clap::Args)]
pub struct XdpBenchArgs {
    /// Repetitions of one packet per BPF_PROG_TEST_RUN call (hot mode).
    #[arg(long, default_value_t = 1_000_000)]
    pub repeat: u32,
    /// Measured runs per row; rows report the median and min..max over runs.
    #[arg(long, default_value_t = 9)]
    pub runs: u32,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Largest connection-table fill; larger --sizes are dropped.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_conns: u32,
    /// Connection-table fills to measure the hit path at, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [1u32, 1_000, 100_000, 1_000_000]
    )]
    pub sizes: Vec<u32>,
    /// Distinct installed connections measured in hot mode (run i uses key i mod keys).
    #[arg(long, default_value_t = 5)]
    pub keys: u32,
    /// test_run calls (one repetition each, each another connection) per spread-mode run.
    #[arg(long, default_value_t = 4096)]
    pub spread: u32,
    /// Forwarding modes of the VIP to measure, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Mode::Nat, Mode::Dsr])]
    pub modes: Vec<Mode>,
    /// Seed of the random choice of measured connections.
    #[arg(long, default_value_t = 0x7765_6972)]
    pub seed: u64,
}

impl Default for XdpBenchArgs {
    fn default() -> Self {
        XdpBenchArgs {
            repeat: 1_000_000,
            runs: 9,
            json: None,
            max_conns: 1_000_000,
            sizes: vec![1, 1_000, 100_000, 1_000_000],
            keys: 5,
            spread: 4096,
            modes: vec![Mode::Nat, Mode::Dsr],
            seed: 0x7765_6972,
        }
    }
}

/// A VIP forwarding mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Nat,
    Dsr,
}

impl Mode {
    fn raw(self) -> u8 {
        match self {
            Mode::Nat => WEIR_MODE_NAT as u8,
            Mode::Dsr => WEIR_MODE_DSR as u8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::Dsr => "dsr",
        }
    }
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// "hit" or "miss".
    pub path: &'static str,
    pub mode: Mode,
    /// Connections installed when measured.
    pub conns: u64,
    /// "hot" (one packet repeated) or "spread" (one repetition per call, random connections).
    pub measure: &'static str,
    /// weir_lb, ns per packet: median, min and max over runs.
    pub ns_median: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    /// xdp_floor measured next to it, ns per packet, median over runs.
    pub floor_ns_median: f64,
    /// Per-run ratio weir_lb / floor: median, min and max.
    pub ratio_median: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// ns_median of this row / ns_median of the hit row with the fewest
    /// connections (same mode and measure).
    pub over_hit_min: Option<f64>,
    pub runs: u32,
    /// Repetitions per test_run call.
    pub repeat: u32,
    /// test_run calls per run.
    pub calls_per_run: u32,
    /// Distinct connections the measurement cycled over.
    pub distinct_keys: u32,
}

/// Figures checked against the targets of issue 2.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub mode: Mode,
    pub measure: &'static str,
    pub hit_min_conns: u64,
    pub hit_max_conns: u64,
    /// hit path with the fewest connections / floor (target <= 2.0).
    pub hit_min_over_floor: f64,
    pub hit_min_over_floor_ok: bool,
    /// hit path with the most connections / with the fewest (target <= 1.5).
    pub hit_max_over_hit_min: f64,
    pub hit_max_over_hit_min_ok: bool,
}

/// Everything `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub kernel: String,
    pub cpus: usize,
    pub method: Vec<&'static str>,
    pub config: Config,
    pub targets: Targets,
    pub rows: Vec<Row>,
    pub verdicts: Vec<Verdict>,
    pub fill_seconds: f64,
    pub total_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub repeat: u32,
    pub runs: u32,
    pub keys: u32,
    pub spread: u32,
    pub sizes: Vec<u32>,
    pub modes: Vec<Mode>,
    pub seed: u64,
    pub conn_capacity: u32,
    pub frame_bytes: usize,
    pub packet: &'static str,
    /// The ingress ifindex test_run gave the program (read back from a reverse-NAT entry).
    pub test_run_ingress_ifindex: u32,
    pub loopback_ifindex: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Targets {
    pub hit1_over_floor_max: f64,
    pub hit1m_over_hit1_max: f64,
}

const METHOD: &[&str] = &[
    "BPF_PROG_TEST_RUN on weir_lb and on xdp_floor (swap MACs, XDP_TX) with the same 64-byte IPv4/TCP frames; the figure is the kernel's duration per repetition (syscall overhead excluded)",
    "one private weir_lb per table size (nothing pinned or attached), all with the same table capacity: fib_lookup off, one TCP VIP, one DIP with a configured MAC; test_run's ingress is the loopback device (checked), registered in `ifaces`, so hits end in XDP_TX",
    "test_run of XDP_TX returns the verdict and the packet without transmitting: no driver or NIC cost in any figure",
    "connection and reverse-NAT tables filled from user space with batch updates (BPF_MAP_UPDATE_BATCH)",
    "hot: one packet repeated `repeat` times per call (kernel mean, whole ns, truncated); run i uses installed connection i mod `keys`, drawn at random per table; the caches keep that connection's entries warm, so this is the instruction cost",
    "spread: `spread` calls of one repetition each per run, every call a connection drawn at random from the table; shows the table size through cache misses; includes the kernel's timer reads around one repetition, as does the floor it is compared with; between calls the syscall and the other tables' runs evict caches and TLB entries, so spread is the pessimistic bound and hot the optimistic one for real traffic",
    "miss: spread mode only (a repeated packet hits after its first repetition); every call a SYN of a new connection, dispatched by AWFD and installed, on the largest table",
    "nat: test_run does not restore the packet between repetitions, so the DIP has the VIP's address and port; the rewrite and the checksum updates still run and every repetition is a packet to the VIP",
    "per run the floor and every table size run in an order that rotates from run to run, so machine noise hits all of them; rows are medians over runs; x floor = median of per-run weir_lb/floor; x hit(1) = median of per-run ns / ns of the smallest table",
    "counters checked after every series: each hit repetition counted a connection hit and an XDP_TX, each miss call installed a connection",
];

/// Runs the benchmark, prints the table and writes the JSON if asked.
pub fn run(args: &XdpBenchArgs) -> Result<()> {
    let report = measure(args)?;
    print!("{}", render(&report));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the benchmark and returns the report without printing it.
pub fn measure(args: &XdpBenchArgs) -> Result<Report> {
    let started = Instant::now();
    ensure!(args.repeat >= 1, "--repeat must be at least 1");
    ensure!(args.runs >= 1, "--runs must be at least 1");
    ensure!(args.keys >= 1, "--keys must be at least 1");
    ensure!(args.spread >= 1, "--spread must be at least 1");
    ensure!(!args.modes.is_empty(), "--modes needs at least one mode");
    let mut sizes: Vec<u32> = args
        .sizes
        .iter()
        .copied()
        .filter(|&n| n >= 1 && n <= args.max_conns)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    ensure!(
        !sizes.is_empty(),
        "no connection-table size between 1 and --max-conns {}",
        args.max_conns
    );
    let largest = *sizes.last().unwrap();
    let mut modes = args.modes.clone();
    modes.sort_by_key(|m| m.name());
    modes.dedup();

    // One capacity for every instance, so the fill is the only difference:
    // room for the largest fill, every miss the bench installs, and LRU
    // slack (an LRU hash may evict before it is completely full).
    let misses = u64::from(args.runs) * u64::from(args.spread) * modes.len() as u64;
    let capacity = u64::from(largest) + u64::from(largest) / 4 + misses + 4096;
    let conn_capacity = u32::try_from(capacity).context("connection table too large")?;

    let lo = lo_ifindex()?;
    let floor = minimal::load()?;
    let mut rng = SplitMix(args.seed);
    let mut insts = Vec::new();
    let mut fill_seconds = 0.0;
    for &size in &sizes {
        let inst = Inst::new(u64::from(size), conn_capacity, lo)?;
        let t = Instant::now();
        inst.fill()?;
        fill_seconds += t.elapsed().as_secs_f64();
        inst.verify_installed(&mut rng)?;
        insts.push(inst);
    }
    let ingress = insts[0].probe_ingress()?;
    ensure!(
        ingress == lo,
        "BPF_PROG_TEST_RUN gave ingress ifindex {ingress}, expected loopback's {lo}"
    );

    let floor_prog = &floor.progs.xdp_floor;
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for &mode in &modes {
        for inst in &insts {
            inst.set_mode(mode)?;
        }

        // Hot mode: every instance's own random connections, one per run.
        eprintln!("measuring the hit path, {} mode, hot", mode.name());
        let hot_pkts: Vec<Vec<Set>> = insts
            .iter()
            .map(|i| {
                (0..args.keys)
                    .map(|_| vec![packet(rng.below(i.size), TCP_ACK)])
                    .collect()
            })
            .collect();
        let series = Series {
            path: "hit",
            measure: "hot",
            repeat: args.repeat,
            runs: args.runs,
        };
        let hot = series.run(floor_prog, &insts, &hot_pkts)?;
        rows.extend(series.rows(mode, &insts, &hot_pkts, &hot));
        verdicts.push(verdict(mode, "hot", &insts, &hot));

        // Spread mode: `spread` random connections per run, one call each.
        eprintln!("measuring the hit path, {} mode, spread", mode.name());
        let spread_pkts: Vec<Vec<Set>> = insts
            .iter()
            .map(|i| {
                vec![(0..args.spread)
                    .map(|_| packet(rng.below(i.size), TCP_ACK))
                    .collect()]
            })
            .collect();
        let series = Series {
            path: "hit",
            measure: "spread",
            repeat: 1,
            runs: args.runs,
        };
        let spread = series.run(floor_prog, &insts, &spread_pkts)?;
        rows.extend(series.rows(mode, &insts, &spread_pkts, &spread));
        verdicts.push(verdict(mode, "spread", &insts, &spread));
    }

    // The miss path, on the largest table: SYNs of new connections.
    let big = std::slice::from_ref(insts.last().unwrap());
    let mut next_fresh = u64::from(largest) + 1_000_000;
    for &mode in &modes {
        big[0].set_mode(mode)?;
        eprintln!("measuring the miss path, {} mode, spread", mode.name());
        let batches: Vec<Vec<Set>> = vec![(0..args.runs)
            .map(|_| {
                (0..args.spread)
                    .map(|_| {
                        next_fresh += 1;
                        packet(next_fresh, TCP_SYN)
                    })
                    .collect()
            })
            .collect()];
        let series = Series {
            path: "miss",
            measure: "spread",
            repeat: 1,
            runs: args.runs,
        };
        let m = series.run(floor_prog, big, &batches)?;
        rows.extend(series.rows(mode, big, &batches, &m));
    }

    Ok(Report {
        bench: "xdp",
        kernel: kernel_release(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        method: METHOD.to_vec(),
        config: Config {
            repeat: args.repeat,
            runs: args.runs,
            keys: args.keys,
            spread: args.spread,
            sizes,
            modes,
            seed: args.seed,
            conn_capacity,
            frame_bytes: FRAME_LEN,
            packet: "Ethernet + IPv4 + TCP (ACK for hits, SYN for misses) + 10 bytes, 64 bytes, valid checksums",
            test_run_ingress_ifindex: ingress,
            loopback_ifindex: lo,
        },
        targets: Targets {
            hit1_over_floor_max: TARGET_HIT1_OVER_FLOOR,
            hit1m_over_hit1_max: TARGET_HITMAX_OVER_HIT1,
        },
        rows,
        verdicts,
        fill_seconds,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Packets measured together: one packet repeated, or one call per packet.
type Set = Vec<Vec<u8>>;

/// One series of runs: per run, the floor and every instance, in an order
/// that rotates from run to run.
struct Series {
    path: &'static str,
    measure: &'static str,
    /// Repetitions per call; 1 = one call per packet.
    repeat: u32,
    runs: u32,
}

/// ns per packet of one run: the floor and each instance.
struct RunTimes {
    floor: f64,
    lb: Vec<f64>,
}

impl Series {
    /// `pkts[inst][set]` is a set of packets; run r uses set r mod len. With
    /// repeat > 1 a set is one packet repeated; with repeat 1 every packet
    /// of the set is one call and the run's figure is the mean.
    fn run(
        &self,
        floor: &ProgramMut<'_>,
        insts: &[Inst],
        pkts: &[Vec<Set>],
    ) -> Result<Vec<RunTimes>> {
        let time = |prog: &ProgramMut<'_>, set: &[Vec<u8>]| -> Result<f64> {
            let mut sum = 0.0;
            for p in set {
                sum += timed(prog, p, self.repeat)?;
            }
            Ok(sum / set.len() as f64)
        };
        // Warm-up, not counted.
        for (inst, sets) in insts.iter().zip(pkts) {
            for set in sets {
                for p in set.iter().take(64) {
                    if self.path == "hit" {
                        timed(floor, p, 1000.min(self.repeat))?;
                        timed(inst.prog(), p, 1000.min(self.repeat))?;
                    }
                }
            }
        }
        let before: Vec<Vec<u64>> = insts
            .iter()
            .map(|i| i.maps.stats())
            .collect::<Result<_>>()?;
        let mut calls = vec![0u64; insts.len()];
        let mut out = Vec::new();
        let n = insts.len() + 1;
        for r in 0..self.runs as usize {
            let mut t = RunTimes {
                floor: 0.0,
                lb: vec![0.0; insts.len()],
            };
            for k in 0..n {
                let slot = (k + r) % n;
                if slot == 0 {
                    // The floor runs on the packets of the instance after it.
                    let sets = &pkts[r % insts.len()];
                    t.floor = time(floor, &sets[r % sets.len()])?;
                } else {
                    let i = slot - 1;
                    let set = &pkts[i][r % pkts[i].len()];
                    t.lb[i] = time(insts[i].prog(), set)?;
                    calls[i] += set.len() as u64;
                }
            }
            out.push(t);
        }
        for (i, inst) in insts.iter().enumerate() {
            let after = inst.maps.stats()?;
            let b = &before[i];
            let reps = calls[i] * u64::from(self.repeat);
            check_delta(b, &after, WEIR_STAT_TX, reps, "XDP_TX")?;
            if self.path == "hit" {
                check_delta(b, &after, WEIR_STAT_CONN_HIT, reps, "connection hits")?;
                check_delta(b, &after, WEIR_STAT_CONN_MISS, 0, "connection misses")?;
            } else {
                check_delta(b, &after, WEIR_STAT_CONN_MISS, reps, "connection misses")?;
                check_delta(b, &after, WEIR_STAT_CONN_NEW, reps, "installed connections")?;
            }
        }
        Ok(out)
    }

    fn rows(&self, mode: Mode, insts: &[Inst], pkts: &[Vec<Set>], times: &[RunTimes]) -> Vec<Row> {
        let floor: Vec<f64> = times.iter().map(|t| t.floor).collect();
        insts
            .iter()
            .enumerate()
            .map(|(i, inst)| {
                let lb: Vec<f64> = times.iter().map(|t| t.lb[i]).collect();
                let ratio: Vec<f64> = times.iter().map(|t| t.lb[i] / t.floor.max(1e-9)).collect();
                let growth: Vec<f64> = times.iter().map(|t| t.lb[i] / t.lb[0].max(1e-9)).collect();
                let (lo, med, hi) = stats(&lb);
                let (rlo, rmed, rhi) = stats(&ratio);
                let mut distinct: Vec<&Vec<u8>> = pkts[i].iter().flatten().collect();
                distinct.sort();
                distinct.dedup();
                Row {
                    path: self.path,
                    mode,
                    conns: inst.size,
                    measure: self.measure,
                    ns_median: med,
                    ns_min: lo,
                    ns_max: hi,
                    floor_ns_median: stats(&floor).1,
                    ratio_median: rmed,
                    ratio_min: rlo,
                    ratio_max: rhi,
                    over_hit_min: (self.path == "hit").then(|| stats(&growth).1),
                    runs: self.runs,
                    repeat: self.repeat,
                    calls_per_run: pkts[i][0].len() as u32,
                    distinct_keys: distinct.len() as u32,
                }
            })
            .collect()
    }
}

fn verdict(mode: Mode, measure: &'static str, insts: &[Inst], times: &[RunTimes]) -> Verdict {
    let last = insts.len() - 1;
    let ratio: Vec<f64> = times.iter().map(|t| t.lb[0] / t.floor.max(1e-9)).collect();
    let growth: Vec<f64> = times
        .iter()
        .map(|t| t.lb[last] / t.lb[0].max(1e-9))
        .collect();
    let ratio = stats(&ratio).1;
    let growth = stats(&growth).1;
    Verdict {
        mode,
        measure,
        hit_min_conns: insts[0].size,
        hit_max_conns: insts[last].size,
        hit_min_over_floor: ratio,
        hit_min_over_floor_ok: ratio <= TARGET_HIT1_OVER_FLOOR,
        hit_max_over_hit_min: growth,
        hit_max_over_hit_min_ok: growth <= TARGET_HITMAX_OVER_HIT1,
    }
}

/// One loaded `weir_lb` with its connection table filled to `size`.
struct Inst {
    size: u64,
    lb: LoadedLb,
    maps: Maps,
    lo: u32,
}

impl Inst {
    fn new(size: u64, conn_capacity: u32, lo: u32) -> Result<Inst> {
        let opts = LoadOptions {
            conn_capacity,
            fib_lookup: false,
            pin_dir: None,
            ..LoadOptions::default()
        };
        let lb = loader::load(&opts).context("loading weir_lb (the bench needs root)")?;
        let maps = Maps::of(&lb.skel)?;
        let (vip_addr, family) = addr_words(IpAddr::V4(VIP));
        let dip = weir_dip {
            // The VIP's own address and port: see the module documentation.
            addr: vip_addr,
            port: VIP_PORT.to_be(),
            family,
            mac_set: 1,
            mac: DIP_MAC,
            pad: [0; 2],
            flags: WEIR_DIP_F_LIVE,
            gen: DIP_GEN,
            vip_id: 0,
            weight: 1,
        };
        maps.put_dip(0, &dip)?;
        let table = AwfdTable::from_weights(&[(0, 1)]).map_err(anyhow::Error::msg)?;
        maps.publish_table(0, TABLE_VERSION, &table)?;
        maps.put_iface(lo, LB_MAC)?;
        let inst = Inst { size, lb, maps, lo };
        inst.set_mode(Mode::Nat)?;
        Ok(inst)
    }

    fn prog(&self) -> &ProgramMut<'static> {
        &self.lb.skel.progs.weir_lb
    }

    fn set_mode(&self, mode: Mode) -> Result<()> {
        let (addr, family) = addr_words(IpAddr::V4(VIP));
        let key = weir_vip_key {
            addr,
            port: VIP_PORT.to_be(),
            proto: Proto::Tcp.number(),
            family,
        };
        let vip = weir_vip {
            vip_id: 0,
            mode: mode.raw(),
            pad: [0; 3],
        };
        self.maps.put_vip(&key, &vip)
    }

    /// Sends one NAT SYN of a new connection and reads the ingress ifindex
    /// the program saw from the reverse entry it installed; removes both
    /// entries again.
    fn probe_ingress(&self) -> Result<u32> {
        self.set_mode(Mode::Nat)?;
        let idx = self.size + 500_000;
        let out = testrun::run(self.prog(), &packet(idx, TCP_SYN), 1)?;
        ensure!(
            out.action() == Some(XdpAction::Tx),
            "probe: weir_lb returned {} instead of XDP_TX",
            out.raw
        );
        let key = flow(idx).key();
        let rkey = reverse_key(&key);
        let rev = self
            .maps
            .rev_nat(&rkey)?
            .context("probe: no reverse-NAT entry installed")?;
        self.maps.conns.delete(key.as_bytes())?;
        self.maps.rev_nat.delete(rkey.as_bytes())?;
        Ok(rev.ifindex)
    }

    /// Installs connections 0..size in the connection and reverse tables.
    fn fill(&self) -> Result<()> {
        let conn = weir_conn {
            dip_id: 0,
            dip_gen: DIP_GEN,
            table_version: TABLE_VERSION,
            req_us: 0,
            created_ns: 0,
        };
        let (vip, family) = addr_words(IpAddr::V4(VIP));
        let rev = weir_rev_nat {
            vip,
            vport: VIP_PORT.to_be(),
            family,
            pad: 0,
            vip_id: 0,
            ifindex: self.lo,
            client_mac: CLIENT_MAC,
            lb_mac: LB_MAC,
        };
        let started = Instant::now();
        let to = self.size;
        let show = to >= 10_000;
        let mut i = 0;
        let (mut keys, mut vals, mut rkeys, mut rvals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        while i < to {
            let n = (to - i).min(FILL_BATCH as u64);
            keys.clear();
            vals.clear();
            rkeys.clear();
            rvals.clear();
            for j in i..i + n {
                let key = flow(j).key();
                keys.extend_from_slice(key.as_bytes());
                vals.extend_from_slice(conn.as_bytes());
                rkeys.extend_from_slice(reverse_key(&key).as_bytes());
                rvals.extend_from_slice(rev.as_bytes());
            }
            self.maps
                .conns
                .update_batch(&keys, &vals, n as u32, MapFlags::ANY, MapFlags::ANY)
                .context("batch update of the connection table")?;
            self.maps
                .rev_nat
                .update_batch(&rkeys, &rvals, n as u32, MapFlags::ANY, MapFlags::ANY)
                .context("batch update of the reverse-NAT table")?;
            i += n;
            if show {
                eprint!(
                    "\rfilling a connection table: {i} / {to} ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
            }
        }
        if show {
            eprintln!();
        }
        Ok(())
    }

    /// Checks that the first, the last and a random sample of the installed
    /// connections are in both tables (an LRU may have evicted some).
    fn verify_installed(&self, rng: &mut SplitMix) -> Result<()> {
        let n = self.size;
        let mut sample: Vec<u64> = vec![0, n - 1];
        sample.extend((0..1000.min(n)).map(|_| rng.below(n)));
        for i in sample {
            let key = flow(i).key();
            if self.maps.conn(&key)?.is_none() {
                bail!("connection {i} of {n} is missing from the table (evicted?)");
            }
            if self.maps.rev_nat(&reverse_key(&key))?.is_none() {
                bail!("reverse entry of connection {i} of {n} is missing (evicted?)");
            }
        }
        Ok(())
    }
}

fn check_delta(before: &[u64], after: &[u64], stat: u32, want: u64, what: &str) -> Result<()> {
    let got = after[stat as usize] - before[stat as usize];
    ensure!(
        got == want,
        "the counters disagree with the benchmark: {got} {what}, expected {want}; the measurement is not what it claims"
    );
    Ok(())
}

/// Mean ns per repetition of `repeat` runs of `prog` on `pkt`, as the
/// kernel timed them (whole ns, truncated); the verdict must be XDP_TX.
fn timed(prog: &ProgramMut<'_>, pkt: &[u8], repeat: u32) -> Result<f64> {
    let out = testrun::run(prog, pkt, repeat)?;
    ensure!(
        out.action() == Some(XdpAction::Tx),
        "{} returned {} instead of XDP_TX",
        prog.name().to_string_lossy(),
        out.raw
    );
    Ok(out.duration.as_nanos() as f64)
}

/// (min, median, max).
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (s[0], med, s[n - 1])
}

/// The text table.
pub fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "weir bench xdp: BPF_PROG_TEST_RUN, {}-byte IPv4/TCP frames, kernel {}, {} CPUs",
        report.config.frame_bytes, report.kernel, report.cpus
    );
    let _ = writeln!(
        s,
        "hot = one packet x{} per call (runs cycle over {} random installed connections); \
         spread = {} calls x1 repetition, each a random connection",
        report.config.repeat, report.config.keys, report.config.spread
    );
    let _ = writeln!(
        s,
        "medians over {} runs; every table size has its own weir_lb, run in rotating order with the floor xdp_floor (swap MACs, XDP_TX);\n\
         ns are the kernel's (hot: whole ns, truncated); test_run does not transmit XDP_TX; x hit(1) = median per-run ns / ns with the fewest connections",
        report.config.runs
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<5} {:<4} {:>9} {:<7} {:>9} {:>17} {:>9} {:>8} {:>15} {:>8}",
        "path",
        "mode",
        "conns",
        "measure",
        "ns/pkt",
        "min..max",
        "floor ns",
        "x floor",
        "x floor range",
        "x hit(1)"
    );
    let mut rows: Vec<&Row> = report.rows.iter().collect();
    rows.sort_by_key(|r| (r.measure, r.mode.name(), r.path, r.conns));
    let mut last = ("", "");
    for r in rows {
        if (r.measure, r.mode.name()) != last && last != ("", "") {
            let _ = writeln!(s);
        }
        last = (r.measure, r.mode.name());
        let _ = writeln!(
            s,
            "{:<5} {:<4} {:>9} {:<7} {:>9.1} {:>17} {:>9.1} {:>7.2}x {:>15} {:>8}",
            r.path,
            r.mode.name(),
            r.conns,
            r.measure,
            r.ns_median,
            format!("{:.1}..{:.1}", r.ns_min, r.ns_max),
            r.floor_ns_median,
            r.ratio_median,
            format!("{:.2}..{:.2}", r.ratio_min, r.ratio_max),
            r.over_hit_min
                .filter(|_| r.path == "hit")
                .map_or("-".to_string(), |x| format!("{x:.2}x")),
        );
    }
    let _ = writeln!(s);
    for v in &report.verdicts {
        let _ = writeln!(
            s,
            "target {} {:<6}: hit({}) = {:.2}x floor (<= {:.1}: {}), hit({})/hit({}) = {:.2} (<= {:.1}: {})",
            v.mode.name(),
            v.measure,
            v.hit_min_conns,
            v.hit_min_over_floor,
            report.targets.hit1_over_floor_max,
            if v.hit_min_over_floor_ok { "met" } else { "MISSED" },
            v.hit_max_conns,
            v.hit_min_conns,
            v.hit_max_over_hit_min,
            report.targets.hit1m_over_hit1_max,
            if v.hit_max_over_hit_min_ok { "met" } else { "MISSED" },
        );
    }
    s
}

/// The flow of connection `i`: a distinct client address and port towards the VIP.
fn flow(i: u64) -> FlowTuple {
    let c = i / 60_000;
    let client = Ipv4Addr::new(10, (1 + ((c >> 16) % 250)) as u8, (c >> 8) as u8, c as u8);
    FlowTuple {
        src: IpAddr::V4(client),
        dst: IpAddr::V4(VIP),
        sport: 1024 + (i % 60_000) as u16,
        dport: VIP_PORT,
        proto: Proto::Tcp,
    }
}

/// The key of a connection's replies (DIP -> client); the DIP is the VIP's
/// address and port here.
fn reverse_key(key: &weir_flow_key) -> weir_flow_key {
    weir_flow_key {
        src: key.dst,
        dst: key.src,
        sport: key.dport,
        dport: key.sport,
        proto: key.proto,
        family: key.family,
        pad: [0; 2],
    }
}

/// The 64-byte frame of connection `i` with the given TCP flags.
fn packet(i: u64, tcp_flags: u8) -> Vec<u8> {
    let f = flow(i);
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (f.src, f.dst) else {
        unreachable!("the bench uses IPv4")
    };
    let mut p = vec![0u8; FRAME_LEN];
    p[0..6].copy_from_slice(&LB_MAC);
    p[6..12].copy_from_slice(&CLIENT_MAC);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (FRAME_LEN - 14) as u16;
    {
        let ip = &mut p[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let c = csum(ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    {
        let tcp_len = ip_len - 20;
        let tcp = &mut p[34..];
        tcp[0..2].copy_from_slice(&f.sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&f.dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&(i as u32).to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = tcp_flags;
        tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
        for (k, b) in tcp[20..].iter_mut().enumerate() {
            *b = b'a' + k as u8;
        }
        let mut pseudo = 0u32;
        for w in [src.octets(), dst.octets()] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + u32::from(tcp_len);
        let c = csum(tcp, pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// The Internet checksum of `data` plus a partial sum.
fn csum(data: &[u8], mut sum: u32) -> u16 {
    for ch in data.chunks(2) {
        let w = if ch.len() == 2 {
            u16::from_be_bytes([ch[0], ch[1]])
        } else {
            u16::from_be_bytes([ch[0], 0])
        };
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn lo_ifindex() -> Result<u32> {
    // SAFETY: a NUL-terminated constant string.
    let idx = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    ensure!(idx != 0, "no loopback interface in this network namespace");
    Ok(idx)
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A small deterministic generator (SplitMix64) for choosing connections.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_have_valid_checksums() {
        let p = packet(123_456, TCP_ACK);
        assert_eq!(p.len(), FRAME_LEN);
        assert_eq!(csum(&p[14..34], 0), 0, "IPv4 header checksum");
        let mut pseudo = 0u32;
        for w in [&p[26..30], &p[30..34]] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + (FRAME_LEN as u32 - 34);
        assert_eq!(csum(&p[34..], pseudo), 0, "TCP checksum");
    }

    #[test]
    fn flows_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..3_000_000u64).step_by(7) {
            assert!(seen.insert(flow(i)));
        }
        assert!(seen.insert(flow(u64::MAX / 2)));
    }

    #[test]
    fn args_parse_with_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: XdpBenchArgs,
        }
        let cli = Cli::parse_from(["x", "--sizes", "1,1000", "--modes", "dsr"]);
        assert_eq!(cli.args.sizes, vec![1, 1000]);
        assert_eq!(cli.args.modes, vec![Mode::Dsr]);
        assert_eq!(cli.args.repeat, 1_000_000);
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.args.sizes, XdpBenchArgs::default().sizes);
        assert_eq!(cli.args.modes, XdpBenchArgs::default().modes);
    }
}
