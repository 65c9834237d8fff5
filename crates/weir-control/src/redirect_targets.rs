//! Whether the frames weir sends out by each configured interface can
//! leave. A veth takes frames redirected to it in native XDP (and the ones
//! its own program sends back with XDP_TX) only while its peer runs an XDP
//! program or has GRO on (the peer's NAPI then takes them); otherwise the
//! veth driver drops every one, `bpf_redirect_map` still reports success,
//! and weir's own counters say `redirect`. The kernel (6.3+) says which
//! case holds in the veth's XDP features (NDO_XMIT); an older kernel is
//! answered from the peer's XDP program, and its GRO when it is in this
//! namespace.
//!
//! `weir serve` checks at start and every [`CHECK_EVERY`], logs each
//! change, and writes what it found to `<run dir>/redirect_targets.json`
//! for `weir status`, the management API and /metrics
//! (`weir_redirect_target_ok`). `weir doctor` runs the same check.
//!
//! The lost frames themselves are not counted: the veth driver refuses
//! them in `ndo_xdp_xmit` without touching any link or ethtool counter
//! (Linux 6.18); only the `xdp:xdp_devmap_xmit` tracepoint sees them.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_sys::{Link, XdpFeatures};

use crate::run_report::{Published, RunReport};

/// The last check, for `weir status`, the API and /metrics.
pub const REPORT: RunReport<Vec<RedirectTarget>> = RunReport::new("redirect_targets.json");

/// How often the daemon looks again.
pub const CHECK_EVERY: Duration = Duration::from_secs(3);

/// What the check found for one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Frames sent out by it leave (a NIC, a veth whose peer takes them,
    /// or generic XDP, which hands frames to the kernel's stack).
    Ok,
    /// The driver drops what weir sends out by it.
    Drops,
    /// It could not be told (an older kernel, a peer in another namespace).
    Unchecked,
}

/// One configured interface as a target of weir's frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedirectTarget {
    pub interface: String,
    pub verdict: Verdict,
    /// A veth's peer, and the named namespace it is in when not this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_netns: Option<String>,
    /// What is wrong (or could not be checked), and what to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// What the probe read of one interface, for [`assess`].
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub link: Link,
    /// The veth's XDP features, where the kernel has the netdev family.
    pub features: Option<XdpFeatures>,
    /// A veth's peer, where it could be read.
    pub peer: Option<Link>,
    /// The name of the peer's namespace, when it is another, named one.
    pub peer_netns: Option<String>,
    /// The peer's GRO, where it could be read (in this namespace only).
    pub peer_gro: Option<bool>,
    /// weir attaches in native mode (generic XDP redirects through the
    /// kernel's stack, which any device takes).
    pub native: bool,
}

/// The verdict on `name` from what was read of it.
pub fn assess(name: &str, f: &Facts) -> RedirectTarget {
    let mut t = RedirectTarget {
        interface: name.to_string(),
        verdict: Verdict::Ok,
        peer: f.peer.as_ref().map(|p| p.name.clone()),
        peer_netns: f.peer_netns.clone(),
        problem: None,
        fix: None,
    };
    if !f.native || f.link.kind.as_deref() != Some("veth") {
        return t;
    }
    let peer_name = t.peer.clone().unwrap_or_else(|| "its peer".to_string());
    let peer_where = match (&f.peer_netns, f.link.peer_netnsid) {
        (Some(ns), _) => format!("{peer_name} (in namespace {ns})"),
        (None, Some(id)) => format!("{peer_name} (in the namespace with id {id} here)"),
        (None, None) => peer_name.clone(),
    };
    let peer_xdp = f.peer.as_ref().and_then(|p| p.xdp_prog_id).is_some();
    let takes = match (f.features, peer_xdp, f.peer_gro) {
        (Some(x), _, _) => Some(x.ndo_xmit()),
        (None, true, _) => Some(true),
        (None, false, Some(gro)) => Some(gro),
        (None, false, None) => None,
    };
    let peer_up = f.peer.as_ref().is_none_or(|p| p.oper_up);
    match takes {
        Some(true) if peer_up => {}
        Some(true) => {
            t.verdict = Verdict::Drops;
            t.problem = Some(format!(
                "{name} is a veth whose peer {peer_where} is down: every frame weir sends out \
                 by {name} is dropped"
            ));
            t.fix = Some(in_peer_ns(f, &format!("ip link set dev {peer_name} up")));
        }
        Some(false) => {
            t.verdict = Verdict::Drops;
            t.problem = Some(format!(
                "{name} is a veth whose peer {peer_where} has neither an XDP program nor GRO on: \
                 the veth driver drops every frame weir redirects to {name} or sends back out \
                 by it, while weir counts them as sent"
            ));
            t.fix = Some(format!(
                "{}, or attach an XDP program to {peer_name} ({}), or use a NIC whose driver \
                 has native XDP",
                in_peer_ns(f, &format!("ethtool -K {peer_name} gro on")),
                in_peer_ns(
                    f,
                    &format!("ip link set dev {peer_name} xdp obj PROG.o sec xdp")
                ),
            ));
        }
        None => {
            t.verdict = Verdict::Unchecked;
            t.problem = Some(format!(
                "{name} is a veth whose peer {peer_where} cannot be checked from here (this \
                 kernel does not report XDP features, and the peer's GRO is read only in this \
                 namespace): frames weir sends out by {name} are dropped unless the peer runs \
                 an XDP program or has GRO on"
            ));
            t.fix = Some(format!(
                "make sure of it: {}",
                in_peer_ns(f, &format!("ethtool -K {peer_name} gro on"))
            ));
        }
    }
    t
}

