//! `apply` of QUIC VIPs: the VIP's connection-ID layout and every DIP's
//! server ID reach the maps `weir_lb` routes by, and a removed DIP's IDs
//! leave with it (never left pointing at the slot's next tenant).
//! Needs root (BPF).

use weir_abi::*;
use weir_config::Config;
use weir_control::apply::apply;
use weir_dataplane::loader::{self, LoadOptions};
use weir_dataplane::maps::Maps;

const FILE: &str = r#"
[dataplane]
interfaces = ["veth0"]

[[vip]]
name = "h3"
address = "10.0.0.100"
port = 443
protocol = "udp"
mode = "dsr"
quic = { server_id_len = 3, config_id = 2 }

  [[vip.dip]]
  address = "10.1.0.1"
  server_id = "0a0b01"

  [[vip.dip]]
  address = "10.1.0.2"
  server_id = "0a0b02"
"#;

/// The server IDs in the map: (octets, DIP slot, slot generation).
fn server_ids(maps: &Maps, len: usize) -> Vec<(Vec<u8>, u32, u32)> {
    let mut ids: Vec<_> = maps
        .quic_server_ids()
        .unwrap()
        .into_iter()
        .map(|(k, r)| {
            assert!(
                k.sid[len..].iter().all(|b| *b == 0),
                "octets past the length are zero"
            );
            (k.sid[..len].to_vec(), r.dip_id, r.dip_gen)
        })
        .collect();
    ids.sort();
    ids
}

fn slot_of(maps: &Maps, addr: [u8; 4]) -> (u32, weir_dip) {
    (0..maps.dip_slots())
        .find_map(|id| {
            let d = maps.dip(id).unwrap()?;
            (d.flags & WEIR_DIP_F_LIVE != 0 && d.addr[0] == u32::from_ne_bytes(addr))
                .then_some((id, d))
        })
        .expect("the DIP has a live slot")
}

#[test]
fn server_ids_follow_the_configuration_and_leave_with_their_dip() {
    let opts = LoadOptions {
        conn_capacity: 1024,
        conn_capacity_v6: 1024,
        max_vips: 4,
        max_dips: 16,
        pin_dir: None,
        ..Default::default()
    };
    let lb = loader::load(&opts).expect("loading weir_lb (tests need root)");
    let maps = Maps::of(&lb.skel).unwrap();

    apply(&maps, &Config::parse("t.toml", FILE).unwrap()).unwrap();
    let (_, vip) = maps.vips().unwrap()[0];
    assert_eq!((vip.quic_sid_len, vip.quic_config_id), (3, 2));
    let (s1, d1) = slot_of(&maps, [10, 1, 0, 1]);
    let (s2, d2) = slot_of(&maps, [10, 1, 0, 2]);
    assert_eq!(
        server_ids(&maps, 3),
        vec![
            (vec![0x0a, 0x0b, 0x01], s1, d1.gen),
            (vec![0x0a, 0x0b, 0x02], s2, d2.gen)
        ]
    );

    // DIP 10.1.0.2 removed: its ID goes with it.
    let without = FILE.replace(
        "\n  [[vip.dip]]\n  address = \"10.1.0.2\"\n  server_id = \"0a0b02\"\n",
        "",
    );
    apply(&maps, &Config::parse("t.toml", &without).unwrap()).unwrap();
    assert_eq!(
        server_ids(&maps, 3),
        vec![(vec![0x0a, 0x0b, 0x01], s1, d1.gen)]
    );

    // 10.1.0.3 added: it takes the freed slot with a new generation, and
    // only its own ID names the slot.
    let next = FILE
        .replace("10.1.0.2", "10.1.0.3")
        .replace("0a0b02", "0a0b03");
    apply(&maps, &Config::parse("t.toml", &next).unwrap()).unwrap();
    let (s3, d3) = slot_of(&maps, [10, 1, 0, 3]);
    assert_eq!(s3, s2, "the freed slot is reused");
    assert_ne!(d3.gen, d2.gen);
    assert_eq!(
        server_ids(&maps, 3),
        vec![
            (vec![0x0a, 0x0b, 0x01], s1, d1.gen),
            (vec![0x0a, 0x0b, 0x03], s3, d3.gen)
        ]
    );

    // The VIP no longer QUIC: no IDs, and its VIP entry says so.
    let plain = next
        .replace("quic = { server_id_len = 3, config_id = 2 }\n", "")
        .replace("  server_id = \"0a0b01\"\n", "")
        .replace("  server_id = \"0a0b03\"\n", "");
    apply(&maps, &Config::parse("t.toml", &plain).unwrap()).unwrap();
    assert!(maps.quic_server_ids().unwrap().is_empty());
    assert_eq!(maps.vips().unwrap()[0].1.quic_sid_len, 0);
}
