//! Table-driven BPF_PROG_TEST_RUN tests of the memcached switch `weir_kv`.
//!
//! Every case is {name, input frame, expected verdict, expected output frame,
//! expected counters}. Frames are built with weir_core::wire (checksums from
//! scratch) and replies checked with etherparse; the server a key must go to
//! comes from weir_kv::route
//! (`Distribution::server_for_key`, nutcracker's hashing), and cache replies
//! are built here byte by byte from the memcached protocol, never from a run.
//!
//! Needs root (BPF).

use std::net::IpAddr;

use etherparse::PacketBuilder;
use libbpf_rs::ProgramInput;
use rand::{Rng, SeedableRng};
use weir_abi::*;
use weir_core::wire::{memcached_udp, refresh_ipv4_checksum, Frame};
use weir_dataplane::testrun::XdpAction::{self, Drop, Pass, Tx};
use weir_kv::route::{DistKind, Distribution, HashKind, Server};
use weir_kv::xdp::{self as kv, KvForward, KvLoadOptions, KvStats, LoadedKv, ServerAddr};

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xcc];
const VIP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
const VIP4: [u8; 4] = [10, 9, 0, 1];
const CLIENT4: [u8; 4] = [10, 8, 0, 2];
const VIP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const CLIENT6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const PORT: u16 = 11211;
const CPORT: u16 = 40000;

fn server_mac(i: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x10, i as u8]
}

fn server_ip(i: usize) -> [u8; 4] {
    [10, 9, 1, i as u8 + 1]
}

/// The switch under test, with its pool as weir_core sees it.
struct Kv {
    kv: LoadedKv,
    dist: Distribution,
    n: usize,
}

fn pool(n: usize, weights: &[u32]) -> Vec<Server> {
    (0..n)
        .map(|i| {
            let ip = server_ip(i);
            Server::new(
                format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]),
                PORT,
                weights.get(i).copied().unwrap_or(1),
            )
        })
        .collect()
}

fn setup(opts: KvLoadOptions, dist: DistKind, weights: &[u32]) -> Kv {
    let n = 3;
    let servers = pool(n, weights);
    let d = Distribution::build(dist, opts.hash, &servers).unwrap();
    let kv = kv::load(&KvLoadOptions { dist, ..opts }).expect("load weir_kv (root?)");
    let addrs: Vec<ServerAddr> = (0..n)
        .map(|i| {
            let mut s = ServerAddr::new(IpAddr::from(server_ip(i)), PORT + i as u16, server_mac(i));
            s.live = true;
            s
        })
        .collect();
    kv.set_servers(&addrs).unwrap();
    kv.set_distribution(&d).unwrap();
    Kv { kv, dist: d, n }
}

fn opts() -> KvLoadOptions {
    KvLoadOptions {
        port: PORT,
        sample_every: 0,
        write_settle: std::time::Duration::ZERO,
        ..Default::default()
    }
}

fn standard() -> Kv {
    setup(opts(), DistKind::Ketama, &[])
}

fn run(kv: &Kv, pkt: &[u8]) -> (XdpAction, Vec<u8>) {
    let mut out = vec![0u8; 4096];
    let input = ProgramInput {
        data_in: Some(pkt),
        data_out: Some(&mut out),
        repeat: 1,
        ..Default::default()
    };
    let o = kv
        .kv
        .skel
        .progs
        .weir_kv
        .test_run(input)
        .unwrap_or_else(|e| panic!("test_run of a {}-byte frame: {e}", pkt.len()));
    let len = o.data.map_or(0, |d| d.len());
    let raw = o.return_value;
    out.truncate(len);
    (XdpAction::from_raw(raw).expect("a valid XDP action"), out)
}

#[derive(Clone, Copy, PartialEq)]
enum Fam {
    V4,
    V6,
}

/// A UDP frame with the given addresses (`fam`'s length).
#[allow(clippy::too_many_arguments)]
fn udp_frame(
    fam: Fam,
    smac: [u8; 6],
    dmac: [u8; 6],
    src: &[u8],
    dst: &[u8],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let addr = |b: &[u8]| match fam {
        Fam::V4 => IpAddr::from(<[u8; 4]>::try_from(b).unwrap()),
        Fam::V6 => IpAddr::from(<[u8; 16]>::try_from(b).unwrap()),
    };
    Frame::udp(addr(src), sport, addr(dst), dport)
        .macs(smac, dmac)
        .payload(payload)
        .bytes()
}

/// The client's and the VIP's addresses of `fam`.
fn addrs(fam: Fam) -> (&'static [u8], &'static [u8]) {
    match fam {
        Fam::V4 => (&CLIENT4, &VIP4),
        Fam::V6 => (&CLIENT6, &VIP6),
    }
}

fn client_req(fam: Fam, payload: &[u8]) -> Vec<u8> {
    let (client, vip) = addrs(fam);
    udp_frame(fam, CLIENT_MAC, VIP_MAC, client, vip, CPORT, PORT, payload)
}

fn req(body: &[u8]) -> Vec<u8> {
    client_req(Fam::V4, &memcached_udp(0x1234, 0, 1, body))
}

/// The request as forwarded in L2 mode: only the MACs change.
fn l2_out(fam: Fam, payload: &[u8], server: usize) -> Vec<u8> {
    let (client, vip) = addrs(fam);
    let server_mac = server_mac(server);
    udp_frame(fam, VIP_MAC, server_mac, client, vip, CPORT, PORT, payload)
}

/// The switch's reply: from the VIP to the client, frame header seq 0 total 1.
fn reply_frame(fam: Fam, req_id: u16, body: &[u8]) -> Vec<u8> {
    let payload = memcached_udp(req_id, 0, 1, body);
    let (client, vip) = addrs(fam);
    udp_frame(fam, VIP_MAC, CLIENT_MAC, vip, client, PORT, CPORT, &payload)
}

/// A binary-protocol packet (`magic` 0x80 a request, 0x81 a response):
/// the 24-byte header, then extras, key and value.
fn bin_packet(
    magic: u8,
    op: u8,
    key: &[u8],
    extras: &[u8],
    value: &[u8],
    opaque: u32,
    cas: u64,
) -> Vec<u8> {
    let mut v = vec![magic, op];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

/// A binary-protocol request.
fn bin_req(op: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    bin_packet(0x80, op, key, extras, value, opaque, 0)
}

fn stat_name(i: u32) -> &'static str {
    kv::STAT_NAMES[i as usize]
}

fn stats(kv: &Kv) -> KvStats {
    kv.kv.stats().unwrap()
}

/// Nonzero counter changes.
fn delta(a: &KvStats, b: &KvStats) -> Vec<(u32, u64)> {
    (0..WEIR_KV_STAT_MAX)
        .filter_map(|i| {
            let d = b.get(i) - a.get(i);
            (d != 0).then_some((i, d))
        })
        .collect()
}

