//! The whole file: reading it, parsing it with located errors, and the
//! order in which its sections are checked.

use std::path::Path;

use serde::Deserialize;

use crate::api::{ApiCfg, MetricsCfg};
use crate::bgp::BgpCfg;
use crate::cluster::ClusterCfg;
use crate::controller::ControllerCfg;
use crate::dataplane::Dataplane;
use crate::error::{key_at, line_of, Checker, ConfigError, ConfigWarning, Origin};
use crate::service::Vip;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub dataplane: Dataplane,
    /// The load-aware controller; absent = the configured static weights.
    pub controller: Option<ControllerCfg>,
    /// The Prometheus endpoint; absent = none.
    pub metrics: Option<MetricsCfg>,
    /// The management API; absent = on 127.0.0.1:9190 without a token.
    #[serde(default)]
    pub api: ApiCfg,
    /// This node's cluster (shared tables, connection sync); absent = a
    /// single node.
    pub cluster: Option<ClusterCfg>,
    /// The VIPs announced to routers by BGP; absent = not announced (the
    /// routers are told of this node some other way).
    pub bgp: Option<BgpCfg>,
    #[serde(default, rename = "vip")]
    pub vips: Vec<Vip>,
    /// What is legal but odd (say a VIP with no DIPs), found at load; the
    /// caller shows them (`weir check`, `weir serve`'s log).
    #[serde(skip)]
    pub warnings: Vec<ConfigWarning>,
    /// The file's name and where its keys are.
    #[serde(skip)]
    pub(crate) origin: Origin,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: None,
            field: "(file)".into(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(&path.display().to_string(), &src)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(file: &str, src: &str) -> Result<Config, ConfigError> {
        let ck = Checker {
            file: file.to_string(),
            src,
        };
        if is_kv_config(src) {
            return Err(ck.err(
                None,
                "(file)",
                format!(
                    "this looks like a `weir kv` configuration (a [pool] section, no \
                     [dataplane]), not one for `weir serve`: check it with `weir kv --config \
                     {file} --check` and run it with `weir kv --config {file}`"
                ),
            ));
        }
        let mut cfg: Config = toml::from_str(src).map_err(|e| {
            let msg = e.message().trim().to_string();
            let field = e
                .span()
                .map_or("(syntax)".into(), |s| key_at(src, line_of(src, s.start)));
            ck.err(e.span(), field, msg)
        })?;
        cfg.warnings = cfg.validate(&ck)?;
        cfg.origin = Origin::of(file, src);
        Ok(cfg)
    }

    /// Refuses what can never work; returns warnings for what is legal but odd.
    fn validate(&self, ck: &Checker<'_>) -> Result<Vec<ConfigWarning>, ConfigError> {
        let mut warnings = Vec::new();
        self.validate_dataplane(ck, &mut warnings)?;
        let total_dips = self.validate_vips(ck, &mut warnings)?;
        self.validate_nat_endpoints(ck)?;
        self.validate_encap(ck, &mut warnings)?;
        self.validate_health(ck)?;
        self.validate_quic(ck)?;
        self.validate_controller(ck)?;
        warnings.extend(self.api.validate(ck)?);
        self.validate_cluster(ck, &mut warnings)?;
        self.validate_bgp(ck, &mut warnings)?;
        let dp = &self.dataplane;
        if total_dips > dp.max_dips as usize {
            return Err(ck.err(
                None,
                "vip.dip",
                format!(
                    "{total_dips} DIPs in all but dataplane.max_dips is {}; raise max_dips",
                    dp.max_dips
                ),
            ));
        }
        Ok(warnings)
    }
}

