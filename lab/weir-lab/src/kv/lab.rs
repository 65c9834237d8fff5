//! A namespace lab for the memcached switch: one client, one switch (where
//! `weir kv` attaches XDP), and N memcached servers, each in its own
//! network namespace, plus a memcached UDP client. Used by the end-to-end
//! tests and `weir-lab bench kv --udp`.
//!
//! ```text
//! client 10.78.0.2 ── kc0 10.78.0.1 [switch: weir kv, XDP on kc0] ksI 10.78.I.1 ── 10.78.I.2 server I
//! ```
//! - The VIP 10.78.100.1 is on every server's `lo` (L2 forwarding, as in
//!   MemSwitch: the server answers the client from the VIP, directly).
//!   memcached listens on the VIP and on the server's own address, TCP and
//!   UDP (`-U 11211`).
//! - The switch forwards IP (replies pass through its kernel on the way back)
//!   and the client routes everything through it.
//! - Hosts turn off TX checksum offload and run `xdp_pass` on their veth, as
//!   in `crate::topology`.
//! - Namespaces are `w<pid>-<n>-<role>` and are removed on drop (after the
//!   memcached processes are killed), also when a test panics.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::netns::{enter, ip_in, sysctl_in, veth, NamespaceSet};
use crate::topology::{attach_pass, ethtool_in};
use anyhow::{bail, Context, Result};

use crate::kv::testbed::{memcached_args, Proc};
use weir_kv::{parse_toml, KvConfig};

pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 78, 100, 1);
pub const SWITCH_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
pub const MC_PORT: u16 = 11211;
/// The TCP proxy's listen port in the switch namespace.
pub const PROXY_PORT: u16 = 22122;
/// Where nutcracker listens in the switch namespace (bench).
pub const NUTCRACKER_PORT: u16 = 22121;

/// Address of server `i` (0-based).
pub fn server_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, i as u8 + 1, 2)
}

/// Runs `f` on a thread inside namespace `ns` (threads it spawns stay there).
pub fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<T> {
        enter(&ns)?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("a lab thread panicked"))?
}

/// The lab. Drop order: processes first, then namespaces.
pub struct KvLab {
    procs: Vec<Proc>,
    ns: NamespaceSet,
    pub client: String,
    pub switch: String,
    pub servers: Vec<String>,
}

impl KvLab {
    /// Builds the topology and starts memcached (`threads` each) on every server.
    pub fn new(nservers: usize, threads: u32) -> Result<KvLab> {
        if !(1..=200).contains(&nservers) {
            bail!("1..=200 servers");
        }
        let mut ns = NamespaceSet::new();
        let client = ns.add("kvc")?;
        let switch = ns.add("kvs")?;
        let mut servers = Vec::new();
        for i in 0..nservers {
            servers.push(ns.add(&format!("mc{i}"))?);
        }
        let mut lab = KvLab {
            procs: Vec::new(),
            ns,
            client,
            switch,
            servers,
        };
        lab.wire()?;
        for i in 0..nservers {
            lab.start_memcached(i, threads)?;
        }
        Ok(lab)
    }

