//! `weir-lab bench kv` (TCP part): GETs with Zipf key popularity through
//! memcached directly, nutcracker, and weir's TCP proxy, on loopback, side
//! by side in one run. Reports throughput, p50/p99 latency of a pipelined
//! batch, and the proxy's CPU time per request (from /proc: utime+stime of
//! the nutcracker process, of weir's worker threads).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use weir_progress::Progress;

use crate::kv::testbed::{free_port, memcached, nutcracker, McClient};
use weir_kv::{parse_nutcracker, Proxy};

#[derive(Args, Debug, Clone)]
pub struct KvBenchArgs {
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// Zipf skew of key popularity (0 = uniform).
    #[arg(long, default_value_t = 0.99)]
    pub skew: f64,
    /// Value sizes in bytes (the seed's Fig. 4 spans 32 B to 11 KB).
    #[arg(long, value_delimiter = ',', default_value = "32,1024,11264")]
    pub value_sizes: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Client connections.
    #[arg(long, default_value_t = 8)]
    pub conns: usize,
    /// GETs pipelined per connection per round trip.
    #[arg(long, default_value_t = 8)]
    pub depth: usize,
    /// Write the results here as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Run in network namespaces over UDP too: direct memcached (UDP),
    /// nutcracker (TCP), weir's XDP switch without and with its cache.
    #[arg(long)]
    pub udp: bool,
    /// UDP requests in flight per client (--udp).
    #[arg(long, default_value_t = 16)]
    pub window: usize,
}

#[derive(Serialize, Debug, Clone)]
pub struct Row {
    pub path: String,
    pub value_size: usize,
    pub requests: u64,
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Proxy CPU seconds (None for direct memcached).
    pub proxy_cpu_s: Option<f64>,
    pub proxy_ns_per_req: Option<f64>,
    pub req_per_cpu_s: Option<f64>,
}

/// Zipf sampler over 0..n (CDF + binary search, xorshift RNG).
pub struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    pub fn new(n: usize, s: f64, seed: u64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for i in 0..n {
            acc += 1.0 / ((i + 1) as f64).powf(s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        Zipf {
            cdf,
            state: seed | 1,
        }
    }
    pub fn sample(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

pub fn proc_cpu_ticks(stat_path: &str) -> u64 {
    let s = std::fs::read_to_string(stat_path).unwrap_or_default();
    let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // fields after ")": state is [0]; utime is field 14 overall -> [11], stime [12]
    let u: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0);
    let st: u64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    u + st
}

fn weir_threads_ticks() -> u64 {
    let mut t = 0;
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            let p = e.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            if comm.starts_with("weir-kv-") {
                t += proc_cpu_ticks(&p.join("stat").display().to_string());
            }
        }
    }
    t
}

pub fn ticks_per_s() -> f64 {
    weir_sys::clock_ticks_per_second() as f64
}

/// Run the load: `conns` connections in one thread, `depth` GETs per batch.
pub fn load(addr: SocketAddr, args: &KvBenchArgs, seed: u64) -> Result<(u64, Vec<f64>)> {
    let mut z = Zipf::new(args.keys, args.skew, seed);
    let mut socks: Vec<TcpStream> = (0..args.conns)
        .map(|_| {
            let s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            Ok(s)
        })
        .collect::<Result<_>>()?;
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut lat = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut req = Vec::new();
    while t0.elapsed().as_secs_f64() < args.seconds {
        let tb = Instant::now();
        for s in socks.iter_mut() {
            req.clear();
            for _ in 0..args.depth {
                req.extend_from_slice(format!("get k{}\r\n", z.sample()).as_bytes());
            }
            s.write_all(&req)?;
        }
        for s in socks.iter_mut() {
            // read until `depth` END lines
            let mut ends = 0;
            let mut have = 0;
            while ends < args.depth {
                let r = s.read(&mut buf[have..])?;
                anyhow::ensure!(r > 0, "server closed");
                let start = have.saturating_sub(4);
                have += r;
                ends += buf[start..have]
                    .windows(5)
                    .filter(|w| w == b"END\r\n")
                    .count();
                if have > buf.len() / 2 {
                    let keep = buf[have - 4..have].to_vec();
                    buf[..4].copy_from_slice(&keep);
                    have = 4;
                }
            }
        }
        let dt = tb.elapsed().as_secs_f64() * 1e6;
        lat.push(dt);
        n += (args.conns * args.depth) as u64;
    }
    Ok((n, lat))
}

pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p) as usize]
}

