//! The `weir-lab sim ...` and `weir-lab bench sim` command lines.
//!
//! Wire into the binary with `#[command(subcommand)] Sim(weir_sim::cli::SimCommand)`
//! in the top-level subcommand enum, dispatched with `weir_sim::cli::run(cmd)`;
//! and `Sim(weir_sim::cli::BenchArgs)` in the `bench` subcommand enum,
//! dispatched with `weir_sim::cli::run_bench(&args)` (see the
//! `wires_into_a_parent_cli` test).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use weir_core::dispatch::{MaxWeight, Policy};

use crate::model::PoolParams;
use crate::report::{points_csv, points_figure, points_table};
use crate::spotlight::{self, SpotlightConfig};
use crate::sweep::{aggregate, run_jobs, threads, Job, Scenario};
use crate::trace::{read_csv_file, ReplayParams, SyntheticParams, CSV_FORMAT};

/// `weir-lab sim`: flow-level simulation of the dispatch policies.
#[derive(Debug, Clone, Subcommand)]
pub enum SimCommand {
    /// Reproduce Spotlight Fig. 7 (Omega vs update interval) and Fig. 9
    /// (Omega vs m): text tables on stdout; JSON, CSV and SVG in --out.
    Spotlight(SpotlightArgs),
    /// Simulate policies on the synthetic trace.
    Run(RunArgs),
    /// Simulate policies on a CSV trace of your own flows.
    #[command(after_help = CSV_FORMAT)]
    Replay(ReplayArgs),
    /// Write the shared AWFD test vectors (tables + flows -> DIP).
    Vectors(VectorsArgs),
}

fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, got `{s}`"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("must be a number > 0, got {s}"))
    }
}

fn non_negative_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, got `{s}`"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("must be a number >= 0, got {s}"))
    }
}

fn count(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    let (num, mul) = match t.to_ascii_lowercase() {
        x if x.ends_with('k') => (x[..x.len() - 1].to_string(), 1_000),
        x if x.ends_with('m') => (x[..x.len() - 1].to_string(), 1_000_000),
        x => (x, 1),
    };
    match num.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n * mul),
        _ => Err(format!(
            "expected a positive count such as 100000 or 100k, got `{s}`"
        )),
    }
}

/// The synthetic trace (defaults: Spotlight V-A).
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Number of flows (100000, 100k, 1m).
    #[arg(long, default_value = "100000", value_parser = count, allow_negative_numbers = true)]
    pub flows: usize,
    /// Mean inter-arrival time in ms (Poisson arrivals).
    #[arg(long, default_value_t = 1.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub interarrival_ms: f64,
    /// Mean flow duration in seconds (exponential).
    #[arg(long, default_value_t = 10.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub duration_s: f64,
    /// Mean flow rate in bytes/s (Pareto).
    #[arg(long, default_value_t = 2000.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub rate: f64,
    /// Pareto shape (> 1).
    #[arg(long, default_value_t = 2.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub pareto_shape: f64,
    #[command(flatten)]
    pub chains: ChainArgs,
}

