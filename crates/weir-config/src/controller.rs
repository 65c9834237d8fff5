//! `[controller]`: the load-aware controller, its policy and its
//! telemetry.

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Checker, ConfigError};
use crate::load::Config;
use crate::service::Mode;

/// `[controller] policy`: how weights are computed from the estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// The configured weights (health checks still apply).
    Static,
    /// Every eligible DIP weight 1 (AWFD with m = 0).
    Ecmp,
    /// Only the DIP(s) with the largest available capacity (AWFD with m = 1).
    Lcf,
    /// Weights proportional to available capacity, quantized to the data
    /// plane's 16 classes (AWFD with m = 16).
    Weighted,
    /// AWFD with maximum weight `m`.
    Awfd,
}

/// `[controller] telemetry`: where load samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TelemetryKind {
    /// Poll each DIP's `weir agent` (`[[vip.dip]] agent`).
    Agent,
    /// The data plane measures request-to-first-reply delays (nat VIPs only).
    Passive,
}

/// `[controller] on_agent_silent`: a DIP whose agent misses `silent_after`
/// polls in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSilent {
    /// Keep the last estimate; once silent, weigh it like an average DIP.
    Keep,
    /// Once silent, no new connections (weight 0) until it answers again.
    Drain,
}

fn policy_awfd() -> PolicyName {
    PolicyName::Awfd
}
fn m_default() -> Spanned<u32> {
    Spanned::new(0..0, 4)
}
fn interval_default() -> Spanned<u64> {
    Spanned::new(0..0, 100)
}
fn telemetry_agent() -> TelemetryKind {
    TelemetryKind::Agent
}
fn alpha_default() -> Spanned<f64> {
    Spanned::new(0..0, 0.3)
}
fn agent_timeout_default() -> Spanned<u64> {
    Spanned::new(0..0, 50)
}
fn keep() -> OnSilent {
    OnSilent::Keep
}
fn silent_after_default() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}

/// `[controller]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerCfg {
    #[serde(default = "policy_awfd")]
    pub policy: PolicyName,
    /// AWFD's maximum weight (1..=16); used by `policy = "awfd"`.
    #[serde(default = "m_default")]
    pub m: Spanned<u32>,
    #[serde(default = "interval_default")]
    pub update_interval_ms: Spanned<u64>,
    #[serde(default = "telemetry_agent")]
    pub telemetry: TelemetryKind,
    #[serde(default = "alpha_default")]
    pub ewma_alpha: Spanned<f64>,
    #[serde(default = "agent_timeout_default")]
    pub agent_timeout_ms: Spanned<u64>,
    #[serde(default = "keep")]
    pub on_agent_silent: OnSilent,
    /// Consecutive failed polls after which an agent counts as silent.
    #[serde(default = "silent_after_default")]
    pub silent_after: Spanned<u32>,
}

