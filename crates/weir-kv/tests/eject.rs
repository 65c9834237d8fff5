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
