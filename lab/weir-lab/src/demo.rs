//! `weir-lab demo`: weir's main job on a built-in lab. Builds the lab, runs
//! `weir serve` with the shipped example configuration, sends real HTTP
//! requests through the VIP, prints what happened and tears it all down.
//! While the traffic runs, a headless Chromium (when installed) watches the
//! live dashboard and saves a screenshot of it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::backend::Backend;
use crate::browser::{self, Browser};
use crate::client::spawn_http;
use crate::daemon::Daemon;
use crate::topology::Lab;

/// The configuration `make demo` runs: examples/weir.toml.
pub const EXAMPLE_CONFIG: &str = include_str!("../../../examples/weir.toml");

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Client connections to open through the VIP.
    #[arg(long, default_value_t = 60)]
    pub connections: usize,
    /// HTTP requests per connection (keep-alive).
    #[arg(long, default_value_t = 5)]
    pub requests: usize,
    /// Use this configuration instead of the shipped example (its interfaces
    /// and addresses must match the lab: see ARCHITECTURE.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to save a screenshot of the live dashboard, taken by headless
    /// Chromium while the traffic runs (skipped, with a warning, without it).
    #[arg(long, default_value = "out/dashboard.png")]
    pub screenshot: PathBuf,
    /// Take no screenshot.
    #[arg(long)]
    pub no_screenshot: bool,
}

/// The connections go out in this many waves, one a second, so that the
/// dashboard (which polls once a second) draws them over time.
const WAVES: usize = 5;

/// Opens the dashboard of the daemon's API in a headless browser inside the
/// lab; None, with a warning, when that cannot be done.
fn open_dashboard(daemon: &Daemon, ns: &str) -> Option<Browser> {
    if browser::find().is_none() {
        eprintln!(
            "warning: no chromium on PATH, so no dashboard screenshot \
             (apt-get install chromium, or make deps)"
        );
        return None;
    }
    let api = weir_control::run_record::RunRecord::read(&daemon.run_dir())
        .ok()
        .and_then(|r| r.api);
    let Some(api) = api else {
        eprintln!("warning: weir serve runs no API ([api] listen), so no dashboard screenshot");
        return None;
    };
    let url = format!("http://{}/", weir_control::api::reachable(api));
    match Browser::open(Some(ns), &url, 1280, 900) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("warning: no dashboard screenshot: {e:#}");
            None
        }
    }
}

/// Saves the page as a PNG at `path` once it has drawn a few samples.
fn screenshot(b: &mut Browser, path: &Path) -> Result<()> {
    b.wait_for(
        "Number(document.body.dataset.polls) >= 3",
        Duration::from_secs(5),
    )?;
    let png = b.screenshot()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: &DemoArgs) -> Result<()> {
    if args.connections == 0
        || args.connections > 1000
        || args.requests == 0
        || args.requests > 1000
    {
        bail!("--connections and --requests must be 1..=1000");
    }
    let config = match &args.config {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => EXAMPLE_CONFIG.to_string(),
    };
    crate::netns::install_signal_teardown();
    eprintln!("[1/4] building the lab: client, load balancer, 3 backends (network namespaces)");
    let lab = Lab::build(3)?;
    let backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)))
        .collect::<Result<_>>()?;

    eprintln!("[2/4] starting weir serve with examples/weir.toml in the load balancer's namespace");
    let exe = crate::weir_binary::locate()?;
    let mut daemon = Daemon::new(&exe, &lab.lb)?;
    daemon.write_config(&config)?;
    daemon.start()?;

    let mut browser = if args.no_screenshot {
        None
    } else {
        open_dashboard(&daemon, &lab.lb)
    };
    eprintln!(
        "[3/4] {} connections x {} requests to the VIP 10.77.100.1:80, in {WAVES} waves 1 s apart",
        args.connections, args.requests
    );
    let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
    let mut clients = Vec::with_capacity(args.connections);
    for w in 0..WAVES {
        if w > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let n = args.connections * (w + 1) / WAVES - args.connections * w / WAVES;
        clients.extend(spawn_http(
            &lab.client,
            vip,
            n,
            args.requests,
            Duration::from_millis(20),
        ));
    }
    // While the last wave is on its way.
    if let Some(b) = browser.as_mut() {
        match screenshot(b, &args.screenshot) {
            Ok(()) => eprintln!("      dashboard screenshot: {}", args.screenshot.display()),
            Err(e) => eprintln!("warning: no dashboard screenshot: {e:#}"),
        }
    }
    drop(browser);
    let records: Vec<_> = clients
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();

    eprintln!("[4/4] results\n");
    let mut per_backend: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut violations = 0;
    let mut failed = Vec::new();
    for r in &records {
        if r.violated() {
            violations += 1;
            if let Some(e) = &r.error {
                failed.push(e.clone());
            }
        }
        if let Some(b) = r.backend() {
            let e = per_backend.entry(b.to_string()).or_default();
            e.0 += 1;
            e.1 += r.served_by.len();
        }
    }
    println!(
        "{:<12} {:>12} {:>10} {:>16}",
        "backend", "connections", "requests", "served (server)"
    );
    for b in &backends {
        let (c, r) = per_backend.get(&b.name).copied().unwrap_or_default();
        println!(
            "{:<12} {:>12} {:>10} {:>16}",
            b.name,
            c,
            r,
            b.requests.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    println!("\nPCC violations (a connection served by two backends, or broken): {violations}");
    for e in failed.iter().take(5) {
        println!("  failure: {e}");
    }
    let status = daemon.status_json()?;
    println!("\ndata-plane counters (weir status):");
    if let Some(counters) = status["counters"].as_object() {
        for (name, n) in counters {
            if n.as_u64().unwrap_or(0) > 0 {
                println!("  {name:<20} {n}");
            }
        }
    }
    let c = &status["connections"];
    println!(
        "connections in the table: {} established, {} closing, {} half-open",
        c["established"], c["closing"], c["half_open"]
    );
    daemon.stop()?;
    drop(daemon);
    drop(backends);
    drop(lab);
    eprintln!("\nlab torn down.");
    if violations > 0 {
        bail!("{violations} connections broke or moved between backends");
    }
    Ok(())
}
