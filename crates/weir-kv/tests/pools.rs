//! Every pool of a nutcracker YAML in one `weir kv`: each pool on its own
//! listener routes key by key as the real nutcracker running the same file
//! does; status, the API and the metrics show each pool; `--pool` still
//! picks one. A reload adds, changes and removes pools while clients
//! pipeline requests (none closed, none lost; a changed pool's clients move
//! to its new servers), and a refused file (with its file:line) keeps what
//! runs. Loopback only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clap::Parser;
use weir_http::client::{self, Call, Method};
use weir_kv::{http_get, load_config, parse_nutcracker, start_from, KvArgs, KvStatus};
use weir_lab::kv::testbed::{free_port, memcached, nutcracker, McClient, Proc};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    kv: KvArgs,
}

/// The tests of this file one at a time: they pick free ports and load the
/// CPU with pipelining clients.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn have(bin: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A private temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("weir-kv-pools-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// memcached servers on loopback, and a direct client to each.
struct Servers {
    ports: Vec<u16>,
    _procs: Vec<Proc>,
    direct: Vec<McClient>,
}

impl Servers {
    fn start(n: usize) -> Servers {
        assert!(
            have("memcached") && have("nutcracker"),
            "memcached and nutcracker are needed (scripts/deps.sh installs them)"
        );
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let procs = ports
            .iter()
            .map(|&p| memcached("127.0.0.1", p, false, 1).unwrap())
            .collect();
        let direct = ports
            .iter()
            .map(|&p| McClient::connect(SocketAddr::from(([127, 0, 0, 1], p))).unwrap())
            .collect();
        Servers {
            ports,
            _procs: procs,
            direct,
        }
    }

    fn flush(&mut self) {
        for c in &mut self.direct {
            assert_eq!(c.cmd("flush_all\r\n").unwrap(), "OK\r\n");
        }
    }

    /// The servers (by index) that hold `key`.
    fn owners(&mut self, key: &str) -> Vec<usize> {
        (0..self.direct.len())
            .filter(|&s| self.direct[s].get(key).unwrap().is_some())
            .collect()
    }
}

/// A pool of the test's YAML: name, hash, distribution, extra lines and
/// which servers (index, weight, name).
struct PoolDef {
    name: &'static str,
    hash: &'static str,
    dist: &'static str,
    extra: &'static str,
    servers: &'static [(usize, u32, Option<&'static str>)],
}

const ALPHA: PoolDef = PoolDef {
    name: "alpha",
    hash: "fnv1a_64",
    dist: "ketama",
    extra: "",
    servers: &[(0, 1, None), (1, 2, Some("beta")), (2, 1, None)],
};
const BETA: PoolDef = PoolDef {
    name: "beta",
    hash: "md5",
    dist: "modula",
    extra: "",
    servers: &[(1, 1, None), (2, 1, None), (3, 1, None)],
};
const GAMMA: PoolDef = PoolDef {
    name: "gamma",
    hash: "murmur",
    dist: "ketama",
    extra: "  hash_tag: \"{}\"\n",
    servers: &[(0, 1, None), (3, 3, Some("big"))],
};

/// The YAML of `pools`, each listening on its port of `listen`.
fn yaml(pools: &[(&PoolDef, u16)], ports: &[u16]) -> String {
    let mut out = String::from("# pools of one switch\n");
    for (p, listen) in pools {
        out.push_str(&format!(
            "{}:\n  listen: 127.0.0.1:{listen}\n  hash: {}\n  distribution: {}\n{}  auto_eject_hosts: false\n  servers:\n",
            p.name, p.hash, p.dist, p.extra
        ));
        for (i, w, name) in p.servers {
            let name = name.map_or(String::new(), |n| format!(" {n}"));
            out.push_str(&format!("   - 127.0.0.1:{}:{w}{name}\n", ports[*i]));
        }
    }
    out
}

