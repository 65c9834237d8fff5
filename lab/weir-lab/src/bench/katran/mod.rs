//! `weir-lab bench katran`: weir_lb side by side with Katran's XDP balancer,
//! built from Katran's own source (lab/scripts/katran-build.sh), both timed
//! with BPF_PROG_TEST_RUN on the same frames, interleaved.
//!
//! What is measured, and how (also written into the JSON as `method`):
//!
//! - weir: `weir_lb` as `bench xdp` loads it (its Inst), in the
//!   configuration `weir serve` runs by default (the DIP's next hop resolved
//!   into its slot, shared LRU, half-open table a quarter of the connection
//!   table), one TCP VIP and one DIP, in dsr and in nat mode (the VIP's mode
//!   switched between them). Every forwarded packet ends in XDP_REDIRECT.
//! - Katran: `balancer_ingress` of balancer.bpf.o built with Katran's
//!   defaults, configured as its library does: the same VIP (TCP, port 80),
//!   three reals of the VIP's family, their CH ring, the default router's
//!   MAC in ctl_array, and one connection table (an LRU hash as Katran makes
//!   per forwarding CPU) named by every CPU's slot of lru_mapping. Every
//!   forwarded packet is encapsulated (IPIP, or IPv6-in-IPv6) and ends in
//!   XDP_TX: Katran has no other way to forward.
//! - One weir_lb and one Katran per table size, each connection table
//!   filled from user space with the same flows (`bench xdp`'s), weir's
//!   dated IDLE_AGE back.
//! - Per run, Katran, weir dsr and weir nat in an order that rotates from
//!   run to run; a row reports each one's median ns and the median of the
//!   per-run ratio weir/Katran.
//! - hot: one packet repeated `repeat` times per call; only where Katran's
//!   repeated packet is still a packet to the VIP, which it is not: Katran
//!   encapsulates in place and test_run does not restore the packet between
//!   repetitions, so its second repetition would parse its own IPIP packet.
//!   The bench therefore measures the same connection with one call per
//!   packet (hot1) and says so.
//! - hot1: `spread` calls of one repetition each on one installed connection.
//! - spread: `spread` calls per run, each a connection no packet has used
//!   since the fill (weir: idle past every refresh interval), each
//!   contender its own.
//! - miss: `spread` SYNs of new connections per run, each installed; weir's
//!   half-open table is filled to its capacity first as a flood leaves it;
//!   Katran's rate limit of new connections per second (MAX_CONN_RATE, past
//!   which it stops installing) starts a new second before each run.
//! - Counters after every series: weir's (every hit a connection hit and an
//!   XDP_REDIRECT, every SYN a miss that installed a half-open entry) and
//!   Katran's stats map (every packet reached the connection table and left
//!   with XDP_TX; hits found their entry; every SYN counted as a SYN miss)
//!   plus a look-up of every SYN's connection in Katran's table.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use weir_abi::*;
use weir_core::splitmix::SplitMix;
use weir_dataplane::features::Features;
use weir_dataplane::testrun::XdpAction;
use weir_progress::Progress;

use crate::bench::xdp::features_of;
use crate::bench::xdp::instance::{check_delta, timed, Capacity, Inst, Lru, NextHopSource};
use crate::bench::xdp::packet::{packet, Family};
use crate::bench::xdp::{
    kernel_release, lo_ifindex, net, program_size, stats, Mode, ProgramSize, SLOWER_THAN, TCP_ACK,
    TCP_SYN,
};

mod balancer;
mod layout;
mod report;

use balancer::Katran;
use layout::stat;
pub use report::{render, Figure, Report, Row, WeirFigure};

/// Issue 24: every path at most 0.8x Katran's cost.
pub const TARGET_OVER_KATRAN: f64 = 0.8;

