//! `weir kv`: run the memcached switch (TCP proxy, metrics), check a
//! configuration, or show a running switch's statistics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use crate::config::KvConfig;
use crate::proxy::Proxy;
use crate::stats::Snapshot;

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

fn load(args: &KvArgs) -> Result<KvConfig> {
    match (&args.nutcracker, &args.config) {
        (Some(p), _) => Ok(KvConfig::load_nutcracker(p, args.pool.as_deref())?),
        (None, Some(p)) => Ok(KvConfig::load_toml(p)?),
        (None, None) => bail!("give --nutcracker FILE.yml or --config FILE.toml"),
    }
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
        println!(
            "{}: ok (pool {}, {} servers, {} / {})",
            cfg.file.display(),
            cfg.pool,
            cfg.servers.len(),
            cfg.hash,
            cfg.distribution
        );
        return Ok(());
    }
    if cfg.udp.is_some() {
        bail!(
            "{}: udp: the XDP memcached path is not available in this build yet \
             (weir_dataplane::kv has not landed); remove [udp]/[cache] to run the TCP proxy",
            cfg.file.display()
        );
    }
    let dist = Arc::new(cfg.distribution());
    let proxy = Arc::new(Proxy::start(&cfg, dist, None)?);
    eprintln!(
        "weir kv: pool {} on {} ({} servers, {}/{}, {} workers)",
        cfg.pool,
        proxy.local_addr(),
        cfg.servers.len(),
        cfg.hash,
        cfg.distribution,
        cfg.workers
    );
    let stop = Arc::new(AtomicBool::new(false));
    install_stop(&stop);
    if let Some(m) = cfg.metrics {
        let l = TcpListener::bind(m).with_context(|| format!("metrics on {m}"))?;
        eprintln!("weir kv: metrics on http://{m}/metrics");
        let (proxy, cfg) = (proxy.clone(), cfg.clone());
        std::thread::spawn(move || serve_metrics(l, proxy, cfg));
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("weir kv: stopping");
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop(stop: &Arc<AtomicBool>) {
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let s = stop.clone();
    std::thread::spawn(move || loop {
        if STOP.load(Ordering::SeqCst) {
            s.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    });
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
}

fn status_of(proxy: &Proxy, cfg: &KvConfig) -> Status {
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
        hot_keys: Vec::new(),
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
    o
}

fn serve_metrics(l: TcpListener, proxy: Arc<Proxy>, cfg: KvConfig) {
    for conn in l.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        let mut r = BufReader::new(match conn.try_clone() {
            Ok(c) => c,
            Err(_) => continue,
        });
        if r.read_line(&mut line).is_err() {
            continue;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/");
        let st = status_of(&proxy, &cfg);
        let (code, ctype, body) = match path {
            "/metrics" => ("200 OK", "text/plain; version=0.0.4", prometheus(&st)),
            "/status" => (
                "200 OK",
                "application/json",
                serde_json::to_string_pretty(&st).unwrap_or_default(),
            ),
            _ => (
                "404 Not Found",
                "text/plain",
                "try /metrics or /status\n".into(),
            ),
        };
        let _ = write!(
            conn,
            "HTTP/1.0 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("no weir kv answers on {addr} (is it running? --metrics ADDR)"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Ok(body.to_string())
}
