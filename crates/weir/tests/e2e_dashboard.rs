//! The live dashboard in a real browser: headless Chromium, driven over
//! the DevTools protocol (`weir_lab::browser`), opens the page inside
//! network namespaces the tests build and always remove.
//!
//! `weir serve` (a client, weir and 3 backends; a nat VIP with health
//! checks and a controller on passive telemetry), while new connections
//! flow through the VIP:
//! - the page polls at least once a second and draws a line per DIP in
//!   every per-DIP chart (share, new connections/s, capacity, load, weight);
//! - once the traffic stops, its tables show the numbers the API shows:
//!   each DIP's and the VIP's new connections, weights, health, the table
//!   version, the data plane's conn_new counter;
//! - a drain through the API shows up as the DIP's weight 0 and in the
//!   page's log of table versions;
//! - when weir stops, the page says so and keeps its last numbers.
//!
//! With the software tier, the page shows each worker the API shows, its
//! utilization over time and its socket counters.
//!
//! A QUIC VIP (aioquic backends and clients, lab/scripts/quic/): the page
//! shows its connection-ID layout and the routing counters the API shows,
//! for the VIP and each DIP with its server ID.
//!
//! `weir kv` (a client, the switch and 2 memcached servers, the UDP path
//! with its cache): the same page draws the pool from weir kv's own status,
//! with the per-server requests, the hit ratio and the hot keys the API
//! shows.
//!
//! The tests run one at a time: each starts a browser, and the software
//! tier's worker busy-polls a whole CPU of two.
//!
//! Each check reads values the JavaScript writes into the page; the HTML as
//! served holds none of them.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_http::client::{Call, Method};
use weir_lab::browser::Browser;
use weir_lab::client::http_once;
use weir_lab::kv::lab::{in_ns, KvLab, UdpMc, MC_PORT, PROXY_PORT, SWITCH_IP, VIP};
use weir_lab::kv::testbed::McClient;
use weir_lab::topology::Lab;

mod common;
use common::quic::{QuicBackends, QuicClient, QuicLoad};
use common::{call, command_in, serial, start_backends, start_daemon, Interrupted, TempDir};

const API: &str = "127.0.0.1:9190";
const KV_METRICS: &str = "127.0.0.1:9122";
const DIPS: [&str; 3] = ["10.77.1.2:8080", "10.77.2.2:8080", "10.77.3.2:8080"];

/// The nat VIP `web` over 3 DIPs; `extra` goes into `[dataplane]`, and
/// `controller` after it.
fn config(extra: &str, controller: &str) -> String {
    let mut s = format!(
        "[dataplane]\n\
         interfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\"]\n\
         conn_table_size = 65536\n{extra}\n\n\
         {controller}\n\
         [api]\nlisten = \"{API}\"\n\n\
         [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
         \x20 [vip.health]\n\x20 kind = \"tcp\"\n"
    );
    for d in DIPS {
        let (addr, port) = d.split_once(':').unwrap();
        s += &format!("\x20 [[vip.dip]]\n\x20 address = \"{addr}\"\n\x20 port = {port}\n");
    }
    s
}

