//! BIRD 2's configuration for this node: one static protocol per address
//! family holding the VIPs to announce, each routed through the anchor
//! device (so that BIRD withdraws them when the device vanishes with weir),
//! and one BGP session per neighbour exporting only those routes.

use std::fmt::Write;
use std::net::IpAddr;
use std::path::Path;

use weir_config::bgp::parse_community;
use weir_config::BgpCfg;

/// The static protocols' names, as `show protocols` lists them.
pub const STATIC_V4: &str = "weir_vips4";
pub const STATIC_V6: &str = "weir_vips6";

/// The BGP protocol's name for neighbour `i` of `[bgp]`.
pub fn session_name(i: usize) -> String {
    format!("weir_n{i}")
}

/// How long BIRD waits before it tries an unreachable neighbour again (its
/// default, 120 s, would leave a router that comes up late without routes
/// for two minutes).
const CONNECT_RETRY_S: u32 = 3;
/// After a session fails (its BFD went down, the peer closed it), BIRD
/// waits this long before starting it again, doubling up to the second
/// figure while it keeps failing (its defaults, 60 and 300 s, would keep a
/// node out of ECMP for a minute after a router restarts).
const ERROR_WAIT_S: (u32, u32) = (1, 30);

/// GRACEFUL_SHUTDOWN (RFC 8326): routers that honour it give the route the
/// lowest LOCAL_PREF, so they prefer any other node's.
pub const GRACEFUL_SHUTDOWN: (u16, u16) = (65535, 0);
/// How many times a de-preferred route's AS path carries this node's AS
/// again: routers that ignore the community still prefer a shorter path, and
/// a path of another length is no equal-cost path to share flows with.
pub const DRAIN_PREPEND: usize = 3;

/// What BIRD is told to announce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announce {
    pub addresses: Vec<IpAddr>,
    /// Announce them de-preferred (a drain with `drain = "graceful-shutdown"`).
    pub depreferred: bool,
}

/// The whole configuration, announcing `announce` through `anchor`.
pub fn render(cfg: &BgpCfg, anchor: &str, announce: &Announce, log: &Path) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# Written by weir serve from [bgp]; rewritten on every change.\n\
         log \"{}\" {{ warning, error, auth, remote }};\n\
         timeformat protocol \"%F_%T\";\n\
         router id {};\n\
         protocol device {{ }}",
        log.display(),
        cfg.router_id.get_ref()
    );
    let neighbours = cfg.neighbours.get_ref();
    if neighbours.iter().any(|n| *n.bfd.get_ref()) {
        let ms = cfg.bfd_interval_ms.get_ref();
        let _ = writeln!(
            w,
            "protocol bfd {{\n  interface \"*\" {{ min rx interval {ms} ms; min tx interval {ms} ms; \
             multiplier {}; }};\n}}",
            cfg.bfd_multiplier.get_ref()
        );
    }
    for (name, v6) in [(STATIC_V4, false), (STATIC_V6, true)] {
        let _ = writeln!(w, "protocol static {name} {{\n  {};", family(v6));
        for a in announce.addresses.iter().filter(|a| a.is_ipv6() == v6) {
            let len = if v6 { 128 } else { 32 };
            let _ = writeln!(w, "  route {a}/{len} via \"{anchor}\";");
        }
        let _ = writeln!(w, "}}");
    }
    for v6 in [false, true] {
        let _ = writeln!(w, "filter weir_export{} {{", if v6 { 6 } else { 4 });
        let src = if v6 { STATIC_V6 } else { STATIC_V4 };
        let _ = writeln!(w, "  if proto != \"{src}\" then reject;");
        for c in cfg.communities.get_ref() {
            if let Some((a, b)) = parse_community(c) {
                let _ = writeln!(w, "  bgp_community.add(({a}, {b}));");
            }
        }
        if let Some(med) = &cfg.med {
            let _ = writeln!(w, "  bgp_med = {};", med.get_ref());
        }
        if announce.depreferred {
            let (a, b) = GRACEFUL_SHUTDOWN;
            let _ = writeln!(w, "  bgp_community.add(({a}, {b}));");
            for _ in 0..DRAIN_PREPEND {
                let _ = writeln!(w, "  bgp_path.prepend({});", cfg.local_as.get_ref());
            }
            // Internal neighbours take LOCAL_PREF as sent (RFC 8326, 4.1).
            let _ = writeln!(w, "  bgp_local_pref = 0;");
        } else if let Some(lp) = &cfg.local_pref {
            let _ = writeln!(w, "  bgp_local_pref = {};", lp.get_ref());
        }
        let _ = writeln!(w, "  accept;\n}}");
    }
    let hold = *cfg.hold_time_s.get_ref();
    for (i, n) in neighbours.iter().enumerate() {
        let v6 = n.address.get_ref().is_ipv6();
        let _ = writeln!(
            w,
            "protocol bgp {} {{\n  local as {};\n  neighbor {} as {};\n  hold time {hold};\n  \
             keepalive time {};\n  connect retry time {CONNECT_RETRY_S};\n  error wait time {}, {};\n  bfd {};\n  \
             {} {{ import none; export filter weir_export{}; next hop self; }};\n}}",
            session_name(i),
            cfg.local_as.get_ref(),
            n.address.get_ref(),
            n.remote_as.get_ref(),
            (hold / 3).max(1),
            ERROR_WAIT_S.0,
            ERROR_WAIT_S.1,
            if *n.bfd.get_ref() { "on" } else { "off" },
            family(v6),
            if v6 { 6 } else { 4 },
        );
    }
    out
}

