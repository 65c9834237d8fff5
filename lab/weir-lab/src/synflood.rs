//! `weir-lab synflood`: how many spoofed SYNs per second a given connection
//! table withstands with no established connection lost, in each tier.
//!
//! The standard lab (client, weir, backends) with a nat VIP. For each tier
//! and SYN budget (`syn_rate`, software and hybrid tiers), at each offered
//! rate: keep-alive HTTP connections that send a request every interval
//! through the flood, fresh connections opened one after another during it,
//! and SYNs from never-reused spoofed sources (the labs' generator). A row
//! reports what reached a half-open table (XDP's or the workers'), what the
//! SYN budget dropped in XDP, what the workers' receive rings dropped, how
//! many established connections broke, how many new connections succeeded
//! during the flood, and how many frames reached the client from a
//! backend's own address.

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_progress::Progress;

use crate::backend::Backend;
use crate::client::{http_once, spawn_http};
use crate::daemon::Daemon;
use crate::leaks::LeakWatch;
use crate::topology::Lab;
use crate::traffic::{mac_in, offer, GenSpec, OfferSpec};

const VIP: &str = "10.77.100.1:80";
/// The spoofed sources: never a lab address.
const FLOOD_NET: [u8; 4] = [10, 200, 0, 0];

/// A tier of weir, as `[dataplane] tier` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FloodTier {
    Xdp,
    Software,
    Hybrid,
}

