//! `weir kv`: run the memcached switch (TCP proxy, metrics), check a
//! configuration, or show a running switch's statistics.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use weir_control::http::{Response, Server};
use weir_control::signals::SignalSet;

use crate::config::{parse_metrics, KvConfig, UdpConfig};
use crate::invalidate::Invalidation;
use crate::proxy::Proxy;
use crate::stats::Snapshot;
use crate::udp::{StatusHandle, UdpStatus, UdpSwitch, XdpInvalidator};

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
        println!(
            "{}: ok (pool {}, {} servers, {} / {}{udp}; metrics {metrics})",
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
            let srv = Server::on(l, move |path| {
                metrics_page(path, &status_of(&proxy, &cfg, udp_status.as_ref()))
            })?;
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

/// What `/status` returns.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct Status {
    pub pool: String,
    pub listen: String,
    pub hash: String,
    pub distribution: String,
    pub servers: Vec<String>,
    pub stats: Snapshot,
    /// Hot keys of the XDP cache (empty while the UDP path is not loaded).
    pub hot_keys: Vec<String>,
    /// The XDP switch, when `[udp]` is configured.
    #[serde(default)]
    pub udp: Option<UdpStatus>,
}

pub fn status_of(proxy: &Proxy, cfg: &KvConfig, udp: Option<&StatusHandle>) -> Status {
    let udp = udp.map(|h| h.get());
    Status {
        pool: cfg.pool.clone(),
        listen: proxy.local_addr().to_string(),
        hash: cfg.hash.to_string(),
        distribution: cfg.distribution.to_string(),
        servers: cfg
            .servers
            .iter()
            .map(|s| format!("{}:{}:{}", s.addr, s.port, s.weight))
            .collect(),
        stats: proxy.stats(),
        hot_keys: udp.as_ref().map(|u| u.hot_keys.clone()).unwrap_or_default(),
        udp,
    }
}

pub fn render(st: &Status) -> String {
    let s = &st.stats;
    let mut out = format!(
        "pool {} on {} ({} / {})\nclients {} (total {})  requests {}  writes {}\nget keys {}  hits {}  misses {}\nerrors: client {}  server {}  timeouts {}  binary refused {}\ninvalidations {} (failed {})\n",
        st.pool, st.listen, st.hash, st.distribution,
        s.client_connections, s.client_connections_total, s.requests, s.writes,
        s.get_keys, s.get_hits, s.get_keys.saturating_sub(s.get_hits),
        s.client_errors, s.server_errors, s.timeouts, s.binary_refused,
        s.invalidations, s.invalidation_failures
    );
    out.push_str("server                     requests\n");
    for (i, name) in st.servers.iter().enumerate() {
        out.push_str(&format!(
            "{name:<26} {}\n",
            s.server_requests.get(i).copied().unwrap_or(0)
        ));
    }
    out.push_str(&format!(
        "hot keys: {}\n",
        if st.hot_keys.is_empty() {
            "-".into()
        } else {
            st.hot_keys.join(" ")
        }
    ));
    if let Some(u) = &st.udp {
        let x = |n: &str| u.xdp.get(n).copied().unwrap_or(0);
        let passed: u64 = u
            .xdp
            .iter()
            .filter(|(k, _)| k.starts_with("pass_"))
            .map(|(_, v)| *v)
            .sum();
        out.push_str(&format!(
            "udp (XDP, prog {}) on {} port {} {}: rx {}  forwarded {}  to kernel {}  writes {}\n\
             cache {}: hits {}  misses {}  cached {}  installs {}  races {}  settle skips {}  \
             evictions {}  fetch errors {}  too large {}\n",
            u.prog_id,
            u.interfaces.join(","),
            u.port,
            u.forward,
            x("rx"),
            x("tx") + x("redirect"),
            passed,
            x("write"),
            if u.cache_enabled { "on" } else { "off" },
            u.cache_hits,
            u.cache_misses,
            u.cached_keys,
            u.installs,
            u.install_races,
            u.settle_skips,
            u.evictions,
            u.fetch_errors,
            u.too_large
        ));
        for (i, name) in st.servers.iter().enumerate() {
            out.push_str(&format!(
                "{name:<26} {} (udp)\n",
                u.server_requests.get(i).copied().unwrap_or(0)
            ));
        }
        if u.bpf_run_cnt > 0 {
            out.push_str(&format!(
                "bpf: {} runs, {:.0} ns/run\n",
                u.bpf_run_cnt,
                u.bpf_run_time_ns as f64 / u.bpf_run_cnt as f64
            ));
        }
    }
    out
}

