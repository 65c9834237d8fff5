//! weir_kv::route picks the same memcached server as real nutcracker for
//! every key of a sample, for every hash nutcracker has and for ketama
//! (with weights and a named server) and modula. Keys are stored through
//! nutcracker, then looked up directly on each memcached. Loopback only.

use std::net::SocketAddr;

use weir_kv::parse_nutcracker;
use weir_kv::route::{DistKind, HashKind};
use weir_lab::kv::testbed::{free_port, memcached, nutcracker, McClient};

fn have(bin: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn nutcracker_and_weir_pick_the_same_server() {
    if !have("memcached") || !have("nutcracker") {
        panic!("memcached and nutcracker are needed (scripts/deps.sh installs them)");
    }
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let _mc: Vec<_> = ports
        .iter()
        .map(|&p| memcached("127.0.0.1", p, false, 1).unwrap())
        .collect();
    let mut direct: Vec<McClient> = ports
        .iter()
        .map(|&p| McClient::connect(format!("127.0.0.1:{p}").parse().unwrap()).unwrap())
        .collect();
    let dir = std::env::temp_dir().join(format!("weir-kv-agree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys: Vec<String> = (0..200)
        .map(|i| match i % 4 {
            0 => format!("user:{i}"),
            1 => format!("k{i}"),
            2 => format!("session-{}-{i}", i * 7919),
            _ => format!("{{tag{}}}:obj:{i}", i % 5),
        })
        .collect();
    let mut combos: Vec<(HashKind, DistKind)> = HashKind::ALL
        .iter()
        .map(|&h| (h, DistKind::Ketama))
        .collect();
    combos.push((HashKind::Fnv1a_64, DistKind::Modula));
    combos.push((HashKind::Md5, DistKind::Modula));
    combos.push((HashKind::Murmur, DistKind::Modula));
    let mut checked = 0;
    for (ci, (h, d)) in combos.iter().enumerate() {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // the last combo also uses hash_tag
        let tag = if ci == combos.len() - 1 {
            "  hash_tag: \"{}\"\n"
        } else {
            ""
        };
        let yml = format!(
            "pool:\n  listen: {listen}\n  hash: {h}\n  distribution: {d}\n{tag}  auto_eject_hosts: false\n  servers:\n   - 127.0.0.1:{}:1\n   - 127.0.0.1:{}:2 beta\n   - 127.0.0.1:{}:1\n",
            ports[0], ports[1], ports[2]
        );
        let conf = dir.join(format!("nc{ci}.yml"));
        std::fs::write(&conf, &yml).unwrap();
        let cfg = parse_nutcracker("nc.yml", &yml, None).unwrap();
        let dist = cfg.distribution();
        let _nc = nutcracker(&conf, listen, free_port()).unwrap();
        for c in direct.iter_mut() {
            assert_eq!(c.cmd("flush_all\r\n").unwrap(), "OK\r\n");
        }
        let mut via = McClient::connect(listen).unwrap();
        for k in &keys {
            assert_eq!(via.set(k, b"v").unwrap(), "STORED\r\n", "{h}/{d} set {k}");
        }
        for k in &keys {
            let owners: Vec<usize> = (0..3)
                .filter(|&s| direct[s].get(k).unwrap().is_some())
                .collect();
            assert_eq!(owners.len(), 1, "{h}/{d}: {k} stored on {owners:?}");
            assert_eq!(
                owners[0],
                dist.server_for_key(k.as_bytes()),
                "{h}/{d}: nutcracker put {k} on server {}, weir predicts {}",
                owners[0],
                dist.server_for_key(k.as_bytes())
            );
            checked += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(checked, combos.len() * keys.len());
}
