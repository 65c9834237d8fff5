//! `weir kv`: run the memcached switch (TCP proxy, metrics), check a
//! configuration, or show a running switch's statistics.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use weir_http::Server;
use weir_sys::SignalSet;

use crate::config::{parse_metrics, KvConfig, UdpConfig};
use crate::health::EjectMode;
use crate::invalidate::Invalidation;
use crate::proxy::Proxy;
use crate::status::{render, status_of};
use crate::udp::{UdpSwitch, XdpInvalidator};

pub use crate::endpoint::http_get;
pub use crate::status::Status;

#[derive(Args, Debug)]
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
    /// The pool to run, when the YAML file has several.
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

#[derive(Subcommand, Debug)]
pub enum KvCmd {
    /// Statistics of a running `weir kv` (read from its metrics endpoint).
    Status {
        /// The metrics address of the running switch.
        #[arg(long, default_value = "127.0.0.1:9122")]
        metrics: SocketAddr,
        #[arg(long)]
        json: bool,
    },
}

/// The configuration `args` name, with the command line's overrides.
pub fn load(args: &KvArgs) -> Result<KvConfig> {
    let mut cfg = match (&args.nutcracker, &args.config) {
        (Some(p), _) => KvConfig::load_nutcracker(p, args.pool.as_deref())?,
        (None, Some(p)) => KvConfig::load_toml(p)?,
        (None, None) => bail!("give --nutcracker FILE.yml or --config FILE.toml"),
    };
    if !args.udp_interface.is_empty() {
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
        cfg.metrics = m;
    }
    Ok(cfg)
}

pub fn run(args: &KvArgs) -> Result<()> {
    if let Some(KvCmd::Status { metrics, json }) = &args.cmd {
        let body = http_get(*metrics, "/status")?;
        if *json {
            println!("{body}");
        } else {
            let st: Status = serde_json::from_str(&body).context("decoding status")?;
            print!("{}", render(&st));
        }
        return Ok(());
    }
    let cfg = load(args)?;
    if args.check {
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
        println!(
            "{}: ok (pool {}, {} servers, {} / {}{eject}{udp}; metrics {metrics})",
            cfg.file.display(),
            cfg.pool,
            cfg.servers.len(),
            cfg.hash,
            cfg.distribution
        );
        return Ok(());
    }
    // Blocked before any thread starts, so that only the wait below takes them.
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM]);
    let running = start(&cfg)?;
    signals.wait();
    eprintln!("weir kv: stopping");
    running.stop();
    Ok(())
}

/// A started switch: the TCP proxy, its metrics endpoint and, with `[udp]`,
/// the XDP path.
pub struct Running {
    proxy: Arc<Proxy>,
    metrics: Option<Server>,
    switch: Option<UdpSwitch>,
}

impl Running {
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy.local_addr()
    }

    /// The XDP switch's status, when the UDP path runs.
    pub fn udp_status(&self) -> Option<crate::udp::StatusHandle> {
        self.switch.as_ref().map(|s| s.status_handle())
    }

    /// Where /metrics and /status answer, if they do.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// Stops the metrics endpoint, detaches the XDP path and stops the proxy.
    pub fn stop(self) {
        drop(self.metrics);
        if let Some(sw) = self.switch {
            sw.stop();
        }
        drop(self.proxy);
    }
}

/// Starts what `cfg` describes; an error leaves nothing running or attached.
pub fn start(cfg: &KvConfig) -> Result<Running> {
    // Bound first, so that a taken address fails before anything is attached.
    let listener = match cfg.metrics {
        Some(m) => Some(TcpListener::bind(m).with_context(|| {
            format!(
                "metrics on {m}: is another weir kv running there? give this one its own \
                 address with --metrics ADDR (or `metrics` in the TOML), or --metrics off"
            )
        })?),
        None => None,
    };
    // The XDP switch first: the TCP proxy's writes must invalidate its cache
    // from the first one on.
    let switch = match &cfg.udp {
        Some(u) => {
            let sw = UdpSwitch::start(cfg)?;
            eprintln!(
                "weir kv: XDP switch on {} (udp port {}, {}, cache {})",
                u.interfaces.join(","),
                u.port,
                u.forward,
                if cfg.cache.enabled { "on" } else { "off" }
            );
            Some(sw)
        }
        None => None,
    };
    let inval = switch
        .as_ref()
        .filter(|_| cfg.cache.enabled)
        .map(|sw| Invalidation::new(Arc::new(XdpInvalidator(sw.cache()))));
    let udp_status = switch.as_ref().map(|s| s.status_handle());
    let dist = Arc::new(cfg.distribution());
    let proxy = Arc::new(Proxy::start(cfg, dist, inval)?);
    if let Some(sw) = &switch {
        sw.follow(proxy.routing().clone());
    }
    eprintln!(
        "weir kv: pool {} on {} ({} servers, {}/{}, {} workers)",
        cfg.pool,
        proxy.local_addr(),
        cfg.servers.len(),
        cfg.hash,
        cfg.distribution,
        cfg.workers
    );
    let metrics = match listener {
        Some(l) => {
            let (proxy, cfg) = (proxy.clone(), cfg.clone());
            let status = Arc::new(move || status_of(&proxy, &cfg, udp_status.as_ref()));
            let srv = crate::endpoint::serve(l, status)?;
            eprintln!("weir kv: metrics on http://{}/metrics", srv.addr);
            Some(srv)
        }
        None => None,
    };
    Ok(Running {
        proxy,
        metrics,
        switch,
    })
}
