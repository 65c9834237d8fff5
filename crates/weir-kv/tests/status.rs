//! `weir kv`'s metrics endpoint: `/status` answers every time, however the
//! client writes its request (the server reads the whole head and never
//! resets the connection), and two instances run side by side with their own
//! `--metrics`, or with none (`off`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use weir_kv::{http_get, load_config, start, KvArgs, KvStatus, Running, Status};
use weir_lab::kv::testbed::free_port;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    kv: KvArgs,
}

/// A nutcracker pool file in a private temp dir, removed on drop.
struct Pool {
    dir: PathBuf,
    yml: PathBuf,
}

impl Pool {
    fn new(tag: &str) -> Pool {
        let dir = std::env::temp_dir().join(format!("weir-kv-status-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let yml = dir.join("nc.yml");
        // No memcached is needed: the status does not touch the servers.
        let src = format!(
            "{tag}:\n  listen: 127.0.0.1:{}\n  servers:\n   - 127.0.0.1:{}:1\n",
            free_port(),
            free_port()
        );
        std::fs::write(&yml, src).unwrap();
        Pool { dir, yml }
    }

    /// `weir kv --nutcracker <file> <extra...>` as the CLI parses it.
    fn args(&self, extra: &[&str]) -> KvArgs {
        let yml = self.yml.to_str().unwrap();
        Cli::try_parse_from(["weir-kv", "--nutcracker", yml].iter().chain(extra))
            .unwrap()
            .kv
    }

    fn start(&self, extra: &[&str]) -> anyhow::Result<Running> {
        start(&load_config(&self.args(extra))?)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The status of the switch's only pool.
fn status(addr: SocketAddr) -> Status {
    let mut st: KvStatus = serde_json::from_str(&http_get(addr, "/status").unwrap()).unwrap();
    assert_eq!(st.pools.len(), 1, "{st:?}");
    st.pools.remove(0)
}

/// A GET written in pieces (request line, header, blank line), each its own
/// segment, as a client formatting straight into the socket sends it.
fn get_in_pieces(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    for piece in ["GET /status HTTP/1.0\r\n", "Host: weir\r\n", "\r\n"] {
        s.write_all(piece.as_bytes())?;
    }
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn status_answers_every_time() {
    let pool = Pool::new("again");
    let kv = pool.start(&["--metrics", "127.0.0.1:0"]).unwrap();
    let addr = kv.metrics_addr().expect("metrics on");
    for i in 0..200 {
        let st = status(addr);
        assert_eq!(st.listen, kv.proxy_addr().to_string(), "request {i}");
        let raw = get_in_pieces(addr).unwrap_or_else(|e| panic!("request {i}: {e}"));
        // An HTTP/1.0 request is answered in HTTP/1.0 (hyper's rule).
        assert!(raw.starts_with("HTTP/1.0 200 OK\r\n"), "request {i}: {raw}");
        let body = raw.split_once("\r\n\r\n").unwrap().1;
        serde_json::from_str::<KvStatus>(body).unwrap_or_else(|e| panic!("request {i}: {e}"));
    }
    kv.stop();
}

#[test]
fn two_instances_side_by_side_each_with_its_metrics() {
    let (p1, p2, p3) = (Pool::new("one"), Pool::new("two"), Pool::new("three"));
    let (m1, m2) = (free_port(), free_port());
    let a = p1
        .start(&["--metrics", &format!("127.0.0.1:{m1}")])
        .unwrap();
    let b = p2
        .start(&["--metrics", &format!("127.0.0.1:{m2}")])
        .unwrap();
    for (kv, pool, m) in [(&a, "one", m1), (&b, "two", m2)] {
        let addr = SocketAddr::from(([127, 0, 0, 1], m));
        assert_eq!(kv.metrics_addr(), Some(addr));
        let st = status(addr);
        assert_eq!(
            (st.pool.as_str(), st.listen),
            (pool, kv.proxy_addr().to_string())
        );
        assert!(http_get(addr, "/metrics")
            .unwrap()
            .contains("weir_kv_requests_total"));
    }
    // A taken address is refused with what to do.
    let e = p3
        .start(&["--metrics", &format!("127.0.0.1:{m1}")])
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("--metrics off"), "{e:#}");
    // Off, by name or as 0; the default stays 127.0.0.1:9122.
    for off in ["off", "0"] {
        let c = p3.start(&["--metrics", off]).unwrap();
        assert_eq!(c.metrics_addr(), None, "{off}");
        c.stop();
    }
    let default = load_config(&p3.args(&[])).unwrap()[0].metrics;
    assert_eq!(default, Some(SocketAddr::from(([127, 0, 0, 1], 9122))));
    assert!(Cli::try_parse_from(["weir-kv", "--metrics", "9122"]).is_err());
    a.stop();
    b.stop();
}

#[test]
fn a_server_that_refuses_is_down_with_its_error_in_every_output() {
    let pool = Pool::new("down");
    let kv = pool.start(&["--metrics", "127.0.0.1:0"]).unwrap();
    let addr = kv.metrics_addr().expect("metrics on");
    let before = status(addr);
    assert_eq!(
        before.servers[0].health.state,
        weir_kv::ServerState::Unknown
    );
    // Nothing listens on the server's port: the get fails.
    let mut c = TcpStream::connect(kv.proxy_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"get k\r\n").unwrap();
    let mut reply = [0u8; 128];
    let n = c.read(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]).into_owned();
    assert!(reply.starts_with("SERVER_ERROR"), "{reply}");
    let st = status(addr);
    let srv = &st.servers[0];
    assert_eq!(srv.health.state, weir_kv::ServerState::Down, "{srv:?}");
    assert!(srv.health.since_unix_ms.is_some(), "{srv:?}");
    assert_eq!(srv.health.failures, 1, "{srv:?}");
    let reason = srv.health.last_error.clone().unwrap();
    assert!(reply.contains(&reason), "{reason} vs {reply}");
    // Unnamed servers are named by their address.
    assert_eq!(srv.name, srv.address);
    let metrics = http_get(addr, "/metrics").unwrap();
    let line = format!(
        "weir_kv_server_state{{pool=\"down\",server=\"{0}\",address=\"{0}\",state=\"down\"}} 1",
        srv.address
    );
    assert!(
        metrics.lines().any(|l| l == line),
        "no `{line}` in\n{metrics}"
    );
    kv.stop();
}

/// Headless Chromium, one shot, as an operator would run it for a picture
/// of the dashboard: virtual time lets the page's first polls finish first.
fn chromium_one_shot(url: &str, what: &str) -> std::process::Output {
    let exe = weir_lab::browser::find().expect("chromium on PATH (make deps)");
    let profile = std::env::temp_dir().join(format!(
        "weir-kv-chromium-{}-{}",
        std::process::id(),
        what.trim_start_matches("--").split('=').next().unwrap()
    ));
    let o = std::process::Command::new(exe)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(what)
        .arg(url)
        .output()
        .expect("running chromium");
    let _ = std::fs::remove_dir_all(&profile);
    o
}

#[test]
fn a_one_shot_screenshot_of_the_dashboard_shows_data_not_the_loading_state() {
    let pool = Pool::new("shot");
    let kv = pool.start(&["--metrics", "127.0.0.1:0"]).unwrap();
    let url = format!("http://{}/", kv.metrics_addr().expect("metrics on"));
    // The DOM the screenshot is taken of: drawn from an answer, marked ready.
    let dom = chromium_one_shot(&url, "--dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("data-ready=\"true\""), "{dom}");
    assert!(!dom.contains("asking /api/v1/status"), "{dom}");
    assert!(dom.contains("data-server=\"127.0.0.1:"), "{dom}");
    let png = pool.dir.join("dashboard.png");
    let o = chromium_one_shot(&url, &format!("--screenshot={}", png.display()));
    let bytes = std::fs::read(&png)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    kv.stop();
}
