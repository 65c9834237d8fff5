//! What `make install` ships, checked: it installs a built binary without
//! running cargo; every example configuration loads;
//! completions and man pages come from the CLI definition; the systemd units
//! pass `systemd-analyze verify` and keep what weir needs (the host's bpffs
//! writable, /proc whole, the run record across restarts); and the Grafana
//! dashboard is well-formed and queries exactly the metrics that a live
//! `weir serve` and `weir kv` export (scraped in namespaces; root needed).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::backend::{Backend, BackendOptions, AGENT_PORT};
use weir_lab::client::http_once;
use weir_lab::netns::{enter, ip_in, veth, NamespaceSet};
use weir_lab::topology::Lab;

mod common;
use common::{repo, start_daemon, text, weir, Interrupted, Speakers, TempDir, WEIR};

#[test]
fn every_example_configuration_loads_without_warnings() {
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let file = path.to_str().unwrap();
        // A memcached switch's file has a [pool]; the load balancer's has not.
        let is_kv = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .any(|l| l.trim() == "[pool]");
        let out = if is_kv {
            weir(&["kv", "--config", file, "--check"])
        } else {
            weir(&["check", "--config", file])
        };
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{file}: {stdout}{stderr}");
        assert!(stdout.contains(": ok ("), "{file}: {stdout}");
        assert!(
            is_kv || stdout.contains(" 0 warnings"),
            "{file} warns: {stderr}"
        );
        seen.insert(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    for want in ["weir.toml", "nat.toml", "dsr.toml", "encap.toml", "kv.toml"] {
        assert!(seen.contains(want), "examples/{want} is gone: {seen:?}");
    }
}

#[test]
fn completions_and_man_pages_come_from_the_cli() {
    for shell in ["bash", "zsh", "fish"] {
        let out = weir(&["completions", shell]);
        let script = text(&out.stdout);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        for word in ["serve", "takeover", "decap", "kv"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
        // The labs, benchmarks and simulator are weir-lab's, not the product's.
        assert!(
            !script.contains("spotlight"),
            "{shell} completion offers a lab"
        );
    }
    let bad = weir(&["completions", "cmd.exe"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("cmd.exe"),
        "{}",
        text(&bad.stderr)
    );

    let tmp = TempDir::new("weir-packaging-man");
    let dir = tmp.path();
    let out = weir(&["man", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "weir.1",
        "weir-serve.1",
        "weir-kv.1",
        "weir-agent.1",
        "weir-kv-status.1",
    ] {
        let roff =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".TH "), "{page}");
    }
    let serve = std::fs::read_to_string(dir.join("weir-serve.1")).unwrap();
    assert!(serve.contains("takeover") && serve.contains("config"));
    for hidden in [
        "weir-completions.1",
        "weir-man.1",
        "weir-lab.1",
        "weir-bench.1",
        "weir-sim.1",
    ] {
        assert!(!dir.join(hidden).exists(), "{hidden} was generated");
    }
}

fn make_install(weir: &str, destdir: &Path) -> Output {
    Command::new("make")
        .arg("-C")
        .arg(repo())
        .args(["--no-print-directory", "install", "PREFIX=/usr"])
        .arg(format!("WEIR={weir}"))
        .arg(format!("DESTDIR={}", destdir.display()))
        // Any cargo run fails the install.
        .arg("CARGO=false")
        .output()
        .expect("make")
}

#[test]
fn make_install_ships_a_built_binary_without_cargo() {
    let tmp = TempDir::new("weir-packaging-install");
    let dir = tmp.path();
    let out = make_install(WEIR, dir);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let installed = dir.join("usr/bin/weir");
    let version = Command::new(&installed).arg("--version").output().unwrap();
    assert_eq!(
        text(&version.stdout).trim(),
        format!("weir {}", env!("CARGO_PKG_VERSION"))
    );
    let unit = std::fs::read_to_string(dir.join("usr/lib/systemd/system/weir.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/weir serve"), "{unit}");
    for path in [
        "usr/share/man/man8/weir.8",
        "usr/share/man/man5/weir.toml.5",
        "usr/share/man/man1/weir-serve.1",
        "usr/share/doc/weir/examples/nat.toml",
        "usr/share/weir/grafana/weir.json",
        "usr/share/weir/prometheus/weir-alerts.yml",
        "usr/share/zsh/site-functions/_weir",
    ] {
        assert!(dir.join(path).is_file(), "make install did not ship {path}");
    }

    // A binary that is not there is named, and nothing is installed.
    let tmp = TempDir::new("weir-packaging-install-missing");
    let dir = tmp.path();
    let out = make_install("/nonexistent/weir", dir);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("WEIR=/nonexistent/weir is not an executable file")
            && stderr.contains("make build"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
}

/// The unit's `key=value` settings (continuation lines are not used).
fn settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn systemd_units_verify_and_keep_what_weir_needs() {
    let units = ["weir.service", "weir-kv.service", "weir-agent.service"];
    let tmp = TempDir::new("weir-packaging-units");
    let dir = tmp.path();
    let man = dir.join("man/man1");
    std::fs::create_dir_all(&man).unwrap();
    assert!(weir(&["man", man.to_str().unwrap()]).status.success());
    for u in units {
        let text = std::fs::read_to_string(repo().join("packaging/systemd").join(u)).unwrap();
        // What `make install` does with BINDIR, here with the binary under test.
        std::fs::write(dir.join(u), text.replace("/usr/local/bin/weir", WEIR)).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(units.map(|u| dir.join(u)))
        .env("MANPATH", dir.join("man"))
        .output()
        .expect("systemd-analyze (Debian package systemd)");
    let report = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success() && report.trim().is_empty(), "{report}");

    for u in ["weir.service", "weir-kv.service"] {
        let s = settings(&std::fs::read_to_string(dir.join(u)).unwrap());
        let get = |k: &'static str| {
            s.iter()
                .filter(move |(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        // weir reads /proc/1 and other processes' fdinfo, and attaches to
        // the host's interfaces.
        for k in [
            "ProtectProc",
            "ProcSubset",
            "PrivateNetwork",
            "SystemCallFilter",
        ] {
            assert_eq!(get(k).count(), 0, "{u} sets {k}");
        }
        let caps: BTreeSet<&str> = get("CapabilityBoundingSet")
            .flat_map(|v| v.split_whitespace())
            .collect();
        for cap in ["CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN"] {
            assert!(caps.contains(cap), "{u} lacks {cap}: {caps:?}");
        }
    }
    let lb = settings(&std::fs::read_to_string(dir.join("weir.service")).unwrap());
    let has = |k: &str, v: &str| lb.iter().any(|(key, val)| key == k && val.contains(v));
    // Pins must outlive the service: the host's bpffs, writable in the sandbox.
    assert!(has("ReadWritePaths", "/sys/fs/bpf"));
    assert!(has("RequiresMountsFor", "/sys/fs/bpf"));
    // --takeover finds its predecessor through the run record.
    assert!(has("RuntimeDirectory", "weir") && has("RuntimeDirectoryPreserve", "yes"));
    assert!(has("ExecStart", "--run-dir /run/weir"));
    assert!(has("CapabilityBoundingSet", "CAP_SYS_ADMIN"));
}

/// `GET /metrics` on 127.0.0.1:`port` inside namespace `ns`, retried (with
/// `between` run before each retry) until it answers with every name in
/// `want` or 15 s pass; the names of the series it exports.
fn scrape(ns: &str, port: u16, want: &[&str], between: &mut dyn FnMut()) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ns = ns.to_string();
        let body = std::thread::spawn(move || {
            enter(&ns).unwrap();
            TcpStream::connect(("127.0.0.1", port))
                .and_then(|mut s| {
                    s.set_read_timeout(Some(Duration::from_secs(5)))?;
                    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
                    let mut out = String::new();
                    s.read_to_string(&mut out)?;
                    Ok(out)
                })
                .unwrap_or_default()
        })
        .join()
        .unwrap();
        let names = series_names(&body);
        if want.iter().all(|w| names.contains(*w)) || Instant::now() > deadline {
            return names;
        }
        between();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Series names in Prometheus (or OpenMetrics) text: the sample lines'.
fn series_names(body: &str) -> BTreeSet<String> {
    body.split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .lines()
        .filter(|l| l.starts_with("weir_"))
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// Every `weir_*` identifier in `s`.
fn metric_names(s: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = s;
    while let Some(i) = rest.find("weir_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The dashboard's queries (panel targets and template variables), after
/// checking its structure.
fn dashboard_queries(d: &Value) -> Vec<String> {
    assert_eq!(d["uid"], "weir");
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36);
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(vars
        .iter()
        .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"));
    let mut queries: Vec<String> = vars
        .iter()
        .filter_map(|v| v["definition"].as_str().map(String::from))
        .collect();
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: id reused");
        let g = &p["gridPos"];
        let (x, w, h) = (
            g["x"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(w >= 1 && x + w <= 24 && h >= 1, "{title}: gridPos {g}");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            assert!(t["refId"].is_string(), "{title}");
            let expr = t["expr"].as_str().unwrap();
            assert!(!metric_names(expr).is_empty(), "{title}: {expr}");
            queries.push(expr.to_string());
        }
    }
    queries
}

/// `weir kv` with the UDP path on a veth in namespace `ns`, metrics on
/// 127.0.0.1:9122 there; stopped (SIGINT: detach) on drop.
fn start_kv(ns: &str, dir: &Path) -> Interrupted {
    let cfg = dir.join("kv.toml");
    std::fs::write(
        &cfg,
        "[pool]\nlisten = \"127.0.0.1:22122\"\nmetrics = \"127.0.0.1:9122\"\n\
         [[pool.server]]\naddress = \"10.79.0.2\"\nport = 11211\nname = \"mc1\"\n\
         mac = \"02:00:00:00:00:02\"\n\
         [udp]\ninterfaces = [\"v0\"]\nxdp_mode = \"generic\"\n[cache]\nenabled = true\n",
    )
    .unwrap();
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args([WEIR, "kv", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Interrupted(child)
}

#[test]
fn grafana_dashboard_queries_the_metrics_weir_exports() {
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("packaging/grafana/weir.json")).unwrap(),
    )
    .expect("packaging/grafana/weir.json is JSON");
    let queried: BTreeSet<String> = dashboard_queries(&d)
        .iter()
        .flat_map(|q| metric_names(q))
        .collect();

    // weir serve with a controller over two backends: the first answers
    // requests, health checks and its agent's polls, so it gets estimates
    // and a share of new connections; the second answers nothing, so the
    // agent-error and health-failure counters have samples too. The hybrid
    // tier exports its workers' metrics as well.
    let lab = Lab::build(2).unwrap();
    let opts = BackendOptions {
        agent_window: Some(Duration::from_millis(500)),
        ..BackendOptions::default()
    };
    let _backend = Backend::start_with(&lab.backends[0], "backend-1", &opts).unwrap();
    let mut daemon = start_daemon(
        &lab,
        &format!(
            "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\nconn_table_size = 4096\n\
             tier = \"hybrid\"\nworkers = [1]\nfast_table_size = 64\n\
             [controller]\nupdate_interval_ms = 100\nagent_timeout_ms = 50\n\
             [metrics]\nlisten = \"127.0.0.1:9100\"\n\
             [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\n\
             protocol = \"tcp\"\nmode = \"nat\"\n\
             [vip.health]\nkind = \"tcp\"\ninterval_ms = 100\ntimeout_ms = 50\n\
             [[vip.dip]]\naddress = \"10.77.1.2\"\nport = 8080\nagent = \"10.77.1.2:{AGENT_PORT}\"\n\
             [[vip.dip]]\naddress = \"10.77.2.2\"\nport = 8080\nagent = \"10.77.2.2:{AGENT_PORT}\"\n\
             [bgp]\nlocal_as = 65001\nrouter_id = \"10.77.1.1\"\n\
             [[bgp.neighbour]]\naddress = \"10.77.1.254\"\nremote_as = 65000\nbfd = true\n"
        ),
    );
    // BIRD tries a neighbour that is not there; its session and BFD states,
    // and the VIP's announcement, are exported all the same.
    let _speaker = Speakers(vec![daemon.run_dir()]);
    let vip: SocketAddr = "10.77.100.1:80".parse().unwrap();
    let serve = scrape(
        &lab.lb,
        9100,
        &[
            "weir_dip_capacity",
            "weir_dip_new_conn_share",
            "weir_dip_agent_errors_total",
            "weir_dip_health_failures_total",
            "weir_packets_total",
            "weir_worker_utilization",
            "weir_worker_offload_total",
            "weir_bgp_session_established",
            "weir_bgp_bfd_up",
        ],
        &mut || {
            let _ = http_once(&lab.client, vip);
        },
    );
    daemon.stop().unwrap();

    let mut set = NamespaceSet::new();
    let sw = set.add("kv").unwrap();
    let peer = set.add("mc").unwrap();
    veth(&sw, "v0", &peer, "v1").unwrap();
    ip_in(&sw, &["addr", "add", "10.79.0.1/24", "dev", "v0"]).unwrap();
    ip_in(&sw, &["link", "set", "v0", "up"]).unwrap();
    ip_in(&peer, &["link", "set", "v1", "up"]).unwrap();
    let tmp = TempDir::new("weir-packaging-kv");
    let dir = tmp.path();
    let kv_switch = start_kv(&sw, dir);
    let kv = scrape(
        &sw,
        9122,
        &["weir_kv_xdp_total", "weir_kv_udp_cache_hits_total"],
        &mut || {},
    );
    drop(kv_switch);

    assert!(serve.contains("weir_dip_weight"), "weir serve: {serve:?}");
    assert!(kv.contains("weir_kv_requests_total"), "weir kv: {kv:?}");
    let exported: BTreeSet<&String> = serve.iter().chain(&kv).collect();
    for name in &queried {
        assert!(
            exported.contains(name),
            "packaging/grafana/weir.json queries {name}, which neither weir serve nor weir kv \
             exports (serve: {serve:?}, kv: {kv:?})"
        );
    }
    for name in &serve {
        assert!(
            queried.contains(name),
            "weir serve exports {name}, which no panel of packaging/grafana/weir.json shows"
        );
    }
    let rules = std::fs::read_to_string(repo().join(ALERT_RULES)).unwrap();
    let alerted = metric_names(&rules);
    assert!(
        alerted.contains("weir_bgp_session_established"),
        "{alerted:?}"
    );
    for name in &alerted {
        assert!(
            serve.contains(name),
            "{ALERT_RULES} reads {name}, which weir serve does not export (serve: {serve:?})"
        );
    }
}

const ALERT_RULES: &str = "packaging/prometheus/weir-alerts.yml";

#[test]
fn alert_rules_pass_promtool() {
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(repo().join(ALERT_RULES))
        .output()
        .expect("promtool is missing: run scripts/deps.sh (Debian's prometheus package has it)");
    assert!(
        out.status.success(),
        "promtool check rules {ALERT_RULES}:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("SUCCESS"),
        "{}",
        text(&out.stdout)
    );
}
