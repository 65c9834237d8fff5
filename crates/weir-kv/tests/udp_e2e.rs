//! The UDP path end to end: real memcached servers (UDP on) in network
//! namespaces behind the XDP switch that `weir kv` loads (weir_kv), a client
//! in its own namespace.
//! - keys land on the server weir_kv::route names (checked on the servers);
//! - hot keys are answered by XDP (cache_tx) with the right value;
//! - a write through the switch (UDP, or TCP through the proxy) followed by
//!   a get never returns the old value, while the hot-key loop keeps
//!   refilling the cache;
//! - libmemcached's `memccp -U` writes a cached key over UDP through XDP;
//! - memcached's meta commands over UDP: routed by key, `mg` hits answered
//!   by XDP, and no `mg` stale after a meta (or classic) write;
//! - L3 forwarding; refused and clean attach/detach.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_kv::route::Distribution;
use weir_kv::{Invalidation, Proxy, UdpSwitch, XdpInvalidator};
use weir_lab::kv::lab::{in_ns, server_ip, KvLab, UdpMc, MC_PORT, PROXY_PORT, SWITCH_IP, VIP};
use weir_lab::kv::testbed::McClient;

fn vip() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(VIP), MC_PORT)
}

/// The switch publishes counters every refresh (50 ms in the lab).
fn fresh(h: &weir_kv::StatusHandle) -> weir_kv::UdpStatus {
    std::thread::sleep(Duration::from_millis(200));
    h.get()
}

fn kc0_prog(lab: &KvLab) -> Option<u32> {
    in_ns(&lab.switch, || {
        Ok(attached_prog_id(Iface::by_name("kc0")?.ifindex))
    })
    .unwrap()
}

/// Waits (bounded) until XDP serves `key` from the cache, sending gets so
/// that it stays hot.
fn until_cached(udp: &mut UdpMc, sw: &UdpSwitch, key: &str, want: &[u8]) {
    let t0 = Instant::now();
    while !sw.cache().is_served(key.as_bytes()).unwrap() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{key} was not cached within 5 s: {:?}",
            sw.status()
        );
        let got = udp.get(key).unwrap().map(|v| v.1);
        assert_eq!(got.as_deref(), Some(want), "{key} while warming");
    }
}

/// In the switch's namespace of `lab`: the l2 XDP switch with its cache,
/// and the TCP proxy beside it, whose writes invalidate that cache; with
/// the distribution both route keys by.
fn start_cached_switch(lab: &KvLab) -> (Distribution, UdpSwitch, Proxy) {
    let cfg = lab.config("l2", true).unwrap();
    let c2 = cfg.clone();
    let sw = in_ns(&lab.switch, move || UdpSwitch::start(&c2)).unwrap();
    let (c3, cache) = (cfg.clone(), sw.cache());
    let proxy = in_ns(&lab.switch, move || {
        Proxy::start(
            &c3,
            Arc::new(c3.distribution()),
            Some(Invalidation::new(Arc::new(XdpInvalidator(cache)))),
        )
    })
    .unwrap();
    (cfg.distribution(), sw, proxy)
}

/// Asked directly (from the client's namespace), each of `keys` holds
/// `v-{key}` on its owner in `owners` and is absent from the other server.
fn assert_on_owners(keys: &[String], owners: &[usize]) -> anyhow::Result<()> {
    let mut direct: Vec<McClient> = (0..2)
        .map(|i| McClient::connect(SocketAddr::new(IpAddr::V4(server_ip(i)), MC_PORT)))
        .collect::<anyhow::Result<_>>()?;
    for (k, &o) in keys.iter().zip(owners) {
        assert_eq!(
            direct[o].get(k)?,
            Some(format!("v-{k}").into_bytes()),
            "{k} on {o}"
        );
        assert_eq!(direct[1 - o].get(k)?, None, "{k} also on {}", 1 - o);
    }
    Ok(())
}

/// Runs `f` in the client's namespace of `lab` with a UDP client of the VIP
/// and a TCP client of the proxy. UdpSwitch is not Send (it owns a join
/// handle only; fine), so `f` runs on a scoped thread that enters the
/// namespace, not through in_ns.
fn as_client(lab: &KvLab, f: impl FnOnce(UdpMc, McClient) + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            weir_lab::netns::enter(&lab.client).unwrap();
            let udp = UdpMc::new(vip()).unwrap();
            let tcp =
                McClient::connect(SocketAddr::new(IpAddr::V4(SWITCH_IP), PROXY_PORT)).unwrap();
            f(udp, tcp);
        });
    });
}