fn status(ns: &str, addr: &str) -> Value {
    let r = call(
        ns,
        addr.parse().unwrap(),
        Method::GET,
        "/api/v1/status",
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json().unwrap()
}

/// The status of weir kv's only pool, from its `/api/v1/status`.
fn kv_pool(ns: &str, addr: &str) -> Value {
    let st = status(ns, addr);
    assert_eq!(st["pools"].as_array().map(Vec::len), Some(1), "{st}");
    st["pools"][0].clone()
}

/// Opens the dashboard at `http://{addr}/` inside `ns`.
fn open(ns: &str, addr: &str) -> Browser {
    Browser::open(Some(ns), &format!("http://{addr}/"), 1280, 1000)
        .expect("starting headless chromium (scripts/deps.sh installs it)")
}

/// What the page shows of the VIP `web`: per DIP its table row's values
/// (as the page wrote them, text) and, per chart, the DIPs it draws with
/// their points.
const READ_SERVE: &str = r#"(() => {
  const vip = document.querySelector('section[data-vip="web"]');
  if (!vip) return null;
  const field = (el, f) => el.querySelector(`[data-field="${f}"]`);
  const rows = {};
  for (const r of vip.querySelectorAll("tr[data-dip]")) {
    const o = {};
    for (const f of ["new_conns", "config_weight", "weight", "class", "healthy", "capacity", "load"]) {
      const c = field(r, f);
      o[f] = { text: c.textContent, value: c.dataset.value };
    }
    rows[r.dataset.dip] = o;
  }
  const charts = {};
  for (const f of vip.querySelectorAll("figure.chart")) {
    const lines = {};
    for (const p of f.querySelectorAll("svg [data-series]")) lines[p.dataset.series] = Number(p.dataset.points);
    const legend = [...f.querySelectorAll("li[data-series]")].map((l) => l.dataset.series);
    charts[f.dataset.chart] = { lines, legend };
  }
  const conn_new = document.querySelector('tr[data-counter="conn_new"] [data-field="value"]');
  return {
    kind: document.body.dataset.kind,
    state: document.body.dataset.state,
    polls: Number(document.body.dataset.polls),
    sampled_at: Number(document.body.dataset.sampledAt),
    vip_new_conns: vip.querySelector(".facts").textContent,
    table_version: Number(field(vip, "table_version").dataset.value),
    conn_new: conn_new ? conn_new.textContent : null,
    log: [...document.querySelectorAll('.changes li[data-vip="web"]')].map((l) => Number(l.dataset.version)),
    rows,
    charts,
  };
})()"#;

fn polls(b: &mut Browser) -> u64 {
    b.eval("Number(document.body.dataset.polls)")
        .unwrap()
        .as_u64()
        .unwrap()
}

