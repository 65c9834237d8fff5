//! QUIC VIPs in `weir_lb` through BPF_PROG_TEST_RUN: packets routed by the
//! server ID in their destination connection ID (QUIC-LB plaintext), and
//! everything that must fall back to the 5-tuple connection table.
//!
//! Packets are hand-built QUIC v1 and v2 headers (`weir_testkit::quic`);
//! connection IDs come from `weir_core::quic_lb` (the layout backends
//! encode); the DIP a fallback goes to is predicted by weir-core's AWFD
//! table over the flow hash, and the expected frames are built with
//! `weir_core::wire`. Needs root (BPF).

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use libbpf_rs::MapCore;
use rand::{Rng, SeedableRng};
use weir_abi::*;
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::Proto;
use weir_core::flow_hash::{flow_hash, DEFAULT_SEED};
use weir_core::quic_lb::{
    classify, entry_handshake, handshake_id, opens_new_connection, CidLayout, Classified,
};
use weir_dataplane::maps::QuicCounters;
use weir_dataplane::testrun::XdpAction::Tx;
use weir_testkit::quic::{
    long_header, short_header, version_negotiation, LongType, QUIC_V1, QUIC_V2,
};

/// The QUIC VIPs these tests add to the fixture: (id, address, mode, DIPs).
const QUIC_VIPS: [(u32, &str, u32, [u32; 3]); 4] = [
    (12, "10.0.0.110", DSR, [1, 2, 3]),
    (13, "10.0.0.111", NAT, [1, 2, 3]),
    (14, "2001:db8::110", DSR, [11, 12, 13]),
    (15, "2001:db8::111", NAT, [11, 12, 13]),
];
const PORT: u16 = 443;

fn client_addr(vip: u32) -> &'static str {
    if vip < 14 {
        "192.0.2.50"
    } else {
        "2001:db8:c::50"
    }
}

/// The server ID DIP `dip` gets in a VIP whose IDs are `len` octets.
fn sid(dip: u32, len: u8) -> Vec<u8> {
    (0..len).map(|i| (dip as u8) << 4 | i).collect()
}

struct Quic {
    h: Harness,
    layout: CidLayout,
}

impl Quic {
    /// The fixture plus the QUIC VIPs, every DIP with its server ID.
    fn new(layout: CidLayout) -> Quic {
        let q = Quic {
            h: Harness::new(&test_options()),
            layout,
        };
        q.configure(layout, &[]);
        q
    }

    fn vip(&self, id: u32) -> (IpAddr, u32, [u32; 3]) {
        let (_, addr, mode, dips) = QUIC_VIPS.iter().find(|v| v.0 == id).unwrap();
        (ip(addr), *mode, *dips)
    }

    /// Writes the QUIC VIPs with `layout` and the server IDs of every DIP
    /// but those in `without`.
    fn configure(&self, layout: CidLayout, without: &[u32]) {
        self.assign(layout, |_, d| (!without.contains(&d)).then_some(d));
    }

    /// Writes the QUIC VIPs with `layout`; DIP `d` of VIP `v` gets the
    /// server ID `sid(id_of(v, d))`, none when `id_of` gives none.
    fn assign(&self, layout: CidLayout, id_of: impl Fn(u32, u32) -> Option<u32>) {
        let mut ids = std::collections::HashMap::new();
        for (id, addr, mode, dips) in QUIC_VIPS {
            let v = weir_testkit::fixture::Vip {
                id,
                addr: ip(addr),
                port: PORT,
                proto: Proto::Udp,
                mode,
                weights: Some(dips.iter().map(|d| (*d, 1)).collect()),
            };
            let abi = weir_vip {
                quic_sid_len: layout.server_id_len,
                quic_config_id: layout.config_id,
                ..v.abi()
            };
            self.h.maps.put_vip(&v.key(), &abi).unwrap();
            if self.h.maps.table_version(id).unwrap() == 0 {
                self.h.maps.publish_table(id, 1, &v.table()).unwrap();
            }
            for (d, owned) in dips.iter().filter_map(|d| id_of(id, *d).map(|o| (d, o))) {
                let mut key = weir_quic_sid_key {
                    vip_id: id,
                    ..Default::default()
                };
                let s = sid(owned, layout.server_id_len);
                key.sid[..s.len()].copy_from_slice(&s);
                let gen = self.h.maps.dip(*d).unwrap().unwrap().gen;
                ids.insert(
                    key,
                    weir_quic_route {
                        dip_id: *d,
                        dip_gen: gen,
                    },
                );
            }
        }
        self.h.maps.sync_quic_server_ids(&ids).unwrap();
    }

    /// A connection ID of `dip`'s, `len` octets long in all.
    fn cid(&self, dip: u32, len: usize) -> Vec<u8> {
        let s = sid(dip, self.layout.server_id_len);
        let nonce: Vec<u8> = (0..len - 1 - s.len()).map(|i| 0x90 + i as u8).collect();
        self.layout.encode(&s, &nonce)
    }

    /// A client datagram to QUIC VIP `vip` from source port `sport`.
    fn datagram(&self, vip: u32, sport: u16, payload: &[u8]) -> Frame {
        let (addr, _, _) = self.vip(vip);
        udp(client_addr(vip), sport, &addr.to_string(), PORT).payload(payload)
    }

