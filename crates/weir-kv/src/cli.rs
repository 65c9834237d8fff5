//! `weir kv`: run the memcached switch (every pool of the file, metrics),
//! check a configuration, show a running switch's statistics, or ask it to
//! re-read its file (`weir kv reload`, or SIGHUP).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use weir_http::Server;
use weir_sys::SignalSet;

use crate::config::{parse_metrics, KvConfig, UdpConfig};
use crate::health::EjectMode;
use crate::pools::{Loader, Pools};
use crate::status::render_all;

pub use crate::endpoint::http_get;
pub use crate::status::{KvStatus, Status};

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct KvArgs {
    #[command(subcommand)]
    pub cmd: Option<KvCmd>,
    /// A nutcracker (twemproxy) YAML configuration.
    #[arg(long, conflicts_with = "config")]
    pub nutcracker: Option<PathBuf>,
    /// weir's own TOML configuration.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Run only this pool of the YAML file (default: every pool).
    #[arg(long)]
    pub pool: Option<String>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check: bool,
    /// Switch memcached UDP in XDP on this interface (repeat for several);
    /// the way to add the UDP path to a nutcracker YAML pool. The UDP port
    /// is the pool's listen port.
    #[arg(long = "udp-interface", value_name = "IF")]
    pub udp_interface: Vec<String>,
    /// With --udp-interface: switch only datagrams to this address.
    #[arg(long = "udp-vip", value_name = "IP", requires = "udp_interface")]
    pub udp_vip: Option<std::net::IpAddr>,
    /// With --udp-interface: l2 (servers hold the VIP) or l3 (rewrite to the server's address).
    #[arg(long = "udp-forward", value_name = "l2|l3", requires = "udp_interface")]
    pub udp_forward: Option<String>,
    /// With --udp-interface: native or generic XDP.
    #[arg(long = "xdp-mode", value_name = "MODE", requires = "udp_interface")]
    pub xdp_mode: Option<String>,
    /// With --udp-interface: answer hot keys from the in-switch cache
    /// (defaults of [cache]).
    #[arg(long, requires = "udp_interface")]
    pub cache: bool,
    /// Where /metrics and /status answer, over the file's setting (default
    /// 127.0.0.1:9122); `off` or `0` serves neither. Each instance on a host
    /// needs its own.
    #[arg(long, value_name = "ADDR|off", value_parser = metrics_flag)]
    pub metrics: Option<MetricsFlag>,
}

/// `--metrics`: the endpoint's address, or None for off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsFlag(pub Option<SocketAddr>);

fn metrics_flag(v: &str) -> Result<MetricsFlag, String> {
    parse_metrics(v).map(MetricsFlag)
}

#[derive(Subcommand, Debug, Clone)]
pub enum KvCmd {
    /// Statistics of a running `weir kv` (read from its metrics endpoint).
    Status {
        /// The metrics address of the running switch.
        #[arg(long, default_value = "127.0.0.1:9122")]
        metrics: SocketAddr,
        #[arg(long)]
        json: bool,
    },
    /// Ask a running `weir kv` to re-read its configuration file and wait
    /// for its answer: what changed, or (exit 1) why it refused the file.
    Reload {
        /// The metrics address of the running switch.
        #[arg(long, default_value = "127.0.0.1:9122")]
        metrics: SocketAddr,
        /// How long to wait for the answer, in seconds.
        #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
        timeout: f64,
    },
}

/// The pools `args` name (every pool of a YAML file, or `--pool`'s), with
/// the command line's overrides.
pub fn load(args: &KvArgs) -> Result<Vec<KvConfig>> {
    let mut cfgs = match (&args.nutcracker, &args.config) {
        (Some(p), _) => KvConfig::load_nutcracker_pools(p, args.pool.as_deref())?,
        (None, Some(p)) => vec![KvConfig::load_toml(p)?],
        (None, None) => bail!("give --nutcracker FILE.yml or --config FILE.toml"),
    };
    if !args.udp_interface.is_empty() {
        let [cfg] = &mut cfgs[..] else {
            let names: Vec<&str> = cfgs.iter().map(|c| c.pool.as_str()).collect();
            bail!(
                "--udp-interface: the file has {} pools ({}) and one XDP program serves one;                  pick the pool with --pool NAME (and run the others in another weir kv)",
                cfgs.len(),
                names.join(", ")
            );
        };
        if cfg.udp.is_some() {
            bail!(
                "{}: [udp] is in the file; give the UDP path there or with --udp-interface, not both",
                cfg.file.display()
            );
        }
        let mut u = UdpConfig::new(
            args.udp_interface.clone(),
            cfg.listen.port(),
            cfg.servers.len(),
        );
        u.vip = args.udp_vip;
        if let Some(f) = &args.udp_forward {
            u.forward = f
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--udp-forward: {e}"))?;
        }
        if let Some(m) = &args.xdp_mode {
            if m != "native" && m != "generic" {
                bail!("--xdp-mode: `{m}` is not native or generic");
            }
            u.xdp_mode = m.clone();
        }
        cfg.udp = Some(u);
        if args.cache {
            cfg.cache.enabled = true;
        }
    }
    if let Some(MetricsFlag(m)) = args.metrics {
        for cfg in &mut cfgs {
            cfg.metrics = m;
        }
    }
    Ok(cfgs)
}