/// `cmd`, run in the peer's namespace.
fn in_peer_ns(f: &Facts, cmd: &str) -> String {
    match (&f.peer_netns, f.link.peer_netnsid) {
        (Some(ns), _) => format!("`ip netns exec {ns} {cmd}`"),
        (None, Some(_)) => format!("`{cmd}` in the peer's namespace"),
        (None, None) => format!("`{cmd}`"),
    }
}

/// Reads what [`assess`] needs of interface `ifindex` (named `name`) of
/// this namespace; `None` when it is gone.
pub fn probe(name: &str, ifindex: u32, native: bool) -> Option<RedirectTarget> {
    let link = weir_sys::link(ifindex, None).ok().flatten()?;
    let mut facts = Facts {
        native,
        ..Facts::default()
    };
    if link.kind.as_deref() == Some("veth") {
        facts.features = weir_sys::xdp_features(ifindex).ok().flatten();
        if let Some(peer) = link.peer_ifindex {
            facts.peer = weir_sys::link(peer, link.peer_netnsid).ok().flatten();
        }
        facts.peer_netns = link.peer_netnsid.and_then(weir_sys::netns_name);
        if link.peer_netnsid.is_none() {
            facts.peer_gro = facts.peer.as_ref().and_then(|p| {
                let features = weir_sys::features(&p.name).ok()?;
                Some(features.iter().any(|f| f.name == "rx-gro" && f.active))
            });
        }
    }
    facts.link = link;
    Some(assess(name, &facts))
}

/// The daemon's side: the last verdict on each interface, to log changes.
pub struct Watch {
    native: bool,
    report: Published<Vec<RedirectTarget>>,
}

impl Watch {
    /// Watches for a daemon attached natively (`native`) or not.
    pub fn new(native: bool, run_dir: &Path) -> Watch {
        Watch {
            native,
            report: REPORT.publisher(run_dir),
        }
    }

