//! Which VIPs this node announces, and why not the others: a VIP attracts
//! traffic only while this node can serve it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use weir_config::{Config, DrainMode};

use super::bird_conf::Announce;
use crate::controller::Snapshot;

/// What the gate looks at besides the configuration and the health checks.
#[derive(Debug, Clone)]
pub struct NodeState {
    /// `weir node drain` is in force.
    pub drained: bool,
    /// What the drain does (`bgp.drain`).
    pub drain: DrainMode,
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
    /// Announced de-preferred: the node is drained with
    /// `drain = "graceful-shutdown"`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub depreferred: bool,
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
            let withdrawn_by_drain = node.drained && node.drain == DrainMode::Withdraw;
            let why_not = if withdrawn_by_drain {
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
                depreferred: why_not.is_none() && node.drained,
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
            a.depreferred = false;
            a.why_not = Some(format!(
                "it shares its address with VIP `{other}`, which cannot be served here"
            ));
        }
    }
    out
}

/// What to tell the speaker: the addresses to announce, and whether they
/// go de-preferred (the drain is node-wide, so all or none do).
pub fn to_announce(announcements: &[VipAnnouncement]) -> Announce {
    let mut a: Vec<IpAddr> = announcements
        .iter()
        .filter(|a| a.announced)
        .filter_map(|a| a.prefix.split_once('/')?.0.parse().ok())
        .collect();
    a.sort();
    a.dedup();
    Announce {
        depreferred: announcements.iter().any(|a| a.depreferred),
        addresses: a,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{DipSnapshot, VipSnapshot};
    use weir_config::{OnSilent, PolicyName};

    const CFG: &str = r#"
[dataplane]
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "dsr"
  [[vip.dip]]
  address = "10.1.0.1"
  [[vip.dip]]
  address = "10.1.0.2"

[[vip]]
name = "tls"
address = "10.0.0.100"
port = 443
protocol = "tcp"
mode = "dsr"
  [[vip.dip]]
  address = "10.1.0.1"

[[vip]]
name = "six"
address = "2001:db8::100"
port = 80
protocol = "tcp"
mode = "dsr"
  [[vip.dip]]
  address = "2001:db8:1::1"
"#;

    fn snap(unhealthy: &[(&str, &str)]) -> Snapshot {
        let cfg = Config::parse("t.toml", CFG).unwrap();
        Snapshot {
            policy: PolicyName::Static,
            m: 4,
            update_interval_ms: 100,
            telemetry: None,
            on_agent_silent: OnSilent::Keep,
            at_unix_ms: 0,
            ticks: 1,
            tables_published: 0,
            entries_written: 0,
            vips: cfg
                .vips
                .iter()
                .map(|v| VipSnapshot {
                    name: v.name.get_ref().clone(),
                    vip_id: 0,
                    table_version: 1,
                    dips: v
                        .dips
                        .iter()
                        .map(|d| {
                            let a = d.address.get_ref().to_string();
                            let bad = unhealthy.contains(&(v.name.get_ref().as_str(), a.as_str()));
                            DipSnapshot {
                                slot: 0,
                                address: a,
                                port: *v.port.get_ref(),
                                capacity: None,
                                load: None,
                                available: None,
                                weight: 1,
                                class: None,
                                share: None,
                                healthy: Some(!bad),
                                health_checks: 1,
                                health_failures: 0,
                                agent_misses: 0,
                                agent_silent: false,
                                agent_errors: Default::default(),
                                last_error: None,
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn node() -> NodeState {
        NodeState {
            drained: false,
            drain: DrainMode::Withdraw,
            detached: None,
            v4_neighbour: true,
            v6_neighbour: false,
            min_healthy_dips: 1,
        }
    }

    fn addresses(a: &[VipAnnouncement]) -> Vec<IpAddr> {
        to_announce(a).addresses
    }

    fn verdicts(a: &[VipAnnouncement]) -> Vec<(&str, bool)> {
        a.iter().map(|a| (a.name.as_str(), a.announced)).collect()
    }

    #[test]
    fn a_vip_is_announced_only_while_this_node_can_serve_it() {
        let cfg = Config::parse("t.toml", CFG).unwrap();
        let all = decide(&cfg, Some(&snap(&[])), &node());
        assert_eq!(
            verdicts(&all),
            [("web", true), ("tls", true), ("six", false)]
        );
        assert_eq!(
            all[2].why_not.as_deref(),
            Some("no neighbour of its address family")
        );
        assert_eq!(addresses(&all), ["10.0.0.100".parse::<IpAddr>().unwrap()]);

        // One of web's two DIPs fails: still one healthy, still announced;
        // with a minimum of two, withdrawn.
        let one_down = snap(&[("web", "10.1.0.2")]);
        let a = decide(&cfg, Some(&one_down), &node());
        assert_eq!((a[0].healthy_dips, a[0].announced), (1, true));
        let two = NodeState {
            min_healthy_dips: 2,
            ..node()
        };
        let a = decide(&cfg, Some(&one_down), &two);
        assert!(
            !a[0].announced && a[0].why_not.as_ref().unwrap().contains("fewer than"),
            "{a:?}"
        );
        // tls's only DIP fails: web, at the same address, goes with it.
        let a = decide(&cfg, Some(&snap(&[("tls", "10.1.0.1")])), &node());
        assert_eq!(
            verdicts(&a),
            [("web", false), ("tls", false), ("six", false)]
        );
        assert!(
            a[0].why_not.as_ref().unwrap().contains("VIP `tls`"),
            "{a:?}"
        );
        assert!(addresses(&a).is_empty());

        // Drained, or XDP detached: nothing.
        for n in [
            NodeState {
                drained: true,
                ..node()
            },
            NodeState {
                detached: Some("eth0".into()),
                ..node()
            },
        ] {
            assert!(addresses(&decide(&cfg, Some(&snap(&[])), &n)).is_empty());
        }
        // No controller's view yet: the configured DIPs count.
        assert_eq!(addresses(&decide(&cfg, None, &node())).len(), 1);
    }

    #[test]
    fn a_graceful_drain_keeps_announcing_what_can_be_served_de_preferred() {
        let cfg = Config::parse("t.toml", CFG).unwrap();
        let graceful = NodeState {
            drained: true,
            drain: DrainMode::GracefulShutdown,
            ..node()
        };
        let a = decide(&cfg, Some(&snap(&[])), &graceful);
        assert_eq!(verdicts(&a), [("web", true), ("tls", true), ("six", false)]);
        assert!(a[0].depreferred && a[1].depreferred && !a[2].depreferred);
        let told = to_announce(&a);
        assert!(told.depreferred);
        assert_eq!(told.addresses, ["10.0.0.100".parse::<IpAddr>().unwrap()]);
        // The gate still withdraws what cannot be served.
        let a = decide(&cfg, Some(&snap(&[("tls", "10.1.0.1")])), &graceful);
        assert_eq!(to_announce(&a), Announce::default());
        // Undrained: announced as usual.
        let told = to_announce(&decide(&cfg, Some(&snap(&[])), &node()));
        assert!(!told.depreferred && told.addresses.len() == 1);
    }
}
