//! `weir-lab bench kv --udp`: GETs with Zipf key popularity in the namespace lab
//! ([`crate::kv::lab`]: a client, the switch, 2 memcached servers), side by side
//! in one run, per value size:
//! - `memcached direct udp`: the client hashes keys itself (weir_kv::route)
//!   and sends each GET to its server's own address (routed by the switch
//!   host's kernel, no XDP);
//! - `nutcracker tcp`: nutcracker in the switch namespace (it has no UDP);
//!   the client pipelines `depth` GETs on each of `conns` connections;
//! - `weir xdp`: `weir_kv` forwards each GET to its server (cache off);
//! - `weir xdp+cache`: the same with the in-switch cache; hot keys are
//!   answered by XDP (a 1 s warm-up lets the hot-key loop install them).
//!
//! UDP load: one client thread keeps `window` requests in flight and times
//! each one (send to complete reply); a request unanswered after 200 ms
//! counts as lost and is replaced. CPU per request of the switch: the BPF
//! run time of weir_kv (statistics enabled with BPF_ENABLE_STATS for the
//! run) plus, with the cache, the CPU time of the hot-key thread; of
//! nutcracker: utime + stime of its process (/proc). Not counted for
//! either: the kernel's own receive and transmit path around them.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use weir_progress::Progress;

use crate::kv::bench::{load as tcp_load, pct, proc_cpu_ticks, ticks_per_s, KvBenchArgs, Zipf};
use crate::kv::lab::{in_ns, server_ip, KvLab, UdpMc, MC_PORT, NUTCRACKER_PORT, SWITCH_IP, VIP};
use crate::kv::testbed::{McClient, Proc};
use weir_dataplane::runstats::{RunStats, StatsEnabled};
use weir_kv::UdpSwitch;

#[derive(Serialize, Debug, Clone)]
pub struct UdpRow {
    pub path: String,
    pub value_size: usize,
    pub requests: u64,
    pub lost: u64,
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// CPU seconds of the switch or proxy (None for direct memcached).
    pub cpu_s: Option<f64>,
    pub ns_per_req: Option<f64>,
    pub req_per_cpu_s: Option<f64>,
    /// Share of GETs answered by XDP from the cache.
    pub cache_hit_ratio: Option<f64>,
}

/// Result of one UDP load run.
struct UdpLoad {
    done: u64,
    lost: u64,
    lat_us: Vec<f64>,
    wall: f64,
}

/// `window` GETs in flight from one socket; `to(key)` picks the destination.
fn udp_load(
    args: &KvBenchArgs,
    seconds: f64,
    seed: u64,
    to: impl Fn(usize) -> SocketAddr,
) -> Result<UdpLoad> {
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(4 << 20);
    let mut z = Zipf::new(args.keys, args.skew, seed);
    // per request id: send time, datagrams seen, datagrams expected
    let mut sent: Vec<Option<Instant>> = vec![None; 65536];
    let mut seen: Vec<u16> = vec![0; 65536];
    let mut next: u16 = 1;
    let mut inflight = 0usize;
    let (mut done, mut lost) = (0u64, 0u64);
    let mut lat = Vec::new();
    let mut buf = vec![0u8; 65536];
    let t0 = Instant::now();
    let mut last_sweep = Instant::now();
    while t0.elapsed().as_secs_f64() < seconds {
        while inflight < args.window {
            let k = z.sample();
            let id = next;
            next = next.wrapping_add(1).max(1);
            if sent[id as usize].is_some() {
                // a very old request still open: count it lost
                sent[id as usize] = None;
                lost += 1;
                inflight -= 1;
            }
            let body = format!("get k{k}\r\n");
            let frame = UdpMc::frame(id, body.as_bytes());
            let dst = to(k);
            // stamped before the send: on veth the reply can arrive within it
            sent[id as usize] = Some(Instant::now());
            sock.send_to(&frame, dst)?;
            seen[id as usize] = 0;
            inflight += 1;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, _)) if n >= 8 => {
                let id = u16::from_be_bytes([buf[0], buf[1]]) as usize;
                let total = u16::from_be_bytes([buf[4], buf[5]]).max(1);
                if let Some(ts) = sent[id] {
                    seen[id] += 1;
                    if seen[id] >= total {
                        lat.push(ts.elapsed().as_secs_f64() * 1e6);
                        sent[id] = None;
                        inflight -= 1;
                        done += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(e.into()),
        }
        if last_sweep.elapsed() > Duration::from_millis(50) {
            last_sweep = Instant::now();
            for s in sent.iter_mut() {
                if matches!(s, Some(t) if t.elapsed() > Duration::from_millis(200)) {
                    *s = None;
                    lost += 1;
                    inflight -= 1;
                }
            }
        }
    }
    Ok(UdpLoad {
        done,
        lost,
        lat_us: lat,
        wall: t0.elapsed().as_secs_f64(),
    })
}

fn row(path: &str, vs: usize, l: UdpLoad, cpu: Option<f64>, hit: Option<f64>) -> Result<UdpRow> {
    let mut lat = l.lat_us;
    if lat.is_empty() {
        bail!("{path}, {vs} B: no request completed");
    }
    Ok(UdpRow {
        path: path.into(),
        value_size: vs,
        requests: l.done,
        lost: l.lost,
        rps: l.done as f64 / l.wall,
        p50_us: pct(&mut lat, 0.5),
        p99_us: pct(&mut lat, 0.99),
        cpu_s: cpu,
        ns_per_req: cpu.map(|c| c * 1e9 / l.done as f64),
        req_per_cpu_s: cpu.map(|c| {
            if c > 0.0 {
                l.done as f64 / c
            } else {
                f64::INFINITY
            }
        }),
        cache_hit_ratio: hit,
    })
}

fn hotkey_thread_ticks() -> u64 {
    let mut t = 0;
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            let p = e.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            if comm.trim() == "weir-kv-hotkeys" {
                t += proc_cpu_ticks(&p.join("stat").display().to_string());
            }
        }
    }
    t
}

