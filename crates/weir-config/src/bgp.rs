//! `[bgp]`: how this node announces its VIPs to the routers in front of it
//! (through a BIRD 2 speaker that `weir serve` drives), with located errors.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;

fn speaker() -> Spanned<PathBuf> {
    Spanned::new(0..0, "/usr/sbin/bird".into())
}
fn hold_time() -> Spanned<u16> {
    Spanned::new(0..0, 9)
}
fn min_healthy() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn bfd_interval() -> Spanned<u32> {
    Spanned::new(0..0, 300)
}
fn bfd_multiplier() -> Spanned<u8> {
    Spanned::new(0..0, 3)
}
fn none() -> Spanned<Vec<String>> {
    Spanned::new(0..0, Vec::new())
}
fn no() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
fn graceful() -> Spanned<DrainMode> {
    Spanned::new(0..0, DrainMode::GracefulShutdown)
}

/// What `weir node drain` does to this node's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainMode {
    /// Keep every route but announce it de-preferred (the GRACEFUL_SHUTDOWN
    /// community, RFC 8326, and a longer AS path): the routers move flows
    /// to the other nodes, and still have this one while no other exists.
    GracefulShutdown,
    /// Withdraw every route.
    Withdraw,
}

/// `[bgp]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpCfg {
    /// This node's AS number.
    pub local_as: Spanned<u32>,
    /// This node's BGP identifier, an IPv4 address (usually its own).
    pub router_id: Spanned<Ipv4Addr>,
    /// The routers this node announces its VIPs to.
    #[serde(rename = "neighbour")]
    pub neighbours: Spanned<Vec<Neighbour>>,
    /// Standard communities ("ASN:value") attached to every VIP route.
    #[serde(default = "none")]
    pub communities: Spanned<Vec<String>>,
    /// MULTI_EXIT_DISC sent with every VIP route; absent = none.
    pub med: Option<Spanned<u32>>,
    /// LOCAL_PREF sent to internal (same-AS) neighbours; absent = BIRD's 100.
    pub local_pref: Option<Spanned<u32>>,
    /// BGP hold time; keepalives go every third of it.
    #[serde(default = "hold_time")]
    pub hold_time_s: Spanned<u16>,
    /// A VIP is announced only while at least this many of its DIPs are
    /// healthy (health checks passing, weight above 0).
    #[serde(default = "min_healthy")]
    pub min_healthy_dips: Spanned<u32>,
    /// What a drain does: de-prefer the routes or withdraw them.
    #[serde(default = "graceful")]
    pub drain: Spanned<DrainMode>,
    /// BFD's transmit and receive interval, for neighbours with `bfd = true`.
    #[serde(default = "bfd_interval")]
    pub bfd_interval_ms: Spanned<u32>,
    /// Missed BFD packets after which a session is down.
    #[serde(default = "bfd_multiplier")]
    pub bfd_multiplier: Spanned<u8>,
    /// The BIRD 2 daemon weir runs as its speaker.
    #[serde(default = "speaker")]
    pub speaker: Spanned<PathBuf>,
}

/// `[[bgp.neighbour]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbour {
    pub address: Spanned<IpAddr>,
    pub remote_as: Spanned<u32>,
    /// Run BFD with this neighbour, so a dead link or node is noticed in
    /// `bfd_interval_ms` x `bfd_multiplier` instead of the hold time.
    #[serde(default = "no")]
    pub bfd: Spanned<bool>,
}

/// AS_TRANS (RFC 6793): not a real AS number.
const AS_TRANS: u32 = 23456;

