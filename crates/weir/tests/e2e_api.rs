//! The management API of `weir serve` end to end, in network namespaces
//! the test builds and always removes (a client, weir and four backends),
//! with 24 keep-alive connections through a nat VIP the whole time:
//! - every read endpoint shows the VIP, its DIPs, weights, classes, table
//!   version, health, connections and counters;
//! - bad input (bad JSON, unknown VIPs and DIPs, invalid weights, a file
//!   that cannot be written) gets a 4xx or 5xx with a message and changes
//!   neither the maps (the table version stays) nor the file;
//! - every write (add, weight, drain, remove, reload; through the API and
//!   `weir dip`) takes effect at once for new connections and lands in the
//!   file with its comments kept; a restart keeps it;
//! - concurrent writes and a storm of SIGHUP reloads lose no update;
//! - the established connections never move or break (PCC);
//! - bound to a non-loopback address, the API refuses to start without a
//!   token, and with one refuses writes that do not carry it.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use weir_config::Config;
use weir_control::run_record::RunRecord;
use weir_http::client::{Method, Reply};
use weir_lab::client::spawn_http;
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

mod common;
use common::{
    assert_some_on, call, call_with, join_unbroken, new_connections, raw, send_signal,
    start_backends, start_daemon, weir_in, Immutable,
};

const NAT_VIP: &str = "10.77.100.1:80";
/// Requests per long-lived connection, 100 ms apart: they outlast every
/// read, write and reload below.
const REQUESTS: usize = 160;
const TOKEN: &str = "e2e-api-token-0123456789abcdef";

/// One nat VIP over backends 1 and 2, health-checked (so a controller runs
/// and its view is in the API), with comments the API must keep.
fn config(api: &str) -> String {
    format!(
        "# e2e_api: the API keeps these comments\n\
         [dataplane]\n\
         interfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\", \"wb4\"]\n\
         conn_table_size = 65536\n\
         \n\
         [api]\n\
         {api}\n\
         \n\
         # the web service\n\
         [[vip]]\n\
         name = \"web\"\n\
         address = \"10.77.100.1\"\n\
         port = 80\n\
         protocol = \"tcp\"\n\
         mode = \"nat\"\n\
         \n\
         \x20 [vip.health]\n\
         \x20 kind = \"tcp\"\n\
         \n\
         \x20 # first backend\n\
         \x20 [[vip.dip]]\n\
         \x20 address = \"10.77.1.2\"\n\
         \x20 port = 8080\n\
         \n\
         \x20 [[vip.dip]]\n\
         \x20 address = \"10.77.2.2\"\n\
         \x20 port = 8080   # second backend\n"
    )
}

/// The running daemon's API address, from its run record.
fn api_addr(d: &Daemon) -> SocketAddr {
    RunRecord::read(&d.run_dir())
        .unwrap()
        .api
        .expect("the run record names the API")
}

