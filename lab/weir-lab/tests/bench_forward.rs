//! Smoke test of `weir-lab bench forward` on its newest paths, kept short: one
//! packet-rate trial through a weir ipip VIP (the sinks count IPIP frames
//! by their inner datagram) and one TCP flow through weir ipip (the backend
//! decapsulates with `weir decap`) and HAProxy. Checks that packets and
//! bytes got through each and that the report is well formed; which
//! balancer is faster is a benchmark, not a test. And a short run of the
//! HTTP trials through weir nat and nftables, keep-alive and close.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v:#}"))
}

/// Runs `weir-lab bench forward ARGS --json FILE`, which must succeed, and
/// returns what it printed and its JSON report.
fn bench_forward(tag: &str, args: &[&str]) -> (String, Value) {
    let json = std::env::temp_dir().join(format!("weir-forward-{tag}-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["bench", "forward"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("running weir-lab bench forward");
    assert!(
        out.status.success(),
        "weir-lab bench forward failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    (String::from_utf8_lossy(&out.stdout).into_owned(), r)
}

/// One bench at a time: each loads both CPUs.
static HEAVY: Mutex<()> = Mutex::new(());

#[test]
fn ipip_and_haproxy_carry_packets_and_a_tcp_flow() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let (stdout, r) = bench_forward(
        "udp-tcp",
        &[
            "--balancers",
            "weir-ipip,haproxy",
            "--trials",
            "udp,tcp",
            "--flows",
            "100",
            "--dips",
            "2",
            "--duration",
            "0.5",
            "--runs",
            "1",
            "--tcp-seconds",
            "1",
        ],
    );
    assert!(stdout.contains("One long TCP flow"), "{stdout}");

    // HAProxy does not carry UDP: one packet-rate row, weir ipip's.
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["balancer"], "weir-ipip");
    let t = &r["trials"][0];
    assert!(
        f(t, "received") > 0.0,
        "the sinks counted no IPIP frame: {t:#}"
    );
    // The sinks count over the trial plus a drain: a little over is timing.
    assert!(f(t, "received") <= f(t, "offered") * 1.02, "{t:#}");

    let tcp = r["tcp_trials"].as_array().unwrap();
    let names: Vec<&str> = tcp
        .iter()
        .map(|t| t["balancer"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["weir-ipip", "haproxy"], "{tcp:#?}");
    for t in tcp {
        assert!(f(t, "gbps") > 0.01, "the TCP flow moved nothing: {t:#}");
        assert!(t["retransmits"].is_u64(), "{t:#}");
        assert!(t["drops"].is_object(), "{t:#}");
    }
    assert_eq!(r["tcp_rows"].as_array().unwrap().len(), 2);
}

#[test]
fn weir_nat_and_nftables_carry_http_keep_alive_and_close() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let (stdout, r) = bench_forward(
        "http",
        &[
            "--trials",
            "http",
            "--balancers",
            "weir-nat,nftables",
            "--dips",
            "2",
            "--runs",
            "1",
            "--http-seconds",
            "2",
            "--http-connections",
            "8",
        ],
    );
    assert!(stdout.contains("Connection: close"), "{stdout}");
    assert!(stdout.contains("the daemon's threads"), "{stdout}");
    assert!(stdout.contains("XDP packets per connection"), "{stdout}");

    let trials = r["http_trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4, "{trials:#?}");
    for t in trials {
        let (balancer, mode) = (t["balancer"].as_str().unwrap(), t["mode"].as_str().unwrap());
        let requests = f(t, "requests");
        assert!(requests > 0.0, "nothing answered: {t:#}");
        assert_eq!(f(t, "failed"), 0.0, "{t:#}");
        assert!(f(t, "p99_us") >= f(t, "p50_us"), "{t:#}");
        assert!(f(t, "napi_ns") > 0.0, "no load balancer CPU counted: {t:#}");
        let connections = f(t, "connections");
        match mode {
            // A connection per request (and none more).
            "close" => assert_eq!(connections, requests, "{t:#}"),
            "keep-alive" => assert!(connections <= 8.0, "{t:#}"),
            m => panic!("mode {m}"),
        }
        if balancer == "weir-nat" {
            // Every packet of both directions runs weir's XDP: a request
            // and its response at least, and in close mode the handshake
            // and both FINs too.
            let runs = f(t, "bpf_runs") / requests;
            let least = if mode == "close" { 7.0 } else { 2.0 };
            assert!(runs >= least, "{runs} XDP runs per request: {t:#}");
            assert!(t["process_ns"].is_f64(), "no daemon CPU read: {t:#}");
            // The data-plane counters classify the packets: in close mode
            // every connection was dispatched by its SYN and promoted by
            // its ACK, and nat rewrote its replies back.
            let mix = &t["packets_per_connection"];
            let per_connection = f(t, "bpf_runs") / connections;
            assert!((f(mix, "xdp_runs") - per_connection).abs() < 1e-6, "{t:#}");
            if mode == "close" {
                assert!((0.95..=1.2).contains(&f(mix, "syns")), "{mix:#}");
                assert!((0.95..=1.05).contains(&f(mix, "promotions")), "{mix:#}");
                assert!(f(mix, "hits") >= 2.0, "request and FIN: {mix:#}");
                assert!(f(mix, "reverse_nats") >= 3.0, "{mix:#}");
                let classified = f(mix, "syns")
                    + f(mix, "syn_retransmits")
                    + f(mix, "promotions")
                    + f(mix, "hits")
                    + f(mix, "reverse_nats");
                assert!(f(mix, "xdp_runs") - classified < 0.1, "{mix:#}");
            }
        } else {
            assert!(t["packets_per_connection"].is_null(), "{t:#}");
            assert!(t["bpf_ns"].is_null(), "{t:#}");
            assert!(t["process_ns"].is_null(), "{t:#}");
        }
    }
    let rows = r["http_rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let weir_close = rows
        .iter()
        .find(|x| x["balancer"] == "weir-nat" && x["mode"] == "close")
        .unwrap();
    assert!(
        weir_close["requests_per_s_vs_nftables"].is_f64(),
        "{weir_close:#}"
    );
}

/// DSR's replies go from the backends to the client without the load
/// balancer: through weir dsr none of them reaches the load balancer's
/// interfaces towards the backends (nor weir's XDP there), while weir dsr
/// via the load balancer carries every response back through it.
#[test]
fn dsr_replies_skip_the_load_balancer_unless_routed_through_it() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let (_, r) = bench_forward(
        "dsr-return",
        &[
            "--trials",
            "http",
            "--balancers",
            "weir-dsr,weir-dsr-via-lb",
            "--dips",
            "2",
            "--runs",
            "1",
            "--http-modes",
            "keep-alive",
            "--http-seconds",
            "2",
            "--http-connections",
            "8",
        ],
    );

    let trials = r["http_trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2, "{trials:#?}");
    for t in trials {
        let requests = f(t, "requests");
        assert!(requests > 100.0, "too few answered to judge: {t:#}");
        assert_eq!(f(t, "failed"), 0.0, "{t:#}");
        let through_lb = f(t, "lb_rx_from_backends") / requests;
        // A keep-alive request is one packet each way (and a few ACKs).
        let xdp_runs = f(t, "bpf_runs") / requests;
        match t["balancer"].as_str().unwrap() {
            "weir-dsr" => {
                // Neighbour probes may cross; no response does.
                assert!(
                    f(t, "lb_rx_from_backends") < 20.0,
                    "replies crossed the load balancer: {t:#}"
                );
                assert!(xdp_runs < 1.5, "weir's XDP saw replies: {t:#}");
            }
            "weir-dsr-via-lb" => {
                assert!(through_lb >= 0.9, "responses missing at the LB: {t:#}");
                assert!(xdp_runs >= 1.8, "weir's XDP missed the replies: {t:#}");
            }
            b => panic!("balancer {b}"),
        }
    }
    let rows = r["http_rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|x| x["lb_rx_from_backends_per_request"].is_f64()),
        "{rows:#?}"
    );
}

/// dsr via the load balancer differs from dsr only where replies exist and
/// have a path of their own (the HTTP trials): asked for packet-rate trials
/// alone, the bench refuses instead of measuring nothing.
#[test]
fn dsr_via_the_load_balancer_alone_in_packet_trials_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir-lab"))
        .args(["bench", "forward", "--trials", "udp"])
        .args(["--balancers", "weir-dsr-via-lb", "--runs", "1"])
        .output()
        .expect("running weir-lab bench forward");
    assert!(!out.status.success(), "measured nothing and succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("weir dsr via LB: none of them takes part"),
        "{stderr}"
    );
}
