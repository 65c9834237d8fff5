//! Connection sync and shared tables against the real data plane (root):
//! two loaded `weir_lb`s that number their DIPs differently, their sync
//! nodes talking over UDP in a private network namespace.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use weir_abi::*;
use weir_cluster::apply::{apply_record, live_slots};
use weir_cluster::record::{ClassRecord, TableRecord};
use weir_cluster::sync::gate::BULK_INTERVAL;
use weir_cluster::sync::node::{SyncNode, SyncOptions};
use weir_cluster::sync::stats::Counters;
use weir_cluster::sync::wire::{open, ConnRecord, Datagram, Encoder, Key, Kind, MAX_DATAGRAM};
use weir_dataplane::loader::ConnTimeouts;
use weir_dataplane::sync_events::SyncMaps;
use weir_dataplane::testrun::XdpAction;

fn key() -> Key {
    Key::new((0..32).collect()).unwrap()
}

fn sync_of(node: &Node, name: &str, port: u16, budget: u32, announce: bool) -> SyncNode {
    SyncNode::start(
        SyncOptions {
            name: name.into(),
            key: key(),
            bind: SocketAddr::from(([127, 0, 0, 1], port)),
            pin_dir: node.pin_dir.clone(),
            budget,
            timeouts: ConnTimeouts::default(),
            realtime: false,
        },
        announce.then(|| SyncMaps::of(&node.lb.skel).unwrap()),
    )
    .unwrap()
}

fn client(i: u32) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8),
        40_000 + (i % 1000) as u16,
    )
}

/// A's slots: DIP i in slot i - 1; B's: another order, with gaps.
const A_SLOTS: [(u8, u32); 3] = [(1, 0), (2, 1), (3, 2)];
const B_SLOTS: [(u8, u32); 3] = [(1, 5), (2, 3), (3, 9)];

#[test]
fn an_install_is_announced_and_a_peer_installs_it_on_the_same_dip() {
    in_private_netns(|| {
        let a = Node::load(true, 4096);
        let b = Node::load(true, 4096);
        a.setup(&A_SLOTS);
        b.setup(&B_SLOTS);
        let sa = sync_of(&a, "a", 7001, 1000, true);
        let sb = sync_of(&b, "b", 7002, 1000, true);
        sa.peers().set(vec![("b".into(), sb.local_addr().unwrap())]);
        sb.peers().set(vec![("a".into(), sa.local_addr().unwrap())]);

        const N: u32 = 40;
        for i in 0..N {
            let (c, p) = client(i);
            a.connect(c, p);
        }
        assert!(
            wait_for(Duration::from_secs(3), || sb.counters().installed
                == u64::from(N)),
            "B installed {:?} of {N}",
            sb.counters()
        );
        let ca = sa.counters();
        assert_eq!(
            ca.announced,
            u64::from(N),
            "one announcement per install: {ca:?}"
        );
        assert_eq!((ca.announce_lost, ca.send_errors), (0, 0));
        let cb = sb.counters();
        assert_eq!(cb.dropped(), 0, "{cb:?}");
        assert_eq!(cb.lag_samples, u64::from(N));
        assert!(cb.lag_max_us.unwrap() < 1_000_000, "{cb:?}");

        let hits_before = b.stat(WEIR_STAT_CONN_HIT);
        let new_before = b.stat(WEIR_STAT_CONN_NEW);
        for i in 0..N {
            let (c, p) = client(i);
            let k = flow_key(c, p);
            let on_a = a.dip_of(&k).expect("A holds its connection");
            assert_eq!(
                b.dip_of(&k),
                Some(on_a),
                "flow {i}: B pins it to the same DIP"
            );
            // The connection's next packet, moved to B, is forwarded by the entry.
            assert_eq!(b.run(&tcp(c, p, false)), XdpAction::Tx);
        }
        assert_eq!(b.stat(WEIR_STAT_CONN_HIT) - hits_before, u64::from(N));
        assert_eq!(
            b.stat(WEIR_STAT_CONN_NEW),
            new_before,
            "nothing dispatched anew"
        );
        // B's own connections are announced back to A, which had none of them.
        let (c, p) = client(1000);
        b.connect(c, p);
        assert!(wait_for(Duration::from_secs(3), || sa.counters().installed == 1));
        assert_eq!(a.dip_of(&flow_key(c, p)), b.dip_of(&flow_key(c, p)));
    });
}

