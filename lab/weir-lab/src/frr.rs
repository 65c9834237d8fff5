//! FRR as the lab's router: zebra, bfdd and bgpd in a namespace, each with
//! its configuration, pid file, log and sockets in a directory of the lab's
//! own, so that nothing of the host's FRR is read or touched. bgpd learns
//! the nodes' VIPs by BGP (eBGP, ECMP over up to 8 paths, BFD when asked)
//! and zebra installs them in the namespace's kernel table.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Where Debian's frr package puts the daemons.
const DAEMONS: &str = "/usr/lib/frr";

/// The import policy every neighbour gets: GRACEFUL_SHUTDOWN means
/// LOCAL_PREF 0; everything else is taken as sent.
const GSHUT_MAP: &str = "WEIR-IN";
const GSHUT_POLICY: &str = "bgp community-list standard GSHUT permit graceful-shutdown\n\
     route-map WEIR-IN permit 10\n match community GSHUT\n set local-preference 0\n\
     route-map WEIR-IN permit 20\n";

/// One path of the router's BGP table for a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpPath {
    /// The neighbour it came from.
    pub peer: IpAddr,
    /// Chosen as the best path, or as an equal-cost one beside it.
    pub used: bool,
    pub local_pref: Option<u64>,
    pub as_path: String,
    pub communities: String,
}

/// One BGP neighbour of the router.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub address: Ipv4Addr,
    pub remote_as: u32,
    pub bfd: bool,
}

/// The running router; dropping it stops its daemons and removes its files.
pub struct Frr {
    ns: String,
    dir: PathBuf,
}

