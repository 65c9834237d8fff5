//! The meta protocol (`mg ms md ma mn me`) through weir's TCP proxy, against
//! real memcached servers on loopback: every command and flag family
//! answers as one memcached answers the same requests, quiet mode and
//! opaques keep request order in pipelines that span servers and mix in
//! classic commands, base64 keys land on the server of their decoded bytes,
//! meta writes pass through the cache invalidation, and malformed requests
//! get memcached's errors without losing the requests around them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_kv::{parse_nutcracker, Invalidated, Invalidation, KvConfig, Proxy, Recorder};
use weir_lab::kv::testbed::{free_port, memcached, Proc};

struct Lab {
    servers: Vec<Option<Proc>>,
    ports: Vec<u16>,
    /// A memcached of its own that gets the same requests as the proxy.
    _reference: Proc,
    reference_port: u16,
    cfg: KvConfig,
    proxy: Proxy,
    rec: Arc<Recorder>,
}

/// `n` memcached servers behind weir (md5, modula: the owner of a key does
/// not depend on the servers' ports), and a reference memcached.
fn lab(n: usize) -> Lab {
    let (servers, ports): (Vec<Option<Proc>>, Vec<u16>) = (0..n)
        .map(|_| {
            let (p, port) = start_memcached();
            (Some(p), port)
        })
        .unzip();
    let (reference, reference_port) = start_memcached();
    let list: String = ports
        .iter()
        .map(|p| format!("   - 127.0.0.1:{p}:1\n"))
        .collect();
    let yml = format!(
        "meta:\n  listen: 127.0.0.1:0\n  hash: md5\n  distribution: modula\n  timeout: 2000\n  servers:\n{list}"
    );
    let cfg = parse_nutcracker("t.yml", &yml, None).unwrap();
    let rec = Arc::new(Recorder::default());
    let proxy = Proxy::start(
        &cfg,
        Arc::new(cfg.distribution()),
        Some(Invalidation::new(rec.clone())),
    )
    .unwrap();
    Lab {
        servers,
        ports,
        _reference: reference,
        reference_port,
        cfg,
        proxy,
        rec,
    }
}

/// A memcached on a free port; tests running side by side can pick the
/// same free port, so a start that fails is tried again on another.
fn start_memcached() -> (Proc, u16) {
    let mut last = None;
    for _ in 0..5 {
        let port = free_port();
        match memcached("127.0.0.1", port, false, 1) {
            Ok(p) => return (p, port),
            Err(e) => last = Some(e),
        }
    }
    panic!("memcached did not start: {:#}", last.unwrap())
}