    fn wire(&self) -> Result<()> {
        let sw = &self.switch;
        for (k, v) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
        ] {
            sysctl_in(sw, k, v)?;
        }
        veth(&self.client, "eth0", sw, "kc0")?;
        ip_in(
            &self.client,
            &["addr", "add", &format!("{CLIENT_IP}/24"), "dev", "eth0"],
        )?;
        ip_in(&self.client, &["link", "set", "eth0", "up"])?;
        ip_in(
            &self.client,
            &["route", "add", "default", "via", &SWITCH_IP.to_string()],
        )?;
        ip_in(
            sw,
            &["addr", "add", &format!("{SWITCH_IP}/24"), "dev", "kc0"],
        )?;
        ip_in(sw, &["link", "set", "kc0", "up"])?;
        for (i, s) in self.servers.iter().enumerate() {
            let sw_if = format!("ks{i}");
            let gw = Ipv4Addr::new(10, 78, i as u8 + 1, 1);
            veth(s, "eth0", sw, &sw_if)?;
            ip_in(
                s,
                &[
                    "addr",
                    "add",
                    &format!("{}/24", server_ip(i)),
                    "dev",
                    "eth0",
                ],
            )?;
            ip_in(s, &["link", "set", "eth0", "up"])?;
            ip_in(s, &["route", "add", "default", "via", &gw.to_string()])?;
            ip_in(s, &["addr", "add", &format!("{VIP}/32"), "dev", "lo"])?;
            sysctl_in(s, "net.ipv4.conf.all.arp_ignore", "1")?;
            sysctl_in(s, "net.ipv4.conf.all.arp_announce", "2")?;
            ip_in(sw, &["addr", "add", &format!("{gw}/24"), "dev", &sw_if])?;
            ip_in(sw, &["link", "set", &sw_if, "up"])?;
        }
        let mut hosts = vec![self.client.clone()];
        hosts.extend(self.servers.iter().cloned());
        for h in &hosts {
            ethtool_in(h, &["-K", "eth0", "tx", "off"])?;
            attach_pass(h, "eth0")?;
        }
        Ok(())
    }

    fn start_memcached(&mut self, i: usize, threads: u32) -> Result<()> {
        let ns = self.servers[i].clone();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns, "memcached"])
            .args(memcached_args(
                &format!("{VIP},{}", server_ip(i)),
                MC_PORT,
                true,
                threads,
            ));
        let mut p = Proc::spawn(cmd, format!("memcached in {ns}"))
            .context("starting memcached (apt-get install memcached)")?;
        let addr = SocketAddr::new(IpAddr::V4(server_ip(i)), MC_PORT);
        // wait from inside the server's namespace
        let (ns2, pid) = (ns.clone(), p.pid());
        in_ns(&ns2, move || {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            bail!("memcached (pid {pid}) not listening on {addr} after 5 s")
        })?;
        p.what = format!("memcached {addr}");
        self.procs.push(p);
        Ok(())
    }

    /// Keeps a process until the lab is dropped.
    pub fn adopt(&mut self, p: Proc) {
        self.procs.push(p);
    }

    /// A TOML configuration of the pool in this lab: the TCP proxy on
    /// 10.78.0.1:22122, the UDP path on kc0 for the VIP.
    pub fn toml(&self, forward: &str, cache: bool) -> String {
        let mut t = format!(
            "[pool]\nlisten = \"{SWITCH_IP}:{PROXY_PORT}\"\nhash = \"fnv1a_64\"\n\
             distribution = \"ketama\"\nmetrics = \"\"\n"
        );
        for i in 0..self.servers.len() {
            t.push_str(&format!(
                "\n[[pool.server]]\naddress = \"{}\"\nport = {MC_PORT}\n",
                server_ip(i)
            ));
        }
        t.push_str(&format!(
            "\n[udp]\ninterfaces = [\"kc0\"]\nport = {MC_PORT}\nvip = \"{VIP}\"\nforward = \"{forward}\"\n"
        ));
        t.push_str(&format!(
            "\n[cache]\nenabled = {cache}\ntop_k = 32\nrefresh_ms = 50\nsample_every = 1\nthreshold = 2\n"
        ));
        t
    }

    pub fn config(&self, forward: &str, cache: bool) -> Result<KvConfig> {
        Ok(parse_toml("lab.toml", &self.toml(forward, cache))?)
    }

    pub fn teardown(&mut self) {
        self.procs.clear();
        self.ns.teardown();
    }
}