impl Frr {
    /// Starts zebra, bfdd and bgpd in `ns` with AS `asn`, peering with
    /// `peers`; their files go into `dir` (created, and owned by the frr
    /// user the daemons drop to).
    pub fn start(
        ns: &str,
        dir: &Path,
        router_id: Ipv4Addr,
        asn: u32,
        peers: &[Peer],
    ) -> Result<Frr> {
        fs::create_dir_all(dir)?;
        let frr = Frr {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
        };
        // Routes marked GRACEFUL_SHUTDOWN (RFC 8326) by a drained node get
        // the lowest LOCAL_PREF, so any other node's path wins.
        let mut bgp = format!(
            "frr defaults datacenter\nhostname lab-router\n{GSHUT_POLICY}router bgp {asn}\n \
             bgp router-id {router_id}\n no bgp ebgp-requires-policy\n \
             bgp bestpath as-path multipath-relax\n"
        );
        for p in peers {
            let a = p.address;
            bgp.push_str(&format!(
                " neighbor {a} remote-as {}\n neighbor {a} timers 3 9\n neighbor {a} timers connect 1\n",
                p.remote_as
            ));
            if p.bfd {
                bgp.push_str(&format!(" neighbor {a} bfd\n"));
            }
        }
        bgp.push_str(" address-family ipv4 unicast\n  maximum-paths 8\n");
        for p in peers {
            bgp.push_str(&format!(
                "  neighbor {} route-map {GSHUT_MAP} in\n",
                p.address
            ));
        }
        bgp.push_str(" exit-address-family\n");
        fs::write(dir.join("bgpd.conf"), bgp)?;
        for d in ["zebra", "bfdd"] {
            fs::write(dir.join(format!("{d}.conf")), "hostname lab-router\n")?;
        }
        let chown = Command::new("chown")
            .args(["frr:frr"])
            .arg(dir)
            .status()
            .context("chown (FRR's daemons run as the frr user)")?;
        if !chown.success() {
            bail!(
                "chown frr:frr {} failed: is FRR installed (apt install frr)?",
                dir.display()
            );
        }
        for d in ["zebra", "bfdd", "bgpd"] {
            let out = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(Path::new(DAEMONS).join(d))
                .arg("-d")
                .arg("-f")
                .arg(dir.join(format!("{d}.conf")))
                .arg("-i")
                .arg(dir.join(format!("{d}.pid")))
                .arg("--vty_socket")
                .arg(dir)
                .arg("-z")
                .arg(dir.join("zserv.api"))
                .args(["-A", "127.0.0.1", "-P", "0"])
                .arg("--log")
                .arg(format!("file:{}", dir.join(format!("{d}.log")).display()))
                .output()
                .with_context(|| format!("starting FRR's {d} (scripts/deps.sh installs frr)"))?;
            if !out.status.success() {
                bail!(
                    "FRR's {d} did not start: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while frr.vtysh("show bgp summary").is_err() {
            if Instant::now() > deadline {
                bail!("FRR's bgpd did not answer within 10 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(frr)
    }

    /// One vtysh command's output.
    pub fn vtysh(&self, command: &str) -> Result<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "vtysh", "--vty_socket"])
            .arg(&self.dir)
            .args(["-c", command])
            .output()
            .context("running vtysh")?;
        if !out.status.success() {
            bail!(
                "vtysh -c '{command}': {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The next hops of the router's selected, installed route to `prefix`
    /// (`show ip route json`); empty when it has none.
    pub fn next_hops(&self, prefix: &str) -> Result<Vec<Ipv4Addr>> {
        let text = self.vtysh("show ip route json")?;
        let table: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("vtysh's JSON: {text}"))?;
        let mut hops: Vec<Ipv4Addr> = table[prefix]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["selected"] == true && r["installed"] == true)
            .flat_map(|r| r["nexthops"].as_array().cloned().unwrap_or_default())
            .filter(|h| h["active"] == true)
            .filter_map(|h| h["ip"].as_str()?.parse().ok())
            .collect();
        hops.sort();
        Ok(hops)
    }

    /// Adds an IPv6 neighbour (IPv6 unicast, ECMP over up to 8 paths, the
    /// same import policy as the others) to the running router.
    pub fn add_peer6(&self, address: std::net::Ipv6Addr, remote_as: u32) -> Result<()> {
        let router = self.vtysh("show bgp summary json")?;
        let asn = serde_json::from_str::<serde_json::Value>(&router)
            .ok()
            .and_then(|v| v["ipv4Unicast"]["as"].as_u64())
            .context("the router's AS (show bgp summary json)")?;
        let lines = [
            "configure terminal".to_string(),
            format!("router bgp {asn}"),
            format!("neighbor {address} remote-as {remote_as}"),
            format!("neighbor {address} timers 3 9"),
            format!("neighbor {address} timers connect 1"),
            "address-family ipv6 unicast".to_string(),
            format!("neighbor {address} activate"),
            format!("neighbor {address} route-map {GSHUT_MAP} in"),
            "maximum-paths 8".to_string(),
        ];
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, "vtysh", "--vty_socket"])
            .arg(&self.dir);
        for l in &lines {
            cmd.args(["-c", l]);
        }
        let out = cmd.output().context("running vtysh")?;
        let said = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || said.contains('%') {
            bail!(
                "configuring IPv6 neighbour {address}: {}{}",
                said.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// How many active next hops the router's selected, installed IPv6
    /// route to `prefix` has (`show ipv6 route json`); 0 when it has none.
    /// (Counted, not listed: FRR forwards over the nodes' link-local
    /// addresses.)
    pub fn next_hops6(&self, prefix: &str) -> Result<usize> {
        let text = self.vtysh("show ipv6 route json")?;
        let table: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("vtysh's JSON: {text}"))?;
        Ok(table[prefix]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["selected"] == true && r["installed"] == true)
            .flat_map(|r| r["nexthops"].as_array().cloned().unwrap_or_default())
            .filter(|h| h["active"] == true)
            .count())
    }

    /// Every path of the router's BGP table for the IPv4 `prefix`, used or
    /// not (`show bgp ipv4 unicast PREFIX json`), sorted by neighbour.
    pub fn bgp_paths(&self, prefix: &str) -> Result<Vec<BgpPath>> {
        let text = self.vtysh(&format!("show bgp ipv4 unicast {prefix} json"))?;
        let entry: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("vtysh's JSON: {text}"))?;
        let mut paths: Vec<BgpPath> = entry["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(BgpPath {
                    peer: p["peer"]["peerId"].as_str()?.parse().ok()?,
                    used: p["bestpath"]["overall"] == true || p["multipath"] == true,
                    local_pref: p["locPrf"].as_u64(),
                    as_path: p["aspath"]["string"].as_str().unwrap_or("").to_string(),
                    communities: p["community"]["string"].as_str().unwrap_or("").to_string(),
                })
            })
            .collect();
        paths.sort_by_key(|p| p.peer);
        Ok(paths)
    }

    /// BFD's state of the session with `peer` (Up, Down, Init...).
    pub fn bfd_state(&self, peer: Ipv4Addr) -> Result<Option<String>> {
        let text = self.vtysh("show bfd peers json")?;
        let peers: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        Ok(peers
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["peer"] == peer.to_string())
            .and_then(|p| p["status"].as_str().map(String::from)))
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for d in ["bgpd", "bfdd", "zebra"] {
            let pid = fs::read_to_string(self.dir.join(format!("{d}.pid")))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            if let Some(pid) = pid {
                let _ = weir_sys::process::send_signal(pid, libc::SIGKILL);
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
