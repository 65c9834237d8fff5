//! `weir-lab`: weir's labs, benchmarks and simulator. Labs that run the load
//! balancer start the `weir` binary built next to this one (or `$WEIR_BIN`).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use weir_lab::weir_binary;

#[derive(Parser)]
#[command(
    name = "weir-lab",
    version,
    about = "weir-lab: labs in network namespaces, benchmarks and the dispatch simulator for weir"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Client, weir and 3 HTTP backends; real requests through the VIP.
    Demo(weir_lab::demo::DemoArgs),
    /// Spotlight V-B testbed: 8 file servers, ECMP/LCF/AWFD, FCT and throughput.
    Spotlight(weir_lab::spotlight::SpotlightArgs),
    /// The packet generator across one veth pair into an XDP sink: offered vs received pps.
    Gen(weir_lab::traffic::lab::GenArgs),
    /// Spoofed SYN floods at rising rates against a small connection table: established
    /// connections broken, new connections served, replies leaked.
    Synflood(weir_lab::synflood::SynFloodArgs),
    /// HNLB's experiments (Fig. 4, 5, 7): software vs hybrid tier (xdp for reference),
    /// loss-free rates and the workers' utilization metric.
    Hnlb(weir_lab::hnlb::HnlbArgs),
    /// Spreading packets over the software tier's workers (seeds 001 and 003): flow, spray
    /// and adaptive against the cost per packet, one TCP flow with and without reordering.
    Cores(weir_lab::cores::CoresArgs),
    /// Several weir nodes behind ECMP with etcd: node loss and addition, leader loss,
    /// connection sync on and off: PCC violations, failures, recovery, sync window.
    Scale(weir_lab::scale::ScaleArgs),
    /// Benchmarks: print a table, write JSON with --json.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Flow-level simulation of the dispatch policies (Spotlight V-A).
    #[command(subcommand)]
    Sim(weir_sim::cli::SimCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Cost per packet of the XDP program against the floor (BPF_PROG_TEST_RUN).
    Xdp(weir_lab::bench::xdp::XdpBenchArgs),
    /// weir_lb side by side with Katran's XDP balancer, built from its source (BPF_PROG_TEST_RUN).
    Katran(weir_lab::bench::katran::KatranBenchArgs),
    /// Real forwarding in namespaces: weir (nat, dsr, ipip) next to nftables DNAT, received
    /// Mpps and the load balancer's CPU per packet; one long TCP flow (iperf3) through each
    /// and HAProxy, with its retransmissions.
    Forward(weir_lab::bench::forward::ForwardBenchArgs),
    /// Simulator speed: 10k, 100k and 1M flows.
    Sim(weir_sim::cli::BenchArgs),
    /// memcached GETs (Zipf): direct, nutcracker and weir's TCP proxy.
    Kv(weir_lab::kv::bench::KvBenchArgs),
    /// BPF run time of the XDP memcached switch per path (fnv1a_64 and md5 gets, set, cache hit).
    KvBpf(weir_lab::kv::bench_bpf::KvBpfBenchArgs),
}

impl Command {
    /// Whether the command computes and prints without starting a lab.
    fn only_computes(&self) -> bool {
        matches!(self, Command::Sim(_) | Command::Bench(BenchCommand::Sim(_)))
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => weir_lab::demo::run(&args),
        Command::Spotlight(args) => weir_lab::spotlight::run(&args),
        Command::Gen(args) => weir_lab::traffic::lab::run(&args),
        Command::Synflood(args) => {
            weir_lab::synflood::run(&weir_binary::locate()?, &args).map(|_| ())
        }
        Command::Scale(args) => weir_lab::scale::run(&weir_binary::locate()?, &args).map(|_| ()),
        Command::Hnlb(args) => weir_lab::hnlb::run(&weir_binary::locate()?, &args).map(|_| ()),
        Command::Cores(args) => weir_lab::cores::run(&weir_binary::locate()?, &args).map(|_| ()),
        Command::Bench(BenchCommand::Xdp(args)) => weir_lab::bench::xdp::run(&args),
        Command::Bench(BenchCommand::Katran(args)) => weir_lab::bench::katran::run(&args),
        Command::Bench(BenchCommand::Forward(args)) => weir_lab::bench::forward::run(&args),
        Command::Bench(BenchCommand::Sim(args)) => weir_sim::cli::run_bench(&args),
        Command::Bench(BenchCommand::Kv(args)) => weir_lab::kv::bench::run(&args),
        Command::Bench(BenchCommand::KvBpf(args)) => weir_lab::kv::bench_bpf::run(&args),
        Command::Sim(cmd) => weir_sim::cli::run(cmd),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.only_computes() {
        // `weir-lab sim run --format json | head` ends quietly, like any Unix
        // tool. Labs keep SIGPIPE ignored: they must tear their namespaces down.
        weir_sys::restore_default_sigpipe();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-lab: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
