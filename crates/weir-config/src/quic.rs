//! `[vip.quic]` and `[[vip.dip]] server_id`: a UDP VIP whose QUIC
//! connections are routed by the server ID in their connection IDs
//! (QUIC-LB plaintext, `weir_core::quic_lb`), and the checks of both.

use std::collections::HashMap;

use serde::Deserialize;
use toml::Spanned;
use weir_core::flow::Proto;
use weir_core::quic_lb::{parse_server_id, CidLayout, CONFIG_ID_MAX, SERVER_ID_MAX};

use crate::error::{Checker, ConfigError};
use crate::load::Config;
use crate::service::{Dip, Vip};
use crate::tier::Tier;

fn zero() -> Spanned<u8> {
    Spanned::new(0..0, 0)
}

/// `[vip.quic]`: the layout of the connection IDs the VIP's DIPs issue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quic {
    /// Octets of server ID after the CID's first octet, 1..=15.
    pub server_id_len: Spanned<u8>,
    /// Config rotation codepoint in the first octet's top three bits, 0..=6.
    #[serde(default = "zero")]
    pub config_id: Spanned<u8>,
}

impl Quic {
    pub fn layout(&self) -> CidLayout {
        CidLayout {
            config_id: *self.config_id.get_ref(),
            server_id_len: *self.server_id_len.get_ref(),
        }
    }
}

impl Dip {
    /// The DIP's server ID as octets, when its VIP is a QUIC one (the
    /// configuration was validated, so it parses).
    pub fn server_id_octets(&self, vip: &Vip) -> Option<Vec<u8>> {
        let len = usize::from(*vip.quic.as_ref()?.server_id_len.get_ref());
        parse_server_id(self.server_id.as_ref()?.get_ref(), len).ok()
    }
}

impl Config {
    /// Every QUIC VIP and its DIPs' server IDs.
    pub(crate) fn validate_quic(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        for (i, vip) in self.vips.iter().enumerate() {
            let at = |f: &str| format!("vip[{i}].{f}");
            let Some(q) = &vip.quic else {
                if let Some((j, d)) = vip
                    .dips
                    .iter()
                    .enumerate()
                    .find(|(_, d)| d.server_id.is_some())
                {
                    return Err(ck.err(
                        d.server_id.as_ref().map(|s| s.span()),
                        format!("vip[{i}].dip[{j}].server_id"),
                        "server_id is for the DIPs of a QUIC VIP: add [vip.quic] with its \
                         server_id_len, or remove server_id",
                    ));
                }
                continue;
            };
            if vip.protocol != Proto::Udp {
                return Err(ck.err(
                    Some(q.server_id_len.span()),
                    at("quic"),
                    "QUIC runs over UDP: a VIP with [vip.quic] needs protocol = \"udp\"",
                ));
            }
            if self.dataplane.tier != Tier::Xdp {
                return Err(ck.err(
                    Some(q.server_id_len.span()),
                    at("quic"),
                    "QUIC VIPs are routed by connection ID in the xdp tier only: set \
                     dataplane.tier = \"xdp\", or remove [vip.quic] to balance the VIP as \
                     plain UDP by 5-tuple",
                ));
            }
            let len = *q.server_id_len.get_ref();
            if !(1..=SERVER_ID_MAX as u8).contains(&len) {
                return Err(ck.err(
                    Some(q.server_id_len.span()),
                    at("quic.server_id_len"),
                    format!("QUIC-LB server IDs are 1 to {SERVER_ID_MAX} octets, not {len}"),
                ));
            }
            if *q.config_id.get_ref() > CONFIG_ID_MAX {
                return Err(ck.err(
                    Some(q.config_id.span()),
                    at("quic.config_id"),
                    format!(
                        "the config rotation codepoint is 0 to {CONFIG_ID_MAX} (7 marks \
                         connection IDs no load balancer can route)"
                    ),
                ));
            }
            let mut owners: HashMap<Vec<u8>, usize> = HashMap::new();
            for (j, d) in vip.dips.iter().enumerate() {
                let field = format!("vip[{i}].dip[{j}].server_id");
                let Some(text) = &d.server_id else {
                    return Err(ck.err(
                        Some(d.address.span()),
                        field,
                        format!(
                            "a DIP of a QUIC VIP needs its server_id ({len} octets in hex, \
                             unique in the VIP): the server ID its connection IDs carry"
                        ),
                    ));
                };
                let id = parse_server_id(text.get_ref(), usize::from(len))
                    .map_err(|e| ck.err(Some(text.span()), field.clone(), e))?;
                if let Some(other) = owners.insert(id, j) {
                    return Err(ck.err(
                        Some(text.span()),
                        field,
                        format!(
                            "server ID {} is also vip[{i}].dip[{other}]'s: each DIP of a VIP \
                             needs its own",
                            text.get_ref()
                        ),
                    ));
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

    const QUIC: &str = r#"
[dataplane]
interfaces = ["veth0"]

[[vip]]
name = "h3"
address = "10.0.0.100"
port = 443
protocol = "udp"
mode = "dsr"
quic = { server_id_len = 2, config_id = 1 }

  [[vip.dip]]
  address = "10.1.0.1"
  server_id = "0a01"

  [[vip.dip]]
  address = "10.1.0.2"
  server_id = "0a02"
"#;

    #[test]
    fn a_quic_vip_gives_each_dip_its_server_id() {
        let c = Config::parse("t.toml", QUIC).unwrap();
        let v = &c.vips[0];
        assert_eq!(v.quic.as_ref().unwrap().layout().config_id, 1);
        assert_eq!(v.dips[1].server_id_octets(v), Some(vec![0x0a, 0x02]));
    }

    #[test]
    fn quic_mistakes_are_refused_with_their_line() {
        let cases = [
            (
                QUIC.replace("\"0a02\"", "\"0a01\""),
                "vip[0].dip[1].server_id",
                19,
                "also vip[0].dip[0]",
            ),
            (
                QUIC.replace("\"0a02\"", "\"0a0\""),
                "vip[0].dip[1].server_id",
                19,
                "needs 4",
            ),
            (
                QUIC.replace("\"0a02\"", "\"0z02\""),
                "vip[0].dip[1].server_id",
                19,
                "not hex",
            ),
            (
                QUIC.replace("  server_id = \"0a02\"\n", ""),
                "vip[0].dip[1].server_id",
                18,
                "needs its server_id",
            ),
            (
                QUIC.replace("server_id_len = 2", "server_id_len = 16"),
                "vip[0].quic.server_id_len",
                11,
                "1 to 15",
            ),
            (
                QUIC.replace("server_id_len = 2", "server_id_len = 0"),
                "vip[0].quic.server_id_len",
                11,
                "1 to 15",
            ),
            (
                QUIC.replace("config_id = 1", "config_id = 7"),
                "vip[0].quic.config_id",
                11,
                "0 to 6",
            ),
            (
                QUIC.replace("\"udp\"", "\"tcp\""),
                "vip[0].quic",
                11,
                "protocol = \"udp\"",
            ),
            (
                QUIC.replace(
                    "interfaces = [\"veth0\"]",
                    "interfaces = [\"veth0\"]\ntier = \"software\"",
                ),
                "vip[0].quic",
                12,
                "xdp tier only",
            ),
            (
                GOOD.replace("  port = 8080\n", "  port = 8080\n  server_id = \"01\"\n"),
                "vip[0].dip[0].server_id",
                15,
                "add [vip.quic]",
            ),
        ];
        for (src, field, line, what) in cases {
            let e = err_of(&src);
            assert_eq!((e.field.as_str(), e.line), (field, Some(line)), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
    }
}