fn get(lab: &Lab, addr: SocketAddr, path: &str) -> Value {
    let r = call(&lab.lb, addr, Method::GET, path, None);
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json().unwrap()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// What a refused request must leave alone: the VIP as the maps have it
/// (the table version counts every apply) and the file's bytes.
fn state(lab: &Lab, addr: SocketAddr, d: &Daemon) -> (Value, String) {
    let mut v = get(lab, addr, "/api/v1/vips/web");
    // Traffic counters and the controller's estimates move on their own.
    for dip in v["dips"].as_array_mut().unwrap() {
        let o = dip.as_object_mut().unwrap();
        o.retain(|k, _| ["id", "config_weight", "weight", "class", "slot"].contains(&k.as_str()));
    }
    let o = v.as_object_mut().unwrap();
    o.retain(|k, _| ["table_version", "classes", "dips"].contains(&k.as_str()));
    (v, std::fs::read_to_string(d.config_path()).unwrap())
}

/// The weight of DIP `id` in the file as it is now.
fn file_weight(d: &Daemon, id: &str) -> Option<u32> {
    let cfg = Config::load(&d.config_path()).unwrap();
    let v = &cfg.vips[0];
    v.dips
        .iter()
        .find(|dip| SocketAddr::new(*dip.address.get_ref(), dip.service_port(v)).to_string() == id)
        .map(|dip| *dip.weight.get_ref())
}

/// Polls `GET /api/v1/vips/web` until the DIPs have these weights in
/// force (bounded); the VIP as it was then.
/// The weights come from the data plane's tables and the health verdicts
/// from the controller's last round, which is published just after the
/// tables: on a health-checked VIP a DIP with weight counts as in force once
/// both say so.
fn wait_weights(lab: &Lab, addr: SocketAddr, want: &[(&str, u32)]) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let v = get(lab, addr, "/api/v1/vips/web");
        let checked = v["health_checks"] == true;
        let all = want.iter().all(|(id, w)| {
            v["dips"].as_array().unwrap().iter().any(|d| {
                d["id"] == *id && d["weight"] == *w && (!checked || *w == 0 || d["healthy"] == true)
            })
        });
        if all {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "weights {want:?} not in force within 5 s: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_api_reads_and_changes_the_running_balancer_without_breaking_connections() {
    let lab = Lab::build(4).expect("building the lab");
    let _backends = start_backends(&lab);
    let mut d = start_daemon(&lab, &config("listen = \"127.0.0.1:9190\""));
    let a = api_addr(&d);
    assert_eq!(a, "127.0.0.1:9190".parse().unwrap());
    let nat: SocketAddr = NAT_VIP.parse().unwrap();
    assert_eq!(
        new_connections(&lab.client, nat, 20),
        set(&["backend-1", "backend-2"])
    );
    let live = spawn_http(&lab.client, nat, 24, REQUESTS, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(800));

    // Reads.
    let index = get(&lab, a, "/api/v1");
    assert_eq!(index["endpoints"].as_array().unwrap().len(), 18, "{index}");
    let st = get(&lab, a, "/api/v1/status");
    assert!(
        st["connections"]["established"].as_u64().unwrap() >= 24,
        "{}",
        st["connections"]
    );
    assert!(st["connections"]["half_open"].is_u64());
    assert!(
        st["counters"]["conn_new"].as_u64().unwrap() >= 24,
        "{}",
        st["counters"]
    );
    assert_eq!(st["controller"]["policy"], "static", "{}", st["controller"]);
    let web = &st["vips"][0];
    assert_eq!(
        (&web["name"], &web["address"], &web["port"], &web["mode"]),
        (
            &json!("web"),
            &json!("10.77.100.1"),
            &json!(80),
            &json!("nat")
        )
    );
    assert_eq!(web["classes"], json!([1]), "{web}");
    assert!(web["table_version"].as_u64().is_some(), "{web}");
    assert!(web["new_conns"].as_u64().unwrap() >= 44, "{web}");
    let dips = web["dips"].as_array().unwrap();
    assert_eq!(dips.len(), 2);
    for (dip, id) in dips.iter().zip(["10.77.1.2:8080", "10.77.2.2:8080"]) {
        assert_eq!(dip["id"], id);
        assert_eq!(
            (&dip["config_weight"], &dip["weight"], &dip["class"]),
            (&json!(1), &json!(1), &json!(1))
        );
        assert_eq!(dip["healthy"], true, "{dip}");
        assert!(
            dip["slot"].is_u64() && dip["new_conns"].as_u64().unwrap() > 0,
            "{dip}"
        );
        assert!(dip["share"].is_f64() || dip["share"].is_null(), "{dip}");
    }
    assert_eq!(get(&lab, a, "/api/v1/vips")[0]["name"], "web");
    assert_eq!(
        get(&lab, a, "/api/v1/vips/web")["dips"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        get(&lab, a, "/api/v1/vips/web/dips")
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let one = get(&lab, a, "/api/v1/vips/web/dips/10.77.2.2:8080");
    assert_eq!(one["id"], "10.77.2.2:8080");
    assert_eq!(
        get(&lab, a, "/api/v1/vips/web/dips/10.77.2.2")["id"],
        "10.77.2.2:8080"
    );
    assert!(get(&lab, a, "/api/v1/counters")["rx"].as_u64().unwrap() > 0);
    assert!(
        get(&lab, a, "/api/v1/connections")["established"]
            .as_u64()
            .unwrap()
            >= 24
    );
    assert!(st.get("workers").is_none(), "tier = \"xdp\" has no workers");
    assert!(st.get("cluster").is_none(), "a single node has no cluster");
    for (path, status, says) in [
        ("/api/v1/workers", 404, "no software tier runs"),
        ("/api/v1/cluster", 404, "this node runs alone"),
        (
            "/api/v1/vips/api",
            404,
            "no VIP named `api`; the VIPs are: web",
        ),
        (
            "/api/v1/vips/web/dips/10.77.9.2",
            404,
            "has no DIP 10.77.9.2",
        ),
        ("/api/v1/vips/web/dips/backend-1", 400, "is not a DIP"),
        ("/api/v2/vips", 404, "GET /api/v1 lists the endpoints"),
    ] {
        let r = call(&lab.lb, a, Method::GET, path, None);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(
            r.json().unwrap()["error"].as_str().unwrap().contains(says),
            "{path}: {}",
            r.body
        );
    }

    // Bad input changes nothing: neither the maps nor the file.
    let before = state(&lab, a, &d);
    let dips = "/api/v1/vips/web/dips";
    let w1 = "/api/v1/vips/web/dips/10.77.1.2:8080/weight";
    let refused: Vec<(Reply, u16, &str)> = vec![
        (
            raw(&lab.lb, a, Method::POST, dips, "{not json"),
            400,
            "must be JSON",
        ),
        (raw(&lab.lb, a, Method::PUT, w1, ""), 400, "must be JSON"),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "10.77.3.2", "wieght": 1})),
            ),
            400,
            "wieght",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "10.77.3"})),
            ),
            400,
            "address",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "10.77.3.2", "weight": 70000})),
            ),
            422,
            "weight must be 0..=65535",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "10.77.3.2", "mac": "zz"})),
            ),
            422,
            "mac",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "fd00::3", "port": 8080})),
            ),
            422,
            "same address family",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                dips,
                Some(json!({"address": "10.77.1.2", "port": 8080})),
            ),
            409,
            "already has DIP 10.77.1.2:8080",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                "/api/v1/vips/api/dips",
                Some(json!({"address": "10.77.3.2"})),
            ),
            404,
            "no VIP named `api`",
        ),
        (
            call(&lab.lb, a, Method::PUT, w1, Some(json!({"weight": -1}))),
            400,
            "weight",
        ),
        (
            call(&lab.lb, a, Method::PUT, w1, Some(json!({"weight": "2"}))),
            400,
            "weight",
        ),
        (
            call(&lab.lb, a, Method::PUT, w1, Some(json!({"weight": 70000}))),
            422,
            "weight must be 0..=65535",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::PUT,
                "/api/v1/vips/web/dips/10.77.9.2/weight",
                Some(json!({"weight": 2})),
            ),
            404,
            "has no DIP 10.77.9.2",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::POST,
                "/api/v1/vips/web/dips/10.77.9.2/drain",
                None,
            ),
            404,
            "has no DIP",
        ),
        (
            call(
                &lab.lb,
                a,
                Method::DELETE,
                "/api/v1/vips/web/dips/nowhere",
                None,
            ),
            400,
            "is not a DIP",
        ),
        (
            call(&lab.lb, a, Method::DELETE, "/api/v1/vips/web", None),
            405,
            "does not take this method",
        ),
    ];
    for (i, (r, status, says)) in refused.iter().enumerate() {
        assert_eq!(r.status, *status, "case {i}: {}", r.body);
        let e = r.json().unwrap()["error"].as_str().unwrap().to_string();
        assert!(e.contains(says), "case {i}: `{e}` does not say `{says}`");
    }
    // A file that cannot be written: refused before anything is applied.
    {
        let _ro = Immutable::new(&d.dir).expect("chattr +i on the lab's config directory");
        let r = call(
            &lab.lb,
            a,
            Method::POST,
            "/api/v1/vips/web/dips/10.77.1.2/drain",
            None,
        );
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(
            r.body.contains("cannot write the configuration"),
            "{}",
            r.body
        );
    }
    assert_eq!(
        state(&lab, a, &d),
        before,
        "refused requests changed something"
    );

    // Writes: add backend 3 through the API.
    let r = call(
        &lab.lb,
        a,
        Method::POST,
        dips,
        Some(json!({"address": "10.77.3.2", "port": 8080})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json().unwrap();
    assert_eq!(
        v["message"],
        "VIP web: added DIP 10.77.3.2:8080 with weight 1; it gets new connections once its \
         first health check passes"
    );
    // Health-checked VIP: no new connections before the first check
    // passes. The DIP is in no table until then, so the table in force and
    // its version stay; the passing check publishes one version. That first
    // check starts at once and may pass before this answer is read: then its
    // version (and only it) is there, with or without the weight yet.
    let version = |v: &Value| v["table_version"].as_u64().unwrap();
    let added_version = version(&v["vip"]);
    assert!(
        added_version == version(&before.0) || added_version == version(&before.0) + 1,
        "the add published a version of its own: {v}"
    );
    assert!(
        v["vip"]["dips"][2]["weight"] == 0 || added_version == version(&before.0) + 1,
        "the added DIP has a weight before its first passing check: {v}"
    );
    let web = wait_weights(&lab, a, &[("10.77.3.2:8080", 1)]);
    assert_eq!(web["dips"][2]["healthy"], true, "{web}");
    assert_eq!(version(&web), version(&before.0) + 1, "{web}");
    assert_eq!(
        new_connections(&lab.client, nat, 40),
        set(&["backend-1", "backend-2", "backend-3"])
    );
    let text = std::fs::read_to_string(d.config_path()).unwrap();
    for kept in [
        "# e2e_api: the API keeps these comments",
        "  # first backend\n",
        "port = 8080   # second backend",
    ] {
        assert!(text.contains(kept), "lost `{kept}`:\n{text}");
    }
    assert_eq!(file_weight(&d, "10.77.3.2:8080"), Some(1));

    // Weight through the API.
    let was = version(&get(&lab, a, "/api/v1/vips/web"));
    let r = call(&lab.lb, a, Method::PUT, w1, Some(json!({"weight": 3})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json().unwrap();
    assert_eq!(version(&v["vip"]), was + 1, "{v}");
    assert_eq!(v["message"], "VIP web: DIP 10.77.1.2:8080 weight 1 -> 3");
    assert_eq!(v["vip"]["classes"], json!([3, 1]), "{v}");
    assert_eq!(v["vip"]["dips"][0]["weight"], 3);
    assert_eq!(file_weight(&d, "10.77.1.2:8080"), Some(3));

    // Drain backend 2 with `weir dip`: no new connections reach it.
    let run_dir = d.run_dir();
    let run_dir = run_dir.to_str().unwrap();
    let out = weir_in(
        &lab.lb,
        &[
            "dip",
            "drain",
            "web",
            "10.77.2.2:8080",
            "--run-dir",
            run_dir,
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.starts_with("VIP web: drained DIP 10.77.2.2:8080 (weight 1 -> 0); table version"),
        "{said}"
    );
    assert_eq!(
        new_connections(&lab.client, nat, 40),
        set(&["backend-1", "backend-3"]),
        "a drained DIP got new connections"
    );
    assert_eq!(file_weight(&d, "10.77.2.2:8080"), Some(0));
    assert!(std::fs::read_to_string(d.config_path())
        .unwrap()
        .contains("port = 8080   # second backend"));
    // Draining a drained DIP changes nothing: no version, no rewrite.
    let (was, file_was) = state(&lab, a, &d);
    let r = call(
        &lab.lb,
        a,
        Method::POST,
        "/api/v1/vips/web/dips/10.77.2.2:8080/drain",
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json().unwrap()["message"],
        "VIP web: DIP 10.77.2.2:8080 is drained already (weight 0): unchanged"
    );
    assert_eq!(
        state(&lab, a, &d),
        (was, file_was),
        "an unchanged write changed something"
    );
    // The CLI's errors are the API's.
    let out = weir_in(
        &lab.lb,
        &[
            "dip",
            "weight",
            "web",
            "10.77.9.2",
            "2",
            "--run-dir",
            run_dir,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("has no DIP 10.77.9.2") && err.contains("(404)"),
        "{err}"
    );

    // Remove backend 3, add backend 4 with `weir dip`, reload.
    let r = call(
        &lab.lb,
        a,
        Method::DELETE,
        "/api/v1/vips/web/dips/10.77.3.2",
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json().unwrap()["message"],
        "VIP web: removed DIP 10.77.3.2:8080"
    );
    let out = weir_in(
        &lab.lb,
        &[
            "dip",
            "add",
            "web",
            "10.77.4.2:8080",
            "--weight",
            "2",
            "--run-dir",
            run_dir,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_weights(&lab, a, &[("10.77.4.2:8080", 2)]);
    assert_eq!(
        new_connections(&lab.client, nat, 40),
        set(&["backend-1", "backend-4"])
    );
    assert_eq!(file_weight(&d, "10.77.3.2:8080"), None);
    assert_eq!(file_weight(&d, "10.77.4.2:8080"), Some(2));
    let r = call(&lab.lb, a, Method::POST, "/api/v1/reload", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json().unwrap()["message"],
        "reloaded: +0 -0 VIPs, +0 -0 DIPs"
    );
    assert!(
        live.iter().all(|h| !h.is_finished()),
        "connections ended before the concurrent writes; the test proves less than it says"
    );

    // Concurrent writes and SIGHUP reloads: every last write wins.
    let pid = d.pid().unwrap();
    let writers: Vec<_> = [("10.77.1.2:8080", 0u32), ("10.77.4.2:8080", 10)]
        .into_iter()
        .map(|(id, base)| {
            let ns = lab.lb.clone();
            std::thread::spawn(move || {
                for w in 1..=8 {
                    let path = format!("/api/v1/vips/web/dips/{id}/weight");
                    let r = call(
                        &ns,
                        a,
                        Method::PUT,
                        &path,
                        Some(json!({"weight": base + w})),
                    );
                    assert_eq!(r.status, 200, "{id} weight {w}: {}", r.body);
                }
            })
        })
        .collect();
    let toggler = {
        let ns = lab.lb.clone();
        std::thread::spawn(move || {
            for _ in 0..4 {
                let r = call(
                    &ns,
                    a,
                    Method::POST,
                    "/api/v1/vips/web/dips",
                    Some(json!({"address": "10.77.3.2", "port": 8080})),
                );
                assert_eq!(r.status, 201, "{}", r.body);
                let r = call(
                    &ns,
                    a,
                    Method::DELETE,
                    "/api/v1/vips/web/dips/10.77.3.2:8080",
                    None,
                );
                assert_eq!(r.status, 200, "{}", r.body);
            }
            let r = call(
                &ns,
                a,
                Method::POST,
                "/api/v1/vips/web/dips",
                Some(json!({"address": "10.77.3.2", "port": 8080, "weight": 5})),
            );
            assert_eq!(r.status, 201, "{}", r.body);
        })
    };
    while !(toggler.is_finished() && writers.iter().all(|w| w.is_finished())) {
        let _ = send_signal(pid, libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(20));
    }
    toggler.join().unwrap();
    for w in writers {
        w.join().unwrap();
    }
    let want = [
        ("10.77.1.2:8080", 8),
        ("10.77.2.2:8080", 0),
        ("10.77.3.2:8080", 5),
        ("10.77.4.2:8080", 18),
    ];
    // The last add of backend 3 waits for its first health check.
    let v = wait_weights(&lab, a, &want);
    for (id, w) in want {
        assert_eq!(file_weight(&d, id), Some(w), "{id} in the file");
        let dip = v["dips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .unwrap();
        assert_eq!(
            (&dip["config_weight"], &dip["weight"]),
            (&json!(w), &json!(w)),
            "{id}: {dip}"
        );
    }
    assert_eq!(v["dips"].as_array().unwrap().len(), 4, "{v}");

    // The established connections: all whole, none moved.
    let records = join_unbroken(live, REQUESTS);
    assert_some_on(&records, "backend-2");

    // A restart keeps every change: it loads the file the API wrote.
    d.stop().unwrap();
    d.start().unwrap();
    let after = get(&lab, api_addr(&d), "/api/v1/vips/web");
    for (id, w) in want {
        let dip = after["dips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .unwrap();
        assert_eq!(dip["weight"], w, "{id} after the restart: {dip}");
    }
    d.stop().unwrap();

    // Bound to the lab's client-side address: no start without a token...
    d.write_config(&config("listen = \"10.77.0.1:9190\""))
        .unwrap();
    let e = format!("{:#}", d.start().unwrap_err());
    assert!(
        e.contains("api.listen") && e.contains("set api.token or api.token_file"),
        "{e}"
    );
    // ... and with one, writes need it; reads do not.
    d.write_config(&config(&format!(
        "listen = \"10.77.0.1:9190\"\ntoken = \"{TOKEN}\""
    )))
    .unwrap();
    d.start().unwrap();
    let a = api_addr(&d);
    assert_eq!(a, "10.77.0.1:9190".parse().unwrap());
    let r = call(&lab.client, a, Method::GET, "/api/v1/vips/web", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let before = std::fs::read_to_string(d.config_path()).unwrap();
    let drain = "/api/v1/vips/web/dips/10.77.1.2/drain";
    for token in [None, Some("wrong"), Some(&TOKEN[1..])] {
        let r = call_with(&lab.client, a, Method::POST, drain, None, token);
        assert_eq!(r.status, 401, "{token:?}: {}", r.body);
    }
    assert_eq!(std::fs::read_to_string(d.config_path()).unwrap(), before);
    let r = call_with(&lab.client, a, Method::POST, drain, None, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(file_weight(&d, "10.77.1.2:8080"), Some(0));
    // weir dip finds the token in the running configuration.
    let out = weir_in(
        &lab.lb,
        &[
            "dip",
            "weight",
            "web",
            "10.77.1.2",
            "1",
            "--run-dir",
            run_dir,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(file_weight(&d, "10.77.1.2:8080"), Some(1));
    d.stop().unwrap();
}
