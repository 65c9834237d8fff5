//! The QUIC lab's aioquic HTTP/3 backends and client (lab/scripts/quic/),
//! run in the lab's namespaces from the venv that scripts/deps.sh installs.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_lab::daemon::Daemon;
use weir_lab::topology::{backend_addr, Lab, VIPS};
use weir_sys::process::ChildSetup;

use super::process::Interrupted;
use super::repo;

/// The venv with aioquic (scripts/deps.sh).
pub const AIOQUIC_VENV: &str = "/opt/weir-lab/aioquic";

fn python() -> PathBuf {
    let p = PathBuf::from(AIOQUIC_VENV).join("bin/python");
    assert!(
        p.exists(),
        "{} is missing: the QUIC tests need aioquic in the venv {AIOQUIC_VENV}; \
         run scripts/deps.sh as root to install it",
        p.display()
    );
    p
}

/// `lab/scripts/quic/<script> <args>` in namespace `ns`, stdout piped,
/// killed with the test.
fn script_in(ns: &str, script: &str, args: &[String]) -> Command {
    let netns = std::fs::File::open(format!("/run/netns/{ns}"))
        .unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    let mut cmd = Command::new(python());
    cmd.arg(repo().join("lab/scripts/quic").join(script))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    ChildSetup {
        netns: Some(netns),
        die_with_parent: true,
        ..ChildSetup::default()
    }
    .apply_to(&mut cmd)
    .expect("a child setup with a namespace");
    cmd
}

/// A started script and its stdout, a line at a time.
struct Script {
    child: Interrupted,
    lines: Receiver<String>,
    what: String,
}

impl Script {
    fn start(ns: &str, script: &str, args: &[String]) -> Script {
        let what = format!("{script} {}", args.join(" "));
        let mut child = script_in(ns, script, args)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Script {
            child: Interrupted(child),
            lines,
            what,
        }
    }

    /// Waits for the next line, which must be `want`; panics after `limit`
    /// or when the script ends first.
    fn wait_line(&self, want: &str, limit: Duration) {
        match self.lines.recv_timeout(limit) {
            Ok(line) if line == want => {}
            Ok(line) => panic!("{}: {line:?} before {want:?}", self.what),
            Err(RecvTimeoutError::Timeout) => panic!("{}: no {want:?} in {limit:?}", self.what),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{}: ended before {want:?}", self.what)
            }
        }
    }
}

/// An aioquic backend `backend-{b}` in each backend namespace of the lab,
/// issuing connection IDs with server ID `server_ids[b - 1]` (hex) under
/// `config_id`, listening on its own address (nat) and on the lab's VIPs
/// (dsr: its replies leave from the VIP's address).
pub struct QuicBackends(Vec<Script>);

impl QuicBackends {
    pub fn start(lab: &Lab, server_ids: &[&str], config_id: u8, port: u16) -> QuicBackends {
        let listen: Vec<Vec<Ipv4Addr>> = (1..=lab.backends.len())
            .map(|b| std::iter::once(backend_addr(b)).chain(VIPS).collect())
            .collect();
        QuicBackends::start_in(&lab.backends, &listen, server_ids, config_id, port)
    }

    /// Backend `backend-{b}` in namespace `namespaces[b - 1]`, listening on
    /// `listen[b - 1]`, issuing connection IDs with server ID
    /// `server_ids[b - 1]` (hex) under `config_id`.
    pub fn start_in(
        namespaces: &[String],
        listen: &[Vec<Ipv4Addr>],
        server_ids: &[&str],
        config_id: u8,
        port: u16,
    ) -> QuicBackends {
        let started: Vec<Script> = namespaces
            .iter()
            .zip(listen)
            .zip(server_ids)
            .enumerate()
            .map(|(i, ((ns, addrs), sid))| {
                let b = i + 1;
                let mut args = vec![
                    "--name".to_string(),
                    format!("backend-{b}"),
                    "--server-id".to_string(),
                    sid.to_string(),
                    "--config-id".to_string(),
                    config_id.to_string(),
                ];
                for addr in addrs {
                    args.push("--listen".to_string());
                    args.push(format!("{addr}:{port}"));
                }
                Script::start(ns, "backend.py", &args)
            })
            .collect();
        for s in &started {
            s.wait_line("ready", Duration::from_secs(20));
        }
        QuicBackends(started)
    }

    /// Whether every backend still runs.
    pub fn all_running(&mut self) -> bool {
        self.0
            .iter_mut()
            .all(|s| s.child.0.try_wait().ok().flatten().is_none())
    }
}

/// What the client did on one connection (client.py's JSON line).
#[derive(Debug, Clone)]
pub struct QuicConn {
    pub served_by: Vec<String>,
    pub ports: Vec<u16>,
    pub cids: Vec<String>,
    pub error: Option<String>,
}

