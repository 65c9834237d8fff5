//! `auto_eject_hosts` against real memcached servers on loopback: with one
//! server stopped, weir ejects it after `server_failure_limit` failures and
//! places every key where the real nutcracker binary places it (ketama and
//! modula, checked key by key on the servers themselves); weir's `failover`
//! mode moves only the ejected server's keys; an ejected server returns
//! after `server_retry_timeout`; status and /metrics show it all; the XDP
//! switch's UDP path follows an ejection (namespaces, veth pairs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_kv::{http_get, parse_nutcracker, start, KvConfig, KvStatus, Proxy, ServerState, Status};
use weir_lab::kv::testbed::{free_port, memcached, nutcracker, McClient, Proc};

const KEYS: usize = 300;

fn keys() -> Vec<String> {
    (0..KEYS)
        .map(|i| match i % 3 {
            0 => format!("user:{i}"),
            1 => format!("k{i}"),
            _ => format!("session-{}-{i}", i * 7919),
        })
        .collect()
}

/// Three memcached servers (and a fourth, the failover server, when asked
/// for); the pool's YAML names them in this order.
struct Servers {
    ports: Vec<u16>,
    procs: Vec<Option<Proc>>,
}

impl Servers {
    fn start() -> Servers {
        Servers::start_n(3)
    }

    fn start_n(n: usize) -> Servers {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let procs = ports
            .iter()
            .map(|&p| Some(memcached("127.0.0.1", p, false, 1).unwrap()))
            .collect();
        Servers { ports, procs }
    }

    fn stop(&mut self, i: usize) {
        self.procs[i] = None;
    }

    fn restart(&mut self, i: usize) {
        self.procs[i] = None;
        self.procs[i] = Some(memcached("127.0.0.1", self.ports[i], false, 1).unwrap());
    }

    fn direct(&self, i: usize) -> McClient {
        McClient::connect(format!("127.0.0.1:{}", self.ports[i]).parse().unwrap()).unwrap()
    }

    fn flush_live(&self) {
        for i in 0..self.ports.len() {
            if self.procs[i].is_some() {
                assert_eq!(self.direct(i).cmd("flush_all\r\n").unwrap(), "OK\r\n");
            }
        }
    }

    /// The server that holds each key (exactly one must).
    fn owners(&self, keys: &[String]) -> Vec<usize> {
        let n = self.ports.len();
        let mut direct: Vec<Option<McClient>> = (0..n)
            .map(|i| self.procs[i].as_ref().map(|_| self.direct(i)))
            .collect();
        keys.iter()
            .map(|k| {
                let on: Vec<usize> = (0..n)
                    .filter(|&s| {
                        direct[s]
                            .as_mut()
                            .is_some_and(|c| c.get(k).unwrap().is_some())
                    })
                    .collect();
                assert_eq!(on.len(), 1, "{k} is stored on {on:?}");
                on[0]
            })
            .collect()
    }

    fn yaml(&self, listen: SocketAddr, hash: &str, dist: &str, extra: &str) -> String {
        format!(
            "pool:\n  listen: {listen}\n  hash: {hash}\n  distribution: {dist}\n  timeout: 2000\n  auto_eject_hosts: true\n{extra}  servers:\n   - 127.0.0.1:{}:1\n   - 127.0.0.1:{}:2 beta\n   - 127.0.0.1:{}:1\n",
            self.ports[0], self.ports[1], self.ports[2]
        )
    }
}

/// Sets every key through `proxy` and returns how many answers were
/// `SERVER_ERROR` (a key is sent again until it is stored, at most 5 times).
fn set_all(proxy: SocketAddr, keys: &[String]) -> usize {
    let mut c = McClient::connect(proxy).unwrap();
    let mut errors = 0;
    for k in keys {
        let mut tries = 0;
        loop {
            let r = c.set(k, k.as_bytes()).unwrap();
            if r == "STORED\r\n" {
                break;
            }
            assert!(r.starts_with("SERVER_ERROR"), "{k}: {r}");
            errors += 1;
            tries += 1;
            assert!(tries < 5, "{k}: {r} {tries} times");
        }
    }
    errors
}