/// The XDP rows: a switch with or without cache, measured.
fn weir_row(lab: &KvLab, args: &KvBenchArgs, vs: usize, cache: bool) -> Result<UdpRow> {
    let mut cfg = lab.config("l2", cache)?;
    cfg.cache.top_k = 256;
    cfg.cache.entries = 1024;
    cfg.cache.sample_every = 16;
    cfg.cache.threshold = 4;
    cfg.cache.refresh = Duration::from_millis(100);
    let sw = in_ns(&lab.switch, move || UdpSwitch::start(&cfg))?;
    let h = sw.status_handle();
    let vip = SocketAddr::new(IpAddr::V4(VIP), MC_PORT);
    let a2 = args.clone();
    if cache {
        // warm-up: the hot-key loop installs the hot keys
        in_ns(&lab.client, move || udp_load(&a2, 1.0, 7, |_| vip))?;
        std::thread::sleep(Duration::from_millis(300));
    }
    let t0 = RunStats::of(h.prog_fd())?.run_time_ns;
    let hk0 = hotkey_thread_ticks();
    let s0 = h.get();
    let a3 = args.clone();
    let l = in_ns(&lab.client, move || {
        udp_load(&a3, a3.seconds, 42 + vs as u64, |_| vip)
    })?;
    std::thread::sleep(Duration::from_millis(250)); // counters published per refresh
    let t1 = RunStats::of(h.prog_fd())?.run_time_ns;
    let hk1 = hotkey_thread_ticks();
    let s1 = h.get();
    let mut cpu = (t1 - t0) as f64 / 1e9;
    if cache {
        cpu += (hk1 - hk0) as f64 / ticks_per_s();
    }
    let gets = s1.xdp.get("get").copied().unwrap_or(0) - s0.xdp.get("get").copied().unwrap_or(0);
    let hits = s1.cache_hits - s0.cache_hits;
    let hit = cache.then(|| hits as f64 / gets.max(1) as f64);
    sw.stop();
    row(
        if cache {
            "weir xdp+cache (udp)"
        } else {
            "weir xdp (udp)"
        },
        vs,
        l,
        Some(cpu),
        hit,
    )
}

