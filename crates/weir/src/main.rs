//! `weir`: the load balancer's one binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use weir_control::config::Config;
use weir_control::runtime::{self, RunRecord, ServeOptions, DEFAULT_RUN_DIR};
use weir_control::status;
use weir_dataplane::attach::XdpMode;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "weir: an XDP load balancer with load-aware dispatch"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum XdpModeArg {
    Native,
    Generic,
}

#[derive(Subcommand)]
enum Command {
    /// Load, attach and run the load balancer until SIGINT/SIGTERM; SIGHUP reloads the config.
    Serve {
        /// The TOML configuration.
        #[arg(long, short)]
        config: PathBuf,
        /// Override dataplane.xdp_mode.
        #[arg(long, value_enum)]
        xdp_mode: Option<XdpModeArg>,
        /// Drop the pinned state of a previous run (established connections are lost).
        #[arg(long, conflicts_with = "takeover")]
        reset_state: bool,
        /// Restart without a gap: swap the running daemon's XDP programs for
        /// ours atomically, then retire it; or adopt an orphaned weir program
        /// whose daemon died, with its pinned state.
        #[arg(long)]
        takeover: bool,
        /// Run even where the pinned state cannot outlive this process (a
        /// private mount namespace, as under `ip netns exec`); restarts then
        /// lose every connection.
        #[arg(long)]
        ephemeral_state: bool,
        /// Where to record the running daemon for `weir status` and `weir reload`.
        #[arg(long, default_value = DEFAULT_RUN_DIR)]
        run_dir: PathBuf,
    },
    /// Check a configuration file and exit.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Show VIPs, DIPs, weights, table versions, connections and counters.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Read the pins here instead of the running daemon's.
        #[arg(long)]
        pin_dir: Option<PathBuf>,
        #[arg(long, default_value = DEFAULT_RUN_DIR)]
        run_dir: PathBuf,
    },
    /// Run on a backend: report its load (GET /load) to weir's controller.
    Agent {
        /// Address to answer on, e.g. 0.0.0.0:9300.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// JSON {"requests": N, "busy_s": S} with the service's cumulative
        /// counters, rewritten by the service.
        #[arg(long)]
        stats_file: PathBuf,
        /// Sliding window of the reported means and rates, in ms.
        #[arg(long, default_value_t = 1000)]
        window_ms: u64,
    },
    /// Add, remove, reweight or drain a DIP of the running daemon (through its API;
    /// the change is written back to its configuration file).
    Dip(weir_control::api::cli::DipArgs),
    /// Run on a backend of ipip/gue VIPs: strip the outer IPIP/IPv6/GUE header of packets to
    /// this host in XDP (`weir decap --interface IF`, `weir decap status --interface IF`).
    Decap(weir_control::decap::DecapArgs),
    /// Make the running daemon re-read its configuration (same as SIGHUP).
    Reload {
        #[arg(long, default_value = DEFAULT_RUN_DIR)]
        run_dir: PathBuf,
    },
    /// Flow-level simulation of the dispatch policies (Spotlight V-A).
    #[command(subcommand)]
    Sim(weir_sim::cli::SimCommand),
    /// Labs in network namespaces that weir builds and removes itself.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Benchmarks: print a table, write JSON with --json.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The memcached switch: `weir kv --nutcracker nc.yml`, `weir kv --config kv.toml`, `weir kv status`.
    Kv(weir_kv::cli::KvArgs),
    /// Shell completions on stdout, generated from this CLI (`make install`).
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
    /// Man pages, weir.1 and one per subcommand, into DIR (`make install`).
    #[command(hide = true)]
    Man { dir: PathBuf },
}

