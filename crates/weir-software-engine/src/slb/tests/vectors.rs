//! The shared AWFD vectors (tests/vectors/awfd.json, which weir_lb's
//! `shared_awfd_vectors` test runs through BPF) through the software load
//! balancer: each case's table is published to every VIP its flows
//! address, and each flow's first packet must go to the file's DIP (or be
//! dropped for want of a backend when the file says null).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::*;
use weir_core::vectors::VectorFile;

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/awfd.json");

fn dip_addr(id: u32, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::from([10, 3, (id >> 8) as u8, id as u8])
    } else {
        IpAddr::from([0x2001, 0xdb8, 3, 0, 0, 0, 0, id as u16])
    }
}

#[test]
fn shared_vectors_pick_the_same_dips_as_the_data_plane() {
    let text = std::fs::read_to_string(PATH).unwrap_or_else(|e| panic!("{PATH}: {e}"));
    let file: VectorFile = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{PATH}: {e}"));
    let mut checked = 0;
    for (ci, case) in file.cases.iter().enumerate() {
        let mut slb = Slb::new(Config {
            max_dips: 2048,
            hash_seed: file.seed,
            ..test_config()
        })
        .unwrap();
        let version = ci as u32 + 1;
        let table = Arc::new(AwfdTable::from_weights(&case.weight_pairs()).unwrap());
        let vips: BTreeSet<_> = case
            .flows
            .iter()
            .map(|f| (f.dst, f.dport, f.proto.number()))
            .collect();
        for (id, (addr, port, proto)) in vips.iter().enumerate() {
            let (addr, family) = addr_words(*addr);
            let key = weir_vip_key {
                addr,
                port: port.to_be(),
                proto: *proto,
                family,
            };
            let s = slb.services_mut();
            let vip = weir_vip {
                vip_id: id as u32,
                mode: DSR as u8,
                ..Default::default()
            };
            s.set_vip(key, vip).unwrap();
            s.publish_table(id as u32, version, table.clone()).unwrap();
        }
        slb.services_mut().set_interface(IFINDEX, LB_IF_MAC);
        // DIP slots take the address family of the flows under test.
        for v4 in [true, false] {
            for w in &case.weights {
                let (addr, family) = addr_words(dip_addr(w.dip, v4));
                let d = weir_dip {
                    addr,
                    family,
                    mac_set: 1,
                    mac: dip_mac(w.dip),
                    flags: WEIR_DIP_F_LIVE,
                    gen: 1,
                    ..Default::default()
                };
                slb.services_mut().set_dip(w.dip, d).unwrap();
            }
            for f in case.flows.iter().filter(|f| f.src.is_ipv4() == v4) {
                let t = f.tuple();
                assert_eq!(
                    flow_hash(&t.key(), file.seed),
                    f.hash,
                    "{}: hash",
                    case.name
                );
                let (s, d) = (t.src.to_string(), t.dst.to_string());
                let frame = match t.proto {
                    Proto::Tcp => tcp(&s, t.sport, &d, t.dport, SYN),
                    Proto::Udp => udp(&s, t.sport, &d, t.dport),
                };
                let mut buf = frame.bytes();
                let o = slb.process(&mut buf, IFINDEX, T0);
                match (f.dip, o) {
                    (Some(want), Outcome::Forward(fw)) => {
                        assert_eq!(fw.dip, want, "{}: DIP of {t:?}", case.name);
                        let entry = match t.proto {
                            Proto::Tcp => slb.half_open_entry(&t.key()),
                            Proto::Udp => slb.connection(&t.key()).map(|c| c.conn),
                        };
                        let e = entry.unwrap_or_else(|| panic!("{}: no entry", case.name));
                        assert_eq!((e.dip_id, e.table_version), (want, version));
                        assert_eq!(buf, frame.macs(LB_IF_MAC, dip_mac(want)).bytes());
                    }
                    (None, o) => {
                        assert_eq!(o, Outcome::Drop(DropReason::NoBackend), "{}", case.name)
                    }
                    (Some(want), o) => panic!("{}: {t:?} should go to {want}: {o:?}", case.name),
                }
                checked += 1;
            }
        }
        let c = slb.counters();
        assert_eq!(c.get(WEIR_STAT_RX), c.outcomes());
    }
    assert!(checked > 100, "{checked} flows");
}