impl QuicConn {
    fn parse(line: &str) -> QuicConn {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("client line {line:?}: {e}"));
        let strings = |k: &str| -> Vec<String> {
            v[k].as_array()
                .unwrap_or_else(|| panic!("no {k} in {line}"))
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        QuicConn {
            served_by: strings("served_by"),
            cids: strings("cids"),
            ports: v["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_u64().unwrap() as u16)
                .collect(),
            error: v["error"].as_str().map(str::to_string),
        }
    }

    /// The one backend that answered every request, if one did.
    pub fn backend(&self) -> Option<&str> {
        let first = self.served_by.first()?;
        self.served_by
            .iter()
            .all(|b| b == first)
            .then_some(first.as_str())
    }
}

/// How the client runs: `connections` at once, each making `requests`
/// requests `interval` apart, moving to a new source port and connection
/// ID after request `migrate_after` (0: never).
pub struct QuicLoad {
    pub connections: usize,
    pub requests: usize,
    pub interval: Duration,
    pub migrate_after: usize,
    pub timeout: Duration,
}

/// client.py running in the lab's client namespace.
pub struct QuicClient {
    script: Script,
    connections: usize,
    limit: Duration,
}

impl QuicClient {
    pub fn start(lab: &Lab, vip: SocketAddr, load: &QuicLoad) -> QuicClient {
        QuicClient::start_in(&lab.client, vip, load)
    }

