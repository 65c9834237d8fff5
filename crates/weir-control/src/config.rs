//! The TOML configuration of `weir serve`, validated with errors that name
//! the file, the line and the field, and say what to do.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use weir_core::flow::Proto;

/// A configuration error located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}: {}", self.file, l, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Forwarding mode of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Nat,
    Dsr,
}

/// Pass to the kernel or drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Drop,
}

/// What a non-SYN TCP packet that misses the connection table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonSynMiss {
    Dispatch,
    Drop,
}

/// XDP attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpModeCfg {
    Native,
    Generic,
}

fn default_conn_table() -> u32 {
    1 << 20
}
fn default_max_vips() -> u32 {
    256
}
fn default_max_dips() -> u32 {
    4096
}
fn default_pin_dir() -> PathBuf {
    PathBuf::from(weir_dataplane::DEFAULT_PIN_DIR)
}
fn yes() -> bool {
    true
}
fn pass() -> Verdict {
    Verdict::Pass
}
fn drop_() -> Verdict {
    Verdict::Drop
}
fn dispatch() -> NonSynMiss {
    NonSynMiss::Dispatch
}
fn native() -> XdpModeCfg {
    XdpModeCfg::Native
}
fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn seed() -> u32 {
    weir_core::hash::DEFAULT_SEED
}

/// `[dataplane]`: where and how the XDP program runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataplane {
    pub interfaces: Spanned<Vec<String>>,
    #[serde(default = "native")]
    pub xdp_mode: XdpModeCfg,
    #[serde(default = "default_conn_table")]
    pub conn_table_size: u32,
    #[serde(default = "default_max_vips")]
    pub max_vips: u32,
    #[serde(default = "default_max_dips")]
    pub max_dips: u32,
    #[serde(default = "pass")]
    pub not_vip: Verdict,
    #[serde(default = "pass")]
    pub icmp: Verdict,
    #[serde(default = "pass")]
    pub fragments: Verdict,
    #[serde(default = "drop_")]
    pub malformed: Verdict,
    #[serde(default = "dispatch")]
    pub tcp_nonsyn_miss: NonSynMiss,
    #[serde(default = "yes")]
    pub fib_lookup: bool,
    #[serde(default = "default_pin_dir")]
    pub pin_dir: PathBuf,
    #[serde(default = "seed")]
    pub hash_seed: u32,
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
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub dataplane: Dataplane,
    #[serde(default, rename = "vip")]
    pub vips: Vec<Vip>,
}

/// 1-based line of a byte offset.
fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The dotted name of the key on `line` (1-based), with its table header:
/// what a parse error is about when the parser itself does not say.
fn key_at(src: &str, line: usize) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let Some(text) = lines.get(line.saturating_sub(1)) else {
        return "(syntax)".into();
    };
    let key = text.split('=').next().unwrap_or("").trim();
    let table = lines[..line.saturating_sub(1)]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    match (table, key.is_empty() || key.starts_with('[')) {
        (_, true) => "(syntax)".into(),
        (Some(t), false) => format!("{t}.{key}"),
        (None, false) => key.to_string(),
    }
}

struct Checker<'a> {
    file: String,
    src: &'a str,
}

impl Checker<'_> {
    fn err(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: span
                .filter(|s| s.end > 0)
                .map(|s| line_of(self.src, s.start)),
            field: field.into(),
            message: msg.into(),
        }
    }
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
        let cfg: Config = toml::from_str(src).map_err(|e| {
            let msg = e.message().trim().to_string();
            let field = e
                .span()
                .map_or("(syntax)".into(), |s| key_at(src, line_of(src, s.start)));
            ck.err(e.span(), field, msg)
        })?;
        cfg.validate(&ck)?;
        Ok(cfg)
    }

    fn validate(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        if dp.interfaces.get_ref().is_empty() {
            return Err(ck.err(
                Some(dp.interfaces.span()),
                "dataplane.interfaces",
                "list at least one interface to attach to, e.g. [\"eth0\"]",
            ));
        }
        for (field, v, min) in [
            ("dataplane.conn_table_size", dp.conn_table_size, 1),
            ("dataplane.max_vips", dp.max_vips, 1),
            ("dataplane.max_dips", dp.max_dips, 1),
        ] {
            if v < min {
                return Err(ck.err(None, field, "must be at least 1"));
            }
        }
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
            let mut seen = HashSet::new();
            let mut distinct = HashSet::new();
            for (j, dip) in vip.dips.iter().enumerate() {
                let at = |f: &str| format!("vip[{i}].dip[{j}].{f}");
                let (a, va) = (dip.address.get_ref(), vip.address.get_ref());
                if a.is_ipv4() != va.is_ipv4() {
                    return Err(ck.err(
                        Some(dip.address.span()),
                        at("address"),
                        "DIP and VIP must be of the same address family (IPv4 or IPv6)",
                    ));
                }
                if let (Mode::Dsr, Some(p)) = (vip.mode, &dip.port) {
                    return Err(ck.err(
                        Some(p.span()),
                        at("port"),
                        "dsr mode does not rewrite ports: remove `port` or use mode = \"nat\"",
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
                    if let Err(e) = weir_dataplane::iface::parse_mac(mac.get_ref()) {
                        return Err(ck.err(Some(mac.span()), at("mac"), e.to_string()));
                    }
                }
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[dataplane]
interfaces = ["veth0"]

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "nat"

  [[vip.dip]]
  address = "10.1.0.1"
  port = 8080

  [[vip.dip]]
  address = "10.1.0.2"
  weight = 2
"#;

    fn err_of(src: &str) -> ConfigError {
        Config::parse("t.toml", src).unwrap_err()
    }

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
    fn the_shipped_example_is_valid() {
        let src = include_str!("../../../examples/weir.toml");
        Config::parse("examples/weir.toml", src).unwrap();
    }
}