    /// The DIP the 5-tuple table gives a new flow `f` to `vip`.
    fn predict(&self, vip: u32, f: &Frame) -> Dip {
        let (_, _, dips) = self.vip(vip);
        let weights: Vec<(u32, u32)> = dips.iter().map(|d| (*d, 1)).collect();
        let table = AwfdTable::from_weights(&weights).unwrap();
        let id = table
            .select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap();
        self.h.fx.dip(id).clone()
    }

    fn counters(&self, vip: u32, dip: u32) -> (QuicCounters, QuicCounters) {
        (
            self.h.maps.vip_quic(vip).unwrap(),
            self.h.maps.dip_quic(dip).unwrap(),
        )
    }

    /// Runs `f` and checks that it went to `dip` (output frame, verdict,
    /// counters), with `events` in `enum weir_stat` and the QUIC counters of
    /// the VIP and the DIP each up by `want` (routed, fallback, unknown),
    /// no 5-tuple entry taken by a new connection.
    fn expect(&self, name: &str, vip: u32, f: &Frame, dip: &Dip, events: &[u32], want: [u64; 3]) {
        self.expect_taking(name, vip, f, dip, events, want, None);
    }

    /// `expect`, and `reused_tuple` up by one for the VIP and for DIP
    /// `taken` when `f` is a new connection that took the live 5-tuple
    /// entry `taken` had (else up for none).
    #[allow(clippy::too_many_arguments)]
    fn expect_taking(
        &self,
        name: &str,
        vip: u32,
        f: &Frame,
        dip: &Dip,
        events: &[u32],
        want: [u64; 3],
        taken: Option<u32>,
    ) {
        let (_, mode, _) = self.vip(vip);
        let out = if mode == NAT {
            nat_out(f, dip)
        } else {
            dsr_out(f, dip)
        };
        let reused = |d: u32| self.h.maps.dip_quic(d).unwrap().reused_tuple;
        let reused_before = taken.map(reused);
        let before = self.counters(vip, dip.id);
        let case = Case::new(
            format!("{name} -> DIP {}", dip.id),
            f.bytes(),
            Tx,
            WEIR_STAT_TX,
        )
        .output(out.bytes())
        .events(events);
        run_cases(&self.h, vec![case]);
        let after = self.counters(vip, dip.id);
        let delta = |a: QuicCounters, b: QuicCounters| {
            [
                a.cid_routed - b.cid_routed,
                a.cid_fallback - b.cid_fallback,
                a.cid_unknown - b.cid_unknown,
            ]
        };
        assert_eq!(
            delta(after.0, before.0),
            want,
            "{name}: VIP {vip}'s QUIC counters"
        );
        assert_eq!(
            delta(after.1, before.1),
            want,
            "{name}: DIP {}'s QUIC counters",
            dip.id
        );
        assert_eq!(
            after.0.reused_tuple - before.0.reused_tuple,
            u64::from(taken.is_some()),
            "{name}: VIP {vip}'s reused_tuple"
        );
        if taken != Some(dip.id) {
            assert_eq!(
                after.1.reused_tuple, before.1.reused_tuple,
                "{name}: DIP {}'s reused_tuple",
                dip.id
            );
        }
        if let (Some(t), Some(b)) = (taken, reused_before) {
            assert_eq!(reused(t) - b, 1, "{name}: DIP {t}'s reused_tuple");
        }
        if mode == NAT {
            // The reply of a client at a new address finds its way back.
            let (_, _, _) = self.vip(vip);
            let rkey = weir_core::flow::FlowTuple {
                src: dip.addr,
                dst: f.src,
                sport: dip.port_for(f.dport),
                dport: f.sport,
                proto: Proto::Udp,
            }
            .key();
            let r = self.h.maps.rev_nat(&rkey).unwrap();
            assert_eq!(r.map(|r| r.vip_id), Some(vip), "{name}: reverse entry");
        }
    }

    /// `f` routed by its connection ID to `dip`.
    fn routed(&self, name: &str, vip: u32, f: &Frame, dip: u32) {
        let d = self.h.fx.dip(dip).clone();
        self.expect(name, vip, f, &d, &[], [1, 0, 0]);
    }

    /// `f`, the first datagram of its 5-tuple, left to the connection
    /// table (`unknown`: with a server ID no live DIP owns).
    fn fallback(&self, name: &str, vip: u32, f: &Frame, unknown: bool) {
        let d = self.predict(vip, f);
        let events = [WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW];
        self.expect(name, vip, f, &d, &events, [0, 1, u64::from(unknown)]);
    }
}

const LAYOUT: CidLayout = CidLayout {
    config_id: 1,
    server_id_len: 4,
};

#[test]
fn short_headers_go_to_the_dip_their_server_id_names_at_every_length() {
    let mut q = Quic::new(LAYOUT);
    let mut sport = 20000;
    for len in 1..=weir_core::quic_lb::SERVER_ID_MAX as u8 {
        for config_id in [0, 6] {
            q.layout = CidLayout {
                config_id,
                server_id_len: len,
            };
            q.configure(q.layout, &[]);
            for (vip, _, _, dips) in QUIC_VIPS {
                let dip = dips[1];
                // Every CID length that holds the first octet and the server ID.
                for cid_len in 1 + usize::from(len)..=weir_core::quic_lb::CID_MAX {
                    sport += 1;
                    // A new source port each time: a migrating client.
                    let f = q.datagram(vip, sport, &short_header(&q.cid(dip, cid_len)));
                    let name = format!(
                        "v{vip} short, server ID {len} octets, config {config_id}, CID {cid_len}"
                    );
                    q.routed(&name, vip, &f, dip);
                }
            }
        }
    }
}

