//! `weir-lab demo`: weir's main job on a built-in lab. Three web backends of
//! unequal speed, each with an embedded `weir agent`, sit behind one VIP.
//! The same client load runs twice: once under the load-aware controller
//! (AWFD, the shipped example configuration) and once under a static split
//! (the same configuration without its controller: equal weights). Part way
//! through each run one backend slows down tenfold. The demo prints, per
//! run and phase (before and after the slowdown), the share of new
//! connections each backend got, response times and failures, writes the
//! same as JSON, and tears the lab down. While the controller runs, a
//! headless Chromium (when installed) saves a screenshot of the dashboard.

pub mod load;
pub mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::backend::{Backend, BackendOptions};
use crate::browser::{self, Browser};
use crate::daemon::Daemon;
use crate::topology::Lab;
use load::LoadShape;
use report::{BackendSetup, Report, Run};

/// The configuration `make demo` runs: examples/weir.toml.
pub const EXAMPLE_CONFIG: &str = include_str!("../../../examples/weir.toml");

/// Service time per request of each backend: backend-1 is three times as
/// fast as the others.
const SERVICE_MS: [u64; 3] = [2, 6, 6];
/// The backend that slows down, and its service time afterwards (a tenth
/// of its capacity: strong enough to show on a busy machine).
const SLOWED: usize = 1;
const SLOWED_TO_MS: u64 = 60;
/// The agents' sliding window.
const AGENT_WINDOW: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Client threads; each opens one keep-alive connection after another.
    #[arg(long, default_value_t = 6)]
    pub threads: usize,
    /// HTTP requests per connection.
    #[arg(long, default_value_t = 2)]
    pub requests: usize,
    /// Milliseconds between the starts of a thread's requests.
    #[arg(long, default_value_t = 25)]
    pub pause_ms: u64,
    /// Seconds of load before the measured phases (the controller's first
    /// estimates).
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Seconds measured before the slowdown.
    #[arg(long, default_value_t = 6.0)]
    pub before: f64,
    /// Seconds measured after the slowdown.
    #[arg(long, default_value_t = 8.0)]
    pub after: f64,
    /// Use this configuration instead of the shipped example. It needs a
    /// [controller] section (the static run drops it), and its interfaces,
    /// addresses and agents must match the lab: see ARCHITECTURE.md.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long, default_value = "out/demo.json")]
    pub json: PathBuf,
    /// Where to save a screenshot of the live dashboard, taken by headless
    /// Chromium while the controller runs (skipped, with a warning, without it).
    #[arg(long, default_value = "out/dashboard.png")]
    pub screenshot: PathBuf,
    /// Take no screenshot.
    #[arg(long)]
    pub no_screenshot: bool,
}

impl DemoArgs {
    fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.threads) {
            bail!("--threads must be 1..=64, got {}", self.threads);
        }
        if !(1..=1000).contains(&self.requests) {
            bail!("--requests must be 1..=1000, got {}", self.requests);
        }
        if !(1..=10_000).contains(&self.pause_ms) {
            bail!("--pause-ms must be 1..=10000, got {}", self.pause_ms);
        }
        for (name, v, lo) in [
            ("--warmup", self.warmup, 0.0),
            ("--before", self.before, 1.0),
            ("--after", self.after, 1.0),
        ] {
            if !(v.is_finite() && (lo..=60.0).contains(&v)) {
                bail!("{name} must be {lo}..=60 seconds, got {v}");
            }
        }
        Ok(())
    }
}

/// `config` without its `[controller]` table: the static split the demo
/// compares the controller with. An error when it has none.
pub fn without_controller(config: &str) -> Result<String> {
    let mut out = String::new();
    let mut found = false;
    let mut skipping = false;
    for line in config.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            skipping = t == "[controller]";
            found |= skipping;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !found {
        bail!(
            "the configuration has no [controller] section: the demo runs it with its \
             controller and without (add [controller] policy = \"awfd\", telemetry = \"agent\")"
        );
    }
    Ok(out)
}

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
    write_file(path, &png)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Sleeps until `t0 + at_s`.
