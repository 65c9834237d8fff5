//! Large values spliced from a server socket to a client socket in the
//! kernel: whole and in order in pipelines that mix small and large values
//! over several servers (multi-key gets split by server, misses, writes,
//! meta commands), an error and never a short value when the server dies
//! mid-value, and every byte for a client that reads late through a small
//! receive buffer, without holding up the other clients.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_kv::route::Distribution;
use weir_kv::{parse_nutcracker, Proxy};
use weir_lab::kv::testbed::{free_port, memcached, McClient, Proc};

/// `n` memcached servers behind one pool served by one worker, so that
/// every reply of a client comes through the same event loop.
fn servers(n: usize) -> (Vec<Proc>, Proxy, Arc<Distribution>) {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let mc = ports
        .iter()
        .map(|&p| memcached("127.0.0.1", p, false, 1).unwrap())
        .collect();
    let (proxy, dist) = proxy_for(&ports);
    (mc, proxy, dist)
}

fn proxy_for(ports: &[u16]) -> (Proxy, Arc<Distribution>) {
    let mut yml = String::from(
        "weir:\n  listen: 127.0.0.1:0\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 3000\n  servers:\n",
    );
    for p in ports {
        yml.push_str(&format!("   - 127.0.0.1:{p}:1\n"));
    }
    let mut cfg = parse_nutcracker("t.yml", &yml, None).unwrap();
    cfg.workers = 1;
    let dist = Arc::new(cfg.distribution());
    (Proxy::start(&cfg, dist.clone(), None).unwrap(), dist)
}

fn connect(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A value of `n` bytes, a pattern of its own (`seed`), so that a byte
/// out of place or from another value shows.
fn value(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .map(|b| b"abcdefghijklmnopqrstuvwxyz0123456789"[(b * 7 + seed * 13 + b / 4096) % 36])
        .collect()
}

fn value_block(key: &str, v: &[u8]) -> Vec<u8> {
    let mut out = format!("VALUE {key} 0 {}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn large_values_in_pipelines_across_servers_arrive_whole_and_in_order() {
    let (_mc, proxy, dist) = servers(3);
    let mut c = McClient::connect(proxy.local_addr()).unwrap();
    // small and large values, and sizes around the proxy's 64 KB reads
    let sizes = [5usize, 3_000, 11_264, 65_536, 100_000, 300_000, 40, 700_000];
    // 8 keys on each server
    let mut per_server = [0; 3];
    let keys: Vec<String> = (0..)
        .map(|k| format!("key{k}"))
        .filter(|k| {
            let s = dist.server_for_key(k.as_bytes());
            per_server[s] += 1;
            per_server[s] <= 8
        })
        .take(24)
        .collect();
    let values: Vec<Vec<u8>> = (0..keys.len())
        .map(|k| value(sizes[k % sizes.len()], k))
        .collect();
    for (k, v) in keys.iter().zip(&values) {
        assert_eq!(c.set(k, v).unwrap(), "STORED\r\n");
    }
    let mut s = connect(&proxy);
    let before = proxy.stats();
    for round in 0..12 {
        let mut req = Vec::new();
        let mut want = Vec::new();
        for step in 0..keys.len() {
            let k = (step * 5 + round * 7) % keys.len();
            match (step + round) % 6 {
                // a multi-key get, split over the servers and merged in key order
                0 => {
                    let more = [
                        (k + 1) % keys.len(),
                        (k + 2) % keys.len(),
                        (k + 3) % keys.len(),
                    ];
                    req.extend_from_slice(format!("get {}", keys[k]).as_bytes());
                    want.extend_from_slice(&value_block(&keys[k], &values[k]));
                    for &m in &more {
                        req.extend_from_slice(format!(" {}", keys[m]).as_bytes());
                        want.extend_from_slice(&value_block(&keys[m], &values[m]));
                    }
                    req.extend_from_slice(b"\r\n");
                    want.extend_from_slice(b"END\r\n");
                }
                // a miss, a write answered in its place, one that is not
                1 => {
                    req.extend_from_slice(format!("get absent{step}\r\n").as_bytes());
                    want.extend_from_slice(b"END\r\n");
                    req.extend_from_slice(format!("set scratch{step} 0 0 2\r\nab\r\n").as_bytes());
                    want.extend_from_slice(b"STORED\r\n");
                    req.extend_from_slice(
                        format!("set quiet{step} 0 0 1 noreply\r\nx\r\n").as_bytes(),
                    );
                }
                // meta commands in the same order
                2 => {
                    req.extend_from_slice(format!("mg {} s v\r\nmn\r\n", keys[k]).as_bytes());
                    want.extend_from_slice(
                        format!("VA {} s{}\r\n", values[k].len(), values[k].len()).as_bytes(),
                    );
                    want.extend_from_slice(&values[k]);
                    want.extend_from_slice(b"\r\nMN\r\n");
                }
                _ => {
                    req.extend_from_slice(format!("get {}\r\n", keys[k]).as_bytes());
                    want.extend_from_slice(&value_block(&keys[k], &values[k]));
                    want.extend_from_slice(b"END\r\n");
                }
            }
        }
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || w.write_all(&req));
        let mut got = vec![0; want.len()];
        s.read_exact(&mut got).unwrap();
        writer.join().unwrap().unwrap();
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "round {round}: the replies differ from byte {at} of {}: got {:?}, want {:?}",
                want.len(),
                String::from_utf8_lossy(&got[at.saturating_sub(40)..(at + 40).min(got.len())]),
                String::from_utf8_lossy(&want[at.saturating_sub(40)..(at + 40).min(want.len())]),
            );
        }
    }
    let after = proxy.stats();
    let spliced = after.spliced_values - before.spliced_values;
    assert!(spliced > 0, "no value went through a pipe");
    assert!(after.spliced_bytes > before.spliced_bytes);
    // nothing was left unread: a further request is answered at once
    s.write_all(b"mn\r\n").unwrap();
    let mut mn = [0u8; 4];
    s.read_exact(&mut mn).unwrap();
    assert_eq!(&mn, b"MN\r\n");
}

