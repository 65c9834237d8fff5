//! `weir-lab synflood`: how many spoofed SYNs per second a given connection
//! table withstands with no established connection lost.
//!
//! The standard lab (client, weir, backends) with a nat VIP. At each offered
//! rate: keep-alive HTTP connections that send a request every interval
//! through the flood, fresh connections opened one after another during it,
//! and SYNs from never-reused spoofed sources (the labs' generator). A row
//! reports what reached weir's half-open table, how many established
//! connections broke, how many new connections succeeded during the flood,
//! and how many frames reached the client from a backend's own address.

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

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct SynFloodArgs {
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
    pub offered_pps: f64,
    /// SYNs that reached weir's half-open table.
    pub syns_in_table: u64,
    pub syns_in_table_pps: f64,
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
    let progress = Progress::bar("weir-lab synflood", args.rates.len() as u64);
    progress.set_message("building the lab: client, load balancer, 2 backends");
    let lab = Lab::build(2).context("building the lab")?;
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)))
        .collect::<Result<_>>()?;
    let mut d = Daemon::new(exe, &lab.lb)?;
    d.write_config(&config(args))?;
    d.start()?;
    let leaks = LeakWatch::start(&lab.client, "eth0")?;
    let vip: SocketAddr = VIP.parse().unwrap();
    let lb_mac = mac_in(&lab.lb, "wc0")?;
    let mut rows = Vec::new();
    for (i, &rate) in args.rates.iter().enumerate() {
        let shown = if rate == 0 {
            "max".to_string()
        } else {
            rate.to_string()
        };
        progress.set_message(format!(
            "{shown} SYN/s for {} s against {} established connections",
            args.duration, args.established
        ));
        let row = one_rate(&lab, &d, &leaks, vip, lb_mac, rate, i as u64, args)?;
        progress.inc(1);
        progress.note(format!(
            "[{}/{}] {shown} SYN/s: {} SYNs reached the table, {} broken, {}/{} new ok, {} leaked",
            i + 1,
            args.rates.len(),
            row.syns_in_table,
            row.established_broken,
            row.new_ok,
            row.new_tried,
            row.leaked
        ));
        rows.push(row);
    }
    d.stop()?;
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

fn config(args: &SynFloodArgs) -> String {
    format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\nconn_table_size = {}\n\
         half_open_table_size = {}\n\n[[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\n\
         port = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n[[vip.dip]]\naddress = \"10.77.1.2\"\n\
         port = 8080\n[[vip.dip]]\naddress = \"10.77.2.2\"\nport = 8080\n",
        args.conn_table_size, args.half_open_table_size
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
    let syns_before = counter(d, "half_open_new")?;
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
    let syns = counter(d, "half_open_new")? - syns_before;
    Ok(Row {
        offered_pps: offered.pps,
        syns_in_table: syns,
        syns_in_table_pps: syns as f64 / offered.elapsed.as_secs_f64().max(1e-9),
        established: records.len(),
        established_broken: broken,
        new_tried: tried.load(Ordering::Relaxed),
        new_ok: ok.load(Ordering::Relaxed),
        leaked: leaks.count() - leaked_before,
    })
}

fn counter(d: &Daemon, name: &str) -> Result<u64> {
    let status = d.status_json()?;
    status["counters"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c[0] == name))
        .and_then(|c| c[1].as_u64())
        .with_context(|| format!("weir status has no counter {name}"))
}

fn render(args: &SynFloodArgs, rows: &[Row]) -> String {
    let mut o = format!(
        "\nSYN flood against conn_table_size {} and half_open_table_size {} ({} keep-alive \
         connections, {} s per rate)\n{:>12} {:>16} {:>20} {:>16} {:>8}\n",
        args.conn_table_size,
        args.half_open_table_size,
        args.established,
        args.duration,
        "offered/s",
        "SYNs in table/s",
        "established broken",
        "new conns ok",
        "leaked"
    );
    for r in rows {
        o += &format!(
            "{:>12.0} {:>16.0} {:>14} / {:<5} {:>9} / {:<6} {:>8}\n",
            r.offered_pps,
            r.syns_in_table_pps,
            r.established_broken,
            r.established,
            r.new_ok,
            r.new_tried,
            r.leaked
        );
    }
    o
}