#[test]
fn long_headers_route_by_a_server_chosen_dcid_and_dispatch_a_client_chosen_one() {
    let q = Quic::new(LAYOUT);
    let mut sport = 30000;
    let mut next = || {
        sport += 1;
        sport
    };
    for (vip, _, _, dips) in QUIC_VIPS {
        for version in [QUIC_V1, QUIC_V2] {
            for dcid_len in 0..=weir_core::quic_lb::CID_MAX {
                let name = format!("v{vip} version {version:#x} Handshake, DCID {dcid_len}");
                if dcid_len > usize::from(LAYOUT.server_id_len) {
                    let pkt = long_header(
                        LongType::Handshake,
                        version,
                        &q.cid(dips[2], dcid_len),
                        &[7; 8],
                    );
                    q.routed(&name, vip, &q.datagram(vip, next(), &pkt), dips[2]);
                } else {
                    // Too short to hold a server ID (it starts like one).
                    let dcid: Vec<u8> = (0..dcid_len)
                        .map(|i| if i == 0 { 0x20 } else { dips[2] as u8 })
                        .collect();
                    let pkt = long_header(LongType::Handshake, version, &dcid, &[7; 8]);
                    q.fallback(&name, vip, &q.datagram(vip, next(), &pkt), false);
                }
            }
            // A client's first Initial: a random DCID, whatever it decodes
            // to, is a new connection for the table (not an unknown ID).
            let random = [0x3f, 0xee, 0xee, 0xee, 0xee, 1, 2, 3];
            for kind in [LongType::Initial, LongType::ZeroRtt] {
                let pkt = long_header(kind, version, &random, &[7; 8]);
                let f = q.datagram(vip, next(), &pkt);
                q.fallback(
                    &format!("v{vip} {version:#x} {kind:?}, client's DCID"),
                    vip,
                    &f,
                    false,
                );
            }
            // A server-chosen DCID naming no DIP is unknown.
            let unknown = long_header(LongType::Handshake, version, &random, &[7; 8]);
            q.fallback(
                &format!("v{vip} {version:#x} Handshake, unknown ID"),
                vip,
                &q.datagram(vip, next(), &unknown),
                true,
            );
            // An Initial after a Retry carries the server's CID: routed.
            let pkt = long_header(LongType::Initial, version, &q.cid(dips[0], 8), &[7; 8]);
            q.routed(
                &format!("v{vip} {version:#x} Initial to a server CID"),
                vip,
                &q.datagram(vip, next(), &pkt),
                dips[0],
            );
        }
    }
}

#[test]
fn unknown_ids_fall_back_and_a_removed_dip_is_reported_not_rerouted() {
    let q = Quic::new(LAYOUT);
    for (vip, _, _, dips) in QUIC_VIPS {
        let mut sport = 40000 + vip as u16 * 100;
        let mut next = || {
            sport += 1;
            sport
        };
        // An ID no DIP owns: the table decides, and the next datagram of
        // the 5-tuple hits its entry.
        let stranger = q.layout.encode(&[0xde, 0xad, 0xbe, 0xef], &[0; 8]);
        let f = q.datagram(vip, next(), &short_header(&stranger));
        q.fallback(&format!("v{vip} unknown server ID"), vip, &f, true);
        let d = q.predict(vip, &f);
        q.expect(
            &format!("v{vip} unknown server ID again"),
            vip,
            &f,
            &d,
            &[WEIR_STAT_CONN_HIT],
            [0, 1, 1],
        );

        // Drained (weight 0, still live): its connections stay.
        let (addr, mode, _) = q.vip(vip);
        let drained = weir_testkit::fixture::Vip {
            id: vip,
            addr,
            port: PORT,
            proto: Proto::Udp,
            mode,
            weights: Some(vec![(dips[0], 1), (dips[1], 0), (dips[2], 1)]),
        };
        let v = q.h.maps.table_version(vip).unwrap() + 1;
        q.h.maps.publish_table(vip, v, &drained.table()).unwrap();
        let f = q.datagram(vip, next(), &short_header(&q.cid(dips[1], 12)));
        q.routed(
            &format!("v{vip} drained DIP keeps its connections"),
            vip,
            &f,
            dips[1],
        );
    }

    // DIP 2 and 12 removed: apply takes their IDs out; their packets are
    // unknown and go by the 5-tuple table, not to whoever has the ID next.
    q.configure(LAYOUT, &[2, 12]);
    for (vip, _, _, dips) in QUIC_VIPS {
        let f = q.datagram(vip, 41999, &short_header(&q.cid(dips[1], 12)));
        // The drained table no longer names the removed DIP.
        let weights = [(dips[0], 1), (dips[2], 1)];
        let want = AwfdTable::from_weights(&weights)
            .unwrap()
            .select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap();
        let d = q.h.fx.dip(want).clone();
        q.expect(
            &format!("v{vip} removed DIP's ID"),
            vip,
            &f,
            &d,
            &[WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW],
            [0, 1, 1],
        );
    }
    // A slot reused by another DIP (new generation) with the old ID still
    // written: unknown as well.
    q.configure(LAYOUT, &[]);
    q.h.maps.put_dip(3, &q.h.fx.dip(3).abi(2, true)).unwrap();
    let full = AwfdTable::from_weights(&[(1, 1), (2, 1), (3, 1)]).unwrap();
    let v = q.h.maps.table_version(12).unwrap() + 1;
    q.h.maps.publish_table(12, v, &full).unwrap();
    // A source port whose 5-tuple the table gives another DIP, so that
    // routing by the stale ID would show.
    let f = (43000..)
        .map(|port| q.datagram(12, port, &short_header(&q.cid(3, 12))))
        .find(|f| q.predict(12, f).id != 3)
        .unwrap();
    q.fallback("a reused slot's stale ID", 12, &f, true);
}