/// Waits (bounded) until the page has drawn a sample taken after `at_ms`.
fn sampled_after(b: &mut Browser, at_ms: u64) {
    b.wait_for(
        &format!("Number(document.body.dataset.sampledAt) > {at_ms}"),
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
}

/// The VIP's DIPs in the API's answer, by id.
fn api_dips(st: &Value) -> BTreeMap<String, Value> {
    st["vips"][0]["dips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["id"].as_str().unwrap().to_string(), d.clone()))
        .collect()
}

/// `n` as the page writes a count (digits; "–" for none).
fn text(n: &Value) -> String {
    n.as_u64().map_or("–".into(), |n| n.to_string())
}

#[test]
fn the_dashboard_of_weir_serve_draws_the_live_numbers_of_the_api() {
    let _one = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = start_backends(&lab);
    let mut d = start_daemon(
        &lab,
        &config(
            "",
            "[controller]\npolicy = \"awfd\"\nm = 4\nupdate_interval_ms = 100\ntelemetry = \"passive\"\n",
        ),
    );

    // Both paths serve the page, as files with the page's policy.
    for path in ["/", "/dashboard"] {
        let r = call(&lab.lb, API.parse().unwrap(), Method::GET, path, None);
        assert_eq!(r.status, 200, "{path}");
        assert!(r.body.contains("/dashboard/app.js"), "{path}: {}", r.body);
        assert!(
            !r.body.contains("10.77."),
            "the page as served holds no data"
        );
    }

    // New connections through the VIP, one after another, for 5 s at most.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (stop, client) = (stop.clone(), lab.client.clone());
        std::thread::spawn(move || {
            let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
            let t0 = Instant::now();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(5) {
                http_once(&client, vip).map_err(|e| format!("connection {n}: {e:#}"))?;
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok::<u64, String>(n)
        })
    };
    let mut b = open(&lab.lb, API);
    b.wait_for(
        "document.body.dataset.kind === 'serve' && Number(document.body.dataset.polls) >= 1",
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("the page never drew weir serve's status: {e:#}"));

    // At least once a second, in real time.
    let (p0, t0) = (polls(&mut b), Instant::now());
    std::thread::sleep(Duration::from_millis(3500));
    let (p1, dt) = (polls(&mut b), t0.elapsed());
    assert!(
        p1 >= p0 + 3,
        "{} polls in {dt:?}: the page must poll at least once a second",
        p1 - p0
    );
    let live = b.eval(READ_SERVE).unwrap();
    assert_eq!(live["state"], "ok", "{live}");
    for chart in ["share", "new_conns", "capacity", "load", "weight"] {
        let c = &live["charts"][chart];
        for dip in DIPS {
            assert!(
                c["legend"].as_array().unwrap().iter().any(|s| s == dip),
                "chart {chart} has no legend entry for {dip}: {c}"
            );
            assert!(
                c["lines"][dip].as_u64().unwrap_or(0) >= 2,
                "chart {chart} draws no line for {dip} while traffic flows: {c}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sent = traffic
        .join()
        .expect("traffic thread")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(sent >= 50, "only {sent} connections in 5 s");

    // After the traffic: the page's numbers are the API's.
    let st = status(&lab.lb, API);
    sampled_after(&mut b, st["at_unix_ms"].as_u64().unwrap());
    let page = b.eval(READ_SERVE).unwrap();
    let st2 = status(&lab.lb, API);
    let web = &st["vips"][0];
    let dips = api_dips(&st);
    assert_eq!(
        dips.values()
            .map(|d| d["new_conns"].as_u64().unwrap())
            .sum::<u64>(),
        sent
    );
    for (id, dip) in &dips {
        let row = &page["rows"][id.as_str()];
        assert_eq!(
            row["new_conns"]["text"].as_str(),
            Some(text(&dip["new_conns"]).as_str()),
            "{id}: page {row}, API {dip}"
        );
        assert_eq!(
            row["config_weight"]["text"].as_str(),
            Some("1"),
            "{id}: {row}"
        );
        assert_eq!(row["healthy"]["value"], "true", "{id}: {row}");
        assert!(
            dip["capacity"].is_f64() && row["capacity"]["text"] != "–",
            "{id}: passive telemetry estimated it, and the page shows it: {row} {dip}"
        );
    }
    assert!(
        page["vip_new_conns"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{} new connections", web["new_conns"])),
        "{}",
        page["vip_new_conns"]
    );
    assert_eq!(
        page["conn_new"].as_str(),
        Some(text(&st["counters"]["conn_new"]).as_str())
    );
    // The controller may publish between the two reads of the API.
    let (v0, v1) = (
        web["table_version"].as_u64().unwrap(),
        st2["vips"][0]["table_version"].as_u64().unwrap(),
    );
    let shown = page["table_version"].as_u64().unwrap();
    assert!(
        v0 <= shown && shown <= v1,
        "page v{shown}, API v{v0}..v{v1}"
    );

    // A drain through the API: weight 0 in the page, and a new version in its log.
    let drained = DIPS[2];
    let r = call(
        &lab.lb,
        API.parse().unwrap(),
        Method::POST,
        &format!("/api/v1/vips/web/dips/{drained}/drain"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let after = r.json().unwrap()["vip"]["table_version"].as_u64().unwrap();
    b.wait_for(
        &format!(
            "(() => {{ const r = document.querySelector('tr[data-dip=\"{drained}\"]');
               const log = [...document.querySelectorAll('.changes li[data-vip=\"web\"]')];
               return r && r.querySelector('[data-field=\"config_weight\"]').textContent === '0'
                 && r.querySelector('[data-field=\"weight\"]').textContent === '0'
                 && log.some((l) => Number(l.dataset.version) >= {after}); }})()"
        ),
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| {
        panic!(
            "the drain did not show: {e:#}\n{}",
            b.eval(READ_SERVE).unwrap()
        )
    });

    // weir stops: the page says so and keeps what it showed.
    d.stop().unwrap();
    b.wait_for(
        "document.body.dataset.state === 'error'",
        Duration::from_secs(8),
    )
    .unwrap_or_else(|e| panic!("the page did not notice weir stopping: {e:#}"));
    let gone = b.eval(READ_SERVE).unwrap();
    assert_eq!(
        gone["rows"].as_object().unwrap().len(),
        DIPS.len(),
        "{gone}"
    );
    let said = b
        .eval("document.getElementById('state').textContent")
        .unwrap();
    assert!(said.as_str().unwrap().contains("showing"), "{said}");
}

const READ_WORKERS: &str = r#"(() => {
  const rows = {};
  for (const r of document.querySelectorAll("tr[data-worker]")) {
    const v = (f) => r.querySelector(`[data-field="${f}"]`).dataset.value;
    rows[r.dataset.worker] = { rx: v("rx"), tx: v("tx"), utilization: v("utilization"), busy: v("busy") };
  }
  const lines = {};
  for (const p of document.querySelectorAll('figure[data-chart="utilization"] svg [data-series]')) {
    lines[p.dataset.series] = Number(p.dataset.points);
  }
  return { rows, lines };
})()"#;

#[test]
fn the_dashboard_shows_the_software_tiers_workers() {
    let _one = serial();
    let lab = Lab::build(3).expect("building the lab");
    let _backends = start_backends(&lab);
    let _d = start_daemon(&lab, &config("tier = \"software\"\nworkers = [1]", ""));
    let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
    for i in 0..40 {
        http_once(&lab.client, vip).unwrap_or_else(|e| panic!("connection {i}: {e:#}"));
    }
    let mut b = open(&lab.lb, API);
    b.wait_for(
        "document.querySelector('tr[data-worker]') && Number(document.body.dataset.polls) >= 3",
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("the page shows no worker: {e:#}"));
    let before = status(&lab.lb, API);
    sampled_after(&mut b, before["at_unix_ms"].as_u64().unwrap());
    let page = b.eval(READ_WORKERS).unwrap();
    let after = status(&lab.lb, API);
    let workers = before["workers"].as_array().expect("the API shows workers");
    assert_eq!(
        page["rows"].as_object().unwrap().len(),
        workers.len(),
        "{page}"
    );
    let rx = |w: &Value| -> u64 {
        w["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["rx_packets"].as_u64().unwrap())
            .sum()
    };
    for (i, w) in workers.iter().enumerate() {
        let cpu = w["cpu"].as_u64().unwrap();
        let row = &page["rows"][cpu.to_string()];
        let shown: u64 = row["rx"].as_str().unwrap().parse().unwrap();
        let (lo, hi) = (rx(w), rx(&after["workers"][i]));
        assert!(
            lo > 0 && lo <= shown && shown <= hi,
            "cpu {cpu}: page rx {shown}, API {lo}..{hi}"
        );
        let u: f64 = row["utilization"].as_str().unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&u), "cpu {cpu}: utilization {u}");
        assert!(
            page["lines"][format!("cpu {cpu}")].as_u64().unwrap_or(0) >= 2,
            "no utilization line for cpu {cpu}: {page}"
        );
    }
}

const READ_QUIC: &str = r#"(() => {
  const t = document.querySelector('section[data-vip="quic"] table.quic');
  if (!t) return null;
  const rows = {};
  for (const r of t.querySelectorAll("tr[data-quic]")) {
    const o = {};
    for (const f of ["server_id", "cid_routed", "cid_fallback", "cid_unknown"]) {
      const c = r.querySelector(`[data-field="${f}"]`);
      if (c) o[f] = c.textContent;
    }
    rows[r.dataset.quic] = o;
  }
  return { title: t.parentElement.querySelector("h3").textContent, rows };
})()"#;

