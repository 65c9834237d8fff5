//! The load-aware controller end to end, in network namespaces the tests
//! build and always remove (client, weir, three backends):
//! - (a) table updates under traffic (every 100 ms, then every 10 ms after a
//!   reload) keep every established connection on its DIP;
//! - (b) a backend that slows down loses its share of new connections within
//!   a few intervals (the reaction time is printed);
//! - (c) a DIP whose agent stops answering is handled as configured: `keep`
//!   still sends it new connections, `drain` stops them, established
//!   connections survive both, and an agent that answers again is used again;
//! - (d) garbage, huge, negative, NaN, slow and failing agent replies are
//!   counted per kind and never stop the controller;
//! - (e) passive telemetry estimates DIPs with no agent and sees a slowdown;
//!   a DIP failing its health check gets no new connections but keeps its
//!   established ones.
//!
//! Bounds are generous and every wait is bounded: the machine is shared.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::backend::{Backend, BackendOptions, AGENT_PORT};
use weir_lab::client::spawn_http;
use weir_lab::daemon::Daemon;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

const VIP: &str = "10.77.100.1:80";

/// One lab at a time: the reaction-time assertions want the CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lab configuration: one nat VIP over `n` backends with agents.
fn config(n: usize, interval_ms: u64, on_silent: &str, extra: &str) -> String {
    let ifs: Vec<String> = (1..=n).map(|i| format!("\"wb{i}\"")).collect();
    let mut s = format!(
        "[dataplane]\ninterfaces = [\"wc0\", {}]\nconn_table_size = 65536\n\n\
         [controller]\npolicy = \"awfd\"\nm = 4\nupdate_interval_ms = {interval_ms}\n\
         telemetry = \"agent\"\newma_alpha = 0.5\nagent_timeout_ms = 100\n\
         on_agent_silent = \"{on_silent}\"\nsilent_after = 3\n\n\
         [metrics]\nlisten = \"127.0.0.1:9100\"\n\n\
         [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n{extra}",
        ifs.join(", ")
    );
    for i in 1..=n {
        s += &format!(
            "[[vip.dip]]\naddress = \"10.77.{i}.2\"\nport = 8080\nagent = \"10.77.{i}.2:{AGENT_PORT}\"\n"
        );
    }
    s
}

fn start_daemon(lab: &Lab, cfg: &str) -> Daemon {
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(cfg).unwrap();
    d.start().unwrap();
    d
}