#[test]
fn udp_through_the_xdp_switch_with_cache() {
    let lab = KvLab::new(2, 1).unwrap();
    let (dist, sw, proxy) = start_cached_switch(&lab);
    assert!(kc0_prog(&lab).is_some());

    // The client's half, in the client namespace.
    let status = {
        let sw_status = sw.status_handle();
        let cache = sw.cache();
        let client = lab.client.clone();
        // placement: 200 keys set over UDP through the switch
        let keys: Vec<String> = (0..200).map(|i| format!("key:{i}")).collect();
        let k2 = keys.clone();
        in_ns(&client, move || {
            let mut udp = UdpMc::new(vip())?;
            for k in &k2 {
                assert_eq!(udp.set(k, format!("v-{k}").as_bytes())?, "STORED", "{k}");
            }
            Ok(())
        })
        .unwrap();
        let owners: Vec<usize> = keys
            .iter()
            .map(|k| dist.server_for_key(k.as_bytes()))
            .collect();
        let k3 = keys.clone();
        in_ns(&client, move || assert_on_owners(&k3, &owners)).unwrap();
        let st = fresh(&sw_status);
        let per: Vec<u64> = (0..2)
            .map(|s| {
                keys.iter()
                    .filter(|k| dist.server_for_key(k.as_bytes()) == s)
                    .count() as u64
            })
            .collect();
        assert_eq!(st.server_requests, per, "XDP per-server requests");
        assert!(per.iter().all(|&n| n > 0));
        drop(cache);
        st
    };
    assert_eq!(status.xdp["write"], 200);

    // Cache hits: a hot key is answered by XDP with the right value; then
    // every write through the switch is seen by the next get.
    let swr: &UdpSwitch = &sw;
    as_client(&lab, |mut udp, mut tcp| {
        assert_eq!(udp.set("hot", b"h0").unwrap(), "STORED");
        until_cached(&mut udp, swr, "hot", b"h0");
        let hits0 = swr.status().cache_hits;
        for _ in 0..50 {
            assert_eq!(
                udp.get("hot").unwrap().map(|v| v.1).as_deref(),
                Some(&b"h0"[..])
            );
        }
        let st = fresh(&swr.status_handle());
        assert!(
            st.cache_hits >= hits0 + 50,
            "hits {} -> {}: {st:?}",
            hits0,
            st.cache_hits
        );
        assert!(st.hot_keys.iter().any(|k| k == "hot"), "{:?}", st.hot_keys);

        // writes through the switch, UDP and TCP, each followed at once by a get
        let mut stale = 0;
        for i in 1..=60 {
            let v = format!("h{i}");
            if i % 2 == 0 {
                assert_eq!(udp.set("hot", v.as_bytes()).unwrap(), "STORED");
            } else {
                assert_eq!(tcp.set("hot", v.as_bytes()).unwrap(), "STORED\r\n");
            }
            let got = udp.get("hot").unwrap().map(|x| x.1);
            if got.as_deref() != Some(v.as_bytes()) {
                stale += 1;
            }
            if i % 10 == 0 {
                // let the loop re-install it, so the next write hits a cached key
                until_cached(&mut udp, swr, "hot", v.as_bytes());
            }
        }
        assert_eq!(stale, 0, "stale reads after writes through the switch");
        // delete (UDP) and flush_all (TCP) of a cached key
        until_cached(&mut udp, swr, "hot", b"h60");
        assert_eq!(udp.delete("hot").unwrap(), "DELETED");
        assert_eq!(udp.get("hot").unwrap(), None);
        assert_eq!(udp.set("hot", b"again").unwrap(), "STORED");
        until_cached(&mut udp, swr, "hot", b"again");
        assert_eq!(tcp.cmd("flush_all\r\n").unwrap(), "OK\r\n");
        assert_eq!(udp.get("hot").unwrap(), None);

        // libmemcached as a real UDP client: `memccp -U` (UDP writes are
        // noreply in libmemcached) replaces a cached key through XDP; once
        // the new value shows, the old one never comes back.
        let dir = std::env::temp_dir().join(format!("weir-udp-e2e-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("memkey");
        std::fs::write(&file, b"from-libmemcached").unwrap();
        assert_eq!(udp.set("memkey", b"old").unwrap(), "STORED");
        until_cached(&mut udp, swr, "memkey", b"old");
        let out = std::process::Command::new("memccp")
            .arg("-U")
            .arg(format!("--servers={VIP}:{MC_PORT}"))
            .arg(&file)
            .output()
            .expect("memccp (apt-get install libmemcached-tools)");
        assert!(out.status.success(), "memccp: {out:?}");
        let _ = std::fs::remove_dir_all(&dir);
        let t0 = Instant::now();
        loop {
            let got = udp.get("memkey").unwrap().map(|v| v.1);
            if got.as_deref() == Some(&b"from-libmemcached"[..]) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "memccp's set never showed"
            );
        }
        for _ in 0..50 {
            let got = udp.get("memkey").unwrap().map(|v| v.1);
            assert_eq!(got.as_deref(), Some(&b"from-libmemcached"[..]));
        }

        let st = fresh(&swr.status_handle());
        assert!(st.installs >= 3, "{st:?}");
        assert!(st.xdp["invalidate"] > 0);
    });
    assert!(proxy.stats().invalidations > 0);
    proxy.stop();
    sw.stop();
    assert_eq!(kc0_prog(&lab), None, "weir_kv is still attached after stop");
}

/// The body of a meta reply as text, for messages.
fn text(r: &[u8]) -> String {
    String::from_utf8_lossy(r).into_owned()
}

#[test]
fn meta_commands_over_udp_through_the_xdp_switch() {
    let lab = KvLab::new(2, 1).unwrap();
    let (dist, sw, proxy) = start_cached_switch(&lab);

    // placement: `ms` over UDP lands on the key's server, `mg` reads it back
    let keys: Vec<String> = (0..100).map(|i| format!("meta:{i}")).collect();
    let owners: Vec<usize> = keys
        .iter()
        .map(|k| dist.server_for_key(k.as_bytes()))
        .collect();
    assert!((0..2).all(|s| owners.contains(&s)));
    let k2 = keys.clone();
    in_ns(&lab.client, move || {
        let mut udp = UdpMc::new(vip())?;
        for k in &k2 {
            let r = udp.request(format!("ms {k} {} F7\r\nv-{k}\r\n", k.len() + 2).as_bytes())?;
            assert_eq!(text(&r), "HD\r\n", "ms {k}");
            let r = udp.request(format!("mg {k} v f k\r\n").as_bytes())?;
            assert_eq!(
                text(&r),
                format!("VA {} f7 k{k}\r\nv-{k}\r\n", k.len() + 2),
                "mg {k}"
            );
        }
        assert_on_owners(&k2, &owners)
    })
    .unwrap();
    let st = fresh(&sw.status_handle());
    assert_eq!(st.xdp["meta"], 200, "{:?}", st.xdp);

    let swr: &UdpSwitch = &sw;
    as_client(&lab, |mut udp, mut tcp| {
        let mg = |udp: &mut UdpMc, ask: &str| text(&udp.request(ask.as_bytes()).unwrap());
        // mg alone makes a key hot; XDP then answers it
        let warm = |udp: &mut UdpMc, want: &str| {
            let t0 = Instant::now();
            while !swr.cache().is_served(b"mhot").unwrap() {
                assert!(t0.elapsed() < Duration::from_secs(5), "mhot never cached");
                assert_eq!(mg(udp, "mg mhot v f\r\n"), want, "mhot while warming");
            }
        };
        assert_eq!(mg(&mut udp, "ms mhot 2 F3\r\nm0\r\n"), "HD\r\n");
        warm(&mut udp, "VA 2 f3\r\nm0\r\n");
        let before = fresh(&swr.status_handle()).xdp["meta_cache_tx"];
        for _ in 0..50 {
            assert_eq!(mg(&mut udp, "mg mhot v f\r\n"), "VA 2 f3\r\nm0\r\n");
            assert_eq!(mg(&mut udp, "mg mhot s k v\r\n"), "VA 2 s2 kmhot\r\nm0\r\n");
        }
        let st = fresh(&swr.status_handle());
        assert!(
            st.xdp["meta_cache_tx"] >= before + 100,
            "mg hits {before} -> {}: {:?}",
            st.xdp["meta_cache_tx"],
            st.xdp
        );
        // a flag only the server answers: the server's reply (t: no TTL)
        assert_eq!(mg(&mut udp, "mg mhot v t\r\n"), "VA 2 t-1\r\nm0\r\n");

        // meta writes over UDP, classic ones over TCP, each read at once
        // with mg: never the old value
        let mut stale = Vec::new();
        for i in 1..=40 {
            let v = format!("m{i}");
            match i % 4 {
                0 => assert_eq!(
                    mg(&mut udp, &format!("ms mhot {} F3\r\n{v}\r\n", v.len())),
                    "HD\r\n"
                ),
                1 => assert_eq!(
                    mg(
                        &mut udp,
                        &format!("ms mhot {} T0 F3 MS\r\n{v}\r\n", v.len())
                    ),
                    "HD\r\n"
                ),
                2 => {
                    assert_eq!(mg(&mut udp, "md mhot\r\n"), "HD\r\n");
                    assert_eq!(mg(&mut udp, "mg mhot v f\r\n"), "EN\r\n", "after md");
                    assert_eq!(
                        mg(&mut udp, &format!("ms mhot {} F3\r\n{v}\r\n", v.len())),
                        "HD\r\n"
                    );
                }
                _ => {
                    let mut body = format!("set mhot 3 0 {}\r\n", v.len()).into_bytes();
                    body.extend_from_slice(v.as_bytes());
                    body.extend_from_slice(b"\r\n");
                    assert_eq!(
                        tcp.cmd(std::str::from_utf8(&body).unwrap()).unwrap(),
                        "STORED\r\n"
                    );
                }
            }
            let got = mg(&mut udp, "mg mhot v f\r\n");
            if got != format!("VA {} f3\r\n{v}\r\n", v.len()) {
                stale.push((i, got));
            }
            if i % 8 == 0 {
                warm(&mut udp, &format!("VA {} f3\r\n{v}\r\n", v.len()));
            }
        }
        assert!(stale.is_empty(), "stale mg after writes: {stale:?}");
        // ma on a cached counter
        assert_eq!(mg(&mut udp, "ms mhot 1 F3\r\n5\r\n"), "HD\r\n");
        warm(&mut udp, "VA 1 f3\r\n5\r\n");
        assert_eq!(mg(&mut udp, "ma mhot v\r\n"), "VA 1\r\n6\r\n");
        assert_eq!(mg(&mut udp, "mg mhot v f\r\n"), "VA 1 f3\r\n6\r\n");
        let st = fresh(&swr.status_handle());
        assert!(st.xdp["invalidate"] >= 30, "{:?}", st.xdp);
    });
    proxy.stop();
    sw.stop();
}

#[test]
fn l3_forwarding_and_refusals() {
    let lab = KvLab::new(2, 1).unwrap();
    let cfg = lab.config("l3", false).unwrap();
    let dist = cfg.distribution();
    let c2 = cfg.clone();
    let sw = in_ns(&lab.switch, move || UdpSwitch::start(&c2)).unwrap();

    // A second switch on the same interface is refused; nothing changes.
    let id = kc0_prog(&lab).unwrap();
    let c3 = cfg.clone();
    let err = in_ns(&lab.switch, move || UdpSwitch::start(&c3).map(|_| ())).unwrap_err();
    assert!(
        format!("{err:#}").contains("already has an XDP program"),
        "{err:#}"
    );
    assert_eq!(kc0_prog(&lab), Some(id));

    in_ns(&lab.client, move || {
        let mut udp = UdpMc::new(vip())?;
        for i in 0..50 {
            let k = format!("l3:{i}");
            assert_eq!(udp.set(&k, k.as_bytes())?, "STORED");
            assert_eq!(udp.get(&k)?.map(|v| v.1), Some(k.clone().into_bytes()));
        }
        Ok(())
    })
    .unwrap();
    let st = fresh(&sw.status_handle());
    assert_eq!(st.xdp["l3_rewrite"], 100);
    let per: Vec<u64> = (0..2)
        .map(|s| {
            2 * (0..50)
                .filter(|i| dist.server_for_key(format!("l3:{i}").as_bytes()) == s)
                .count() as u64
        })
        .collect();
    assert_eq!(st.server_requests, per);
    assert_eq!(st.cache_hits, 0, "cache is off");
    sw.stop();
    assert_eq!(kc0_prog(&lab), None);

    // A server that cannot be resolved: an error, nothing attached.
    let mut bad = lab.config("l2", false).unwrap();
    bad.server_addrs[1] = "10.78.1.99:11211".parse().unwrap();
    let err = in_ns(&lab.switch, move || UdpSwitch::start(&bad).map(|_| ())).unwrap_err();
    assert!(format!("{err:#}").contains("neighbour"), "{err:#}");
    assert_eq!(kc0_prog(&lab), None);
    // An unknown interface: an error, nothing attached.
    let mut bad = lab.config("l2", false).unwrap();
    bad.udp.as_mut().unwrap().interfaces = vec!["kc0".into(), "nope9".into()];
    let err = in_ns(&lab.switch, move || UdpSwitch::start(&bad).map(|_| ())).unwrap_err();
    assert!(format!("{err:#}").contains("nope9"), "{err:#}");
    assert_eq!(kc0_prog(&lab), None);
}
