//! `weir doctor` on a lab host (the load balancer's namespace) with
//! problems planted, then fixed: each item goes FAIL or WARN, then OK, and
//! the exit status follows the FAILs. LRO and rx-gro-hw cannot be set on a
//! veth ([fixed] off), so the offload rule is covered by the unit tests.

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use weir_lab::netns::{enter, ip_in, sysctl_in};
use weir_lab::topology::{ethtool_in, Lab};

const METRICS_PORT: u16 = 9103;

fn config_file(lab: &Lab) -> PathBuf {
    let path = std::env::temp_dir().join(format!("weir-doctor-{}.toml", lab.lb));
    fs::write(
        &path,
        format!(
            "[dataplane]\ninterfaces = [\"wc0\", \"wb1\"]\n\n\
             [api]\nlisten = \"off\"\n\n\
             [metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n\n\
             [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n\
             [[vip.dip]]\naddress = \"10.77.1.2\"\nport = 8080\n\
             [[vip.dip]]\naddress = \"10.77.99.2\"\nport = 8080\n"
        ),
    )
    .unwrap();
    path
}

/// `weir doctor --json` in the namespace: (exit success, check -> level).
fn doctor(launcher: &[&str], config: &PathBuf) -> (bool, serde_json::Value) {
    let out = Command::new(launcher[0])
        .args(&launcher[1..])
        .arg(env!("CARGO_BIN_EXE_weir"))
        .args(["doctor", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let fails = report["fail"].as_u64().unwrap();
    assert_eq!(out.status.success(), fails == 0, "{report}");
    if fails > 0 {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("{fails} of ")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (out.status.success(), report)
}

fn level(report: &serde_json::Value, check: &str) -> String {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check"] == check)
        .unwrap_or_else(|| panic!("no {check} in {report}"))["level"]
        .as_str()
        .unwrap()
        .to_string()
}

fn fix(report: &serde_json::Value, check: &str) -> String {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check"] == check)
        .unwrap()["fix"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn each_planted_problem_fails_or_warns_until_fixed() {
    let lab = Lab::build(1).expect("building the lab");
    let b1 = lab.backends[0].clone();
    let config = config_file(&lab);
    let net = format!("--net=/run/netns/{}", lab.lb);
    let nsenter = ["nsenter", net.as_str()];

    // Planted: forwarding off, strict rp_filter, a veth peer with neither
    // XDP nor GRO, a DIP with no route, the metrics port taken.
    sysctl_in(&lab.lb, "net.ipv4.ip_forward", "0").unwrap();
    sysctl_in(&lab.lb, "net.ipv4.conf.all.rp_filter", "1").unwrap();
    ip_in(&b1, &["link", "set", "dev", "eth0", "xdp", "off"]).unwrap();
    let lb = lab.lb.clone();
    let listener = std::thread::spawn(move || {
        enter(&lb).unwrap();
        TcpListener::bind(("127.0.0.1", METRICS_PORT)).unwrap()
    })
    .join()
    .unwrap();

    let (ok, r) = doctor(&nsenter, &config);
    assert!(!ok, "{r}");
    for (check, want) in [
        ("kernel", "OK"),
        ("root", "OK"),
        ("bpffs", "OK"),
        ("interface wc0", "OK"),
        ("interface wc0 sending", "OK"),
        ("interface wb1", "OK"),
        ("interface wb1 sending", "FAIL"),
        ("forwarding", "FAIL"),
        ("rp_filter", "WARN"),
        ("route to 10.77.1.2", "OK"),
        ("route to 10.77.99.2", "FAIL"),
        ("metrics port", "FAIL"),
    ] {
        assert_eq!(level(&r, check), want, "{check}: {r}");
    }
    assert_eq!(
        fix(&r, "interface wb1 sending").split(',').next().unwrap(),
        format!("`ip netns exec {b1} ethtool -K eth0 gro on`")
    );
    assert_eq!(
        fix(&r, "forwarding"),
        "`sysctl -w net.ipv4.ip_forward=1` (and in /etc/sysctl.d/ to keep it)"
    );

    // Fixed as the fixes say.
    sysctl_in(&lab.lb, "net.ipv4.ip_forward", "1").unwrap();
    sysctl_in(&lab.lb, "net.ipv4.conf.all.rp_filter", "2").unwrap();
    ethtool_in(&b1, &["-K", "eth0", "gro", "on"]).unwrap();
    ip_in(
        &lab.lb,
        &[
            "route",
            "add",
            "10.77.99.0/24",
            "via",
            "10.77.1.2",
            "dev",
            "wb1",
        ],
    )
    .unwrap();
    drop(listener);
    let (ok, r) = doctor(&nsenter, &config);
    assert!(ok, "{r}");
    assert_eq!(
        (r["fail"].as_u64(), r["warn"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );

    // `ip netns exec` gives weir a mount namespace of its own, with no BPF
    // filesystem: serve would refuse; mounting one leaves a warning (the
    // state would not outlive the process).
    let exec = ["ip", "netns", "exec", lab.lb.as_str()];
    let (ok, r) = doctor(&exec, &config);
    assert!(!ok);
    assert_eq!(level(&r, "bpffs"), "FAIL", "{r}");
    assert!(fix(&r, "bpffs").contains("`mount -t bpf bpf /sys/fs/bpf`"));
    let script = format!(
        "mount -t bpf bpf /sys/fs/bpf && exec {} doctor --json --config {}",
        env!("CARGO_BIN_EXE_weir"),
        config.display()
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.lb, "sh", "-c", &script])
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(level(&r, "bpffs"), "WARN", "{r}");
    assert!(out.status.success(), "{r}");
    let _ = fs::remove_file(&config);
}

#[test]
fn a_dsr_backend_needs_its_arp_settings_and_the_vip_on_lo() {
    let lab = Lab::build(1).expect("building the lab");
    let b1 = lab.backends[0].clone();
    let net = format!("--net=/run/netns/{b1}");
    let run = || {
        Command::new("nsenter")
            .arg(&net)
            .arg(env!("CARGO_BIN_EXE_weir"))
            .args(["doctor", "--role", "backend", "--vip", "10.77.100.9"])
            .output()
            .unwrap()
    };
    // The lab's backends have the ARP settings, not this VIP.
    sysctl_in(&b1, "net.ipv4.conf.all.arp_ignore", "0").unwrap();
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAIL  arp: arp_ignore = 0, arp_announce = 2"),
        "{text}"
    );
    assert!(
        text.contains("fix: `ip addr add 10.77.100.9/32 dev lo`"),
        "{text}"
    );
    sysctl_in(&b1, "net.ipv4.conf.all.arp_ignore", "1").unwrap();
    ip_in(&b1, &["addr", "add", "10.77.100.9/32", "dev", "lo"]).unwrap();
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OK    arp: "), "{text}");
    assert!(text.contains("OK    vip 10.77.100.9: held here"), "{text}");
}