#[test]
fn bad_datagrams_are_counted_and_a_flood_cannot_evict_established_entries() {
    in_private_netns(|| {
        const TABLE: u32 = 1024;
        const BUDGET: u32 = 256;
        let b = Node::load(false, TABLE);
        b.setup(&B_SLOTS);
        // 500 of B's own established connections.
        let own: Vec<weir_flow_key> = (0..500)
            .map(|i| flow_key(Ipv4Addr::new(10, 8, (i >> 8) as u8, i as u8), 50_000))
            .collect();
        for k in &own {
            b.maps
                .put_conn(k, &weir_dataplane::conntrack::new_entry(5, 1, 1))
                .unwrap();
        }
        let sb = sync_of(&b, "b", 7012, BUDGET, false);
        let to = sb.local_addr().unwrap();
        let s = UdpSocket::bind("127.0.0.1:7013").unwrap();
        let mut peer = Encoder::new(key(), "a", 1);
        let rec = |i: u32| {
            let (c, p) = client(i);
            ConnRecord {
                key: flow_key(c, p),
                dip_addr: weir_core::flow::addr_words(dip_addr(2)).0,
                dip_port: 0,
                close_flags: 0,
                idle_us: 10,
            }
        };
        // A flood of valid announcements: far more than B lets peers hold.
        let flood: Vec<ConnRecord> = (0..2000).map(rec).collect();
        let grams = peer.conns(&flood, 0);
        for g in &grams {
            s.send_to(g, to).unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        let want = flood.len() as u64;
        assert!(
            wait_for(Duration::from_secs(5), || sb.counters().received_records
                == want),
            "{:?}",
            sb.counters()
        );
        let c = sb.counters();
        assert_eq!(c.installed, u64::from(BUDGET), "{c:?}");
        assert_eq!(c.dropped_full, want - u64::from(BUDGET), "{c:?}");
        assert_eq!(c.peer_entries, u64::from(BUDGET));
        for k in &own {
            assert!(
                b.maps.conn(k).unwrap().is_some(),
                "an established entry was evicted"
            );
        }

        // Bad datagrams: each counted once, none installs anything.
        let installed = c.installed;
        let stranger = Key::new(vec![9; 32]).unwrap();
        s.send_to(
            &Encoder::new(stranger, "a", 1).conns(&[rec(5000)], 0)[0],
            to,
        )
        .unwrap();
        s.send_to(&grams[0], to).unwrap();
        let g = peer.conns(&[rec(5001)], 0).remove(0);
        s.send_to(&g[..g.len() - 3], to).unwrap();
        s.send_to(&vec![0u8; MAX_DATAGRAM + 100], to).unwrap();
        s.send_to(b"not a sync datagram", to).unwrap();
        assert!(wait_for(Duration::from_secs(3), || sb
            .counters()
            .received_datagrams
            == grams.len() as u64 + 5));
        let c = sb.counters();
        assert_eq!(
            (
                c.dropped_unauthenticated,
                c.dropped_replayed,
                c.dropped_malformed,
                c.dropped_oversized
            ),
            (1, 1, 2, 1),
            "{c:?}"
        );
        assert_eq!(c.installed, installed);
    });
}

/// An IPv6 dsr VIP, VIP6:80 (id 1), with DIPs fd00:77:<i>::2 in the given
/// slots: IPv6 connections sit in their own tables (`conns`, not `conns4`).
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1);
const A_SLOTS6: [(u8, u32); 2] = [(1, 20), (2, 21)];
const B_SLOTS6: [(u8, u32); 2] = [(1, 31), (2, 30)];

fn setup_v6(node: &Node, dips: &[(u8, u32)]) {
    node.setup_service(1, IpAddr::V6(VIP6), dips, |i| {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, u16::from(i), 0, 0, 0, 0, 2))
    });
}

fn client6(i: u32) -> (Ipv6Addr, u16) {
    (
        Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, (i >> 16) as u16, i as u16),
        40_000 + (i % 1000) as u16,
    )
}

fn flow_key6(client: Ipv6Addr, sport: u16) -> weir_flow_key {
    flow_key_to(IpAddr::V6(client), IpAddr::V6(VIP6), sport)
}