fn show(d: &[(u32, u64)]) -> String {
    d.iter()
        .map(|(i, n)| format!("{}={n}", stat_name(*i)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a case must do.
#[derive(Clone)]
enum Want {
    /// XDP_PASS, frame unchanged, this outcome counter.
    Pass(u32),
    /// XDP_TX to this server (L2 rewrite of the input).
    Fwd(usize),
    /// XDP_TX with exactly this frame, from the cache.
    Reply(Vec<u8>),
}

struct Case {
    name: String,
    input: Vec<u8>,
    want: Want,
    /// Event counters that must have moved by exactly this much.
    events: Vec<(u32, u64)>,
}

fn case(name: impl Into<String>, input: Vec<u8>, want: Want) -> Case {
    Case {
        name: name.into(),
        input,
        want,
        events: vec![],
    }
}

impl Case {
    fn ev(mut self, e: &[(u32, u64)]) -> Case {
        self.events.extend_from_slice(e);
        self
    }
}

fn payload_of(frame: &[u8], fam: Fam) -> Vec<u8> {
    let off = 14 + if fam == Fam::V4 { 20 } else { 40 } + 8;
    frame[off..].to_vec()
}

fn check(kv: &Kv, c: &Case) {
    let before = stats(kv);
    let (action, out) = run(kv, &c.input);
    let after = stats(kv);
    let d = delta(&before, &after);
    let name = &c.name;
    // counters add up: one RX, exactly one outcome
    assert_eq!(
        after.get(WEIR_KV_STAT_RX) - before.get(WEIR_KV_STAT_RX),
        1,
        "{name}: {}",
        show(&d)
    );
    let outcomes: Vec<_> = d.iter().filter(|(i, _)| kv::OUTCOMES.contains(i)).collect();
    assert_eq!(outcomes.len(), 1, "{name}: outcomes {}", show(&d));
    assert_eq!(outcomes[0].1, 1, "{name}: {}", show(&d));
    match &c.want {
        Want::Pass(stat) => {
            assert_eq!(action, Pass, "{name}: {}", show(&d));
            assert_eq!(outcomes[0].0, *stat, "{name}: {}", show(&d));
            assert_eq!(out, c.input, "{name}: a passed frame is unchanged");
        }
        Want::Fwd(server) => {
            assert_eq!(action, Tx, "{name}: {}", show(&d));
            assert_eq!(outcomes[0].0, WEIR_KV_STAT_TX, "{name}: {}", show(&d));
            let fam = if c.input[12..14] == [0x86, 0xdd] {
                Fam::V6
            } else {
                Fam::V4
            };
            let want = l2_out(fam, &payload_of(&c.input, fam), *server);
            assert_eq!(out, want, "{name}: forwarded frame to server {server}");
            let sd = after.servers[*server].0 - before.servers[*server].0;
            assert_eq!(sd, 1, "{name}: per-server counter");
        }
        Want::Reply(want) => {
            assert_eq!(action, Tx, "{name}: {}", show(&d));
            assert_eq!(outcomes[0].0, WEIR_KV_STAT_CACHE_TX, "{name}: {}", show(&d));
            assert_eq!(out.len(), want.len(), "{name}: reply length");
            assert_eq!(
                out, *want,
                "{name}: reply bytes\n have {:02x?}\n want {:02x?}",
                out, want
            );
        }
    }
    for (ev, n) in &c.events {
        let got = after.get(*ev) - before.get(*ev);
        assert_eq!(got, *n, "{name}: event {} ({})", stat_name(*ev), show(&d));
    }
}

fn key_of(i: usize) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

/// Two keys on the same server and one key on another, by weir_core.
fn same_and_other(dist: &Distribution) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let a = key_of(0);
    let sa = dist.server_for_key(&a);
    let b = (1..)
        .map(key_of)
        .find(|k| dist.server_for_key(k) == sa)
        .unwrap();
    let c = (1..)
        .map(key_of)
        .find(|k| dist.server_for_key(k) != sa)
        .unwrap();
    (a, b, c)
}

#[test]
fn parsing_and_routing_table() {
    let kv = standard();
    let s = |k: &[u8]| kv.dist.server_for_key(k);
    let (a, b, c) = same_and_other(&kv.dist);
    let long250 = vec![b'k'; 250];
    let long251 = vec![b'k'; 251];
    let cat = |parts: &[&[u8]]| parts.concat();
    let g = WEIR_KV_STAT_GET;
    let w = WEIR_KV_STAT_WRITE;
    let inv = WEIR_KV_STAT_INVALIDATE;
    let cases = vec![
        case("get one key", req(b"get foo\r\n"), Want::Fwd(s(b"foo"))).ev(&[
            (g, 1),
            (WEIR_KV_STAT_GET_KEYS, 1),
            (WEIR_KV_STAT_CACHE_MISS, 1),
        ]),
        case("get, \\n only", req(b"get foo\n"), Want::Fwd(s(b"foo"))),
        case(
            "get, extra spaces",
            req(b"get   foo  \r\n"),
            Want::Fwd(s(b"foo")),
        ),
        case("gets one key", req(b"gets bar\r\n"), Want::Fwd(s(b"bar"))),
        case(
            "get two keys, one server",
            req(&cat(&[b"get ", &a, b" ", &b, b"\r\n"])),
            Want::Fwd(s(&a)),
        )
        .ev(&[(g, 1), (WEIR_KV_STAT_GET_KEYS, 2)]),
        case(
            "gets three keys, one server",
            req(&cat(&[b"gets ", &a, b" ", &b, b" ", &a, b"\r\n"])),
            Want::Fwd(s(&a)),
        )
        .ev(&[(WEIR_KV_STAT_GET_KEYS, 3)]),
        case(
            "get keys on two servers",
            req(&cat(&[b"get ", &a, b" ", &c, b"\r\n"])),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_SERVER),
        ),
        case(
            "key of 250 bytes",
            req(&cat(&[b"get ", &long250, b"\r\n"])),
            Want::Fwd(s(&long250)),
        ),
        case(
            "key of 251 bytes",
            req(&cat(&[b"get ", &long251, b"\r\n"])),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_KEY),
        ),
        case(
            "second key of 251 bytes",
            req(&cat(&[b"get a ", &long251, b"\r\n"])),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_KEY),
        ),
        case(
            "key with high bytes (signed char in twemproxy)",
            req(b"get \xc3\xa9t\xe9\xff\x80\r\n"),
            Want::Fwd(s(b"\xc3\xa9t\xe9\xff\x80")),
        ),
        case(
            "get without key",
            req(b"get\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "get, no line end",
            req(b"get foo"),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "get, \\r only",
            req(b"get foo\r"),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "two commands in one datagram",
            req(b"get foo\r\nget bar\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_CMD),
        ),
        case(
            "delete then get in one datagram",
            req(b"delete foo\r\nget foo\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_CMD),
        ),
        case(
            "unknown command",
            req(b"stats\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "version",
            req(b"version\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "upper case GET",
            req(b"GET foo\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "meta no-op (no key to route)",
            req(b"mn\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "leading space",
            req(b" get foo\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "too many keys",
            req(&cat(&[b"get", &b" k".repeat(40), b"\r\n"])),
            Want::Pass(WEIR_KV_STAT_PASS_TOO_LONG),
        ),
        case(
            "line longer than the scan window",
            req(&cat(&[b"get ", &vec![b'x'; 1100], b"\r\n"])),
            Want::Pass(WEIR_KV_STAT_PASS_TOO_LONG),
        ),
        case(
            "set",
            req(b"set foo 5 0 3\r\nabc\r\n"),
            Want::Fwd(s(b"foo")),
        )
        .ev(&[(w, 1), (inv, 1)]),
        case(
            "set noreply",
            req(b"set foo 5 0 3 noreply\r\nabc\r\n"),
            Want::Fwd(s(b"foo")),
        ),
        case("add", req(b"add k1 0 0 1\r\nx\r\n"), Want::Fwd(s(b"k1"))).ev(&[(w, 1)]),
        case(
            "replace",
            req(b"replace k2 0 0 1\r\nx\r\n"),
            Want::Fwd(s(b"k2")),
        ),
        case(
            "append",
            req(b"append k3 0 0 2\r\nxy\r\n"),
            Want::Fwd(s(b"k3")),
        ),
        case(
            "prepend",
            req(b"prepend k4 0 0 0\r\n\r\n"),
            Want::Fwd(s(b"k4")),
        ),
        case("cas", req(b"cas k5 0 0 1 77\r\nx\r\n"), Want::Fwd(s(b"k5"))).ev(&[(w, 1)]),
        case("delete", req(b"delete k6\r\n"), Want::Fwd(s(b"k6"))).ev(&[(w, 1), (inv, 1)]),
        case("incr", req(b"incr k7 1\r\n"), Want::Fwd(s(b"k7"))),
        case("decr", req(b"decr k8 1 noreply\r\n"), Want::Fwd(s(b"k8"))),
        case("touch", req(b"touch k9 100\r\n"), Want::Fwd(s(b"k9"))),
        case(
            "set, data shorter than bytes",
            req(b"set foo 0 0 5\r\nabc\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "set, data longer than bytes",
            req(b"set foo 0 0 1\r\nabc\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_CMD),
        ),
        case(
            "set, bytes not a number",
            req(b"set foo 0 0 x\r\nabc\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "set, too few tokens",
            req(b"set foo 0 0\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "flush_all",
            req(b"flush_all\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_FLUSH),
        )
        .ev(&[(WEIR_KV_STAT_FLUSH, 1)]),
        case(
            "flush_all delay",
            req(b"flush_all 10\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_FLUSH),
        ),
        // binary protocol
        case(
            "binary GET",
            req(&bin_req(0x00, b"foo", &[], &[], 7)),
            Want::Fwd(s(b"foo")),
        )
        .ev(&[(g, 1)]),
        case(
            "binary GETQ",
            req(&bin_req(0x09, b"foo", &[], &[], 7)),
            Want::Fwd(s(b"foo")),
        ),
        case(
            "binary GETK",
            req(&bin_req(0x0c, b"bar", &[], &[], 7)),
            Want::Fwd(s(b"bar")),
        ),
        case(
            "binary GETKQ",
            req(&bin_req(0x0d, b"baz", &[], &[], 7)),
            Want::Fwd(s(b"baz")),
        ),
        case(
            "binary SET",
            req(&bin_req(0x01, b"foo", &[0, 0, 0, 1, 0, 0, 0, 0], b"val", 1)),
            Want::Fwd(s(b"foo")),
        )
        .ev(&[(w, 1), (inv, 1)]),
        case(
            "binary DELETE",
            req(&bin_req(0x04, b"foo", &[], &[], 1)),
            Want::Fwd(s(b"foo")),
        )
        .ev(&[(w, 1)]),
        case(
            "binary key 250",
            req(&bin_req(0x00, &long250, &[], &[], 1)),
            Want::Fwd(s(&long250)),
        ),
        case(
            "binary key 251",
            req(&bin_req(0x00, &long251, &[], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_KEY),
        ),
        case(
            "binary empty key",
            req(&bin_req(0x00, b"", &[], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_KEY),
        ),
        case(
            "binary STAT (unknown)",
            req(&bin_req(0x10, b"", &[], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "binary NOOP",
            req(&bin_req(0x0a, b"", &[], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ),
        case(
            "binary FLUSH",
            req(&bin_req(0x08, b"", &[0, 0, 0, 0], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_FLUSH),
        ),
        case(
            "binary header only 23 bytes",
            req(&bin_req(0x00, b"foo", &[], &[], 1)[..23]),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "binary key cut",
            req(&bin_req(0x00, b"foo", &[], &[], 1)[..25]),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "binary pipelined GETs",
            req(&cat(&[
                &bin_req(0x0d, b"a", &[], &[], 1),
                &bin_req(0x0c, b"b", &[], &[], 2),
            ])),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_CMD),
        ),
        case(
            "binary keylen beyond body",
            req(&{
                let mut r = bin_req(0x00, b"foo", &[], &[], 1);
                r[2..4].copy_from_slice(&10u16.to_be_bytes());
                r
            }),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        // frame header
        case(
            "no frame header",
            client_req(Fam::V4, b"get x\r"),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_FRAME),
        ),
        case(
            "empty datagram",
            client_req(Fam::V4, b""),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_FRAME),
        ),
        case(
            "frame header only",
            client_req(Fam::V4, &memcached_udp(1, 0, 1, b"")),
            Want::Pass(WEIR_KV_STAT_PASS_TRUNCATED),
        ),
        case(
            "total 0",
            client_req(Fam::V4, &memcached_udp(1, 0, 0, b"get foo\r\n")),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_FRAME),
        ),
        case(
            "seq = total",
            client_req(Fam::V4, &memcached_udp(1, 2, 2, b"get foo\r\n")),
            Want::Pass(WEIR_KV_STAT_PASS_BAD_FRAME),
        ),
        case(
            "continuation of an unknown request",
            client_req(Fam::V4, &memcached_udp(99, 1, 2, b"abc")),
            Want::Pass(WEIR_KV_STAT_PASS_ORPHAN),
        ),
        case(
            "get over two datagrams",
            client_req(Fam::V4, &memcached_udp(1, 0, 2, b"get foo\r\n")),
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_CMD),
        ),
        // not memcached
        case(
            "other UDP port",
            udp_frame(
                Fam::V4,
                CLIENT_MAC,
                VIP_MAC,
                &CLIENT4,
                &VIP4,
                CPORT,
                53,
                b"get foo\r\n",
            ),
            Want::Pass(WEIR_KV_STAT_PASS_NOT_KV),
        ),
        case(
            "TCP to the port",
            {
                let mut v = Vec::new();
                PacketBuilder::ethernet2(CLIENT_MAC, VIP_MAC)
                    .ipv4(CLIENT4, VIP4, 64)
                    .tcp(CPORT, PORT, 1, 1000)
                    .write(&mut v, b"get foo\r\n")
                    .unwrap();
                v
            },
            Want::Pass(WEIR_KV_STAT_PASS_NOT_KV),
        ),
        case(
            "ARP",
            {
                let mut v = [[0xffu8; 6], CLIENT_MAC].concat();
                v.extend_from_slice(&[0x08, 0x06]);
                v.extend_from_slice(&[0u8; 28]);
                v
            },
            Want::Pass(WEIR_KV_STAT_PASS_NOT_KV),
        ),
        case(
            "IP header cut",
            req(b"get foo\r\n")[..20].to_vec(),
            Want::Pass(WEIR_KV_STAT_PASS_MALFORMED),
        ),
        case(
            "IPv6 get",
            client_req(Fam::V6, &memcached_udp(5, 0, 1, b"get foo\r\n")),
            Want::Fwd(s(b"foo")),
        ),
        case(
            "IPv6 binary delete",
            client_req(
                Fam::V6,
                &memcached_udp(5, 0, 1, &bin_req(0x04, b"zz", &[], &[], 3)),
            ),
            Want::Fwd(s(b"zz")),
        ),
    ];
    let n = cases.len();
    for c in &cases {
        check(&kv, c);
    }
    eprintln!("{n} parsing/routing cases");
}

/// Every prefix of a valid request (with consistent IP/UDP lengths) is
/// passed, and every cut frame (lengths no longer match) too; in an
/// fnv1a_64 pool and in an md5 pool.
#[test]
fn truncated_at_every_length() {
    for hash in [HashKind::Fnv1a_64, HashKind::Md5] {
        truncated_at_every_length_with(hash);
    }
}

fn truncated_at_every_length_with(hash: HashKind) {
    let kv = setup(KvLoadOptions { hash, ..opts() }, DistKind::Ketama, &[]);
    let requests: Vec<Vec<u8>> = vec![
        b"get foo\r\n".to_vec(),
        b"gets foo bar\r\n".to_vec(),
        b"set foo 0 0 3\r\nabc\r\n".to_vec(),
        b"cas foo 0 0 3 9\r\nabc\r\n".to_vec(),
        b"delete foo\r\n".to_vec(),
        bin_req(0x00, b"foo", &[], &[], 1),
        bin_req(0x01, b"foo", &[0; 8], b"abc", 1),
        b"mg foo v f s k Oab c\r\n".to_vec(),
        b"mg hot s v\r\n".to_vec(),
        b"ms foo 3 T0\r\nabc\r\n".to_vec(),
        b"md hot q\r\n".to_vec(),
    ];
    let mut n = 0;
    for r in &requests {
        let full = memcached_udp(7, 0, 1, r);
        for cut in 0..full.len() {
            let input = client_req(Fam::V4, &full[..cut]);
            let (action, out) = run(&kv, &input);
            assert_eq!(
                action,
                Pass,
                "prefix {cut} of {:?}",
                String::from_utf8_lossy(r)
            );
            assert_eq!(out, input);
            n += 1;
        }
        let whole = client_req(Fam::V4, &full);
        // BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header
        for cut in 14..whole.len() {
            let before = stats(&kv);
            let (action, out) = run(&kv, &whole[..cut]);
            let d = delta(&before, &stats(&kv));
            assert_eq!(action, Pass, "frame cut at {cut}: {}", show(&d));
            assert_eq!(out, whole[..cut].to_vec());
            n += 1;
        }
    }
    eprintln!("{hash}: {n} truncated frames");
}

/// BPF and weir_core pick the same server, for fnv1a_64 and md5 pools,
/// ketama (equal and unequal weights) and modula, on random keys of every
/// length (1..=250, so 1 to 5 md5 blocks) including bytes >= 0x80.
#[test]
fn routing_matches_weir_core() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for hash in [HashKind::Fnv1a_64, HashKind::Md5] {
        for (dist, weights) in [
            (DistKind::Ketama, vec![]),
            (DistKind::Ketama, vec![1, 3, 2]),
            (DistKind::Modula, vec![]),
            (DistKind::Modula, vec![2, 1, 5]),
        ] {
            route_random_keys(&mut rng, hash, dist, &weights, 2000);
        }
    }
}

fn random_key(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| loop {
            let b: u8 = rng.gen();
            if b != b' ' && b != b'\r' && b != b'\n' {
                break b;
            }
        })
        .collect()
}

/// `n` random keys (ASCII get, binary GET, ASCII write in turn) go to the
/// server weir_core names; then multi-key gets of random keys go there too
/// when all keys share a server, and to the kernel otherwise.
fn route_random_keys(rng: &mut impl Rng, hash: HashKind, dist: DistKind, weights: &[u32], n: u32) {
    let kv = setup(KvLoadOptions { hash, ..opts() }, dist, weights);
    let before = stats(&kv);
    let mut hits = vec![0usize; kv.n];
    // every length at least once, then random lengths
    let lens: Vec<usize> = (1..=250)
        .chain((250..n as usize).map(|_| rng.gen_range(1..=250)))
        .collect();
    for (i, &len) in lens.iter().enumerate() {
        let i = i as u32;
        let key = random_key(rng, len);
        let want = kv.dist.server_for_key(&key);
        assert_eq!(
            want,
            kv.dist
                .server_for_hash(weir_kv::route::hash::hash(hash, &key)),
            "weir_core hashes with the pool's hash"
        );
        hits[want] += 1;
        let body = match i % 3 {
            0 => [b"get ", &key[..], b"\r\n"].concat(),
            1 => bin_req(0x00, &key, &[], &[], i),
            _ => [b"delete ", &key[..], b"\r\n"].concat(),
        };
        let input = req(&body);
        let (action, out) = run(&kv, &input);
        assert_eq!(action, Tx, "{hash} {dist:?} {weights:?} key {key:02x?}");
        assert_eq!(
            out,
            l2_out(Fam::V4, &payload_of(&input, Fam::V4), want),
            "{hash} {dist:?} {weights:?}: key of {len} bytes {key:02x?}"
        );
    }
    assert!(
        hits.iter().all(|&h| h > 0),
        "{hash} {dist:?} {weights:?}: {hits:?}"
    );
    // multi-key gets: 2..=8 random keys
    let (mut same, mut split) = (0, 0);
    for _ in 0..200 {
        let keys: Vec<Vec<u8>> = (0..rng.gen_range(2..=8))
            .map(|_| {
                let len = rng.gen_range(1..=100);
                random_key(rng, len)
            })
            .collect();
        let owners: Vec<usize> = keys.iter().map(|k| kv.dist.server_for_key(k)).collect();
        let mut body = b"get".to_vec();
        for k in &keys {
            body.push(b' ');
            body.extend_from_slice(k);
        }
        body.extend_from_slice(b"\r\n");
        let want = if owners.iter().all(|&o| o == owners[0]) {
            same += 1;
            Want::Fwd(owners[0])
        } else {
            split += 1;
            Want::Pass(WEIR_KV_STAT_PASS_MULTI_SERVER)
        };
        check(
            &kv,
            &case(format!("{hash} {dist:?} multi-get"), req(&body), want),
        );
    }
    let d = delta(&before, &stats(&kv));
    assert!(
        !d.iter().any(|(i, _)| *i == WEIR_KV_STAT_PASS_HASH),
        "{hash}: no pass_hash: {}",
        show(&d)
    );
    eprintln!(
        "{hash} {dist:?} {weights:?}: {} keys {hits:?}, multi-get same {same} split {split}",
        lens.len()
    );
}

/// L3 mode: destination address and port become the server's, the source
/// stays the client's, checksums recomputed independently.
#[test]
fn l3_forwarding() {
    let kv = setup(
        KvLoadOptions {
            forward: KvForward::L3,
            ..opts()
        },
        DistKind::Ketama,
        &[],
    );
    for key in [&b"foo"[..], b"bar", b"key:17", b"x"] {
        let server = kv.dist.server_for_key(key);
        let payload = memcached_udp(3, 0, 1, &[b"get ", key, b"\r\n"].concat());
        let input = client_req(Fam::V4, &payload);
        let (action, out) = run(&kv, &input);
        assert_eq!(action, Tx);
        let want = udp_frame(
            Fam::V4,
            VIP_MAC,
            server_mac(server),
            &CLIENT4,
            &server_ip(server),
            CPORT,
            PORT + server as u16,
            &payload,
        );
        assert_eq!(out, want, "L3 rewrite of {key:?}");
    }
    let st = stats(&kv);
    assert_eq!(st.by_name("l3_rewrite"), Some(4));
}

/// An ASCII `get` reply, built from the protocol text.
fn ascii_value(key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) -> Vec<u8> {
    let mut v = b"VALUE ".to_vec();
    v.extend_from_slice(key);
    v.extend_from_slice(format!(" {flags} {}", value.len()).as_bytes());
    if let Some(c) = cas {
        v.extend_from_slice(format!(" {c}").as_bytes());
    }
    v.extend_from_slice(b"\r\n");
    v.extend_from_slice(value);
    v.extend_from_slice(b"\r\nEND\r\n");
    v
}

/// A binary GET response (status 0, extras = flags).
fn bin_value(
    op: u8,
    key: Option<&[u8]>,
    flags: u32,
    value: &[u8],
    opaque: u32,
    cas: u64,
) -> Vec<u8> {
    let k = key.unwrap_or(b"");
    bin_packet(0x81, op, k, &flags.to_be_bytes(), value, opaque, cas)
}

fn put(kv: &Kv, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
    let c = kv.kv.cache();
    let t = c.ticket(key).unwrap().expect("ticket");
    assert!(c.put(&t, flags, value, cas).unwrap(), "put {key:?}");
}

#[test]
fn cache_hits_byte_for_byte() {
    let kv = standard();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut cases = Vec::new();
    let sizes = [0usize, 1, 2, 3, 31, 32, 100, 511, 1000, 1023, 1024];
    for (i, &size) in sizes.iter().enumerate() {
        for klen in [1usize, 2, 7, 8, 249, 250] {
            let key: Vec<u8> = (0..klen).map(|j| b'a' + ((i + j) % 26) as u8).collect();
            let value: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
            let flags: u32 = rng.gen();
            let cas: u64 = rng.gen();
            put(&kv, &key, flags, &value, Some(cas));
            let id: u16 = rng.gen();
            let opaque: u32 = rng.gen();
            for fam in [Fam::V4, Fam::V6] {
                let tag = format!(
                    "{size}B value, {klen}B key, {}",
                    if fam == Fam::V4 { "v4" } else { "v6" }
                );
                let q = |body: &[u8]| client_req(fam, &memcached_udp(id, 0, 1, body));
                cases.push(
                    case(
                        format!("get, {tag}"),
                        q(&[b"get ", &key[..], b"\r\n"].concat()),
                        Want::Reply(reply_frame(
                            fam,
                            id,
                            &ascii_value(&key, flags, &value, None),
                        )),
                    )
                    .ev(&[(WEIR_KV_STAT_CACHE_MISS, 0)]),
                );
                cases.push(case(
                    format!("gets, {tag}"),
                    q(&[b"gets ", &key[..], b"\r\n"].concat()),
                    Want::Reply(reply_frame(
                        fam,
                        id,
                        &ascii_value(&key, flags, &value, Some(cas)),
                    )),
                ));
                for op in [0x00u8, 0x09, 0x0c, 0x0d] {
                    let echo = (op == 0x0c || op == 0x0d).then_some(&key[..]);
                    cases.push(case(
                        format!("binary op {op:#x}, {tag}"),
                        q(&bin_req(op, &key, &[], &[], opaque)),
                        Want::Reply(reply_frame(
                            fam,
                            id,
                            &bin_value(op, echo, flags, &value, opaque, cas),
                        )),
                    ));
                }
            }
        }
    }
    // without a cas, gets and binary GETs go to the server; get is answered
    put(&kv, b"nocas", 3, b"v", None);
    cases.push(case(
        "get without cas stored",
        req(b"get nocas\r\n"),
        Want::Reply(reply_frame(
            Fam::V4,
            0x1234,
            &ascii_value(b"nocas", 3, b"v", None),
        )),
    ));
    cases.push(
        case(
            "gets without cas stored",
            req(b"gets nocas\r\n"),
            Want::Fwd(kv.dist.server_for_key(b"nocas")),
        )
        .ev(&[(WEIR_KV_STAT_CACHE_BYPASS, 1)]),
    );
    cases.push(case(
        "binary GET without cas stored",
        req(&bin_req(0, b"nocas", &[], &[], 1)),
        Want::Fwd(kv.dist.server_for_key(b"nocas")),
    ));
    // a multi-key get is never answered from the cache
    cases.push(case(
        "multi-key get of cached keys",
        req(b"get nocas nocas\r\n"),
        Want::Fwd(kv.dist.server_for_key(b"nocas")),
    ));
    // IPv4 options: the server answers
    let mut with_opts = req(b"get nocas\r\n");
    {
        // rebuild with IHL 6 (a NOP option word) by hand
        let mut ip = with_opts[14..34].to_vec();
        ip[0] = 0x46;
        let tot = u16::from_be_bytes([ip[2], ip[3]]) + 4;
        ip[2..4].copy_from_slice(&tot.to_be_bytes());
        ip.extend_from_slice(&[1, 1, 1, 0]);
        refresh_ipv4_checksum(&mut ip);
        let rest = with_opts[34..].to_vec();
        with_opts.truncate(14);
        with_opts.extend_from_slice(&ip);
        with_opts.extend_from_slice(&rest);
    }
    let before = stats(&kv);
    let (a, out) = run(&kv, &with_opts);
    assert_eq!(a, Tx, "IPv4 options: forwarded");
    assert_eq!(out[0..6], server_mac(kv.dist.server_for_key(b"nocas")));
    assert_eq!(
        stats(&kv).get(WEIR_KV_STAT_CACHE_TX),
        before.get(WEIR_KV_STAT_CACHE_TX)
    );

    let n = cases.len();
    for c in &cases {
        check(&kv, c);
    }
    eprintln!("{n} cache-hit cases");
}

#[test]
fn cache_disabled_and_expired_entries_are_not_served() {
    let kv = setup(
        KvLoadOptions {
            cache_enabled: false,
            ..opts()
        },
        DistKind::Ketama,
        &[],
    );
    put(&kv, b"hot", 0, b"v", Some(1));
    check(
        &kv,
        &case(
            "cache off",
            req(b"get hot\r\n"),
            Want::Fwd(kv.dist.server_for_key(b"hot")),
        ),
    );

    let kv = standard();
    let c = kv.kv.cache();
    let t = c.ticket(b"hot").unwrap().unwrap();
    assert!(c
        .put_ttl(&t, 0, b"v", None, Some(std::time::Duration::from_millis(1)))
        .unwrap());
    std::thread::sleep(std::time::Duration::from_millis(5));
    check(
        &kv,
        &case(
            "expired",
            req(b"get hot\r\n"),
            Want::Fwd(kv.dist.server_for_key(b"hot")),
        )
        .ev(&[(WEIR_KV_STAT_CACHE_STALE, 1)]),
    );
}

/// Every write the switch sees invalidates the key before forwarding: a GET
/// right after it goes to the server, and a ticket taken before the write
/// cannot install the old value.
#[test]
fn invalidation_on_every_mutating_command() {
    let kv = standard();
    let key = b"hotkey";
    let srv = kv.dist.server_for_key(key);
    let get = req(b"get hotkey\r\n");
    let hit = reply_frame(Fam::V4, 0x1234, &ascii_value(key, 1, b"old", None));
    let writes: Vec<(&str, Vec<u8>, Want)> = vec![
        ("set", req(b"set hotkey 1 0 3\r\nnew\r\n"), Want::Fwd(srv)),
        ("add", req(b"add hotkey 1 0 3\r\nnew\r\n"), Want::Fwd(srv)),
        (
            "replace",
            req(b"replace hotkey 1 0 3\r\nnew\r\n"),
            Want::Fwd(srv),
        ),
        (
            "append",
            req(b"append hotkey 1 0 1\r\nx\r\n"),
            Want::Fwd(srv),
        ),
        (
            "prepend",
            req(b"prepend hotkey 1 0 1\r\nx\r\n"),
            Want::Fwd(srv),
        ),
        ("cas", req(b"cas hotkey 1 0 3 5\r\nnew\r\n"), Want::Fwd(srv)),
        ("delete", req(b"delete hotkey\r\n"), Want::Fwd(srv)),
        ("incr", req(b"incr hotkey 1\r\n"), Want::Fwd(srv)),
        ("decr", req(b"decr hotkey 1\r\n"), Want::Fwd(srv)),
        ("touch", req(b"touch hotkey 10\r\n"), Want::Fwd(srv)),
        (
            "flush_all",
            req(b"flush_all\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_FLUSH),
        ),
        (
            "bin SET",
            req(&bin_req(0x01, key, &[0; 8], b"new", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin SETQ",
            req(&bin_req(0x11, key, &[0; 8], b"new", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin ADD",
            req(&bin_req(0x02, key, &[0; 8], b"new", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin REPLACE",
            req(&bin_req(0x03, key, &[0; 8], b"new", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin DELETE",
            req(&bin_req(0x04, key, &[], &[], 1)),
            Want::Fwd(srv),
        ),
        (
            "bin INCR",
            req(&bin_req(0x05, key, &[0; 20], &[], 1)),
            Want::Fwd(srv),
        ),
        (
            "bin DECR",
            req(&bin_req(0x06, key, &[0; 20], &[], 1)),
            Want::Fwd(srv),
        ),
        (
            "bin APPEND",
            req(&bin_req(0x0e, key, &[], b"x", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin PREPEND",
            req(&bin_req(0x0f, key, &[], b"x", 1)),
            Want::Fwd(srv),
        ),
        (
            "bin TOUCH",
            req(&bin_req(0x1c, key, &[0; 4], &[], 1)),
            Want::Fwd(srv),
        ),
        (
            "bin GAT",
            req(&bin_req(0x1d, key, &[0; 4], &[], 1)),
            Want::Fwd(srv),
        ),
        (
            "bin FLUSH",
            req(&bin_req(0x08, b"", &[], &[], 1)),
            Want::Pass(WEIR_KV_STAT_PASS_FLUSH),
        ),
        (
            "IPv6 delete",
            client_req(Fam::V6, &memcached_udp(1, 0, 1, b"delete hotkey\r\n")),
            Want::Fwd(srv),
        ),
    ];
    let c = kv.kv.cache();
    for (name, write, want) in &writes {
        put(&kv, key, 1, b"old", None);
        check(
            &kv,
            &case(
                format!("{name}: hit before"),
                get.clone(),
                Want::Reply(hit.clone()),
            ),
        );
        // a ticket taken before the write (a fetch in flight)
        let racing = c.ticket(key).unwrap().unwrap();
        let is_flush = matches!(want, Want::Pass(_));
        let ev = if is_flush {
            vec![(WEIR_KV_STAT_FLUSH, 1)]
        } else {
            vec![
                (WEIR_KV_STAT_INVALIDATE, 1),
                (WEIR_KV_STAT_INVALIDATE_HIT, 1),
            ]
        };
        check(
            &kv,
            &case(format!("{name}: the write"), write.clone(), want.clone()).ev(&ev),
        );
        check(
            &kv,
            &case(format!("{name}: get after"), get.clone(), Want::Fwd(srv))
                .ev(&[(WEIR_KV_STAT_CACHE_TX, 0)]),
        );
        assert!(
            !c.put(&racing, 1, b"old", None).unwrap(),
            "{name}: a ticket from before the write must not install"
        );
        check(
            &kv,
            &case(
                format!("{name}: still not served"),
                get.clone(),
                Want::Fwd(srv),
            ),
        );
    }

    // user-space invalidation (the TCP path) and flush
    put(&kv, key, 1, b"old", None);
    let racing = c.ticket(key).unwrap().unwrap();
    c.invalidate(key).unwrap();
    check(
        &kv,
        &case("after Cache::invalidate", get.clone(), Want::Fwd(srv)),
    );
    assert!(!c.put(&racing, 1, b"old", None).unwrap());
    put(&kv, key, 1, b"old", None);
    let racing = c.ticket(key).unwrap().unwrap();
    c.flush().unwrap();
    check(
        &kv,
        &case("after Cache::flush", get.clone(), Want::Fwd(srv)),
    );
    assert!(!c.put(&racing, 1, b"old", None).unwrap());
    // a fresh ticket after the write works again
    put(&kv, key, 1, b"new", None);
    check(
        &kv,
        &case(
            "fresh put",
            get.clone(),
            Want::Reply(reply_frame(
                Fam::V4,
                0x1234,
                &ascii_value(key, 1, b"new", None),
            )),
        ),
    );
    // a write to another key of another bucket leaves it cached
    check(
        &kv,
        &case(
            "write elsewhere",
            req(b"delete other\r\n"),
            Want::Fwd(kv.dist.server_for_key(b"other")),
        ),
    );
    check(
        &kv,
        &case(
            "still cached",
            get.clone(),
            Want::Reply(reply_frame(
                Fam::V4,
                0x1234,
                &ascii_value(key, 1, b"new", None),
            )),
        ),
    );
    // write settle: no ticket right after a write
    let kv2 = setup(
        KvLoadOptions {
            write_settle: std::time::Duration::from_secs(30),
            ..opts()
        },
        DistKind::Ketama,
        &[],
    );
    assert!(kv2.kv.cache().ticket(key).unwrap().is_some());
    run(&kv2, &req(b"delete hotkey\r\n"));
    assert!(
        kv2.kv.cache().ticket(key).unwrap().is_none(),
        "settle window"
    );
}

/// memcached's meta commands over UDP: routed by key like the classic ones;
/// `ms`, `md`, `ma` and an `mg` with T or N invalidate the key first; a
/// base64 key goes to the kernel; an `mg` of a cached key whose flags the
/// cache can answer is answered as memcached 1.6 answers it over UDP (the
/// returned flags in the request's order), every other `mg` goes to the
/// key's server.
#[test]
fn meta_commands_route_invalidate_and_answer_mg_hits() {
    let kv = standard();
    let fwd = |k: &[u8]| Want::Fwd(kv.dist.server_for_key(k));
    put(&kv, b"mkey", 3, b"hello", Some(77));
    put(&kv, b"even", 0, b"four", Some(12345678901234));
    put(&kv, b"nocas", 9, b"v", None);
    let answer = |fam: Fam, line: &str, value: Option<&[u8]>| {
        let mut b = line.as_bytes().to_vec();
        if let Some(v) = value {
            b.extend_from_slice(v);
            b.extend_from_slice(b"\r\n");
        }
        Want::Reply(reply_frame(fam, 0x1234, &b))
    };
    let hello = Some(&b"hello"[..]);
    let mut cases = Vec::new();
    for fam in [Fam::V4, Fam::V6] {
        let q = |body: &[u8]| client_req(fam, &memcached_udp(0x1234, 0, 1, body));
        // lines of odd and even length, values of odd and even length
        for (ask, line, value) in [
            ("mg mkey v", "VA 5\r\n", hello),
            ("mg mkey v f", "VA 5 f3\r\n", hello),
            (
                "mg mkey v f s k Oabc c q",
                "VA 5 f3 s5 kmkey Oabc c77\r\n",
                hello,
            ),
            ("mg mkey s v f", "VA 5 s5 f3\r\n", hello),
            (
                "mg mkey q v O12345678901234567890123456789012",
                "VA 5 O12345678901234567890123456789012\r\n",
                hello,
            ),
            ("mg mkey", "HD\r\n", None),
            ("mg mkey f k", "HD f3 kmkey\r\n", None),
            (
                "mg even v c",
                "VA 4 c12345678901234\r\n",
                Some(&b"four"[..]),
            ),
            ("mg even k v", "VA 4 keven\r\n", Some(&b"four"[..])),
            ("mg nocas v f", "VA 1 f9\r\n", Some(&b"v"[..])),
        ] {
            cases.push(
                case(
                    format!("{ask}, {}", if fam == Fam::V4 { "v4" } else { "v6" }),
                    q(format!("{ask}\r\n").as_bytes()),
                    answer(fam, line, value),
                )
                .ev(&[
                    (WEIR_KV_STAT_META, 1),
                    (WEIR_KV_STAT_META_CACHE_TX, 1),
                    (WEIR_KV_STAT_INVALIDATE, 0),
                ]),
            );
        }
    }
    // flags only the server can answer, or malformed ones: the server answers
    for ask in [
        "mg mkey v t",
        "mg mkey v h",
        "mg mkey v l",
        "mg mkey v R30",
        "mg mkey v E5",
        "mg mkey v f f",
        "mg mkey v O123456789012345678901234567890123",
        "mg mkey v O",
        "mg mkey vv",
        "mg mkey v k1",
    ] {
        cases.push(
            case(ask, req(format!("{ask}\r\n").as_bytes()), fwd(b"mkey")).ev(&[
                (WEIR_KV_STAT_META, 1),
                (WEIR_KV_STAT_CACHE_MISS, 0),
                (WEIR_KV_STAT_INVALIDATE, 0),
            ]),
        );
    }
    cases.push(
        case(
            "mg c without a cas",
            req(b"mg nocas v c\r\n"),
            fwd(b"nocas"),
        )
        .ev(&[(WEIR_KV_STAT_CACHE_BYPASS, 1)]),
    );
    cases.push(
        case(
            "mg of a key not cached",
            req(b"mg cold v\r\n"),
            fwd(b"cold"),
        )
        .ev(&[(WEIR_KV_STAT_CACHE_MISS, 1), (WEIR_KV_STAT_META, 1)]),
    );
    cases.push(
        case("me reads", req(b"me mkey\r\n"), fwd(b"mkey"))
            .ev(&[(WEIR_KV_STAT_INVALIDATE, 0), (WEIR_KV_STAT_META, 1)]),
    );
    for (ask, want) in [
        ("mg bWtleQ== b v\r\n", WEIR_KV_STAT_PASS_META_BASE64),
        ("ms bWtleQ== 1 b\r\nx\r\n", WEIR_KV_STAT_PASS_META_BASE64),
        ("md bWtleQ== b q\r\n", WEIR_KV_STAT_PASS_META_BASE64),
        ("mn\r\n", WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ("mg\r\n", WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ("ms mkey\r\n", WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ("ms mkey x\r\nabc\r\n", WEIR_KV_STAT_PASS_UNKNOWN_CMD),
        ("ms mkey 5\r\nabc\r\n", WEIR_KV_STAT_PASS_TRUNCATED),
        ("ms mkey 1\r\nabc\r\n", WEIR_KV_STAT_PASS_MULTI_CMD),
        ("mg mkey v\r\nmg mkey v\r\n", WEIR_KV_STAT_PASS_MULTI_CMD),
        ("mg mkey v", WEIR_KV_STAT_PASS_TRUNCATED),
    ] {
        cases.push(case(
            ask.escape_debug().to_string(),
            req(ask.as_bytes()),
            Want::Pass(want),
        ));
    }
    let long = format!("mg {} v\r\n", "k".repeat(251));
    cases.push(case(
        "mg, key of 251 bytes",
        req(long.as_bytes()),
        Want::Pass(WEIR_KV_STAT_PASS_BAD_KEY),
    ));
    for c in &cases {
        check(&kv, c);
    }

    // every meta write (and mg with T or N) invalidates before forwarding
    let c = kv.kv.cache();
    let hit = answer(Fam::V4, "VA 5 f3\r\n", hello);
    for write in [
        "ms mkey 3 T0\r\nnew\r\n",
        "ms mkey 3 q MA\r\nnew\r\n",
        "md mkey q\r\n",
        "md mkey I T30\r\n",
        "ma mkey\r\n",
        "ma mkey MD D2 N0\r\n",
        "mg mkey v T30\r\n",
        "mg mkey N30 v\r\n",
    ] {
        let name = write.escape_debug().to_string();
        put(&kv, b"mkey", 3, b"hello", Some(77));
        check(
            &kv,
            &case(
                format!("{name}: hit before"),
                req(b"mg mkey v f\r\n"),
                hit.clone(),
            ),
        );
        let racing = c.ticket(b"mkey").unwrap().unwrap();
        check(
            &kv,
            &case(
                format!("{name}: the write"),
                req(write.as_bytes()),
                fwd(b"mkey"),
            )
            .ev(&[
                (WEIR_KV_STAT_META, 1),
                (WEIR_KV_STAT_INVALIDATE, 1),
                (WEIR_KV_STAT_INVALIDATE_HIT, 1),
            ]),
        );
        check(
            &kv,
            &case(
                format!("{name}: mg after"),
                req(b"mg mkey v f\r\n"),
                fwd(b"mkey"),
            )
            .ev(&[(WEIR_KV_STAT_META_CACHE_TX, 0)]),
        );
        check(
            &kv,
            &case(
                format!("{name}: get after"),
                req(b"get mkey\r\n"),
                fwd(b"mkey"),
            )
            .ev(&[(WEIR_KV_STAT_CACHE_TX, 0)]),
        );
        assert!(
            !c.put(&racing, 3, b"hello", Some(77)).unwrap(),
            "{name}: a ticket from before the write must not install"
        );
    }
    // a classic write voids what mg would answer too
    put(&kv, b"mkey", 3, b"hello", Some(77));
    check(
        &kv,
        &case("classic delete", req(b"delete mkey\r\n"), fwd(b"mkey")),
    );
    check(
        &kv,
        &case(
            "mg after a classic delete",
            req(b"mg mkey v\r\n"),
            fwd(b"mkey"),
        ),
    );
}

#[test]
fn multi_datagram_requests_stay_on_one_server() {
    let kv = standard();
    let key = b"bigvalue";
    let srv = kv.dist.server_for_key(key);
    let first = client_req(
        Fam::V4,
        &memcached_udp(77, 0, 3, b"set bigvalue 0 0 3000\r\nxxxx"),
    );
    check(
        &kv,
        &case("first datagram", first, Want::Fwd(srv)).ev(&[(WEIR_KV_STAT_REQ_TRACKED, 1)]),
    );
    for seq in 1..3 {
        let cont = client_req(Fam::V4, &memcached_udp(77, seq, 3, &vec![b'y'; 1000]));
        check(
            &kv,
            &case(format!("datagram {seq}"), cont, Want::Fwd(srv))
                .ev(&[(WEIR_KV_STAT_REQ_CONT, 1)]),
        );
    }
    // another request id, another client port, or another total: orphans
    for (name, pkt) in [
        (
            "other id",
            client_req(Fam::V4, &memcached_udp(78, 1, 3, b"y")),
        ),
        (
            "other port",
            udp_frame(
                Fam::V4,
                CLIENT_MAC,
                VIP_MAC,
                &CLIENT4,
                &VIP4,
                CPORT + 1,
                PORT,
                &memcached_udp(77, 1, 3, b"y"),
            ),
        ),
        (
            "other total",
            client_req(Fam::V4, &memcached_udp(77, 1, 4, b"y")),
        ),
    ] {
        check(&kv, &case(name, pkt, Want::Pass(WEIR_KV_STAT_PASS_ORPHAN)));
    }
}

#[test]
fn hot_key_samples_reach_user_space() {
    let mut kv = setup(
        KvLoadOptions {
            sample_every: 1,
            ..opts()
        },
        DistKind::Ketama,
        &[],
    );
    put(&kv, b"cached", 0, b"v", Some(1));
    run(&kv, &req(b"get alpha\r\n"));
    run(&kv, &req(b"get cached\r\n"));
    let (a, b, _) = same_and_other(&kv.dist);
    run(
        &kv,
        &req(&[b"get ", &a[..], b" ", &b[..], b"\r\n"].concat()),
    );
    let got: Vec<_> = kv.kv.hot_key_samples().unwrap().collect();
    let keys: Vec<&[u8]> = got.iter().map(|s| &s.key[..]).collect();
    assert_eq!(
        keys,
        vec![&b"alpha"[..], b"cached", &a[..], &b[..]],
        "{got:?}"
    );
    assert_eq!(got[0].server, Some(kv.dist.server_for_key(b"alpha") as u32));
    assert!(got[1].cache_hit && got[1].server.is_none());
    assert!(!got[2].cache_hit);
    assert_eq!(stats(&kv).by_name("sample"), Some(4));
}

#[test]
fn no_table_and_dead_servers_go_to_the_kernel() {
    let kv = kv::load(&opts()).unwrap();
    let k = Kv {
        kv,
        dist: Distribution::build(DistKind::Ketama, HashKind::Fnv1a_64, &pool(3, &[])).unwrap(),
        n: 3,
    };
    check(
        &k,
        &case(
            "no table",
            req(b"get foo\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_NO_SERVER),
        ),
    );
    k.kv.set_distribution(&k.dist).unwrap();
    check(
        &k,
        &case(
            "no server slots",
            req(b"get foo\r\n"),
            Want::Pass(WEIR_KV_STAT_PASS_NO_SERVER),
        ),
    );
    // md5 pool: routed in XDP like fnv1a_64, cache hits and invalidation too
    let kv = setup(
        KvLoadOptions {
            hash: HashKind::Md5,
            ..opts()
        },
        DistKind::Ketama,
        &[],
    );
    let foo = kv.dist.server_for_key(b"foo");
    check(&kv, &case("md5 get", req(b"get foo\r\n"), Want::Fwd(foo)));
    put(&kv, b"foo", 0, b"bar", None);
    check(
        &kv,
        &case(
            "md5 cache hit",
            req(b"get foo\r\n"),
            Want::Reply(reply_frame(
                Fam::V4,
                0x1234,
                &ascii_value(b"foo", 0, b"bar", None),
            )),
        ),
    );
    check(
        &kv,
        &case("md5 delete", req(b"delete foo\r\n"), Want::Fwd(foo))
            .ev(&[(WEIR_KV_STAT_INVALIDATE_HIT, 1)]),
    );
    check(
        &kv,
        &case("md5 get after delete", req(b"get foo\r\n"), Want::Fwd(foo)),
    );
    // hashes XDP does not compute, and hash tags: routing goes to the kernel,
    // but cache hits and invalidation stay in XDP
    for (hash, tag) in [
        (HashKind::Crc32a, None),
        (HashKind::Murmur, None),
        (HashKind::Md5, Some(*b"{}")),
        (HashKind::Fnv1a_64, Some(*b"{}")),
    ] {
        let kv = setup(
            KvLoadOptions {
                hash,
                hash_tag: tag,
                ..opts()
            },
            DistKind::Ketama,
            &[],
        );
        let name = format!("{hash} tag {tag:?}");
        check(
            &kv,
            &case(
                format!("{name} get"),
                req(b"get foo\r\n"),
                Want::Pass(WEIR_KV_STAT_PASS_HASH),
            ),
        );
        check(
            &kv,
            &case(
                format!("{name} multi-get"),
                req(b"get foo bar\r\n"),
                Want::Pass(WEIR_KV_STAT_PASS_HASH),
            ),
        );
        put(&kv, b"foo", 0, b"bar", None);
        check(
            &kv,
            &case(
                format!("{name} cache hit"),
                req(b"get foo\r\n"),
                Want::Reply(reply_frame(
                    Fam::V4,
                    0x1234,
                    &ascii_value(b"foo", 0, b"bar", None),
                )),
            ),
        );
        check(
            &kv,
            &case(
                format!("{name} delete"),
                req(b"delete foo\r\n"),
                Want::Pass(WEIR_KV_STAT_PASS_HASH),
            )
            .ev(&[(WEIR_KV_STAT_INVALIDATE_HIT, 1)]),
        );
        check(
            &kv,
            &case(
                format!("{name} get after delete"),
                req(b"get foo\r\n"),
                Want::Pass(WEIR_KV_STAT_PASS_HASH),
            ),
        );
    }
}

/// 60k mutated requests: only documented verdicts, counters add up, and
/// every TX frame is either the input with new MACs or a checksum-correct
/// cache reply; in an fnv1a_64 pool and in an md5 pool.
#[test]
fn fuzz_only_documented_actions() {
    for hash in [HashKind::Fnv1a_64, HashKind::Md5] {
        fuzz_with(hash);
    }
}

fn fuzz_with(hash: HashKind) {
    let kv = setup(KvLoadOptions { hash, ..opts() }, DistKind::Ketama, &[]);
    for k in ["foo", "bar", "k1", "hot"] {
        put(&kv, k.as_bytes(), 1, b"value", Some(9));
    }
    let seeds: Vec<Vec<u8>> = vec![
        b"get foo\r\n".to_vec(),
        b"gets foo bar k1\r\n".to_vec(),
        b"set foo 0 0 3\r\nabc\r\n".to_vec(),
        b"delete hot\r\n".to_vec(),
        b"incr k1 5\r\n".to_vec(),
        b"flush_all\r\n".to_vec(),
        bin_req(0x00, b"foo", &[], &[], 1),
        bin_req(0x0c, b"hot", &[], &[], 1),
        bin_req(0x01, b"foo", &[0; 8], b"abc", 1),
        b"mg foo v f s k Oab c\r\n".to_vec(),
        b"mg hot s v\r\n".to_vec(),
        b"ms foo 3 T0\r\nabc\r\n".to_vec(),
        b"md hot q\r\n".to_vec(),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let before = stats(&kv);
    let n = 60_000;
    let mut tally = std::collections::BTreeMap::new();
    for i in 0..n {
        let fam = if i % 5 == 0 { Fam::V6 } else { Fam::V4 };
        let mut payload = memcached_udp(rng.gen(), 0, 1, &seeds[rng.gen_range(0..seeds.len())]);
        for _ in 0..rng.gen_range(0..4) {
            match rng.gen_range(0..5) {
                0 if !payload.is_empty() => {
                    let j = rng.gen_range(0..payload.len());
                    payload[j] = rng.gen();
                }
                1 if !payload.is_empty() => {
                    let j = rng.gen_range(0..payload.len());
                    payload[j] = [b' ', b'\r', b'\n', 0x80, b'0', 0][rng.gen_range(0..6)];
                }
                2 => payload.truncate(rng.gen_range(0..=payload.len())),
                3 => payload.extend((0..rng.gen_range(0..40)).map(|_| rng.gen::<u8>())),
                _ if payload.len() >= 8 => {
                    let j = rng.gen_range(2..6);
                    payload[j] = rng.gen_range(0..3);
                }
                _ => {}
            }
        }
        let mut input = client_req(fam, &payload);
        if i % 7 == 0 {
            // damage the frame itself
            let j = rng.gen_range(0..input.len());
            input[j] = rng.gen();
            if rng.gen_bool(0.3) {
                input.truncate(rng.gen_range(14..input.len()));
            }
        }
        let (action, out) = run(&kv, &input);
        *tally.entry(format!("{action:?}")).or_insert(0u64) += 1;
        match action {
            Pass => assert_eq!(out, input, "a passed frame is unchanged"),
            Tx if out.len() == input.len() && out[12..] == input[12..] => {
                // forwarded: destination MAC is a server's, source the old destination
                assert!(
                    (0..kv.n).any(|s| out[..6] == server_mac(s)),
                    "forwarded to a server"
                );
                assert_eq!(out[6..12], input[..6]);
            }
            Tx => {
                // a cache reply: to the client, and every checksum right
                assert_eq!(out[..6], input[6..12]);
                let p = etherparse::SlicedPacket::from_ethernet(&out).expect("reply parses");
                verify_udp_checksum(&out, &p);
            }
            XdpAction::Drop => panic!("no drop is documented without redirect targets"),
            other => panic!("undocumented action {other:?}"),
        }
    }
    let _ = Drop;
    let after = stats(&kv);
    let rx = after.get(WEIR_KV_STAT_RX) - before.get(WEIR_KV_STAT_RX);
    let outcomes: u64 = kv::OUTCOMES.map(|i| after.get(i) - before.get(i)).sum();
    assert_eq!(rx, n as u64);
    assert_eq!(outcomes, rx, "every packet ends in exactly one outcome");
    eprintln!("fuzz {hash}: {tally:?}; {}", show(&delta(&before, &after)));
}

fn verify_udp_checksum(frame: &[u8], p: &etherparse::SlicedPacket<'_>) {
    use etherparse::{NetSlice, TransportSlice};
    let Some(TransportSlice::Udp(udp)) = &p.transport else {
        panic!("reply is UDP")
    };
    let payload = udp.payload();
    let want = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header().to_header();
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "IPv4 header checksum"
            );
            udp.to_header().calc_checksum_ipv4(&h, payload).unwrap()
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header().to_header();
            udp.to_header().calc_checksum_ipv6(&h, payload).unwrap()
        }
        _ => panic!("reply is IP"),
    };
    assert_eq!(udp.checksum(), want, "UDP checksum of {frame:02x?}");
}

/// Instructions the verifier processed to load the program (bpf_prog_info).
fn verified_insns(kv: &Kv) -> u32 {
    use libbpf_rs::libbpf_sys as sys;
    use std::os::fd::{AsFd, AsRawFd};
    // SAFETY: bpf_prog_info is plain data; the kernel fills at most `len` bytes.
    let mut info: sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sys::bpf_prog_info>() as u32;
    let fd = kv.kv.skel.progs.weir_kv.as_fd().as_raw_fd();
    // SAFETY: a valid program fd, and info/len describe a live buffer.
    let rc = unsafe { sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    assert_eq!(rc, 0, "bpf_prog_get_info_by_fd");
    info.verified_insns
}

/// Both pool hashes verify far below the 1M-instruction limit and forward a
/// get of every md5 block count (10 B 1 block, 60 B 2, 120 B 3, 250 B 5).
/// Their run time is `weir-lab bench kv-bpf`'s business, not a test's.
#[test]
fn md5_pool_verifies_within_budget_and_forwards_every_key_length() {
    let pools = [HashKind::Fnv1a_64, HashKind::Md5].map(|hash| {
        (
            hash,
            setup(KvLoadOptions { hash, ..opts() }, DistKind::Ketama, &[]),
        )
    });
    for (hash, kv) in &pools {
        let n = verified_insns(kv);
        assert!(n < 250_000, "{hash}: {n} verified instructions");
    }
    for len in [10usize, 60, 120, 250] {
        let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let pkt = req(&[b"get ", &key[..], b"\r\n"].concat());
        for (hash, kv) in &pools {
            let (action, out) = run(kv, &pkt);
            assert_eq!(action, Tx, "{hash} forwards a {len}-byte key");
            let server = kv.dist.server_for_key(&key);
            assert_eq!(out, l2_out(Fam::V4, &pkt[42..], server), "{hash}, {len} B");
        }
    }
}