/// VIPs and chains.
#[derive(Debug, Clone, Args)]
pub struct ChainArgs {
    /// Number of VIPs (services).
    #[arg(long, default_value_t = 4)]
    pub vips: usize,
    /// Longest service chain; chains have 1..=max-chain distinct VIPs.
    #[arg(long, default_value_t = 4)]
    pub max_chain: usize,
    /// Seed of every random choice (runs use seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The DIP pools.
#[derive(Debug, Clone, Args)]
pub struct PoolArgs {
    /// DIPs per VIP (half small, half large).
    #[arg(long, default_value_t = 20)]
    pub dips: usize,
    /// Capacity of a large DIP relative to a small one (2 = 1:2).
    #[arg(long, default_value_t = 2.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub capacity_ratio: f64,
    /// Requested traffic / capacity over the measurement window.
    #[arg(long, default_value_t = 1.05, value_parser = positive_f64, allow_negative_numbers = true)]
    pub load: f64,
    /// Seconds to skip before measuring [default: 2 x mean flow duration,
    /// at most half the trace].
    #[arg(long, value_parser = non_negative_f64, allow_negative_numbers = true)]
    pub warmup_s: Option<f64>,
}

impl TraceArgs {
    pub fn params(&self) -> SyntheticParams {
        SyntheticParams {
            flows: self.flows,
            mean_interarrival: self.interarrival_ms / 1e3,
            mean_duration: self.duration_s,
            mean_rate: self.rate,
            pareto_shape: self.pareto_shape,
            vips: self.chains.vips,
            max_chain: self.chains.max_chain,
            seed: self.chains.seed,
        }
    }
}

impl PoolArgs {
    pub fn params(&self) -> PoolParams {
        PoolParams {
            dips: self.dips,
            capacity_ratio: self.capacity_ratio,
            load: self.load,
            warmup: self.warmup_s,
        }
    }
}

/// `weir-lab sim spotlight`.
#[derive(Debug, Clone, Args)]
pub struct SpotlightArgs {
    /// Directory for spotlight.json, fig7.{csv,svg,txt}, fig9.{csv,svg}.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Independent traces per point (seeds seed..seed+runs), averaged.
    #[arg(long, default_value_t = 3, value_parser = count)]
    pub runs: usize,
    /// Fig. 7 policies: ecmp, lcf, weighted, optimum, awfd:M, awfd:inf.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ecmp,lcf,awfd:4,awfd:16,weighted,optimum"
    )]
    pub policies: Vec<Policy>,
    /// Fig. 7 update intervals in ms.
    #[arg(long, value_delimiter = ',', value_parser = positive_f64, allow_negative_numbers = true,
          default_value = "1,2,5,10,20,50,100,200,500,1000,2000")]
    pub intervals_ms: Vec<f64>,
    /// Fig. 9 values of m (non-negative integers or inf).
    #[arg(
        long = "m",
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,inf"
    )]
    pub ms: Vec<MaxWeight>,
    /// Fig. 9 update interval in ms.
    #[arg(long, default_value_t = 500.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub fig9_interval_ms: f64,
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub jobs: usize,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Output format of `run` and `replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// What `run` and `replay` simulate (the same option names as `spotlight`).
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Policies: ecmp, lcf, weighted, optimum, awfd (m = 4), awfd:M, awfd:inf.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "ecmp,lcf,awfd:4,weighted,optimum"
    )]
    pub policies: Vec<Policy>,
    /// Controller update intervals in ms.
    #[arg(long, value_delimiter = ',', value_parser = positive_f64,
          allow_negative_numbers = true, default_value = "100")]
    pub intervals_ms: Vec<f64>,
    /// Also write sim.json (the JSON of --format json: every input and the
    /// results) and sim.svg (Omega per policy) into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Independent runs (seeds seed..seed+runs), averaged.
    #[arg(long, default_value_t = 1, value_parser = count)]
    pub runs: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub jobs: usize,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `weir-lab sim run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub what: PolicyArgs,
}

/// `weir-lab sim replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// CSV trace (see below).
    pub trace: PathBuf,
    #[command(flatten)]
    pub chains: ChainArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub what: PolicyArgs,
}

/// `weir-lab sim vectors`.
#[derive(Debug, Clone, Args)]
pub struct VectorsArgs {
    /// Where to write the vectors.
    #[arg(long, default_value = "tests/vectors/awfd.json")]
    pub out: PathBuf,
}

/// `weir-lab bench sim`: simulator cost at growing trace sizes, one thread.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Trace sizes in flows.
    #[arg(long, value_delimiter = ',', value_parser = count, default_value = "10k,100k,1m")]
    pub flows: Vec<usize>,
    /// Policies to time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ecmp,lcf,awfd:4,weighted,optimum"
    )]
    pub policies: Vec<Policy>,
    /// Update interval in ms (1 ms is the most expensive of the sweep).
    #[arg(long, default_value_t = 1.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub interval_ms: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs a `weir-lab sim` subcommand.
pub fn run(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::Spotlight(a) => run_spotlight(&a),
        SimCommand::Run(a) => run_run(&a),
        SimCommand::Replay(a) => run_replay(&a),
        SimCommand::Vectors(a) => run_vectors(&a),
    }
}