/// A client's SYN and then its ACK to VIP6.
fn connect6(node: &Node, client: Ipv6Addr, sport: u16) {
    for syn in [true, false] {
        let b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv6(client.octets(), VIP6.octets(), 64)
            .tcp(sport, VIP_PORT, 1000, 64_000);
        let b = if syn { b.syn() } else { b.ack(1) };
        let mut frame = Vec::new();
        b.write(&mut frame, &[]).unwrap();
        assert_eq!(node.run(&frame), XdpAction::Tx);
    }
}

#[test]
fn a_joining_node_learns_every_established_connection() {
    in_private_netns(|| {
        let a = Node::load(false, 4096);
        let b = Node::load(false, 4096);
        a.setup(&A_SLOTS);
        b.setup(&B_SLOTS);
        setup_v6(&a, &A_SLOTS6);
        setup_v6(&b, &B_SLOTS6);
        // 300 connections, 100 of them IPv6.
        const N: u32 = 300;
        const N6: u32 = 100;
        for i in 0..N - N6 {
            let (c, p) = client(i);
            a.connect(c, p);
        }
        for i in 0..N6 {
            let (c, p) = client6(i);
            connect6(&a, c, p);
        }
        assert_eq!(a.maps.conn_count(), N as usize);
        let sa = sync_of(&a, "a", 7021, 4096, false);
        let sb = sync_of(&b, "b", 7022, 4096, false);
        sb.peers().set(vec![("a".into(), sa.local_addr().unwrap())]);
        // A serves members only: B is registered (the agent's view).
        sa.peers().set(vec![("b".into(), sb.local_addr().unwrap())]);
        let started = Instant::now();
        let r = sb.join(Duration::from_secs(3));
        assert_eq!(r.from.as_deref(), Some("a"), "{r:?}");
        assert_eq!((r.total, r.received), (u64::from(N), u64::from(N)), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(sb.counters().installed, u64::from(N));
        for i in 0..N - N6 {
            let (c, p) = client(i);
            let k = flow_key(c, p);
            assert_eq!(b.dip_of(&k), a.dip_of(&k), "flow {i}");
        }
        for i in 0..N6 {
            let (c, p) = client6(i);
            let k = flow_key6(c, p);
            assert!(a.dip_of(&k).is_some(), "IPv6 flow {i} on a");
            assert_eq!(b.dip_of(&k), a.dip_of(&k), "IPv6 flow {i}");
        }
        assert!(wait_for(Duration::from_secs(1), || sa
            .counters()
            .bulks_served
            == 1));
        let ca = sa.counters();
        // Asked again before its challenge came back (a loaded machine),
        // a peer challenges again with the same nonce: one bulk, and no
        // proof is ever stale.
        assert_eq!(
            (ca.bulks_served, ca.bulk_refused_stale_challenge),
            (1, 0),
            "{ca:?}"
        );
        assert!(ca.bulk_challenges >= 1, "{ca:?}");
        // Nobody to ask: the join ends empty-handed within its time.
        let lonely = sync_of(&b, "c", 7023, 10, false);
        lonely
            .peers()
            .set(vec![("x".into(), SocketAddr::from(([127, 0, 0, 1], 7099)))]);
        let r = lonely.join(Duration::from_millis(300));
        assert_eq!((r.from, r.total), (None, 0));
    });
}

#[test]
fn nodes_that_apply_the_same_record_dispatch_alike() {
    let a = Node::load(false, 4096);
    let b = Node::load(false, 4096);
    a.setup(&A_SLOTS);
    b.setup(&B_SLOTS);
    // B's version word has the parity of the record's: the table must go in
    // through the other slot first.
    b.maps
        .publish_table(0, 4, &weir_core::dispatch::awfd::AwfdTable::default())
        .unwrap();
    let rec = TableRecord {
        vip: "web".into(),
        vip_ref: vip_ref(),
        version: 6,
        classes: vec![
            ClassRecord {
                weight: 3,
                members: vec![dip_ref(3), dip_ref(1)],
            },
            ClassRecord {
                weight: 1,
                members: vec![dip_ref(2)],
            },
        ],
        leader: "a".into(),
        published_unix_ms: 0,
    };
    for n in [&a, &b] {
        assert_eq!(
            apply_record(&n.maps, 0, &vip_ref(), &rec).unwrap(),
            weir_cluster::apply::Applied::Done
        );
        assert_eq!(n.maps.table_version(0).unwrap(), 6);
        let slots = live_slots(&n.maps, 0).unwrap();
        assert_eq!(n.maps.dip(slots[&dip_ref(1)]).unwrap().unwrap().weight, 3);
        assert_eq!(n.maps.dip(slots[&dip_ref(2)]).unwrap().unwrap().weight, 1);
    }
    let mut per_dip: HashMap<String, u32> = HashMap::new();
    for i in 0..2000 {
        let (c, p) = client(i);
        a.connect(c, p);
        b.connect(c, p);
        let k = flow_key(c, p);
        let on_a = a.dip_of(&k).unwrap();
        assert_eq!(b.dip_of(&k), Some(on_a), "flow {i}");
        assert_eq!(a.maps.conn(&k).unwrap().unwrap().table_version, 6);
        *per_dip.entry(on_a.address.to_string()).or_default() += 1;
    }
    // Weights 3, 3 and 1 of 7: each DIP gets new connections.
    assert_eq!(per_dip.len(), 3, "{per_dip:?}");
    // A record naming a DIP this node does not have is refused, table kept.
    let mut skewed = rec.clone();
    skewed.version = 7;
    skewed.classes[1].members.push(dip_ref(9));
    assert!(matches!(
        apply_record(&b.maps, 0, &vip_ref(), &skewed).unwrap(),
        weir_cluster::apply::Applied::Skewed(_)
    ));
    assert_eq!(b.maps.table_version(0).unwrap(), 6);
}

/// Every datagram that reaches `s` until it has been quiet for `quiet`
/// (at most 10,000 datagrams or 10 s).
fn drain(s: &UdpSocket, quiet: Duration) -> Vec<Vec<u8>> {
    s.set_read_timeout(Some(quiet)).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    while got.len() < 10_000 && Instant::now() < until {
        match s.recv_from(&mut buf) {
            Ok((n, _)) => got.push(buf[..n].to_vec()),
            Err(_) => break,
        }
    }
    got
}

/// The next datagram to reach `s` (within 3 s: a loaded machine may take
/// a while to start a bulk).
fn next_datagram(s: &UdpSocket) -> Datagram {
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let (n, _) = s.recv_from(&mut buf).expect("a datagram within 3 s");
    open(&buf[..n], &key()).unwrap()
}

/// A bulk's datagrams at `s`, up to and with its end marker (at most
/// 10,000 datagrams).
fn bulk_until_done(s: &UdpSocket) -> Vec<Datagram> {
    let mut got = Vec::new();
    while got.len() < 10_000 {
        let d = next_datagram(s);
        let done = d.kind == Kind::BulkDone;
        got.push(d);
        if done {
            break;
        }
    }
    got
}

fn opened(grams: &[Vec<u8>]) -> Vec<Datagram> {
    grams.iter().map(|g| open(g, &key()).unwrap()).collect()
}

/// Records in `grams` (bulk or live).
fn records_in(grams: &[Datagram]) -> usize {
    grams.iter().map(|d| d.records.len()).sum()
}

/// A node with `n` established connections, serving bulks on `port`.
fn server(port: u16, name: &str, n: u32) -> (Node, SyncNode) {
    let node = Node::load(false, 4096);
    node.setup(&A_SLOTS);
    for i in 0..n {
        let (c, p) = client(i);
        node.connect(c, p);
    }
    let s = sync_of(&node, name, port, 4096, false);
    (node, s)
}

/// The test plays member `j` at `j_sock`: a legitimate join with `to`.
/// Returns the request and the proof it sent, and the records it got.
fn join_by_hand(j_sock: &UdpSocket, j: &mut Encoder, to: SocketAddr) -> (Vec<u8>, Vec<u8>, usize) {
    let request = j.bulk_request(0);
    j_sock.send_to(&request, to).unwrap();
    let challenge = next_datagram(j_sock);
    assert_eq!(challenge.kind, Kind::BulkChallenge, "{challenge:?}");
    let proof = j.bulk_proof(&challenge.nonce.unwrap(), 0);
    j_sock.send_to(&proof, to).unwrap();
    let bulk = bulk_until_done(j_sock);
    (request, proof, records_in(&bulk))
}

#[test]
fn a_captured_join_replayed_to_every_node_sends_no_record() {
    in_private_netns(|| {
        const N: u32 = 220;
        let servers: Vec<(Node, SyncNode)> = [("a", 7031), ("b", 7032), ("c", 7033)]
            .iter()
            .map(|(name, port)| server(*port, name, N))
            .collect();
        // Member j's registered address, and an address that is no member's.
        let j_sock = UdpSocket::bind("127.0.0.1:7039").unwrap();
        let j_addr = j_sock.local_addr().unwrap();
        let outsider = UdpSocket::bind("127.0.0.2:7039").unwrap();
        let addrs: Vec<(String, SocketAddr)> = servers
            .iter()
            .zip(["a", "b", "c"])
            .map(|((_, s), n)| (n.to_string(), s.local_addr().unwrap()))
            .collect();
        for (_, s) in &servers {
            let mut members = addrs.clone();
            members.push(("j".into(), j_addr));
            s.peers().set(members);
        }
        let mut j = Encoder::new(key(), "j", 1);
        let (request, proof, got) = join_by_hand(&j_sock, &mut j, addrs[0].1);
        assert_eq!(got, N as usize, "the legitimate join brings every record");

        // The captured request and proof, replayed to every node, from the
        // outsider and from j's own (spoofable) address.
        for (_, to) in &addrs {
            for from in [&outsider, &j_sock] {
                from.send_to(&request, to).unwrap();
                from.send_to(&proof, to).unwrap();
            }
        }
        // From the outsider: not j's address, wherever it goes. From j's
        // address: replays where j sent them; elsewhere new, so a challenge
        // to j, and the old proof's nonce is not the one issued.
        let verdicts = |c: &Counters| {
            (
                c.bulk_refused_address_mismatch,
                c.bulk_challenges,
                c.bulk_refused_stale_challenge,
                c.dropped_replayed,
            )
        };
        for (i, (_, s)) in servers.iter().enumerate() {
            let want = if i == 0 { (2, 1, 0, 2) } else { (2, 1, 1, 0) };
            assert!(
                wait_for(Duration::from_secs(3), || verdicts(&s.counters()) == want),
                "node {i}: want {want:?}, {:?}",
                s.counters()
            );
        }
        let to_outsider = drain(&outsider, Duration::from_millis(300));
        assert!(to_outsider.is_empty(), "{} datagrams", to_outsider.len());
        // j hears at most a challenge from the nodes the request was new to
        // (b and c, once each), which it ignores: no record anywhere.
        let to_j = opened(&drain(&j_sock, Duration::from_millis(300)));
        assert_eq!(records_in(&to_j), 0, "{to_j:?}");
        assert!(
            to_j.iter().all(|d| d.kind == Kind::BulkChallenge),
            "{to_j:?}"
        );
        assert_eq!(to_j.len(), 2, "{to_j:?}");
        for (i, (_, s)) in servers.iter().enumerate() {
            let c = s.counters();
            assert_eq!(
                (c.bulks_served, c.bulk_records_sent),
                if i == 0 { (1, u64::from(N)) } else { (0, 0) },
                "node {i}: {c:?}"
            );
        }
    });
}

#[test]
fn strangers_and_other_addresses_get_no_record_and_the_bulk_goes_to_the_registered_address() {
    in_private_netns(|| {
        const N: u32 = 220;
        let (_a, sa) = server(7041, "a", N);
        let to = sa.local_addr().unwrap();
        let j_sock = UdpSocket::bind("127.0.0.1:7049").unwrap();
        let outsider = UdpSocket::bind("127.0.0.2:7049").unwrap();
        sa.peers()
            .set(vec![("j".into(), j_sock.local_addr().unwrap())]);
        // Waits until the server's refusals are (unknown member, address
        // mismatch, rate limited).
        let refused = |want: (u64, u64, u64)| {
            let got = |c: Counters| {
                (
                    c.bulk_refused_unknown_member,
                    c.bulk_refused_address_mismatch,
                    c.bulk_refused_rate_limited,
                )
            };
            assert!(
                wait_for(Duration::from_secs(3), || got(sa.counters()) == want),
                "want {want:?}: {:?}",
                sa.counters()
            )
        };

        // A node that is not a member, with the cluster's key.
        let mut z = Encoder::new(key(), "z", 1);
        outsider.send_to(&z.bulk_request(0), to).unwrap();
        // j's name and key, from another address.
        let mut forger = Encoder::new(key(), "j", 7);
        outsider.send_to(&forger.bulk_request(0), to).unwrap();
        refused((1, 1, 0));
        let c = sa.counters();
        assert_eq!(c.sent_datagrams, 0, "nothing sent anywhere: {c:?}");

        // j asks; the challenge goes to j's address. A forger that saw the
        // nonce answers from elsewhere: refused, and j's own answer still
        // works. The bulk goes to j's registered address only.
        let mut j = Encoder::new(key(), "j", 1);
        j_sock.send_to(&j.bulk_request(0), to).unwrap();
        let challenge = next_datagram(&j_sock);
        assert_eq!(challenge.kind, Kind::BulkChallenge, "{challenge:?}");
        let nonce = challenge.nonce.unwrap();
        outsider.send_to(&forger.bulk_proof(&nonce, 0), to).unwrap();
        refused((1, 2, 0));
        let proof_sent = Instant::now();
        j_sock.send_to(&j.bulk_proof(&nonce, 0), to).unwrap();
        let bulk = bulk_until_done(&j_sock);
        let bulk_ended = Instant::now();
        assert_eq!(records_in(&bulk), N as usize);
        assert_eq!(bulk.last().unwrap().bulk_total, u64::from(N));

        // Asked again at once: refused until BULK_INTERVAL has passed.
        assert!(
            proof_sent.elapsed() < BULK_INTERVAL,
            "too slow to ask within the interval"
        );
        j_sock.send_to(&j.bulk_request(0), to).unwrap();
        refused((1, 2, 1));
        assert!(drain(&j_sock, Duration::from_millis(100)).is_empty());
        let to_outsider = drain(&outsider, Duration::from_millis(100));
        assert!(to_outsider.is_empty(), "{} datagrams", to_outsider.len());
        // Sent in all: one challenge, the bulk's datagrams and its end.
        let c = sa.counters();
        assert_eq!(c.sent_datagrams, 1 + bulk.len() as u64, "{c:?}");
        assert_eq!((c.bulks_served, c.bulk_challenges), (1, 1), "{c:?}");
        // Once the interval is over, j is challenged again.
        std::thread::sleep(BULK_INTERVAL.saturating_sub(bulk_ended.elapsed()));
        j_sock.send_to(&j.bulk_request(0), to).unwrap();
        assert_eq!(next_datagram(&j_sock).kind, Kind::BulkChallenge);
        assert!(drain(&j_sock, Duration::from_millis(100)).is_empty());
    });
}

#[test]
fn a_join_waits_for_a_peer_to_learn_of_its_registration() {
    in_private_netns(|| {
        const N: u32 = 50;
        let (a, sa) = server(7051, "a", N);
        let b = Node::load(false, 4096);
        b.setup(&B_SLOTS);
        let sb = sync_of(&b, "b", 7052, 4096, false);
        sb.peers().set(vec![("a".into(), sa.local_addr().unwrap())]);
        let b_addr = sb.local_addr().unwrap();
        // A's etcd watch shows B's registration a little after B asks.
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(250));
                sa.peers().set(vec![("b".into(), b_addr)]);
            });
            sb.join(Duration::from_secs(3))
        });
        assert_eq!(r.from.as_deref(), Some("a"), "{r:?}");
        assert_eq!((r.total, r.received), (u64::from(N), u64::from(N)), "{r:?}");
        // The server counts its bulk after the end marker has left.
        assert!(wait_for(Duration::from_secs(1), || sa
            .counters()
            .bulks_served
            == 1));
        let ca = sa.counters();
        assert!(ca.bulk_refused_unknown_member >= 1, "asked before: {ca:?}");
        // Asked again before its challenge came back (a loaded machine),
        // a peer challenges again with the same nonce: one bulk, and no
        // proof is ever stale.
        assert_eq!(
            (ca.bulks_served, ca.bulk_refused_stale_challenge),
            (1, 0),
            "{ca:?}"
        );
        assert!(ca.bulk_challenges >= 1, "{ca:?}");
        for i in 0..N {
            let (c, p) = client(i);
            let k = flow_key(c, p);
            assert!(a.dip_of(&k).is_some(), "flow {i} on a");
            assert_eq!(b.dip_of(&k), a.dip_of(&k), "flow {i}");
        }
    });
}