/// The reply tuple of client frame `f` forwarded by nat to `dip`.
fn reverse_key_of(f: &Frame, dip: &Dip) -> weir_flow_key {
    weir_core::flow::FlowTuple {
        src: dip.addr,
        dst: f.src,
        sport: dip.port_for(f.dport),
        dport: f.sport,
        proto: Proto::Udp,
    }
    .key()
}

fn ticks_ago(secs: u64) -> u32 {
    weir_dataplane::conntrack::now_ticks()
        .wrapping_sub(weir_dataplane::conntrack::ticks(Duration::from_secs(secs)))
}

/// In nat mode a client address routed by connection ID keeps a 5-tuple
/// entry, as a UDP datagram's: the first packet from the address writes it
/// with its reverse entry; later packets look up that entry only (an
/// evicted reverse entry is left to the DIP's reply, which restores it from
/// the entry), and the sweep ages both out together. An entry of the same
/// address and port left to another DIP is replaced, its reverse entry
/// with it; an expired one is written anew.
#[test]
fn a_routed_nat_client_address_keeps_a_5_tuple_entry_that_ages_its_reverse_entry() {
    let q = Quic::new(LAYOUT);
    let t = test_options().timeouts;
    let udp_timeout = t.udp.as_secs();
    for (vip, _, mode, dips) in QUIC_VIPS {
        if mode != NAT {
            continue;
        }
        let [a, b] = [dips[0], dips[2]].map(|d| q.h.fx.dip(d).clone());
        let f = q.datagram(vip, 45000 + vip as u16, &short_header(&q.cid(a.id, 12)));
        let key = f.tuple().key();
        let rkey = reverse_key_of(&f, &a);
        q.routed(&format!("v{vip} new client address"), vip, &f, a.id);
        let c = q.h.maps.conn(&key).unwrap().expect("a 5-tuple entry");
        assert_eq!(
            (c.dip_id, c.dip_gen, c.table_version),
            (a.id, q.h.maps.dip(a.id).unwrap().unwrap().gen, 0),
            "v{vip}: the entry names the routed DIP, no table"
        );

        // Evicted apart from its entry: the client's packets do not look
        // for it (the reply restores it), fresh or a second later.
        assert!(q.h.maps.rev_nat.delete(&rkey).unwrap());
        for age in [0, 2] {
            let mut c = q.h.maps.conn(&key).unwrap().unwrap();
            c.atime = ticks_ago(age);
            q.h.maps.put_conn(&key, &c).unwrap();
            assert_eq!(q.h.run(&f.bytes()).action(), Some(Tx));
            assert!(
                q.h.maps.rev_nat(&rkey).unwrap().is_none(),
                "v{vip}: a client packet {age} s after the last looked up the reverse entry"
            );
            let c = q.h.maps.conn(&key).unwrap().unwrap();
            let second = weir_dataplane::conntrack::ticks(Duration::from_secs(1));
            assert!(
                weir_dataplane::conntrack::now_ticks().wrapping_sub(c.atime) < second,
                "v{vip}: the entry was not refreshed"
            );
        }

        // Expired: the next packet writes both entries again.
        let mut c = q.h.maps.conn(&key).unwrap().unwrap();
        c.atime = ticks_ago(udp_timeout + 5);
        q.h.maps.put_conn(&key, &c).unwrap();
        q.routed(&format!("v{vip} after expiry"), vip, &f, a.id);

        // The address and port taken by a connection on DIP b.
        let g = q.datagram(vip, 45000 + vip as u16, &short_header(&q.cid(b.id, 12)));
        q.routed(&format!("v{vip} same address, another DIP"), vip, &g, b.id);
        assert_eq!(q.h.maps.conn(&key).unwrap().map(|c| c.dip_id), Some(b.id));
        assert!(
            q.h.maps.rev_nat(&rkey).unwrap().is_none(),
            "v{vip}: DIP {}'s reverse entry outlived its 5-tuple entry",
            a.id
        );

        // Idle past the UDP timeout: the sweep takes both.
        let gkey = reverse_key_of(&g, &b);
        let mut c = q.h.maps.conn(&key).unwrap().unwrap();
        c.atime = ticks_ago(udp_timeout + 5);
        q.h.maps.put_conn(&key, &c).unwrap();
        weir_dataplane::conntrack::sweep(&q.h.maps, &t).unwrap();
        assert!(
            q.h.maps.conn(&key).unwrap().is_none(),
            "v{vip}: swept entry"
        );
        assert!(
            q.h.maps.rev_nat(&gkey).unwrap().is_none(),
            "v{vip}: the reverse entry outlived its swept 5-tuple entry"
        );
    }
}