/// `weir-lab sim spotlight`.
pub fn run_spotlight(a: &SpotlightArgs) -> anyhow::Result<()> {
    let cfg = SpotlightConfig {
        trace: a.trace.params(),
        pool: a.pool.params(),
        runs: a.runs,
        policies: a.policies.clone(),
        intervals: a.intervals_ms.iter().map(|ms| ms / 1e3).collect(),
        ms: a.ms.clone(),
        fig9_interval: a.fig9_interval_ms / 1e3,
        threads: a.jobs,
    };
    let report = spotlight::run(&cfg, !a.quiet)?;
    print!("{}", report.text());
    let files = report.write(&a.out)?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The inputs every `run` and `replay` share, for the JSON.
fn policy_inputs(what: &PolicyArgs, sc: &[Scenario]) -> serde_json::Value {
    serde_json::json!({
        "policies": what.policies.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "intervals_ms": what.intervals_ms,
        "runs": what.runs,
        "seeds": sc.iter().map(|s| s.seed).collect::<Vec<_>>(),
    })
}

/// Simulates every policy at every interval on every scenario; prints the
/// result in `what.format`, and with `--out` writes sim.json and sim.svg.
/// `inputs` is what produced the scenarios (trace and pool parameters).
fn simulate_and_print(
    sc: &[Scenario],
    what: &PolicyArgs,
    mut inputs: serde_json::Value,
) -> anyhow::Result<()> {
    let mut jobs = Vec::new();
    for &policy in &what.policies {
        for &ms in &what.intervals_ms {
            for s in 0..sc.len() {
                jobs.push(Job {
                    scenario: s,
                    policy,
                    interval: ms / 1e3,
                });
            }
        }
    }
    let results = run_jobs(sc, &jobs, threads(what.jobs), !what.quiet);
    let points = aggregate(&results);
    if let (Some(all), serde_json::Value::Object(shared)) =
        (inputs.as_object_mut(), policy_inputs(what, sc))
    {
        all.extend(shared);
    }
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "inputs": inputs,
        "omega_definition": spotlight::OMEGA_DEFINITION,
        "trace_stats": sc.iter().map(|s| s.trace.stats()).collect::<Vec<_>>(),
        "window": sc.first().map(|s| s.pool.window),
        "points": points,
    }))? + "\n";
    match what.format {
        Format::Table => print!("{}", points_table(&points)),
        Format::Csv => print!("{}", points_csv(&points)),
        Format::Json => print!("{json}"),
    }
    if let Some(dir) = &what.out {
        let flows: usize = sc.first().map_or(0, |s| s.trace.flows.len());
        let subtitle = format!(
            "{flows} flows, {} seed(s) averaged, load {}",
            sc.len(),
            inputs["pool"]["load"]
        );
        let svg = points_figure(&points, &what.policies, &what.intervals_ms, subtitle).svg()?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, text) in [("sim.json", json), ("sim.svg", svg)] {
            let p = dir.join(name);
            std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// `weir-lab sim run`.
pub fn run_run(a: &RunArgs) -> anyhow::Result<()> {
    let sc = spotlight::scenarios(&a.trace.params(), &a.pool.params(), a.what.runs)?;
    let inputs = serde_json::json!({
        "command": "run",
        "trace": a.trace.params(),
        "pool": a.pool.params(),
    });
    simulate_and_print(&sc, &a.what, inputs)
}

/// `weir-lab sim replay`.
pub fn run_replay(a: &ReplayArgs) -> anyhow::Result<()> {
    let pool = a.pool.params();
    let sc = (0..a.what.runs as u64)
        .map(|k| {
            let params = ReplayParams {
                vips: a.chains.vips,
                max_chain: a.chains.max_chain,
                seed: a.chains.seed.wrapping_add(k),
            };
            let trace = read_csv_file(&a.trace, &params)?;
            let pool = pool.build(&trace)?;
            Ok(Scenario {
                seed: params.seed,
                trace,
                pool,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let inputs = serde_json::json!({
        "command": "replay",
        "trace_file": a.trace,
        "vips": a.chains.vips,
        "max_chain": a.chains.max_chain,
        "seed": a.chains.seed,
        "pool": pool,
    });
    simulate_and_print(&sc, &a.what, inputs)
}

/// The vectors as JSON with one weight, class or flow per line (diffable).
pub fn vectors_json(v: &weir_core::vectors::VectorFile) -> anyhow::Result<String> {
    use std::fmt::Write;
    let j = |x: &dyn erased::Ser| x.json();
    let mut s = String::from("{\n");
    writeln!(s, "  \"format\": {},", j(&v.format)?)?;
    writeln!(s, "  \"generator\": {},", j(&v.generator)?)?;
    writeln!(s, "  \"seed\": {},", v.seed)?;
    s += "  \"cases\": [\n";
    for (ci, c) in v.cases.iter().enumerate() {
        writeln!(s, "    {{\n      \"name\": {},", j(&c.name)?)?;
        let list = |items: Vec<String>| -> String {
            if items.is_empty() {
                return "[]".into();
            }
            format!("[\n        {}\n      ]", items.join(",\n        "))
        };
        let ws = c
            .weights
            .iter()
            .map(|w| j(w))
            .collect::<anyhow::Result<Vec<_>>>()?;
        writeln!(s, "      \"weights\": {},", list(ws))?;
        let cs = c
            .classes
            .iter()
            .map(|k| j(k))
            .collect::<anyhow::Result<Vec<_>>>()?;
        writeln!(s, "      \"classes\": {},", list(cs))?;
        writeln!(s, "      \"bounds\": {},", j(&c.bounds)?)?;
        let fs = c
            .flows
            .iter()
            .map(|f| j(f))
            .collect::<anyhow::Result<Vec<_>>>()?;
        writeln!(s, "      \"flows\": {}", list(fs))?;
        s += if ci + 1 == v.cases.len() {
            "    }\n"
        } else {
            "    },\n"
        };
    }
    s += "  ]\n}\n";
    Ok(s)
}

mod erased {
    /// Compact JSON of any serializable value.
    pub trait Ser {
        fn json(&self) -> anyhow::Result<String>;
    }

    impl<T: serde::Serialize + ?Sized> Ser for T {
        fn json(&self) -> anyhow::Result<String> {
            Ok(serde_json::to_string(self)?)
        }
    }
}

/// `weir-lab sim vectors`.
pub fn run_vectors(a: &VectorsArgs) -> anyhow::Result<()> {
    let v = weir_core::vectors::generate();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = vectors_json(&v)?;
    std::fs::write(&a.out, text).with_context(|| format!("cannot write {}", a.out.display()))?;
    let flows: usize = v.cases.iter().map(|c| c.flows.len()).sum();
    eprintln!(
        "wrote {} ({} tables, {flows} flows)",
        a.out.display(),
        v.cases.len()
    );
    Ok(())
}

/// `weir-lab bench sim`.
pub fn run_bench(a: &BenchArgs) -> anyhow::Result<()> {
    let report = crate::bench::run(&a.flows, &a.policies, a.interval_ms / 1e3, a.seed, true)?;
    print!("{}", report.table());
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: SimCommand,
    }

    fn parse(args: &[&str]) -> Result<SimCommand, String> {
        Top::try_parse_from(std::iter::once("sim").chain(args.iter().copied()))
            .map(|t| t.cmd)
            .map_err(|e| e.to_string())
    }

    /// The way the `weir` binary wires these types in.
    #[derive(Parser)]
    struct Weir {
        #[command(subcommand)]
        cmd: WeirCmd,
    }

    #[derive(clap::Subcommand)]
    enum WeirCmd {
        #[command(subcommand)]
        Sim(SimCommand),
        #[command(subcommand)]
        Bench(BenchWhat),
    }

    #[derive(clap::Subcommand)]
    enum BenchWhat {
        Sim(BenchArgs),
    }

    #[test]
    fn wires_into_a_parent_cli() {
        let w = Weir::try_parse_from(["weir", "sim", "run", "--flows", "10k"]).unwrap();
        assert!(matches!(w.cmd, WeirCmd::Sim(SimCommand::Run(ref a)) if a.trace.flows == 10_000));
        let w = Weir::try_parse_from(["weir", "bench", "sim", "--json", "b.json"]).unwrap();
        let WeirCmd::Bench(BenchWhat::Sim(b)) = w.cmd else {
            panic!()
        };
        assert_eq!(b.flows, vec![10_000, 100_000, 1_000_000]);
        Weir::try_parse_from(["weir", "sim", "spotlight", "--out", "d"]).unwrap();
        Weir::try_parse_from(["weir", "sim", "replay", "t.csv"]).unwrap();
        Weir::try_parse_from(["weir", "sim", "vectors"]).unwrap();
    }

    #[test]
    fn defaults_are_the_paper() {
        let SimCommand::Spotlight(a) = parse(&["spotlight", "--out", "x"]).unwrap() else {
            panic!()
        };
        let t = a.trace.params();
        assert_eq!((t.flows, t.vips, t.max_chain), (100_000, 4, 4));
        assert_eq!(
            (t.mean_interarrival, t.mean_duration, t.mean_rate),
            (0.001, 10.0, 2000.0)
        );
        assert_eq!(a.pool.params().dips, 20);
        assert_eq!(a.ms.len(), 17);
        assert_eq!(a.intervals_ms.first(), Some(&1.0));
        assert_eq!(a.intervals_ms.last(), Some(&2000.0));
    }

    #[test]
    fn nonsense_is_refused_with_a_clear_message() {
        for (args, needle) in [
            (
                &["spotlight", "--out", "x", "--m", "-1"][..],
                "non-negative",
            ),
            (&["run", "--rate", "-5"][..], "> 0"),
            (&["run", "--duration-s", "-1"][..], "> 0"),
            (&["run", "--intervals-ms", "0"][..], "> 0"),
            (&["run", "--policies", "awfd:-2"][..], "non-negative"),
            (&["run", "--policies", "roundrobin"][..], "unknown policy"),
            (&["run", "--flows", "-3"][..], "positive count"),
            (&["run", "--load", "nan"][..], "> 0"),
            (&["run", "--warmup-s", "-1"][..], ">= 0"),
        ] {
            let e = parse(args).map(|_| ()).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        assert!(parse(&["run", "--flows", "10k", "--policies", "awfd:inf,lcf"]).is_ok());
    }

    #[test]
    fn bad_trace_error_names_line_and_field() {
        let dir = std::env::temp_dir().join(format!("weir-sim-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.csv");
        std::fs::write(&p, "start,duration,rate\n0,1,5\n1,2,-7\n").unwrap();
        let SimCommand::Replay(a) = parse(&["replay", p.to_str().unwrap(), "-q"]).unwrap() else {
            panic!()
        };
        let e = run_replay(&a).unwrap_err().to_string();
        assert!(e.contains("bad.csv:3") && e.contains("`rate`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
