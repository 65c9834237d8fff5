//! The cluster lab: weir nodes behind a router's ECMP route, every node and
//! backend on one L2 segment, etcd beside the router.
//!
//! ```text
//!  client 10.88.0.2 ── rc0 10.88.0.1 [router: FRR, VIP/32 by BGP over the nodes, L4 hash]
//!                                    rf0 10.88.1.1 (etcd :2379)
//!                                     │
//!                 [fabric: bridge br0] ── eth0 10.88.1.1I  node I  (weir serve, dsr)
//!                                     └── eth0 10.88.1.10J backend J  (VIP on lo)
//! ```
//! A node rewrites a client packet's MACs and sends it back out of its one
//! interface to the backend (XDP_TX); the backend answers the client through
//! the router directly (DSR), as in a Katran or Maglev fleet. Nodes send
//! each other sync datagrams on the same segment. The router is FRR
//! ([`ClusterLab::start_router`]): it learns the VIP only from the nodes'
//! BGP announcements (BFD 300 ms x 3, ECMP) and the lab never edits its
//! routes. A machine that is replaced loses its data plane, pinned state
//! and BGP speaker ([`ClusterLab::wipe`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::daemon::Daemon;
use crate::frr::{Frr, Peer};
use crate::netns::{ip_in, sysctl_in, veth, NamespaceSet};
use crate::topology::{attach_pass, ethtool_in};

pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
pub const ROUTER_FABRIC: Ipv4Addr = Ipv4Addr::new(10, 88, 1, 1);
/// The VIP (dsr) every node balances.
pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 88, 100, 1);
pub const VIP_PORT: u16 = 80;
pub const ETCD_PORT: u16 = 2379;
/// The lease TTL of the lab's nodes (s): how long a dead leader leads.
pub const LEASE_TTL_S: u64 = 1;
/// The router's AS and the nodes' (eBGP, as on a leaf).
pub const ROUTER_AS: u32 = 65000;
pub const NODE_AS: u32 = 65001;
/// The VIP's route, as the router's RIB names it.
pub const VIP_PREFIX: &str = "10.88.100.1/32";
/// Where the backends answer the nodes' health checks.
pub const HEALTH_PORT: u16 = VIP_PORT;
/// The nodes' health checks: every DIP is checked this often, and is down
/// after `HEALTH_FALL` failures in a row.
pub const HEALTH_INTERVAL_MS: u64 = 200;
pub const HEALTH_FALL: u64 = 2;

/// Node `i`'s address (1-based).
pub fn node_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 88, 1, 10 + i as u8)
}

/// Backend `j`'s address (1-based).
pub fn backend_addr(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 88, 1, 100 + j as u8)
}

/// A built cluster lab; dropping it stops etcd and removes everything.
pub struct ClusterLab {
    pub ns: NamespaceSet,
    pub client: String,
    pub router: String,
    pub nodes: Vec<String>,
    pub backends: Vec<String>,
    /// The sync key and etcd's log.
    pub dir: PathBuf,
    /// etcd's data, in memory: etcd syncs every write to disk, and on a
    /// shared machine a busy disk would delay each table's publication by
    /// up to seconds (etcd asks for a dedicated fast disk in production).
    etcd_dir: PathBuf,
    etcd: Option<Child>,
}