fn args(yml: &Path, extra: &[&str]) -> KvArgs {
    let yml = yml.to_str().unwrap();
    Cli::try_parse_from(["weir-kv", "--nutcracker", yml].iter().chain(extra))
        .unwrap()
        .kv
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Keys of every kind the pools hash: plain, long, and hash-tagged.
fn keys() -> Vec<String> {
    (0..150)
        .map(|i| match i % 3 {
            0 => format!("user:{i}"),
            1 => format!("session-{}-{i}", i * 7919),
            _ => format!("{{tag{}}}:obj:{i}", i % 7),
        })
        .collect()
}

/// Where each key lands when set through `via` (all servers flushed first).
fn placement(servers: &mut Servers, via: SocketAddr, keys: &[String]) -> Vec<Vec<usize>> {
    servers.flush();
    let mut c = McClient::connect(via).unwrap();
    for k in keys {
        assert_eq!(c.set(k, b"v").unwrap(), "STORED\r\n", "set {k} via {via}");
    }
    keys.iter().map(|k| servers.owners(k)).collect()
}

#[test]
fn every_pool_of_a_yaml_routes_as_nutcracker_runs_it() {
    let _serial = serial();
    let mut servers = Servers::start(4);
    let dir = Dir::new("agree");
    let defs = [&ALPHA, &BETA, &GAMMA];
    let weir_ports: Vec<u16> = defs.iter().map(|_| free_port()).collect();
    let nc_ports: Vec<u16> = defs.iter().map(|_| free_port()).collect();
    let pair = |ports: &[u16]| -> Vec<(&PoolDef, u16)> {
        defs.iter().copied().zip(ports.iter().copied()).collect()
    };
    let weir_yml = dir.path().join("weir.yml");
    std::fs::write(&weir_yml, yaml(&pair(&weir_ports), &servers.ports)).unwrap();
    let nc_yml = dir.path().join("nc.yml");
    std::fs::write(&nc_yml, yaml(&pair(&nc_ports), &servers.ports)).unwrap();

    let a = args(&weir_yml, &["--metrics", "127.0.0.1:0"]);
    let cfgs = load_config(&a).unwrap();
    let names: Vec<&str> = cfgs.iter().map(|c| c.pool.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let kv = start_from(&cfgs, &a).unwrap();
    let _nc = nutcracker(&nc_yml, addr(nc_ports[0]), free_port()).unwrap();
    for &p in &nc_ports[1..] {
        McClient::connect(addr(p)).expect("nutcracker listens on every pool");
    }

    let keys = keys();
    let mut checked = 0;
    for (i, def) in defs.iter().enumerate() {
        let via_weir = kv.pool_addr(def.name).unwrap();
        assert_eq!(via_weir, addr(weir_ports[i]), "{}", def.name);
        let weir = placement(&mut servers, via_weir, &keys);
        let nc = placement(&mut servers, addr(nc_ports[i]), &keys);
        let pool_servers: Vec<usize> = def.servers.iter().map(|s| s.0).collect();
        for (k, (w, n)) in keys.iter().zip(weir.iter().zip(&nc)) {
            assert_eq!(w.len(), 1, "{}: {k} stored on {w:?}", def.name);
            assert!(pool_servers.contains(&w[0]), "{}: {k} on {w:?}", def.name);
            assert_eq!(w, n, "{}: {k}: weir {w:?}, nutcracker {n:?}", def.name);
            checked += 1;
        }
        // Every server of the pool got keys: the pools really differ.
        for s in &pool_servers {
            assert!(
                weir.iter().any(|w| w[0] == *s),
                "{}: server {s} idle",
                def.name
            );
        }
    }
    assert_eq!(checked, 3 * keys.len());
    eprintln!("{checked} keys over 3 pools: weir kv and nutcracker agree on every one");

    // Status, API and metrics: each pool, its own numbers.
    let m = kv.metrics_addr().unwrap();
    let st: KvStatus = serde_json::from_str(&http_get(m, "/status").unwrap()).unwrap();
    let listed: Vec<(&str, String)> = st
        .pools
        .iter()
        .map(|p| (p.pool.as_str(), p.listen.clone()))
        .collect();
    assert_eq!(
        listed,
        defs.iter()
            .zip(&weir_ports)
            .map(|(d, p)| (d.name, addr(*p).to_string()))
            .collect::<Vec<_>>()
    );
    for p in &st.pools {
        assert_eq!(p.stats.requests, keys.len() as u64, "{}", p.pool);
    }
    assert_eq!(st.pools[1].hash, "md5");
    assert_eq!(st.pools[1].distribution, "modula");
    let views: serde_json::Value =
        serde_json::from_str(&http_get(m, "/api/v1/pools").unwrap()).unwrap();
    assert_eq!(views.as_array().unwrap().len(), 3);
    let gamma: serde_json::Value =
        serde_json::from_str(&http_get(m, "/api/v1/pools/gamma").unwrap()).unwrap();
    assert_eq!(gamma["servers"][1]["name"], "big");
    let metrics = http_get(m, "/metrics").unwrap();
    for def in defs {
        let line = format!(
            "weir_kv_requests_total{{pool=\"{}\"}} {}",
            def.name,
            keys.len()
        );
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in\n{metrics}"
        );
    }
    assert!(metrics.contains("weir_kv_server_requests_total{pool=\"alpha\",server=\"beta\"}"));
    kv.stop();

    // --pool picks one: only its listener opens.
    let one = args(&weir_yml, &["--pool", "beta", "--metrics", "off"]);
    let cfgs = load_config(&one).unwrap();
    let kv = start_from(&cfgs, &one).unwrap();
    assert_eq!(kv.pool_addr("beta"), Some(addr(weir_ports[1])));
    assert_eq!(kv.pool_addr("alpha"), None);
    assert!(std::net::TcpStream::connect(addr(weir_ports[0])).is_err());
    kv.stop();
    let e = load_config(&args(&weir_yml, &["--pool", "delta"])).unwrap_err();
    assert!(
        format!("{e:#}").contains("no pool named `delta` (the file has alpha, beta, gamma)"),
        "{e:#}"
    );
    // The UDP path serves one pool: several with --udp-interface are refused.
    let e = load_config(&args(&weir_yml, &["--udp-interface", "lo"])).unwrap_err();
    assert!(
        format!("{e:#}").contains("pick the pool with --pool NAME"),
        "{e:#}"
    );
}

/// What the live clients of a reload test saw.
#[derive(Default, Debug)]
struct Seen {
    requests: u64,
    replies: u64,
    /// Gets that found nothing: only where a reload moved the key.
    misses: u64,
    wrong: u64,
    closed: u64,
}

impl Seen {
    fn add(&mut self, s: &Seen) {
        self.requests += s.requests;
        self.replies += s.replies;
        self.misses += s.misses;
        self.wrong += s.wrong;
        self.closed += s.closed;
    }
}

/// One client connection pipelining batches of sets then gets to `pool`,
/// checking every reply, until `stop` (bounded by count and time).
fn pipeline(pool: SocketAddr, id: usize, stop: Arc<AtomicBool>) -> Seen {
    const BATCH: usize = 16;
    let mut seen = Seen::default();
    let mut c = McClient::connect(pool).unwrap();
    let t0 = Instant::now();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) && round < 100_000 && t0.elapsed() < Duration::from_secs(30)
    {
        let keys: Vec<String> = (0..BATCH).map(|j| format!("c{id}:r{round}:{j}")).collect();
        let mut out = Vec::new();
        for k in &keys {
            out.extend_from_slice(format!("set {k} 0 0 {}\r\n{k}\r\n", k.len()).as_bytes());
        }
        for k in &keys {
            out.extend_from_slice(format!("get {k}\r\n").as_bytes());
        }
        if c.send(&out).is_err() {
            seen.closed += 1;
            return seen;
        }
        seen.requests += 2 * BATCH as u64;
        for _ in &keys {
            match c.line() {
                Ok(l) if l == "STORED\r\n" => seen.replies += 1,
                Ok(_) => {
                    seen.replies += 1;
                    seen.wrong += 1;
                }
                Err(_) => {
                    seen.closed += 1;
                    return seen;
                }
            }
        }
        for k in &keys {
            match c.values() {
                Ok(Ok(v)) if v.len() == 1 && v[0].2 == k.as_bytes() => seen.replies += 1,
                Ok(Ok(v)) if v.is_empty() => {
                    seen.replies += 1;
                    seen.misses += 1;
                }
                Ok(_) => {
                    seen.replies += 1;
                    seen.wrong += 1;
                }
                Err(_) => {
                    seen.closed += 1;
                    return seen;
                }
            }
        }
        round += 1;
    }
    seen
}