pub fn run(args: &KvBenchArgs) -> Result<()> {
    crate::netns::install_signal_teardown();
    let _stats = StatsEnabled::new()?;
    let mut lab = KvLab::new(2, 1).context("building the kv lab")?;
    let cfg = lab.config("l2", false)?;
    let dist = cfg.distribution();
    // nutcracker in the switch namespace
    let dir = std::env::temp_dir().join(format!("weir-bench-kv-udp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("nc.yml");
    std::fs::write(
        &conf,
        format!(
            "bench:\n  listen: {SWITCH_IP}:{NUTCRACKER_PORT}\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n   - {}:{MC_PORT}:1\n   - {}:{MC_PORT}:1\n",
            server_ip(0),
            server_ip(1)
        ),
    )?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.switch, "nutcracker", "-c"])
        .arg(&conf)
        .args(["-a", "127.0.0.1", "-s", "22222", "-o"])
        .arg(dir.join("nc.log"));
    let nc = Proc::spawn(cmd, "nutcracker")?;
    let nc_pid = nc.pid();
    let nc_addr = SocketAddr::new(IpAddr::V4(SWITCH_IP), NUTCRACKER_PORT);
    in_ns(&lab.client, move || {
        let t0 = Instant::now();
        while std::net::TcpStream::connect_timeout(&nc_addr, Duration::from_millis(100)).is_err() {
            if t0.elapsed() > Duration::from_secs(5) {
                bail!("nutcracker is not listening on {nc_addr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })?;
    lab.adopt(nc);
    let progress = Progress::bar("weir-lab bench kv --udp", 4 * args.value_sizes.len() as u64);
    let mut rows = Vec::new();
    for &vs in &args.value_sizes {
        progress.set_message(format!("{vs} B: preloading {} keys", args.keys));
        // preload every key on its owner
        let (keys, d2) = (args.keys, dist.clone());
        in_ns(&lab.client, move || {
            let mut direct: Vec<McClient> = (0..2)
                .map(|i| McClient::connect(SocketAddr::new(IpAddr::V4(server_ip(i)), MC_PORT)))
                .collect::<Result<_>>()?;
            let val = vec![b'x'; vs];
            for k in 0..keys {
                let key = format!("k{k}");
                let s = d2.server_for_key(key.as_bytes());
                direct[s].send(format!("set {key} 0 0 {vs} noreply\r\n").as_bytes())?;
                direct[s].send(&val)?;
                direct[s].send(b"\r\n")?;
            }
            for d in direct.iter_mut() {
                d.cmd("version\r\n")?;
            }
            Ok(())
        })?;
        progress.set_message(format!("{vs} B: memcached direct (udp)"));
        let (a, d2) = (args.clone(), dist.clone());
        let l = in_ns(&lab.client, move || {
            udp_load(&a, a.seconds, 42 + vs as u64, |k| {
                let s = d2.server_for_key(format!("k{k}").as_bytes());
                SocketAddr::new(IpAddr::V4(server_ip(s)), MC_PORT)
            })
        })?;
        rows.push(row("memcached direct (udp)", vs, l, None, None)?);
        progress.inc(1);

        progress.set_message(format!("{vs} B: nutcracker (tcp)"));
        let c0 = proc_cpu_ticks(&format!("/proc/{nc_pid}/stat"));
        let a = args.clone();
        let t0 = Instant::now();
        let (n, lat) = in_ns(&lab.client, move || {
            tcp_load(nc_addr, &a, a.conns[0], 42 + vs as u64)
        })?;
        let wall = t0.elapsed().as_secs_f64();
        let cpu = (proc_cpu_ticks(&format!("/proc/{nc_pid}/stat")) - c0) as f64 / ticks_per_s();
        let per = args.depth as f64;
        let mut r = row(
            "nutcracker (tcp)",
            vs,
            UdpLoad {
                done: n,
                lost: 0,
                lat_us: lat.iter().map(|x| x / per).collect(),
                wall,
            },
            Some(cpu),
            None,
        )?;
        r.rps = n as f64 / wall;
        rows.push(r);
        progress.inc(1);

        progress.set_message(format!("{vs} B: weir xdp, no cache"));
        rows.push(weir_row(&lab, args, vs, false)?);
        progress.inc(1);
        progress.set_message(format!("{vs} B: weir xdp with cache"));
        rows.push(weir_row(&lab, args, vs, true)?);
        progress.inc(1);
    }
    lab.teardown();
    progress.finish(format!("{} rows; lab torn down", rows.len()));
    let _ = std::fs::remove_dir_all(&dir);
    print_rows(&rows);
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}

fn print_rows(rows: &[UdpRow]) {
    println!(
        "{:<24} {:>6} {:>9} {:>6} {:>8} {:>8} {:>10} {:>14} {:>8}",
        "path", "value", "req/s", "lost", "p50 us", "p99 us", "cpu ns/req", "req/cpu-s", "hits"
    );
    for r in rows {
        println!(
            "{:<24} {:>6} {:>9.0} {:>6} {:>8.1} {:>8.1} {:>10} {:>14} {:>8}",
            r.path,
            r.value_size,
            r.rps,
            r.lost,
            r.p50_us,
            r.p99_us,
            r.ns_per_req.map_or("-".into(), |x| format!("{x:.0}")),
            r.req_per_cpu_s.map_or("-".into(), |x| format!("{x:.0}")),
            r.cache_hit_ratio
                .map_or("-".into(), |x| format!("{:.0}%", x * 100.0)),
        );
    }
    for vs in rows
        .iter()
        .map(|r| r.value_size)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let get = |p: &str| rows.iter().find(|r| r.value_size == vs && r.path == p);
        if let (Some(nc), Some(x)) = (get("nutcracker (tcp)"), get("weir xdp (udp)")) {
            if let (Some(a), Some(b)) = (x.req_per_cpu_s, nc.req_per_cpu_s) {
                println!(
                    "{vs} B: weir xdp / nutcracker requests per CPU-second = {:.1}x (target >= 8x)",
                    a / b
                );
            }
        }
        if let (Some(d), Some(c)) = (get("memcached direct (udp)"), get("weir xdp+cache (udp)")) {
            println!(
                "{vs} B: p50 with cache {:.1} us vs direct memcached {:.1} us (hit ratio {:.0}%)",
                c.p50_us,
                d.p50_us,
                c.cache_hit_ratio.unwrap_or(0.0) * 100.0
            );
        }
    }
    println!("XDP CPU = BPF run time of weir_kv (+ the hot-key thread with the cache); nutcracker CPU = utime+stime; the kernel's network stack is counted for neither. nutcracker latency = pipelined batch / depth.");
}