impl ClusterLab {
    /// Builds room for `nodes` nodes (1..=9) and `backends` backends
    /// (1..=50), starts etcd, and routes the VIP to no node yet.
    pub fn build(nodes: usize, backends: usize) -> Result<ClusterLab> {
        assert!((1..=9).contains(&nodes) && (1..=50).contains(&backends));
        let mut ns = NamespaceSet::new();
        let client = ns.add("client")?;
        let router = ns.add("router")?;
        let fabric = ns.add("fabric")?;
        let nodes: Vec<String> = (1..=nodes)
            .map(|i| ns.add(&format!("n{i}")))
            .collect::<Result<_>>()?;
        let backends: Vec<String> = (1..=backends)
            .map(|j| ns.add(&format!("b{j}")))
            .collect::<Result<_>>()?;
        let dir = std::env::temp_dir().join(format!("weir-scale-{}", ns.prefix()));
        let shm = Path::new("/dev/shm");
        let etcd_dir = if shm.is_dir() { shm } else { dir.as_path() }
            .join(format!("weir-scale-etcd-{}", ns.prefix()));
        for d in [&dir, &etcd_dir] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d)?;
        }
        let mut lab = ClusterLab {
            ns,
            client,
            router,
            nodes,
            backends,
            dir,
            etcd_dir,
            etcd: None,
        };
        lab.wire(&fabric).context("building the cluster lab")?;
        lab.write_key()?;
        lab.start_etcd()?;
        Ok(lab)
    }

    fn wire(&self, fabric: &str) -> Result<()> {
        let r = &self.router;
        for (k, v) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            // ECMP over the 5-tuple, as a data-center router hashes.
            ("net.ipv4.fib_multipath_hash_policy", "1"),
        ] {
            sysctl_in(r, k, v)?;
        }
        veth(&self.client, "eth0", r, "rc0")?;
        ip_in(
            &self.client,
            &["addr", "add", "10.88.0.2/24", "dev", "eth0"],
        )?;
        ip_in(&self.client, &["link", "set", "eth0", "up"])?;
        ip_in(
            &self.client,
            &["route", "add", "default", "via", "10.88.0.1"],
        )?;
        ip_in(r, &["addr", "add", "10.88.0.1/24", "dev", "rc0"])?;
        ip_in(r, &["link", "set", "rc0", "up"])?;

        ip_in(fabric, &["link", "add", "br0", "type", "bridge"])?;
        ip_in(fabric, &["link", "set", "br0", "up"])?;
        let mut ports: Vec<(String, String, String)> =
            vec![(r.clone(), "rf0".into(), format!("{ROUTER_FABRIC}/24"))];
        for (i, n) in self.nodes.iter().enumerate() {
            ports.push((n.clone(), "eth0".into(), format!("{}/24", node_addr(i + 1))));
        }
        for (j, b) in self.backends.iter().enumerate() {
            ports.push((
                b.clone(),
                "eth0".into(),
                format!("{}/24", backend_addr(j + 1)),
            ));
        }
        for (k, (host, dev, addr)) in ports.iter().enumerate() {
            let port = format!("p{k}");
            veth(host, dev, fabric, &port)?;
            ip_in(fabric, &["link", "set", &port, "master", "br0"])?;
            ip_in(fabric, &["link", "set", &port, "up"])?;
            ip_in(host, &["addr", "add", addr, "dev", dev])?;
            ip_in(host, &["link", "set", dev, "up"])?;
            // Every sender computes its checksums (see topology.rs): XDP on a
            // node turns a packet into a frame that has lost any "to be
            // finished" note.
            ethtool_in(host, &["-K", dev, "tx", "off"])?;
            // A node's XDP_TX goes to this port: a veth takes XDP frames
            // only when its peer runs XDP too.
            attach_pass(fabric, &port)?;
        }
        ethtool_in(&self.client, &["-K", "eth0", "tx", "off"])?;
        for n in &self.nodes {
            sysctl_in(n, "net.ipv4.conf.all.rp_filter", "0")?;
            // bpf_fib_lookup answers only where the kernel would forward.
            sysctl_in(n, "net.ipv4.ip_forward", "1")?;
        }
        for b in &self.backends {
            ip_in(
                b,
                &["route", "add", "default", "via", &ROUTER_FABRIC.to_string()],
            )?;
            ip_in(b, &["addr", "add", &format!("{VIP}/32"), "dev", "lo"])?;
            for (k, v) in [
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
            ] {
                sysctl_in(b, k, v)?;
            }
        }
        Ok(())
    }

    /// The cluster's sync key, shared by every node's configuration.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("sync.key")
    }

    fn write_key(&self) -> Result<()> {
        let mut key = [0u8; 32];
        weir_sys::fill_random(&mut key).context("getrandom")?;
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(self.key_file(), hex + "\n")?;
        Ok(())
    }

    /// Starts etcd in the router's namespace, with heartbeats short enough
    /// for leases of a second, and waits until it answers.
    fn start_etcd(&mut self) -> Result<()> {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.router))?;
        let client = format!("http://{ROUTER_FABRIC}:{ETCD_PORT}");
        let peer = "http://127.0.0.1:2380";
        let log = std::fs::File::create(self.dir.join("etcd.log"))?;
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "lab", "--data-dir"])
            .arg(&self.etcd_dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
            ])
            .args(["--initial-cluster", &format!("lab={peer}")])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // etcd runs at real-time priority, as if it had a machine of its
        // own (its guidance for production): on this shared machine
        // compilers would otherwise hold every publication back.
        weir_sys::process::ChildSetup {
            netns: Some(ns),
            realtime: Some(1),
            ..Default::default()
        }
        .apply_to(&mut cmd)?;
        let child = cmd
            .spawn()
            .context("starting etcd (scripts/deps.sh installs etcd-server)")?;
        self.etcd = Some(child);
        let addr = SocketAddr::from((ROUTER_FABRIC, ETCD_PORT));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let up = std::thread::scope(|s| {
                s.spawn(|| {
                    crate::netns::enter(&self.router).is_ok()
                        && std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100))
                            .is_ok()
                })
                .join()
                .unwrap_or(false)
            });
            if up {
                return Ok(());
            }
            if let Some(status) = self.etcd.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "etcd exited ({status}):\n{}",
                    std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!("etcd did not answer on {addr} within 15 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts FRR in the router's namespace, peering with every node slot
    /// (BFD with FRR's default 300 ms x 3); its files go into the lab's
    /// directory. The route to the VIP then comes only from the nodes.
    pub fn start_router(&self) -> Result<Frr> {
        let peers: Vec<Peer> = (1..=self.nodes.len())
            .map(|i| Peer {
                address: node_addr(i),
                remote_as: NODE_AS,
                bfd: true,
            })
            .collect();
        Frr::start(
            &self.router,
            &self.dir.join("frr"),
            ROUTER_FABRIC,
            ROUTER_AS,
            &peers,
        )
        .context("starting FRR as the lab's router")
    }

    /// The next hops of the router's kernel route to the VIP (what zebra
    /// installed from BGP and what forwards), read with `ip -j route`.
    pub fn forwarding_hops(&self) -> Result<Vec<Ipv4Addr>> {
        Self::forwarding_hops_of(&self.router)
    }

    /// [`Self::forwarding_hops`] of the router namespace `router`.
    pub fn forwarding_hops_of(router: &str) -> Result<Vec<Ipv4Addr>> {
        let out = Command::new("ip")
            .args(["-n", router, "-j", "route", "show", VIP_PREFIX])
            .output()
            .context("running ip route")?;
        if !out.status.success() {
            bail!("ip route: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let routes: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("ip -j route: {}", String::from_utf8_lossy(&out.stdout)))?;
        let mut hops: Vec<Ipv4Addr> = routes
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| match r["nexthops"].as_array() {
                Some(h) => h.iter().filter_map(|h| h["gateway"].as_str()).collect(),
                None => r["gateway"].as_str().into_iter().collect::<Vec<_>>(),
            })
            .filter_map(|g| g.parse().ok())
            .collect();
        hops.sort();
        Ok(hops)
    }

    /// Cuts node `i`'s link (its interface down inside its namespace), as a
    /// pulled cable would: its BGP session stays up until BFD notices.
    pub fn cut_link(&self, i: usize) -> Result<()> {
        ip_in(&self.nodes[i - 1], &["link", "set", "dev", "eth0", "down"])
    }

    /// Node `i`'s configuration (1-based): the VIP over every backend,
    /// health checked, announced to the router by BGP with BFD.
    pub fn node_config(&self, i: usize, sync: bool) -> String {
        self.node_config_checking(i, sync, HEALTH_PORT)
    }

    /// [`Self::node_config`] with the DIPs' health checks on `health_port`
    /// (one where nothing answers fails every DIP on this node only).
    pub fn node_config_checking(&self, i: usize, sync: bool, health_port: u16) -> String {
        let mut dips = String::new();
        for j in 1..=self.backends.len() {
            let b = backend_addr(j);
            dips.push_str(&format!(
                "\n  [[vip.dip]]\n  address = \"{b}\"\n  agent = \"{b}:{}\"\n",
                crate::backend::AGENT_PORT
            ));
        }
        format!(
            r#"[dataplane]
interfaces = ["eth0"]
conn_table_size = 65536

[controller]
policy = "awfd"
m = 4
update_interval_ms = 100
telemetry = "agent"
agent_timeout_ms = 40

[cluster]
node = "n{i}"
etcd = ["http://{ROUTER_FABRIC}:{ETCD_PORT}"]
prefix = "/weir/lab"
lease_ttl_s = {LEASE_TTL_S}
connection_sync = {sync}
sync_interface = "eth0"
sync_key_file = "{}"
join_timeout_ms = 2000

[[vip]]
name = "web"
address = "{VIP}"
port = {VIP_PORT}
protocol = "tcp"
mode = "dsr"

  [vip.health]
  kind = "tcp"
  port = {health_port}
  interval_ms = {HEALTH_INTERVAL_MS}
  timeout_ms = 100
  rise = 1
  fall = {HEALTH_FALL}
{dips}
{bgp}"#,
            self.key_file().display(),
            bgp = Self::bgp_section(i),
        )
    }

    /// Node `i`'s `[bgp]` section (1-based): the VIP announced to the
    /// router over eBGP, with BFD at FRR's 300 ms x 3.
    pub fn bgp_section(i: usize) -> String {
        format!(
            r#"[bgp]
local_as = {NODE_AS}
router_id = "{node}"
bfd_interval_ms = 300
bfd_multiplier = 3

[[bgp.neighbour]]
address = "{ROUTER_FABRIC}"
remote_as = {ROUTER_AS}
bfd = true
"#,
            node = node_addr(i),
        )
    }

    /// What a replaced machine leaves: nothing. Takes node `i`'s XDP
    /// program off its interface, ends its BGP speaker and removes its
    /// pinned state (its daemon is dead).
    pub fn wipe(&self, i: usize, daemon: &Daemon) -> Result<()> {
        ip_in(
            &self.nodes[i - 1],
            &["link", "set", "dev", "eth0", "xdp", "off"],
        )?;
        kill_speaker(&daemon.run_dir());
        let _ = std::fs::remove_dir_all(&daemon.pin_dir);
        Ok(())
    }
}

/// Ends the BIRD that weir left running for the daemon of `run_dir`, if
/// any: a speaker outlives a killed weir by design (it withdraws the VIPs
/// and keeps its sessions for a successor).
pub fn kill_speaker(run_dir: &Path) {
    let pid = std::fs::read_to_string(weir_control::bgp::dir(run_dir).join("bird.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok());
    if let Some(pid) = pid {
        let _ = weir_sys::process::send_signal(pid, libc::SIGKILL);
    }
}

/// The speakers of these run directories, ended on drop (declare it after
/// the daemons, so that it drops first, also on a panic).
pub struct Speakers(pub Vec<PathBuf>);

impl Drop for Speakers {
    fn drop(&mut self) {
        for run_dir in &self.0 {
            kill_speaker(run_dir);
        }
    }
}

impl Drop for ClusterLab {
    fn drop(&mut self) {
        if let Some(mut c) = self.etcd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.ns.teardown();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.etcd_dir);
    }
}