impl Drop for KvLab {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A reply to one UDP request, reassembled from its datagrams.
pub type UdpReply = Vec<u8>;

/// A memcached UDP client (ASCII), with the 8-byte frame header:
/// request id, sequence number, datagram count, reserved.
pub struct UdpMc {
    pub sock: UdpSocket,
    pub to: SocketAddr,
    next_id: u16,
}

/// (flags, value) of a retrieved item.
pub type Value = (u32, Vec<u8>);

impl UdpMc {
    /// An unconnected socket (replies come from the VIP with L2 forwarding,
    /// from the server's own address with L3).
    pub fn new(to: SocketAddr) -> Result<UdpMc> {
        let sock = UdpSocket::bind("0.0.0.0:0")?;
        sock.set_read_timeout(Some(Duration::from_millis(500)))?;
        Ok(UdpMc {
            sock,
            to,
            next_id: 1,
        })
    }

    pub fn frame(id: u16, body: &[u8]) -> Vec<u8> {
        let mut d = Vec::with_capacity(8 + body.len());
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
        d.extend_from_slice(body);
        d
    }

    /// Sends one request; returns its id.
    pub fn send(&mut self, body: &[u8]) -> Result<u16> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.sock.send_to(&Self::frame(id, body), self.to)?;
        Ok(id)
    }

    /// Waits for the whole reply to request `id` (others are dropped).
    pub fn recv(&mut self, id: u16) -> Result<UdpReply> {
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        let mut buf = vec![0u8; 65536];
        let t0 = Instant::now();
        loop {
            if t0.elapsed() > Duration::from_secs(1) {
                bail!("no complete reply to request {id} within 1 s");
            }
            let n = match self.sock.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    bail!("no reply to request {id} (timeout)")
                }
                Err(e) => return Err(e.into()),
            };
            if n < 8 || u16::from_be_bytes([buf[0], buf[1]]) != id {
                continue;
            }
            let seq = u16::from_be_bytes([buf[2], buf[3]]) as usize;
            let total = u16::from_be_bytes([buf[4], buf[5]]).max(1) as usize;
            if parts.len() != total {
                parts = vec![None; total];
            }
            if seq < total {
                parts[seq] = Some(buf[8..n].to_vec());
            }
            if parts.iter().all(Option::is_some) {
                return Ok(parts.into_iter().flatten().flatten().collect());
            }
        }
    }

    pub fn request(&mut self, body: &[u8]) -> Result<UdpReply> {
        let id = self.send(body)?;
        self.recv(id)
    }

    pub fn get(&mut self, key: &str) -> Result<Option<Value>> {
        let r = self.request(format!("get {key}\r\n").as_bytes())?;
        parse_get(&r).with_context(|| format!("get {key}"))
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<String> {
        let mut body = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n");
        let r = self.request(&body)?;
        Ok(String::from_utf8_lossy(&r).trim_end().to_string())
    }

    pub fn delete(&mut self, key: &str) -> Result<String> {
        let r = self.request(format!("delete {key}\r\n").as_bytes())?;
        Ok(String::from_utf8_lossy(&r).trim_end().to_string())
    }
}

/// Parses a single-key get reply: `VALUE k f n\r\n<data>\r\nEND\r\n` or `END\r\n`.
pub fn parse_get(r: &[u8]) -> Result<Option<Value>> {
    if r == b"END\r\n" {
        return Ok(None);
    }
    let nl = r
        .windows(2)
        .position(|w| w == b"\r\n")
        .context("no line in the reply")?;
    let line = String::from_utf8_lossy(&r[..nl]);
    let t: Vec<&str> = line.split_whitespace().collect();
    if t.len() < 4 || t[0] != "VALUE" {
        bail!("unexpected reply: {line}");
    }
    let flags: u32 = t[2].parse()?;
    let n: usize = t[3].parse()?;
    let data = r.get(nl + 2..nl + 2 + n).context("short value")?;
    if r.get(nl + 2 + n..) != Some(b"\r\nEND\r\n") {
        bail!("the reply does not end in END");
    }
    Ok(Some((flags, data.to_vec())))
}