#[test]
fn truncated_garbage_and_version_negotiation_fall_back_to_the_table() {
    let q = Quic::new(LAYOUT);
    let sid2 = q.cid(2, 12);
    let mut unroutable = sid2.clone();
    unroutable[0] |= 0xe0; // config rotation 7
    let mut other_config = sid2.clone();
    other_config[0] = (other_config[0] & 0x1f) | 2 << 5;
    let mut long_21 = long_header(LongType::Handshake, QUIC_V1, &[0; 20], &[]);
    long_21[5] = 21;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty payload", vec![]),
        ("short header, flags only", vec![0x41]),
        (
            "short header, server ID one octet short",
            short_header(&sid2)[..1 + 4].to_vec(),
        ),
        ("long header, 3 octets", vec![0xc0, 0, 0]),
        (
            "long header, no DCID length",
            long_header(LongType::Handshake, QUIC_V1, &sid2, &[])[..5].to_vec(),
        ),
        ("long header, DCID length 21", long_21),
        (
            "long header, DCID cut short",
            long_header(LongType::Handshake, QUIC_V1, &sid2, &[])[..6 + 4].to_vec(),
        ),
        (
            "version negotiation",
            version_negotiation(&sid2, &[1; 8], &[QUIC_V1, QUIC_V2]),
        ),
        ("config rotation 7 (unroutable)", short_header(&unroutable)),
        ("another config rotation", short_header(&other_config)),
    ];
    for (vip, _, _, _) in QUIC_VIPS {
        for (i, (name, payload)) in cases.iter().enumerate() {
            let f = q.datagram(vip, 50000 + i as u16, payload);
            q.fallback(&format!("v{vip} {name}"), vip, &f, false);
        }
    }

    // Random payloads: routed exactly when the reference decoder finds a
    // server ID of a DIP in the DCID, otherwise left to the table; never
    // dropped.
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    for n in 0..400u16 {
        let len: usize = rng.gen_range(0..64);
        let mut payload: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if n % 2 == 0 && len > 6 {
            // Half of them with a DIP's server ID where a DCID would be.
            let off = if payload[0] & 0x80 != 0 { 6 } else { 1 };
            let cid = q.cid(1 + u32::from(n % 3), 8);
            for (i, b) in cid.iter().enumerate().take(len.saturating_sub(off)) {
                payload[off + i] = *b;
            }
        }
        let vip = 12 + u32::from(n % 2);
        let f = q.datagram(vip, 51000 + n, &payload);
        match reference_route(&LAYOUT, &payload) {
            Reference::Routed(dip) if [1, 2, 3].contains(&dip) => {
                q.routed(&format!("random {n}"), vip, &f, dip)
            }
            r => q.fallback(
                &format!("random {n}"),
                vip,
                &f,
                r == Reference::ServerChosen,
            ),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Reference {
    /// The DCID names this DIP (if any DIP has the ID).
    Routed(u32),
    /// A server-chosen DCID with a server ID nobody has.
    ServerChosen,
    Fallback,
}

/// What weir-core's sans-IO classifier (`quic_lb::classify`) says of
/// `payload`, with the DIP whose ID (as `sid` gives them) it carries.
fn reference_route(layout: &CidLayout, payload: &[u8]) -> Reference {
    match classify(layout, payload) {
        Classified::Unroutable => Reference::Fallback,
        Classified::ServerId { id, server_chosen } => {
            match (1..=3).find(|d| sid(*d, layout.server_id_len) == id) {
                Some(d) => Reference::Routed(d),
                None if server_chosen => Reference::ServerChosen,
                None => Reference::Fallback,
            }
        }
    }
}

/// The nat QUIC VIPs: (id, DIPs).
fn nat_vips() -> impl Iterator<Item = (u32, [u32; 3])> {
    QUIC_VIPS
        .into_iter()
        .filter(|v| v.2 == NAT)
        .map(|(id, _, _, dips)| (id, dips))
}

fn is_nat(vip: u32) -> bool {
    nat_vips().any(|(id, _)| id == vip)
}

/// The fixture's nat and dsr QUIC VIPs share DIP slots, and a slot owns
/// one server ID (apply gives every VIP slots of its own): these server
/// IDs are the nat VIPs' only, DIP `d` of them getting `sid(id_of(d))`.
fn assign_nat(q: &Quic, id_of: impl Fn(u32) -> Option<u32>) {
    q.assign(LAYOUT, |v, d| if is_nat(v) { id_of(d) } else { None });
}

/// The QUIC fixture with server IDs for the nat VIPs only.
fn nat_quic() -> Quic {
    let q = Quic::new(LAYOUT);
    assign_nat(&q, Some);
    q
}

/// The key of `dip`'s server ID in `quic_server_ids` (as `configure`
/// writes it).
fn sid_key(vip: u32, dip: u32) -> weir_quic_sid_key {
    let mut key = weir_quic_sid_key {
        vip_id: vip,
        ..Default::default()
    };
    let s = sid(dip, LAYOUT.server_id_len);
    key.sid[..s.len()].copy_from_slice(&s);
    key
}

/// A nat packet whose 5-tuple entry names the DIP that owns the server ID
/// in its DCID goes there through the entry: `quic_server_ids` is not
/// looked up. Shown by taking the ID out of that map alone (user space
/// never does: it keeps `quic_sid_owners` with it): the established
/// address is still routed, counted as routed, while a new address with
/// the same ID, which needs the lookup, finds it unknown.
#[test]
fn an_established_nat_address_is_routed_through_its_entry_without_the_server_id_lookup() {
    let q = nat_quic();
    for (vip, dips) in nat_vips() {
        let a = dips[0];
        let cid = q.cid(a, 12);
        let f = q.datagram(vip, 46000 + vip as u16, &short_header(&cid));
        q.routed(&format!("v{vip} first packet of an address"), vip, &f, a);
        let key = sid_key(vip, a);
        q.h.maps.quic_server_ids.delete(key.as_bytes()).unwrap();
        for i in 0..3 {
            q.routed(
                &format!("v{vip} established address, packet {i}"),
                vip,
                &f,
                a,
            );
        }
        let g = q.datagram(vip, 46100 + vip as u16, &short_header(&cid));
        q.fallback(&format!("v{vip} a new address"), vip, &g, true);
        assign_nat(&q, Some);
    }
}

/// A server ID that moves to another live DIP takes the established nat
/// addresses of its connections along: the entry of the old owner is not
/// followed, it is replaced (its reverse entry with it) by one to the new
/// owner, which the next packets then go by.
#[test]
fn a_server_id_that_moves_takes_established_nat_addresses_to_its_new_owner() {
    let q = nat_quic();
    let flows: Vec<(u32, [u32; 3], Frame)> = nat_vips()
        .map(|(vip, dips)| {
            let f = q.datagram(vip, 47000 + vip as u16, &short_header(&q.cid(dips[0], 12)));
            q.routed(&format!("v{vip} before the move"), vip, &f, dips[0]);
            (vip, dips, f)
        })
        .collect();
    // The first and the last DIP of each VIP swap their server IDs.
    let swap: std::collections::HashMap<u32, u32> = nat_vips()
        .flat_map(|(_, d)| [(d[0], d[2]), (d[2], d[0])])
        .collect();
    assign_nat(&q, |d| Some(swap.get(&d).copied().unwrap_or(d)));
    for (vip, dips, f) in &flows {
        let (vip, [a, _, c]) = (*vip, *dips);
        for step in ["after the move", "again"] {
            q.routed(&format!("v{vip} {step}"), vip, f, c);
            let entry = q.h.maps.conn(&f.tuple().key()).unwrap();
            assert_eq!(entry.map(|e| e.dip_id), Some(c), "v{vip} {step}: entry");
        }
        let old = reverse_key_of(f, q.h.fx.dip(a));
        assert!(
            q.h.maps.rev_nat(&old).unwrap().is_none(),
            "v{vip}: the old owner's reverse entry outlived the move"
        );
    }
}

/// An established nat address whose DIP loses its server ID, or is
/// removed, is no longer routed by its entry: an ID no live DIP owns is
/// unknown, the 5-tuple table decides (its entry while the DIP is live, the
/// current table once it is removed), and the ID is never routed to
/// whoever holds the DIP's slot next.
#[test]
fn an_established_nat_address_whose_dip_loses_its_id_or_is_removed_falls_back() {
    let q = nat_quic();
    let flows: Vec<(u32, [u32; 3], Frame)> = nat_vips()
        .map(|(vip, dips)| {
            let f = q.datagram(vip, 48000 + vip as u16, &short_header(&q.cid(dips[0], 12)));
            q.routed(&format!("v{vip} established"), vip, &f, dips[0]);
            (vip, dips, f)
        })
        .collect();
    let first: Vec<u32> = flows.iter().map(|(_, d, _)| d[0]).collect();
    // The DIP stays, without a server ID: its entry still holds the flow.
    assign_nat(&q, |d| (!first.contains(&d)).then_some(d));
    for (vip, dips, f) in &flows {
        let a = q.h.fx.dip(dips[0]).clone();
        let name = format!("v{} DIP without its ID", vip);
        q.expect(&name, *vip, f, &a, &[WEIR_STAT_CONN_HIT], [0, 1, 1]);
    }
    // The DIP removed (out of service and out of the table): the table's
    // pick among the others, with a new entry.
    for (vip, dips, _) in &flows {
        let d = q.h.fx.dip(dips[0]);
        q.h.maps.put_dip(d.id, &d.abi(1, false)).unwrap();
        let rest = AwfdTable::from_weights(&[(dips[1], 1), (dips[2], 1)]).unwrap();
        let v = q.h.maps.table_version(*vip).unwrap() + 1;
        q.h.maps.publish_table(*vip, v, &rest).unwrap();
    }
    for (vip, dips, f) in &flows {
        let want = AwfdTable::from_weights(&[(dips[1], 1), (dips[2], 1)])
            .unwrap()
            .select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
            .unwrap();
        let d = q.h.fx.dip(want).clone();
        let events = [WEIR_STAT_CONN_STALE, WEIR_STAT_CONN_NEW];
        q.expect(
            &format!("v{vip} DIP removed"),
            *vip,
            f,
            &d,
            &events,
            [0, 1, 1],
        );
    }
}

/// An established nat address keeps its DIP through a drain and a weight
/// change (routed by its entry, counted as routed), and through a new
/// connection's Initial on the same address and port: that Initial, whose
/// DCID the client chose, is a new connection (the entry a routed packet
/// wrote opened no handshake), dispatched by the current table (counted as
/// a fallback and a reused tuple), while the established connection's
/// short headers still go to their DIP by its server ID.
#[test]
fn an_established_nat_address_keeps_its_dip_through_drain_weights_and_a_new_initial() {
    let q = nat_quic();
    for (vip, dips) in nat_vips() {
        let [a, b, c] = dips;
        let f = q.datagram(vip, 49000 + vip as u16, &short_header(&q.cid(a, 12)));
        q.routed(&format!("v{vip} established"), vip, &f, a);
        let mut weights = vec![];
        for (step, w) in [
            ("drained", [(a, 0), (b, 1), (c, 1)]),
            ("weights changed", [(a, 1), (b, 5), (c, 9)]),
        ] {
            publish(&q, vip, &w);
            weights = w.to_vec();
            q.routed(&format!("v{vip} {step}"), vip, &f, a);
        }
        let initial = long_header(LongType::Initial, QUIC_V1, &[0x77; 8], &[0x66; 8]);
        let i = q.datagram(vip, 49000 + vip as u16, &initial);
        let d = pick(&weights, &i, &q);
        let name = format!("v{vip} a new connection's Initial");
        let events = [
            WEIR_STAT_CONN_REUSED,
            WEIR_STAT_CONN_MISS,
            WEIR_STAT_CONN_NEW,
        ];
        q.expect_taking(&name, vip, &i, &d, &events, [0, 1, 0], Some(a));
        q.routed(&format!("v{vip} its short header"), vip, &f, a);
    }
}

/// Publishes a new table version of `vip` with `weights`.
fn publish(q: &Quic, vip: u32, weights: &[(u32, u32)]) {
    let table = AwfdTable::from_weights(weights).unwrap();
    let v = q.h.maps.table_version(vip).unwrap() + 1;
    q.h.maps.publish_table(vip, v, &table).unwrap();
}

/// The DIP a table of `weights` gives a new flow `f`.
fn pick(weights: &[(u32, u32)], f: &Frame, q: &Quic) -> Dip {
    let id = AwfdTable::from_weights(weights)
        .unwrap()
        .select(flow_hash(&f.tuple().key(), DEFAULT_SEED))
        .unwrap();
    q.h.fx.dip(id).clone()
}

/// A client-chosen DCID that no DIP's server ID can be read from (config
/// rotation 7), `n` in its last octet.
fn client_dcid(n: u8) -> Vec<u8> {
    vec![0xe7, 0xc1, 0x1e, 0x47, 0x5e, 0x1e, 0xc7, n]
}

/// The handshake the 5-tuple entry of `f` records.
fn entry_handshake_of(q: &Quic, f: &Frame) -> u32 {
    let c =
        q.h.maps
            .conn(&f.tuple().key())
            .unwrap()
            .expect("a 5-tuple entry");
    entry_handshake(c.quic_handshake)
}

/// A client's Initial or 0-RTT (QUIC v1 and v2, IPv4 and IPv6, nat and
/// dsr) opens an entry that records its handshake (weir-core's
/// `handshake_id` of the packet). A retransmission, with the same DCID,
/// keeps the entry's DIP, even drained; the first flight of a new
/// connection on the same address and port, with another DCID, is a new
/// connection: the entry goes and the current table decides, so it never
/// reaches the drained DIP (counted in `reused_tuple` for the VIP and the
/// drained DIP, and as CONN_REUSED). Whether the packet moves is what
/// weir-core's `opens_new_connection` says of it and the entry.
#[test]
fn a_retransmitted_initial_keeps_its_dip_and_a_new_one_on_the_tuple_goes_by_the_current_table() {
    let q = Quic::new(LAYOUT);
    let mut sport = 52000;
    for (vip, _, _, dips) in QUIC_VIPS {
        let full: Vec<(u32, u32)> = dips.iter().map(|d| (*d, 1)).collect();
        for version in [QUIC_V1, QUIC_V2] {
            for kind in [LongType::Initial, LongType::ZeroRtt] {
                sport += 1;
                let case = format!("v{vip} {version:#x} {kind:?}");
                publish(&q, vip, &full);
                let first = long_header(kind, version, &client_dcid(1), &[0x66; 8]);
                let f = q.datagram(vip, sport, &first);
                q.fallback(&format!("{case}: first"), vip, &f, false);
                let old = q.predict(vip, &f);
                let opened = handshake_id(&first, DEFAULT_SEED);
                assert_eq!(
                    entry_handshake_of(&q, &f),
                    opened,
                    "{case}: the entry's handshake"
                );

                // The DIP drained: a retransmission stays on it.
                let drained: Vec<(u32, u32)> = full
                    .iter()
                    .map(|&(d, w)| (d, if d == old.id { 0 } else { w }))
                    .collect();
                publish(&q, vip, &drained);
                assert!(!opens_new_connection(&first, DEFAULT_SEED, opened));
                q.expect(
                    &format!("{case}: retransmitted"),
                    vip,
                    &f,
                    &old,
                    &[WEIR_STAT_CONN_HIT],
                    [0, 1, 0],
                );

                // A new connection's first flight on the same tuple.
                let next = long_header(kind, version, &client_dcid(2), &[0x67; 8]);
                assert!(opens_new_connection(&next, DEFAULT_SEED, opened));
                let g = q.datagram(vip, sport, &next);
                let moved = pick(&drained, &g, &q);
                assert_ne!(moved.id, old.id);
                let events = [
                    WEIR_STAT_CONN_REUSED,
                    WEIR_STAT_CONN_MISS,
                    WEIR_STAT_CONN_NEW,
                ];
                let name = format!("{case}: another DCID on the tuple");
                q.expect_taking(&name, vip, &g, &moved, &events, [0, 1, 0], Some(old.id));
                let reopened = handshake_id(&next, DEFAULT_SEED);
                assert_eq!(
                    entry_handshake_of(&q, &g),
                    reopened,
                    "{case}: the new handshake"
                );
                if is_nat(vip) {
                    assert!(
                        q.h.maps
                            .rev_nat(&reverse_key_of(&f, &old))
                            .unwrap()
                            .is_none(),
                        "{case}: the old DIP's reverse entry outlived its 5-tuple entry"
                    );
                }
                // Its retransmission stays where it went.
                q.expect(
                    &format!("{case}: the new one retransmitted"),
                    vip,
                    &g,
                    &moved,
                    &[WEIR_STAT_CONN_HIT],
                    [0, 1, 0],
                );
            }
        }
    }
}

/// What opens no handshake goes by a live entry as before: short headers
/// and Handshake packets whose DCID no DIP owns, on a tuple whose entry an
/// Initial opened and whose DIP is drained since, and a QUIC Initial with a
/// new DCID each time to a plain UDP VIP (no `quic` layout).
#[test]
fn short_headers_and_non_quic_udp_follow_a_live_entry_whatever_their_dcid() {
    let q = Quic::new(LAYOUT);
    for (vip, _, _, dips) in QUIC_VIPS {
        let full: Vec<(u32, u32)> = dips.iter().map(|d| (*d, 1)).collect();
        publish(&q, vip, &full);
        let sport = 53000 + vip as u16;
        let first = long_header(LongType::Initial, QUIC_V1, &client_dcid(1), &[0x66; 8]);
        let f = q.datagram(vip, sport, &first);
        q.fallback(&format!("v{vip} Initial"), vip, &f, false);
        let old = q.predict(vip, &f);
        let drained: Vec<(u32, u32)> = full
            .iter()
            .map(|&(d, w)| (d, if d == old.id { 0 } else { w }))
            .collect();
        publish(&q, vip, &drained);
        let mut unroutable = q.cid(dips[1], 12);
        unroutable[0] |= 0xe0;
        for (what, payload) in [
            ("short header", short_header(&unroutable)),
            (
                "short header, the Initial's DCID",
                short_header(&client_dcid(1)),
            ),
            (
                "Handshake",
                long_header(LongType::Handshake, QUIC_V1, &client_dcid(3), &[0x66; 8]),
            ),
            (
                "v2 Handshake",
                long_header(LongType::Handshake, QUIC_V2, &client_dcid(4), &[0x66; 8]),
            ),
            (
                "an unknown version's long header",
                long_header(LongType::Initial, 0x1a2a_3a4a, &client_dcid(5), &[0x66; 8]),
            ),
        ] {
            assert!(!opens_new_connection(&payload, DEFAULT_SEED, 1));
            let g = q.datagram(vip, sport, &payload);
            q.expect(
                &format!("v{vip} {what}"),
                vip,
                &g,
                &old,
                &[WEIR_STAT_CONN_HIT],
                [0, 1, 0],
            );
        }
        publish(&q, vip, &full);
    }

    // Plain UDP VIPs of the fixture: every datagram of a live entry hits it.
    for v in q.h.fx.vips.clone() {
        if v.proto != Proto::Udp || v.weights.is_none() {
            continue;
        }
        let client = if v.addr.is_ipv4() {
            "192.0.2.51"
        } else {
            "2001:db8:c::51"
        };
        let datagram = |n: u8| {
            let p = long_header(LongType::Initial, QUIC_V1, &client_dcid(n), &[0x66; 8]);
            udp(client, 54000, &v.addr.to_string(), v.port).payload(&p)
        };
        let id = v
            .table()
            .select(flow_hash(&datagram(1).tuple().key(), DEFAULT_SEED))
            .unwrap();
        let d = q.h.fx.dip(id).clone();
        let cases = (1..=3)
            .map(|n| {
                let f = datagram(n);
                let out = if v.mode == NAT {
                    nat_out(&f, &d)
                } else {
                    dsr_out(&f, &d)
                };
                let events: &[u32] = if n == 1 {
                    &[WEIR_STAT_CONN_MISS, WEIR_STAT_CONN_NEW]
                } else {
                    &[WEIR_STAT_CONN_HIT]
                };
                let name = format!("plain UDP VIP {}, an Initial's DCID {n}", v.id);
                Case::new(name, f.bytes(), Tx, WEIR_STAT_TX)
                    .output(out.bytes())
                    .events(events)
            })
            .collect();
        run_cases(&q.h, cases);
        let c = q.h.maps.conn(&datagram(1).tuple().key()).unwrap();
        let c = c.expect("the plain UDP entry");
        assert_eq!(c.quic_handshake, [0; 3], "VIP {}: no handshake kept", v.id);
    }
}