    /// Checks every `(name, ifindex)`; logs verdicts that changed and
    /// records all of them.
    pub fn check(&mut self, ifaces: &[(String, u32)]) {
        let now: Vec<RedirectTarget> = ifaces
            .iter()
            .filter_map(|(name, idx)| probe(name, *idx, self.native))
            .collect();
        for t in &now {
            let before = self
                .report
                .last()
                .iter()
                .find(|b| b.interface == t.interface);
            if before.map(|b| b.verdict) == Some(t.verdict) {
                continue;
            }
            match (t.verdict, before) {
                (Verdict::Ok, None) => {}
                (Verdict::Ok, Some(_)) => log::info!(
                    "{}: frames sent out by it leave again (its peer takes them)",
                    t.interface
                ),
                _ => log::warn!(
                    "warning: {}; fix: {}",
                    t.problem.as_deref().unwrap_or(""),
                    t.fix.as_deref().unwrap_or("")
                ),
            }
        }
        self.report.publish(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veth(peer_ns: Option<i32>) -> Link {
        Link {
            ifindex: 3,
            name: "wb1".into(),
            kind: Some("veth".into()),
            peer_ifindex: Some(2),
            peer_netnsid: peer_ns,
            oper_up: true,
            ..Link::default()
        }
    }

    fn peer(xdp: Option<u32>, up: bool) -> Link {
        Link {
            ifindex: 2,
            name: "eth0".into(),
            kind: Some("veth".into()),
            oper_up: up,
            xdp_prog_id: xdp,
            ..Link::default()
        }
    }

    /// A veth in this namespace whose peer is in namespace `b1`.
    fn facts(features: Option<u64>, peer_xdp: Option<u32>) -> Facts {
        Facts {
            link: veth(Some(1)),
            features: features.map(XdpFeatures),
            peer: Some(peer(peer_xdp, true)),
            peer_netns: Some("b1".into()),
            peer_gro: None,
            native: true,
        }
    }

    #[test]
    fn a_veth_whose_peer_takes_frames_is_ok() {
        // BASIC | REDIRECT | NDO_XMIT | RX_SG | NDO_XMIT_SG, as 6.x reports
        // with GRO on the peer.
        let t = assess("wb1", &facts(Some(103), None));
        assert_eq!(t.verdict, Verdict::Ok);
        assert_eq!((t.problem, t.fix), (None, None));
        assert_eq!(t.peer.as_deref(), Some("eth0"));
    }

    #[test]
    fn a_veth_whose_peer_has_neither_xdp_nor_gro_drops_and_says_the_fix() {
        // BASIC | REDIRECT | RX_SG: no NDO_XMIT.
        let t = assess("wb1", &facts(Some(35), None));
        assert_eq!(t.verdict, Verdict::Drops);
        let p = t.problem.unwrap();
        assert!(
            p.starts_with("wb1 is a veth whose peer eth0 (in namespace b1) has neither"),
            "{p}"
        );
        let fix = t.fix.unwrap();
        assert!(
            fix.contains("`ip netns exec b1 ethtool -K eth0 gro on`"),
            "{fix}"
        );
        assert!(
            fix.contains("`ip netns exec b1 ip link set dev eth0 xdp obj PROG.o sec xdp`"),
            "{fix}"
        );
        assert!(fix.contains("native XDP"), "{fix}");
    }

    #[test]
    fn a_down_peer_drops_even_with_xdp() {
        let mut f = facts(Some(103), Some(9));
        f.peer = Some(peer(Some(9), false));
        let t = assess("wb1", &f);
        assert_eq!(t.verdict, Verdict::Drops);
        assert!(t.problem.unwrap().contains("is down"));
        assert_eq!(
            t.fix.as_deref(),
            Some("`ip netns exec b1 ip link set dev eth0 up`")
        );
    }

    #[test]
    fn without_xdp_features_the_peer_program_or_gro_decides() {
        assert_eq!(assess("wb1", &facts(None, Some(9))).verdict, Verdict::Ok);
        let t = assess("wb1", &facts(None, None));
        assert_eq!(t.verdict, Verdict::Unchecked);
        assert!(t.problem.unwrap().contains("cannot be checked"));
        let mut same_ns = facts(None, None);
        same_ns.link = veth(None);
        same_ns.peer_netns = None;
        same_ns.peer_gro = Some(false);
        let t = assess("wb1", &same_ns);
        assert_eq!(t.verdict, Verdict::Drops);
        assert!(t.fix.unwrap().starts_with("`ethtool -K eth0 gro on`"));
        same_ns.peer_gro = Some(true);
        assert_eq!(assess("wb1", &same_ns).verdict, Verdict::Ok);
    }

    #[test]
    fn a_nic_or_generic_xdp_is_never_flagged() {
        let nic = Facts {
            link: Link {
                name: "eth0".into(),
                ..Link::default()
            },
            native: true,
            ..Facts::default()
        };
        assert_eq!(assess("eth0", &nic).verdict, Verdict::Ok);
        let mut generic = facts(Some(35), None);
        generic.native = false;
        assert_eq!(assess("wb1", &generic).verdict, Verdict::Ok);
    }

    #[test]
    fn an_unnamed_peer_namespace_is_named_by_its_id() {
        let mut f = facts(Some(35), None);
        f.peer_netns = None;
        let t = assess("wb1", &f);
        assert!(t
            .problem
            .unwrap()
            .contains("eth0 (in the namespace with id 1 here)"));
        assert!(t
            .fix
            .unwrap()
            .starts_with("`ethtool -K eth0 gro on` in the peer's namespace"));
    }
}