/// A standard community `"ASN:value"`, both 0..=65535.
pub fn parse_community(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.split_once(':')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

impl BgpCfg {
    /// The neighbours in this node's own AS (internal BGP).
    pub fn has_internal_neighbour(&self) -> bool {
        self.neighbours
            .get_ref()
            .iter()
            .any(|n| n.remote_as.get_ref() == self.local_as.get_ref())
    }
}

impl Config {
    /// `[bgp]`: refuses what BIRD or the routers would refuse; warns of VIPs
    /// no neighbour can carry.
    pub(crate) fn validate_bgp(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let Some(b) = &self.bgp else {
            return Ok(());
        };
        let asn = |s: &Spanned<u32>, field: &str| match *s.get_ref() {
            0 | AS_TRANS => Err(ck.err(
                Some(s.span()),
                field,
                format!(
                    "{} is not an AS number a session can use (0 and {AS_TRANS}, AS_TRANS, are \
                     reserved); give 1..=4294967295, e.g. a private 64512..=65534",
                    s.get_ref()
                ),
            )),
            _ => Ok(()),
        };
        asn(&b.local_as, "bgp.local_as")?;
        let id = *b.router_id.get_ref();
        if id.is_unspecified() || id.is_broadcast() || id.is_multicast() {
            return Err(ck.err(
                Some(b.router_id.span()),
                "bgp.router_id",
                format!("{id} cannot identify a router; give this node's own IPv4 address"),
            ));
        }
        if b.neighbours.get_ref().is_empty() {
            return Err(ck.err(
                Some(b.neighbours.span()),
                "bgp.neighbour",
                "no neighbours: add a [[bgp.neighbour]] with the address and remote_as of each \
                 router this node announces its VIPs to",
            ));
        }
        let mut seen = HashSet::new();
        for (i, n) in b.neighbours.get_ref().iter().enumerate() {
            let field = |k: &str| format!("bgp.neighbour[{i}].{k}");
            asn(&n.remote_as, &field("remote_as"))?;
            let a = *n.address.get_ref();
            if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                return Err(ck.err(
                    Some(n.address.span()),
                    field("address"),
                    format!("{a} is not a router's address; give the router's interface address"),
                ));
            }
            if !seen.insert(a) {
                return Err(ck.err(
                    Some(n.address.span()),
                    field("address"),
                    format!("neighbour {a} is listed twice; keep one [[bgp.neighbour]] for it"),
                ));
            }
        }
        for c in b.communities.get_ref() {
            if parse_community(c).is_none() {
                return Err(ck.err(
                    Some(b.communities.span()),
                    "bgp.communities",
                    format!(
                        "`{c}` is not a standard community; write \"ASN:value\" with both 0..=65535, \
                         like \"65000:100\""
                    ),
                ));
            }
        }
        if !(3..=65535).contains(b.hold_time_s.get_ref()) {
            return Err(ck.err(
                Some(b.hold_time_s.span()),
                "bgp.hold_time_s",
                "must be 3..=65535 seconds (RFC 4271); with BFD on, 9 is plenty",
            ));
        }
        if *b.min_healthy_dips.get_ref() == 0 {
            return Err(ck.err(
                Some(b.min_healthy_dips.span()),
                "bgp.min_healthy_dips",
                "must be 1 or more: a VIP with no healthy DIP must not attract traffic",
            ));
        }
        if !(10..=10_000).contains(b.bfd_interval_ms.get_ref()) {
            return Err(ck.err(
                Some(b.bfd_interval_ms.span()),
                "bgp.bfd_interval_ms",
                "must be 10..=10000 ms (300 with bfd_multiplier 3 notices a dead peer in under 1 s)",
            ));
        }
        if *b.bfd_multiplier.get_ref() == 0 {
            return Err(ck.err(
                Some(b.bfd_multiplier.span()),
                "bgp.bfd_multiplier",
                "must be 1..=255",
            ));
        }
        if !b.speaker.get_ref().is_absolute() {
            return Err(ck.err(
                Some(b.speaker.span()),
                "bgp.speaker",
                "give the absolute path of BIRD 2's daemon, like \"/usr/sbin/bird\"",
            ));
        }
        if let Some(lp) = &b.local_pref {
            if !b.has_internal_neighbour() {
                warnings.push(ck.err(
                    Some(lp.span()),
                    "bgp.local_pref",
                    "only internal neighbours (remote_as = local_as) receive LOCAL_PREF; no \
                     neighbour here is one, so it has no effect",
                ));
            }
        }
        for fam_v6 in [false, true] {
            let carried = b
                .neighbours
                .get_ref()
                .iter()
                .any(|n| n.address.get_ref().is_ipv6() == fam_v6);
            if let Some(v) = self
                .vips
                .iter()
                .find(|v| v.address.get_ref().is_ipv6() == fam_v6)
                .filter(|_| !carried)
            {
                warnings.push(ck.err(
                    Some(v.address.span()),
                    "bgp.neighbour",
                    format!(
                        "VIP `{}` is IPv{} but no neighbour is: a VIP is announced over \
                         sessions of its own family, so this one is announced to no router",
                        v.name.get_ref(),
                        if fam_v6 { 6 } else { 4 }
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::*;

    fn with_bgp(keys: &str, neighbours: &str) -> String {
        format!("{GOOD}\n[bgp]\nlocal_as = 65001\nrouter_id = \"10.0.0.11\"\n{keys}\n{neighbours}")
    }
    const ONE: &str = "[[bgp.neighbour]]\naddress = \"10.0.0.1\"\nremote_as = 65000\nbfd = true\n";

    #[test]
    fn a_bgp_section_parses_with_defaults() {
        let c = Config::parse("t.toml", &with_bgp("", ONE)).unwrap();
        let b = c.bgp.as_ref().unwrap();
        assert_eq!(*b.local_as.get_ref(), 65001);
        assert_eq!(*b.hold_time_s.get_ref(), 9);
        assert_eq!(*b.min_healthy_dips.get_ref(), 1);
        assert_eq!(*b.drain.get_ref(), DrainMode::GracefulShutdown);
        assert_eq!(*b.bfd_interval_ms.get_ref(), 300);
        assert_eq!(*b.bfd_multiplier.get_ref(), 3);
        assert_eq!(b.speaker.get_ref(), &PathBuf::from("/usr/sbin/bird"));
        assert!(*b.neighbours.get_ref()[0].bfd.get_ref());
        assert!(!b.has_internal_neighbour());
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(parse_community("65000:100"), Some((65000, 100)));
        assert_eq!(parse_community("65536:1"), None);
    }

    #[test]
    fn bgp_mistakes_name_the_line_and_the_field() {
        let base_lines = GOOD.lines().count() + 2;
        let cases: [(String, &str, usize, &str); 9] = [
            (
                with_bgp("", ONE).replace("local_as = 65001", "local_as = 0"),
                "bgp.local_as",
                base_lines + 1,
                "reserved",
            ),
            (
                with_bgp("", ONE).replace("10.0.0.11", "0.0.0.0"),
                "bgp.router_id",
                base_lines + 2,
                "own IPv4",
            ),
            (
                with_bgp("", &ONE.replace("65000", "23456")),
                "bgp.neighbour[0].remote_as",
                base_lines + 6,
                "AS_TRANS",
            ),
            (
                with_bgp("", &format!("{ONE}{ONE}")),
                "bgp.neighbour[1].address",
                base_lines + 9,
                "listed twice",
            ),
            (
                with_bgp("communities = [\"65000:70000\"]", ONE),
                "bgp.communities",
                base_lines + 3,
                "ASN:value",
            ),
            (
                with_bgp("hold_time_s = 1", ONE),
                "bgp.hold_time_s",
                base_lines + 3,
                "3..=65535",
            ),
            (
                with_bgp("min_healthy_dips = 0", ONE),
                "bgp.min_healthy_dips",
                base_lines + 3,
                "1 or more",
            ),
            (
                with_bgp("bfd_interval_ms = 5", ONE),
                "bgp.bfd_interval_ms",
                base_lines + 3,
                "10..=10000",
            ),
            (
                with_bgp("speaker = \"bird\"", ONE),
                "bgp.speaker",
                base_lines + 3,
                "absolute path",
            ),
        ];
        for (src, field, line, words) in cases {
            let e = err_of(&src);
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(words), "{e}");
        }
        let c = Config::parse("t.toml", &with_bgp("drain = \"withdraw\"", ONE)).unwrap();
        assert_eq!(*c.bgp.unwrap().drain.get_ref(), DrainMode::Withdraw);
        let e = err_of(&with_bgp("drain = \"depref\"", ONE));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("bgp.drain", Some(base_lines + 3)),
            "{e}"
        );
        assert!(
            e.message.contains("graceful-shutdown") && e.message.contains("withdraw"),
            "{e}"
        );
        let e = err_of(&with_bgp("", ""));
        assert!(e.message.contains("neighbour"), "{e}");
        let e = err_of(&with_bgp("", &ONE.replace("bfd", "bdf")));
        assert!(e.message.contains("unknown field `bdf`"), "{e}");
        let e = err_of(&with_bgp("", &ONE.replace("\"10.0.0.1\"", "\"10.0.0\"")));
        assert_eq!(e.field, "bgp.neighbour.address", "{e}");
    }

    #[test]
    fn what_no_neighbour_carries_is_a_warning() {
        let src = with_bgp("local_pref = 200", ONE).replace("10.0.0.100", "2001:db8::100");
        let src = src.replace("10.1.0.", "2001:db8:1::");
        let w = Config::parse("t.toml", &src).unwrap().warnings;
        assert!(w.iter().any(|w| w.field == "bgp.local_pref"), "{w:?}");
        assert!(
            w.iter()
                .any(|w| w.field == "bgp.neighbour" && w.message.contains("IPv6")),
            "{w:?}"
        );
    }
}
