//! Next hops of DIPs for the software tier: the egress interface and the
//! MACs a frame to the DIP leaves with, resolved in the control plane (the
//! kernel's route and neighbour tables, through iproute2's JSON output), not
//! per packet. An unresolved DIP is primed (a TCP connect makes the kernel
//! resolve its neighbour) and retried on the next refresh.

use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;

use anyhow::{Context, Result};
use serde::Deserialize;
use weir_dataplane::iface::parse_mac;

/// Where a frame to one DIP goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    pub ifindex: u32,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
}

#[derive(Deserialize)]
struct Route {
    dev: String,
    gateway: Option<String>,
}

#[derive(Deserialize)]
struct Neigh {
    lladdr: Option<String>,
}

/// Resolves `addr` with the kernel's tables, in this process's network
/// namespace; `ifaces` maps interface names weir is attached to (and may send
/// by) to their index and MAC. `None`: no neighbour entry yet, or the route
/// leaves by an interface weir does not hold.
pub fn resolve(addr: IpAddr, ifaces: &HashMap<String, (u32, [u8; 6])>) -> Result<Option<NextHop>> {
    let route: Vec<Route> = ip_json(&["route", "get", &addr.to_string()])?;
    let Some(route) = route.into_iter().next() else {
        return Ok(None);
    };
    let Some(&(ifindex, src_mac)) = ifaces.get(&route.dev) else {
        return Ok(None);
    };
    let via = route.gateway.unwrap_or_else(|| addr.to_string());
    let neigh: Vec<Neigh> = ip_json(&["neigh", "show", "to", &via, "dev", &route.dev])?;
    let Some(mac) = neigh.into_iter().find_map(|n| n.lladdr) else {
        return Ok(None);
    };
    Ok(Some(NextHop {
        ifindex,
        src_mac,
        dst_mac: parse_mac(&mac)?,
    }))
}

fn ip_json<T: for<'de> Deserialize<'de>>(args: &[&str]) -> Result<Vec<T>> {
    let out = Command::new("ip")
        .arg("-j")
        .args(args)
        .output()
        .context("running ip (install iproute2)")?;
    if !out.status.success() {
        // No route: nothing to resolve, not an error of weir's.
        return Ok(Vec::new());
    }
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading `ip -j {}`", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_address_leaves_by_no_held_interface() {
        let ifaces = HashMap::from([("wc0".to_string(), (9, [2; 6]))]);
        assert_eq!(
            resolve("127.0.0.1".parse().unwrap(), &ifaces).unwrap(),
            None
        );
    }
}