pub fn run(args: &KvBenchArgs) -> Result<()> {
    if args.udp {
        return crate::kv::bench_udp::run(args);
    }
    let progress = Progress::bar("weir-lab bench kv", 3 * args.value_sizes.len() as u64);
    let mut rows = Vec::new();
    for &vs in &args.value_sizes {
        progress.set_message(format!(
            "{vs} B values: starting memcached, nutcracker, weir"
        ));
        let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
        let _mc: Vec<_> = ports
            .iter()
            .map(|&p| memcached("127.0.0.1", p, false, 1))
            .collect::<Result<_>>()?;
        let nc_listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let yml = format!(
            "bench:\n  listen: {nc_listen}\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n   - 127.0.0.1:{}:1\n   - 127.0.0.1:{}:1\n",
            ports[0], ports[1]
        );
        let dir = std::env::temp_dir().join(format!("weir-bench-kv-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("nc.yml");
        std::fs::write(&conf, &yml)?;
        let nc = nutcracker(&conf, nc_listen, free_port())?;
        let mut cfg = parse_nutcracker(
            "bench",
            &yml.replace(&nc_listen.to_string(), "127.0.0.1:0"),
            None,
        )
        .context("bench config")?;
        cfg.metrics = None;
        let dist = Arc::new(cfg.distribution());
        let proxy = Proxy::start(&cfg, dist.clone(), None)?;
        // preload every key on its owner
        let mut direct: Vec<McClient> = ports
            .iter()
            .map(|&p| McClient::connect(format!("127.0.0.1:{p}").parse().unwrap()))
            .collect::<Result<_>>()?;
        let val = vec![b'x'; vs];
        for k in 0..args.keys {
            let key = format!("k{k}");
            let s = dist.server_for_key(key.as_bytes());
            direct[s].send(format!("set {key} 0 0 {vs} noreply\r\n").as_bytes())?;
            direct[s].send(&val)?;
            direct[s].send(b"\r\n")?;
        }
        for d in direct.iter_mut() {
            d.cmd("version\r\n")?;
        }
        let tps = ticks_per_s();
        let paths: Vec<(&str, SocketAddr)> = vec![
            (
                "memcached direct (server 0)",
                format!("127.0.0.1:{}", ports[0]).parse()?,
            ),
            ("nutcracker", nc_listen),
            ("weir tcp", proxy.local_addr()),
        ];
        for (name, addr) in paths {
            progress.set_message(format!("{name}, {vs} B values, {} s", args.seconds));
            let c0 = match name {
                "nutcracker" => proc_cpu_ticks(&format!("/proc/{}/stat", nc.pid())),
                "weir tcp" => weir_threads_ticks(),
                _ => 0,
            };
            let t0 = Instant::now();
            let (n, mut lat) = load(addr, args, 42 + vs as u64)?;
            let wall = t0.elapsed().as_secs_f64();
            let cpu = match name {
                "nutcracker" => {
                    Some((proc_cpu_ticks(&format!("/proc/{}/stat", nc.pid())) - c0) as f64 / tps)
                }
                "weir tcp" => Some((weir_threads_ticks() - c0) as f64 / tps),
                _ => None,
            };
            let per = args.depth as f64;
            rows.push(Row {
                path: name.to_string(),
                value_size: vs,
                requests: n,
                rps: n as f64 / wall,
                p50_us: pct(&mut lat, 0.5) / per,
                p99_us: pct(&mut lat, 0.99) / per,
                proxy_cpu_s: cpu,
                proxy_ns_per_req: cpu.map(|c| c * 1e9 / n as f64),
                req_per_cpu_s: cpu.map(|c| if c > 0.0 { n as f64 / c } else { f64::INFINITY }),
            });
            progress.inc(1);
        }
        proxy.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
    progress.finish(format!("{} rows", rows.len()));
    println!(
        "{:<28} {:>7} {:>10} {:>9} {:>9} {:>12} {:>14}",
        "path", "value", "req/s", "p50 us", "p99 us", "proxy ns/req", "req/proxy-cpu-s"
    );
    for r in &rows {
        println!(
            "{:<28} {:>7} {:>10.0} {:>9.1} {:>9.1} {:>12} {:>14}",
            r.path,
            r.value_size,
            r.rps,
            r.p50_us,
            r.p99_us,
            r.proxy_ns_per_req.map_or("-".into(), |x| format!("{x:.0}")),
            r.req_per_cpu_s.map_or("-".into(), |x| format!("{x:.0}"))
        );
    }
    println!("latency = batch round trip / depth (pipelined); UDP and the XDP cache are not measured here");
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}