/// Arguments of `weir-lab bench katran`.
#[derive(Debug, Clone, clap::Args)]
pub struct KatranBenchArgs {
    /// A Katran checkout (git clone https://github.com/facebookincubator/katran):
    /// its balancer is built with lab/scripts/katran-build.sh into target/katran.
    #[arg(long, value_name = "PATH", required_unless_present = "object")]
    pub source: Option<PathBuf>,
    /// Katran's balancer.bpf.o, already built (instead of --source).
    #[arg(long, value_name = "FILE", conflicts_with = "source")]
    pub object: Option<PathBuf>,
    /// Measured runs per row; rows report the median and min..max over runs.
    #[arg(long, default_value_t = 9)]
    pub runs: u32,
    /// test_run calls (one repetition each) per run of a hot1, spread or miss row.
    #[arg(long, default_value_t = 4096)]
    pub spread: u32,
    /// Connection-table fills, comma separated (the miss rows use the
    /// smallest and the largest).
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 1_000_000])]
    pub sizes: Vec<u32>,
    /// Distinct installed connections of the hot1 rows (run i uses key i mod keys).
    #[arg(long, default_value_t = 5)]
    pub keys: u32,
    /// Address families, comma separated, one after the other.
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = [Family::V4, Family::V6])]
    pub families: Vec<Family>,
    /// weir's forwarding modes set against Katran, comma separated (dsr, nat).
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = [Mode::Dsr, Mode::Nat])]
    pub modes: Vec<Mode>,
    /// Load weir_lb with every feature (nat, ipip, gue, QUIC, telemetry), as
    /// a configuration that uses them all does, instead of only what the
    /// timed modes need (what `weir serve` loads for such VIPs).
    #[arg(long)]
    pub all_features: bool,
    /// Seed of the random choice of measured connections.
    #[arg(long, default_value_t = 0x6b61_7472)]
    pub seed: u64,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Compare every weir figure's ratio to Katran with the same figure of
    /// an earlier `--json` report (printed as SLOWER where it grew), and
    /// weir_lb's size with that report's.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
}

const METHOD: &[&str] = &[
    "BPF_PROG_TEST_RUN on weir_lb and on Katran's balancer_ingress with the same frames: 64-byte IPv4/TCP or 84-byte IPv6/TCP, valid checksums; the figure is the kernel's duration per repetition",
    "weir_lb as `weir serve` runs it by default (the DIP's next hop resolved into its slot, shared LRU, half-open table a quarter of the connection table), one TCP VIP and one DIP, in the bench's own network namespace; dsr and nat are the VIP's mode switched between runs of the same program; a forwarded packet ends in XDP_REDIRECT",
    "Katran built from its source with its own recipe and default compile-time options (lab/scripts/katran-build.sh), configured as its library does: one TCP VIP, three reals of the VIP's family, their CH ring (an even interleave: the real a position names does not change the lookup), the default router's MAC in ctl_array, one LRU-hash connection table named by every CPU's slot of lru_mapping; a forwarded packet is encapsulated (IPIP / IPv6-in-IPv6) and ends in XDP_TX",
    "one weir_lb and one Katran per table size, connection tables filled from user space with the same flows; weir's entries dated 2 s back (past every 1 s refresh interval); Katran does not age TCP entries",
    "per run Katran and each weir mode in an order that rotates from run to run; ns = median over runs; x Katran = median of the per-run ratios weir/Katran",
    "hot1: `spread` calls of one repetition on one installed connection (run i: connection i mod `keys`); Katran cannot be timed with repeated repetitions (it encapsulates in place and test_run does not restore the packet), so no hot (repeat) row",
    "spread: `spread` calls per run, each a connection no packet has used since the fill, each contender its own",
    "miss: `spread` SYNs of new connections per run on the smallest and the largest table, each installed; weir's half-open table filled to its capacity first; Katran's new-connection rate window (MAX_CONN_RATE per second, past which it installs nothing) restarts before each run so every SYN installs",
    "counters checked after every series: weir's (hits: connection hits and XDP_REDIRECT; SYNs: misses that installed a half-open entry) and Katran's stats (every packet reached the connection table and left with XDP_TX, hits found an entry, SYNs counted as SYN misses, no fallback table) and every SYN's connection found in Katran's table",
];

