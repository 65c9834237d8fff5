//! `weir reload` end to end, in network namespaces the test builds and
//! always removes (a client, weir and two backends), with the management
//! API off (the command must not need it):
//! - a file the daemon applies: exit 0 and what changed;
//! - a file it refuses (bad value, restart-only key): non-zero exit with the
//!   daemon's reason (file:line, or the key and the restart to do), and the
//!   running configuration stays;
//! - a daemon that does not answer: a clear timeout;
//! - a reload that adds `[controller] telemetry = "passive"` runs it: the
//!   status says so and the data plane's measurements reach the controller.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::backend::{Backend, BackendOptions};
use weir_lab::client::{http_once, spawn_http};
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;
use weir_sys::process::send_signal;

const VIP: &str = "10.77.100.1:80";

/// One lab at a time: the telemetry wants the CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(extra_dataplane: &str, weight: &str, controller: &str) -> String {
    format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\"]\n{extra_dataplane}\n\
         [api]\nlisten = \"off\"\n\n{controller}\n\
         [[vip]]\nname = \"web\"\naddress = \"10.77.100.1\"\nport = 80\nprotocol = \"tcp\"\n\
         mode = \"nat\"\n\
         [[vip.dip]]\naddress = \"10.77.1.2\"\nport = 8080\n\
         [[vip.dip]]\naddress = \"10.77.2.2\"\nport = 8080\nweight = {weight}\n"
    )
}

/// `weir reload` for daemon `d` (it signals a pid; no namespace needed).
fn reload(d: &Daemon, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("reload")
        .arg("--run-dir")
        .arg(d.run_dir())
        .args(extra)
        .output()
        .expect("running weir reload")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Polls `weir status --json` until `pred` holds (bounded).
fn wait_status(d: &Daemon, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = d.status_json().unwrap();
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}; status: {s:#}\nlog:\n{}",
            d.new_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn weir_reload_exits_on_the_daemons_answer_and_applies_what_it_accepts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::build(2).expect("building the lab");
    let opts = BackendOptions {
        delay_us: 3_000,
        agent_window: None,
    };
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start_with(ns, &format!("backend-{}", i + 1), &opts).unwrap())
        .collect();
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(&config("", "1", "")).unwrap();
    d.start().unwrap();
    let vip = VIP.parse().unwrap();
    http_once(&lab.client, vip).expect("the VIP answers");

    // Applied: exit 0 and what changed.
    let o = reload(&d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains(&format!("weir serve (pid {})", d.pid().unwrap()))
            && said.contains("reloaded: +0 -0 VIPs, +0 -0 DIPs"),
        "{said}"
    );

    // A value the daemon refuses: its reason, with the file and line.
    d.write_config(&config("", "\"zero\"", "")).unwrap();
    let o = reload(&d, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        err.contains("refused")
            && err.contains("weir.toml:")
            && err.contains("weight")
            && err.contains("keeps running the configuration it had"),
        "{err}"
    );

    // A restart-only key: refused by name, with the restart to do; the
    // VIP still has both DIPs (nothing of the file was applied).
    d.write_config(&config("conn_table_size = 4096\n", "5", ""))
        .unwrap();
    let o = reload(&d, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        err.contains("dataplane.conn_table_size cannot change while weir serve runs")
            && err.contains("restart with `weir serve --takeover`"),
        "{err}"
    );
    let st = d.status_json().unwrap();
    let weights: Vec<u64> = st["vips"][0]["dips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["weight"].as_u64().unwrap())
        .collect();
    assert_eq!(
        weights,
        vec![1, 1],
        "a refused reload changed weights: {st:#}"
    );

    // No answer (the daemon is stopped): a timeout that says so.
    d.write_config(&config("", "1", "")).unwrap();
    let pid = d.pid().unwrap();
    send_signal(pid, libc::SIGSTOP).unwrap();
    let o = reload(&d, &["--timeout", "1"]);
    send_signal(pid, libc::SIGCONT).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("did not answer the reload within 1 s"),
        "{}",
        text(&o)
    );
    // The signal it left pending is served now; this reload comes after
    // it, so the next one answers for the next file alone.
    let o = reload(&d, &[]);
    assert!(o.status.success(), "{}", text(&o));

    // Passive telemetry added by a reload: in force, and measured.
    let controller = "[controller]\npolicy = \"awfd\"\ntelemetry = \"passive\"\n\
                      update_interval_ms = 100\n";
    d.write_config(&config("", "1", controller)).unwrap();
    let o = reload(&d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("controller.telemetry"),
        "{}",
        text(&o)
    );
    // Enough connections that both DIPs get some (4 all landed on one DIP in
    // about one run in eight, leaving the other with no estimate).
    let load = spawn_http(&lab.client, vip, 16, 60, Duration::from_millis(50));
    let st = wait_status(&d, "passive estimates", Duration::from_secs(10), |s| {
        s["controller"]["vips"][0]["dips"]
            .as_array()
            .is_some_and(|dips| dips.len() == 2 && dips.iter().all(|x| x["capacity"].is_number()))
    });
    assert_eq!(st["controller"]["telemetry"], "passive", "{st:#}");
    for h in load {
        let r = h.join().unwrap();
        assert!(!r.violated(), "a connection moved or broke: {r:?}");
    }
    d.stop().unwrap();

    // Stopped: `weir status` reads the pins that run used, and names them
    // when they are gone.
    let status = |d: &Daemon| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["status", "--run-dir"])
            .arg(d.run_dir())
            .output()
            .unwrap()
    };
    let o = status(&d);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("VIP web 10.77.100.1:80"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&d.pin_dir).unwrap();
    let o = status(&d);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&d.pin_dir.display().to_string()),
        "{}",
        text(&o)
    );
}
