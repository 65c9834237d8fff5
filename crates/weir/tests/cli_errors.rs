//! Bad input to `weir serve` and friends: a one-line error that says what to
//! do, a non-zero exit, and nothing left attached or pinned.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use weir_lab::daemon::Daemon;
use weir_lab::netns::{ip_in, veth, NamespaceSet};
use weir_lab::topology::attach_pass;

mod common;
use common::{exe, output_within, weir, WEIR};
use weir_testkit::cli::assert_ends_quietly_into_a_closed_pipe;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A config file in a private temp dir, with a private pin dir.
struct Scratch {
    dir: PathBuf,
    pins: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("weir-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pins = PathBuf::from(format!("/sys/fs/bpf/weir-cli-{tag}-{}", std::process::id()));
        Scratch { dir, pins }
    }

    fn config(&self, body: &str) -> PathBuf {
        let p = self.dir.join("weir.toml");
        let text = body.replacen(
            "[dataplane]",
            &format!("[dataplane]\npin_dir = \"{}\"", self.pins.display()),
            1,
        );
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.pins);
    }
}

const VIP: &str = "\n[[vip]]\nname = \"web\"\naddress = \"10.9.0.1\"\nport = 80\nprotocol = \"tcp\"\nmode = \"nat\"\n[[vip.dip]]\naddress = \"10.9.1.2\"\n";

fn serve(cfg: &Path, run_dir: &Path) -> Output {
    weir(&[
        "serve",
        "--config",
        cfg.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ])
}

#[test]
fn config_errors_name_file_line_and_field_and_pin_nothing() {
    let s = Scratch::new("cfg");
    let cfg = s.config(&format!(
        "[dataplane]\ninterfaces = [\"lo\"]\n{}",
        VIP.replace("port = 80", "port = 80000")
    ));
    let o = serve(&cfg, &s.dir);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("weir.toml:") && e.contains("vip.port"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(
        !s.pins.exists(),
        "a failed start pinned {}",
        s.pins.display()
    );

    let o = weir(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(!o.status.success());
    let o = weir(&["check", "--config", "/nonexistent/weir.toml"]);
    assert!(stderr(&o).contains("cannot read it"), "{}", stderr(&o));
}

#[test]
fn unknown_interface_is_named() {
    let s = Scratch::new("if");
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"nosuch0\"]\n{VIP}"));
    let o = serve(&cfg, &s.dir);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nosuch0"), "{}", stderr(&o));
    assert!(!s.pins.exists());
}

#[test]
fn weir_check_refuses_a_repeated_interface_and_warns_about_odd_files() {
    let s = Scratch::new("chk");
    let cfg = s.config(&format!(
        "[dataplane]\ninterfaces = [\"lo\", \"lo\"]\n{VIP}"
    ));
    for o in [
        weir(&["check", "--config", cfg.to_str().unwrap()]),
        serve(&cfg, &s.dir),
    ] {
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("dataplane.interfaces: `lo` is listed twice"),
            "{e}"
        );
        assert!(!e.contains("native"), "{e}");
    }
    // A VIP with no DIPs loads, with a warning that names it.
    let no_dips = &VIP[..VIP.find("[[vip.dip]]").unwrap()];
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"lo\"]\n{no_dips}"));
    let o = weir(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("warning: ") && stderr(&o).contains("vip[0].dip: no DIPs"),
        "{}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("ok (1 VIPs, 1 warnings)"), "{out}");
}

#[test]
fn not_root_is_refused() {
    let s = Scratch::new("root");
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"lo\"]\n{VIP}"));
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            WEIR,
            "serve",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .expect("setpriv (util-linux)");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("must run as root"), "{}", stderr(&o));
}

#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    let s = Scratch::new("pipe");
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"lo\"]\n{VIP}"));
    let mut cmd = Command::new(WEIR);
    cmd.args(["check", "--config"]).arg(&cfg);
    assert_ends_quietly_into_a_closed_pipe(cmd);
}

