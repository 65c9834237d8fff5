//! Shared harness of weir-cluster's data-plane tests: a loaded `weir_lb`
//! with pinned maps (a "node"), one DSR VIP whose DIPs sit in slots the
//! test chooses (nodes number DIPs differently), packets through
//! BPF_PROG_TEST_RUN, and a private network namespace for the sync sockets.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use weir_abi::*;
use weir_cluster::record::{DipRef, VipRef};
use weir_core::dispatch::awfd::AwfdTable;
use weir_core::flow::addr_words;
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};
use weir_dataplane::maps::Maps;
use weir_dataplane::testrun::{self, XdpAction};

pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 100, 2);
pub const VIP_PORT: u16 = 80;
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xcc];
/// BPF_PROG_TEST_RUN without a context runs as if received on loopback.
const TEST_IFINDEX: u32 = 1;

pub fn dip_addr(i: u8) -> IpAddr {
    IpAddr::from([10, 77, i, 2])
}

pub fn dip_ref(i: u8) -> DipRef {
    DipRef {
        address: dip_addr(i),
        nat_port: 0,
    }
}

pub fn vip_ref() -> VipRef {
    VipRef {
        address: IpAddr::V4(VIP),
        port: VIP_PORT,
        protocol: 6,
    }
}

pub fn flow_key(client: Ipv4Addr, sport: u16) -> weir_flow_key {
    flow_key_to(IpAddr::V4(client), IpAddr::V4(VIP), sport)
}

/// The TCP tuple from `client:sport` to `vip:VIP_PORT`, either family.
pub fn flow_key_to(client: IpAddr, vip: IpAddr, sport: u16) -> weir_flow_key {
    let (src, family) = addr_words(client);
    weir_flow_key {
        src,
        dst: addr_words(vip).0,
        sport: sport.to_be(),
        dport: VIP_PORT.to_be(),
        proto: 6,
        family,
        pad: [0; 2],
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A loaded weir_lb with pinned maps, removed on drop.
pub struct Node {
    pub lb: LoadedLb,
    pub maps: Maps,
    pub pin_dir: PathBuf,
}

impl Node {
    pub fn load(conn_sync: bool, conn_capacity: u32) -> Node {
        let pin_dir = PathBuf::from(format!(
            "/sys/fs/bpf/weir-cluster-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&pin_dir);
        let opts = LoadOptions {
            conn_capacity,
            half_open_capacity: conn_capacity,
            max_vips: 4,
            max_dips: 64,
            fib_lookup: false,
            pin_dir: Some(pin_dir.clone()),
            conn_sync,
            ..Default::default()
        };
        let lb = loader::load(&opts).expect("loading weir_lb (tests need root)");
        let maps = Maps::of(&lb.skel).unwrap();
        maps.put_iface(TEST_IFINDEX, LB_MAC).unwrap();
        Node { lb, maps, pin_dir }
    }

    /// The VIP (id 0, dsr) with DIP `i` in slot `slots[i]` for each
    /// (i, slot), equal weights, at table version 1.
    pub fn setup(&self, dips: &[(u8, u32)]) {
        self.setup_service(0, IpAddr::V4(VIP), dips, dip_addr);
    }

    /// A dsr VIP `vip_id` at `vip`:VIP_PORT with DIP `dip_addr(i)` in slot
    /// `slot` for each (i, slot), equal weights, at table version 1.
    pub fn setup_service(
        &self,
        vip_id: u32,
        vip: IpAddr,
        dips: &[(u8, u32)],
        dip_addr: impl Fn(u8) -> IpAddr,
    ) {
        for &(i, slot) in dips {
            let (addr, family) = addr_words(dip_addr(i));
            let d = weir_dip {
                addr,
                family,
                mac_set: 1,
                mac: [0x02, 0, 0, 0, 0x01 + vip_id as u8, i],
                flags: WEIR_DIP_F_LIVE,
                gen: 1,
                vip_id,
                weight: 1,
                ..Default::default()
            };
            self.maps.put_dip(slot, &d).unwrap();
        }
        let (addr, family) = addr_words(vip);
        let key = weir_vip_key {
            addr,
            port: VIP_PORT.to_be(),
            proto: 6,
            family,
        };
        let value = weir_vip {
            vip_id,
            mode: WEIR_MODE_DSR as u8,
            ..Default::default()
        };
        self.maps.put_vip(&key, &value).unwrap();
        let pairs: Vec<(u32, u32)> = dips.iter().map(|&(_, s)| (s, 1)).collect();
        self.maps
            .publish_table(vip_id, 1, &AwfdTable::from_weights(&pairs).unwrap())
            .unwrap();
    }

    pub fn run(&self, frame: &[u8]) -> XdpAction {
        testrun::run(&self.lb.skel.progs.weir_lb, frame, 1)
            .unwrap()
            .action()
            .unwrap()
    }

    /// A client's SYN and then its ACK: an established connection.
    pub fn connect(&self, client: Ipv4Addr, sport: u16) {
        assert_eq!(self.run(&tcp(client, sport, true)), XdpAction::Tx);
        assert_eq!(self.run(&tcp(client, sport, false)), XdpAction::Tx);
    }

    pub fn stat(&self, i: u32) -> u64 {
        self.maps.stats().unwrap()[i as usize]
    }

    /// The DIP (by identity) this node's table holds the connection on.
    pub fn dip_of(&self, key: &weir_flow_key) -> Option<DipRef> {
        let c = self.maps.conn(key).unwrap()?;
        let d = self.maps.dip(c.dip_id).unwrap()?;
        (d.gen == c.dip_gen)
            .then(|| weir_cluster::apply::dip_ref(&d))
            .flatten()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// A TCP frame from `client:sport` to the VIP: a SYN, or an ACK.
pub fn tcp(client: Ipv4Addr, sport: u16, syn: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(client.octets(), VIP.octets(), 64)
        .tcp(sport, VIP_PORT, 1000, 64_000);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, &[]).unwrap();
    out
}

/// Runs `f` on a thread in a network namespace of its own (with loopback
/// up), so the sync sockets' traffic stays inside it; threads `f` starts
/// are in it too. The namespace goes when its threads end.
pub fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's namespaces.
        assert_eq!(
            unsafe { libc::unshare(libc::CLONE_NEWNET) },
            0,
            "unshare(CLONE_NEWNET): {} (tests need root)",
            std::io::Error::last_os_error()
        );
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("running ip");
        assert!(up.success(), "ip link set lo up");
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Waits until `cond` holds, at most `limit`.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// An etcd started by a test (in the caller's network namespace), killed
/// and its data removed on drop.
pub struct Etcd {
    child: std::process::Child,
    dir: PathBuf,
    pub client: SocketAddr,
}

impl Etcd {
    /// Starts etcd on 127.0.0.1:`port` (peers on `port` + 1) with short
    /// heartbeats, so that leases of 1 s are honoured, and waits until it
    /// answers.
    pub fn start(port: u16) -> Etcd {
        let dir = std::env::temp_dir().join(format!(
            "weir-cluster-etcd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let client = SocketAddr::from(([127, 0, 0, 1], port));
        let peer = format!("http://127.0.0.1:{}", port + 1);
        let url = format!("http://{client}");
        let child = std::process::Command::new("etcd")
            .args(["--name", "test", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting etcd (scripts/deps.sh installs etcd-server)");
        let e = Etcd { child, dir, client };
        let up = wait_for(Duration::from_secs(10), || {
            std::net::TcpStream::connect_timeout(&client, Duration::from_millis(100)).is_ok()
        });
        assert!(up, "etcd did not start on {client}");
        e
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
