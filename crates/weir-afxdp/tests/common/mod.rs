//! A veth pair between two network namespaces for the AF_XDP tests and the
//! benchmark (weir-afxdp cannot use weir-lab, which sits above it).
//!
//! Names are unique per process (`w<pid>-x<n>-{a,b}`) and both namespaces
//! are removed on drop, also when a test panics. Addresses exist only
//! inside them. Side A carries the AF_XDP socket; side B is a plain host
//! with an address, a static neighbour entry for A (A's stack answers no
//! ARP: every frame goes to the socket), no IPv6 (no stray ND traffic), and
//! no TX checksum offload (frames leave B with full checksums).
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context, Result};

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub const IF_A: &str = "xa";
pub const IF_B: &str = "xb";
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub const IP_A: [u8; 4] = [10, 78, 0, 1];
pub const IP_B: [u8; 4] = [10, 78, 0, 2];

fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn mac(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// Two namespaces joined by a veth pair, removed on drop.
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
}

impl VethPair {
    pub fn new() -> Result<VethPair> {
        VethPair::with_queues(1)
    }

    /// A pair whose ends have `queues` RX and TX queues each.
    pub fn with_queues(queues: u32) -> Result<VethPair> {
        let prefix = format!(
            "w{}-x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut pair = VethPair {
            ns_a: String::new(),
            ns_b: String::new(),
        };
        for (slot, side) in [(&mut pair.ns_a, "a"), (&mut pair.ns_b, "b")] {
            let name = format!("{prefix}-{side}");
            run("ip", &["netns", "add", &name])?;
            *slot = name;
        }
        pair.build(queues)?;
        Ok(pair)
    }

    fn build(&self, queues: u32) -> Result<()> {
        let (a, b) = (self.ns_a.as_str(), self.ns_b.as_str());
        for ns in [a, b] {
            // Before the veth exists, so it never sends IPv6 ND or MLD.
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            )?;
        }
        let q = queues.to_string();
        let (q, mac_a, mac_b) = (q.as_str(), mac(MAC_A), mac(MAC_B));
        let side_a = [
            "netns",
            a,
            "address",
            &mac_a,
            "numrxqueues",
            q,
            "numtxqueues",
            q,
        ];
        let side_b = [
            "netns",
            b,
            "address",
            &mac_b,
            "numrxqueues",
            q,
            "numtxqueues",
            q,
        ];
        let mut args = vec!["link", "add", IF_A];
        args.extend(side_a);
        args.extend(["type", "veth", "peer", "name", IF_B]);
        args.extend(side_b);
        run("ip", &args)?;
        let ip_b = format!("{}/24", dotted(IP_B));
        run("ip", &["-n", b, "addr", "add", &ip_b, "dev", IF_B])?;
        run(
            "ip",
            &[
                "-n",
                b,
                "neigh",
                "add",
                &dotted(IP_A),
                "lladdr",
                &mac(MAC_A),
                "dev",
                IF_B,
                "nud",
                "permanent",
            ],
        )?;
        run(
            "ip",
            &["netns", "exec", b, "ethtool", "-K", IF_B, "tx", "off"],
        )?;
        for (ns, dev) in [(a, IF_A), (b, IF_B)] {
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            if !ns.is_empty() {
                let _ = run("ip", &["netns", "del", ns]);
            }
        }
    }
}

pub fn dotted(ip: [u8; 4]) -> String {
    std::net::Ipv4Addr::from(ip).to_string()
}

/// Moves the calling thread into a namespace (network namespaces are per
/// thread): call it first thing on a thread of its own.
pub fn enter(ns: &str) -> Result<()> {
    let f = File::open(format!("/run/netns/{ns}")).with_context(|| format!("opening {ns}"))?;
    // SAFETY: setns on a valid namespace fd.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("entering {ns}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread inside `ns` and returns what it returns.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Attaches weir_xsk_redirect to `iface` (native XDP) in the calling
/// thread's namespace, until the attachment is dropped.
pub fn attach_redirect(
    iface: &str,
    skel: &weir_traffic::xsk_redirect::WeirXskRedirectSkel<'static>,
) -> Result<weir_dataplane::attach::Attachment> {
    use std::os::fd::AsFd;
    let ifindex = weir_dataplane::iface::Iface::by_name(iface)?.ifindex;
    weir_dataplane::attach::attach_all(
        skel.progs.xsk_redirect.as_fd(),
        &[(iface.to_string(), ifindex)],
        weir_dataplane::attach::XdpMode::Native,
    )
}

/// Offsets in an Ethernet + IPv4 (no options) + UDP frame.
pub mod udp {
    pub const ETH_TYPE: usize = 12;
    pub const IP: usize = 14;
    pub const IP_SRC: usize = IP + 12;
    pub const IP_DST: usize = IP + 16;
    pub const UDP: usize = IP + 20;
    pub const PAYLOAD: usize = UDP + 8;

    /// The UDP destination port of an IPv4 frame without IP options.
    pub fn dst_port(frame: &[u8]) -> Option<u16> {
        let is_v4_udp = frame.len() >= PAYLOAD
            && frame[ETH_TYPE..ETH_TYPE + 2] == [0x08, 0x00]
            && frame[IP] == 0x45
            && frame[IP + 9] == 17;
        is_v4_udp.then(|| u16::from_be_bytes([frame[UDP + 2], frame[UDP + 3]]))
    }

    /// Turns a frame around in place: MACs, IP addresses and ports swap.
    /// Both checksums stay valid (their sums do not depend on order).
    pub fn reflect(frame: &mut [u8]) {
        let (dst, rest) = frame.split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
        let (src_ip, dst_ip) = frame[IP_SRC..IP_DST + 4].split_at_mut(4);
        src_ip.swap_with_slice(dst_ip);
        let (sport, dport) = frame[UDP..UDP + 4].split_at_mut(2);
        sport.swap_with_slice(dport);
    }

    /// An Ethernet + IPv4 + UDP frame with correct checksums, padded to
    /// the 60-byte Ethernet minimum.
    pub fn frame(
        macs: ([u8; 6], [u8; 6]),
        src: ([u8; 4], u16),
        dst: ([u8; 4], u16),
        payload: &[u8],
    ) -> Vec<u8> {
        let builder = etherparse::PacketBuilder::ethernet2(macs.0, macs.1)
            .ipv4(src.0, dst.0, 64)
            .udp(src.1, dst.1);
        let mut f = Vec::with_capacity(builder.size(payload.len()).max(60));
        builder
            .write(&mut f, payload)
            .expect("writing to a Vec cannot fail");
        f.resize(f.len().max(60), 0);
        f
    }
}