impl FloodTier {
    fn name(self) -> &'static str {
        match self {
            FloodTier::Xdp => "xdp",
            FloodTier::Software => "software",
            FloodTier::Hybrid => "hybrid",
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct SynFloodArgs {
    /// The tiers to run, one weir each.
    #[arg(long, value_delimiter = ',', default_values_t = [FloodTier::Xdp])]
    #[arg(value_enum)]
    pub tiers: Vec<FloodTier>,
    /// Software and hybrid tiers: weir's `syn_rate` (SYNs a second each CPU
    /// admits to the workers; 0: no budget), one weir each; absent, weir's
    /// default.
    #[arg(long, value_delimiter = ',')]
    pub syn_rates: Vec<u32>,
    /// Offered SYN rates, per second (0: as fast as the generator goes).
    #[arg(long, value_delimiter = ',', default_values_t = [25_000u64, 50_000, 100_000, 200_000, 0])]
    pub rates: Vec<u64>,
    /// Seconds of flood per rate.
    #[arg(long, default_value_t = 8.0)]
    pub duration: f64,
    /// `conn_table_size` of weir (established connections).
    #[arg(long, default_value_t = 4096)]
    pub conn_table_size: u32,
    /// `half_open_table_size` of weir.
    #[arg(long, default_value_t = 1024)]
    pub half_open_table_size: u32,
    /// Keep-alive connections kept busy through the flood.
    #[arg(long, default_value_t = 100)]
    pub established: usize,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

/// One offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub tier: FloodTier,
    /// `syn_rate` of the software and hybrid tiers (None in the xdp tier).
    pub syn_rate: Option<u32>,
    pub offered_pps: f64,
    /// SYNs that reached a half-open table: XDP's, or the workers'.
    pub syns_in_table: u64,
    pub syns_in_table_pps: f64,
    /// SYNs the budget dropped in XDP (`drop_syn_budget`).
    pub syns_over_budget: u64,
    /// Packets the kernel dropped at the workers' full receive rings.
    pub rx_ring_full: u64,
    pub established: usize,
    pub established_broken: usize,
    pub new_tried: u64,
    pub new_ok: u64,
    /// Frames that reached the client from a backend's own address.
    pub leaked: u64,
}

/// Runs `args` with the `weir` binary at `exe`; prints a table.
pub fn run(exe: &Path, args: &SynFloodArgs) -> Result<Vec<Row>> {
    ensure!(!args.rates.is_empty(), "--rates: give at least one rate");
    ensure!(
        args.duration > 0.0 && args.duration <= 120.0,
        "--duration: between 0 and 120 seconds"
    );
    ensure!(
        (1..=100_000).contains(&args.established),
        "--established: 1 to 100000 connections"
    );
    ensure!(!args.tiers.is_empty(), "--tiers: give at least one tier");
    ensure!(
        args.syn_rates.is_empty() || args.tiers.iter().any(|&t| t != FloodTier::Xdp),
        "--syn-rates: the SYN budget is the software and hybrid tiers'; add one of them to --tiers"
    );
    let max = weir_dataplane::loader::SynBudget::MAX_RATE;
    ensure!(
        args.syn_rates.iter().all(|&r| r <= max),
        "--syn-rates: 0 (no budget) to {max} SYNs a second"
    );
    let setups = setups(args);
    let progress = Progress::bar(
        "weir-lab synflood",
        (setups.len() * args.rates.len()) as u64,
    );
    progress.set_message("building the lab: client, load balancer, 2 backends");
    let lab = Lab::build(2).context("building the lab")?;
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)))
        .collect::<Result<_>>()?;
    let leaks = LeakWatch::start(&lab.client, "eth0")?;
    let vip: SocketAddr = VIP.parse().unwrap();
    let lb_mac = mac_in(&lab.lb, "wc0")?;
    let total = setups.len() * args.rates.len();
    let mut rows = Vec::new();
    for &(tier, syn_rate) in &setups {
        // A weir of its own for each setup: the tiers' pinned tables differ.
        let mut d = Daemon::new(exe, &lab.lb)?;
        d.write_config(&config(args, tier, syn_rate))?;
        d.start()?;
        for &rate in &args.rates {
            let shown = if rate == 0 {
                "max".to_string()
            } else {
                rate.to_string()
            };
            let budget = syn_rate.map_or(String::new(), |r| format!(", syn_rate {r}"));
            progress.set_message(format!(
                "{} tier{budget}: {shown} SYN/s for {} s against {} established connections",
                tier.name(),
                args.duration,
                args.established
            ));
            let seed = rows.len() as u64;
            let mut row = one_rate(&lab, &d, &leaks, vip, lb_mac, rate, seed, args)?;
            (row.tier, row.syn_rate) = (tier, syn_rate);
            progress.inc(1);
            progress.note(format!(
                "[{}/{total}] {} tier{budget}, {shown} SYN/s: {} SYNs reached a table, {} over \
                 budget, {} ring-full drops, {} broken, {}/{} new ok, {} leaked",
                rows.len() + 1,
                tier.name(),
                row.syns_in_table,
                row.syns_over_budget,
                row.rx_ring_full,
                row.established_broken,
                row.new_ok,
                row.new_tried,
                row.leaked
            ));
            rows.push(row);
        }
        d.stop()?;
    }
    let broken: usize = rows.iter().map(|r| r.established_broken).sum();
    let leaked: u64 = rows.iter().map(|r| r.leaked).sum();
    progress.finish(format!(
        "{} rates, {broken} established connections broken, {leaked} replies leaked",
        rows.len()
    ));
    print!("{}", render(args, &rows));
    if let Some(p) = &args.json {
        fs::write(p, serde_json::to_vec_pretty(&rows)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(rows)
}

/// Each tier once, the software and hybrid tiers once per SYN budget
/// (`None`: weir's default).
fn setups(args: &SynFloodArgs) -> Vec<(FloodTier, Option<u32>)> {
    let budgets: Vec<Option<u32>> = if args.syn_rates.is_empty() {
        vec![None]
    } else {
        args.syn_rates.iter().map(|&r| Some(r)).collect()
    };
    let mut out = Vec::new();
    for &tier in &args.tiers {
        if tier == FloodTier::Xdp {
            out.push((tier, None));
        } else {
            out.extend(budgets.iter().map(|&b| (tier, b)));
        }
    }
    out
}

fn config(args: &SynFloodArgs, tier: FloodTier, syn_rate: Option<u32>) -> String {
    let budget = syn_rate.map_or(String::new(), |r| format!("syn_rate = {r}\n"));
    format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\nconn_table_size = {}\n\
         half_open_table_size = {}\ntier = \"{}\"\n{budget}\n[[vip]]\nname = \"web\"\n\
         address = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
         [[vip.dip]]\naddress = \"10.77.1.2\"\nport = 8080\n[[vip.dip]]\n\
         address = \"10.77.2.2\"\nport = 8080\n",
        args.conn_table_size,
        args.half_open_table_size,
        tier.name()
    )
}