/// A server that answers the first request it reads with `reply` and then
/// closes its connection.
fn dying_server(reply: Vec<u8>) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if s.read(&mut b).unwrap_or(0) == 0 {
                return;
            }
            line.push(b[0]);
        }
        assert_eq!(line, b"get big\r\n");
        // in pieces, so that the proxy has read the header before the rest
        for piece in reply.chunks(32 * 1024) {
            if s.write_all(piece).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    (port, t)
}

#[test]
fn a_server_that_dies_mid_value_gives_an_error_never_a_short_value() {
    let big = value(400_000, 1);
    // dies inside the value; dies after the value, before its reply's end
    let mut inside = format!("VALUE big 0 {}\r\n", big.len()).into_bytes();
    inside.extend_from_slice(&big[..250_000]);
    let mut after = format!("VALUE big 0 {}\r\n", big.len()).into_bytes();
    after.extend_from_slice(&big);
    for (what, reply) in [("inside the value", inside), ("after the value", after)] {
        let (port, server) = dying_server(reply);
        let (proxy, _) = proxy_for(&[port]);
        let mut s = connect(&proxy);
        s.write_all(b"get big\r\n").unwrap();
        let want = b"SERVER_ERROR Connection closed by server\r\n";
        let mut got = vec![0; want.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{what}"
        );
        // and nothing else: the next answer is the next request's
        s.write_all(b"mn\r\n").unwrap();
        let mut mn = [0u8; 4];
        s.read_exact(&mut mn).unwrap();
        assert_eq!(&mn, b"MN\r\n", "{what}");
        server.join().unwrap();
        assert_eq!(proxy.stats().spliced_values, 0, "{what}");
    }
}

#[test]
fn a_slow_client_gets_every_byte_and_holds_up_no_one() {
    let (_mc, proxy, _) = servers(1);
    let mut c = McClient::connect(proxy.local_addr()).unwrap();
    let big = value(500_000, 2);
    assert_eq!(c.set("big", &big).unwrap(), "STORED\r\n");
    assert_eq!(c.set("small", b"tiny").unwrap(), "STORED\r\n");

    // a client with a small receive buffer asks for 8 MB and reads nothing yet
    let slow = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    slow.set_recv_buffer_size(4096).unwrap();
    slow.connect(&proxy.local_addr().into()).unwrap();
    let mut slow: TcpStream = slow.into();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = 16;
    let before = proxy.stats();
    slow.write_all("get big\r\n".repeat(n).as_bytes()).unwrap();

    // meanwhile another client is answered as usual, big values included
    let started = Instant::now();
    for i in 0..100 {
        assert_eq!(
            c.get("small").unwrap().as_deref(),
            Some(&b"tiny"[..]),
            "request {i}"
        );
        if i % 10 == 0 {
            assert!(c.get("big").unwrap() == Some(big.clone()), "request {i}");
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the other client waited {:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(300));

    // the slow client reads late, in small pieces, and gets every byte
    let mut want = Vec::new();
    for _ in 0..n {
        want.extend_from_slice(&value_block("big", &big));
        want.extend_from_slice(b"END\r\n");
    }
    let mut got = vec![0u8; want.len()];
    let mut have = 0;
    while have < got.len() {
        let end = (have + 16 * 1024).min(got.len());
        let r = slow.read(&mut got[have..end]).unwrap();
        assert!(r > 0, "the proxy closed the slow client after {have} bytes");
        have += r;
    }
    assert!(
        got == want,
        "the slow client's replies differ from the values"
    );
    let after = proxy.stats();
    assert!(
        after.spliced_values - before.spliced_values >= 2,
        "the values did not go through pipes"
    );
}