/// Waits (at most 5 s) until server `s` is ejected.
fn await_ejection(weir: &Proxy, s: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while weir.health()[s].state != ServerState::Ejected {
        assert!(Instant::now() < deadline, "server {s} never ejected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A key the full distribution gives to server `s`.
fn key_of(cfg: &KvConfig, s: usize) -> String {
    let d = cfg.distribution();
    (0..)
        .map(|i| format!("probe:{i}"))
        .find(|k| d.server_for_key(k.as_bytes()) == s)
        .unwrap()
}

fn start_weir(cfg: &KvConfig) -> Proxy {
    Proxy::start(cfg, Arc::new(cfg.distribution()), None).unwrap()
}

#[test]
fn ejected_server_keys_rehash_as_nutcracker_does_key_by_key() {
    let dir = std::env::temp_dir().join(format!("weir-kv-eject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = keys();
    let mut servers = Servers::start();
    servers.stop(1);
    for (hash, dist) in [("md5", "ketama"), ("fnv1a_64", "modula")] {
        let limit = "  server_failure_limit: 2\n  server_retry_timeout: 60000\n";
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let yml = servers.yaml(listen, hash, dist, limit);
        let conf = dir.join(format!("{dist}.yml"));
        std::fs::write(&conf, &yml).unwrap();
        let cfg = parse_nutcracker("nc.yml", &yml, None).unwrap();
        let full = cfg.distribution();
        // a key of the stopped server first, so that the ejection happens
        // on the same requests in both proxies
        let mut order: Vec<String> = vec![key_of(&cfg, 1)];
        order.extend(keys.iter().cloned());

        servers.flush_live();
        let nc = nutcracker(&conf, listen, free_port()).unwrap();
        let nc_errors = set_all(listen, &order);
        let by_nutcracker = servers.owners(&keys);
        drop(nc);

        servers.flush_live();
        let mut wcfg = cfg.clone();
        wcfg.listen = "127.0.0.1:0".parse().unwrap();
        let weir = start_weir(&wcfg);
        let weir_errors = set_all(weir.local_addr(), &order);
        let by_weir = servers.owners(&keys);
        let health = weir.health();
        weir.stop();

        assert_eq!(
            (nc_errors, weir_errors),
            (2, 2),
            "{dist}: SERVER_ERRORs before the ejection (server_failure_limit 2)"
        );
        let mut moved = 0;
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                by_weir[i], by_nutcracker[i],
                "{hash}/{dist}: {k} on server {} through weir, {} through nutcracker",
                by_weir[i], by_nutcracker[i]
            );
            moved += usize::from(full.server_for_key(k.as_bytes()) != by_weir[i]);
        }
        let of_stopped = keys
            .iter()
            .filter(|k| full.server_for_key(k.as_bytes()) == 1)
            .count();
        assert!(
            of_stopped > 10,
            "{dist}: only {of_stopped} keys on the stopped server"
        );
        assert!(
            moved >= of_stopped,
            "{dist}: {moved} moved, {of_stopped} must"
        );
        if dist == "ketama" {
            // nutcracker gives the live servers more points once one is out
            // (40 groups per server and live server), so keys of live
            // servers move too: what weir's failover mode avoids
            assert!(moved > of_stopped, "{dist}: no key of a live server moved");
        }
        assert_eq!(
            (health[1].state, health[1].ejections, health[0].ejections),
            (ServerState::Ejected, 1, 0),
            "{dist}: {health:?}"
        );
        assert!(health[1].retry_unix_ms.is_some(), "{health:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failover_mode_moves_only_the_ejected_servers_keys() {
    let keys = keys();
    let mut servers = Servers::start();
    for (hash, dist) in [("md5", "ketama"), ("fnv1a_64", "modula")] {
        let extra =
            "  eject_mode: failover\n  server_failure_limit: 1\n  server_retry_timeout: 60000\n";
        let cfg = parse_nutcracker(
            "weir.yml",
            &servers.yaml("127.0.0.1:0".parse().unwrap(), hash, dist, extra),
            None,
        )
        .unwrap();
        let full = cfg.distribution();
        servers.restart(1);
        servers.flush_live();
        let weir = start_weir(&cfg);
        // all up: every key on its owner
        assert_eq!(set_all(weir.local_addr(), &keys), 0);
        let before = servers.owners(&keys);
        // The server closes the proxy's connection as it stops: that is the
        // one failure (server_failure_limit 1) that ejects it, as in nutcracker.
        servers.stop(1);
        await_ejection(&weir, 1);
        servers.flush_live();
        assert_eq!(set_all(weir.local_addr(), &keys), 0, "{dist}");
        let after = servers.owners(&keys);
        let want = full.failover(&[true, false, true]);
        let mut moved = 0;
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(before[i], full.server_for_key(k.as_bytes()), "{dist}: {k}");
            if before[i] == 1 {
                moved += 1;
                assert_eq!(after[i], want.server_for_key(k.as_bytes()), "{dist}: {k}");
            } else {
                assert_eq!(after[i], before[i], "{dist}: {k} of a live server moved");
            }
        }
        assert!(
            moved > 10,
            "{dist}: only {moved} keys on the ejected server"
        );
        assert_eq!(weir.health()[1].state, ServerState::Ejected);
        weir.stop();
    }
}

#[test]
fn failover_mode_sends_the_ejected_servers_keys_to_the_failover_server() {
    let keys = keys();
    // servers 0..2 on the ring, server 3 the failover server
    let mut servers = Servers::start_n(4);
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let extra = format!(
        "  eject_mode: failover\n  failover_server: 127.0.0.1:{} spare\n  \
         server_failure_limit: 1\n  server_retry_timeout: 60000\n",
        servers.ports[3]
    );
    let mut cfg = parse_nutcracker(
        "weir.yml",
        &servers.yaml("127.0.0.1:0".parse().unwrap(), "md5", "ketama", &extra),
        None,
    )
    .unwrap();
    cfg.metrics = Some(metrics);
    let full = cfg.distribution();
    let running = start(std::slice::from_ref(&cfg)).unwrap();
    let proxy = running.proxy_addr();
    let status = || -> Status {
        let st: KvStatus = serde_json::from_str(&http_get(metrics, "/status").unwrap()).unwrap();
        st.pools[0].clone()
    };
    let await_ejected = |s: usize| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while status().servers[s].health.state != ServerState::Ejected {
            assert!(Instant::now() < deadline, "server {s} never ejected");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // all up: every key on its ring owner, none on the failover server
    assert_eq!(set_all(proxy, &keys), 0);
    let before = servers.owners(&keys);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(before[i], full.server_for_key(k.as_bytes()), "{k}");
    }
    let st = status();
    assert_eq!(
        (st.servers[3].name.as_str(), st.servers[3].role.as_str()),
        ("spare", "failover")
    );
    assert!(
        st.servers.iter().all(|s| s.serving_for.is_empty()),
        "{st:?}"
    );

    // server 1 stops: its keys go to the failover server, no other key moves
    servers.stop(1);
    await_ejected(1);
    servers.flush_live();
    assert_eq!(set_all(proxy, &keys), 0);
    let after = servers.owners(&keys);
    let mut moved = 0;
    for (i, k) in keys.iter().enumerate() {
        if before[i] == 1 {
            moved += 1;
            assert_eq!(
                after[i], 3,
                "{k} of the ejected server not on the failover server"
            );
        } else {
            assert_eq!(after[i], before[i], "{k} of a live server moved");
        }
    }
    assert!(moved > 10, "only {moved} keys on the ejected server");
    let st = status();
    assert_eq!(st.servers[3].serving_for, ["beta"], "{st:?}");
    assert!(
        st.servers[..3].iter().all(|s| s.serving_for.is_empty()),
        "{st:?}"
    );
    let text = http_get(metrics, "/metrics").unwrap();
    for line in [
        "weir_kv_server_serving_for{pool=\"pool\",server=\"spare\",ejected=\"beta\"} 1",
        "weir_kv_server_role{pool=\"pool\",server=\"spare\",role=\"failover\"} 1",
        "weir_kv_server_role{pool=\"pool\",server=\"beta\",role=\"ring\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }

    // the failover server stops too: the ejected keys go to the next live
    // point of the ring, and still no other key moves
    servers.stop(3);
    // its closed connection, or this request to it, is the failure that
    // ejects it
    let probe = key_of(&cfg, 1);
    let r = McClient::connect(proxy).unwrap().set(&probe, b"x").unwrap();
    assert!(r == "STORED\r\n" || r.starts_with("SERVER_ERROR"), "{r}");
    await_ejected(3);
    servers.flush_live();
    assert_eq!(set_all(proxy, &keys), 0);
    let last = servers.owners(&keys);
    let want = full.failover(&[true, false, true]);
    for (i, k) in keys.iter().enumerate() {
        if before[i] == 1 {
            assert_eq!(last[i], want.server_for_key(k.as_bytes()), "{k}");
        } else {
            assert_eq!(last[i], before[i], "{k} of a live server moved");
        }
    }
    let st = status();
    assert!(st.servers[3].serving_for.is_empty(), "{st:?}");
    assert!(
        st.servers[0].serving_for == ["beta"] || st.servers[2].serving_for == ["beta"],
        "{st:?}"
    );
    running.stop();
}

#[test]
fn an_ejected_server_returns_after_the_retry_timeout() {
    let keys = keys();
    let mut servers = Servers::start();
    let extra = "  server_failure_limit: 1\n  server_retry_timeout: 400\n";
    let cfg = parse_nutcracker(
        "weir.yml",
        &servers.yaml("127.0.0.1:0".parse().unwrap(), "md5", "ketama", extra),
        None,
    )
    .unwrap();
    let full = cfg.distribution();
    let weir = start_weir(&cfg);
    servers.stop(1);
    let probe = key_of(&cfg, 1);
    let mut c = McClient::connect(weir.local_addr()).unwrap();
    assert!(c.set(&probe, b"x").unwrap().starts_with("SERVER_ERROR"));
    let ejected_at = Instant::now();
    // ejected: the key is served by a live server
    assert_eq!(c.set(&probe, b"x").unwrap(), "STORED\r\n");
    assert_eq!(weir.health()[1].state, ServerState::Ejected);
    servers.restart(1);
    servers.flush_live();
    let deadline = ejected_at + Duration::from_secs(5);
    while weir.health()[1].state == ServerState::Ejected {
        assert!(Instant::now() < deadline, "server 1 never returned");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        ejected_at.elapsed() >= Duration::from_millis(400),
        "returned before server_retry_timeout"
    );
    assert_eq!(set_all(weir.local_addr(), &keys), 0);
    let owners = servers.owners(&keys);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(owners[i], full.server_for_key(k.as_bytes()), "{k}");
    }
    let h = &weir.health()[1];
    assert_eq!((h.state, h.ejections, h.returns), (ServerState::Up, 1, 1));
}

#[test]
fn status_and_metrics_show_ejections_and_returns() {
    let mut servers = Servers::start();
    let extra = "  eject_mode: failover\n  server_failure_limit: 1\n  server_retry_timeout: 300\n";
    let mut cfg = parse_nutcracker(
        "weir.yml",
        &servers.yaml("127.0.0.1:0".parse().unwrap(), "md5", "ketama", extra),
        None,
    )
    .unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    cfg.metrics = Some(metrics);
    let running = start(std::slice::from_ref(&cfg)).unwrap();
    let status = || -> Status {
        let st: KvStatus = serde_json::from_str(&http_get(metrics, "/status").unwrap()).unwrap();
        st.pools[0].clone()
    };
    assert_eq!(status().eject, "failover");
    servers.stop(1);
    let mut c = McClient::connect(running.proxy_addr()).unwrap();
    let probe = key_of(&cfg, 1);
    assert!(c.set(&probe, b"x").unwrap().starts_with("SERVER_ERROR"));
    let st = status();
    let beta = &st.servers[1];
    assert_eq!(beta.name, "beta");
    assert_eq!(
        (
            beta.health.state,
            beta.health.ejections,
            beta.health.returns
        ),
        (ServerState::Ejected, 1, 0),
        "{beta:?}"
    );
    assert!(beta.health.retry_unix_ms.is_some(), "{beta:?}");
    let text = http_get(metrics, "/metrics").unwrap();
    for line in [
        "weir_kv_server_state{pool=\"pool\",server=\"beta\",address=\"127.0.0.1:",
        "weir_kv_server_ejections_total{pool=\"pool\",server=\"beta\"} 1",
        "weir_kv_server_returns_total{pool=\"pool\",server=\"beta\"} 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    assert!(
        text.lines().any(
            |l| l.starts_with("weir_kv_server_state{pool=\"pool\",server=\"beta\"")
                && l.ends_with("state=\"ejected\"} 1")
        ),
        "{text}"
    );
    // the ejected server's key is served by the next live one meanwhile
    assert_eq!(c.set(&probe, b"x").unwrap(), "STORED\r\n");
    servers.restart(1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while status().servers[1].health.returns == 0 {
        assert!(Instant::now() < deadline, "beta never returned");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c.set(&probe, b"y").unwrap(), "STORED\r\n");
    assert_eq!(
        servers.direct(1).get(&probe).unwrap().as_deref(),
        Some(&b"y"[..])
    );
    let st = status();
    assert_eq!(
        (st.servers[1].health.state, st.servers[1].health.returns),
        (ServerState::Up, 1)
    );
    assert!(http_get(metrics, "/metrics")
        .unwrap()
        .contains("weir_kv_server_returns_total{pool=\"pool\",server=\"beta\"} 1"));
    running.stop();
}

#[test]
fn the_udp_path_follows_an_ejection() {
    use std::net::IpAddr;
    use weir_lab::kv::lab::{in_ns, server_ip, KvLab, UdpMc, MC_PORT, PROXY_PORT, SWITCH_IP, VIP};

    let lab = KvLab::new(3, 1).unwrap();
    let toml = lab.toml("l2", true).replace(
        "metrics = \"\"\n",
        "metrics = \"\"\ntimeout_ms = 300\nauto_eject_hosts = true\neject_mode = \"failover\"\n\
         server_failure_limit = 1\nserver_retry_timeout_ms = 60000\n",
    );
    let cfg = weir_kv::parse_toml("lab.toml", &toml).unwrap();
    let full = cfg.distribution();
    let c2 = cfg.clone();
    let running = in_ns(&lab.switch, move || start(&[c2])).unwrap();
    let probe = key_of(&cfg, 1);
    // server 1 leaves the network: the proxy's next request to it fails
    let down = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.servers[1],
            "ip",
            "link",
            "set",
            "eth0",
            "down",
        ])
        .status()
        .unwrap();
    assert!(down.success());
    let p2 = probe.clone();
    let first = in_ns(&lab.client, move || {
        let mut tcp = McClient::connect(SocketAddr::new(IpAddr::V4(SWITCH_IP), PROXY_PORT))?;
        tcp.set(&p2, b"x")
    })
    .unwrap();
    assert!(first.starts_with("SERVER_ERROR"), "{first}");
    let udp_status = running.udp_status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while udp_status.get().reroutes == 0 {
        assert!(Instant::now() < deadline, "the XDP table was not rewritten");
        std::thread::sleep(Duration::from_millis(20));
    }
    // every key set over UDP lands where the TCP proxy now sends it
    let keys = keys()[..120].to_vec();
    let want = full.failover(&[true, false, true]);
    let k2 = keys.clone();
    let owners: Vec<usize> = keys
        .iter()
        .map(|k| want.server_for_key(k.as_bytes()))
        .collect();
    let moved = keys
        .iter()
        .filter(|k| full.server_for_key(k.as_bytes()) == 1)
        .count();
    assert!(moved > 10, "only {moved} keys of server 1 in the sample");
    in_ns(&lab.client, move || {
        let mut udp = UdpMc::new(SocketAddr::new(IpAddr::V4(VIP), MC_PORT))?;
        for k in &k2 {
            assert_eq!(udp.set(k, k.as_bytes())?, "STORED", "{k} over UDP");
        }
        let mut direct: Vec<McClient> = [0, 2]
            .iter()
            .map(|&i| McClient::connect(SocketAddr::new(IpAddr::V4(server_ip(i)), MC_PORT)))
            .collect::<anyhow::Result<_>>()?;
        for (k, &o) in k2.iter().zip(&owners) {
            let d = if o == 0 { 0 } else { 1 };
            assert_eq!(
                direct[d].get(k)?,
                Some(k.clone().into_bytes()),
                "{k} on {o}"
            );
            assert_eq!(direct[1 - d].get(k)?, None, "{k} not only on {o}");
        }
        Ok(())
    })
    .unwrap();
    running.stop();
}

// ---- A server that dies under pipelined load ----------------------------
//
// Several clients pipeline sets and gets over keys of every server through
// a proxy with 2 workers; one server dies in the middle (SIGKILL, which
// resets its connections, or SIGTERM, after which its port stays closed).
// Every `SERVER_ERROR` is counted per client, in two parts. A client sends
// a batch of `DEPTH` requests only once every reply of the one before came
// back, and it is served by one worker, which has one connection to the
// server; so the client's first batch with errors is the one that was in
// flight on that connection when the proxy saw it fail. Those requests no
// proxy can save (the server may have executed them), and they are at most
// what the client had in flight. Errors in its later batches are for
// requests sent after the failure was seen: the target allows at most
// `server_failure_limit` of those per proxy worker. (A client with nothing
// in flight on the dead connection has its first failed probe counted as in
// flight: this undercounts by at most one batch per client.)

/// Client connections, requests each pipelines, and the proxy's workers.
const CLIENTS: usize = 4;
const DEPTH: usize = 16;
const WORKERS: usize = 2;
const FAILURE_LIMIT: u64 = 4;
/// Keys per client (disjoint, so each client knows its keys' last values).
const CLIENT_KEYS: usize = 60;
/// Bounds on each client's load: batches, and time.
const MAX_BATCHES: usize = 200_000;
const MAX_LOAD: Duration = Duration::from_secs(20);
/// Load before the death, and after the ejection was seen.
const BEFORE: Duration = Duration::from_millis(300);
const AFTER: Duration = Duration::from_millis(400);

/// How the server dies.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Death {
    /// SIGKILL: its connections are reset or closed at once.
    Kill,
    /// SIGTERM, and the test waits until its port refuses connections.
    Stop,
}

/// The load and the errors one client saw.
#[derive(Debug, Default, Clone)]
struct ClientCount {
    requests: u64,
    /// `SERVER_ERROR`s in the first batch that got any: in flight on the
    /// connection when the proxy saw it fail.
    in_flight_at_failure: u64,
    /// `SERVER_ERROR`s in later batches: sent after the failure was seen.
    after_failure_seen: u64,
    first_failed_batch: Option<usize>,
    /// `SERVER_ERROR`s for a key the full ring gives to a live server.
    on_live_keys: u64,
    /// `SERVER_ERROR`s for requests sent after the ejection was seen.
    after_ejection: u64,
    /// The client's connection closed (or a reply was not understood).
    closed: Option<String>,
    /// Each key's value as last stored.
    stored: std::collections::HashMap<String, String>,
}

impl ClientCount {
    fn errors(&self) -> u64 {
        self.in_flight_at_failure + self.after_failure_seen
    }
}

/// The whole run.
#[derive(Debug)]
struct KillCost {
    clients: Vec<ClientCount>,
    /// From the death to the ejection, as the test saw it.
    to_ejection: Duration,
}

impl KillCost {
    fn total(&self, f: impl Fn(&ClientCount) -> u64) -> u64 {
        self.clients.iter().map(f).sum()
    }

    fn summary(&self, who: &str) -> String {
        let per_client: Vec<String> = self
            .clients
            .iter()
            .map(|c| format!("{}+{}", c.in_flight_at_failure, c.after_failure_seen))
            .collect();
        format!(
            "{who}: {} requests, SERVER_ERROR {} = {} in flight when the failure was \
             seen + {} sent after it (per client {}), ejected {} ms after the death",
            self.total(|c| c.requests),
            self.total(ClientCount::errors),
            self.total(|c| c.in_flight_at_failure),
            self.total(|c| c.after_failure_seen),
            per_client.join(" "),
            self.to_ejection.as_millis()
        )
    }
}

/// Holds the tests that load the CPU to one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `CLIENT_KEYS` keys for each client; each client has keys of every server.
fn client_keys(full: &weir_kv::route::Distribution, servers: usize) -> Vec<Vec<String>> {
    (0..CLIENTS)
        .map(|c| {
            let keys: Vec<String> = (0..CLIENT_KEYS).map(|i| format!("load:{c}:{i}")).collect();
            for s in 0..servers {
                assert!(
                    keys.iter().any(|k| full.server_for_key(k.as_bytes()) == s),
                    "client {c} has no key of server {s}"
                );
            }
            keys
        })
        .collect()
}

/// One client's pipelined load until `stop` (or its bounds): batches of
/// `DEPTH` requests, sets and gets alternating, its keys in turn.
fn pipeline(
    proxy: SocketAddr,
    me: usize,
    keys: Vec<String>,
    of_killed: impl Fn(&str) -> bool,
    base: Instant,
    ejected_at_us: &std::sync::atomic::AtomicU64,
    stop: &std::sync::atomic::AtomicBool,
) -> ClientCount {
    use std::sync::atomic::Ordering;
    let mut n = ClientCount::default();
    let mut c = match McClient::connect(proxy) {
        Ok(c) => c,
        Err(e) => {
            n.closed = Some(format!("connect: {e:#}"));
            return n;
        }
    };
    let mut next = 0;
    for batch in 0..MAX_BATCHES {
        if stop.load(Ordering::Relaxed) || base.elapsed() > MAX_LOAD {
            break;
        }
        let sent_us = base.elapsed().as_micros() as u64;
        let mut out = Vec::new();
        let mut sent = Vec::with_capacity(DEPTH);
        for i in 0..DEPTH {
            let k = &keys[next % keys.len()];
            next += 1;
            if i % 2 == 0 {
                let v = format!("{me}-{batch}-{i}");
                out.extend_from_slice(format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes());
                sent.push((k, Some(v)));
            } else {
                out.extend_from_slice(format!("get {k}\r\n").as_bytes());
                sent.push((k, None));
            }
        }
        if let Err(e) = c.send(&out) {
            n.closed = Some(format!("send: {e:#}"));
            return n;
        }
        for (k, v) in sent {
            n.requests += 1;
            let reply = match &v {
                Some(_) => c
                    .line()
                    .map(|l| if l == "STORED\r\n" { Ok(()) } else { Err(l) }),
                None => c.values().map(|r| r.map(|_| ())),
            };
            let error = match reply {
                Ok(Ok(())) => {
                    if let Some(v) = v {
                        n.stored.insert(k.clone(), v);
                    }
                    continue;
                }
                Ok(Err(line)) => line,
                Err(e) => {
                    n.closed = Some(format!("{k}: {e:#}"));
                    return n;
                }
            };
            if !error.starts_with("SERVER_ERROR") {
                n.closed = Some(format!("{k}: unexpected reply {error:?}"));
                return n;
            }
            if *n.first_failed_batch.get_or_insert(batch) == batch {
                n.in_flight_at_failure += 1;
            } else {
                n.after_failure_seen += 1;
            }
            if !of_killed(k) {
                n.on_live_keys += 1;
            }
            if sent_us > ejected_at_us.load(Ordering::Acquire) {
                n.after_ejection += 1;
            }
            // the server may have stored it before it died: its value is unknown
            n.stored.remove(k);
        }
    }
    n
}

/// Runs the load against `proxy`, kills server `killed` of `servers` as
/// `death` says once the load runs, and returns what the clients saw.
/// `ejected` says whether the proxy has ejected the server.
fn kill_under_load(
    proxy: SocketAddr,
    servers: &mut Servers,
    killed: usize,
    death: Death,
    keys: &[Vec<String>],
    full: &weir_kv::route::Distribution,
    ejected: impl Fn() -> bool,
) -> KillCost {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let base = Instant::now();
    let ejected_at_us = AtomicU64::new(u64::MAX);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let clients: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(me, keys)| {
                let (ejected_at_us, stop) = (&ejected_at_us, &stop);
                let keys = keys.clone();
                scope.spawn(move || {
                    pipeline(
                        proxy,
                        me,
                        keys,
                        |k| full.server_for_key(k.as_bytes()) == killed,
                        base,
                        ejected_at_us,
                        stop,
                    )
                })
            })
            .collect();
        // whatever fails below, the clients stop
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(BEFORE);
        let pid = servers.procs[killed].as_ref().unwrap().pid().to_string();
        let signal = match death {
            Death::Kill => "-KILL",
            Death::Stop => "-TERM",
        };
        let died_at = Instant::now();
        let ok = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(ok.success(), "kill {signal} {pid}");
        if death == Death::Stop {
            let addr: SocketAddr = format!("127.0.0.1:{}", servers.ports[killed])
                .parse()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::net::TcpStream::connect(addr).is_ok() {
                assert!(Instant::now() < deadline, "memcached ignored SIGTERM");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        servers.stop(killed);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ejected() {
            assert!(Instant::now() < deadline, "server {killed} never ejected");
            std::thread::sleep(Duration::from_millis(2));
        }
        let to_ejection = died_at.elapsed();
        ejected_at_us.store(base.elapsed().as_micros() as u64, Ordering::Release);
        std::thread::sleep(AFTER);
        stop.store(true, Ordering::Relaxed);
        KillCost {
            clients: clients.into_iter().map(|c| c.join().unwrap()).collect(),
            to_ejection,
        }
    })
}

/// What must hold of any proxy that ejects: errors only on the killed
/// server's keys, none after the ejection, no client connection closed, and
/// in flight when the failure was seen no more than a batch.
fn assert_ejection_holds(cost: &KillCost, who: &str) {
    for (i, c) in cost.clients.iter().enumerate() {
        assert_eq!(c.closed, None, "{who}: client {i} lost its connection");
        assert!(c.requests > 0, "{who}: client {i} sent nothing");
        assert_eq!(c.on_live_keys, 0, "{who}: client {i}: errors on live keys");
        assert_eq!(
            c.after_ejection, 0,
            "{who}: client {i}: errors after the ejection"
        );
        assert!(c.in_flight_at_failure <= DEPTH as u64, "{who}: client {i}");
    }
}

/// Keys of live servers whose last stored value is not on the server the
/// full ring gives them (moved by the ejection).
fn moved_live_keys(
    servers: &Servers,
    cost: &KillCost,
    full: &weir_kv::route::Distribution,
    killed: usize,
) -> Vec<String> {
    let mut direct: Vec<Option<McClient>> = (0..servers.ports.len())
        .map(|i| servers.procs[i].as_ref().map(|_| servers.direct(i)))
        .collect();
    let mut moved = Vec::new();
    let mut checked = 0;
    for c in &cost.clients {
        for (k, v) in &c.stored {
            let s = full.server_for_key(k.as_bytes());
            if s == killed {
                continue;
            }
            checked += 1;
            let on = direct[s].as_mut().unwrap().get(k).unwrap();
            if on.as_deref() != Some(v.as_bytes()) {
                moved.push(k.clone());
            }
        }
    }
    assert!(checked > 20, "only {checked} keys of live servers checked");
    moved
}

/// weir with 2 workers and `eject_mode` over 3 memcached servers; server 1
/// dies under load each way in turn.
fn weir_kill_runs(mode: &str) -> Vec<(Death, KillCost, Vec<String>)> {
    let mut servers = Servers::start();
    let mut runs = Vec::new();
    for death in [Death::Kill, Death::Stop] {
        servers.restart(1);
        servers.flush_live();
        let extra = format!(
            "  eject_mode: {mode}\n  server_failure_limit: {FAILURE_LIMIT}\n  \
             server_retry_timeout: 60000\n"
        );
        let mut cfg = parse_nutcracker(
            "weir.yml",
            &servers.yaml("127.0.0.1:0".parse().unwrap(), "md5", "ketama", &extra),
            None,
        )
        .unwrap();
        cfg.workers = WORKERS;
        let full = cfg.distribution();
        let keys = client_keys(&full, 3);
        let weir = start_weir(&cfg);
        let cost = kill_under_load(
            weir.local_addr(),
            &mut servers,
            1,
            death,
            &keys,
            &full,
            || weir.health()[1].state == ServerState::Ejected,
        );
        let who = format!("weir {mode} {death:?}");
        println!("{}", cost.summary(&who));
        assert_ejection_holds(&cost, &who);
        let stats = weir.stats();
        assert_eq!(
            stats.client_connections_total, CLIENTS as u64,
            "{who}: client connections the proxy accepted (a closed one reconnects)"
        );
        assert_eq!(
            stats.server_errors,
            cost.total(ClientCount::errors),
            "{who}: the proxy's SERVER_ERROR count"
        );
        let h = &weir.health()[1];
        println!(
            "{who}: {} failures of the killed server counted",
            h.failures
        );
        assert_eq!((h.state, h.ejections), (ServerState::Ejected, 1), "{who}");
        assert!(
            h.failures >= FAILURE_LIMIT,
            "{who}: ejected after {} failures",
            h.failures
        );
        // the target: at most server_failure_limit errors per worker for
        // requests sent after the failure was seen
        assert!(
            cost.total(|c| c.after_failure_seen) <= FAILURE_LIMIT * WORKERS as u64,
            "{who}: {} errors for requests sent after the failure was seen, at most \
             {FAILURE_LIMIT} per worker x {WORKERS} workers",
            cost.total(|c| c.after_failure_seen)
        );
        let moved = moved_live_keys(&servers, &cost, &full, 1);
        weir.stop();
        runs.push((death, cost, moved));
    }
    runs
}

#[test]
fn a_server_killed_under_pipelined_load_costs_at_most_the_failure_limit_per_worker() {
    let _serial = serial();
    for (death, cost, moved) in weir_kill_runs("rehash") {
        // nutcracker's rehash moves a few keys of live servers (ketama)
        println!(
            "weir rehash {death:?}: {} keys of live servers moved",
            moved.len()
        );
        assert!(cost.total(|c| c.requests) > 0);
    }
}

#[test]
fn failover_mode_under_pipelined_load_moves_no_key_of_a_live_server() {
    let _serial = serial();
    for (death, _, moved) in weir_kill_runs("failover") {
        assert_eq!(
            moved,
            Vec::<String>::new(),
            "failover {death:?}: keys of live servers moved"
        );
    }
}

/// Whether the nutcracker at `stats` has ejected a server of pool `pool`
/// (its stats JSON gives `server_ejected_at` per server).
fn nutcracker_ejected_any(stats: SocketAddr) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(stats) else {
        return false;
    };
    let mut text = String::new();
    if s.read_to_string(&mut text).is_err() {
        return false;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    v["pool"].as_object().is_some_and(|pool| {
        pool.values()
            .any(|srv| srv["server_ejected_at"].as_u64().is_some_and(|t| t > 0))
    })
}

#[test]
fn nutcracker_under_the_same_load_and_death_as_the_reference() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("weir-kv-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut servers = Servers::start();
    for death in [Death::Kill, Death::Stop] {
        servers.restart(1);
        servers.flush_live();
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let extra =
            format!("  server_failure_limit: {FAILURE_LIMIT}\n  server_retry_timeout: 60000\n");
        let yml = servers.yaml(listen, "md5", "ketama", &extra);
        let conf = dir.join("kill.yml");
        std::fs::write(&conf, &yml).unwrap();
        let full = parse_nutcracker("nc.yml", &yml, None)
            .unwrap()
            .distribution();
        let keys = client_keys(&full, 3);
        let stats: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let nc = nutcracker(&conf, listen, stats.port()).unwrap();
        let cost = kill_under_load(listen, &mut servers, 1, death, &keys, &full, || {
            nutcracker_ejected_any(stats)
        });
        drop(nc);
        let who = format!("nutcracker {death:?}");
        println!("{}", cost.summary(&who));
        assert_ejection_holds(&cost, &who);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