fn post_reload(m: SocketAddr) -> client::Reply {
    Call::new(Method::POST, "/api/v1/reload").send(m).unwrap()
}

/// The pool names a running switch reports.
fn pool_names(m: SocketAddr) -> Vec<String> {
    let st: KvStatus = serde_json::from_str(&http_get(m, "/status").unwrap()).unwrap();
    st.pools.into_iter().map(|p| p.pool).collect()
}

#[test]
fn reload_adds_changes_and_removes_pools_while_clients_pipeline() {
    let _serial = serial();
    let mut servers = Servers::start(4);
    let dir = Dir::new("reload");
    let yml = dir.path().join("nc.yml");
    let (pa, pb, pg) = (free_port(), free_port(), free_port());
    let ports = servers.ports.clone();
    let write = |pools: &[(&PoolDef, u16)]| std::fs::write(&yml, yaml(pools, &ports)).unwrap();
    write(&[(&ALPHA, pa), (&BETA, pb)]);
    let a = args(&yml, &["--metrics", "127.0.0.1:0"]);
    let kv = start_from(&load_config(&a).unwrap(), &a).unwrap();
    let m = kv.metrics_addr().unwrap();
    let reload_cli = |metrics: SocketAddr| {
        let args = Cli::try_parse_from(["weir-kv", "reload", "--metrics", &metrics.to_string()])
            .unwrap()
            .kv;
        weir_kv::run(&args)
    };

    // Half the connections on alpha (never changed), half on beta (changed,
    // then removed at the end, after the clients stop).
    const CLIENTS: usize = 8;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let stop = stop.clone();
            let pool = if id % 2 == 0 { pa } else { pb };
            std::thread::spawn(move || (pool, pipeline(addr(pool), id, stop)))
        })
        .collect();
    let pause = || std::thread::sleep(Duration::from_millis(300));
    pause();
    let mut reloads = 0;

    // 1. gamma added: its listener opens, alpha and beta stay.
    write(&[(&ALPHA, pa), (&BETA, pb), (&GAMMA, pg)]);
    let r = post_reload(m);
    reloads += 1;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json().unwrap()["changes"],
        "pools added: gamma; changed: none; removed: none; unchanged: alpha, beta"
    );
    assert_eq!(pool_names(m), ["alpha", "beta", "gamma"]);
    let mut g = McClient::connect(addr(pg)).unwrap();
    assert_eq!(g.set("{t}x", b"1").unwrap(), "STORED\r\n");
    pause();

    // 2. A bad file is refused with its file:line; everything keeps serving.
    let good = std::fs::read_to_string(&yml).unwrap();
    let bad = good.replacen("hash: md5", "hash: md6", 1);
    let line = bad.lines().position(|l| l.contains("md6")).unwrap() + 1;
    std::fs::write(&yml, &bad).unwrap();
    let r = post_reload(m);
    reloads += 1;
    assert_eq!(r.status, 409, "{}", r.body);
    let why = r.json().unwrap()["error"].as_str().unwrap().to_string();
    assert!(
        why.starts_with(&format!("{}:{line}: beta.hash", yml.display())),
        "{why}"
    );
    let e = reload_cli(m).unwrap_err();
    reloads += 1;
    assert!(format!("{e:#}").contains("refused the reload"), "{e:#}");
    assert!(
        format!("{e:#}").contains(&format!(":{line}: beta.hash")),
        "{e:#}"
    );
    assert_eq!(pool_names(m), ["alpha", "beta", "gamma"]);
    assert_eq!(g.get("{t}x").unwrap().as_deref(), Some(&b"1"[..]));
    pause();

    // 3. beta's third server changes (port 3 to port 0) under its clients:
    // a connection opened before the reload stays open and routes by the
    // new server list, key by key.
    let mut before = McClient::connect(addr(pb)).unwrap();
    assert_eq!(before.set("warm", b"w").unwrap(), "STORED\r\n");
    let moved = good.replacen(
        &format!("127.0.0.1:{}:1\n", ports[3]),
        &format!("127.0.0.1:{}:1\n", ports[0]),
        1,
    );
    assert_ne!(moved, good);
    std::fs::write(&yml, &moved).unwrap();
    let r = post_reload(m);
    reloads += 1;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json().unwrap()["changes"],
        "pools added: none; changed: beta (servers); removed: none; unchanged: alpha, gamma"
    );
    let new_beta = parse_nutcracker("nc.yml", &moved, Some("beta")).unwrap();
    let dist = new_beta.distribution();
    let port_of = |i: usize| new_beta.server_addrs[i].port();
    for i in 0..60 {
        let k = format!("after-reload:{i}");
        assert_eq!(before.set(&k, b"v").unwrap(), "STORED\r\n", "{k}");
        let owners: Vec<u16> = servers.owners(&k).into_iter().map(|s| ports[s]).collect();
        assert_eq!(owners, [port_of(dist.server_for_key(k.as_bytes()))], "{k}");
    }
    pause();

    // 4. gamma removed (by `weir kv reload`): its listener closes.
    write(&[(&ALPHA, pa), (&BETA, pb)]);
    std::fs::write(
        &yml,
        std::fs::read_to_string(&yml).unwrap().replacen(
            &format!("127.0.0.1:{}:1\n", ports[3]),
            &format!("127.0.0.1:{}:1\n", ports[0]),
            1,
        ),
    )
    .unwrap();
    reload_cli(m).unwrap();
    reloads += 1;
    assert_eq!(pool_names(m), ["alpha", "beta"]);
    assert!(std::net::TcpStream::connect(addr(pg)).is_err());
    pause();

    stop.store(true, Ordering::Relaxed);
    let (mut alpha, mut beta) = (Seen::default(), Seen::default());
    for c in clients {
        let (pool, s) = c.join().unwrap();
        if pool == pa {
            alpha.add(&s)
        } else {
            beta.add(&s)
        }
    }
    eprintln!(
        "{CLIENTS} connections pipelining through {reloads} reloads (3 applied, 2 refused): \
         alpha (unchanged) {alpha:?}; beta (servers changed) {beta:?}"
    );
    for (name, s) in [("alpha", &alpha), ("beta", &beta)] {
        assert!(s.requests > 0, "{name}");
        assert_eq!(
            (s.closed, s.wrong, s.replies),
            (0, 0, s.requests),
            "{name}: {s:?}"
        );
    }
    // Only the changed pool's keys moved.
    assert_eq!(alpha.misses, 0, "{alpha:?}");
    kv.stop();
}

/// The YAML a reload test's pools parse as, so that a typo in the helper
/// shows here rather than as a refused reload.
#[test]
fn the_test_pools_parse() {
    let ports = [1, 2, 3, 4];
    let src = yaml(&[(&ALPHA, 5), (&GAMMA, 6)], &ports);
    let cfg = parse_nutcracker("t.yml", &src, Some("gamma")).unwrap();
    assert_eq!(cfg.hash_tag, Some(*b"{}"));
    assert_eq!(cfg.servers[1].name.as_deref(), Some("big"));
}
