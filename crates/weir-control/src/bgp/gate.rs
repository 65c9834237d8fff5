//! Which VIPs this node announces, and why not the others: a VIP attracts
//! traffic only while this node can serve it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use weir_config::Config;

use crate::controller::Snapshot;

/// What the gate looks at besides the configuration and the health checks.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// `weir node drain` is in force.
    pub drained: bool,
    /// A configured interface where weir's XDP program is not attached.
    pub detached: Option<String>,
    pub v4_neighbour: bool,
    pub v6_neighbour: bool,
    pub min_healthy_dips: u32,
}

/// One VIP's announcement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipAnnouncement {
    pub name: String,
    /// The route, `address/32` or `address/128`.
    pub prefix: String,
    pub announced: bool,
    /// DIPs with a weight above 0 whose health checks pass (or that have none).
    pub healthy_dips: u32,
    /// Why it is not announced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

/// The announcement of every VIP of `cfg`. VIPs that share an address
/// share its route: it is announced only while every one of them can be
/// served, since the route attracts all their traffic.
pub fn decide(cfg: &Config, snap: Option<&Snapshot>, node: &NodeState) -> Vec<VipAnnouncement> {
    let mut out: Vec<VipAnnouncement> = cfg
        .vips
        .iter()
        .map(|v| {
            let addr = *v.address.get_ref();
            let healthy = healthy_dips(v, snap);
            let why_not = if node.drained {
                Some("this node is drained (weir node undrain announces it again)".to_string())
            } else if let Some(i) = &node.detached {
                Some(format!("weir's XDP program is not attached on {i}"))
            } else if healthy < node.min_healthy_dips {
                Some(format!(
                    "{healthy} healthy DIPs, fewer than bgp.min_healthy_dips ({})",
                    node.min_healthy_dips
                ))
            } else if (addr.is_ipv6() && !node.v6_neighbour)
                || (addr.is_ipv4() && !node.v4_neighbour)
            {
                Some("no neighbour of its address family".to_string())
            } else {
                None
            };
            VipAnnouncement {
                name: v.name.get_ref().clone(),
                prefix: format!("{addr}/{}", if addr.is_ipv6() { 128 } else { 32 }),
                announced: why_not.is_none(),
                healthy_dips: healthy,
                why_not,
            }
        })
        .collect();
    // A shared address: the first refusal withdraws it for all.
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    for a in out.iter().filter(|a| !a.announced) {
        refused.entry(a.prefix.clone()).or_insert(a.name.clone());
    }
    for a in out.iter_mut().filter(|a| a.announced) {
        if let Some(other) = refused.get(&a.prefix) {
            a.announced = false;
            a.why_not = Some(format!(
                "it shares its address with VIP `{other}`, which cannot be served here"
            ));
        }
    }
    out
}

/// The addresses to announce.
pub fn addresses(announcements: &[VipAnnouncement]) -> Vec<IpAddr> {
    let mut a: Vec<IpAddr> = announcements
        .iter()
        .filter(|a| a.announced)
        .filter_map(|a| a.prefix.split_once('/')?.0.parse().ok())
        .collect();
    a.sort();
    a.dedup();
    a
}

fn healthy_dips(v: &weir_config::Vip, snap: Option<&Snapshot>) -> u32 {
    let seen = snap.and_then(|s| s.vips.iter().find(|s| s.name == *v.name.get_ref()));
    v.dips
        .iter()
        .filter(|d| *d.weight.get_ref() > 0)
        .filter(|d| {
            let addr = d.address.get_ref().to_string();
            let port = d.port.as_ref().map(|p| *p.get_ref());
            let health = seen.and_then(|s| {
                s.dips
                    .iter()
                    .find(|x| x.address == addr && port.is_none_or(|p| p == x.port))
            });
            health.and_then(|h| h.healthy) != Some(false)
        })
        .count() as u32
}