/// Runs the benchmark, prints the table and writes the JSON if asked.
pub fn run(args: &KatranBenchArgs) -> Result<()> {
    let mut report = measure(args)?;
    if let Some(path) = &args.baseline {
        report::compare_with_baseline(&mut report, path)?;
    }
    print!("{}", render(&report));
    if let Some(path) = &args.json {
        super::write_json(path, &report)?;
    }
    Ok(())
}

/// Builds Katran's balancer from `source` with the build recipe; returns the object.
pub fn build(source: &Path) -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/katran-build.sh");
    let out = std::process::Command::new("sh")
        .arg(&script)
        .arg(source)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        out.status.success(),
        "building Katran from {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    ensure!(
        !path.is_empty(),
        "{} printed no object path",
        script.display()
    );
    Ok(PathBuf::from(path))
}

/// Runs the benchmark and returns the report without printing it.
pub fn measure(args: &KatranBenchArgs) -> Result<Report> {
    let started = Instant::now();
    ensure!(args.runs >= 1, "--runs must be at least 1");
    ensure!(args.spread >= 1, "--spread must be at least 1");
    ensure!(args.keys >= 1, "--keys must be at least 1");
    let mut modes = args.modes.clone();
    modes.sort_by_key(|m| m.name());
    modes.dedup();
    ensure!(!modes.is_empty(), "--modes needs at least one mode");
    if let Some(m) = modes.iter().find(|m| !matches!(m, Mode::Dsr | Mode::Nat)) {
        bail!(
            "--modes {}: the bench sets dsr and nat against Katran (use bench xdp for the encapsulating modes)",
            m.name()
        );
    }
    let mut sizes: Vec<u32> = args.sizes.iter().copied().filter(|&n| n >= 1).collect();
    sizes.sort_unstable();
    sizes.dedup();
    ensure!(!sizes.is_empty(), "--sizes needs a size of at least 1");
    let mut families = args.families.clone();
    families.sort();
    families.dedup();
    ensure!(!families.is_empty(), "--families needs at least one family");
    let object = match (&args.object, &args.source) {
        (Some(o), _) => {
            ensure!(o.is_file(), "--object {}: no such file", o.display());
            o.clone()
        }
        (None, Some(src)) => build(src)?,
        (None, None) => bail!("give Katran's source with --source PATH (or a built --object FILE)"),
    };

    // Room for the largest fill, every SYN of every contender and LRU slack.
    let largest = u64::from(*sizes.last().unwrap());
    let contenders = modes.len() as u64 + 1;
    let syns = u64::from(args.runs) * u64::from(args.spread) * contenders * 2;
    let conns = largest + largest / 4 + syns + 4096;
    let capacity = Capacity {
        conns: u32::try_from(conns).context("connection table too large")?,
        half_open: u32::try_from(conns / 4).context("half-open table too large")?,
    };
    let steps = u64::from(args.runs) * (2 * sizes.len() as u64 + 2) * families.len() as u64;
    let progress = Progress::bar("weir-lab bench katran", steps);
    let egress = net::enter()?;
    let lo = lo_ifindex()?;
    let mut rng = SplitMix(args.seed);
    let mut rows = Vec::new();
    let mut sizes_of = None;
    for &family in &families {
        let mut weir = Vec::new();
        let mut katran = Vec::new();
        for &size in &sizes {
            progress.set_message(format!(
                "{}: loading and filling {size} connections",
                family.name()
            ));
            let inst = Inst::new(
                family,
                u64::from(size),
                capacity,
                lo,
                &egress,
                NextHopSource::Resolved,
                Lru::Shared,
                // What `weir serve` loads for VIPs of the timed modes.
                match args.all_features {
                    true => Features::ALL,
                    false => features_of(&args.modes),
                },
            )?;
            inst.fill(&progress)?;
            inst.verify_installed(&mut rng)?;
            inst.shuffle_untouched(&mut rng);
            weir.push(inst);
            let mut k = Katran::load(&object, family, u64::from(size), capacity.conns)?;
            k.fill(&mut rng)?;
            katran.push(k);
        }
        if sizes_of.is_none() {
            sizes_of = Some(Sizes {
                weir: weir[0].program_size()?,
                katran: program_size(&katran[0].prog()?)?,
            });
        }
        let mut bench = Bench {
            args,
            modes: &modes,
            rng: &mut rng,
            progress: &progress,
            next_fresh: largest + 1_000_000,
        };
        for (inst, k) in weir.iter().zip(katran.iter_mut()) {
            rows.push(bench.series(Measured::Hot1, inst, k)?);
        }
        for (inst, k) in weir.iter().zip(katran.iter_mut()) {
            rows.push(bench.series(Measured::Spread, inst, k)?);
        }
        let mut ends = vec![0];
        if sizes.len() > 1 {
            ends.push(sizes.len() - 1);
        }
        for i in ends {
            progress.set_message(format!(
                "{}: filling the half-open table of the {}-connection table",
                family.name(),
                weir[i].size
            ));
            weir[i].flood_half_open(capacity.half_open)?;
            rows.push(bench.series(Measured::Syn, &weir[i], &mut katran[i])?);
        }
    }
    progress.finish(format!("{} rows, {} runs each", rows.len(), args.runs));
    let sizes_of = sizes_of.context("nothing was loaded")?;
    Ok(Report {
        bench: "katran",
        kernel: kernel_release(),
        method: METHOD.to_vec(),
        katran_object: object.display().to_string(),
        runs: args.runs,
        spread: args.spread,
        keys: args.keys,
        sizes,
        families,
        modes,
        seed: args.seed,
        conn_capacity: capacity.conns,
        half_open_capacity: capacity.half_open,
        target_over_katran: TARGET_OVER_KATRAN,
        weir_program: sizes_of.weir,
        katran_program: sizes_of.katran,
        baseline: None,
        rows,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

struct Sizes {
    weir: ProgramSize,
    katran: ProgramSize,
}

/// The measured paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measured {
    /// One installed connection, one call per packet.
    Hot1,
    /// One call per packet, each a connection unused since the fill.
    Spread,
    /// One call per SYN of a new connection.
    Syn,
}

impl Measured {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Measured::Hot1 => ("hit", "hot1"),
            Measured::Spread => ("hit", "spread"),
            Measured::Syn => ("miss", "spread"),
        }
    }
}

