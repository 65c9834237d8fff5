//! Weight changes never blackhole a DIP in the software and hybrid tiers,
//! end to end, in namespaces the test builds and always removes (client,
//! weir, three backends): a nat VIP serves a bounded HTTP load (keep-alive
//! connections of 20 requests, so connections are set up all along) and
//! long-lived keep-alive connections, in short windows that take turns:
//! no change, then
//! - (a) a reload that changes the DIPs' weights every 200 ms, or
//! - (b) the load-aware controller publishing new weights every 100 ms
//!   (agents whose answers jump, so the weights change nearly every time).
//!
//! Asserted: no request or connection fails, no long-lived connection
//! moves, the workers count no `drop_no_route`, and each kind of change is
//! served at least 90% of the unchanged rate. The load is paced (a request
//! every few milliseconds per thread, well below what the lab can serve),
//! so the rate stays the same unless requests stall: this is a floor that
//! catches a blackhole (a DIP without its next hop drops packets until TCP
//! retransmits them, a second or more), not a speed measurement. The
//! windows alternate within one run and the median window of each kind is
//! compared, so a busy spell of the shared machine hits both sides of the
//! comparison alike and one slowed window does not decide it. Each test
//! sends 24 s of traffic.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_lab::backend::{Backend, AGENT_PORT};
use weir_lab::client::{http_load, spawn_http, ConnRecord, LoadRecord};
use weir_lab::daemon::Daemon;
use weir_lab::netns::enter;
use weir_lab::topology::Lab;

const VIP: &str = "10.77.100.1:80";
/// How long each window sends its load, and how many rounds of
/// (no change, reloads, no change, controller) the test runs.
const WINDOW: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 4;
/// The load: threads, requests per connection, time between the starts of
/// requests. 160 requests/s, a ninth of the ~1400/s the lab serves on an
/// idle 2-core machine, so the rate is set by the schedule, not by how
/// much CPU the controller, the reloads and other processes leave to the lab.
const LOAD_THREADS: usize = 8;
const PER_CONN: usize = 20;
const LOAD_PAUSE: Duration = Duration::from_millis(50);
/// Long-lived connections across all the windows.
const LIVE_CONNS: usize = 8;
const LIVE_PAUSE: Duration = Duration::from_millis(100);
/// The least share of the unchanged rate a changing phase must reach.
const RATE_FLOOR: f64 = 0.9;

/// One lab at a time: two would share the workers' CPU.
static SERIAL: Mutex<()> = Mutex::new(());

/// The nat VIP over backends 1..=3 with `weights`; with `controller`, the
/// load-aware controller every 100 ms over the backends' agents.
fn config(dataplane: &str, weights: [u32; 3], controller: bool) -> String {
    let mut s = format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\"]\nworkers = [1]\n{dataplane}\n"
    );
    if controller {
        s += "\n[controller]\npolicy = \"awfd\"\nm = 4\nupdate_interval_ms = 100\n\
              telemetry = \"agent\"\newma_alpha = 0.5\nagent_timeout_ms = 100\n\
              on_agent_silent = \"keep\"\nsilent_after = 3\n";
    }
    s += "\n[[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n";
    for (i, w) in weights.iter().enumerate() {
        let b = i + 1;
        s += &format!(
            "[[vip.dip]]\naddress = \"10.77.{b}.2\"\nport = 8080\nweight = {w}\nagent = \"10.77.{b}.2:{AGENT_PORT}\"\n"
        );
    }
    s
}