/// One HTTP GET on a new connection; the answering backend's name.
fn get_once(vip: SocketAddr) -> Result<String, String> {
    let s = TcpStream::connect_timeout(&vip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    w.write_all(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut backend = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("closed".into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(b) = l.strip_prefix("X-Backend: ") {
            backend = Some(b.to_string());
        }
    }
    backend.ok_or_else(|| "no X-Backend".into())
}

/// When a connection started, and which backend answered it.
type Entry = (Instant, Result<String, String>);

/// New connections from the client namespace by `threads` workers, each
/// pausing `pause` between requests; every result is recorded with the
/// time its connection started.
struct Load {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Entry>>>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(ns: &str, threads: usize, pause: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let vip: SocketAddr = VIP.parse().unwrap();
        let workers = (0..threads)
            .map(|_| {
                let (ns, stop, log) = (ns.to_string(), stop.clone(), log.clone());
                std::thread::spawn(move || {
                    enter(&ns).unwrap();
                    // Bounded: at most 10 minutes of requests even if never stopped.
                    let deadline = Instant::now() + Duration::from_secs(600);
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let t = Instant::now();
                        let r = get_once(vip);
                        log.lock().unwrap().push((t, r));
                        std::thread::sleep(pause);
                    }
                })
            })
            .collect();
        Load { stop, log, workers }
    }

    /// Results of connections started in [from, to).
    /// (share of `backend`, count) among answered connections in [from, to).
    fn share(&self, backend: &str, from: Instant, to: Instant) -> (f64, usize) {
        share_of(&self.log.lock().unwrap(), backend, from, to)
    }

    fn finish(mut self) -> Vec<Entry> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            w.join().unwrap();
        }
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

type Log = [Entry];

/// (share of `backend`, count) among answered connections started in [from, to).
fn share_of(log: &Log, backend: &str, from: Instant, to: Instant) -> (f64, usize) {
    let ok: Vec<&String> = log
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let n = ok.iter().filter(|b| **b == backend).count();
    (n as f64 / ok.len().max(1) as f64, ok.len())
}

/// A fake agent inside `ns` on AGENT_PORT: `reply(n)` is the n-th answer
/// (raw bytes; `None` = sleep past the controller's timeout).
struct FakeAgent {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl FakeAgent {
    fn start(ns: &str, reply: impl Fn(u64) -> Option<Vec<u8>> + Send + 'static) -> FakeAgent {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let (st, sv, ns) = (stop.clone(), served.clone(), ns.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter(&ns).unwrap();
            let l = TcpListener::bind(("0.0.0.0", AGENT_PORT)).unwrap();
            l.set_nonblocking(true).unwrap();
            tx.send(()).unwrap();
            while !st.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let n = sv.fetch_add(1, Ordering::Relaxed);
                match reply(n) {
                    Some(bytes) => {
                        let _ = s.write_all(&bytes);
                    }
                    None => std::thread::sleep(Duration::from_millis(250)),
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        FakeAgent {
            stop,
            served,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn http_ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The controller's view of DIP `i` (1-based) in `weir status --json`.
fn dip_view(status: &Value, i: usize) -> Value {
    let addr = format!("10.77.{i}.2");
    status["controller"]["vips"][0]["dips"]
        .as_array()
        .unwrap_or_else(|| panic!("no controller view in status: {status}"))
        .iter()
        .find(|d| d["address"] == addr.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{addr} not in {status}"))
}

/// Polls `weir status --json` until the controller's view is in it and
/// `pred` holds of it (bounded). The view appears after the controller's
/// first tick, which can come after the daemon says it is ready.
fn wait_status(d: &Daemon, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = d.status_json().unwrap();
        if s["controller"]["vips"].is_array() && pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}; status: {s:#}\nlog:\n{}",
            d.new_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn daemon_alive(d: &Daemon) -> bool {
    // SAFETY: signal 0 only checks for existence.
    d.pid()
        .is_some_and(|p| unsafe { libc::kill(p as i32, 0) } == 0)
}

fn backends(lab: &Lab, opts: &BackendOptions) -> Vec<Backend> {
    lab.backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start_with(ns, &format!("backend-{}", i + 1), opts).unwrap())
        .collect()
}

#[test]
fn a_table_updates_under_traffic_keep_established_connections() {
    let _g = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = backends(&lab, &BackendOptions::default());
    // Agents whose answers jump around (C = 125..250/s, R = 0..49/s): the
    // weights (1..4) change almost every interval, so tables are published
    // under traffic all the time.
    let _agents: Vec<FakeAgent> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            FakeAgent::start(ns, move |n| {
                let x = (n.wrapping_mul(2_654_435_761) ^ (i as u64 * 40_503)) % 97;
                let t = 0.004 + x as f64 * 0.00004;
                Some(http_ok(&format!(
                    "{{\"processing_time_s\": {t}, \"rate_per_s\": {}, \"samples\": 10, \"window_s\": 0.1}}",
                    (x * 3) % 50
                )))
            })
        })
        .collect();
    let mut d = start_daemon(&lab, &config(3, 100, "keep", ""));
    let vip: SocketAddr = VIP.parse().unwrap();
    // 30 long-lived connections, 60 requests 60 ms apart (~3.6 s), and new
    // connections all along.
    let live = spawn_http(&lab.client, vip, 30, 60, Duration::from_millis(60));
    let load = Load::start(&lab.client, 2, Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(1200));
    let before = d.status_json().unwrap();
    let published_100 = before["controller"]["tables_published"].as_u64().unwrap();
    // Stress: an update every 10 ms from here on (a reload under traffic).
    let log = d.reload(&config(3, 10, "keep", "")).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    std::thread::sleep(Duration::from_millis(2000));
    let after = d.status_json().unwrap();
    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let results = load.finish();

    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == 60,
            "a connection moved or broke under table updates: {r:?}"
        );
    }
    let used: std::collections::BTreeSet<_> = records.iter().filter_map(|r| r.backend()).collect();
    assert!(used.len() >= 2, "long-lived connections on {used:?} only");
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    assert!(
        failed * 50 <= results.len(),
        "{failed} of {} new connections failed",
        results.len()
    );
    let published = after["controller"]["tables_published"].as_u64().unwrap();
    assert!(
        published_100 >= 4,
        "too few tables at 100 ms: {published_100}; {before:#}"
    );
    assert!(
        published >= published_100 + 40,
        "the 10 ms stress published only {} tables in 2 s",
        published - published_100
    );
    assert_eq!(
        after["controller"]["update_interval_ms"].as_u64(),
        Some(10),
        "{after:#}"
    );
    let counter = |name: &str| after["counters"][name].as_u64().unwrap();
    assert_eq!(counter("conn_stale"), 0, "{after:#}");
    assert_eq!(counter("drop_no_backend"), 0, "{after:#}");
    eprintln!(
        "(a) {} tables in all ({} at 100 ms), {} new connections, {} long-lived x 60 requests kept",
        published,
        published_100,
        results.len(),
        records.len()
    );
    d.stop().unwrap();
}

#[test]
fn b_a_backend_that_slows_down_loses_its_share() {
    let _g = serial();
    let lab = Lab::build(3).expect("building the lab");
    let opts = BackendOptions {
        delay_us: 5_000,
        agent_window: Some(Duration::from_millis(500)),
    };
    let bs = backends(&lab, &opts);
    let d = start_daemon(&lab, &config(3, 100, "keep", ""));
    let load = Load::start(&lab.client, 4, Duration::from_millis(30));
    // Warm up until every backend has an estimate.
    wait_status(&d, "estimates for all DIPs", Duration::from_secs(10), |s| {
        (1..=3).all(|i| dip_view(s, i)["capacity"].is_number())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let (before, n_before) = load.share("backend-2", t0 - Duration::from_millis(1500), t0);
    bs[1].set_delay(Duration::from_millis(60));
    std::thread::sleep(Duration::from_secs(5));
    let status = d.status_json().unwrap();
    let results = load.finish();
    let (early, n_after) = share_of(
        &results,
        "backend-2",
        t0 + Duration::from_secs(2),
        t0 + Duration::from_secs(5),
    );
    // Reaction: the last new connection that backend-2 got after the slowdown.
    let last = results
        .iter()
        .filter(|(t, r)| *t >= t0 && r.as_deref() == Ok("backend-2"))
        .map(|(t, _)| t.duration_since(t0))
        .max()
        .unwrap_or_default();
    eprintln!(
        "(b) backend-2 share: {:.0}% of {n_before} before, {:.1}% of {n_after} from 2 s to 5 s after \
         the slowdown; its last new connection came {:?} after it (update interval 100 ms); \
         its weight now {}, capacity {:.1}/s",
        100.0 * before,
        100.0 * early,
        last,
        dip_view(&status, 2)["weight"],
        dip_view(&status, 2)["capacity"].as_f64().unwrap_or(f64::NAN),
    );
    assert!(
        n_before >= 40 && n_after >= 60,
        "too little traffic: {n_before}, {n_after}"
    );
    assert!(
        before > 0.15,
        "backend-2 had only {before} of new connections before"
    );
    assert!(
        early < 0.08,
        "backend-2 still gets {:.1}% of new connections 2-5 s after slowing down",
        100.0 * early
    );
    assert!(
        last < Duration::from_millis(2500),
        "backend-2 got new connections until {last:?} after slowing down"
    );
    assert_eq!(dip_view(&status, 2)["weight"], 0, "{status:#}");
    assert!(
        dip_view(&status, 1)["weight"].as_u64().unwrap() > 0
            && dip_view(&status, 3)["weight"].as_u64().unwrap() > 0,
        "{status:#}"
    );
}

#[test]
fn c_a_silent_agent_is_kept_or_drained_as_configured() {
    let _g = serial();
    let lab = Lab::build(3).expect("building the lab");
    let opts = BackendOptions {
        delay_us: 2_000,
        agent_window: Some(Duration::from_millis(500)),
    };
    let mut bs = backends(&lab, &opts);
    let mut d = start_daemon(&lab, &config(3, 100, "keep", ""));
    let vip: SocketAddr = VIP.parse().unwrap();
    let load = Load::start(&lab.client, 3, Duration::from_millis(30));
    wait_status(&d, "estimates for all DIPs", Duration::from_secs(10), |s| {
        (1..=3).all(|i| dip_view(s, i)["capacity"].is_number())
    });
    // Long-lived connections across everything below (~7.5 s).
    let live = spawn_http(&lab.client, vip, 24, 75, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(500));

    // keep: backend-1's agent goes away; it still gets new connections,
    // weighed like an average DIP, and the failed polls are counted.
    bs[0].stop_agent();
    let s = wait_status(&d, "backend-1 silent", Duration::from_secs(5), |s| {
        dip_view(s, 1)["agent_silent"] == true
    });
    let v = dip_view(&s, 1);
    assert!(
        v["agent_errors"]["connect"].as_u64().unwrap_or(0) >= 3,
        "{v:#}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let t1 = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let (keep_share, n) = load.share("backend-1", t1, Instant::now());
    let v = dip_view(&d.status_json().unwrap(), 1);
    assert!(v["weight"].as_u64().unwrap() > 0, "keep: weight 0: {v:#}");
    assert!(
        keep_share > 0.10 && n >= 30,
        "keep: backend-1 got {:.0}% of {n} new connections",
        100.0 * keep_share
    );

    // drain: the same silence now stops its new connections.
    let log = d.reload(&config(3, 100, "drain", "")).unwrap();
    assert!(log.contains("reloaded"), "{log}");
    wait_status(
        &d,
        "drain: backend-1 at weight 0",
        Duration::from_secs(5),
        |s| dip_view(s, 1)["weight"] == 0,
    );
    let t2 = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let (drain_share, n) = load.share("backend-1", t2, Instant::now());
    assert!(
        drain_share == 0.0 && n >= 30,
        "drain: backend-1 still got {:.0}% of {n} new connections",
        100.0 * drain_share
    );

    // It answers again: used again.
    bs[0]
        .start_agent(&lab.backends[0], Duration::from_millis(500))
        .unwrap();
    let s = wait_status(&d, "backend-1 back", Duration::from_secs(5), |s| {
        let v = dip_view(s, 1);
        v["agent_silent"] == false && v["weight"].as_u64().unwrap_or(0) > 0
    });
    assert!(dip_view(&s, 1)["agent_errors"]["connect"].as_u64().unwrap() >= 3);
    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    let results = load.finish();
    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == 75,
            "an established connection broke or moved: {r:?}"
        );
    }
    assert!(
        records.iter().any(|r| r.backend() == Some("backend-1")),
        "no long-lived connection was on backend-1"
    );
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    assert!(
        failed * 50 <= results.len(),
        "{failed} of {} failed",
        results.len()
    );
    d.stop().unwrap();
}

#[test]
fn d_bad_agent_replies_are_counted_and_never_crash() {
    let _g = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _bs: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let opts = BackendOptions {
                delay_us: 1_000,
                // backend-1 gets a hostile fake agent instead.
                agent_window: (i > 0).then_some(Duration::from_millis(500)),
            };
            Backend::start_with(ns, &format!("backend-{}", i + 1), &opts).unwrap()
        })
        .collect();
    let bad: Vec<Option<Vec<u8>>> = vec![
        Some(b"garbage\r\n\r\n".to_vec()),
        Some(http_ok("not json at all")),
        Some(http_ok(&format!("[{}]", "9".repeat(100_000)))),
        Some(http_ok(
            r#"{"processing_time_s": -0.5, "rate_per_s": 10, "samples": 3}"#,
        )),
        Some(http_ok(
            r#"{"processing_time_s": 0.01, "rate_per_s": -10, "samples": 3}"#,
        )),
        Some(http_ok(
            r#"{"processing_time_s": NaN, "rate_per_s": 1, "samples": 3}"#,
        )),
        Some(http_ok(
            r#"{"processing_time_s": 1e308, "rate_per_s": 1e308, "samples": 3}"#,
        )),
        Some(http_ok(
            r#"{"processing_time_s": 0.01, "rate_per_s": 1, "samples": -1}"#,
        )),
        Some(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec()),
        None,             // slower than agent_timeout_ms
        Some(Vec::new()), // closes without a byte
    ];
    let n_bad = bad.len() as u64;
    let agent = FakeAgent::start(&lab.backends[0], move |n| bad[(n % n_bad) as usize].clone());
    let d = start_daemon(&lab, &config(3, 50, "keep", ""));
    let load = Load::start(&lab.client, 2, Duration::from_millis(20));
    let s = wait_status(
        &d,
        "every error kind counted",
        Duration::from_secs(20),
        |s| {
            let e = &dip_view(s, 1)["agent_errors"];
            ["parse", "too_large", "invalid", "http", "timeout"]
                .iter()
                .all(|k| e[*k].as_u64().unwrap_or(0) >= 2)
        },
    );
    assert!(agent.served.load(Ordering::Relaxed) >= 20);
    assert!(daemon_alive(&d), "the daemon died:\n{}", d.new_log());
    // The good DIPs keep their estimates and weights; bad data never
    // became an estimate of backend-1.
    for i in [2, 3] {
        let v = dip_view(&s, i);
        assert!(v["capacity"].as_f64().unwrap() > 0.0, "{v:#}");
        assert_eq!(
            v["agent_errors"].as_object().map_or(0, |o| o.len()),
            0,
            "{v:#}"
        );
    }
    let v1 = dip_view(&s, 1);
    assert!(
        v1["capacity"].is_null(),
        "garbage became an estimate: {v1:#}"
    );
    assert!(
        v1["weight"].as_u64().unwrap() > 0,
        "keep: still weighed as average: {v1:#}"
    );
    // The same counters on /metrics (served in the LB namespace).
    let lb = lab.lb.clone();
    let metrics = std::thread::spawn(move || {
        enter(&lb).unwrap();
        let mut s = TcpStream::connect("127.0.0.1:9100").unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .join()
    .unwrap();
    assert!(metrics.starts_with("HTTP/1.0 200"), "{metrics}");
    let parse_line =
        "weir_dip_agent_errors_total{vip=\"web\",dip=\"10.77.1.2:8080\",kind=\"parse\"}";
    let n: u64 = metrics
        .lines()
        .find(|l| l.starts_with(parse_line))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {parse_line} in\n{metrics}"));
    assert!(n >= 2, "{metrics}");
    for name in [
        "weir_dip_capacity",
        "weir_dip_weight",
        "weir_dip_class",
        "weir_dip_new_conn_share",
    ] {
        assert!(
            metrics.contains(&format!("{name}{{vip=\"web\",dip=\"10.77.2.2:8080\"}}")),
            "{name} missing:\n{metrics}"
        );
    }
    let results = load.finish();
    let ok = results.iter().filter(|(_, r)| r.is_ok()).count();
    assert!(
        ok * 50 >= results.len() * 49 && ok >= 50,
        "{ok} of {} served",
        results.len()
    );
    assert!(daemon_alive(&d));
    drop(agent);
}

/// Passive telemetry (no agent is polled) estimates every DIP from the
/// data plane's request-to-first-reply delays and reacts to a slowdown; a
/// DIP failing its health check gets no new connections while its
/// established ones keep going, and gets them again once it passes.
#[test]
fn e_passive_telemetry_and_health_checks() {
    let _g = serial();
    let lab = Lab::build(3).expect("building the lab");
    let opts = BackendOptions {
        delay_us: 5_000,
        // The agent is the health-check target here (GET /load on 9300),
        // not a telemetry source: stopping it fails the check only.
        agent_window: Some(Duration::from_millis(500)),
    };
    let mut bs = backends(&lab, &opts);
    let health = format!(
        "  [vip.health]\n  kind = \"http\"\n  path = \"/load\"\n  port = {AGENT_PORT}\n  \
         interval_ms = 100\n  timeout_ms = 100\n  rise = 2\n  fall = 2\n"
    );
    let cfg =
        config(3, 100, "keep", &health).replace("telemetry = \"agent\"", "telemetry = \"passive\"");
    let d = start_daemon(&lab, &cfg);
    let load = Load::start(&lab.client, 4, Duration::from_millis(30));
    let s = wait_status(&d, "passive estimates", Duration::from_secs(10), |s| {
        (1..=3).all(|i| dip_view(s, i)["capacity"].is_number())
    });
    for i in 1..=3 {
        let v = dip_view(&s, i);
        let c = v["capacity"].as_f64().unwrap();
        // 5 ms of service per request: at most 200/s, and not absurdly less.
        assert!((10.0..=210.0).contains(&c), "DIP {i}: {v:#}");
        assert_eq!(v["healthy"], true, "{v:#}");
        assert!(
            v["agent_errors"].as_object().is_none_or(|o| o.is_empty()),
            "{v:#}"
        );
    }
    // Slowdown seen by the data plane alone.
    bs[1].set_delay(Duration::from_millis(60));
    wait_status(
        &d,
        "passive: slow DIP at weight 0",
        Duration::from_secs(5),
        |s| dip_view(s, 2)["weight"] == 0,
    );
    bs[1].set_delay(Duration::from_millis(5));

    // Health: backend-3's check fails; its established connections go on.
    let vip: SocketAddr = VIP.parse().unwrap();
    let live = spawn_http(&lab.client, vip, 18, 30, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(300));
    bs[2].stop_agent();
    wait_status(&d, "backend-3 failing", Duration::from_secs(5), |s| {
        let v = dip_view(s, 3);
        v["healthy"] == false && v["weight"] == 0
    });
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(1200));
    let (share, n) = load.share("backend-3", t, Instant::now());
    assert!(
        share == 0.0 && n >= 20,
        "a failing DIP got {:.0}% of {n} new connections",
        100.0 * share
    );
    bs[2]
        .start_agent(&lab.backends[2], Duration::from_millis(500))
        .unwrap();
    wait_status(&d, "backend-3 healthy again", Duration::from_secs(5), |s| {
        let v = dip_view(s, 3);
        v["healthy"] == true && v["weight"].as_u64().unwrap_or(0) > 0
    });
    let records: Vec<_> = live.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == 30,
            "an established connection broke or moved: {r:?}"
        );
    }
    assert!(
        records.iter().any(|r| r.backend() == Some("backend-3")),
        "no long-lived connection was on backend-3"
    );
    let results = load.finish();
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    assert!(
        failed * 50 <= results.len(),
        "{failed} of {} failed",
        results.len()
    );
}