/// Who is timed in a run.
#[derive(Debug, Clone, Copy)]
enum Contender {
    Katran,
    Weir(Mode),
}

struct Bench<'a> {
    args: &'a KatranBenchArgs,
    modes: &'a [Mode],
    rng: &'a mut SplitMix,
    progress: &'a Progress,
    /// The next new connection a SYN opens (past every installed one).
    next_fresh: u64,
}

impl Bench<'_> {
    /// The packets of one contender's run: connection numbers and TCP flags.
    fn connections(
        &mut self,
        path: Measured,
        who: Contender,
        run: usize,
        hot_keys: &[u64],
        inst: &Inst,
        katran: &mut Katran,
    ) -> Vec<u64> {
        let n = self.args.spread as usize;
        match path {
            Measured::Hot1 => vec![hot_keys[run % hot_keys.len()]; n],
            Measured::Spread => (0..n)
                .map(|_| match who {
                    Contender::Katran => katran.draw(self.rng),
                    Contender::Weir(_) => inst.draw(self.rng).0,
                })
                .collect(),
            Measured::Syn => (0..n)
                .map(|_| {
                    self.next_fresh += 1;
                    self.next_fresh
                })
                .collect(),
        }
    }

    /// One row: per run every contender on its own packets, in rotating order.
    fn series(&mut self, path: Measured, inst: &Inst, katran: &mut Katran) -> Result<Row> {
        let (path_name, measure) = path.names();
        let family = inst.family;
        self.progress.set_message(format!(
            "{} {path_name} {measure}, {} connections",
            family.name(),
            inst.size
        ));
        let mut who = vec![Contender::Katran];
        who.extend(self.modes.iter().map(|&m| Contender::Weir(m)));
        let flags = if path == Measured::Syn {
            TCP_SYN
        } else {
            TCP_ACK
        };
        let hot_keys: Vec<u64> = (0..self.args.keys)
            .map(|_| self.rng.below(inst.size))
            .collect();
        // Warm-up, not counted: each contender's hit path on packets of its own.
        if path != Measured::Syn {
            for &c in &who {
                let keys = self.connections(path, c, 0, &hot_keys, inst, katran);
                for &k in keys.iter().take(64) {
                    self.call(c, inst, katran, &packet(family, k, flags))?;
                }
            }
        }
        let weir_before = inst.maps.stats()?;
        let katran_before = KatranCounters::read(katran)?;
        let mut weir_calls = 0u64;
        let mut syn_keys = Vec::new();
        // times[run][contender]
        let mut times = Vec::new();
        for r in 0..self.args.runs as usize {
            let mut t = vec![0.0; who.len()];
            for k in 0..who.len() {
                let i = (k + r) % who.len();
                let c = who[i];
                let keys = self.connections(path, c, r, &hot_keys, inst, katran);
                let pkts: Vec<Vec<u8>> = keys.iter().map(|&k| packet(family, k, flags)).collect();
                if let Contender::Weir(m) = c {
                    inst.set_mode(m)?;
                    weir_calls += pkts.len() as u64;
                } else if path == Measured::Syn {
                    katran.reset_conn_rate()?;
                    syn_keys.extend_from_slice(&keys);
                }
                let mut sum = 0.0;
                for p in &pkts {
                    sum += self.call(c, inst, katran, p)?;
                }
                t[i] = sum / pkts.len() as f64;
            }
            times.push(t);
            self.progress.inc(1);
        }
        let weir_after = inst.maps.stats()?;
        check_weir(path, &weir_before, &weir_after, weir_calls)?;
        let katran_calls = u64::from(self.args.runs) * u64::from(self.args.spread);
        KatranCounters::read(katran)?.check_since(&katran_before, path, katran_calls)?;
        for &k in &syn_keys {
            ensure!(
                katran.installed(k)?.is_some(),
                "Katran's table lacks connection {k} after its SYN: the SYN did not install, the measurement is not what it claims"
            );
        }
        let katran_ns: Vec<f64> = times.iter().map(|t| t[0]).collect();
        let weir = who
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, c)| {
                let Contender::Weir(mode) = *c else {
                    unreachable!("only the first contender is Katran")
                };
                let ns: Vec<f64> = times.iter().map(|t| t[i]).collect();
                let ratio: Vec<f64> = times.iter().map(|t| t[i] / t[0].max(1e-9)).collect();
                let over = Figure::of(&ratio);
                WeirFigure {
                    mode,
                    ns: Figure::of(&ns),
                    over_katran: over,
                    meets_target: over.median <= TARGET_OVER_KATRAN,
                    baseline_over_katran: None,
                }
            })
            .collect();
        Ok(Row {
            family,
            path: path_name,
            measure,
            conns: inst.size,
            runs: self.args.runs,
            calls_per_run: self.args.spread,
            katran_ns: Figure::of(&katran_ns),
            weir,
        })
    }

    /// Times one packet through one contender (one repetition).
    fn call(&self, who: Contender, inst: &Inst, katran: &Katran, pkt: &[u8]) -> Result<f64> {
        match who {
            Contender::Katran => timed(&katran.prog()?, pkt, 1, XdpAction::Tx),
            Contender::Weir(_) => timed(inst.prog(), pkt, 1, XdpAction::Redirect),
        }
    }
}