#[test]
fn reload_without_a_daemon_fails() {
    let o = weir(&["reload", "--run-dir", "/nonexistent-weir-run"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no running weir"), "{}", stderr(&o));
    for bad in ["0", "nan", "inf", "7200"] {
        let o = weir(&[
            "reload",
            "--run-dir",
            "/nonexistent-weir-run",
            "--timeout",
            bad,
        ]);
        assert!(
            !o.status.success() && stderr(&o).contains("--timeout"),
            "{bad}: {}",
            stderr(&o)
        );
    }
}

/// A namespace with one veth pair (a0 <-> a1) to attach to.
fn one_link_ns() -> (NamespaceSet, String) {
    let mut set = NamespaceSet::new();
    let ns = set.add("cli").unwrap();
    veth(&ns, "a0", &ns, "a1").unwrap();
    ip_in(&ns, &["link", "set", "a0", "up"]).unwrap();
    ip_in(&ns, &["link", "set", "a1", "up"]).unwrap();
    (set, ns)
}

fn xdp_attached(ns: &str, dev: &str) -> bool {
    xdp_prog_id(ns, dev).is_some()
}

/// The id of the XDP program on `dev`, from `ip link show`.
fn xdp_prog_id(ns: &str, dev: &str) -> Option<u32> {
    let out = Command::new("ip")
        .args(["-n", ns, "link", "show", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (_, rest) = text.split_once("prog/xdp id ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn weir_decap_names_a_bad_interface_and_a_foreign_program() {
    let (_set, ns) = one_link_ns();
    let decap = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &ns, WEIR, "decap"])
            .args(args)
            .output()
            .unwrap()
    };
    let o = decap(&["--interface", "nosuch0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("\"nosuch0\"") && stderr(&o).contains("--interface"),
        "{}",
        stderr(&o)
    );
    let o = decap(&["status", "--interface", "a0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no XDP program on a0"),
        "{}",
        stderr(&o)
    );
    attach_pass(&ns, "a1").unwrap();
    let pass = xdp_prog_id(&ns, "a1");
    let o = decap(&["status", "--interface", "a1"]);
    assert!(stderr(&o).contains("not weir_decap"), "{}", stderr(&o));
    let o = decap(&["--interface", "a1"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("a1 already has an XDP program"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        xdp_prog_id(&ns, "a1"),
        pass,
        "the foreign program was touched"
    );
    assert!(!xdp_attached(&ns, "a0"));
}

#[test]
fn an_interface_with_xdp_already_is_refused() {
    let (_set, ns) = one_link_ns();
    // Start weir once on a0, then a second one must refuse the busy link.
    let mut first = Daemon::new(exe(), &ns).unwrap();
    first
        .write_config(&format!("[dataplane]\ninterfaces = [\"a0\"]\n{VIP}"))
        .unwrap();
    first.start().unwrap();
    let mut second = Daemon::new(exe(), &ns).unwrap();
    second.pin_dir = PathBuf::from(format!("{}-2", first.pin_dir.display()));
    second
        .write_config(&format!("[dataplane]\ninterfaces = [\"a0\"]\n{VIP}"))
        .unwrap();
    let e = second.start().unwrap_err().to_string();
    let pid = first.pid().unwrap();
    assert!(
        e.contains("a0 already has an XDP program")
            && e.contains("name weir_lb")
            && e.contains(&format!("of a running weir, pid {pid} (weir)")),
        "{e}"
    );
    assert!(!second.pin_dir.exists(), "the refused start pinned state");
    first.stop().unwrap();
    assert!(!xdp_attached(&ns, "a0"), "stop left XDP attached");
}

#[test]
fn incompatible_saved_state_is_explained_and_nothing_is_attached() {
    let (_set, ns) = one_link_ns();
    let mut d = Daemon::new(exe(), &ns).unwrap();
    // Only the IPv4 tables' size changes, so the refusal names it.
    let config = |size: u32| {
        format!(
            "[dataplane]\ninterfaces = [\"a0\"]\nconn_table_size = {size}\n\
             conn_table_size_v6 = 128\nhalf_open_table_size = 256\n{VIP}"
        )
    };
    d.write_config(&config(1024)).unwrap();
    d.start().unwrap();
    d.stop().unwrap();
    assert!(
        d.pin_dir.join("conns").exists(),
        "state is pinned across restarts"
    );
    d.write_config(&config(2048)).unwrap();
    let e = d.start().unwrap_err().to_string();
    assert!(
        e.contains("1024") && e.contains("2048") && e.contains("--reset-state"),
        "{e}"
    );
    assert!(!xdp_attached(&ns, "a0"));
    assert!(
        d.pin_dir.join("conns").exists(),
        "a refused start must not drop saved state"
    );
}

/// State pinned before IPv4 connections had their own tables (no `conns4`)
/// is taken over: its tables are replaced and their connections moved
/// (weir-dataplane's pins.rs checks the move entry by entry).
#[test]
fn saved_state_without_the_ipv4_tables_is_taken_over() {
    let (_set, ns) = one_link_ns();
    let mut d = Daemon::new(exe(), &ns).unwrap();
    d.write_config(&format!(
        "[dataplane]\ninterfaces = [\"a0\"]\nconn_table_size = 1024\n{VIP}"
    ))
    .unwrap();
    d.start().unwrap();
    d.stop().unwrap();
    for old in ["conns4", "rev_nat4"] {
        std::fs::remove_file(d.pin_dir.join(old)).unwrap();
    }
    d.start().unwrap();
    assert!(xdp_attached(&ns, "a0"));
    for table in ["conns4", "rev_nat4", "conns", "rev_nat"] {
        assert!(d.pin_dir.join(table).exists(), "{table} is pinned");
    }
    d.stop().unwrap();
}

/// A per-CPU LRU table (whose size the kernel rounds up to whole CPU
/// shares: 1025 -> 1026 on 2 CPUs) is reused by a restart with the same settings and refused by one
/// with the shared layout.
#[test]
fn saved_state_of_another_lru_layout_is_refused() {
    let (_set, ns) = one_link_ns();
    let mut d = Daemon::new(exe(), &ns).unwrap();
    let config = |lru: &str| {
        format!(
            "[dataplane]\ninterfaces = [\"a0\"]\nconn_table_size = 1025\nconn_lru = \"{lru}\"\n{VIP}"
        )
    };
    d.write_config(&config("per-cpu")).unwrap();
    d.start().unwrap();
    d.stop().unwrap();
    d.start().unwrap();
    d.stop().unwrap();
    d.write_config(&config("shared")).unwrap();
    let e = d.start().unwrap_err().to_string();
    assert!(
        e.contains("per-cpu LRU")
            && e.contains("asks for shared")
            && e.contains("dataplane.conn_lru")
            && e.contains("--reset-state"),
        "{e}"
    );
    assert!(!xdp_attached(&ns, "a0"));
}

#[test]
fn a_foreign_xdp_program_is_named_with_the_command_to_detach_it() {
    let (_set, ns) = one_link_ns();
    attach_pass(&ns, "a1").unwrap();
    let id = xdp_prog_id(&ns, "a1").unwrap();
    let mut d = Daemon::new(exe(), &ns).unwrap();
    d.write_config(&format!("[dataplane]\ninterfaces = [\"a1\"]\n{VIP}"))
        .unwrap();
    let e = d.start().unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "a1 already has an XDP program (id {id}, name xdp_pass)"
        )) && e.contains("not weir's")
            && e.contains("ip link set dev a1 xdp off"),
        "{e}"
    );
    assert!(!d.pin_dir.exists(), "the refused start pinned state");
    let e = d.adopt().unwrap_err().to_string();
    assert!(
        e.contains("a1 carries xdp_pass") && e.contains("not weir's"),
        "--takeover of a foreign program: {e}"
    );
    assert_eq!(xdp_prog_id(&ns, "a1"), Some(id));
    assert!(!d.pin_dir.exists(), "the refused takeover pinned state");
}

/// `ip netns exec` gives weir a mount namespace of its own with a fresh
/// /sys: a bpffs it mounted there would vanish with it, and its state too.
#[test]
fn a_private_mount_namespace_is_refused_with_the_command_to_use() {
    let (_set, ns) = one_link_ns();
    let s = Scratch::new("mntns");
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"a0\"]\n{VIP}"));
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns, WEIR, "serve", "--config"])
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&s.dir);
    let o = output_within(cmd, Duration::from_secs(10));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("mount namespace of its own")
            && e.contains(&format!("nsenter --net=/run/netns/{ns} weir serve"))
            && e.contains("--ephemeral-state"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(!xdp_attached(&ns, "a0"), "the refused start attached XDP");
    assert!(!s.pins.exists(), "the refused start pinned state");
}