impl Config {
    /// `[controller]` and what its telemetry needs of the VIPs.
    pub(crate) fn validate_controller(&self, ck: &Checker<'_>) -> Result<(), ConfigError> {
        let Some(c) = &self.controller else {
            return Ok(());
        };
        let m = *c.m.get_ref();
        if !(1..=weir_abi::WEIR_MAX_CLASSES).contains(&m) {
            return Err(ck.err(
                Some(c.m.span()),
                "controller.m",
                format!(
                    "m must be 1..={} (the data plane's priority classes)",
                    weir_abi::WEIR_MAX_CLASSES
                ),
            ));
        }
        if !(1..=60_000).contains(c.update_interval_ms.get_ref()) {
            return Err(ck.err(
                Some(c.update_interval_ms.span()),
                "controller.update_interval_ms",
                "must be 1..=60000 ms",
            ));
        }
        let a = *c.ewma_alpha.get_ref();
        if !(a > 0.0 && a <= 1.0) {
            return Err(ck.err(
                Some(c.ewma_alpha.span()),
                "controller.ewma_alpha",
                "must be in (0, 1]: the weight of a new sample",
            ));
        }
        if !(1..=10_000).contains(c.agent_timeout_ms.get_ref()) {
            return Err(ck.err(
                Some(c.agent_timeout_ms.span()),
                "controller.agent_timeout_ms",
                "must be 1..=10000 ms",
            ));
        }
        if !(1..=1000).contains(c.silent_after.get_ref()) {
            return Err(ck.err(
                Some(c.silent_after.span()),
                "controller.silent_after",
                "must be 1..=1000 polls",
            ));
        }
        let needs_samples = c.policy != PolicyName::Static;
        for (i, vip) in self.vips.iter().enumerate() {
            match c.telemetry {
                TelemetryKind::Passive if needs_samples && vip.mode != Mode::Nat => {
                    return Err(ck.err(
                        Some(vip.name.span()),
                        format!("vip[{i}].mode"),
                        "telemetry = \"passive\" needs mode = \"nat\" (in dsr the replies bypass weir); use telemetry = \"agent\"",
                    ));
                }
                TelemetryKind::Agent if needs_samples => {
                    for (j, d) in vip.dips.iter().enumerate() {
                        if d.agent.is_none() {
                            return Err(ck.err(
                                Some(d.address.span()),
                                format!("vip[{i}].dip[{j}].agent"),
                                "telemetry = \"agent\" needs the address of each DIP's `weir agent`, e.g. agent = \"10.0.0.2:9300\"",
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// True when the controller thread has work: a `[controller]` section,
    /// any health check, or a cluster (whose leader publishes every table).
    pub fn wants_controller(&self) -> bool {
        self.controller.is_some()
            || self.vips.iter().any(|v| v.health.is_some())
            || self.cluster.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::HealthKind;
    use crate::test_files::*;

    const CONTROLLED: &str = r#"
[dataplane]
interfaces = ["veth0"]

[controller]
policy = "awfd"
m = 4
update_interval_ms = 100
telemetry = "agent"
ewma_alpha = 0.3
agent_timeout_ms = 50
on_agent_silent = "keep"

[metrics]
listen = "127.0.0.1:9100"

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "nat"

  [vip.health]
  kind = "http"
  path = "/"
  expect_status = 200
  interval_ms = 500
  timeout_ms = 300
  rise = 2
  fall = 3

  [[vip.dip]]
  address = "10.1.0.1"
  agent = "10.1.0.1:9300"
"#;

    #[test]
    fn the_controller_format_parses() {
        let c = Config::parse("t.toml", CONTROLLED).unwrap();
        let ctl = c.controller.as_ref().unwrap();
        assert_eq!(ctl.policy, PolicyName::Awfd);
        assert_eq!(*ctl.m.get_ref(), 4);
        assert_eq!(ctl.telemetry, TelemetryKind::Agent);
        assert_eq!(ctl.on_agent_silent, OnSilent::Keep);
        assert_eq!(*ctl.silent_after.get_ref(), 3);
        let h = c.vips[0].health.as_ref().unwrap();
        assert_eq!(
            (h.kind, h.path(), *h.fall.get_ref()),
            (HealthKind::Http, "/", 3)
        );
        assert_eq!(
            c.vips[0].dips[0].agent.as_ref().unwrap().get_ref().port(),
            9300
        );
        assert!(c.wants_controller());
        // Defaults: an empty [controller] is AWFD(4) every 100 ms.
        let minimal = CONTROLLED
            .replace("policy = \"awfd\"\n", "")
            .replace("m = 4\n", "")
            .replace("update_interval_ms = 100\n", "")
            .replace("[metrics]\nlisten = \"127.0.0.1:9100\"", "[metrics]");
        let c = Config::parse("t.toml", &minimal).unwrap();
        let ctl = c.controller.unwrap();
        assert_eq!((ctl.policy, *ctl.m.get_ref()), (PolicyName::Awfd, 4));
        assert_eq!(*ctl.update_interval_ms.get_ref(), 100);
        assert_eq!(
            c.metrics.unwrap().listen.get_ref().to_string(),
            "127.0.0.1:9100"
        );
        assert!(!Config::parse("t.toml", GOOD).unwrap().wants_controller());
    }

    #[test]
    fn controller_mistakes_name_the_field() {
        let cases = [
            ("m = 4", "m = 17", "controller.m"),
            ("m = 4", "m = 0", "controller.m"),
            (
                "ewma_alpha = 0.3",
                "ewma_alpha = 1.5",
                "controller.ewma_alpha",
            ),
            (
                "update_interval_ms = 100",
                "update_interval_ms = 0",
                "controller.update_interval_ms",
            ),
            ("  agent = \"10.1.0.1:9300\"\n", "", "vip[0].dip[0].agent"),
            ("kind = \"http\"", "kind = \"tcp\"", "vip[0].health.path"),
            ("fall = 3", "fall = 0", "vip[0].health.fall"),
            (
                "timeout_ms = 300",
                "timeout_ms = 900",
                "vip[0].health.timeout_ms",
            ),
            (
                "expect_status = 200",
                "expect_status = 2000",
                "vip[0].health.expect_status",
            ),
            ("mode = \"nat\"", "mode = \"dsr\"\n", "vip[0].mode"),
        ];
        for (from, to, field) in cases {
            let mut src = CONTROLLED.replace(from, to);
            if field == "vip[0].mode" {
                src = src.replace("telemetry = \"agent\"", "telemetry = \"passive\"");
            }
            let e = err_of(&src);
            assert_eq!(e.field, field, "{from} -> {to}: {e}");
            assert!(e.line.is_some(), "{e}");
        }
        let e = err_of(&CONTROLLED.replace("policy = \"awfd\"", "policy = \"fastest\""));
        assert!(e.message.contains("unknown variant"), "{e}");
        let e = err_of(
            &CONTROLLED.replace("on_agent_silent = \"keep\"", "on_agent_silent = \"panic\""),
        );
        assert!(e.message.contains("keep"), "{e}");
        // Passive telemetry needs no agents.
        let passive = CONTROLLED
            .replace("telemetry = \"agent\"", "telemetry = \"passive\"")
            .replace("  agent = \"10.1.0.1:9300\"\n", "");
        Config::parse("t.toml", &passive).unwrap();
    }
}