/// weir's counters over a series: what every call must have done.
fn check_weir(path: Measured, before: &[u64], after: &[u64], calls: u64) -> Result<()> {
    check_delta(before, after, WEIR_STAT_REDIRECT, calls, "XDP_REDIRECT")?;
    if path == Measured::Syn {
        check_delta(
            before,
            after,
            WEIR_STAT_CONN_MISS,
            calls,
            "connection misses",
        )?;
        check_delta(
            before,
            after,
            WEIR_STAT_HALF_OPEN_NEW,
            calls,
            "half-open entries installed",
        )
    } else {
        check_delta(before, after, WEIR_STAT_CONN_HIT, calls, "connection hits")?;
        check_delta(before, after, WEIR_STAT_CONN_MISS, 0, "connection misses")
    }
}

/// Katran's global counters the bench checks.
struct KatranCounters {
    /// (packets that reached the connection table, of those not found).
    lru: (u64, u64),
    /// (SYNs not found, other TCP packets not found).
    lru_miss: (u64, u64),
    fallback: u64,
    tx: u64,
}

impl KatranCounters {
    fn read(k: &Katran) -> Result<KatranCounters> {
        Ok(KatranCounters {
            lru: k.stat(stat::LRU_CNTRS)?,
            lru_miss: k.stat(stat::LRU_MISS_CNTR)?,
            fallback: k.stat(stat::FALLBACK_LRU_CNTR)?.0,
            tx: k.stat(stat::XDP_TX_CNTR)?.0,
        })
    }

