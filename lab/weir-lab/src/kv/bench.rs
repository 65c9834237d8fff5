//! `weir-lab bench kv` (TCP part): GETs with Zipf key popularity through
//! memcached directly, nutcracker, and weir's TCP proxy, on loopback, side
//! by side in one run. Reports throughput, p50/p99 latency of a pipelined
//! batch, and the proxy's CPU time per request (from /proc: utime and stime
//! of the nutcracker process, of weir's worker threads), split into user and
//! kernel time, with the proxy's system calls and its sleeps (voluntary
//! context switches) per request, which say where that CPU time goes, and
//! the load thread's own CPU share, which says whether the client was the
//! bottleneck. nutcracker and weir are run in turns (`--rounds`), so that
//! both see the same machine load; `--rate` offers both the same load
//! instead of as much as each can take.

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
    /// Value sizes in bytes (the seed's Fig. 4 spans 32 B to 11 KB; 100 KB
    /// is where the proxy's copies of the value weigh most).
    #[arg(long, value_delimiter = ',', default_value = "32,1024,11264,102400")]
    pub value_sizes: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Client connections: one measurement per count (`--udp` uses the
    /// first).
    #[arg(long, value_delimiter = ',', default_value = "8,64")]
    pub conns: Vec<usize>,
    /// Runs of each proxy per measurement, nutcracker and weir in turns
    /// (each run lasts `--seconds`).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// GETs pipelined per connection per round trip.
    #[arg(long, default_value_t = 8)]
    pub depth: usize,
    /// Offered load in GETs per second over all connections (the client
    /// starts its batches at this pace); 0 sends each batch as soon as the
    /// last one is answered (saturation). At a rate both proxies sustain,
    /// they are charged for the same work at the same pace.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Count the proxies' system calls with `perf stat` (which slows every
    /// system call a little, so the CPU columns are better read without it).
    #[arg(long)]
    pub count_syscalls: bool,
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
    pub conns: usize,
    pub requests: u64,
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Proxy CPU seconds (None for direct memcached).
    pub proxy_cpu_s: Option<f64>,
    pub proxy_ns_per_req: Option<f64>,
    /// The proxy's user-space and kernel CPU time per request.
    pub proxy_user_ns_per_req: Option<f64>,
    pub proxy_sys_ns_per_req: Option<f64>,
    pub req_per_cpu_s: Option<f64>,
    /// The proxy's system calls per request (epoll included; from `perf
    /// stat` with `--count-syscalls`).
    pub proxy_syscalls_per_req: Option<f64>,
    /// The proxy's sleeps in epoll per request (voluntary context switches).
    pub proxy_sleeps_per_req: Option<f64>,
    /// weir's socket writes (to clients and servers) per request, from its
    /// own counters (None for the others).
    pub proxy_writes_per_req: Option<f64>,
    /// The share of weir's GET replies whose value went through a pipe
    /// (spliced in the kernel; None for the others).
    pub spliced_share: Option<f64>,
    /// The load thread's CPU time over the wall clock: near 1 means the
    /// single-threaded client, not the path, set the pace.
    pub client_cpu_share: f64,
}

/// weir's requests per proxy CPU-second over nutcracker's, and p99 latency
/// over nutcracker's, for one value size and connection count.
#[derive(Serialize, Debug, Clone)]
pub struct Ratio {
    pub value_size: usize,
    pub conns: usize,
    pub req_per_cpu_s: f64,
    pub p99: f64,
}

#[derive(Serialize, Debug, Clone)]
struct Report {
    /// GETs per second offered (`--rate`), None at saturation.
    offered_gets_per_s: Option<f64>,
    rows: Vec<Row>,
    weir_over_nutcracker: Vec<Ratio>,
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
    let (user, sys) = proc_cpu_split(stat_path);
    user + sys
}

/// User and kernel CPU ticks (utime, stime) of the task of a /proc stat file.
pub fn proc_cpu_split(stat_path: &str) -> (u64, u64) {
    let s = std::fs::read_to_string(stat_path).unwrap_or_default();
    let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // fields after ")": state is [0]; utime is field 14 overall -> [11], stime [12]
    let u: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0);
    let st: u64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    (u, st)
}

/// CPU ticks (user, kernel) and voluntary context switches (sleeps) of a
/// process or threads.
#[derive(Default, Clone, Copy, Debug)]
pub struct Usage {
    pub user: u64,
    pub sys: u64,
    pub sleeps: u64,
}

