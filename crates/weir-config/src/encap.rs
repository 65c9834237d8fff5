//! The ipip and gue modes and the `[dataplane]` keys of their outer
//! headers.

use std::net::IpAddr;

use crate::dataplane::given;
use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;
use crate::service::{mode_name, not_unicast};
use crate::tier::Tier;

impl Config {
    /// The ipip and gue modes and the `[dataplane]` keys of their outer
    /// headers.
    pub(crate) fn validate_encap(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        let mtu = *dp.encap_mtu.get_ref();
        if !(576..=65535).contains(&mtu) {
            return Err(ck.err(
                Some(dp.encap_mtu.span()),
                "dataplane.encap_mtu",
                format!(
                    "{mtu} is not an IP MTU: give the smallest MTU on the way to the DIPs, \
                     576 to 65535 (1500 on Ethernet)"
                ),
            ));
        }
        if *dp.gue_port.get_ref() == 0 {
            return Err(ck.err(
                Some(dp.gue_port.span()),
                "dataplane.gue_port",
                "port 0 is not a UDP port: give the port the DIPs decapsulate GUE on (6080 by \
                 default)",
            ));
        }
        let sources = [
            (
                "encap_source_v4",
                dp.encap_source_v4
                    .as_ref()
                    .map(|a| (IpAddr::V4(*a.get_ref()), a.span())),
            ),
            (
                "encap_source_v6",
                dp.encap_source_v6
                    .as_ref()
                    .map(|a| (IpAddr::V6(*a.get_ref()), a.span())),
            ),
        ];
        for (key, (addr, span)) in sources.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))) {
            if let Some(why) = not_unicast(&addr) {
                return Err(ck.err(
                    Some(span),
                    format!("dataplane.{key}"),
                    format!("{why}; the outer source must be a unicast address of this host"),
                ));
            }
        }
        let encap = self.vips.iter().position(|v| v.mode.encapsulates());
        if let (Some(i), false) = (encap, dp.tier == Tier::Xdp) {
            let v = &self.vips[i];
            return Err(ck.err(
                Some(v.name.span()),
                format!("vip[{i}].mode"),
                format!(
                    "mode = \"{}\" is built by XDP only; the software and hybrid tiers do not \
                     encapsulate: use tier = \"xdp\", or mode = \"dsr\" or \"nat\"",
                    mode_name(v.mode)
                ),
            ));
        }
        if encap.is_none() {
            let given_keys = [
                (
                    "encap_mtu",
                    given(&dp.encap_mtu).then(|| dp.encap_mtu.span()),
                ),
                (
                    "encap_source_v4",
                    dp.encap_source_v4.as_ref().map(|a| a.span()),
                ),
                (
                    "encap_source_v6",
                    dp.encap_source_v6.as_ref().map(|a| a.span()),
                ),
                ("gue_port", given(&dp.gue_port).then(|| dp.gue_port.span())),
            ];
            for (key, span) in given_keys.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "no VIP has mode = \"ipip\" or \"gue\"; this is ignored",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Mode;
    use crate::test_files::*;

    fn encap_mode(mode: &str, keys: &str) -> String {
        dataplane_with(keys)
            .replace("mode = \"nat\"", &format!("mode = \"{mode}\""))
            .replace("  port = 8080\n", "")
    }

    #[test]
    fn encap_modes_and_their_keys_parse() {
        let c = Config::parse("t.toml", &encap_mode("ipip", "")).unwrap();
        assert_eq!(c.vips[0].mode, Mode::Ipip);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let dp = &c.dataplane;
        assert_eq!(
            (*dp.encap_mtu.get_ref(), *dp.gue_port.get_ref()),
            (1500, 6080)
        );
        assert!(dp.encap_source_v4.is_none() && dp.encap_source_v6.is_none());
        let keys = "encap_mtu = 9000\nencap_source_v4 = \"10.9.9.9\"\n\
                    encap_source_v6 = \"2001:db8::9\"\ngue_port = 7000";
        let c = Config::parse("t.toml", &encap_mode("gue", keys)).unwrap();
        assert_eq!(c.vips[0].mode, Mode::Gue);
        let dp = &c.dataplane;
        assert_eq!(
            (*dp.encap_mtu.get_ref(), *dp.gue_port.get_ref()),
            (9000, 7000)
        );
        assert_eq!(
            dp.encap_source_v4.as_ref().map(|a| a.get_ref().to_string()),
            Some("10.9.9.9".into())
        );
        // The keys without an encap VIP are legal but do nothing.
        let c = Config::parse("t.toml", &dataplane_with("gue_port = 7000")).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert_eq!(
            (c.warnings[0].field.as_str(), c.warnings[0].line),
            ("dataplane.gue_port", Some(4))
        );
    }

    #[test]
    fn encap_mistakes_name_the_field_and_the_line() {
        let cases = [
            (
                "ipip",
                "encap_mtu = 100",
                "dataplane.encap_mtu",
                4,
                "576 to 65535",
            ),
            ("gue", "gue_port = 0", "dataplane.gue_port", 4, "port 0"),
            (
                "ipip",
                "encap_source_v4 = \"224.0.0.1\"",
                "dataplane.encap_source_v4",
                4,
                "multicast",
            ),
            (
                "gue",
                "encap_source_v6 = \"::\"",
                "dataplane.encap_source_v6",
                4,
                "unspecified",
            ),
            (
                "ipip",
                "encap_source_v4 = \"2001:db8::1\"",
                "dataplane.encap_source_v4",
                4,
                "IPv4",
            ),
            (
                "gue",
                "tier = \"software\"",
                "vip[0].mode",
                7,
                "built by XDP only",
            ),
        ];
        for (mode, keys, field, line, what) in cases {
            let e = err_of(&encap_mode(mode, keys));
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
        // Only encapsulation carries one family inside the other.
        let mixed = encap_mode("ipip", "").replace("\"10.1.0.2\"", "\"2001:db8::2\"");
        Config::parse("t.toml", &mixed).unwrap();
        let e = err_of(&GOOD.replace("\"10.1.0.2\"", "\"2001:db8::2\""));
        assert!(e.message.contains("only mode = \"ipip\" or \"gue\""), "{e}");
        // Encapsulation keeps the port, so a DIP port is a mistake.
        let e = err_of(&GOOD.replace("mode = \"nat\"", "mode = \"gue\""));
        assert_eq!(e.field, "vip[0].dip[0].port", "{e}");
        assert!(e.message.contains("gue mode does not rewrite ports"), "{e}");
    }
}