#[derive(Subcommand)]
enum LabCommand {
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
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Cost per packet of the XDP program against the floor (BPF_PROG_TEST_RUN).
    Xdp(weir_lab::bench::xdp::XdpBenchArgs),
    /// Real forwarding in namespaces: weir (nat, dsr, ipip) next to nftables DNAT, received
    /// Mpps and the load balancer's CPU per packet; one long TCP flow (iperf3) through each
    /// and HAProxy, with its retransmissions.
    Forward(weir_lab::bench::forward::ForwardBenchArgs),
    /// Simulator speed: 10k, 100k and 1M flows.
    Sim(weir_sim::cli::BenchArgs),
    /// memcached GETs (Zipf): direct, nutcracker and weir's TCP proxy.
    Kv(weir_kv::bench::KvBenchArgs),
    /// BPF run time of the XDP memcached switch per path (fnv1a_64 and md5 gets, set, cache hit).
    KvBpf(weir_kv::bench_bpf::KvBpfBenchArgs),
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve {
            config,
            xdp_mode,
            reset_state,
            takeover,
            ephemeral_state,
            run_dir,
        } => runtime::serve(&ServeOptions {
            takeover,
            ephemeral_state,
            config,
            xdp_mode: xdp_mode.map(|m| match m {
                XdpModeArg::Native => XdpMode::Native,
                XdpModeArg::Generic => XdpMode::Generic,
            }),
            reset_state,
            run_dir,
        }),
        Command::Check { config } => {
            let cfg = Config::load(&config)?;
            for w in &cfg.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "{}: ok ({} VIPs, {} warnings)",
                config.display(),
                cfg.vips.len(),
                cfg.warnings.len()
            );
            Ok(())
        }
        Command::Status {
            json,
            pin_dir,
            run_dir,
        } => {
            let record = RunRecord::read(&run_dir).ok();
            let pins = match (&pin_dir, &record) {
                (Some(p), _) => p.clone(),
                (None, Some(r)) => r.pin_dir.clone(),
                (None, None) => PathBuf::from(weir_dataplane::DEFAULT_PIN_DIR),
            };
            let cfg = record.as_ref().and_then(|r| Config::load(&r.config).ok());
            let running = record.as_ref().map(|_| run_dir.as_path());
            let mut st = status::collect_pinned(&pins, cfg.as_ref(), running)?;
            st.controller = record
                .as_ref()
                .and_then(|_| status::read_controller(&run_dir));
            if record.is_some() {
                status::add_running(&mut st, &run_dir);
            }
            st.cluster = record.as_ref().and_then(|_| status::read_cluster(&run_dir));
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&st).context("encoding status")?
                );
            } else {
                print!("{}", status::render(&st));
            }
            Ok(())
        }
        Command::Lab(LabCommand::Demo(args)) => weir_lab::demo::run(&args),
        Command::Lab(LabCommand::Spotlight(args)) => weir_lab::spotlight::run(&args),
        Command::Lab(LabCommand::Gen(args)) => weir_lab::traffic::lab::run(&args),
        Command::Lab(LabCommand::Synflood(args)) => {
            weir_lab::synflood::run(&std::env::current_exe()?, &args).map(|_| ())
        }
        Command::Lab(LabCommand::Scale(args)) => {
            weir_lab::scale::run(&std::env::current_exe()?, &args).map(|_| ())
        }
        Command::Lab(LabCommand::Hnlb(args)) => {
            weir_lab::hnlb::run(&std::env::current_exe()?, &args).map(|_| ())
        }
        Command::Lab(LabCommand::Cores(args)) => {
            weir_lab::cores::run(&std::env::current_exe()?, &args).map(|_| ())
        }
        Command::Bench(BenchCommand::Xdp(args)) => weir_lab::bench::xdp::run(&args),
        Command::Bench(BenchCommand::Forward(args)) => weir_lab::bench::forward::run(&args),
        Command::Bench(BenchCommand::Sim(args)) => weir_sim::cli::run_bench(&args),
        Command::Bench(BenchCommand::Kv(args)) => weir_kv::bench::run(&args),
        Command::Bench(BenchCommand::KvBpf(args)) => weir_kv::bench_bpf::run(&args),
        Command::Kv(args) => weir_kv::cli::run(&args),
        Command::Sim(cmd) => weir_sim::cli::run(cmd),
        Command::Agent {
            listen,
            stats_file,
            window_ms,
        } => weir_control::agent::run(
            listen,
            stats_file,
            std::time::Duration::from_millis(window_ms),
        ),
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics on a failed write.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "weir", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)
                .context("writing the completions")
        }
        Command::Man { dir } => std::fs::create_dir_all(&dir)
            .and_then(|()| clap_mangen::generate_to(Cli::command(), &dir))
            .with_context(|| format!("writing man pages into {}", dir.display())),
        Command::Dip(args) => weir_control::api::cli::run(&args),
        Command::Decap(args) => weir_control::decap::run(&args),
        Command::Reload { run_dir } => {
            let pid = runtime::request_reload(&run_dir)?;
            println!("asked weir serve (pid {pid}) to reload its configuration");
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
