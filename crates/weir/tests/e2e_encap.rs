//! The ipip and gue modes end to end, in namespaces the test builds and
//! always removes: TCP connections from the client through an ipip VIP and a
//! gue VIP reach backends that run `weir decap` on their interface (the VIPs
//! on their loopback), and the replies go straight back to the client.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_lab::backend::Backend;
use weir_lab::client::{spawn_http, udp_requests};
use weir_lab::daemon::Daemon;
use weir_lab::netns::ip_in;
use weir_lab::topology::Lab;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const IPIP_VIP: &str = "10.77.100.1:80";
const GUE_VIP: &str = "10.77.100.2:80";
const GUE_UDP_VIP: &str = "10.77.100.2:5353";

fn config() -> String {
    let mut s = "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\n".to_string();
    for (name, addr, port, proto, mode) in [
        ("web-ipip", "10.77.100.1", 80, "tcp", "ipip"),
        ("web-gue", "10.77.100.2", 80, "tcp", "gue"),
        ("dns-gue", "10.77.100.2", 5353, "udp", "gue"),
    ] {
        s += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\n\
             protocol = \"{proto}\"\nmode = \"{mode}\"\n"
        );
        for b in [1, 2] {
            s += &format!("[[vip.dip]]\naddress = \"10.77.{b}.2\"\n");
        }
    }
    s
}

/// `weir decap` on a backend's eth0; SIGKILLed on drop if still running.
struct Decap {
    ns: String,
    child: Option<Child>,
}

impl Decap {
    fn start(ns: &str) -> Decap {
        // The lab's pass-through program holds eth0: weir decap takes its place.
        ip_in(ns, &["link", "set", "dev", "eth0", "xdp", "off"]).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, WEIR, "decap", "--interface", "eth0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting weir decap");
        let d = Decap {
            ns: ns.to_string(),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.status().is_err() {
            assert!(
                Instant::now() < deadline,
                "weir decap did not attach in {ns}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// `weir decap status` in the backend: its counters as (name, value).
    fn status(&self) -> Result<Vec<(String, u64)>, String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, WEIR, "decap", "status"])
            .args(["--interface", "eth0"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(parse_counters(&String::from_utf8_lossy(&out.stdout)))
    }

    /// SIGTERM; returns the counters it printed on the way out.
    fn stop(mut self) -> Vec<(String, u64)> {
        let child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid (ip netns exec execs weir).
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "weir decap: {out:?}");
        parse_counters(&String::from_utf8_lossy(&out.stdout))
    }
}

impl Drop for Decap {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn parse_counters(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn get(counters: &[(String, u64)], name: &str) -> u64 {
    counters
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no counter {name} in {counters:?}"))
        .1
}

fn counter(status: &serde_json::Value, name: &str) -> u64 {
    status["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn tcp_and_udp_through_ipip_and_gue_vips_reach_decapsulating_backends() {
    let lab = Lab::build(2).expect("building the lab");
    let backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)).unwrap())
        .collect();
    let decaps: Vec<Decap> = lab.backends.iter().map(|ns| Decap::start(ns)).collect();
    // A busy interface is refused, and the running one is left alone.
    let busy = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.backends[0],
            WEIR,
            "decap",
            "--interface",
            "eth0",
        ])
        .output()
        .unwrap();
    assert!(!busy.status.success());
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("already has an XDP program"),
        "{busy:?}"
    );
    let mut d = Daemon::new(Path::new(WEIR), &lab.lb).unwrap();
    d.write_config(&config()).unwrap();
    d.start().unwrap();

    // 20 keep-alive connections per VIP, 5 requests each: every request is
    // answered (by the backend's own socket, so the inner packets arrived
    // whole), by both backends over all.
    for vip in [IPIP_VIP, GUE_VIP] {
        let vip: SocketAddr = vip.parse().unwrap();
        let mut served = std::collections::BTreeSet::new();
        for h in spawn_http(&lab.client, vip, 20, 5, Duration::from_millis(10)) {
            let rec = h.join().unwrap();
            assert!(rec.error.is_none(), "{vip}: {:?}", rec.error);
            assert_eq!(rec.served_by.len(), 5, "{vip}: {:?}", rec.served_by);
            assert!(!rec.violated(), "{vip}: a connection changed backend");
            served.extend(rec.served_by);
        }
        assert_eq!(served.len(), 2, "{vip}: served by {served:?}");
    }
    // UDP through gue arrives at the backends' responder (which answers
    // from its own address, not the VIP's, so the client drops the answers:
    // count the requests at the backends instead).
    let requests = |b: &[Backend]| -> u64 {
        b.iter()
            .map(|b| b.requests.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    };
    let before = requests(&backends);
    udp_requests(
        &lab.client,
        GUE_UDP_VIP.parse().unwrap(),
        20,
        Duration::from_millis(200),
    )
    .unwrap();
    assert_eq!(requests(&backends) - before, 20, "UDP requests through gue");

    let status = d.status_json().unwrap();
    assert_eq!(counter(&status, "drop_too_big"), 0, "{status}");
    assert!(counter(&status, "conn_hit") >= 2 * 20 * 5, "{status}");
    // Replies bypass weir: nothing was reverse-translated.
    assert_eq!(counter(&status, "rev_nat"), 0, "{status}");
    d.stop().unwrap();

    let mut total = 0;
    for dc in decaps {
        let live = dc.status().unwrap();
        let last = dc.stop();
        assert_eq!(get(&last, "malformed"), 0, "{last:?}");
        assert!(get(&last, "decapsulated") >= get(&live, "decapsulated"));
        total += get(&last, "decapsulated");
    }
    // Every client packet of 200 requests (and their handshakes) and 20 datagrams.
    assert!(total >= 2 * 20 * (5 + 2) + 20, "decapsulated {total}");
    // Stopped: nothing stays attached.
    for ns in &lab.backends {
        let out = Command::new("ip")
            .args(["-n", ns, "link", "show", "dev", "eth0"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("prog/xdp"),
            "an XDP program is left on {ns}'s eth0"
        );
    }
}