/// A predecessor that pinned in a private mount namespace: its maps are not
/// the ones pinned here, so --takeover would start with empty tables. It is
/// refused, while the predecessor runs and after it died.
#[test]
fn takeover_refuses_a_predecessor_whose_pins_are_not_visible() {
    let (_set, ns) = one_link_ns();
    let mut d = Daemon::new(exe(), &ns).unwrap();
    d.write_config(&format!("[dataplane]\ninterfaces = [\"a0\"]\n{VIP}"))
        .unwrap();
    d.start_via_ip_netns_exec().unwrap();
    assert!(d.new_log().contains("is NOT persistent"), "{}", d.new_log());
    let id = xdp_prog_id(&ns, "a0").unwrap();
    assert!(
        !d.pin_dir.exists(),
        "its pins are visible outside its namespace"
    );

    let e = d.restart().unwrap_err().to_string();
    let pid = d.pid().unwrap();
    assert!(
        e.contains(&format!(
            "the running weir (pid {pid}) keeps its state in maps"
        )) && e.contains("conns (not pinned)")
            && e.contains(&format!("nsenter --target {pid} --mount --net")),
        "{e}"
    );
    assert_eq!(
        xdp_prog_id(&ns, "a0"),
        Some(id),
        "the refused takeover changed XDP"
    );

    d.kill().unwrap();
    let e = d.adopt().unwrap_err().to_string();
    assert!(
        e.contains(&format!("the orphaned weir program (id {id})"))
            && e.contains("conns (not pinned)")
            && e.contains("ip link set dev a0 xdp off"),
        "{e}"
    );
    assert_eq!(xdp_prog_id(&ns, "a0"), Some(id));
    assert!(
        !d.pin_dir.join("conns").exists(),
        "the refused takeover left pins"
    );
}