fn family(v6: bool) -> &'static str {
    if v6 {
        "ipv6"
    } else {
        "ipv4"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BgpCfg {
        toml::from_str(
            "local_as = 65001\nrouter_id = \"10.0.0.11\"\ncommunities = [\"65001:7\"]\nmed = 5\n\
             [[neighbour]]\naddress = \"10.0.0.1\"\nremote_as = 65000\nbfd = true\n\
             [[neighbour]]\naddress = \"2001:db8::1\"\nremote_as = 65000\n",
        )
        .unwrap()
    }

    #[test]
    fn the_configuration_announces_exactly_the_given_vips() {
        let vips = Announce {
            addresses: vec![
                "10.0.0.100".parse().unwrap(),
                "2001:db8::100".parse().unwrap(),
            ],
            depreferred: false,
        };
        let text = render(
            &cfg(),
            "weir-bgp",
            &vips,
            Path::new("/run/weir/bgp/bird.log"),
        );
        for want in [
            "router id 10.0.0.11;",
            "route 10.0.0.100/32 via \"weir-bgp\";",
            "route 2001:db8::100/128 via \"weir-bgp\";",
            "min rx interval 300 ms; min tx interval 300 ms; multiplier 3;",
            "protocol bgp weir_n0 {\n  local as 65001;\n  neighbor 10.0.0.1 as 65000;\n  hold time 9;\n  keepalive time 3;",
            "bfd on;",
            "ipv4 { import none; export filter weir_export4; next hop self; };",
            "neighbor 2001:db8::1 as 65000;",
            "ipv6 { import none; export filter weir_export6; next hop self; };",
            "bgp_community.add((65001, 7));",
            "bgp_med = 5;",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(!text.contains("bgp_local_pref"), "{text}");
        assert!(!text.contains("(65535, 0)"), "{text}");
        assert!(!text.contains("prepend"), "{text}");
        let none = render(&cfg(), "weir-bgp", &Announce::default(), Path::new("/l"));
        assert!(!none.contains("route "), "{none}");
    }

    #[test]
    fn a_graceful_drain_keeps_the_routes_and_marks_them_worse() {
        let drained = Announce {
            addresses: vec!["10.0.0.100".parse().unwrap()],
            depreferred: true,
        };
        let text = render(&cfg(), "weir-bgp", &drained, Path::new("/l"));
        assert!(
            text.contains("route 10.0.0.100/32 via \"weir-bgp\";"),
            "{text}"
        );
        for v6 in ["4", "6"] {
            let filter = text
                .split(&format!("filter weir_export{v6} {{"))
                .nth(1)
                .and_then(|f| f.split("accept;").next())
                .unwrap_or_else(|| panic!("no export filter {v6} in\n{text}"));
            assert!(
                filter.contains("bgp_community.add((65535, 0));"),
                "{filter}"
            );
            assert!(
                filter.contains("bgp_community.add((65001, 7));"),
                "{filter}"
            );
            assert_eq!(
                filter.matches("bgp_path.prepend(65001);").count(),
                DRAIN_PREPEND,
                "{filter}"
            );
            assert!(filter.contains("bgp_local_pref = 0;"), "{filter}");
        }
    }
}
