//! Next hops of DIPs, resolved in the control plane: the egress interface and
//! the MACs a frame to a DIP leaves with, from the kernel's route and
//! neighbour tables (over netlink, `weir_sys`), not per packet. `weir
//! serve` writes them into the DIPs' slots (`weir_dip.nh`); the software tier
//! hands them to its workers. `weir_sys::RouteWatch` says when those tables
//! change, so a resolved next hop is refreshed on a change, not polled.

use std::collections::HashMap;
use std::net::IpAddr;

use anyhow::{Context, Result};
use weir_abi::weir_next_hop;

/// Where a frame to one DIP goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    pub ifindex: u32,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
}

impl NextHop {
    /// As the data plane holds it in a DIP's slot.
    pub fn abi(&self) -> weir_next_hop {
        weir_next_hop {
            ifindex: self.ifindex,
            dmac: self.dst_mac,
            smac: self.src_mac,
        }
    }
}

/// Resolves `addr` with the kernel's tables, in this process's network
/// namespace; `ifaces` maps interface names weir is attached to (and may send
/// by) to their index and MAC. `None`: no usable neighbour entry (none yet,
/// or one that failed), or the route leaves by an interface weir does not
/// hold.
pub fn resolve(addr: IpAddr, ifaces: &HashMap<String, (u32, [u8; 6])>) -> Result<Option<NextHop>> {
    let Some(route) = weir_sys::route_to(addr)
        .with_context(|| format!("asking the kernel for the route to {addr} (netlink)"))?
    else {
        return Ok(None);
    };
    let Some(&(ifindex, src_mac)) = ifaces.values().find(|(i, _)| *i == route.oif) else {
        return Ok(None);
    };
    let via = route.gateway.unwrap_or(addr);
    let Some(dst_mac) = weir_sys::neighbour_mac(via, ifindex)
        .with_context(|| format!("asking the kernel for the neighbour {via} (netlink)"))?
    else {
        return Ok(None);
    };
    Ok(Some(NextHop {
        ifindex,
        src_mac,
        dst_mac,
    }))
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

    #[test]
    fn the_slot_holds_the_macs_the_right_way_round() {
        let nh = NextHop {
            ifindex: 3,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
        };
        let a = nh.abi();
        assert_eq!((a.ifindex, a.smac, a.dmac), (3, nh.src_mac, nh.dst_mac));
    }
}