/// Prometheus text format.
pub fn prometheus(st: &Status) -> String {
    let s = &st.stats;
    let mut o = String::new();
    let mut c = |name: &str, help: &str, v: u64| {
        o.push_str(&format!(
            "# HELP weir_kv_{name} {help}\n# TYPE weir_kv_{name} counter\nweir_kv_{name} {v}\n"
        ));
    };
    c(
        "requests_total",
        "Requests received from clients.",
        s.requests,
    );
    c("writes_total", "Mutating requests.", s.writes);
    c("get_keys_total", "Keys asked for by get/gets.", s.get_keys);
    c("get_hits_total", "Keys found.", s.get_hits);
    c(
        "get_misses_total",
        "Keys not found.",
        s.get_keys.saturating_sub(s.get_hits),
    );
    c(
        "client_errors_total",
        "Bad requests answered with an error.",
        s.client_errors,
    );
    c(
        "server_errors_total",
        "SERVER_ERROR replies.",
        s.server_errors,
    );
    c("timeouts_total", "Requests timed out.", s.timeouts);
    c(
        "invalidations_total",
        "Cache invalidations.",
        s.invalidations,
    );
    c(
        "invalidation_failures_total",
        "Failed invalidations (write refused).",
        s.invalidation_failures,
    );
    c(
        "client_connections_total",
        "Client connections accepted.",
        s.client_connections_total,
    );
    o.push_str("# HELP weir_kv_client_connections Open client connections.\n# TYPE weir_kv_client_connections gauge\n");
    o.push_str(&format!(
        "weir_kv_client_connections {}\n",
        s.client_connections
    ));
    o.push_str("# HELP weir_kv_server_requests_total Requests sent to each server.\n# TYPE weir_kv_server_requests_total counter\n");
    for (i, name) in st.servers.iter().enumerate() {
        o.push_str(&format!(
            "weir_kv_server_requests_total{{server=\"{name}\"}} {}\n",
            s.server_requests.get(i).copied().unwrap_or(0)
        ));
    }
    if let Some(u) = &st.udp {
        let mut c = |name: &str, help: &str, v: u64| {
            o.push_str(&format!(
                "# HELP weir_kv_{name} {help}\n# TYPE weir_kv_{name} counter\nweir_kv_{name} {v}\n"
            ));
        };
        c(
            "udp_cache_hits_total",
            "GETs answered by XDP from the in-switch cache.",
            u.cache_hits,
        );
        c(
            "udp_cache_misses_total",
            "Single-key GETs the cache could not answer.",
            u.cache_misses,
        );
        c(
            "udp_cache_installs_total",
            "Hot values installed.",
            u.installs,
        );
        c(
            "udp_cache_install_races_total",
            "Installs refused because a write came after the ticket.",
            u.install_races,
        );
        c(
            "udp_cache_evictions_total",
            "Keys evicted as no longer hot.",
            u.evictions,
        );
        c(
            "udp_hotkey_fetch_errors_total",
            "Failed fetches of hot values.",
            u.fetch_errors,
        );
        c("udp_samples_total", "Keys sampled by XDP.", u.samples);
        o.push_str(
            "# HELP weir_kv_udp_hot_keys Hot keys now.\n# TYPE weir_kv_udp_hot_keys gauge\n",
        );
        o.push_str(&format!("weir_kv_udp_hot_keys {}\n", u.hot_keys.len()));
        o.push_str("# HELP weir_kv_udp_cached_keys Keys in the cache map.\n# TYPE weir_kv_udp_cached_keys gauge\n");
        o.push_str(&format!("weir_kv_udp_cached_keys {}\n", u.cached_keys));
        o.push_str("# HELP weir_kv_xdp_total XDP counters of weir_kv by name.\n# TYPE weir_kv_xdp_total counter\n");
        for (k, v) in &u.xdp {
            o.push_str(&format!("weir_kv_xdp_total{{counter=\"{k}\"}} {v}\n"));
        }
        o.push_str("# HELP weir_kv_udp_server_requests_total Requests XDP forwarded to each server.\n# TYPE weir_kv_udp_server_requests_total counter\n");
        for (i, name) in st.servers.iter().enumerate() {
            o.push_str(&format!(
                "weir_kv_udp_server_requests_total{{server=\"{name}\"}} {}\n",
                u.server_requests.get(i).copied().unwrap_or(0)
            ));
        }
        o.push_str("# HELP weir_kv_bpf_run_time_ns_total BPF run time of weir_kv (kernel.bpf_stats_enabled=1).\n# TYPE weir_kv_bpf_run_time_ns_total counter\n");
        o.push_str(&format!(
            "weir_kv_bpf_run_time_ns_total {}\n",
            u.bpf_run_time_ns
        ));
    }
    o
}

/// The metrics endpoint's answer to a GET of `path`.
fn metrics_page(path: &str, st: &Status) -> Response {
    match path {
        "/metrics" => Response::new(200, "text/plain; version=0.0.4", prometheus(st)),
        "/status" => Response::new(
            200,
            "application/json",
            serde_json::to_string_pretty(st).unwrap_or_default(),
        ),
        _ => Response::new(404, "text/plain", "try /metrics or /status\n"),
    }
}

/// GETs `path` from a running switch's metrics endpoint: the body of a 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("no weir kv answers on {addr} (is it running? --metrics ADDR)"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .with_context(|| format!("asking {addr} for {path}"))?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .with_context(|| format!("reading {path} from {addr}"))?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("{addr}{path} answered `{status}`: is this the metrics address of a weir kv?");
    }
    Ok(body.to_string())
}