#[test]
fn the_dashboard_shows_a_quic_vips_routing_counters_per_vip_and_dip() {
    let _one = serial();
    let lab = Lab::build(2).expect("building the lab");
    let _backends = QuicBackends::start(&lab, &["0b01", "0b02"], 0, 4433);
    let mut config = format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\n\n[api]\nlisten = \"{API}\"\n\n\
         [[vip]]\nname = \"quic\"\naddress = \"10.77.100.1\"\nport = 4433\nprotocol = \"udp\"\n\
         mode = \"nat\"\nquic = {{ server_id_len = 2, config_id = 0 }}\n"
    );
    for b in 1..=2 {
        config += &format!("[[vip.dip]]\naddress = \"10.77.{b}.2\"\nserver_id = \"0b0{b}\"\n");
    }
    let _d = start_daemon(&lab, &config);
    // Connections that move to a new port: short-header packets routed by ID.
    let conns = QuicClient::run(
        &lab,
        "10.77.100.1:4433".parse().unwrap(),
        &QuicLoad {
            connections: 8,
            requests: 4,
            interval: Duration::from_millis(50),
            migrate_after: 2,
            timeout: Duration::from_secs(3),
        },
    );
    assert!(conns.iter().all(|c| c.error.is_none()), "{conns:?}");

    let mut b = open(&lab.lb, API);
    b.wait_for(
        "document.querySelector('section[data-vip=\"quic\"] table.quic') !== null",
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("the page shows no QUIC table: {e:#}"));
    let st = status(&lab.lb, API);
    sampled_after(&mut b, st["at_unix_ms"].as_u64().unwrap());
    let page = b.eval(READ_QUIC).unwrap();
    let vip = &st["vips"][0];
    assert_eq!(
        page["title"], "QUIC: server_id_len 2, config_id 0",
        "{page}"
    );
    assert!(
        vip["quic"]["cid_routed"].as_u64().unwrap() > 0,
        "no packet was routed by connection ID: {vip}"
    );
    let counters = ["cid_routed", "cid_fallback", "cid_unknown"];
    for k in counters {
        assert_eq!(
            page["rows"]["vip"][k].as_str(),
            Some(text(&vip["quic"][k]).as_str()),
            "VIP {k}: page {page}, API {}",
            vip["quic"]
        );
    }
    for (id, dip) in api_dips(&st) {
        let row = &page["rows"][id.as_str()];
        assert_eq!(row["server_id"], dip["quic"]["server_id"], "{id}: {row}");
        for k in counters {
            assert_eq!(
                row[k].as_str(),
                Some(text(&dip["quic"][k]).as_str()),
                "{id} {k}: page {row}, API {}",
                dip["quic"]
            );
        }
    }
}