    fn check_since(&self, before: &KatranCounters, path: Measured, calls: u64) -> Result<()> {
        let syn = path == Measured::Syn;
        let missed = if syn { calls } else { 0 };
        for (what, got, want) in [
            (
                "packets through the connection table",
                self.lru.0 - before.lru.0,
                calls,
            ),
            ("connection-table misses", self.lru.1 - before.lru.1, missed),
            ("SYN misses", self.lru_miss.0 - before.lru_miss.0, missed),
            ("non-SYN misses", self.lru_miss.1 - before.lru_miss.1, 0),
            (
                "packets on the fallback table",
                self.fallback - before.fallback,
                0,
            ),
            ("XDP_TX", self.tx - before.tx, calls),
        ] {
            ensure!(
                got == want,
                "Katran's counters disagree with the benchmark: {got} {what}, expected {want}; the measurement is not what it claims"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: KatranBenchArgs,
    }

    #[test]
    fn args_parse_with_defaults() {
        let cli = Cli::parse_from(["x", "--source", "/src/katran"]);
        assert_eq!(cli.args.source, Some(PathBuf::from("/src/katran")));
        assert_eq!(cli.args.sizes, vec![1, 1_000_000]);
        assert_eq!(cli.args.modes, vec![Mode::Dsr, Mode::Nat]);
        assert_eq!(cli.args.families, vec![Family::V4, Family::V6]);
        let cli = Cli::parse_from(["x", "--object", "b.o", "--sizes", "1,1000"]);
        assert_eq!(cli.args.object, Some(PathBuf::from("b.o")));
        assert_eq!(cli.args.sizes, vec![1, 1000]);
    }

    #[test]
    fn katran_is_required_and_named_once() {
        assert!(Cli::try_parse_from(["x"]).is_err());
        assert!(Cli::try_parse_from(["x", "--source", "a", "--object", "b"]).is_err());
    }

    #[test]
    fn a_source_that_is_no_katran_checkout_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("no-katran-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = build(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("balancer.bpf.c not found"), "{err}");
        assert!(err.contains("Katran checkout"), "{err}");
    }

    #[test]
    fn encapsulating_modes_are_refused() {
        let cli = Cli::parse_from(["x", "--object", "/nonexistent.o", "--modes", "ipip"]);
        let err = measure(&cli.args).unwrap_err().to_string();
        assert!(err.contains("--modes ipip"), "{err}");
    }
}