impl Usage {
    /// CPU ticks and sleeps of the tasks whose /proc directories are `dirs`.
    fn of(dirs: &[std::path::PathBuf]) -> Usage {
        let mut u = Usage::default();
        for dir in dirs {
            let (user, sys) = proc_cpu_split(&dir.join("stat").display().to_string());
            u.user += user;
            u.sys += sys;
            u.sleeps += std::fs::read_to_string(dir.join("status"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        u
    }

    fn since(self, before: Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(before.user),
            sys: self.sys.saturating_sub(before.sys),
            sleeps: self.sleeps.saturating_sub(before.sleeps),
        }
    }

    fn add(&mut self, o: Usage) {
        self.user += o.user;
        self.sys += o.sys;
        self.sleeps += o.sleeps;
    }

    fn ticks(self) -> u64 {
        self.user + self.sys
    }
}

/// The /proc directories of weir's proxy worker threads in this process.
fn weir_threads() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            let p = e.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            if comm.starts_with("weir-kv-") {
                out.push(p);
            }
        }
    }
    out
}

/// Counts the system calls of some threads with `perf stat` (every call,
/// epoll included), when `perf` is installed and allowed to.
struct SyscallCount {
    perf: std::process::Child,
    out: std::path::PathBuf,
}

impl SyscallCount {
    /// Starts counting the threads whose /proc directories are `tasks`.
    fn start(tasks: &[std::path::PathBuf], out: std::path::PathBuf) -> Option<SyscallCount> {
        let tids: Vec<String> = tasks
            .iter()
            .filter_map(|t| t.file_name()?.to_str().map(String::from))
            .collect();
        let perf = std::process::Command::new("perf")
            .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-o"])
            .arg(&out)
            .args(["-t", &tids.join(",")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        // perf counts from when it has attached, not from when it started
        std::thread::sleep(Duration::from_millis(300));
        Some(SyscallCount { perf, out })
    }

    /// Stops counting; the count, if perf gave one.
    fn stop(mut self) -> Option<u64> {
        weir_sys::process::send_signal(self.perf.id(), libc::SIGINT).ok()?;
        self.perf.wait().ok()?;
        let text = std::fs::read_to_string(&self.out).ok()?;
        let _ = std::fs::remove_file(&self.out);
        text.lines()
            .find(|l| l.contains("raw_syscalls:sys_enter"))?
            .split(',')
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for SyscallCount {
    fn drop(&mut self) {
        let _ = self.perf.kill();
        let _ = self.perf.wait();
    }
}

pub fn ticks_per_s() -> f64 {
    weir_sys::clock_ticks_per_second() as f64
}

/// Run the load: `conns` connections in one thread, `depth` GETs per
/// batch, at `args.rate` GETs per second (or as fast as answers come).
pub fn load(
    addr: SocketAddr,
    args: &KvBenchArgs,
    conns: usize,
    seed: u64,
) -> Result<(u64, Vec<f64>)> {
    let mut z = Zipf::new(args.keys, args.skew, seed);
    let mut socks: Vec<TcpStream> = (0..conns)
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
    // a batch round every `pace`, when a rate is offered; a round that ends
    // late starts the next at once, and the missed starts are not made up
    let pace =
        (args.rate > 0.0).then(|| Duration::from_secs_f64((conns * args.depth) as f64 / args.rate));
    let mut next = t0;
    while t0.elapsed().as_secs_f64() < args.seconds {
        if let Some(pace) = pace {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next = next.max(now) + pace;
        }
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
        n += (conns * args.depth) as u64;
    }
    Ok((n, lat))
}

pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p) as usize]
}

/// One proxy's runs at one value size and connection count, summed.
#[derive(Default)]
struct Runs {
    requests: u64,
    wall: f64,
    lat: Vec<f64>,
    usage: Usage,
    /// The load thread's CPU ticks.
    client_ticks: u64,
    /// weir's socket writes (its `socket_writes` counter).
    writes: Option<u64>,
    /// weir's spliced values (its `spliced_values` counter).
    spliced: Option<u64>,
    /// Each run's system calls (None where perf could not count them).
    syscalls: Vec<Option<u64>>,
}

impl Runs {
    fn row(mut self, path: &str, vs: usize, conns: usize, depth: usize, proxy: bool) -> Row {
        let n = self.requests.max(1) as f64;
        let cpu = proxy.then(|| self.usage.ticks() as f64 / ticks_per_s());
        let per_req = |ticks: u64| proxy.then(|| ticks as f64 / ticks_per_s() * 1e9 / n);
        let per = depth as f64;
        Row {
            path: path.to_string(),
            value_size: vs,
            conns,
            requests: self.requests,
            rps: self.requests as f64 / self.wall,
            p50_us: pct(&mut self.lat, 0.5) / per,
            p99_us: pct(&mut self.lat, 0.99) / per,
            proxy_cpu_s: cpu,
            proxy_ns_per_req: cpu.map(|c| c * 1e9 / n),
            proxy_user_ns_per_req: per_req(self.usage.user),
            proxy_sys_ns_per_req: per_req(self.usage.sys),
            req_per_cpu_s: cpu.map(|c| if c > 0.0 { n / c } else { f64::INFINITY }),
            proxy_syscalls_per_req: proxy
                .then(|| self.syscalls.iter().copied().sum::<Option<u64>>())
                .flatten()
                .map(|c| c as f64 / n),
            proxy_sleeps_per_req: proxy.then(|| self.usage.sleeps as f64 / n),
            proxy_writes_per_req: self.writes.map(|w| w as f64 / n),
            spliced_share: self.spliced.map(|s| s as f64 / n),
            client_cpu_share: self.client_ticks as f64 / ticks_per_s() / self.wall,
        }
    }
}

const DIRECT: &str = "memcached direct (server 0)";
/// The memory each bench memcached may fill with values (it runs with
/// `-m 64`): a larger key set would be evicted and the GETs would miss.
const VALUE_MEMORY_PER_SERVER: usize = 40 << 20;

/// The arguments of one value size's rows: no more keys than the two
/// servers hold, so that every GET hits.
fn row_args(args: &KvBenchArgs, value_size: usize) -> KvBenchArgs {
    let fit = 2 * VALUE_MEMORY_PER_SERVER / (value_size + 100);
    KvBenchArgs {
        keys: args.keys.min(fit.max(1)),
        ..args.clone()
    }
}
const NUTCRACKER: &str = "nutcracker";
const WEIR: &str = "weir tcp";

pub fn run(args: &KvBenchArgs) -> Result<()> {
    if args.udp {
        return crate::kv::bench_udp::run(args);
    }
    anyhow::ensure!(
        !args.conns.is_empty() && !args.conns.contains(&0),
        "--conns needs one or more connection counts of at least 1, e.g. --conns 8,64"
    );
    anyhow::ensure!(args.rounds >= 1, "--rounds must be at least 1");
    anyhow::ensure!(args.depth >= 1, "--depth must be at least 1");
    anyhow::ensure!(
        args.rate >= 0.0 && args.rate.is_finite(),
        "--rate is GETs per second over all connections, 0 or more (0: as fast as answered)"
    );
    let steps = args.value_sizes.len() * args.conns.len() * (1 + 2 * args.rounds);
    let progress = Progress::bar("weir-lab bench kv", steps as u64);
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let mut fewer_keys = Vec::new();
    for &vs in &args.value_sizes {
        let all_keys = args.keys;
        let args = &row_args(args, vs);
        if args.keys < all_keys {
            fewer_keys.push(format!("{vs} B values: {} keys", args.keys));
        }
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
        let nc_tasks = vec![std::path::PathBuf::from(format!("/proc/{}", nc.pid()))];
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
        let weir_tasks = weir_threads();
        let tasks = |name: &str| match name {
            NUTCRACKER => nc_tasks.as_slice(),
            WEIR => weir_tasks.as_slice(),
            _ => &[],
        };
        let direct_addr: SocketAddr = format!("127.0.0.1:{}", ports[0]).parse()?;
        let targets = [
            (DIRECT, direct_addr),
            (NUTCRACKER, nc_listen),
            (WEIR, proxy.local_addr()),
        ];
        for &conns in &args.conns {
            let mut runs: [Runs; 3] = Default::default();
            // memcached direct once, then the proxies in turns
            let order = std::iter::once(0).chain((0..args.rounds).flat_map(|_| [1, 2]));
            for (round, t) in order.enumerate() {
                let (name, addr) = targets[t];
                progress.set_message(format!(
                    "{name}, {vs} B values, {conns} connections, {} s",
                    args.seconds
                ));
                let counter = (t > 0 && args.count_syscalls)
                    .then(|| SyscallCount::start(tasks(name), dir.join("perf-stat.csv")))
                    .flatten();
                let u0 = Usage::of(tasks(name));
                let c0 = proc_cpu_ticks("/proc/thread-self/stat");
                let before = proxy.stats();
                let t0 = Instant::now();
                let (n, lat) = load(addr, args, conns, 42 + vs as u64 + round as u64)?;
                let r = &mut runs[t];
                r.wall += t0.elapsed().as_secs_f64();
                r.usage.add(Usage::of(tasks(name)).since(u0));
                r.client_ticks += proc_cpu_ticks("/proc/thread-self/stat").saturating_sub(c0);
                if name == WEIR {
                    let after = proxy.stats();
                    *r.writes.get_or_insert(0) += after.socket_writes - before.socket_writes;
                    *r.spliced.get_or_insert(0) += after.spliced_values - before.spliced_values;
                }
                r.syscalls.push(counter.and_then(SyscallCount::stop));
                r.requests += n;
                r.lat.extend(lat);
                progress.inc(1);
            }
            let [d, n, w] = runs;
            let d = d.row(DIRECT, vs, conns, args.depth, false);
            let n = n.row(NUTCRACKER, vs, conns, args.depth, true);
            let w = w.row(WEIR, vs, conns, args.depth, true);
            ratios.push(Ratio {
                value_size: vs,
                conns,
                req_per_cpu_s: w.req_per_cpu_s.unwrap_or(0.0) / n.req_per_cpu_s.unwrap_or(1.0),
                p99: w.p99_us / n.p99_us,
            });
            rows.extend([d, n, w]);
        }
        proxy.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
    progress.finish(format!("{} rows", rows.len()));
    let opt = |x: Option<f64>, prec: usize| x.map_or("-".into(), |x| format!("{x:.prec$}"));
    match args.rate {
        r if r > 0.0 => println!("offered load: {r:.0} GETs/s over all connections"),
        _ => println!("offered load: saturation (each batch sent when the last is answered)"),
    }
    println!(
        "{:<28} {:>6} {:>5} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>7} {:>8} {:>7}",
        "path",
        "value",
        "conns",
        "req/s",
        "p50 us",
        "p99 us",
        "ns/req",
        "user ns",
        "sys ns",
        "req/cpu-s",
        "sysc/req",
        "sleep/req",
        "wr/req",
        "spliced",
        "client"
    );
    for r in &rows {
        println!(
            "{:<28} {:>6} {:>5} {:>9.0} {:>8.1} {:>8.1} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>7} {:>8} {:>6.0}%",
            r.path,
            r.value_size,
            r.conns,
            r.rps,
            r.p50_us,
            r.p99_us,
            opt(r.proxy_ns_per_req, 0),
            opt(r.proxy_user_ns_per_req, 0),
            opt(r.proxy_sys_ns_per_req, 0),
            opt(r.req_per_cpu_s, 0),
            opt(r.proxy_syscalls_per_req, 3),
            opt(r.proxy_sleeps_per_req, 3),
            opt(r.proxy_writes_per_req, 3),
            r.spliced_share
                .map_or("-".into(), |s| format!("{:.0}%", s * 100.0)),
            r.client_cpu_share * 100.0,
        );
    }
    println!("latency = batch round trip / depth (pipelined); ns/req (user + sys), req/cpu-s, sysc/req (system calls, from perf stat) and sleep/req (waits in epoll) are the proxy's; wr/req = weir's socket writes (clients and servers) per request; spliced = weir's replies whose value went through a pipe; client = the load thread's CPU share of the wall clock (near 100%: the client set the pace)");
    if !fewer_keys.is_empty() {
        println!(
            "fewer keys where the servers would not hold them all: {}",
            fewer_keys.join(", ")
        );
    }
    println!(
        "weir over nutcracker (same run, {} rounds each in turns):",
        args.rounds
    );
    for r in &ratios {
        println!(
            "  {:>6} B, {:>3} connections: {:.2}x requests per proxy CPU-second, p99 {:.2}x nutcracker's",
            r.value_size, r.conns, r.req_per_cpu_s, r.p99
        );
    }
    if let Some(p) = &args.json {
        let report = Report {
            offered_gets_per_s: (args.rate > 0.0).then_some(args.rate),
            rows,
            weir_over_nutcracker: ratios,
        };
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
