//! `[[vip]]` and `[[vip.dip]]`: the services, their backends and their
//! health checks, and the checks that need only them.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use serde::Deserialize;
use toml::Spanned;
use weir_core::flow::Proto;

use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;

/// Forwarding mode of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Nat,
    Dsr,
    /// Encapsulated in IP to the DIP (IPIP, IPv6-in-IPv6); replies direct.
    Ipip,
    /// Encapsulated in IP and UDP (GUE variant 1); replies direct.
    Gue,
}

impl Mode {
    /// The modes that put the packet behind an outer header to the DIP.
    pub fn encapsulates(self) -> bool {
        matches!(self, Mode::Ipip | Mode::Gue)
    }
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

/// `[[vip.dip]]`: one backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dip {
    pub address: Spanned<IpAddr>,
    /// NAT destination port; absent keeps the VIP's port.
    pub port: Option<Spanned<u16>>,
    /// Static AWFD weight: the priority class k. 0 drains.
    #[serde(default = "one")]
    pub weight: Spanned<u32>,
    /// Next-hop MAC to use when the FIB has no neighbour (or is off).
    pub mac: Option<Spanned<String>>,
    /// Where this DIP's `weir agent` answers (`[controller] telemetry = "agent"`).
    pub agent: Option<Spanned<std::net::SocketAddr>>,
    /// QUIC VIP: the server ID (hex) the DIP's connection IDs carry.
    pub server_id: Option<Spanned<String>>,
}

/// `[[vip]]`: one virtual service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vip {
    pub name: Spanned<String>,
    pub address: Spanned<IpAddr>,
    pub port: Spanned<u16>,
    pub protocol: Proto,
    pub mode: Mode,
    #[serde(default, rename = "dip")]
    pub dips: Vec<Dip>,
    /// Active health checks of this VIP's DIPs.
    pub health: Option<Health>,
    /// Routing of QUIC by connection ID (a UDP VIP).
    pub quic: Option<crate::quic::Quic>,
}

/// `[vip.health] kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    /// A TCP connect that completes within the timeout.
    Tcp,
    /// An HTTP/1.1 GET whose status line carries `expect_status`.
    Http,
}

fn health_interval() -> Spanned<u64> {
    Spanned::new(0..0, 500)
}
fn health_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 300)
}
fn status_200() -> Spanned<u16> {
    Spanned::new(0..0, 200)
}
fn two() -> Spanned<u32> {
    Spanned::new(0..0, 2)
}
fn three() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}

/// `[vip.health]`: active checks of every DIP of the VIP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub kind: HealthKind,
    /// Request path (http only; default "/").
    pub path: Option<Spanned<String>>,
    #[serde(default = "status_200")]
    pub expect_status: Spanned<u16>,
    #[serde(default = "health_interval")]
    pub interval_ms: Spanned<u64>,
    #[serde(default = "health_timeout")]
    pub timeout_ms: Spanned<u64>,
    /// Consecutive passes that make a failed DIP healthy again.
    #[serde(default = "two")]
    pub rise: Spanned<u32>,
    /// Consecutive failures that make a healthy DIP fail.
    #[serde(default = "three")]
    pub fall: Spanned<u32>,
    /// Port to check; default: the DIP's port (nat) or the VIP's port.
    pub port: Option<Spanned<u16>>,
}

impl Health {
    pub fn path(&self) -> &str {
        self.path.as_ref().map_or("/", |p| p.get_ref().as_str())
    }
}

impl Dip {
    /// The port the DIP serves on: its own (nat) or the VIP's.
    pub fn service_port(&self, vip: &Vip) -> u16 {
        self.port
            .as_ref()
            .map_or(*vip.port.get_ref(), |p| *p.get_ref())
    }
}

/// The name of `m` as the file writes it.
pub(crate) fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Nat => "nat",
        Mode::Dsr => "dsr",
        Mode::Ipip => "ipip",
        Mode::Gue => "gue",
    }
}