#[allow(clippy::too_many_arguments)]
fn one_rate(
    lab: &Lab,
    d: &Daemon,
    leaks: &LeakWatch,
    vip: SocketAddr,
    lb_mac: [u8; 6],
    rate: u64,
    seed: u64,
    args: &SynFloodArgs,
) -> Result<Row> {
    let flood_time = Duration::from_secs_f64(args.duration);
    let interval = Duration::from_millis(400);
    // Requests span the flood with a second to spare on each side.
    let requests =
        ((flood_time + Duration::from_secs(2)).as_millis() / interval.as_millis()) as usize + 1;
    let before = Totals::of(d)?;
    let leaked_before = leaks.count();
    let live = spawn_http(&lab.client, vip, args.established, requests, interval);
    std::thread::sleep(Duration::from_secs(1));

    let stop = Arc::new(AtomicBool::new(false));
    let (tried, ok) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let prober = {
        let (stop, tried, ok, ns) = (stop.clone(), tried.clone(), ok.clone(), lab.client.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                tried.fetch_add(1, Ordering::Relaxed);
                if http_once(&ns, vip).is_ok() {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let mut flood = GenSpec::syn_flood(IpAddr::from(FLOOD_NET), 16, vip, seed + 1);
    flood.dst_mac = lb_mac;
    let mut spec = OfferSpec::new(flood, flood_time);
    spec.rate = (rate > 0).then_some(rate as f64);
    let offered = offer(&lab.client, "eth0", &spec).context("offering the SYN flood")?;
    stop.store(true, Ordering::Relaxed);
    let _ = prober.join();

    let records: Vec<_> = live
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    let broken = records
        .iter()
        .filter(|r| r.violated() || r.served_by.len() != requests)
        .count();
    // The workers rewrite their report every second.
    std::thread::sleep(Duration::from_millis(1100));
    let after = Totals::of(d)?;
    let syns = after.half_open_new - before.half_open_new;
    Ok(Row {
        tier: FloodTier::Xdp,
        syn_rate: None,
        offered_pps: offered.pps,
        syns_in_table: syns,
        syns_in_table_pps: syns as f64 / offered.elapsed.as_secs_f64().max(1e-9),
        syns_over_budget: after.drop_syn_budget - before.drop_syn_budget,
        rx_ring_full: after.rx_ring_full - before.rx_ring_full,
        established: records.len(),
        established_broken: broken,
        new_tried: tried.load(Ordering::Relaxed),
        new_ok: ok.load(Ordering::Relaxed),
        leaked: leaks.count() - leaked_before,
    })
}

/// The counters a row is the difference of.
struct Totals {
    /// XDP's and the workers' (a tier keeps its half-open table in one).
    half_open_new: u64,
    drop_syn_budget: u64,
    rx_ring_full: u64,
}

impl Totals {
    fn of(d: &Daemon) -> Result<Totals> {
        let status = d.status_json()?;
        let counter = |name: &str| {
            status["counters"][name]
                .as_u64()
                .with_context(|| format!("weir status has no counter {name}"))
        };
        let workers = weir_control::tier::read_worker_stats(&d.run_dir());
        let slot = weir_abi::WEIR_STAT_HALF_OPEN_NEW as usize;
        Ok(Totals {
            half_open_new: counter("half_open_new")?
                + workers
                    .iter()
                    .map(|w| w.slb.get(slot).copied().unwrap_or(0))
                    .sum::<u64>(),
            drop_syn_budget: counter("drop_syn_budget")?,
            rx_ring_full: workers
                .iter()
                .flat_map(|w| &w.sockets)
                .map(|s| s.rx_ring_full)
                .sum(),
        })
    }
}

fn render(args: &SynFloodArgs, rows: &[Row]) -> String {
    let mut o = format!(
        "\nSYN flood against conn_table_size {} and half_open_table_size {} ({} keep-alive \
         connections, {} s per rate)\n{:>9} {:>9} {:>10} {:>14} {:>12} {:>12} {:>20} {:>15} \
         {:>7}\n",
        args.conn_table_size,
        args.half_open_table_size,
        args.established,
        args.duration,
        "tier",
        "syn_rate",
        "offered/s",
        "SYNs in table/s",
        "over budget",
        "ring full",
        "established broken",
        "new conns ok",
        "leaked"
    );
    for r in rows {
        let budget = match (r.tier, r.syn_rate) {
            (FloodTier::Xdp, _) => "-".to_string(),
            (_, Some(rate)) => rate.to_string(),
            (_, None) => "default".to_string(),
        };
        o += &format!(
            "{:>9} {:>9} {:>10.0} {:>14.0} {:>12} {:>12} {:>14} / {:<5} {:>7} / {:<6} {:>7}\n",
            r.tier.name(),
            budget,
            r.offered_pps,
            r.syns_in_table_pps,
            r.syns_over_budget,
            r.rx_ring_full,
            r.established_broken,
            r.established,
            r.new_ok,
            r.new_tried,
            r.leaked
        );
    }
    o
}