#[test]
fn tables_the_kernel_would_refuse_are_refused_by_check_and_serve_before_loading() {
    let s = Scratch::new("huge");
    let run_dir = s.dir.join("run");
    for size in ["4000000000", "300000000"] {
        let cfg = s.config(&format!(
            "[dataplane]\ninterfaces = [\"lo\"]\nconn_table_size = {size}\n{VIP}"
        ));
        let o = weir(&["check", cfg.to_str().unwrap()]);
        assert!(!o.status.success(), "check accepted {size}");
        let e = stderr(&o);
        assert!(
            e.contains("weir.toml:4: dataplane.conn_table_size: conn_table_size = ")
                && e.contains("set conn_table_size <= 268435456"),
            "{e}"
        );
        let o = serve(&cfg, &run_dir);
        assert!(!o.status.success(), "serve accepted {size}");
        let e = stderr(&o);
        assert!(
            e.contains("dataplane.conn_table_size") && !e.contains("libbpf"),
            "refused before loading: {e}"
        );
        assert!(
            !s.pins.exists(),
            "the refused start created {}",
            s.pins.display()
        );
        assert!(
            !run_dir.exists(),
            "the refused start created {}",
            run_dir.display()
        );
    }
}

#[test]
fn a_quic_vip_outside_the_xdp_tier_is_refused_by_check_and_serve_before_loading() {
    let s = Scratch::new("quictier");
    let run_dir = s.dir.join("run");
    for tier in ["software", "hybrid"] {
        let cfg = s.config(&format!(
            "[dataplane]\ninterfaces = [\"lo\"]\ntier = \"{tier}\"\n\n[[vip]]\nname = \"h3\"\n\
             address = \"10.9.0.1\"\nport = 443\nprotocol = \"udp\"\nmode = \"dsr\"\n\
             quic = {{ server_id_len = 2 }}\n[[vip.dip]]\naddress = \"10.9.1.2\"\n\
             server_id = \"0b01\"\n"
        ));
        let check = weir(&["check", cfg.to_str().unwrap()]);
        for (what, o) in [("check", check), ("serve", serve(&cfg, &run_dir))] {
            assert!(!o.status.success(), "{tier}: {what} accepted a QUIC VIP");
            let e = stderr(&o);
            assert!(
                e.contains("weir.toml:12: vip[0].quic: QUIC VIPs are routed by connection ID in the xdp tier only")
                    && e.contains("set dataplane.tier = \"xdp\"")
                    && e.contains("remove [vip.quic]"),
                "{tier}: {what}: {e}"
            );
        }
        assert!(
            !s.pins.exists(),
            "{tier}: the refused start created {}",
            s.pins.display()
        );
        assert!(
            !run_dir.exists(),
            "{tier}: the refused start created {}",
            run_dir.display()
        );
    }
}