impl Lab {
    fn weir(&self) -> TcpStream {
        connect(self.proxy.local_addr())
    }
    fn reference(&self) -> TcpStream {
        connect(
            format!("127.0.0.1:{}", self.reference_port)
                .parse()
                .unwrap(),
        )
    }
    fn direct(&self, i: usize) -> TcpStream {
        connect(format!("127.0.0.1:{}", self.ports[i]).parse().unwrap())
    }
    fn owner(&self, key: &[u8]) -> usize {
        self.cfg.distribution().server_for_key(key)
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Send `script`, which ends with `mn`, and read everything up to the `MN`
/// of its last `mn` (values in these tests never hold `MN\r\n`).
fn exchange(s: &mut TcpStream, script: &[u8]) -> String {
    let noops = script.windows(4).filter(|w| w == b"mn\r\n").count();
    assert!(script.ends_with(b"mn\r\n"));
    s.write_all(script).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let t0 = Instant::now();
    while out.windows(4).filter(|w| w == b"MN\r\n").count() < noops {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no complete answer in 10 s; so far: {}",
            String::from_utf8_lossy(&out)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("closed; so far: {}", String::from_utf8_lossy(&out)),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("{e}"),
        }
    }
    String::from_utf8(out).unwrap()
}

/// memcached's base64 (the `b` flag's keys).
fn b64(raw: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for ch in raw.chunks(3) {
        let b = [ch[0], *ch.get(1).unwrap_or(&0), *ch.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= ch.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every command and flag family, classic commands between them, in one
/// pipeline: (request, what memcached 1.6 answers).
const FAMILIES: &[(&str, &str)] = &[
    ("ms m:a 2 T0 F5\r\nhi\r\n", "HD\r\n"),
    ("ms m:b 3 q\r\nabc\r\n", ""),
    ("mg m:a v f t\r\n", "VA 2 f5 t-1\r\nhi\r\n"),
    ("mg m:a s v Oop1 k\r\n", "VA 2 s2 Oop1 km:a\r\nhi\r\n"),
    ("mg m:missing v\r\n", "EN\r\n"),
    ("mg m:missing v q Oq1\r\n", ""),
    ("mg m:b v q Oq2 k\r\n", "VA 3 Oq2 km:b\r\nabc\r\n"),
    ("mg m:a\r\n", "HD\r\n"),
    ("mn\r\n", "MN\r\n"),
    ("ms m:a 1 ME\r\nx\r\n", "NS\r\n"),
    ("ms m:c 1 ME q\r\nx\r\n", ""),
    ("ms m:a 1 MA\r\nz\r\n", "HD\r\n"),
    ("ms m:a 1 MP\r\ny\r\n", "HD\r\n"),
    ("ms m:none 1 MR\r\ny\r\n", "NS\r\n"),
    ("mg m:a v h\r\n", "VA 4 h0\r\nyhiz\r\n"),
    ("md m:c q\r\n", ""),
    ("md m:c\r\n", "NF\r\n"),
    ("ma m:n\r\n", "NF\r\n"),
    ("ma m:n N0 J10 v\r\n", "VA 2\r\n10\r\n"),
    ("ma m:n D5 v\r\n", "VA 2\r\n15\r\n"),
    ("ma m:n MD D3 v q\r\n", ""),
    ("ma m:n v\r\n", "VA 2\r\n13\r\n"),
    (
        "ma m:a\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    ),
    ("md m:a I T30\r\n", "HD\r\n"),
    ("mg m:a v\r\n", "VA 4 X W\r\nyhiz\r\n"),
    ("mg m:a v\r\n", "VA 4 Z X\r\nyhiz\r\n"),
    ("mg m:new N30 v\r\n", "VA 0 W\r\n\r\n"),
    ("mg m:new N30 v\r\n", "VA 0 Z\r\n\r\n"),
    ("get m:b\r\n", "VALUE m:b 0 3\r\nabc\r\nEND\r\n"),
    ("set m:d 0 0 1\r\nq\r\n", "STORED\r\n"),
    ("mg m:d v\r\n", "VA 1\r\nq\r\n"),
    ("ms Zm9vYmFy 3 b\r\nbin\r\n", "HD\r\n"),
    ("mg Zm9vYmFy b v k\r\n", "VA 3 kZm9vYmFy b\r\nbin\r\n"),
    ("get foobar\r\n", "VALUE foobar 0 3\r\nbin\r\nEND\r\n"),
    ("mn\r\n", "MN\r\n"),
];

/// Malformed meta requests, each followed by a good one that must still be
/// answered: (request, memcached 1.6's answer).
const MALFORMED: &[(&str, &str)] = &[
    ("mg m:a v v\r\n", "CLIENT_ERROR duplicate flag\r\n"),
    ("mg m:a !\r\n", "CLIENT_ERROR invalid flag\r\n"),
    (
        "ms m:a 2 MZ\r\nab\r\n",
        "CLIENT_ERROR invalid mode for ms M token\r\n",
    ),
    ("ms m:a\r\n", "CLIENT_ERROR bad command line format\r\n"),
    ("ms m:a x\r\n", "CLIENT_ERROR bad command line format\r\n"),
    // the data length is read, so 4 bytes go and the CRLF is a command
    (
        "ms m:a 2\r\nabcd\r\n",
        "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    ),
    ("mg Zm9 b v\r\n", "CLIENT_ERROR error decoding key\r\n"),
    (
        "ms Zm9 2 b\r\nab\r\n",
        "CLIENT_ERROR error decoding key\r\n",
    ),
    (
        "ma m:n D-1\r\n",
        "CLIENT_ERROR invalid or duplicate flag\r\n",
    ),
    (
        "md m:a Cabc\r\n",
        "CLIENT_ERROR invalid or duplicate flag\r\n",
    ),
    ("mz\r\n", "ERROR\r\n"),
    // a bare LF ends a line, as in memcached
    (" \n", "ERROR\r\n"),
    ("mg m:a v k\n", "VA 2 km:a\r\nok\r\n"),
    ("mg\r\n", "ERROR\r\n"),
    (
        "mg m:a Oooooooooooooooooooooooooooooooooo\r\n",
        "CLIENT_ERROR opaque token too long\r\n",
    ),
    // errors are never quiet
    ("mg m:a v q q\r\n", "CLIENT_ERROR duplicate flag\r\n"),
];

fn script_of(cases: &[(&str, &str)]) -> (Vec<u8>, String) {
    let mut req = Vec::new();
    let mut want = String::new();
    for (r, w) in cases {
        req.extend_from_slice(r.as_bytes());
        want.push_str(w);
    }
    (req, want)
}

#[test]
fn every_meta_command_and_flag_answers_as_memcached_does() {
    let l = lab(3);
    let (script, want) = script_of(FAMILIES);
    // the pipeline spans every server
    let mut owners: Vec<usize> = ["m:a", "m:b", "m:c", "m:n", "m:new", "m:d", "foobar"]
        .iter()
        .map(|k| l.owner(k.as_bytes()))
        .collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners, vec![0, 1, 2]);
    let reference = exchange(&mut l.reference(), &script);
    let weir = exchange(&mut l.weir(), &script);
    assert_eq!(weir, reference);
    assert_eq!(weir, want);
    // each key sits on its server only
    let mut direct: Vec<TcpStream> = (0..3).map(|i| l.direct(i)).collect();
    for key in ["m:a", "m:b", "m:n", "m:d"] {
        for (i, d) in direct.iter_mut().enumerate() {
            let got = exchange(d, format!("mg {key} s\r\nmn\r\n").as_bytes());
            let here = l.owner(key.as_bytes()) == i;
            assert_eq!(got.starts_with("HD"), here, "{key} on {i}: {got:?}");
        }
    }
    let st = l.proxy.stats();
    assert!(st.get_hits > 0 && st.get_keys > st.get_hits, "{st:?}");
}

#[test]
fn me_and_cas_round_trips_reach_the_key_s_server() {
    let l = lab(3);
    let mut w = l.weir();
    let got = exchange(&mut w, b"ms m:x 3 c\r\none\r\nmn\r\n");
    let cas: u64 = got
        .strip_prefix("HD c")
        .and_then(|r| r.split("\r\n").next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{got:?}"));
    // the cas of the key's own server: a wrong one is refused
    let script = format!(
        "ms m:x 3 C{}\r\ntwo\r\nms m:x 5 C{cas}\r\nthree\r\nmg m:x v\r\nmd m:x C1\r\nmn\r\n",
        cas + 1000
    );
    assert_eq!(
        exchange(&mut w, script.as_bytes()),
        "EX\r\nHD\r\nVA 5\r\nthree\r\nEX\r\nMN\r\n"
    );
    // me reports the item the key's server holds, also for a base64 key
    let got = exchange(&mut w, b"me m:x\r\nme m:nothing\r\nmn\r\n");
    assert!(got.starts_with("ME m:x exp=-1 la="), "{got:?}");
    assert!(got.ends_with("\r\nEN\r\nMN\r\n"), "{got:?}");
    let raw = b"bin\x00key\xff";
    let key = b64(raw);
    let got = exchange(
        &mut w,
        format!("ms {key} 1 b\r\nv\r\nme {key} b\r\nmn\r\n").as_bytes(),
    );
    assert!(
        got.starts_with(&format!("HD\r\nME {key} exp=-1")),
        "{got:?}"
    );
}

#[test]
fn quiet_mode_and_opaques_keep_request_order_across_two_servers() {
    let l = lab(2);
    let keys: Vec<String> = (0..60).map(|i| format!("q:{i}")).collect();
    let on: Vec<usize> = keys.iter().map(|k| l.owner(k.as_bytes())).collect();
    assert!(on.contains(&0) && on.contains(&1), "{on:?}");
    let mut w = l.weir();
    // quiet stores of every other key: nothing comes back but the MN
    let mut script = Vec::new();
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        // values of server 0's keys are large, so its replies come later
        let v = if on[i] == 0 {
            format!("{i}:").repeat(4000)
        } else {
            format!("{i}")
        };
        script.extend_from_slice(format!("ms {k} {} q T0\r\n{v}\r\n", v.len()).as_bytes());
    }
    script.extend_from_slice(b"mn\r\n");
    assert_eq!(exchange(&mut w, &script), "MN\r\n");
    // quiet gets with opaques, classic gets and noops between them: the
    // hits only, each with its opaque, in the order asked
    let mut script = Vec::new();
    let mut want = String::new();
    for (i, k) in keys.iter().enumerate() {
        script.extend_from_slice(format!("mg {k} v q O{i} k\r\n").as_bytes());
        if i % 2 == 0 {
            let v = if on[i] == 0 {
                format!("{i}:").repeat(4000)
            } else {
                format!("{i}")
            };
            want.push_str(&format!("VA {} O{i} k{k}\r\n{v}\r\n", v.len()));
        }
        if i % 7 == 3 {
            script.extend_from_slice(format!("get {k} q:0\r\n").as_bytes());
            if i % 2 == 0 {
                let v = if on[i] == 0 {
                    format!("{i}:").repeat(4000)
                } else {
                    format!("{i}")
                };
                want.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
            }
            let v0 = "0:".repeat(4000);
            let v0 = if on[0] == 0 { v0 } else { "0".into() };
            want.push_str(&format!("VALUE q:0 0 {}\r\n{v0}\r\nEND\r\n", v0.len()));
        }
        if i % 13 == 12 {
            script.extend_from_slice(b"mn\r\n");
            want.push_str("MN\r\n");
        }
    }
    script.extend_from_slice(b"mn\r\n");
    want.push_str("MN\r\n");
    assert_eq!(exchange(&mut w, &script), want);
    // a quiet delete of every key, then nothing is left
    let mut script = Vec::new();
    for k in &keys {
        script.extend_from_slice(format!("md {k} q\r\n").as_bytes());
    }
    for (i, k) in keys.iter().enumerate() {
        script.extend_from_slice(format!("mg {k} v O{i}\r\n").as_bytes());
    }
    script.extend_from_slice(b"mn\r\n");
    let want: String = (0..keys.len())
        .map(|i| {
            // memcached 1.6 leaves out a quiet delete's HD but not its NF
            if i % 2 == 0 {
                String::new()
            } else {
                "NF\r\n".to_string()
            }
        })
        .chain((0..keys.len()).map(|i| format!("EN O{i}\r\n")))
        .collect::<String>()
        + "MN\r\n";
    let reference_mn = exchange(&mut l.reference(), b"md q:absent q\r\nmn\r\n");
    assert_eq!(reference_mn, "NF\r\nMN\r\n", "the installed memcached");
    assert_eq!(exchange(&mut w, &script), want);
}

#[test]
fn base64_keys_land_on_the_server_of_their_decoded_bytes() {
    let l = lab(3);
    let mut w = l.weir();
    let mut direct: Vec<TcpStream> = (0..3).map(|i| l.direct(i)).collect();
    let mut seen = [0; 3];
    for i in 0u8..40 {
        // binary keys: spaces, control bytes and bytes >= 0x80 that no
        // classic command could carry
        let raw = [b'k', i, b' ', 0x80 | i, b'\n', i.wrapping_mul(37)];
        let key = b64(&raw);
        let got = exchange(
            &mut w,
            format!("ms {key} 2 b\r\nv{}\r\nmn\r\n", i % 10).as_bytes(),
        );
        assert_eq!(got, "HD\r\nMN\r\n");
        let owner = l.owner(&raw);
        seen[owner] += 1;
        for (s, d) in direct.iter_mut().enumerate() {
            let got = exchange(d, format!("mg {key} b v\r\nmn\r\n").as_bytes());
            let want = if s == owner {
                format!("VA 2\r\nv{}\r\nMN\r\n", i % 10)
            } else {
                "EN\r\nMN\r\n".to_string()
            };
            assert_eq!(got, want, "key {raw:?} on server {s}");
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    // a printable key is the same item in either spelling
    let key = b64(b"plain:key");
    let got = exchange(
        &mut w,
        format!("ms {key} 2 b\r\nab\r\nmg plain:key v\r\nmd plain:key\r\nmg {key} b v\r\nmn\r\n")
            .as_bytes(),
    );
    assert_eq!(got, "HD\r\nVA 2\r\nab\r\nHD\r\nEN\r\nMN\r\n");
}

#[test]
fn meta_writes_invalidate_the_cache_and_reads_do_not() {
    let l = lab(2);
    let mut w = l.weir();
    let key = |k: &str| Invalidated::Key(k.as_bytes().to_vec());
    for (req, want, invalidated) in [
        ("ms i:a 1\r\nx\r\n", "HD\r\n", Some("i:a")),
        ("ms i:b 1 q\r\nx\r\n", "", Some("i:b")),
        ("mg i:a v\r\n", "VA 1\r\nx\r\n", None),
        ("mg i:a s k O9\r\n", "HD s1 ki:a O9\r\n", None),
        ("mg i:a T60\r\n", "HD\r\n", Some("i:a")),
        ("mg i:viv N30 s\r\n", "HD s0 W\r\n", Some("i:viv")),
        ("me i:zz\r\n", "EN\r\n", None),
        ("ma i:c N0 J1\r\n", "HD\r\n", Some("i:c")),
        ("md i:b\r\n", "HD\r\n", Some("i:b")),
        ("md i:c I\r\n", "HD\r\n", Some("i:c")),
        ("ms aTpi 1 b\r\ny\r\n", "HD\r\n", Some("i:b")),
        ("mn\r\n", "MN\r\n", None),
    ] {
        let before = l.rec.calls.lock().unwrap().len();
        let got = exchange(&mut w, format!("{req}mn\r\n").as_bytes());
        assert_eq!(got, format!("{want}MN\r\n"), "{req:?}");
        let calls = l.rec.calls.lock().unwrap()[before..].to_vec();
        match invalidated {
            // once before forwarding, once when the reply came
            Some(k) => assert_eq!(calls, vec![key(k), key(k)], "{req:?}"),
            None => assert_eq!(calls, vec![], "{req:?}"),
        }
    }
    // a failed invalidation refuses the write, quiet or not, and forwards
    // nothing
    l.rec.fail.store(true, Ordering::Relaxed);
    let got = exchange(&mut w, b"ms i:a 1\r\nz\r\nms i:a 1 q\r\nz\r\nmn\r\n");
    assert_eq!(
        got,
        "SERVER_ERROR cache invalidation failed: cache unavailable\r\n\
         SERVER_ERROR cache invalidation failed: cache unavailable\r\nMN\r\n"
    );
    l.rec.fail.store(false, Ordering::Relaxed);
    assert_eq!(
        exchange(&mut w, b"mg i:a v\r\nmn\r\n"),
        "VA 1\r\nx\r\nMN\r\n"
    );
}

#[test]
fn malformed_meta_commands_get_memcached_errors_and_lose_nothing() {
    let l = lab(3);
    let mut cases = vec![("ms m:a 2\r\nok\r\n", "HD\r\n")];
    for &(bad, err) in MALFORMED {
        cases.push((bad, err));
        cases.push(("mg m:a v\r\n", "VA 2\r\nok\r\n"));
    }
    cases.push(("mn\r\n", "MN\r\n"));
    let (script, want) = script_of(&cases);
    let reference = exchange(&mut l.reference(), &script);
    let mut w = l.weir();
    let weir = exchange(&mut w, &script);
    assert_eq!(weir, reference);
    assert_eq!(weir, want);
    // the same requests, one byte at a time, answer alike
    let mut slow = l.weir();
    slow.set_nodelay(true).unwrap();
    for b in &script[..script.len() - 4] {
        slow.write_all(&[*b]).unwrap();
    }
    assert_eq!(exchange(&mut slow, b"mn\r\n"), want);
    // a key over 250 bytes, and an ms with no room for its flags
    let long = format!("mg {} v\r\nmg m:a v\r\nmn\r\n", "k".repeat(251));
    let many = format!("ms m:a 2{}\r\nmg m:a v\r\nmn\r\n", " T0".repeat(17));
    for script in [long, many] {
        let want = exchange(&mut l.reference(), script.as_bytes());
        assert!(want.starts_with("CLIENT_ERROR"), "{want:?}");
        assert_eq!(exchange(&mut w, script.as_bytes()), want);
    }
    // and the connection keeps working
    assert_eq!(
        exchange(&mut w, b"mg m:a v\r\nmn\r\n"),
        "VA 2\r\nok\r\nMN\r\n"
    );
}

#[test]
fn a_quiet_request_to_a_dead_server_gets_its_error() {
    let mut l = lab(2);
    let keys: Vec<String> = (0..40).map(|i| format!("d:{i}")).collect();
    let k0 = keys.iter().find(|k| l.owner(k.as_bytes()) == 0).unwrap();
    let k1 = keys.iter().find(|k| l.owner(k.as_bytes()) == 1).unwrap();
    let mut w = l.weir();
    let script = format!("ms {k0} 1 q\r\na\r\nms {k1} 1 q\r\nb\r\nmn\r\n");
    assert_eq!(exchange(&mut w, script.as_bytes()), "MN\r\n");
    l.servers[0] = None;
    std::thread::sleep(Duration::from_millis(100));
    let script = format!("mg {k0} v q O1\r\nmg {k1} v q O2\r\nmn\r\n");
    let got = exchange(&mut w, script.as_bytes());
    assert!(got.starts_with("SERVER_ERROR "), "{got:?}");
    assert!(got.ends_with("\r\nVA 1 O2\r\nb\r\nMN\r\n"), "{got:?}");
}
