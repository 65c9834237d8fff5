//! `weir`: the load balancer's one binary (its labs and benchmarks are
//! `weir-lab`'s).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use weir_config::{Config, HostFacts};
use weir_control::run_record::{RunRecord, DEFAULT_RUN_DIR};
use weir_control::runtime::{self, ServeOptions};
use weir_control::status;
use weir_dataplane::attach::XdpMode;

mod dip;
mod logger;
mod node;
mod reload;
mod status_text;

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
    /// Check this host for what weir serve needs (or, with --role backend, what a dsr
    /// backend needs): OK / WARN / FAIL item by item, with what to change; exits 1 on any FAIL.
    Doctor(weir_control::doctor::DoctorArgs),
    /// Check a configuration file, and that this host can hold its tables, and exit.
    Check {
        /// The TOML configuration to check (or give it with --config).
        #[arg(value_name = "FILE", required_unless_present = "config")]
        file: Option<PathBuf>,
        /// The TOML configuration to check.
        #[arg(long, short, value_name = "FILE", conflicts_with = "file")]
        config: Option<PathBuf>,
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
    Dip(dip::DipArgs),
    /// Drain this node (withdraw its VIPs from the routers by BGP) or undrain it,
    /// through the running daemon's API.
    Node(node::NodeArgs),
    /// Run on a backend of ipip/gue VIPs: strip the outer IPIP/IPv6/GUE header of packets to
    /// this host in XDP (`weir decap --interface IF`, `weir decap status --interface IF`).
    Decap(weir_backend::decap::DecapArgs),
    /// Make the running daemon re-read its configuration (SIGHUP) and wait
    /// for its answer: exits non-zero with its reason when it refuses the file.
    Reload(reload::ReloadArgs),
    /// The memcached switch: `weir kv --nutcracker nc.yml`, `weir kv --config kv.toml`, `weir kv status`.
    Kv(weir_kv::KvArgs),
    /// Shell completions on stdout, generated from this CLI (`make install`).
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
    /// Man pages, weir.1 and one per subcommand, into DIR (`make install`).
    #[command(hide = true)]
    Man { dir: PathBuf },
}

impl Command {
    /// Whether the command runs until stopped (a daemon) rather than
    /// printing and exiting.
    fn runs_until_stopped(&self) -> bool {
        match self {
            Command::Serve { .. } | Command::Agent { .. } => true,
            Command::Kv(args) => args.cmd.is_none(),
            Command::Decap(args) => args.cmd.is_none(),
            Command::Check { .. }
            | Command::Doctor(_)
            | Command::Status { .. }
            | Command::Dip(_)
            | Command::Node(_)
            | Command::Reload(_)
            | Command::Completions { .. }
            | Command::Man { .. } => false,
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Doctor(args) => weir_control::doctor::run(&args),
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
        Command::Check { file, config } => {
            let config = file.or(config).expect("clap requires FILE or --config");
            let cfg = Config::load(&config)?;
            let host = HostFacts::read()
                .map_err(|e| anyhow::anyhow!("reading this host's memory: {e}"))?;
            cfg.check_host(&host)?;
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
            // A daemon that stopped left its pins where its run said.
            let last = record
                .is_none()
                .then(|| RunRecord::read_last(&run_dir))
                .flatten();
            let pins = match (&pin_dir, record.as_ref().or(last.as_ref())) {
                (Some(p), _) => p.clone(),
                (None, Some(r)) => r.pin_dir.clone(),
                (None, None) => PathBuf::from(weir_config::DEFAULT_PIN_DIR),
            };
            let cfg = record
                .as_ref()
                .or(last.as_ref())
                .and_then(|r| Config::load(&r.config).ok());
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
                print!("{}", status_text::render(&st));
            }
            Ok(())
        }
        Command::Kv(args) => weir_kv::run(&args),
        Command::Agent {
            listen,
            stats_file,
            window_ms,
        } => weir_backend::agent::run(
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
        Command::Dip(args) => dip::run(&args),
        Command::Node(args) => node::run(&args),
        Command::Decap(args) => weir_backend::decap::run(&args),
        Command::Reload(args) => reload::run(&args),
    }
}

fn main() -> ExitCode {
    logger::init();
    let cli = Cli::parse();
    if !cli.command.runs_until_stopped() {
        // `weir status --json | head -1` ends quietly, like any Unix tool.
        weir_sys::restore_default_sigpipe();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