/// A backend's agent whose answers jump around (load 4..8 ms, rate 0..49/s),
/// so the controller's weights change almost every interval.
struct JumpyAgent {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl JumpyAgent {
    fn start(ns: &str, seed: u64) -> JumpyAgent {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns) = (stop.clone(), ns.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter(&ns).unwrap();
            let l = TcpListener::bind(("0.0.0.0", AGENT_PORT)).unwrap();
            l.set_nonblocking(true).unwrap();
            tx.send(()).unwrap();
            let served = AtomicU64::new(0);
            while !flag.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = s.read(&mut [0u8; 512]);
                let n = served.fetch_add(1, Ordering::Relaxed);
                let x = (n.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 97;
                let body = format!(
                    "{{\"processing_time_s\": {}, \"rate_per_s\": {}, \"samples\": 10, \"window_s\": 0.1}}",
                    0.004 + x as f64 * 0.00004,
                    (x * 3) % 50
                );
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        JumpyAgent {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for JumpyAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The workers' load-balancer counter `stat` (index of `enum weir_stat`),
/// from the run directory's workers.json.
fn worker_counter(d: &Daemon, stat: u32) -> u64 {
    let workers = weir_control::tier::read_workers(&d.run_dir()).expect("workers.json");
    workers
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["slb"][stat as usize].as_u64().unwrap_or(0))
        .sum()
}

/// An XDP counter of `weir status --json`.
fn xdp_counter(status: &serde_json::Value, name: &str) -> u64 {
    status["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {status}"))
}

/// What the load got in the windows of one kind.
#[derive(Debug)]
struct Kind {
    name: &'static str,
    /// Requests served in each window, in order.
    windows: Vec<u64>,
    /// The rate of each window, requests per second.
    rates: Vec<f64>,
    served: u64,
    failed: Vec<String>,
    secs: f64,
}

impl Kind {
    fn new(name: &'static str) -> Kind {
        Kind {
            name,
            windows: Vec::new(),
            rates: Vec::new(),
            served: 0,
            failed: Vec::new(),
            secs: 0.0,
        }
    }

    fn rate(&self) -> f64 {
        self.served as f64 / self.secs
    }

    /// The median of the windows' rates: a window that a busy spell of the
    /// machine slowed does not decide the comparison, while a blackhole,
    /// which slows every window of its kind, does.
    fn median_rate(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        let n = r.len();
        if n % 2 == 1 {
            r[n / 2]
        } else {
            (r[n / 2 - 1] + r[n / 2]) / 2.0
        }
    }

    /// Runs the bounded load for one [`WINDOW`] while `during` runs (it
    /// must return by the deadline it is given), and adds what it got.
    fn window(&mut self, lab: &Lab, during: impl FnOnce(Instant)) {
        let start = Instant::now();
        let load = http_load(
            &lab.client,
            VIP.parse().unwrap(),
            LOAD_THREADS,
            PER_CONN,
            LOAD_PAUSE,
            WINDOW,
        );
        during(start + WINDOW);
        let records: Vec<LoadRecord> = load.into_iter().map(|h| h.join().unwrap()).collect();
        let served: u64 = records.iter().map(|r| r.served).sum();
        self.windows.push(served);
        self.served += served;
        self.failed
            .extend(records.into_iter().flat_map(|r| r.failed));
        // The load starts no request after the window, so the window is
        // its time; `during` may return a little later (a last reload).
        let secs = WINDOW.as_secs_f64();
        self.rates.push(served as f64 / secs);
        self.secs += secs;
    }
}

/// Rounds of: no change, (a) reloads that change weights every 200 ms, no
/// change, (b) the controller every 100 ms; asserts as the file says.
fn weights_change_under_load(tier: &str, dataplane: &str) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::build(3).expect("building the lab");
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)).unwrap())
        .collect();
    let _agents: Vec<JumpyAgent> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| JumpyAgent::start(ns, i as u64))
        .collect();
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    let unchanged = config(dataplane, [1, 1, 1], false);
    d.write_config(&unchanged).unwrap();
    d.start().unwrap();
    let vip: SocketAddr = VIP.parse().unwrap();
    // Every backend answers before anything is measured.
    for _ in 0..30 {
        weir_lab::client::http_once(&lab.client, vip).expect("a first request");
    }
    std::thread::sleep(Duration::from_millis(1200));
    let no_route = |d: &Daemon| worker_counter(d, weir_abi::WEIR_STAT_DROP_NO_ROUTE);
    let no_route_before = no_route(&d);
    let xdp_no_route_before = xdp_counter(&d.status_json().unwrap(), "drop_no_route");
    let published = |d: &Daemon| {
        d.status_json().unwrap()["controller"]["tables_published"]
            .as_u64()
            .unwrap_or(0)
    };

    let traffic = WINDOW * (4 * ROUNDS) as u32;
    let requests = (traffic.as_millis() / (LIVE_PAUSE.as_millis() + 1)) as usize;
    let live = spawn_http(&lab.client, vip, LIVE_CONNS, requests, LIVE_PAUSE);
    let weight_sets = [[3, 1, 2], [1, 2, 3], [2, 3, 1], [4, 1, 1]];
    let mut reloads = 0;
    let mut tables = 0;
    let mut baseline = Kind::new("no change");
    let mut reloading = Kind::new("reload every 200 ms");
    let mut controlled = Kind::new("controller every 100 ms");
    for _ in 0..ROUNDS {
        baseline.window(&lab, |_| {});
        reloading.window(&lab, |deadline| {
            let mut next = Instant::now();
            while Instant::now() < deadline {
                let w = weight_sets[reloads % weight_sets.len()];
                let log = d.reload(&config(dataplane, w, false)).unwrap();
                assert!(log.contains("reloaded"), "{log}");
                reloads += 1;
                next += Duration::from_millis(200);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        let log = d.reload(&unchanged).unwrap();
        assert!(log.contains("reloaded"), "{log}");
        baseline.window(&lab, |_| {});

        let log = d.reload(&config(dataplane, [1, 1, 1], true)).unwrap();
        assert!(log.contains("reloaded"), "{log}");
        // The controller's first tables come within a few intervals.
        std::thread::sleep(Duration::from_millis(500));
        let published_before = published(&d);
        controlled.window(&lab, |_| {});
        tables += published(&d) - published_before;
        let log = d.reload(&unchanged).unwrap();
        assert!(log.contains("reloaded"), "{log}");
    }

    let records: Vec<ConnRecord> = live.into_iter().map(|h| h.join().unwrap()).collect();
    // The workers write their counters twice a second.
    std::thread::sleep(Duration::from_millis(1200));
    let no_route_after = no_route(&d);
    let xdp_no_route_after = xdp_counter(&d.status_json().unwrap(), "drop_no_route");
    d.stop().unwrap();

    for k in [&baseline, &reloading, &controlled] {
        eprintln!(
            "{tier}: {:<24} {:>6} requests in {:.1} s ({:.0}/s), per window {:?}, \
             median {:.0}/s ({:.2} of no change), {} failed",
            k.name,
            k.served,
            k.secs,
            k.rate(),
            k.windows,
            k.median_rate(),
            k.median_rate() / baseline.median_rate(),
            k.failed.len()
        );
        for f in &k.failed {
            eprintln!("{tier}: {}: failed: {f}", k.name);
        }
    }
    eprintln!(
        "{tier}: {reloads} reloads, {tables} controller tables; drop_no_route: workers {}, XDP {}",
        no_route_after - no_route_before,
        xdp_no_route_after - xdp_no_route_before
    );
    let changing = WINDOW * ROUNDS as u32;
    assert!(
        reloads >= 20,
        "only {reloads} weight reloads in {changing:?}"
    );
    assert!(
        tables >= 20,
        "the controller published only {tables} tables in {changing:?}: its weights did not change"
    );
    for k in [&baseline, &reloading, &controlled] {
        assert!(
            k.failed.is_empty(),
            "{}: {} connections failed, e.g. {:?}",
            k.name,
            k.failed.len(),
            &k.failed[..k.failed.len().min(3)]
        );
    }
    for r in &records {
        assert!(
            !r.violated() && r.served_by.len() == requests,
            "a long-lived connection moved or broke: {r:?}"
        );
    }
    assert_eq!(
        no_route_after - no_route_before,
        0,
        "the workers dropped packets for want of a next hop"
    );
    assert_eq!(xdp_no_route_after - xdp_no_route_before, 0);
    assert!(baseline.served > 0);
    for k in [&reloading, &controlled] {
        assert!(
            k.median_rate() >= RATE_FLOOR * baseline.median_rate(),
            "{}: a median window of {:.0} requests/s against {:.0}/s with no change \
             (windows {:?} against {:?})",
            k.name,
            k.median_rate(),
            baseline.median_rate(),
            k.windows,
            baseline.windows
        );
    }
}

#[test]
fn software_tier_weight_changes_lose_nothing() {
    weights_change_under_load("software", "tier = \"software\"");
}

#[test]
fn hybrid_tier_weight_changes_lose_nothing() {
    // A fast table far smaller than the connections, so most of them stay
    // in the software tier.
    weights_change_under_load(
        "hybrid",
        "tier = \"hybrid\"\nfast_table_size = 4\noffload = \"first\"",
    );
}
