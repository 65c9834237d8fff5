//! The proxy's socket I/O against a real memcached on loopback: a pipelined
//! batch is read once per readiness event (no read that finds nothing),
//! backpressure pauses and resumes a client without losing or reordering a
//! request, a client that closes right after its requests is closed, and
//! values larger than a read, or cut by reads, arrive whole and in order.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_kv::{parse_nutcracker, Proxy};
use weir_lab::kv::testbed::{free_port, memcached, McClient, Proc};

/// One memcached behind a one-server pool, so every key goes to it.
fn one_server() -> (Proc, Proxy) {
    let port = free_port();
    let mc = memcached("127.0.0.1", port, false, 1).unwrap();
    let yml = format!(
        "weir:\n  listen: 127.0.0.1:0\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  servers:\n   - 127.0.0.1:{port}:1\n"
    );
    let cfg = parse_nutcracker("t.yml", &yml, None).unwrap();
    let proxy = Proxy::start(&cfg, Arc::new(cfg.distribution()), None).unwrap();
    (mc, proxy)
}

fn connect(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

#[test]
fn a_pipelined_batch_costs_no_read_that_finds_nothing() {
    let (_mc, proxy) = one_server();
    let mut c = McClient::connect(proxy.local_addr()).unwrap();
    for k in 0..16 {
        assert_eq!(c.set(&format!("k{k}"), b"value").unwrap(), "STORED\r\n");
    }
    let before = proxy.stats();
    let mut s = connect(&proxy);
    let rounds = 50;
    for round in 0..rounds {
        let mut req = Vec::new();
        let mut want = Vec::new();
        for k in 0..16 {
            let key = format!("k{}", (k + round) % 16);
            req.extend_from_slice(format!("get {key}\r\n").as_bytes());
            want.extend_from_slice(format!("VALUE {key} 0 5\r\nvalue\r\nEND\r\n").as_bytes());
        }
        s.write_all(&req).unwrap();
        let mut got = vec![0; want.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, want, "round {round}");
    }
    let after = proxy.stats();
    let reads = after.socket_reads - before.socket_reads;
    let idle = after.idle_reads - before.idle_reads;
    // every read had data: a short read already drained the socket, and a
    // flush of replies does not read the client
    assert_eq!(idle, 0, "{idle} of {reads} reads found nothing");
    // at least one read of the client and one of the server per round
    assert!(reads >= 2 * rounds, "{reads} reads for {rounds} rounds");
    assert!(after.socket_writes - before.socket_writes >= 2 * rounds);
}

#[test]
fn values_larger_than_a_read_or_cut_by_reads_arrive_whole() {
    let (_mc, proxy) = one_server();
    let mut c = McClient::connect(proxy.local_addr()).unwrap();
    // sizes around and beyond the proxy's 64 KB reads, each value a pattern
    // of its own so that a byte out of place shows
    let sizes = [3usize, 11_264, 65_535, 65_536, 70_000, 200_000];
    let values: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (0..n)
                .map(|b| b"abcdefghijklmnopqrstuvwxyz"[(b * 7 + i) % 26])
                .collect()
        })
        .collect();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(c.set(&format!("big{i}"), v).unwrap(), "STORED\r\n");
    }
    let mut s = connect(&proxy);
    for round in 0..20 {
        let mut req = Vec::new();
        let mut want = Vec::new();
        for k in 0..values.len() * 2 {
            let i = (k * 5 + round) % values.len();
            req.extend_from_slice(format!("get big{i}\r\n").as_bytes());
            want.extend_from_slice(format!("VALUE big{i} 0 {}\r\n", values[i].len()).as_bytes());
            want.extend_from_slice(&values[i]);
            want.extend_from_slice(b"\r\nEND\r\n");
        }
        s.write_all(&req).unwrap();
        let mut got = vec![0; want.len()];
        s.read_exact(&mut got).unwrap();
        assert!(
            got == want,
            "round {round}: replies differ from the values set"
        );
    }
}

#[test]
fn a_client_held_back_by_backpressure_resumes_in_order() {
    let (_mc, proxy) = one_server();
    let mut c = McClient::connect(proxy.local_addr()).unwrap();
    assert_eq!(c.set("here", b"v").unwrap(), "STORED\r\n");
    // more requests in one go than a client may have outstanding (4096)
    let n = 12_000;
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        if i % 3 == 0 {
            req.extend_from_slice(b"get here\r\n");
            want.extend_from_slice(b"VALUE here 0 1\r\nv\r\nEND\r\n");
        } else {
            req.extend_from_slice(format!("get absent{i}\r\n").as_bytes());
            want.extend_from_slice(b"END\r\n");
        }
    }
    let mut s = connect(&proxy);
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&req));
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    writer.join().unwrap().unwrap();
    assert!(got == want, "replies lost or out of order");
}

#[test]
fn a_client_that_closes_right_after_its_requests_is_closed() {
    let (_mc, proxy) = one_server();
    let mut s = connect(&proxy);
    s.write_all(b"get a\r\nget b\r\n").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    // the proxy sees the close in the event that brought the requests, or
    // in the next one, and closes the connection either way
    let t0 = Instant::now();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("not closed after {:?}: {e}", t0.elapsed()),
        }
    }
    let t0 = Instant::now();
    while proxy.stats().client_connections > 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "still counted open");
        std::thread::sleep(Duration::from_millis(10));
    }
}