const READ_KV: &str = r#"(() => {
  const pool = document.querySelector("section[data-pool]");
  if (!pool) return null;
  const servers = {};
  for (const r of pool.querySelectorAll("tr[data-server]")) {
    servers[r.dataset.server] = {
      state: r.dataset.state,
      address: r.querySelector("td.address").textContent,
      requests: r.querySelector('[data-field="requests"]').textContent,
      udp_requests: Number(r.querySelector('[data-field="udp_requests"]').dataset.value),
    };
  }
  const charts = {};
  for (const f of pool.querySelectorAll("figure.chart")) {
    charts[f.dataset.chart] = Object.fromEntries(
      [...f.querySelectorAll("svg [data-series]")].map((p) => [p.dataset.series, Number(p.dataset.points)]));
  }
  return {
    kind: document.body.dataset.kind,
    pool: pool.dataset.pool,
    hit_ratio: document.querySelector('.overview [data-field="hit_ratio"]').dataset.value,
    hit_ratio_text: document.querySelector('.overview [data-field="hit_ratio"] .value').textContent,
    hot_keys: [...document.querySelectorAll("ol.hot-keys li")].map((l) => l.textContent),
    writes: document.getElementById("writes").textContent,
    servers,
    charts,
  };
})()"#;

#[test]
fn the_dashboard_of_weir_kv_draws_the_pool_of_its_status() {
    let _one = serial();
    let lab = KvLab::new(2, 1).expect("building the memcached lab");
    let dir = TempDir::new("weir-e2e-dashboard-kv");
    let cfg = dir.path().join("kv.toml");
    // The first server gets a name: the page shows it, with the address beside it.
    let toml = lab
        .toml("l2", true)
        .replace("metrics = \"\"", &format!("metrics = \"{KV_METRICS}\""))
        .replacen(
            "[[pool.server]]\n",
            "[[pool.server]]\nname = \"cache-a\"\n",
            1,
        );
    assert!(toml.contains(KV_METRICS), "{toml}");
    std::fs::write(&cfg, toml).unwrap();
    let mut kv = command_in(&lab.switch, &["kv", "--config", cfg.to_str().unwrap()]);
    let _kv = Interrupted(
        kv.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let sw = lab.switch.clone();
    let first = loop {
        let sw = sw.clone();
        let up = in_ns(&sw, || {
            Ok(Call::get("/api/v1/status")
                .send(KV_METRICS.parse().unwrap())
                .ok())
        })
        .unwrap();
        match up {
            Some(r) if r.status == 200 && r.json().unwrap()["pools"][0]["udp"].is_object() => {
                break r
            }
            _ if Instant::now() > deadline => panic!("weir kv did not serve its status in 10 s"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let pool = first.json().unwrap()["pools"][0]["pool"]
        .as_str()
        .unwrap()
        .to_string();

    // TCP: 20 sets, then 40 gets (half of them misses); UDP: gets of one key
    // until the switch calls it hot (bounded).
    in_ns(&lab.client, move || {
        let mut tcp = McClient::connect(SocketAddr::new(IpAddr::V4(SWITCH_IP), PROXY_PORT))?;
        for i in 0..20 {
            assert_eq!(tcp.set(&format!("k{i}"), b"v")?, "STORED\r\n");
        }
        for i in 0..40 {
            tcp.get(&format!("k{i}"))?;
        }
        let mut udp = UdpMc::new(SocketAddr::new(IpAddr::V4(VIP), MC_PORT))?;
        assert_eq!(udp.set("hot", b"h")?, "STORED");
        Ok(())
    })
    .unwrap();
    let hot = Arc::new(AtomicBool::new(true));
    let udp_traffic = {
        let (hot, client) = (hot.clone(), lab.client.clone());
        std::thread::spawn(move || {
            in_ns(&client, move || {
                let mut udp = UdpMc::new(SocketAddr::new(IpAddr::V4(VIP), MC_PORT))?;
                let t0 = Instant::now();
                while hot.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                    udp.get("hot")?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !kv_pool(&lab.switch, KV_METRICS)["hot_keys"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k == "hot")
    {
        assert!(Instant::now() < deadline, "the key never became hot");
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut b = open(&lab.switch, KV_METRICS);
    b.wait_for(
        "document.body.dataset.kind === 'kv' && Number(document.body.dataset.polls) >= 3",
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("the page never drew weir kv's status: {e:#}"));
    let before = kv_pool(&lab.switch, KV_METRICS);
    // Wait for a poll after `before`: the browser's clock stamps kv samples.
    let p = polls(&mut b);
    b.wait_for(
        &format!("Number(document.body.dataset.polls) > {p}"),
        Duration::from_secs(5),
    )
    .unwrap();
    let page = b.eval(READ_KV).unwrap();
    let after = kv_pool(&lab.switch, KV_METRICS);
    hot.store(false, Ordering::Relaxed);
    udp_traffic.join().unwrap().unwrap();

    assert_eq!(page["kind"], "kv");
    assert_eq!(page["pool"], pool.as_str());
    let st = &before["stats"];
    // TCP traffic has stopped: its numbers are exact.
    let ratio = st["get_hits"].as_f64().unwrap() / st["get_keys"].as_f64().unwrap();
    assert_eq!(st["get_keys"], 40);
    assert_eq!(st["get_hits"], 20);
    assert_eq!(
        page["hit_ratio"].as_str().unwrap().parse::<f64>().unwrap(),
        ratio
    );
    assert_eq!(page["hit_ratio_text"], "50.0%");
    // weir kv has no write API: the footer points to its configuration file.
    let writes = page["writes"].as_str().unwrap();
    assert!(
        writes.contains("configuration file") && !writes.contains("weir dip"),
        "{writes}"
    );
    let servers = before["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0]["name"], "cache-a");
    for (i, server) in servers.iter().enumerate() {
        let name = server["name"].as_str().unwrap();
        let row = &page["servers"][name];
        // The proxy knows a server once it sent it something (UDP goes by XDP).
        let tcp = st["server_requests"][i].as_u64().unwrap();
        let state = if tcp > 0 { "up" } else { "unknown" };
        assert_eq!(row["state"], state, "{name}: {row}");
        assert_eq!(row["address"], server["address"], "{name}: {row}");
        assert_eq!(
            row["requests"].as_str(),
            Some(text(&st["server_requests"][i]).as_str()),
            "{name}: {row}"
        );
        // UDP gets go on while the page is read.
        let udp = row["udp_requests"].as_u64().unwrap();
        let (lo, hi) = (
            before["udp"]["server_requests"][i].as_u64().unwrap(),
            after["udp"]["server_requests"][i].as_u64().unwrap(),
        );
        assert!(lo <= udp && udp <= hi, "{name}: page {udp}, API {lo}..{hi}");
        assert!(
            page["charts"]["server_requests"][name]
                .as_u64()
                .unwrap_or(0)
                >= 2,
            "no line for {name}: {}",
            page["charts"]
        );
    }
    assert!(
        page["hot_keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "hot"),
        "{page}"
    );
    assert!(
        page["charts"]["hit_ratio"]["XDP cache (UDP)"]
            .as_u64()
            .unwrap_or(0)
            >= 2,
        "{}",
        page["charts"]
    );
}