/// Why `a` can never be a VIP or a DIP (packets are never sent to it as a
/// unicast destination), or None.
pub(crate) fn not_unicast(a: &IpAddr) -> Option<String> {
    let why = match a {
        IpAddr::V4(v) if v.is_unspecified() => "the unspecified address",
        IpAddr::V4(v) if v.octets()[0] == 0 => {
            "in 0.0.0.0/8 (\"this network\", never a destination)"
        }
        IpAddr::V4(v) if v.is_broadcast() => "the broadcast address",
        IpAddr::V4(v) if v.is_multicast() => "a multicast address",
        IpAddr::V4(v) if v.is_loopback() => "a loopback address (it never arrives on an interface)",
        IpAddr::V6(v) if v.is_unspecified() => "the unspecified address",
        IpAddr::V6(v) if v.is_multicast() => "a multicast address",
        IpAddr::V6(v) if v.is_loopback() => {
            "the loopback address (it never arrives on an interface)"
        }
        IpAddr::V6(v) => {
            let v4 = v.to_ipv4_mapped()?;
            return Some(format!(
                "{a} is an IPv4-mapped IPv6 address, which never appears on the wire; write {v4}"
            ));
        }
        IpAddr::V4(_) => return None,
    };
    Some(format!("{a} is {why}"))
}