/// A file with `weir kv`'s [pool] table and without `[dataplane]`.
fn is_kv_config(src: &str) -> bool {
    toml::from_str::<toml::Table>(src)
        .is_ok_and(|t| t.contains_key("pool") && !t.contains_key("dataplane"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::Verdict;
    use crate::test_files::*;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = Config::parse("t.toml", GOOD).unwrap();
        assert_eq!(c.dataplane.conn_table_size, 1 << 20);
        assert_eq!(c.vips[0].dips.len(), 2);
        assert_eq!(*c.vips[0].dips[0].weight.get_ref(), 1);
        assert_eq!(c.dataplane.not_vip, Verdict::Pass);
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let e = err_of(&GOOD.replace("weight = 2", "weight = 70000"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(18), "vip[0].dip[1].weight"),
            "{e}"
        );
        let e = err_of(&GOOD.replace("\"10.1.0.2\"", "\"10.1.0\""));
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(17), "vip.dip.address"),
            "{e}"
        );
        let e = err_of(&GOOD.replace("mode = \"nat\"", "mode = \"tunnel\""));
        assert_eq!((e.line, e.field.as_str()), (Some(10), "vip.mode"), "{e}");
        assert!(e.to_string().starts_with("t.toml:10:"), "{e}");
    }

    #[test]
    fn semantic_mistakes_are_refused() {
        let dsr_port = GOOD.replace("mode = \"nat\"", "mode = \"dsr\"");
        assert!(err_of(&dsr_port).message.contains("dsr"));
        let mixed = GOOD.replace("\"10.1.0.2\"", "\"2001:db8::2\"");
        assert!(err_of(&mixed).message.contains("family"));
        let dup = GOOD.replace("\"10.1.0.2\"", "\"10.1.0.1\"\n  port = 8080");
        assert!(err_of(&dup).message.contains("duplicate"));
        let unknown = GOOD.replace("weight = 2", "wieght = 2");
        assert!(err_of(&unknown).message.contains("wieght"));
        let no_if = GOOD.replace("[\"veth0\"]", "[]");
        assert_eq!(err_of(&no_if).field, "dataplane.interfaces");
        let bad_mac = GOOD.replace("weight = 2", "mac = \"zz\"");
        assert_eq!(err_of(&bad_mac).field, "vip[0].dip[1].mac");
    }

    #[test]
    fn legal_but_odd_files_load_with_warnings() {
        let warned = |src: &str| Config::parse("t.toml", src).unwrap().warnings;
        assert!(warned(GOOD).is_empty());
        // No DIPs (staged, or every backend removed): it loads, and says so.
        let no_dips = &GOOD[..GOOD.find("  [[vip.dip]]").unwrap()];
        let w = warned(no_dips);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].to_string()
                .starts_with("t.toml:6: vip[0].dip: no DIPs: new connections"),
            "{}",
            w[0]
        );
        let drained = GOOD
            .replace("port = 8080", "port = 8080\n  weight = 0")
            .replace("weight = 2", "weight = 0");
        let w = warned(&drained);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].field.as_str(), w[0].line), ("vip[0].dip", Some(6)));
        assert!(w[0].message.contains("weight 0"), "{}", w[0]);
        // A DIP at another VIP's address.
        let chained = format!(
            "{GOOD}\n[[vip]]\nname = \"api\"\naddress = \"10.1.0.2\"\nport = 443\nprotocol = \"tcp\"\nmode = \"nat\"\n\n  [[vip.dip]]\n  address = \"10.1.0.9\"\n"
        );
        let w = warned(&chained);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (w[0].field.as_str(), w[0].line),
            ("vip[0].dip[1].address", Some(17))
        );
        assert!(w[0].message.contains("VIP `api`"), "{}", w[0]);
    }

    #[test]
    fn a_weir_kv_file_is_named_with_the_commands_for_it() {
        let src = include_str!("../../../examples/kv.toml");
        let e = Config::parse("examples/kv.toml", src).unwrap_err();
        assert_eq!((e.field.as_str(), e.line), ("(file)", None), "{e}");
        assert!(
            e.message.contains("`weir kv` configuration")
                && e.message
                    .contains("weir kv --config examples/kv.toml --check")
                && e.message
                    .contains("run it with `weir kv --config examples/kv.toml`"),
            "{e}"
        );
        // A serve file with a stray [pool] is still checked as one.
        let e = err_of(&format!("{GOOD}\n[pool]\nname = \"x\"\n"));
        assert!(e.message.contains("unknown field `pool`"), "{e}");
    }

    #[test]
    fn the_shipped_example_is_valid() {
        let src = include_str!("../../../examples/weir.toml");
        Config::parse("examples/weir.toml", src).unwrap();
    }
}