/// What `--check` prints for one pool.
fn summary(cfg: &KvConfig) -> String {
    let udp = match &cfg.udp {
        Some(u) => format!(
            "; udp {} port {} {}, cache {}",
            u.interfaces.join(","),
            u.port,
            u.forward,
            if cfg.cache.enabled { "on" } else { "off" }
        ),
        None => String::new(),
    };
    let metrics = cfg.metrics.map_or("off".into(), |m| m.to_string());
    let eject = match cfg.eject.mode {
        EjectMode::Off => String::new(),
        mode => format!(
            ", ejection {} after {} failures for {} ms",
            mode.as_str(),
            cfg.eject.failure_limit,
            cfg.eject.retry.as_millis()
        ),
    };
    format!(
        "{}: ok (pool {} on {}, {} servers, {} / {}{eject}{udp}; metrics {metrics})",
        cfg.file.display(),
        cfg.pool,
        cfg.listen,
        cfg.servers.len(),
        cfg.hash,
        cfg.distribution
    )
}

pub fn run(args: &KvArgs) -> Result<()> {
    match &args.cmd {
        Some(KvCmd::Status { metrics, json }) => {
            let body = http_get(*metrics, "/status")?;
            if *json {
                println!("{body}");
            } else {
                let st: KvStatus = serde_json::from_str(&body).context("decoding status")?;
                print!("{}", render_all(&st));
            }
            return Ok(());
        }
        Some(KvCmd::Reload { metrics, timeout }) => {
            println!("{}", crate::reload::request(*metrics, *timeout)?);
            return Ok(());
        }
        None => {}
    }
    let cfgs = load(args)?;
    if args.check {
        for cfg in &cfgs {
            println!("{}", summary(cfg));
        }
        return Ok(());
    }
    // Blocked before any thread starts, so that only the wait below takes them.
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP]);
    let running = start_from(&cfgs, args)?;
    while signals.wait() == libc::SIGHUP {
        match running.reload() {
            Ok(changes) => eprintln!("weir kv: reloaded: {changes}"),
            Err(e) => eprintln!("weir kv: reload refused, the running pools stay: {e:#}"),
        }
    }
    eprintln!("weir kv: stopping");
    running.stop();
    Ok(())
}

/// A started switch: its pools, and their metrics endpoint.
pub struct Running {
    pools: Arc<Pools>,
    metrics: Option<Server>,
}

impl Running {
    /// The first pool's listener.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.pools
            .with(|p| p.first().expect("a switch runs a pool").proxy_addr())
    }

    /// The listener of the pool named `name`, if it runs.
    pub fn pool_addr(&self, name: &str) -> Option<SocketAddr> {
        self.pools
            .with(|p| p.iter().find(|p| p.name() == name).map(|p| p.proxy_addr()))
    }

    /// The XDP switch's status, when a pool has the UDP path.
    pub fn udp_status(&self) -> Option<crate::udp::StatusHandle> {
        self.pools.with(|p| p.iter().find_map(|p| p.udp_status()))
    }

    /// Where /metrics and /status answer, if they do.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// Re-reads the configuration and applies it (SIGHUP, `weir kv reload`).
    pub fn reload(&self) -> Result<String> {
        self.pools.reload()
    }

    /// Stops the metrics endpoint, then every pool (XDP path, then proxy).
    pub fn stop(self) {
        drop(self.metrics);
        drop(self.pools);
    }
}

/// Starts the pools of `cfgs`; a reload re-reads their file as `args` says.
pub fn start_from(cfgs: &[KvConfig], args: &KvArgs) -> Result<Running> {
    let args = args.clone();
    start_with(cfgs, Box::new(move || load(&args)))
}

/// Starts the pools of `cfgs`, which came from no file a reload could
/// re-read (a reload is refused).
pub fn start(cfgs: &[KvConfig]) -> Result<Running> {
    start_with(
        cfgs,
        Box::new(|| bail!("this switch was started without a configuration file to re-read")),
    )
}

/// Starts every pool of `cfgs` and the metrics endpoint; an error leaves
/// nothing running or attached.
fn start_with(cfgs: &[KvConfig], load: Loader) -> Result<Running> {
    let Some(first) = cfgs.first() else {
        bail!("no pool to run");
    };
    // Bound first, so that a taken address fails before anything is attached.
    let listener = match first.metrics {
        Some(m) => Some(TcpListener::bind(m).with_context(|| {
            format!(
                "metrics on {m}: is another weir kv running there? give this one its own \
                 address with --metrics ADDR (or `metrics` in the TOML), or --metrics off"
            )
        })?),
        None => None,
    };
    let pools = Arc::new(Pools::start(cfgs, load)?);
    let metrics = match listener {
        Some(l) => {
            let (st, rl) = (pools.clone(), pools.clone());
            let srv = crate::endpoint::serve(
                l,
                Arc::new(move || st.status()),
                Arc::new(move || rl.reload()),
            )?;
            eprintln!("weir kv: metrics on http://{}/metrics", srv.addr);
            Some(srv)
        }
        None => None,
    };
    Ok(Running { pools, metrics })
}
