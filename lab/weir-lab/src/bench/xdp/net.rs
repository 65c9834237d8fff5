//! The bench's own network namespace, so that the FIB answers alike on every
//! host and nothing touches the caller's: `lo` (where test runs arrive),
//! forwarding on, a veth pair whose first end is where the DIP's route
//! leaves, by a gateway with a permanent neighbour entry.

use std::process::Command;

use super::*;
use weir_dataplane::iface::Iface;

/// The interface the DIP's route leaves by (its peer is wbx1).
const EGRESS: &str = "wbx0";
/// The gateway's MAC: what the FIB and the resolved next hop both name.
pub(in crate::bench) const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0e];

fn sh(cmd: &str) -> Result<()> {
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {} (install iproute2 and procps)", args[0]))?;
    ensure!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Moves the calling thread into a new network namespace, set up as the
/// module says (the kernel removes it with the veth pair when the process
/// ends); returns the egress interface.
pub(in crate::bench) fn enter() -> Result<Iface> {
    weir_sys::namespaces::unshare_netns().context("unshare(CLONE_NEWNET): the bench needs root")?;
    let gw = GW_MAC.map(|b| format!("{b:02x}")).join(":");
    for cmd in [
        "ip link set lo up".to_string(),
        "sysctl -qw net.ipv4.conf.all.forwarding=1".to_string(),
        "sysctl -qw net.ipv6.conf.all.forwarding=1".to_string(),
        format!("ip link add {EGRESS} type veth peer name wbx1"),
        format!("ip addr add 10.254.0.1/24 dev {EGRESS}"),
        format!("ip -6 addr add fd00:254::1/64 dev {EGRESS} nodad"),
        format!("ip link set {EGRESS} up"),
        "ip link set wbx1 up".to_string(),
        format!("ip neigh replace 10.254.0.2 lladdr {gw} dev {EGRESS} nud permanent"),
        format!("ip -6 neigh replace fd00:254::2 lladdr {gw} dev {EGRESS} nud permanent"),
        format!("ip route add {VIP}/32 via 10.254.0.2"),
        format!("ip -6 route add {VIP6}/128 via fd00:254::2"),
    ] {
        sh(&cmd)?;
    }
    Iface::by_name(EGRESS)
}