    /// client.py in namespace `ns`.
    pub fn start_in(ns: &str, vip: SocketAddr, load: &QuicLoad) -> QuicClient {
        let args: Vec<String> = [
            ("--vip", vip.to_string()),
            ("--connections", load.connections.to_string()),
            ("--requests", load.requests.to_string()),
            ("--interval-ms", load.interval.as_millis().to_string()),
            ("--migrate-after", load.migrate_after.to_string()),
            ("--timeout-s", load.timeout.as_secs_f64().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect();
        // Every request waits at most the timeout: the run's bound.
        let limit = load.timeout * 2
            + (load.interval + load.timeout) * load.requests as u32
            + Duration::from_secs(10);
        QuicClient {
            script: Script::start(ns, "client.py", &args),
            connections: load.connections,
            limit,
        }
    }

    /// Waits until every connection finished its handshake.
    pub fn wait_established(&self) {
        self.script
            .wait_line("established", Duration::from_secs(30));
    }

    /// Whether the client still runs.
    pub fn running(&mut self) -> bool {
        self.script.child.0.try_wait().ok().flatten().is_none()
    }

    /// Every connection's record, once the client ends (bounded).
    pub fn finish(self) -> Vec<QuicConn> {
        let deadline = Instant::now() + self.limit;
        let mut conns = Vec::new();
        while conns.len() < self.connections {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.script.lines.recv_timeout(left) {
                Ok(line) if line == "established" => {}
                Ok(line) => conns.push(QuicConn::parse(&line)),
                Err(e) => panic!(
                    "{}: {} of {} connections reported ({e:?})",
                    self.script.what,
                    conns.len(),
                    self.connections
                ),
            }
        }
        conns
    }

    /// Runs the client to its end: each connection's one backend.
    pub fn run(lab: &Lab, vip: SocketAddr, load: &QuicLoad) -> Vec<QuicConn> {
        QuicClient::start(lab, vip, load).finish()
    }
}

/// The backends that answered the connections, each once.
pub fn backends_of(conns: &[QuicConn]) -> BTreeSet<String> {
    conns
        .iter()
        .filter_map(|c| c.backend().map(str::to_string))
        .collect()
}

/// Debian's ngtcp2 example HTTP/3 client (ngtcp2-client, scripts/deps.sh):
/// a second QUIC stack against the aioquic backends.
pub const NGTCP2_CLIENT: &str = "/usr/bin/gtlsclient";

/// What one ngtcp2 client run saw, read from its HTTP and packet dumps.
#[derive(Debug)]
pub struct Ngtcp2Run {
    /// Each response's `:status`, in order.
    pub statuses: Vec<String>,
    /// Each response's `x-backend`, in order.
    pub backends: Vec<String>,
    /// The local ports it sent from, each once, in order.
    pub ports: Vec<u16>,
    /// The connection IDs its 1-RTT packets were sent to, each once, in
    /// order (hex, no 0x).
    pub cids: Vec<String>,
    pub exit: Option<i32>,
}

/// `gtlsclient` in the lab's client namespace: GETs `/which` `requests`
/// times on one connection to `vip`, the requests held back until 800 ms
/// after the handshake and the client moving to a new local port (with
/// path validation, so to the next connection ID) at 300 ms: every response
/// comes after the move. Bounded by a 10 s idle timeout and a 20 s limit.
pub fn ngtcp2_get(lab: &Lab, vip: SocketAddr, requests: usize, out: &std::path::Path) -> Ngtcp2Run {
    assert!(
        std::path::Path::new(NGTCP2_CLIENT).exists(),
        "{NGTCP2_CLIENT} is missing: the QUIC interoperability test needs Debian's \
         ngtcp2-client; run scripts/deps.sh as root to install it"
    );
    let netns = std::fs::File::open(format!("/run/netns/{}", lab.client))
        .unwrap_or_else(|e| panic!("namespace {}: {e}", lab.client));
    let dump = std::fs::File::create(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let uri = format!("https://{vip}/which");
    let mut cmd = Command::new(NGTCP2_CLIENT);
    cmd.args([
        "--no-quic-dump",
        "--timeout=10s",
        "--change-local-addr=300ms",
        "--delay-stream=800ms",
        "--exit-on-all-streams-close",
    ])
    .arg(vip.ip().to_string())
    .arg(vip.port().to_string())
    .args(std::iter::repeat_n(&uri, requests))
    .stdout(dump.try_clone().unwrap())
    .stderr(dump);
    ChildSetup {
        netns: Some(netns),
        die_with_parent: true,
        ..ChildSetup::default()
    }
    .apply_to(&mut cmd)
    .expect("a child setup with a namespace");
    let mut child = Interrupted(cmd.spawn().expect("starting gtlsclient"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status.code();
        }
        assert!(
            Instant::now() < deadline,
            "gtlsclient to {vip}: still running after 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(out).unwrap();
    Ngtcp2Run::parse(&text, exit)
}

impl Ngtcp2Run {
    fn parse(text: &str, exit: Option<i32>) -> Ngtcp2Run {
        let mut run = Ngtcp2Run {
            statuses: Vec::new(),
            backends: Vec::new(),
            ports: Vec::new(),
            cids: Vec::new(),
            exit,
        };
        let after = |line: &str, mark: &str| -> Option<String> {
            let (_, rest) = line.split_once(mark)?;
            Some(rest.split([']', ' ']).next()?.to_string())
        };
        for line in text.lines() {
            if let Some(s) = after(line, "[:status: ") {
                run.statuses.push(s);
            } else if let Some(b) = after(line, "[x-backend: ") {
                run.backends.push(b);
            } else if let Some(p) = line
                .strip_prefix("Sent packet: local=")
                .and_then(|l| l.split_once("]:"))
                .and_then(|(_, rest)| rest.split(' ').next()?.parse::<u16>().ok())
            {
                if !run.ports.contains(&p) {
                    run.ports.push(p);
                }
            } else if line.contains("pkt tx") && line.contains("type=1RTT") {
                if let Some(cid) = after(line, "dcid=0x").filter(|c| !run.cids.contains(c)) {
                    run.cids.push(cid);
                }
            }
        }
        run
    }
}

/// The QUIC-LB configuration of the lab's QUIC VIPs and backends: server
/// IDs of 2 octets under config rotation codepoint 1.
pub const SERVER_ID_LEN: usize = 2;
pub const CONFIG_ID: u8 = 1;
/// Backend `b`'s server ID is `SERVER_IDS[b - 1]`.
pub const SERVER_IDS: [&str; 3] = ["0b01", "0b02", "0b03"];

/// The server ID (hex) a connection ID (hex) carries under the VIPs'
/// config rotation codepoint, or None for another codepoint.
pub fn server_id_of(cid: &str) -> Option<&str> {
    let first = u8::from_str_radix(&cid[..2], 16).unwrap();
    (first >> 5 == CONFIG_ID).then(|| &cid[2..2 + 2 * SERVER_ID_LEN])
}

/// The name of the backend that owns server ID `sid` (hex).
pub fn backend_of_server_id(sid: &str) -> String {
    let b = SERVER_IDS.iter().position(|s| *s == sid).unwrap() + 1;
    format!("backend-{b}")
}

/// Every connection made all `requests` requests, all answered by one
/// backend, the one whose server ID its connection IDs carry; with
/// `migrated`, from two source ports and two connection IDs.
pub fn assert_unbroken(what: &str, conns: &[QuicConn], requests: usize, migrated: bool) {
    let broken: Vec<&QuicConn> = conns
        .iter()
        .filter(|c| c.error.is_some() || c.served_by.len() != requests || c.backend().is_none())
        .collect();
    assert!(
        broken.is_empty(),
        "{what}: {} of {} QUIC connections broke or moved: {broken:#?}",
        broken.len(),
        conns.len()
    );
    for c in conns {
        for cid in &c.cids {
            let sid = server_id_of(cid).unwrap_or_else(|| panic!("{what}: CID {cid}: {c:?}"));
            assert_eq!(
                c.backend(),
                Some(backend_of_server_id(sid).as_str()),
                "{what}: a connection ID names another backend than the one serving: {c:?}"
            );
        }
        if migrated {
            assert!(
                c.ports.len() == 2 && c.ports[0] != c.ports[1] && c.cids[0] != c.cids[1],
                "{what}: the connection did not move to a new port and CID: {c:?}"
            );
        }
    }
}

/// The `quic` object of VIP `name`, and of each of its DIPs, in `weir
/// status --json`.
pub fn quic_status(d: &Daemon, name: &str) -> (Value, Vec<Value>) {
    let st = d.status_json().unwrap();
    let v = st["vips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no VIP {name} in {st}"))
        .clone();
    let dips = v["dips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["quic"].clone())
        .collect();
    (v["quic"].clone(), dips)
}

/// Counter `name` of a `quic` object of `weir status --json`.
pub fn count(q: &Value, name: &str) -> u64 {
    q[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {q}"))
}