fn sleep_until(t0: Instant, at_s: f64) {
    let at = t0 + Duration::from_secs_f64(at_s);
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// One run: `weir serve` with `config`, the load, the slowdown between the
/// phases; the backends are back to their normal speed afterwards.
#[allow(clippy::too_many_arguments)]
fn run_once(
    args: &DemoArgs,
    policy: &str,
    config: &str,
    lab: &Lab,
    backends: &[Backend],
    exe: &Path,
    shape: LoadShape,
    want_screenshot: bool,
) -> Result<Run> {
    let mut daemon = Daemon::new(exe, &lab.lb)?;
    daemon.write_config(config)?;
    daemon
        .start()
        .with_context(|| format!("starting weir serve for the {policy} run"))?;
    let mut browser = if want_screenshot {
        open_dashboard(&daemon, &lab.lb)
    } else {
        None
    };
    let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
    let t0 = Instant::now();
    let threads = load::start(&lab.client, vip, shape, t0);
    let slow_at = args.warmup + args.before;
    sleep_until(t0, slow_at);
    backends[SLOWED].set_delay(Duration::from_millis(SLOWED_TO_MS));
    eprintln!(
        "      {policy}: {} now takes {SLOWED_TO_MS} ms per request",
        backends[SLOWED].name
    );
    if let Some(b) = browser.as_mut() {
        // Once the controller has had time to react, so the page shows it.
        sleep_until(t0, slow_at + 3.0);
        match screenshot(b, &args.screenshot) {
            Ok(()) => eprintln!("      dashboard screenshot: {}", args.screenshot.display()),
            Err(e) => eprintln!("warning: no dashboard screenshot: {e:#}"),
        }
    }
    drop(browser);
    let conns: Vec<load::Conn> = threads
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    backends[SLOWED].set_delay(Duration::from_millis(SERVICE_MS[SLOWED]));
    daemon.stop()?;
    let names: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    Ok(Run {
        policy: policy.to_string(),
        phases: vec![
            report::phase("before", &conns, &names, args.warmup, slow_at),
            report::phase("after", &conns, &names, slow_at, slow_at + args.after),
        ],
    })
}

pub fn run(args: &DemoArgs) -> Result<()> {
    args.validate()?;
    let started = Instant::now();
    let awfd_config = match &args.config {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => EXAMPLE_CONFIG.to_string(),
    };
    let static_config = without_controller(&awfd_config)?;
    crate::netns::install_signal_teardown();
    eprintln!(
        "[1/4] building the lab: client, load balancer, 3 backends (network namespaces); \
         service times {} ms, each with a weir agent",
        SERVICE_MS.map(|m| m.to_string()).join(" / ")
    );
    let lab = Lab::build(SERVICE_MS.len())?;
    let backends: Vec<Backend> = lab
        .backends
        .iter()
        .zip(SERVICE_MS)
        .enumerate()
        .map(|(i, (ns, ms))| {
            let opts = BackendOptions {
                delay_us: ms * 1000,
                agent_window: Some(AGENT_WINDOW),
            };
            Backend::start_with(ns, &format!("backend-{}", i + 1), &opts)
        })
        .collect::<Result<_>>()?;
    let exe = crate::weir_binary::locate()?;
    let shape = LoadShape {
        threads: args.threads,
        per_conn: args.requests,
        pause: Duration::from_millis(args.pause_ms),
        duration: Duration::from_secs_f64(args.warmup + args.before + args.after),
    };
    let plan = format!(
        "{} threads of {}-request connections to the VIP 10.77.100.1:80 for {:.0} s \
         ({:.0} s warm-up, {:.0} s before and {:.0} s after {} slows down)",
        args.threads,
        args.requests,
        shape.duration.as_secs_f64(),
        args.warmup,
        args.before,
        args.after,
        backends[SLOWED].name
    );
    eprintln!("[2/4] load-aware: weir serve with the AWFD controller; {plan}");
    let awfd = run_once(
        args,
        "awfd",
        &awfd_config,
        &lab,
        &backends,
        &exe,
        shape,
        !args.no_screenshot,
    )?;
    eprintln!("[3/4] static split: the same configuration without [controller], the same load");
    let fixed = run_once(
        args,
        "static",
        &static_config,
        &lab,
        &backends,
        &exe,
        shape,
        false,
    )?;
    drop(backends);
    drop(lab);
    eprintln!("[4/4] results (lab torn down)\n");

    let report = Report {
        backends: SERVICE_MS
            .iter()
            .enumerate()
            .map(|(i, &ms)| BackendSetup {
                backend: format!("backend-{}", i + 1),
                service_ms: ms as f64,
                slowed_to_ms: (i == SLOWED).then_some(SLOWED_TO_MS as f64),
            })
            .collect(),
        slowed_backend: format!("backend-{}", SLOWED + 1),
        warmup_s: args.warmup,
        before_s: args.before,
        after_s: args.after,
        client_threads: args.threads,
        requests_per_connection: args.requests,
        runs: vec![awfd, fixed],
        wall_s: started.elapsed().as_secs_f64(),
    };
    println!("{}", report::table(&report));
    write_file(
        &args.json,
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    eprintln!("wrote {}", args.json.display());
    let moved: usize = report
        .runs
        .iter()
        .flat_map(|r| &r.phases)
        .map(|p| p.moved_connections)
        .sum();
    if moved > 0 {
        bail!("{moved} connections moved between backends");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_split_is_the_example_without_its_controller() {
        let s = without_controller(EXAMPLE_CONFIG).unwrap();
        assert!(EXAMPLE_CONFIG.contains("[controller]\npolicy = \"awfd\""));
        assert!(!s.contains("\n[controller]") && !s.contains("policy ="));
        assert!(s.contains("[dataplane]") && s.contains("[[vip]]"));
        assert_eq!(s.matches("[[vip.dip]]").count(), 3);
        let e = without_controller(&s).unwrap_err().to_string();
        assert!(e.contains("no [controller] section"), "{e}");
    }
}