#[test]
fn check_takes_the_file_as_an_argument_or_with_config() {
    let s = Scratch::new("pos");
    let cfg = s.config(&format!("[dataplane]\ninterfaces = [\"lo\"]\n{VIP}"));
    let path = cfg.to_str().unwrap();
    for args in [vec!["check", path], vec!["check", "--config", path]] {
        let o = weir(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("weir.toml: ok (1 VIPs, 0 warnings)"), "{out}");
    }
    let o = weir(&["check"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("<FILE>"), "{}", stderr(&o));
    let o = weir(&["check", path, "--config", path]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn check_names_a_weir_kv_file_and_the_commands_for_it() {
    let kv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/kv.toml");
    let o = weir(&["check", "--config", kv]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("looks like a `weir kv` configuration")
            && e.contains(&format!("weir kv --config {kv} --check"))
            && e.contains(&format!("run it with `weir kv --config {kv}`")),
        "{e}"
    );
    assert!(!e.contains("unknown field"), "{e}");
}

/// Loopback has no native XDP: the program loads and pins its maps, then
/// the attach fails.
#[test]
fn a_start_that_fails_after_loading_leaves_no_pin_or_run_directory() {
    let (_set, ns) = one_link_ns();
    let s = Scratch::new("attach");
    let run_dir = s.dir.join("run");
    let cfg = s.config(&format!(
        "[dataplane]\ninterfaces = [\"lo\"]\nxdp_mode = \"native\"\n{VIP}"
    ));
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{ns}"))
        .args([WEIR, "serve", "--config"])
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&run_dir);
    let o = output_within(cmd, Duration::from_secs(60));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("lo"), "{e}");
    assert!(
        !s.pins.exists(),
        "the failed start left {}: {e}",
        s.pins.display()
    );
    assert!(
        !run_dir.exists(),
        "the failed start left {}: {e}",
        run_dir.display()
    );
    assert!(
        !xdp_attached(&ns, "lo"),
        "the failed start left XDP attached"
    );
}