impl Config {
    /// Every VIP and its DIPs; returns how many DIPs there are in all.
    pub(crate) fn validate_vips(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<usize, ConfigError> {
        let dp = &self.dataplane;
        if self.vips.len() > dp.max_vips as usize {
            return Err(ck.err(
                None,
                "vip",
                format!(
                    "{} VIPs but dataplane.max_vips is {}; raise max_vips",
                    self.vips.len(),
                    dp.max_vips
                ),
            ));
        }
        let mut names = HashSet::new();
        let mut keys = HashSet::new();
        let mut total_dips = 0usize;
        let vip_addrs: Vec<(IpAddr, &str)> = self
            .vips
            .iter()
            .map(|v| (*v.address.get_ref(), v.name.get_ref().as_str()))
            .collect();
        for (i, vip) in self.vips.iter().enumerate() {
            let at = |f: &str| format!("vip[{i}].{f}");
            if vip.name.get_ref().is_empty() || !names.insert(vip.name.get_ref().clone()) {
                return Err(ck.err(
                    Some(vip.name.span()),
                    at("name"),
                    "VIP names must be non-empty and unique",
                ));
            }
            if !keys.insert((*vip.address.get_ref(), *vip.port.get_ref(), vip.protocol)) {
                return Err(ck.err(
                    Some(vip.address.span()),
                    at("address"),
                    "another VIP already has this address, port and protocol",
                ));
            }
            if *vip.port.get_ref() == 0 {
                return Err(ck.err(
                    Some(vip.port.span()),
                    at("port"),
                    "port 0 is not a service port",
                ));
            }
            if let Some(why) = not_unicast(vip.address.get_ref()) {
                return Err(ck.err(
                    Some(vip.address.span()),
                    at("address"),
                    format!("{why}; a VIP must be a unicast address that clients can reach"),
                ));
            }
            let mut seen = HashSet::new();
            let mut distinct = HashSet::new();
            for (j, dip) in vip.dips.iter().enumerate() {
                let at = |f: &str| format!("vip[{i}].dip[{j}].{f}");
                let (a, va) = (dip.address.get_ref(), vip.address.get_ref());
                if a.is_ipv4() != va.is_ipv4() && !vip.mode.encapsulates() {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "DIP and VIP must be of the same address family (IPv4 or IPv6); \
                         only mode = \"ipip\" or \"gue\" carries one family inside the other",
                    ));
                }
                if let Some(why) = not_unicast(a) {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        format!("{why}; a DIP must be the unicast address of a backend"),
                    ));
                }
                if a == va {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "the DIP is the VIP's own address, so its traffic would come back to weir; give the backend's address",
                    ));
                }
                if let Some((_, other)) = vip_addrs.iter().find(|(v, _)| v == a) {
                    warnings.push(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        format!("{a} is also the address of VIP `{other}`: this DIP's traffic goes to that VIP, not to a backend"),
                    ));
                }
                if let (Some(p), false) = (&dip.port, vip.mode == Mode::Nat) {
                    return Err(ck.err(
                        Some(p.span()),
                        at("port"),
                        format!(
                            "{} mode does not rewrite ports: remove `port` or use mode = \"nat\"",
                            mode_name(vip.mode)
                        ),
                    ));
                }
                if let Some(p) = &dip.port {
                    if *p.get_ref() == 0 {
                        return Err(ck.err(
                            Some(p.span()),
                            at("port"),
                            "port 0 is not a service port",
                        ));
                    }
                }
                let port = dip
                    .port
                    .as_ref()
                    .map_or(*vip.port.get_ref(), |p| *p.get_ref());
                if !seen.insert((*a, port)) {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "duplicate DIP in this VIP",
                    ));
                }
                let w = *dip.weight.get_ref();
                if w > u32::from(u16::MAX) {
                    return Err(ck.err(
                        Some(dip.weight.span()),
                        at("weight"),
                        "weight must be 0..=65535 (0 drains)",
                    ));
                }
                if w > 0 {
                    distinct.insert(w);
                }
                if let Some(mac) = &dip.mac {
                    if let Err(e) = weir_core::mac::parse_mac(mac.get_ref()) {
                        return Err(ck.err(Some(mac.span()), at("mac"), e));
                    }
                }
            }
            // Legal, because an operator may stage a VIP before its backends
            // or drain all of them, but new connections are then dropped.
            if vip.dips.is_empty() {
                warnings.push(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    "no DIPs: new connections to this VIP are dropped (drop_no_backend) until a [[vip.dip]] is added",
                ));
            } else if distinct.is_empty() {
                warnings.push(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    "every DIP has weight 0 (draining): new connections to this VIP are dropped (drop_no_backend)",
                ));
            }
            if distinct.len() > weir_abi::WEIR_MAX_CLASSES as usize {
                return Err(ck.err(
                    Some(vip.name.span()),
                    at("dip"),
                    format!(
                        "{} distinct weights, but a VIP holds at most {} priority classes; use fewer distinct weights",
                        distinct.len(),
                        weir_abi::WEIR_MAX_CLASSES
                    ),
                ));
            }
            total_dips += vip.dips.len();
        }
        Ok(total_dips)
    }

    /// Every service endpoint of a nat DIP (address, port, protocol number),
    /// with the nat VIPs that list it, as (VIP index, DIP index) in file
    /// order.
    pub fn nat_endpoint_users(&self) -> BTreeMap<(IpAddr, u16, u8), Vec<(usize, usize)>> {
        let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for (i, v) in self
            .vips
            .iter()
            .enumerate()
            .filter(|(_, v)| v.mode == Mode::Nat)
        {
            for (j, d) in v.dips.iter().enumerate() {
                let port = *d.port.as_ref().unwrap_or(&v.port).get_ref();
                out.entry((*d.address.get_ref(), port, v.protocol.number()))
                    .or_default()
                    .push((i, j));
            }
        }
        out
    }

    /// A nat DIP's replies find their VIP through their endpoint, which
    /// can serve at most WEIR_ENDPOINT_VIPS nat VIPs (weir.h).
    pub(crate) fn validate_nat_endpoints(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        let most = weir_abi::WEIR_ENDPOINT_VIPS as usize;
        for ((addr, port, _), users) in self.nat_endpoint_users() {
            if let Some(&(i, j)) = users.get(most) {
                let dip = &self.vips[i].dips[j];
                return Err(ck.err(
                    Some(dip.address.span()),
                    format!("vip[{i}].dip[{j}].address"),
                    format!(
                        "{} nat VIPs send to {addr} port {port}, but one backend endpoint can \
                         serve at most {most} nat VIPs (its replies are matched to their VIP by \
                         it); give this VIP's backend another port, or use mode = \"dsr\"",
                        users.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Each `[vip.health]`.
    pub(crate) fn validate_health(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        for (i, vip) in self.vips.iter().enumerate() {
            let Some(h) = &vip.health else { continue };
            let at = |f: &str| format!("vip[{i}].health.{f}");
            if let (HealthKind::Tcp, Some(p)) = (h.kind, &h.path) {
                return Err(ck.err(
                    Some(p.span()),
                    at("path"),
                    "path is for kind = \"http\" only",
                ));
            }
            if let Some(p) = &h.path {
                let p = p.get_ref();
                if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ck.err(
                        h.path.as_ref().map(|p| p.span()),
                        at("path"),
                        "path must start with / and contain no spaces",
                    ));
                }
            }
            if !(100..=599).contains(h.expect_status.get_ref()) {
                return Err(ck.err(
                    Some(h.expect_status.span()),
                    at("expect_status"),
                    "an HTTP status is 100..=599",
                ));
            }
            for (f, v) in [
                ("interval_ms", &h.interval_ms),
                ("timeout_ms", &h.timeout_ms),
            ] {
                if !(10..=3_600_000).contains(v.get_ref()) {
                    return Err(ck.err(Some(v.span()), at(f), "must be 10..=3600000 ms"));
                }
            }
            if h.timeout_ms.get_ref() > h.interval_ms.get_ref() {
                return Err(ck.err(
                    Some(h.timeout_ms.span()),
                    at("timeout_ms"),
                    "the timeout must not exceed interval_ms",
                ));
            }
            for (f, v) in [("rise", &h.rise), ("fall", &h.fall)] {
                if !(1..=100).contains(v.get_ref()) {
                    return Err(ck.err(Some(v.span()), at(f), "must be 1..=100"));
                }
            }
            if let Some(p) = &h.port {
                if *p.get_ref() == 0 {
                    return Err(ck.err(Some(p.span()), at("port"), "port 0 cannot be checked"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::test_files::*;
    use crate::Config;

    /// A nat VIP on port `port` of 10.0.0.`host` with the one DIP 10.1.0.1:8080.
    fn nat_vip_on_the_shared_backend(host: u8, port: u16) -> String {
        format!(
            "\n[[vip]]\nname = \"v{host}-{port}\"\naddress = \"10.0.0.{host}\"\nport = {port}\n\
             protocol = \"tcp\"\nmode = \"nat\"\n  [[vip.dip]]\n  address = \"10.1.0.1\"\n  \
             port = 8080\n"
        )
    }

    #[test]
    fn one_backend_endpoint_serves_at_most_four_nat_vips() {
        // GOOD's first DIP is 10.1.0.1:8080 already.
        let three_more: String = (1..=3)
            .map(|i| nat_vip_on_the_shared_backend(i, 80))
            .collect();
        let four = format!("{GOOD}{three_more}");
        let c = Config::parse("t.toml", &four).unwrap();
        let users = c.nat_endpoint_users();
        let key = ("10.1.0.1".parse().unwrap(), 8080, 6);
        assert_eq!(users[&key], vec![(0, 0), (1, 0), (2, 0), (3, 0)]);

        let e = err_of(&format!("{four}{}", nat_vip_on_the_shared_backend(4, 80)));
        assert_eq!(e.field, "vip[4].dip[0].address", "{e}");
        assert!(
            e.to_string()
                .contains("5 nat VIPs send to 10.1.0.1 port 8080"),
            "{e}"
        );
        // Another port of the same backend is another endpoint.
        let other_port = four + &nat_vip_on_the_shared_backend(4, 81).replace("8080", "8081");
        Config::parse("t.toml", &other_port).unwrap();
    }

    #[test]
    fn addresses_that_can_never_work_are_refused() {
        let v4 = |vip: &str| GOOD.replace("\"10.0.0.100\"", &format!("\"{vip}\""));
        let v6 = |vip: &str| good6().replace("\"2001:db8::100\"", &format!("\"{vip}\""));
        let dip = |d: &str| GOOD.replace("\"10.1.0.2\"", &format!("\"{d}\""));
        let cases = [
            (v4("0.0.0.0"), "vip[0].address", 7, "unspecified"),
            (v4("0.1.2.3"), "vip[0].address", 7, "0.0.0.0/8"),
            (v4("255.255.255.255"), "vip[0].address", 7, "broadcast"),
            (v4("239.1.2.3"), "vip[0].address", 7, "multicast"),
            (v4("127.0.0.1"), "vip[0].address", 7, "loopback"),
            (v6("::"), "vip[0].address", 7, "unspecified"),
            (v6("ff02::1"), "vip[0].address", 7, "multicast"),
            (v6("::1"), "vip[0].address", 7, "loopback"),
            (
                v6("::ffff:10.0.0.100"),
                "vip[0].address",
                7,
                "write 10.0.0.100",
            ),
            (dip("10.0.0.100"), "vip[0].dip[1].address", 17, "VIP's own"),
            (
                dip("255.255.255.255"),
                "vip[0].dip[1].address",
                17,
                "broadcast",
            ),
            (dip("224.0.0.1"), "vip[0].dip[1].address", 17, "multicast"),
            (dip("0.0.0.0"), "vip[0].dip[1].address", 17, "unspecified"),
            (
                good6().replace("\"2001:db8:1::2\"", "\"2001:db8::100\""),
                "vip[0].dip[1].address",
                17,
                "VIP's own",
            ),
        ];
        for (src, field, line, what) in cases {
            let e = err_of(&src);
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
        // The VIP's address with another port is still the VIP's address.
        let e = err_of(&dip("10.0.0.100\"\n  port = 9090\n  #\""));
        assert!(e.message.contains("VIP's own"), "{e}");
        Config::parse("t.toml", &good6()).unwrap();
    }
}
